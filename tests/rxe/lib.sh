# Sourced by vm-init.sh (inside the VM) and by the accounting tests (tests/tests/vm_tier_accounting.rs):
# how one unit's outcome is written to $SHARE/results. Needs SHARE; keeps a count in `failures`.
#
# results lines: "<PASS|FAIL|SKIP> <passed> <failed> <key> <label...>"; key is `binary:<pkg>/<target>`,
# `suite:<file>` or `check:<name>`, which tests/rxe/tally.py matches against the expected units.

failures=${failures:-0}
# keys are single words: labels follow them and may have spaces
record() { # record PASS|FAIL|SKIP PASSED FAILED KEY LABEL
  echo "$1 $2 $3 $4 $5" >>"$SHARE/results"
  [ "$1" != FAIL ] || failures=$((failures + 1)) # a SKIP is judged by tally.py on the host
}

# run_test_binary LABEL EXE EXPECTED: runs EXE's ignored tests one at a time (TEST_TIMEOUT seconds, default
# 300) and records PASS only when it exited 0 with a libtest `test result:` line saying EXPECTED tests
# passed and none failed. EXPECTED is the count of #[test] #[ignore] functions in the source
# (find-tests.py); a binary that ran fewer (0 included) or more fails, as does one that crashed or timed
# out without a result line.
run_test_binary() {
  local label=$1 exe=$2 expected=$3 tmp rc line passed failed why
  echo
  echo "== test binary $label ($exe --ignored --test-threads=1, $expected test(s) expected)"
  tmp=$(mktemp)
  timeout --kill-after=10 "${TEST_TIMEOUT:-300}" "$exe" --ignored --test-threads=1 2>&1 | tee "$tmp"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^test result:' "$tmp" | tail -n1)
  rm -f "$tmp"
  passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$line")
  failed=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$line")
  passed=${passed:-0} failed=${failed:-0}
  [ "$rc" -eq 124 ] && echo "!! $label timed out after ${TEST_TIMEOUT:-300}s"
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi # crashed or timed out
  why=
  if [ "$rc" -ne 0 ]; then
    why=" (exit $rc)"
  elif [ -z "$line" ]; then
    why=" (no libtest result line)"
  elif [ "$expected" -lt 0 ]; then
    why=" (expected count unknown: the target is not in cargo metadata)"
  elif [ "$passed" -ne "$expected" ]; then
    why=" (expected $expected from the source)"
  fi
  if [ -z "$why" ] && [ "$failed" -eq 0 ]; then
    record PASS "$passed" 0 "binary:$label" "$label: $passed of $expected passed"
  else
    # Tests that should have run and did not count as failed, so the totals show the gap.
    [ "$passed" -lt "$expected" ] && [ "$((passed + failed))" -lt "$expected" ] && failed=$((expected - passed))
    record FAIL "$passed" "$failed" "binary:$label" "$label: $passed of $expected passed, $failed failed$why"
  fi
}
