#!/usr/bin/env bash
# Functional suite (runs INSIDE the soft-RoCE VM, started by tests/rxe/run.sh): the user-facing command
# `rdmakit bench stage --transport rdma` on the rxe device, host-memory backend standing in for the GPUs.
#   1. --role both (both ends in one process over loopback): every iteration verified.
#   2. --role server and --role client as two processes: both report verified results.
#   3. a client naming a device that does not exist: exit 2 with the device named, and the waiting server
#      fails within its --timeout instead of hanging.
# Results go to $RDMAKIT_RXE_OUT/rdmakit-bench-rdma-*.json.
# Environment: RDMAKIT_ROOT, RDMAKIT_RXE_OUT, RDMAKIT_RXE_DEVICE (rxe0), RDMAKIT_RXE_GID_INDEX (1).
# Exit: 0 all passed; 1 a check failed; 77 (skip) when the rdmakit binary has not been built.
set -uo pipefail

ROOT=${RDMAKIT_ROOT:?RDMAKIT_ROOT must be set}
OUT=${RDMAKIT_RXE_OUT:?RDMAKIT_RXE_OUT must be set}
DEV=${RDMAKIT_RXE_DEVICE:-rxe0}
GID=${RDMAKIT_RXE_GID_INDEX:-1}

# The binary next to the rxe_* test executables (they may live in a CARGO_TARGET_DIR), else target/.
find_rdmakit() {
  local list exe
  list=$(dirname "$OUT")/tests.list
  if [ -r "$list" ]; then
    exe=$(cut -f3 "$list" | grep '/debug/deps/' | head -n1)
    [ -n "$exe" ] && [ -x "${exe%%/debug/deps/*}/debug/rdmakit" ] && { echo "${exe%%/debug/deps/*}/debug/rdmakit"; return; }
  fi
  echo "$ROOT/target/debug/rdmakit"
}
RK=$(find_rdmakit)
if [ ! -x "$RK" ]; then
  echo "SKIP rdmakit-bench-rdma: $RK not built; run 'cargo build -p rdmakit' first"
  exit 77
fi
mkdir -p "$OUT"
common=(--transport rdma --device "$DEV" --gid-index "$GID" --backend host --size 8MiB --chunk 1MiB --slots 4 --iters 2 --timeout 60)
fail=0
verified() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r and all(x["verified"] for x in r) else 1)' "$1"; }

echo "== role both"
if timeout 240 "$RK" bench stage "${common[@]}" --json >"$OUT/rdmakit-bench-rdma-both.json" 2>"$OUT/rdmakit-bench-rdma-both.err" &&
  verified "$OUT/rdmakit-bench-rdma-both.json"; then
  echo "PASS role both"
else
  echo "FAIL role both"; cat "$OUT/rdmakit-bench-rdma-both.err"; fail=1
fi

echo "== server and client processes"
timeout 240 "$RK" bench stage "${common[@]}" --role server --listen 127.0.0.1:18530 --json \
  >"$OUT/rdmakit-bench-rdma-server.json" 2>"$OUT/rdmakit-bench-rdma-server.err" &
spid=$!
for _ in $(seq 1 100); do grep -q 'waiting for a client' "$OUT/rdmakit-bench-rdma-server.err" && break; sleep 0.1; done
timeout 240 "$RK" bench stage "${common[@]}" --role client --connect 127.0.0.1:18530 --json \
  >"$OUT/rdmakit-bench-rdma-client.json" 2>"$OUT/rdmakit-bench-rdma-client.err"
crc=$?
wait "$spid"
src=$?
if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ] && verified "$OUT/rdmakit-bench-rdma-client.json" &&
  verified "$OUT/rdmakit-bench-rdma-server.json"; then
  echo "PASS server/client"
else
  echo "FAIL server/client (client $crc, server $src)"
  cat "$OUT/rdmakit-bench-rdma-client.err" "$OUT/rdmakit-bench-rdma-server.err"; fail=1
fi

echo "== client with a missing device"
short=(--transport rdma --gid-index "$GID" --backend host --size 1MiB --chunk 1MiB --iters 1 --timeout 10)
timeout 120 "$RK" bench stage "${short[@]}" --device "$DEV" --role server --listen 127.0.0.1:18531 \
  >/dev/null 2>"$OUT/rdmakit-bench-rdma-orphan-server.err" &
spid=$!
for _ in $(seq 1 100); do grep -q 'waiting for a client' "$OUT/rdmakit-bench-rdma-orphan-server.err" && break; sleep 0.1; done
timeout 60 "$RK" bench stage "${short[@]}" --device nosuch_rxe9 --role client --connect 127.0.0.1:18531 \
  >/dev/null 2>"$OUT/rdmakit-bench-rdma-orphan-client.err"
crc=$?
wait "$spid"
src=$?
if [ "$crc" -eq 2 ] && grep -q nosuch_rxe9 "$OUT/rdmakit-bench-rdma-orphan-client.err" && [ "$src" -ne 0 ] && [ "$src" -ne 124 ]; then
  echo "PASS missing device: client exit 2 naming it, server failed (exit $src) without hanging"
else
  echo "FAIL missing device (client $crc, server $src; 124 = hung until timeout)"
  cat "$OUT/rdmakit-bench-rdma-orphan-client.err" "$OUT/rdmakit-bench-rdma-orphan-server.err"; fail=1
fi
exit $fail
