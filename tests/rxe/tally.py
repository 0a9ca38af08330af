#!/usr/bin/env python3
"""The soft-RoCE tier's verdict: what ran in the VM against what the source says must run.

Usage: tally.py SHARE_DIR [--no-build] [--allow-skip]

Reads SHARE_DIR/expected.list (find-tests.py: the rxe_* test binaries from cargo metadata with their
#[test] #[ignore] counts, and the suites), SHARE_DIR/results (vm-init.sh / lib.sh:
"<PASS|FAIL|SKIP> <passed> <failed> <key> <label>") and SHARE_DIR/status (vm-init.sh's exit code, written
last). Prints every result, then a line for every expected unit with no result, how many of the expected
tests, binaries, suites and checks ran, and last `rxe: N passed, N failed`.

The tier fails (exit 1) when anything failed; when an expected binary or suite has no result (not built,
not run, the VM stopped early); when a binary ran a different number of tests than its source has, or its
source has none; when no rxe_* binary is expected at all; and when a suite skipped (exit 77), unless
--allow-skip (RDMAKIT_RXE_ALLOW_SKIP=1 in run.sh). --no-build (run.sh --no-build) reports the binaries as
not run without failing on them. Exit 2: the VM did not finish (no status) or expected.list is missing.
"""

import argparse
import os
import sys

# vm-init.sh's own checks, always run.
CHECKS = ["setup", "smoke-devinfo", "smoke-write-bw"]


def read_expected(path):
    units = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or not parts[0]:
                continue
            kind, name, count = parts[0], parts[1], int(parts[2])
            note = parts[3] if len(parts) > 3 else ""
            units.append((kind, name, count, note))
    return units


def read_results(path):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 4)
            if len(parts) < 4:
                continue
            verdict, passed, failed, key = parts[0], int(parts[1]), int(parts[2]), parts[3]
            label = parts[4] if len(parts) > 4 else key
            rows.append((verdict, passed, failed, key, label))
    return rows


def plural(n, word, many=None):
    return f"{n} {word if n == 1 else many or word + 's'}"


def tally(share, no_build=False, allow_skip=False, out=sys.stdout):
    """Prints the verdict and returns the exit status (0, 1 or 2)."""
    say = lambda s="": print(s, file=out)  # noqa: E731
    exp_path = os.path.join(share, "expected.list")
    if not os.path.exists(exp_path):
        say(f"rxe: ERROR: {exp_path} is missing (find-tests.py did not run): nothing to compare with")
        say("rxe: 0 passed, 1 failed")
        return 2
    expected = read_expected(exp_path)
    results = read_results(os.path.join(share, "results"))
    status_path = os.path.join(share, "status")
    status = None
    if os.path.exists(status_path):
        with open(status_path, encoding="utf-8") as f:
            status = f.read().strip() or None

    passed = sum(r[1] for r in results)
    failed = sum(r[2] for r in results)
    problems = []  # why the tier fails, one line each
    by_key = {}
    say()
    if results:
        say("rxe: results")
    for verdict, p, f, key, label in results:
        say(f"  {verdict} {label}")
        by_key.setdefault(key, []).append((verdict, p, f))
        if verdict == "FAIL":
            problems.append(label)

    binaries = [u for u in expected if u[0] == "binary"]
    suites = [u for u in expected if u[0] == "suite"]
    tests_expected = sum(max(u[2], 0) for u in binaries)
    tests_ran = bins_ran = 0
    for _, name, count, note in binaries:
        got = by_key.get(f"binary:{name}")
        if not got:
            if no_build:
                say(f"  NOT RUN binary {name} ({plural(count, 'test')}): --no-build")
                continue
            why = f"not built? {note}" if note else "not built, or the VM stopped before it"
            say(f"  MISSING binary {name}: {plural(count, 'test')} expected, no result ({why})")
            problems.append(f"binary {name} has no result")
            failed += max(count, 1)
            continue
        verdict, p, f = got[-1]
        tests_ran += p
        bins_ran += 1
        if count == 0:
            say(f"  FAIL binary {name}: its source has no #[test] #[ignore] function, so the VM runs nothing")
            problems.append(f"binary {name} has no VM tests")
            failed += 1
        elif verdict == "PASS" and p != count:
            # vm-init.sh judges this too; a results file from an older vm-init.sh may not have.
            say(f"  FAIL binary {name}: {p} of {count} expected tests passed")
            problems.append(f"binary {name} ran {p} of {count}")
            failed += max(count - p, 1)
    if not binaries and not no_build:
        say("  FAIL no rxe_* integration-test target in the workspace (cargo metadata): the tier would test nothing")
        problems.append("no rxe_* binaries")
        failed += 1

    suites_passed = skipped = 0
    for _, name, _, note in suites:
        got = by_key.get(f"suite:{name}")
        if not got:
            say(f"  MISSING suite {name}: no result{f' ({note})' if note else ''}")
            problems.append(f"suite {name} has no result")
            failed += 1
            continue
        verdict = got[-1][0]
        suites_passed += verdict == "PASS"
        if verdict == "SKIP":
            skipped += 1
            if not allow_skip:
                problems.append(f"suite {name} skipped")
                failed += 1

    checks_passed = 0
    for name in CHECKS:
        got = by_key.get(f"check:{name}")
        if not got:
            if status is not None:
                say(f"  MISSING check {name}: no result")
                problems.append(f"check {name} has no result")
                failed += 1
            continue
        checks_passed += got[-1][0] == "PASS"

    if no_build:
        say(f"rxe: Rust tests not run (--no-build): {plural(len(binaries), 'rxe_* binary', 'rxe_* binaries')} with "
            f"{plural(tests_expected, 'test')} expected")
    else:
        say(f"rxe: Rust tests: {tests_ran} of {tests_expected} expected ran and passed in "
            f"{bins_ran} of {len(binaries)} rxe_* binaries")
    skip_note = ""
    if skipped:
        skip_note = (f", {skipped} skipped (exit 77: allowed by RDMAKIT_RXE_ALLOW_SKIP)" if allow_skip
                     else f", {skipped} skipped (exit 77 fails the tier; RDMAKIT_RXE_ALLOW_SKIP=1 allows it)")
    say(f"rxe: suites: {suites_passed} of {len(suites)} passed{skip_note}; "
        f"checks: {checks_passed} of {len(CHECKS)} passed")

    if status is None:
        say("rxe: ERROR: the VM did not finish (no status file)")
        say(f"rxe: {passed} passed, {failed + 1} failed")
        return 2
    if status != "0" and not any(r[0] == "FAIL" for r in results):
        problems.append(f"vm-init.sh exited {status}")
        failed += 1
    if problems:
        say(f"rxe: FAILED: {'; '.join(problems)}")
    say(f"rxe: {passed} passed, {failed} failed")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("share")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--allow-skip", action="store_true")
    a = ap.parse_args()
    return tally(a.share, a.no_build, a.allow_skip)


if __name__ == "__main__":
    sys.exit(main())
