#!/usr/bin/env bash
# One GPU-machine session of the gpu-stage benchmarks: GPU-tier tests, peers, our figures,
# sweep, report. Every step writes into OUT as it goes; one failing step does not stop the rest.
# Usage: bench/gpu-stage/run_gpu.sh BIN_DIR OUT_DIR
#   BIN_DIR holds stage_bench and gpu_tier (the test binary), built with
#   cargo build --release -p gpu-stage --examples; cargo test --release -p gpu-stage --no-run
set -u
BIN=${1:?BIN_DIR}
OUT=${2:?OUT_DIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
{
  date -u; uname -r; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8; nproc
} 2>&1 | tee "$OUT/machine.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== GPU tier tests"
  timeout 150 "$BIN/gpu_tier" --ignored --test-threads=1 2>&1 | tee "$OUT/gpu-tier-tests.log"
fi
echo "== peers (torch)"
timeout 150 python3 "$here/peers.py" --out "$OUT/gpu-stage-peers.json" ${PEER_ARGS:-}
echo "== ceiling (both copy engines at once, torch)"
timeout 120 python3 "$here/ceiling.py" --out "$OUT/gpu-stage-ceiling.json"
echo "== gpu-stage"
timeout ${BENCH_TIMEOUT:-260} "$BIN/stage_bench" all --out "$OUT" --peers "$OUT/gpu-stage-peers.json" ${BENCH_ARGS:-}
echo "== report"
"$BIN/stage_bench" report --out "$OUT" --peers "$OUT/gpu-stage-peers.json"
