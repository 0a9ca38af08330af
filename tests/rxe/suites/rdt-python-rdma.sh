#!/usr/bin/env bash
# rdmakit-rdt over RDMA (runs INSIDE the soft-RoCE VM, started by tests/rxe/run.sh): the Python package's
# native send/recv (rdmakit_rdt.Listener / SendChannel / RecvChannel, the layer the Ray transport
# RDMAKIT uses) between two processes with RDMAKIT_TRANSPORT=rdma over rxe0, from the wheel built with
# the `rdma` feature. rdt_python_rdma.py runs the cases: edge sizes (0 B, 1 B, chunk - 1, chunk, chunk + 1,
# 64 MiB), several arrays and dtypes per object, every byte compared; rxe0's hw_counters before/after
# (packets >= bytes / 4096 each way) and a TCP A/B that must leave them still; a sender SIGKILLed
# mid-stream (the receiver raises within RDMAKIT_TIMEOUT_S); an abort from another thread; a different
# object refused before any byte lands; receiver pull (rdmakit_rdt.Server / RecvChannel.connect + pull,
# the direction Ray's one-sided transport uses) of the same objects with the counters, and a pull with
# another token refused. JSON: $RDMAKIT_RXE_OUT/rdt-python-rdma.json.
#
# Ray itself runs over rxe in rdt-ray-rdma.sh (a `ray start` head, the RDMAKIT transport through real actors);
# this suite tests the native layer under it, edge cases and faults included.
#
# Environment: RDMAKIT_ROOT, RDMAKIT_RXE_OUT, RDMAKIT_RXE_DEVICE (rxe0), RDMAKIT_RXE_GID_INDEX (1),
# RDMAKIT_RXE_IP (10.99.0.1); optional RDT_WHEEL (default: the one wheel in
# $RDMAKIT_ROOT/target/wheels-rdma/, which `make vm-test` builds) and RDT_PYTHON (default: the venv
# python/rdmakit-rdt/test.sh makes, $RDMAKIT_ROOT/target/py/venv/bin/python, which has numpy).
# Exit: 0 every case passed; 1 a case failed; 77 (skip) when the wheel or the interpreter is missing.
set -uo pipefail

ROOT=${RDMAKIT_ROOT:?RDMAKIT_ROOT must be set}
OUT=${RDMAKIT_RXE_OUT:?RDMAKIT_RXE_OUT must be set}
PY=${RDT_PYTHON:-$ROOT/target/py/venv/bin/python}
BUILD_HINT="make vm-test builds it (or: cd python/rdmakit-rdt && maturin build --release --features python,rdma --compatibility linux -o ../../target/wheels-rdma)"

# shellcheck source=../rdt-wheel.sh
. "$ROOT/tests/rxe/rdt-wheel.sh"
rdt_wheel rdt-python-rdma "$BUILD_HINT"
if [ ! -x "$PY" ] || ! "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("numpy") is None)' 2>/dev/null; then
  echo "SKIP rdt-python-rdma: $PY with numpy not found; python/rdmakit-rdt/test.sh makes that venv"
  exit 77
fi

# The wheel's own files, unpacked into a throwaway folder that goes first on sys.path (what pip install
# --target would lay out, without pip's start-up cost under TCG). The venv's own rdmakit_rdt (the TCP-only
# test wheel) comes later on the path and is not used: the program checks has_rdma() and prints the module.
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
"$PY" -m zipfile -e "$WHEEL" "$site" || { echo "FAIL rdt-python-rdma: cannot unpack $WHEEL"; exit 1; }
newest_src=$(find "$ROOT/crates/gpu-stage-py/src" "$ROOT/crates/gpu-stage/src" "$ROOT/python/rdmakit-rdt/rdmakit_rdt" \
  -newer "$WHEEL" -type f 2>/dev/null | head -n 3)
echo "rdt-python-rdma: wheel $WHEEL ($(du -h "$WHEEL" | cut -f1), built $(date -u -r "$WHEEL" '+%F %T') UTC), python $("$PY" -V 2>&1)"
[ -z "$newest_src" ] || echo "rdt-python-rdma: WARNING: sources newer than the wheel (rebuild with make vm-test): $(echo "$newest_src" | tr '\n' ' ')"

mkdir -p "$OUT"
start=$(date +%s.%N)
PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} "$PY" "$ROOT/tests/rxe/suites/rdt_python_rdma.py" check "$OUT/rdt-python-rdma.json"
rc=$?
echo "rdt-python-rdma: $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')s, exit $rc; JSON in $OUT/rdt-python-rdma.json"
exit "$rc"
