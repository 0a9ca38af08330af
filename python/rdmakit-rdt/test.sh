#!/usr/bin/env bash
# Builds the rdmakit-rdt wheel with maturin and runs the Python tests against the installed wheel:
# the native layer between two processes (tests/test_native.py) and two or more Ray actors on a
# local Ray instance (tests/test_ray.py). Called from the Makefile's `test` target; runs anywhere
# (no GPU, no RDMA device: TCP loopback, host memory).
#
#   python/rdmakit-rdt/test.sh            # reuse target/py/venv if it exists
#   RDMAKIT_RDT_CLEAN=1 python/rdmakit-rdt/test.sh   # fresh venv
#
# Environment: PYTHON (interpreter for the venv, default python3, >= 3.10), RAY_VERSION (default: the pin that
# ./ray-version reads from pyproject.toml),
# TORCH_SPEC (torch==2.11.*, or none).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/py/venv"
wheels="$root/target/wheels"
python="${PYTHON:-python3}"
ray_version="$("$here/ray-version")"

if [[ "${RDMAKIT_RDT_CLEAN:-0}" == 1 ]]; then
  rm -rf "$venv"
fi
if [[ ! -x "$venv/bin/python" ]]; then
  echo "== creating $venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
fi
torch_spec="${TORCH_SPEC:-torch==2.11.*}"
echo "== installing test dependencies (maturin, numpy, pytest, ray==$ray_version, $torch_spec)"
"$venv/bin/pip" install -q "maturin>=1.7,<2" numpy pytest "ray==$ray_version"
# Torch for the torch tests (test_ray_torch.py, the torch cases of test_native.py). PyPI's Linux
# wheel is the CUDA build (~3.5 GB with its nvidia-* libraries, ~2 min); it imports and runs CPU
# tensors on a machine without a GPU. TORCH_SPEC=none leaves it out (those tests then skip).
if [[ "$torch_spec" != none ]]; then
  # A failed install (no room for the GBs, the index unreachable) is said loudly; the torch tests are
  # then reported as skipped by pytest (-rs below), not silently passed.
  if ! "$venv/bin/pip" install -q "$torch_spec"; then
    echo "== WARNING: installing $torch_spec failed; the torch tests will be reported as SKIPPED"
  fi
fi

echo "== clippy on the PyO3 layer (the workspace's clippy builds the crate without it)"
(cd "$root" && PYO3_PYTHON="$venv/bin/python" cargo clippy -q -p gpu-stage-py --features python --all-targets -- -D warnings)

echo "== building the wheel"
rm -f "$wheels"/rdmakit_rdt-*.whl
(cd "$here" && "$venv/bin/maturin" build --release -o "$wheels" -i "$venv/bin/python")
wheel="$(ls "$wheels"/rdmakit_rdt-*.whl)"
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"
echo "== wheel: $wheel ($(du -h "$wheel" | cut -f1))"

echo "== pytest"
# From tests/: neither pytest nor Ray's workers may import the source tree (it has no _native).
cd "$here/tests"
exec "$venv/bin/pytest" -q -rs -p no:cacheprovider .
