#!/usr/bin/env bash
# On the GPU machine (one H200, torch, no Ray, no network), from the repo root, with
# .whl/rdt-gpu/ carried (made by bench/rdt/prepare_gpu_carry.sh):
#   bash bench/rdt/run_gpu.sh
# Writes rdt-h200.json (+ stage-bench-tcp.json, log) to $OUT (the device run's folder) or to
# bench/results/rdmakit-rdt/. Extra arguments go to rdmakit_rdt_bench.py (e.g. --iters 10).
set -euo pipefail
carry=.whl/rdt-gpu
out="${OUT:-bench/results/rdmakit-rdt}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/rdt-site "$carry"/*.whl
export PYTHONPATH=/tmp/rdt-site${PYTHONPATH:+:$PYTHONPATH}
# Keep NVLink multicast off (machine rule), also in Ray's workers (they inherit this environment).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
python3 -c 'import torch, ray, rdmakit_rdt; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "ray", ray.__version__, "rdmakit_rdt", rdmakit_rdt.__version__, "cuda", rdmakit_rdt.cuda_available())'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
# The binding's GPU tier first (CUDA buffers by address, driver pointer checks); a failure stops here.
if [[ -x "$carry/binding_gpu_tests" ]]; then
  "$carry/binding_gpu_tests" --ignored --test-threads=1 2>&1 | tee "$out/binding-gpu-tests.log"
fi
python3 bench/rdt/rdmakit_rdt_bench.py --out "$out/rdt-h200.json" \
  --stage-bench "$carry/stage_bench" "$@" 2>&1 | tee "$out/rdt-h200.log"
