#!/usr/bin/env bash
# The soft-RoCE VM tier: boots this machine's own root filesystem under a Debian kernel in a TCG VM
# (virtme-ng), creates rxe0 on a veth pair there, and runs the workspace's `rxe_*` test binaries, the
# suites in tests/rxe/suites/ and a perftest smoke test inside it. See tests/rxe/README.md.
#
# Usage: tests/rxe/run.sh [--no-build]
#   --no-build   skip the cargo build and the Rust rxe_* tests (suites and smoke test still run)
# Environment (all optional):
#   RDMAKIT_RXE_KERNEL         kernel image to boot (default: newest /boot/vmlinuz-*-amd64 with modules)
#   RDMAKIT_RXE_VM_TIMEOUT     seconds the whole VM may run (default 1200; a hang guard, not a budget)
#   RDMAKIT_RXE_TEST_TIMEOUT   seconds one test binary may run inside the VM (default 300)
#   RDMAKIT_RXE_SUITE_TIMEOUT  seconds one suite may run inside the VM (default 300)
# Exit status: 0 all passed; 1 something inside the VM failed; 2 the VM could not boot or did not finish
# (or the harness could not start). The last line is always `rxe: N passed, N failed`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$ROOT/target/rxe
SHARE=$WORK/share
CARGO=${CARGO:-cargo}
VM_TIMEOUT=${RDMAKIT_RXE_VM_TIMEOUT:-1200}
build=1

for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    -h | --help)
      sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "rxe: unknown argument '$arg' (expected --no-build or --help)" >&2
      exit 2
      ;;
  esac
done

# Counted as one failure so the closing line never reads "0 failed" on an error exit.
die() {
  echo "rxe: ERROR: $*"
  echo "rxe: 0 passed, 1 failed"
  exit 2
}

# ---------------------------------------------------------------- prerequisites
find_vng() {
  if command -v vng >/dev/null 2>&1; then
    command -v vng
    return
  fi
  # pip --user installs land here, which is often not on PATH.
  local user_bin
  user_bin="$(python3 -m site --user-base 2>/dev/null)/bin/vng"
  [ -x "$user_bin" ] && echo "$user_bin"
}
VNG=$(find_vng) || true
[ -n "$VNG" ] || die "vng (virtme-ng) not found; run 'make test-deps' (or: scripts/ci/pip-install.sh virtme-ng)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found; run 'make test-deps'"
command -v busybox >/dev/null && file -L "$(command -v busybox)" | grep -q 'statically linked' ||
  die "virtme-ng needs a statically linked busybox; run 'make test-deps' (Debian package busybox-static)"

find_kernel() {
  local img ver best=""
  # Newest Debian kernel that has its modules installed (rdma_rxe is a module).
  for img in $(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V); do
    ver=${img#/boot/vmlinuz-}
    [ -d "/lib/modules/$ver" ] && best=$img
  done
  echo "$best"
}
KERNEL=${RDMAKIT_RXE_KERNEL:-$(find_kernel)}
[ -n "$KERNEL" ] || die "no /boot/vmlinuz-*-amd64 with matching /lib/modules/<version>; run 'make test-deps' (Debian package linux-image-amd64)"
[ -r "$KERNEL" ] || die "$KERNEL is not readable by $(id -un); run as root or 'sudo chmod 0644 $KERNEL'"
KVER=${KERNEL#/boot/vmlinuz-}
find "/lib/modules/$KVER" -name 'rdma_rxe.ko*' -print -quit | grep -q . ||
  die "kernel $KVER has no rdma_rxe module under /lib/modules/$KVER"

mkdir -p "$WORK"
exec 9>"$WORK/lock"
flock -n 9 || die "another tests/rxe/run.sh is using $WORK (lock $WORK/lock)"
rm -rf "$SHARE" "$WORK/out"
mkdir -p "$SHARE/out"

# ---------------------------------------------------------------- build the rxe_* test binaries
: >"$SHARE/tests.list"
if [ "$build" -eq 1 ]; then
  echo "rxe: building workspace test binaries (cargo test --workspace --no-run)"
  (cd "$ROOT" && $CARGO test --workspace --no-run --message-format=json) |
    python3 "$ROOT/tests/rxe/find-tests.py" >"$SHARE/tests.list" ||
    die "the workspace test build failed (diagnostics above); fix it or run with --no-build"
  if [ -s "$SHARE/tests.list" ]; then
    echo "rxe: test binaries to run in the VM:"
    cut -f1,2 "$SHARE/tests.list" | awk -F'\t' '{print "  " $2 "/" $1}'
  else
    echo "rxe: no integration-test target named rxe_* in the workspace yet"
  fi
fi

cat >"$SHARE/config.sh" <<EOF
RDMAKIT_ROOT='$ROOT'
RXE_DEVICE=rxe0
RXE_GID_INDEX=1
RXE_NETDEV=veth0
RXE_PEER_NETDEV=veth1
RXE_IP=10.99.0.1
RXE_PEER_IP=10.99.0.2
TEST_TIMEOUT=${RDMAKIT_RXE_TEST_TIMEOUT:-300}
SUITE_TIMEOUT=${RDMAKIT_RXE_SUITE_TIMEOUT:-300}
EOF

# ---------------------------------------------------------------- boot the VM
# TCG only: nested KVM hangs on these machines. stdin is /dev/null so vng never waits on a terminal
# (CI has none). The console goes to console.log; the tests' output comes from vm.log, which the guest
# writes into the shared folder (the console can drop lines).
echo "rxe: booting $KERNEL in a TCG VM with virtme-ng (about a minute; limit ${VM_TIMEOUT}s)"
start=$(date +%s.%N)
set +e
timeout --kill-after=20 "$VM_TIMEOUT" "$VNG" --disable-kvm --run "$KERNEL" --memory 2G --cpus 2 \
  --verbose --user root --cwd "$ROOT" --rwdir "$SHARE" \
  --exec "$(printf '%q %q' "$ROOT/tests/rxe/vm-init.sh" "$SHARE")" </dev/null >"$WORK/console.log" 2>&1 &
vm=$!
# Stream the guest's log as it is written; tail exits once the VM process is gone and the file is drained.
tail -n +1 -F --pid="$vm" "$SHARE/vm.log" 2>/dev/null &
tailer=$!
# timeout runs in its own process group (timeout, vng, qemu), so Ctrl-C or a CI kill of this script would
# not reach the VM: stop that group on INT/TERM. Waiting in the background lets the trap run at once.
trap 'kill -TERM -- "-$vm" 2>/dev/null; kill "$tailer" 2>/dev/null; die "interrupted; the VM was stopped"' INT TERM
wait "$vm"
vm_rc=$?
wait "$tailer"
trap - INT TERM
set -e
end=$(date +%s.%N)
elapsed=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", e - s }')

# ---------------------------------------------------------------- results
if [ -d "$SHARE/out" ]; then
  mkdir -p "$WORK/out"
  cp -a "$SHARE/out/." "$WORK/out/"
fi

passed=0 failed=0 skipped=0
echo
[ -s "$SHARE/results" ] && echo "rxe: results"
while read -r verdict p f label; do
  printf '  %s %s\n' "$verdict" "$label"
  [ "$verdict" = SKIP ] && skipped=$((skipped + 1))
  passed=$((passed + p))
  failed=$((failed + f))
done < <(cat "$SHARE/results" 2>/dev/null)

boot=""
if [ -s "$SHARE/vm.log" ]; then
  guest_start=$(sed -nE '1s/.* started ([0-9.]+)$/\1/p' "$SHARE/vm.log")
  [ -n "$guest_start" ] &&
    boot=$(awk -v s="$start" -v g="$guest_start" 'BEGIN { printf ", boot %.0fs", g - s }')
fi
echo "rxe: VM ran ${elapsed}s${boot} (vng exit $vm_rc)"

if [ ! -s "$SHARE/status" ]; then
  echo "rxe: ERROR: the VM did not finish$([ "$vm_rc" -eq 124 ] && echo " within ${VM_TIMEOUT}s (RDMAKIT_RXE_VM_TIMEOUT)")."
  echo "rxe: last lines of the VM console ($WORK/console.log):"
  tail -n 40 "$WORK/console.log" || true
  echo "rxe: $passed passed, $((failed + 1)) failed"
  exit 2
fi

[ "$skipped" -eq 0 ] || echo "rxe: $skipped suite(s) skipped (exit 77), counted neither passed nor failed"
echo "rxe: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$(cat "$SHARE/status")" = 0 ] && exit 0
exit 1
