#!/usr/bin/env bash
# One GPU-machine session of the gpu-stage benchmarks: GPU-tier tests, peers, our figures,
# sweep, small transfers, report. Every step writes into OUT as it goes; one failing step does not
# stop the rest.
# Usage: [SRC=0 DST=0] bench/gpu-stage/run_gpu.sh BIN_DIR OUT_DIR
#   BIN_DIR holds stage_bench and gpu_tier (the test binary), built with
#   cargo build --release -p gpu-stage --examples; cargo test --release -p gpu-stage --no-run
#   SRC/DST: sending and receiving GPU (default 0 and 1, or 0 and 0 on a one-GPU machine:
#   GPU0 -> host -> GPU0 runs the same pipeline; NCCL's ranks then get distinct NCCL_HOSTIDs, so NCCL
#   takes its socket path between them instead of refusing two ranks on one GPU: see peers.py).
set -u
BIN=${1:?BIN_DIR}
OUT=${2:?OUT_DIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
SRC=${SRC:-0}
if [ "${ngpu:-0}" -gt 1 ]; then DST=${DST:-1}; else DST=${DST:-0}; fi
gpus="--src $SRC --dst $DST"
# NCCL also runs with 1, 4 and 8 sockets (our connection counts).
only=naive,pinned,floor,nccl,nccl-sockets
{
  date -u; uname -r; nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8; nproc
  echo "src GPU $SRC -> dst GPU $DST"
} 2>&1 | tee "$OUT/machine.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== GPU tier tests"
  timeout 150 "$BIN/gpu_tier" --ignored --test-threads=1 2>&1 | tee "$OUT/gpu-tier-tests.log"
fi
echo "== peers (torch)"
timeout ${PEERS_TIMEOUT:-240} python3 "$here/peers.py" --out "$OUT/gpu-stage-peers.json" $gpus --only "$only" ${PEER_ARGS:-}
echo "== ceiling (both copy engines at once, torch)"
timeout 120 python3 "$here/ceiling.py" --out "$OUT/gpu-stage-ceiling.json" $gpus
echo "== gpu-stage"
timeout ${BENCH_TIMEOUT:-260} "$BIN/stage_bench" all --out "$OUT" --peers "$OUT/gpu-stage-peers.json" $gpus ${BENCH_ARGS:-}
echo "== small transfers (ours vs one pinned D2H + one pinned H2D of the same size, same run)"
timeout ${SMALL_TIMEOUT:-180} "$BIN/stage_bench" small --out "$OUT" $gpus --iters ${SMALL_ITERS:-50} --warmup 5 ${SMALL_ARGS:-}
echo "== report"
"$BIN/stage_bench" report --out "$OUT" --peers "$OUT/gpu-stage-peers.json"
