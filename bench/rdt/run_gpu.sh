#!/usr/bin/env bash
# On the GPU machine (one H200, torch, no Ray, no network), from the repo root, with the carry
# folder made by bench/rdt/prepare_gpu_carry.sh (default .whl/rdt-gpu, which holds this script):
#   bash .whl/rdt-gpu/run_gpu.sh [bench arguments]
# Runs, each step under its own time limit and each writing to $OUT (or bench/results/rdmakit-rdt/):
#   1. the binding's GPU tier (binding-gpu-tests.log),
#   2. the GPU ordering races through Ray (gpu-order.json, gpu-order.log),
#   3. the benchmark (rdt-<gpu>.json, rdt-<gpu>.log; <gpu> h200 or h100 from nvidia-smi). Extra arguments go to it;
#   4. small_pull.py (small-pull-run1.json): a kept 4 KiB object's pull between two processes, apart from the
#      producer's fresh GPU work that the bench's per-object figure includes;
#   5. fanout_native.py (fanout-native.json): 512 MiB pulls without Ray, one pair vs one producer serving three
#      vs three pairs, which locates a fan-out's bound on one GPU (FANOUT_ARGS: more arguments, e.g.
#      `--sweep RDMAKIT_TCP_CONNECTIONS=12,16`; FANOUT_LIMIT: its seconds, default 180);
#   6. (only when RDT_STEPS names mps) with the driver's nvidia-cuda-mps-control: step 5 and the bench's fan_out again
#      under an MPS daemon of this run's own (private pipe and log folders, quit at the end; the GPU's
#      compute mode is not touched), so the processes of one transfer share the GPU without
#      time-slicing between their contexts (fanout-native-mps.json, rdt-<gpu>-mps.json).
# A failing step is recorded in steps.txt and the next one still runs. RDT_STEPS picks steps (a comma list of
# binding,order,bench,small,fanout,mps; default all but mps), so a run can be split over device calls.
set -uo pipefail
carry="${CARRY:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
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
nproc
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
case "$gpu" in *H200*) tag=h200 ;; *H100*) tag=h100 ;; *) tag=gpu ;; esac
steps=",${RDT_STEPS:-binding,order,bench,small,fanout},"
want() { [[ "$steps" == *",$1,"* ]]; }
step() {  # name, seconds, command...
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@"
  local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$out/steps.txt"
}
# logged LOG COMMAND ARGS...: runs COMMAND, its output also in LOG; every value stays one argument
# (no value is spliced into a shell string).
logged() { local log="$1"; shift; "$@" 2>&1 | tee "$log"; }
if want binding && [[ -x "$carry/binding_gpu_tests" ]]; then
  step binding_gpu_tests 120 bash -c "$(declare -f logged); logged \"\$@\"" _ "$out/binding-gpu-tests.log" \
    "$carry/binding_gpu_tests" --ignored --test-threads=1
fi
want order && step gpu_order 180 bash -c "$(declare -f logged); logged \"\$@\"" _ "$out/gpu-order.log" python3 "$carry/gpu_order.py" --out "$out/gpu-order.json"
want bench && step bench "${BENCH_LIMIT:-420}" bash -c "$(declare -f logged); logged \"\$@\"" _ \
  "$out/rdt-$tag.log" python3 "$carry/rdmakit_rdt_bench.py" --out "$out/rdt-$tag.json" --stage-bench "$carry/stage_bench" "$@"
ray stop --force >/dev/null 2>&1 || true
if want small && [[ -f "$carry/small_pull.py" ]]; then
  step small_pull 120 bash -c "$(declare -f logged); logged \"\$@\"" _ "$out/small-pull.log" python3 "$carry/small_pull.py" --out "$out/small-pull-run1.json"
fi
if want fanout && [[ -f "$carry/fanout_native.py" ]]; then
  read -ra fanout_args <<< "${FANOUT_ARGS:-}"  # split on blanks only: no globbing, no shell syntax
  step fanout_native "${FANOUT_LIMIT:-180}" bash -c "$(declare -f logged); logged \"\$@\"" _ \
    "$out/fanout-native.log" python3 "$carry/fanout_native.py" --out "$out/fanout-native.json" "${fanout_args[@]}"
fi
if want mps && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/rdt-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/rdt-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    step fanout_native_mps 180 bash -c "$(declare -f logged); logged \"\$@\"" _ "$out/fanout-native-mps.log" python3 "$carry/fanout_native.py" --out "$out/fanout-native-mps.json"
    step bench_fan_out_mps "${BENCH_MPS_LIMIT:-150}" bash -c "$(declare -f logged); logged \"\$@\"" _ "$out/rdt-$tag-mps.log" python3 "$carry/rdmakit_rdt_bench.py" --out "$out/rdt-$tag-mps.json" --stage-bench "$carry/stage_bench" --workloads fan_out --iters 20 --warmup 1 --sizes 4096
    ray stop --force >/dev/null 2>&1 || true
    echo quit | nvidia-cuda-mps-control
    cp -r "$CUDA_MPS_LOG_DIRECTORY" "$out/mps-log" 2>/dev/null || true
  else
    echo "mps rc=$? (the daemon did not start)" | tee -a "$out/steps.txt"
  fi
elif want mps; then
  echo "mps skipped: no nvidia-cuda-mps-control" | tee -a "$out/steps.txt"
fi
