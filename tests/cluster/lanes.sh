#!/usr/bin/env bash
# Runs the tier's tests by the lanes of tests/cluster/lanes (that file says why): first every test no lane
# names, one at a time and alone; then each lane in a process of its own, the lanes side by side, each lane's
# tests one at a time. Each lane's output goes to OUT/lane-NAME.log and, prefixed with [NAME], to stdout.
# Exits non-zero if any test failed (every lane runs to its end either way). Called by run.sh, after the
# build (`cargo test --workspace --no-run`) and up.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:?usage: lanes.sh OUT_DIR}"
mkdir -p "$out"

# The tier's test binary, as cargo built it (cargo would take its build lock for each lane).
bin="$(cd "$repo" && cargo test --workspace --test cluster --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')"
[[ -x "$bin" ]] || { echo "lanes.sh: no tier test binary ($bin)" >&2; exit 2; }

declare -A lane_tests=()
lanes=()
lane=""
while IFS= read -r line; do
  line="${line%%#*}"; line="${line//[[:space:]]/}"
  [[ -z "$line" ]] && continue
  if [[ "$line" =~ ^\[(.+)\]$ ]]; then
    lane="${BASH_REMATCH[1]}"; lanes+=("$lane"); lane_tests[$lane]=""
    continue
  fi
  [[ -n "$lane" ]] || { echo "lanes.sh: $line is in no [lane]" >&2; exit 2; }
  lane_tests[$lane]+=" $line"
done <"$here/lanes"

# cargo runs a test binary in its package's folder; so do the lanes.
run_tests() { (cd "$repo/tests" && "$bin" --ignored --test-threads=1 "$@"); }

status=0
skips=()
for l in "${lanes[@]}"; do
  for t in ${lane_tests[$l]}; do skips+=(--skip "$t"); done
done
echo "lanes.sh: the tests in no lane, alone"
t0=$SECONDS
run_tests --exact "${skips[@]}" 2>&1 | tee "$out/lane-alone.log" || status=1
echo "lanes.sh: alone: $((SECONDS - t0)) s" | tee "$out/lanes-times.txt"

echo "lanes.sh: lanes ${lanes[*]} side by side"
t0=$SECONDS
pids=()
for l in "${lanes[@]}"; do
  # shellcheck disable=SC2086 # the names are words
  ( run_tests --exact ${lane_tests[$l]} >"$out/lane-$l.log" 2>&1; echo $? >"$out/lane-$l.rc" ) &
  pids+=($!)
  # A line prefixed with its lane as soon as it is written.
  ( tail -n +1 -F --pid=$! "$out/lane-$l.log" 2>/dev/null | sed -u "s/^/[$l] /" ) &
done
for p in "${pids[@]}"; do wait "$p" || true; done
sleep 1
for l in "${lanes[@]}"; do
  rc="$(cat "$out/lane-$l.rc" 2>/dev/null || echo 1)"
  echo "lanes.sh: lane $l: exit $rc" | tee -a "$out/lanes-times.txt"
  [[ "$rc" == 0 ]] || status=1
done
echo "lanes.sh: lanes: $((SECONDS - t0)) s" | tee -a "$out/lanes-times.txt"
wait
exit "$status"
