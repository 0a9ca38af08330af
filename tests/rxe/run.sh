#!/usr/bin/env bash
# The soft-RoCE VM tier: boots this machine's own root filesystem under a Debian kernel in a TCG VM
# (virtme-ng), creates rxe0 on a veth pair there, and runs the workspace's `rxe_*` test binaries, the
# suites in tests/rxe/suites/ and a perftest smoke test inside it. See tests/rxe/README.md.
#
# Usage: tests/rxe/run.sh [--no-build]
#   --no-build   skip the cargo build and the Rust rxe_* tests (suites and smoke test still run)
# Environment (all optional):
#   RDMAKIT_RXE_KERNEL         kernel image to boot (default: newest /boot/vmlinuz-*-amd64 with modules)
#   RDMAKIT_RXE_VM_TIMEOUT     seconds the whole VM may run (default 2400; a hang guard, not a budget)
#   RDMAKIT_RXE_TEST_TIMEOUT   seconds one test binary may run inside the VM (default 300)
#   RDMAKIT_RXE_SUITE_TIMEOUT  seconds one suite may run inside the VM (default 1500: a Ray head takes minutes under TCG)
#   RDMAKIT_RXE_ALLOW_SKIP     1: a suite that skips (exit 77) does not fail the tier (default: it does)
# Exit status: 0 all passed, and every rxe_* binary the source has ran as many tests as its source has
# (tally.py); 1 something failed, skipped or is missing; 2 the VM could not boot or did not finish (or the
# harness could not start). The last line is always `rxe: N passed, N failed`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$ROOT/target/rxe
SHARE=$WORK/share
CARGO=${CARGO:-cargo}
VM_TIMEOUT=${RDMAKIT_RXE_VM_TIMEOUT:-2400}
build=1

for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    -h | --help)
      sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
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
[ -n "$VNG" ] || die "vng (virtme-ng) not found; run 'make test-deps' (or: .ci/pip-install.sh virtme-ng)"
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
# What must run comes from the source: every rxe_* test target in cargo metadata with its count of
# #[test] #[ignore] functions, and every suite (expected.list); tally.py holds the VM's results against it.
: >"$SHARE/tests.list"
(cd "$ROOT" && $CARGO metadata --no-deps --format-version 1) >"$WORK/metadata.json" ||
  die "cargo metadata failed (output above)"
find_tests() { python3 "$ROOT/tests/rxe/find-tests.py" --metadata "$WORK/metadata.json" --expected "$SHARE/expected.list"; }
if [ "$build" -eq 1 ]; then
  echo "rxe: building workspace test binaries (cargo test --workspace --no-run)"
  (cd "$ROOT" && $CARGO test --workspace --no-run --message-format=json) | find_tests >"$SHARE/tests.list" ||
    die "the workspace test build failed (diagnostics above); fix it or run with --no-build"
else
  find_tests </dev/null >/dev/null || die "find-tests.py failed (output above)"
fi
echo "rxe: expected from the source (cargo metadata, #[test] #[ignore] functions, tests/rxe/suites/):"
awk -F'\t' '$1 == "binary" { printf "  %s: %d test(s)%s\n", $2, $3, ($4 == "" ? "" : " (" $4 ")") }
  $1 == "suite" { printf "  suite %s%s\n", $2, ($4 == "" ? "" : " (" $4 ")") }' "$SHARE/expected.list"
if [ "$build" -eq 1 ]; then
  echo "rxe: test binaries built, to run in the VM:"
  awk -F'\t' '{ print "  " $2 "/" $1 }' "$SHARE/tests.list"
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
SUITE_TIMEOUT=${RDMAKIT_RXE_SUITE_TIMEOUT:-1500}
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

boot=""
if [ -s "$SHARE/vm.log" ]; then
  guest_start=$(sed -nE '1s/.* started ([0-9.]+)$/\1/p' "$SHARE/vm.log")
  [ -n "$guest_start" ] &&
    boot=$(awk -v s="$start" -v g="$guest_start" 'BEGIN { printf ", boot %.0fs", g - s }')
fi
echo "rxe: VM ran ${elapsed}s${boot} (vng exit $vm_rc)"

tally_args=()
[ "$build" -eq 1 ] || tally_args+=(--no-build)
[ "${RDMAKIT_RXE_ALLOW_SKIP:-0}" = 1 ] && tally_args+=(--allow-skip)
set +e
python3 "$ROOT/tests/rxe/tally.py" "$SHARE" "${tally_args[@]}" >"$WORK/tally.txt"
rc=$?
set -e
if [ "$rc" -eq 2 ] && [ ! -s "$SHARE/status" ]; then
  # Everything but the last line, then the console's tail, then the closing count.
  sed '$d' "$WORK/tally.txt"
  echo "rxe: the VM did not finish$([ "$vm_rc" -eq 124 ] && echo " within ${VM_TIMEOUT}s (RDMAKIT_RXE_VM_TIMEOUT)")."
  echo "rxe: last lines of the VM console ($WORK/console.log):"
  tail -n 40 "$WORK/console.log" || true
  tail -n 1 "$WORK/tally.txt"
else
  cat "$WORK/tally.txt"
fi
exit "$rc"
