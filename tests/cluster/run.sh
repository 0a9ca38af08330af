#!/usr/bin/env bash
# The control-plane tier end to end: build the pinned components (cached), start the cluster, run the tier's
# tests (tests/tests/cluster/, ignored in a plain cargo test), stop the cluster whatever happened.
# Timings (first build, start-up, tests) go to target/cluster/times.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/cluster"
cargo="${CARGO:-cargo}"
mkdir -p "$out"
t0=$SECONDS
"$here/build.sh"
t_build=$((SECONDS - t0))
# A cluster left by an interrupted earlier run goes first.
"$here/down.sh" >/dev/null
trap '"$here/down.sh"' EXIT
"$here/up.sh"
t_up=$((SECONDS - t0 - t_build))
# --workspace, as `make unit` builds it: the same feature set, so nothing (rdmakit's binary included) is
# compiled a second time with other features (a third copy of kube and rdmakit cost gigabytes of disk).
"$cargo" test --workspace --no-run
if [[ $# -gt 0 ]]; then
  # Arguments (a filter, --exact NAME, ...): those tests, one after another, as before the lanes.
  "$cargo" test --workspace --test cluster -- --ignored --test-threads=1 "$@"
else
  # The lanes (tests/cluster/lanes): the tests no lane names first, alone; then each lane's tests one after
  # another in a process of its own, the lanes side by side (the tier's tests mostly wait on pods, operators and
  # the launchers' sleeps: on 2 cores over half the CPU idled with one test at a time).
  "$here/lanes.sh" "$out"
fi
t_tests=$((SECONDS - t0 - t_build - t_up))
{
  echo "build (go, cached after the first): ${t_build} s"; cat "$out/build-times.txt"
  cat "$out/up-time.txt"
  echo "tests: ${t_tests} s"
} | tee "$out/times.txt"
