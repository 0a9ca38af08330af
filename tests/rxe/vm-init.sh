#!/usr/bin/env bash
# Runs INSIDE the soft-RoCE VM (started by tests/rxe/run.sh through virtme-ng).
#
# Usage: vm-init.sh SHARE_DIR
#   SHARE_DIR is shared read-write with the host. run.sh writes SHARE_DIR/config.sh (what to run);
#   this script writes:
#     SHARE_DIR/vm.log    everything it and the tests print (the console can drop lines; this file does not)
#     SHARE_DIR/results   one line per checked unit: "PASS|FAIL|SKIP <passed> <failed> <key> <label>" (lib.sh)
#     SHARE_DIR/out/      RDMAKIT_RXE_OUT, copied back to target/rxe/out/ by run.sh
#     SHARE_DIR/status    "<exit code>", written last: its absence means the VM did not finish
set -uo pipefail

SHARE=${1:?usage: vm-init.sh SHARE_DIR}
exec >"$SHARE/vm.log" 2>&1
trap 'echo "$overall" >"$SHARE/status"' EXIT
overall=1
: >"$SHARE/results"

echo "== rxe VM: kernel $(uname -r), $(nproc) CPUs, guest uptime at init $(cut -d' ' -f1 /proc/uptime)s, started $(date +%s.%N)"
# shellcheck source=/dev/null
. "$SHARE/config.sh"

failures=0
# shellcheck source=tests/rxe/lib.sh
. "$RDMAKIT_ROOT/tests/rxe/lib.sh"

# ---------------------------------------------------------------- device setup
setup() {
  ulimit -l unlimited || return 1
  ip link set lo up || return 1
  modprobe rdma_rxe || return 1
  ip link add "$RXE_NETDEV" type veth peer name "$RXE_PEER_NETDEV" || return 1
  ip addr add "$RXE_IP/24" dev "$RXE_NETDEV" || return 1
  ip addr add "$RXE_PEER_IP/24" dev "$RXE_PEER_NETDEV" || return 1
  ip link set "$RXE_NETDEV" up || return 1
  ip link set "$RXE_PEER_NETDEV" up || return 1
  rdma link add "$RXE_DEVICE" type rxe netdev "$RXE_NETDEV" || return 1
  # The IPv4 GID appears asynchronously after the link is added; wait for it (a few seconds at most).
  local gid=/sys/class/infiniband/$RXE_DEVICE/ports/1/gids/$RXE_GID_INDEX i
  for i in $(seq 1 30); do
    grep -q ffff "$gid" 2>/dev/null && break
    sleep 1
  done
  rdma link show
  echo "GID[$RXE_GID_INDEX] $(cat "$gid")"
  grep -q ffff "$gid" || { echo "no IPv4 GID at index $RXE_GID_INDEX"; return 1; }
}

echo "== setup: rdma_rxe, $RXE_NETDEV $RXE_IP <-> $RXE_PEER_NETDEV $RXE_PEER_IP, $RXE_DEVICE"
if setup; then
  record PASS 1 0 check:setup "setup: $RXE_DEVICE on $RXE_NETDEV ($RXE_IP)"
else
  record FAIL 0 1 check:setup "setup: $RXE_DEVICE on $RXE_NETDEV ($RXE_IP)"
  echo "!! device setup failed: the tests below will fail too"
fi

export RDMAKIT_ROOT RDMAKIT_RXE_OUT="$SHARE/out"
export RDMAKIT_RXE_DEVICE="$RXE_DEVICE" RDMAKIT_RXE_GID_INDEX="$RXE_GID_INDEX" RDMAKIT_RXE_IP="$RXE_IP"
export RDMAKIT_RXE_NETDEV="$RXE_NETDEV" RDMAKIT_RXE_PEER_IP="$RXE_PEER_IP"
mkdir -p "$RDMAKIT_RXE_OUT"
cd "$RDMAKIT_ROOT" || exit 1

# ---------------------------------------------------------------- Rust rxe_* test binaries
while IFS=$'\t' read -r name pkg exe expected; do
  [ -n "$name" ] || continue
  run_test_binary "$pkg/$name" "$exe" "${expected:--1}"
done <"$SHARE/tests.list"

# ---------------------------------------------------------------- suites
# Every *.sh is expected (find-tests.py lists them for tally.py); one that is not executable fails.
for suite in "$RDMAKIT_ROOT"/tests/rxe/suites/*.sh; do
  [ -e "$suite" ] || continue
  key="suite:$(basename "$suite")" label="suite $(basename "$suite")"
  if [ ! -x "$suite" ]; then
    record FAIL 0 1 "$key" "$label (not executable: chmod +x it, or move it out of suites/)"
    continue
  fi
  echo
  echo "== $label"
  timeout --kill-after=10 "$SUITE_TIMEOUT" "$suite"
  rc=$?
  [ "$rc" -eq 124 ] && echo "!! $label timed out after ${SUITE_TIMEOUT}s"
  case "$rc" in
    0) record PASS 1 0 "$key" "$label" ;;
    77) record SKIP 0 0 "$key" "$label (skipped: exit 77)" ;;
    *) record FAIL 0 1 "$key" "$label (exit $rc)" ;;
  esac
done

# ---------------------------------------------------------------- smoke test (always, last)
echo
echo "== smoke: ibv_devinfo -d $RXE_DEVICE"
devinfo=$(ibv_devinfo -d "$RXE_DEVICE" 2>&1)
echo "$devinfo"
if grep -q PORT_ACTIVE <<<"$devinfo"; then
  record PASS 1 0 check:smoke-devinfo "smoke: ibv_devinfo -d $RXE_DEVICE shows PORT_ACTIVE"
else
  record FAIL 0 1 check:smoke-devinfo "smoke: ibv_devinfo -d $RXE_DEVICE shows PORT_ACTIVE"
fi

echo
# 1000 x 64 KiB: enough to prove the data path; the default 5000 costs minutes under TCG on a busy host.
echo "== smoke: ib_write_bw -d $RXE_DEVICE -x $RXE_GID_INDEX -n 1000 loopback (server + client to 127.0.0.1)"
srv_log=$(mktemp) cli_log=$(mktemp)
timeout 180 ib_write_bw -d "$RXE_DEVICE" -x "$RXE_GID_INDEX" -n 1000 >"$srv_log" 2>&1 &
srv=$!
# The server listens on TCP 18515 for the endpoint exchange; wait until it does.
for _ in $(seq 1 50); do
  grep -q 'Waiting for client' "$srv_log" && break
  sleep 0.2
done
timeout 180 ib_write_bw -d "$RXE_DEVICE" -x "$RXE_GID_INDEX" -n 1000 127.0.0.1 >"$cli_log" 2>&1
cli_rc=$?
wait "$srv"
srv_rc=$?
cat "$cli_log"
# The result row follows the "#bytes #iterations ..." header: size, iterations, peak, average, rate.
bw=$(awk '/#bytes/ {getline; print; exit}' "$cli_log" | sed -E 's/[[:space:]]+/ /g; s/^ //; s/ $//')
avg=$(awk '{print $4}' <<<"$bw")
echo "ib_write_bw bandwidth line: $bw"
if [ "$cli_rc" -eq 0 ] && [ "$srv_rc" -eq 0 ] && awk -v a="$avg" 'BEGIN { exit !(a + 0 > 0) }'; then
  record PASS 1 0 check:smoke-write-bw "smoke: ib_write_bw loopback completed ($avg MB/s average)"
else
  echo "--- server output"
  cat "$srv_log"
  record FAIL 0 1 check:smoke-write-bw "smoke: ib_write_bw loopback (client exit $cli_rc, server exit $srv_rc)"
fi
rm -f "$srv_log" "$cli_log"

echo
echo "== rxe VM done, $failures failed unit(s), guest uptime $(cut -d' ' -f1 /proc/uptime)s"
[ "$failures" -eq 0 ] && overall=0 || overall=1
