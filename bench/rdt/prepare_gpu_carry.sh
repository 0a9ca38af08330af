#!/usr/bin/env bash
# Fills .whl/rdt-gpu/ (git-ignored; or $CARRY_DIR) with what bench/rdt/run_gpu.sh needs on a GPU
# machine that has torch but no Ray and no network (Python 3.12): the rdmakit-rdt wheel, Ray's
# cp312 wheel (the version python/rdmakit-rdt/ray-version gives) with its Java jar and source maps
# removed (79 MB -> 45 MB, to fit a 64 MiB carry),
# the Ray dependencies that image lacks, a stripped gpu-stage stage_bench and the binding's GPU
# test binary, and the scripts themselves (run_gpu.sh, the bench, tests/gpu_order.py), so the
# carry works from a checkout that does not have them. Run on an x86-64 machine with network
# access, from anywhere in the repo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${CARRY_DIR:-$root/.whl/rdt-gpu}"
venv="$root/target/py/venv"
mkdir -p "$dir"
plat=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ray_version="$("$root/python/rdmakit-rdt/ray-version")"
python3 -m pip download -q "${plat[@]}" -d "$tmp" "ray==$ray_version"
python3 -m pip download -q "${plat[@]}" -d "$dir" jsonschema jsonschema-specifications referencing rpds-py
python3 - "$tmp"/ray-"$ray_version"-*.whl "$dir" <<'PY'
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
dst = os.path.join(out, os.path.basename(src))
drop = lambda n: n.startswith("ray/jars/") or n.endswith(".js.map")  # Java workers, dashboard maps
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zo:
    for info in zi.infolist():
        if drop(info.filename):
            continue
        data = zi.read(info.filename)
        if info.filename.endswith(".dist-info/RECORD"):
            data = ("\n".join(l for l in data.decode().splitlines() if not drop(l.split(",")[0])) + "\n").encode()
        zo.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
PY

# The rdmakit-rdt wheel (abi3: any CPython >= 3.10) and stage_bench.
if [[ ! -x "$venv/bin/maturin" ]]; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q "maturin>=1.7,<2"
fi
rm -f "$dir"/rdmakit_rdt-*.whl
(cd "$root/python/rdmakit-rdt" && "$venv/bin/maturin" build --release -o "$dir" -i "$venv/bin/python")
(cd "$root" && nice cargo build --release -p gpu-stage --example stage_bench)
strip -o "$dir/stage_bench" "$root/target/release/examples/stage_bench"
# The binding's GPU tier (tests/gpu.rs), run by run_gpu.sh before the bench.
test_bin="$(cd "$root" && nice cargo test --release -p gpu-stage-py --test gpu --no-run --message-format=json \
  | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')"
strip -o "$dir/binding_gpu_tests" "$test_bin"
cp "$root/bench/rdt/run_gpu.sh" "$root/bench/rdt/rdmakit_rdt_bench.py" "$root/bench/rdt/small_pull.py" \
   "$root/bench/rdt/fanout_native.py" "$root/python/rdmakit-rdt/tests/gpu_order.py" "$dir/"
du -sh "$dir"
ls -la "$dir"
