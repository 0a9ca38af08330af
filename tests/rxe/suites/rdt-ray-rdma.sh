#!/usr/bin/env bash
# Ray over RDMA (runs INSIDE the soft-RoCE VM, started by tests/rxe/run.sh): a real Ray 2.60 head (`ray start`)
# on the VM's rxe address, a producer and two consumer actors, and rdmakit-rdt's one-sided RDMAKIT_NUMPY
# transport pulling every object over rxe0 (RDMAKIT_TRANSPORT=rdma in the environment all Ray processes
# inherit). rdt_ray_rdma.py runs the cases (an actor's pull, a fan-out to both consumers at once, ray.get in the
# driver), compares every byte and holds rxe0's packet counters against the bytes moved.
# JSON: $RDMAKIT_RXE_OUT/rdt-ray-rdma.json.
#
# Ray under TCG (issue 27). What stopped it before, found with the raylet's logs and gdb in the VM (2026-12-07):
# - RAY_raylet_client_connect_timeout_milliseconds is the SLEEP between the raylet's attempts to connect to its
#   plasma store socket, not a deadline: raising it (as the earlier tries did) made the raylet sleep 10 min after
#   its first try, before the store listened; it never registered, and the driver's node-info requests failed.
#   The attempts are raised instead (RAY_raylet_client_num_connect_attempts).
# - RAY_raylet_start_wait_time_s bounds the C++ wait for the node to register (GlobalStateAccessor::GetNode), which
#   runs inside the Python loop whose own 30 s is a literal in node.py: raising it is enough.
# - The raylet waits a fixed 30 s (not a RAY_* setting in 2.60) for the port files of its two agents; under TCG
#   each needs 60-90 s to import. The runtime env agent's port is given on the command line
#   (--runtime-env-agent-port), so that wait is skipped and the raylet connects when the agent listens. The
#   dashboard agent's three files (metrics_agent_port, metrics_export_port, dashboard_agent_listen_port) are
#   written with -1 by start_port_files below as soon as the raylet exists: -1 is exactly what the agent writes
#   in this install (Ray without its [default] extras: no aiohttp, no gRPC server, no HTTP server), and the agent
#   overwrites them with the same value when it comes up.
# - The autoscaler's monitor is not started (--no-monitor): one Python process less importing Ray on 2 vCPUs.
#
# Environment: RDMAKIT_ROOT, RDMAKIT_RXE_OUT, RDMAKIT_RXE_DEVICE (rxe0), RDMAKIT_RXE_GID_INDEX (1),
# RDMAKIT_RXE_IP (10.99.0.1); optional RDT_WHEEL (default: the one wheel in $RDMAKIT_ROOT/target/wheels-rdma/)
# and RDT_RAY_PYTHON (default $RDMAKIT_ROOT/target/py/venv-ray/bin/python: numpy and Ray without torch, which
# `make vm-test` makes; torch's import alone takes ~100 s under TCG).
# Exit: 0 every case passed; 1 a case failed or Ray did not start; 77 (skip) when the wheel or the venv is missing.
set -uo pipefail

ROOT=${RDMAKIT_ROOT:?RDMAKIT_ROOT must be set}
OUT=${RDMAKIT_RXE_OUT:?RDMAKIT_RXE_OUT must be set}
PY=${RDT_RAY_PYTHON:-$ROOT/target/py/venv-ray/bin/python}
IP=${RDMAKIT_RXE_IP:-10.99.0.1}
DEV=${RDMAKIT_RXE_DEVICE:-rxe0}
HINT="make vm-test builds both"

# shellcheck source=../rdt-wheel.sh
. "$ROOT/tests/rxe/rdt-wheel.sh"
rdt_wheel rdt-ray-rdma "$HINT"
if [ ! -x "$PY" ] || ! "$PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("ray") and u.find_spec("numpy")))' 2>/dev/null; then
  echo "SKIP rdt-ray-rdma: $PY with ray and numpy not found; $HINT"
  exit 77
fi
RAY=$(dirname "$PY")/ray

# The wheel's files first on sys.path, then the package's test objects (peer.py, which rdt_ray_rdma.py's actors use),
# for this driver and (through the environment `ray start` passes on) for every Ray worker.
site=$(mktemp -d)
temp=/tmp/rdmakit-ray
watcher=
cleanup() {
  "$RAY" stop --force >/dev/null 2>&1
  [ -z "$watcher" ] || kill "$watcher" 2>/dev/null
  rm -rf "$site"
}
trap cleanup EXIT
"$PY" -m zipfile -e "$WHEEL" "$site" || { echo "FAIL rdt-ray-rdma: cannot unpack $WHEEL"; exit 1; }
echo "rdt-ray-rdma: wheel $WHEEL, $("$PY" -c 'import importlib.metadata as m, sys; print("ray", m.version("ray"), "python", sys.version.split()[0])')"

export PYTHONPATH=$site:$ROOT/python/rdmakit-rdt/tests${PYTHONPATH:+:$PYTHONPATH}
export RAY_USAGE_STATS_ENABLED=0
# Ray's token authentication stays on (2.60's default); the token goes to every process through the environment
# (left to itself, `ray start` generated one that the driver in this VM then did not find: InvalidAuthToken).
RAY_AUTH_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN
# rdmakit-rdt's transport for every Ray process: RDMA on the VM's rxe device, host memory, 1 MiB chunks.
export RDMAKIT_TRANSPORT=rdma RDMAKIT_RDMA_DEVICES=$DEV RDMAKIT_GID_INDEX=${RDMAKIT_RXE_GID_INDEX:-1} \
  RDMAKIT_BACKEND=host RDMAKIT_CHUNK=1MiB RDMAKIT_TIMEOUT_S=120
# Ray's start-up deadlines that TCG misses (ray_config_def.h, read from RAY_<name> by every Ray process).
export RAY_raylet_start_wait_time_s=600 RAY_raylet_client_num_connect_attempts=1200 \
  RAY_worker_register_timeout_seconds=600 RAY_agent_register_timeout_ms=600000 \
  RAY_gcs_rpc_server_connect_timeout_s=300 RAY_gcs_rpc_server_reconnect_timeout_s=300 \
  RAY_gcs_server_request_timeout_seconds=300 RAY_py_gcs_connect_timeout_s=300 \
  RAY_health_check_timeout_ms=300000 RAY_health_check_period_ms=30000 RAY_health_check_failure_threshold=20

# start_port_files: see the header. Waits for the raylet, then writes each file that is not there yet (atomically:
# the raylet reads a file as soon as it exists).
start_port_files() {
  local pid="" node sess n f
  for _ in $(seq 1 3000); do
    pid=$(pgrep -x raylet | head -n 1)
    [ -n "$pid" ] && break
    sleep 0.2
  done
  [ -n "$pid" ] || return 0
  node=$(tr '\0' '\n' </proc/"$pid"/cmdline | sed -n 's/^--node_id=//p')
  sess=$(tr '\0' '\n' </proc/"$pid"/cmdline | sed -n 's/^--session_dir=//p')
  for n in metrics_agent_port metrics_export_port dashboard_agent_listen_port; do
    f=$sess/${n}_$node
    [ -e "$f" ] || { printf -- -1 >"$f.rdmakit" && mv "$f.rdmakit" "$f"; }
  done
  echo "rdt-ray-rdma: the dashboard agent's port files written with -1 for raylet $pid"
}
start_port_files &
watcher=$!

mkdir -p "$OUT"
start=$(date +%s)
echo "rdt-ray-rdma: ray start --head on $IP (TCG: minutes)"
if ! timeout 600 "$RAY" start --head --node-ip-address="$IP" --num-cpus=2 --include-dashboard=false \
  --temp-dir="$temp" --runtime-env-agent-port=52368 --object-store-memory=268435456 \
  --disable-usage-stats --no-monitor; then
  echo "FAIL rdt-ray-rdma: ray start did not finish after $(($(date +%s) - start)) s; the raylet's last lines:"
  tail -n 30 "$temp"/session_latest/logs/raylet.out 2>/dev/null | cut -c1-400
  exit 1
fi
echo "rdt-ray-rdma: Ray head up in $(($(date +%s) - start)) s"
timeout 900 "$PY" "$ROOT/tests/rxe/suites/rdt_ray_rdma.py" "$IP:6379" "$OUT/rdt-ray-rdma.json"
rc=$?
[ "$rc" -eq 0 ] || tail -n 30 "$temp"/session_latest/logs/raylet.out 2>/dev/null | cut -c1-400
echo "rdt-ray-rdma: $(($(date +%s) - start)) s in all, exit $rc; JSON in $OUT/rdt-ray-rdma.json"
exit "$rc"
