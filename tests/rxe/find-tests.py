#!/usr/bin/env python3
"""Lists the soft-RoCE test binaries cargo built, and the ones the source says there must be.

Usage: find-tests.py --metadata METADATA.json --expected EXPECTED.list < cargo-test-no-run.json > tests.list

stdin is `cargo test --no-run --message-format=json`. Compiler diagnostics (warnings and errors) are passed
through to stderr as cargo would have printed them, so a failed build stays readable.

stdout (tests.list): one line per built test executable whose target name starts with `rxe_`:
`<target name>\\t<package name>\\t<executable path>\\t<expected test count>`.

--metadata is `cargo metadata --no-deps --format-version 1`: every workspace target of kind `test` named
`rxe_*` is expected, whether or not cargo built it (a `required-features` that the build did not enable makes
cargo skip a target silently). Its expected test count is read from the source: the `#[test]` functions that
also carry `#[ignore ...]` in the target's file and in the files of its `mod name;` declarations (tests made by
macros are not seen; write them out). --expected gets one line per expected binary:
`binary\\t<package>/<target>\\t<expected test count>\\t<note>` (note: `required-features: ...` or empty), then
one line per file in tests/rxe/suites/: `suite\\t<file name>\\t1\\t<note>` (note `not executable` when it is
not). tests/rxe/tally.py compares these with what ran in the VM.
"""

import argparse
import json
import os
import re
import sys

PREFIX = "rxe_"
SUITES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suites")


def package_name(package_id: str) -> str:
    # Newer cargo: "path+file:///work/main/crates/erdma-verbs#erdma-verbs@0.1.0" (or "#0.1.0" when the
    # name equals the directory); older cargo: "erdma-verbs 0.1.0 (path+file://...)".
    if "#" in package_id:
        frag = package_id.rsplit("#", 1)[1]
        if "@" in frag:
            return frag.split("@", 1)[0]
        return re.sub(r"[/#].*$", "", package_id.rsplit("#", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    return package_id.split(" ", 1)[0]


MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)
# One outer attribute `#[name ...]`, strings and one level of nested brackets allowed inside (multi-line too).
ATTR = r'#\[\s*[A-Za-z_:]+(?:[^\[\]"]|"(?:\\.|[^"\\])*"|\[[^\]]*\])*\]'
# A group of attributes (with comments between them) directly before an item.
ATTR_GROUP = re.compile(rf"(?:{ATTR}\s*(?://[^\n]*\n\s*)*)+")
ATTR_NAME = re.compile(r"#\[\s*(?:[A-Za-z_]+::)*([A-Za-z_]+)")


def strip_comments(text: str) -> str:
    """Block comments and whole-line `//` comments (doc comments included) out, line count kept."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"(?m)^\s*//.*$", "", text)


def ignored_tests_in(text: str) -> int:
    """`#[test]` items whose attribute group also has `#[ignore]` / `#[ignore = "..."]`."""
    count = 0
    for group in ATTR_GROUP.finditer(strip_comments(text)):
        names = set(ATTR_NAME.findall(group.group(0)))
        if "test" in names and "ignore" in names:
            count += 1
    return count


def module_files(src: str, seen: set) -> list:
    """`src` and, recursively, the files of its `mod name;` declarations (name.rs or name/mod.rs)."""
    src = os.path.realpath(src)
    if src in seen or not os.path.isfile(src):
        return []
    seen.add(src)
    files = [src]
    base = os.path.dirname(src)
    stem = os.path.splitext(os.path.basename(src))[0]
    # A crate root's or mod.rs's modules sit next to it (tests/rxe_x.rs -> tests/common/mod.rs); a
    # non-root `a.rs` keeps them in `a/` (the last candidate).
    with open(src, encoding="utf-8") as f:
        text = strip_comments(f.read())
    for m in MOD_DECL.finditer(text):
        name = m.group(1)
        for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs"),
                     os.path.join(base, stem, name + ".rs")):
            if os.path.isfile(cand):
                files += module_files(cand, seen)
                break
    return files


def expected_count(src_path: str) -> int:
    total = 0
    for path in module_files(src_path, set()):
        with open(path, encoding="utf-8") as f:
            total += ignored_tests_in(f.read())
    return total


def expected_binaries(metadata: dict) -> list:
    members = set(metadata.get("workspace_members") or [])
    out = []
    for pkg in metadata.get("packages", []):
        if members and pkg.get("id") not in members:
            continue
        for t in pkg.get("targets", []):
            if t.get("name", "").startswith(PREFIX) and "test" in t.get("kind", []):
                feats = t.get("required-features") or []
                note = f"required-features: {', '.join(feats)}" if feats else ""
                out.append((pkg["name"], t["name"], expected_count(t["src_path"]), note))
    return sorted(out)


def expected_suites(folder: str) -> list:
    if not os.path.isdir(folder):
        return []
    out = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".sh") and os.path.isfile(path):
            out.append((name, "" if os.access(path, os.X_OK) else "not executable"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--metadata", required=True, help="cargo metadata --no-deps --format-version 1 output")
    ap.add_argument("--expected", required=True, help="where to write the expected binaries and suites")
    ap.add_argument("--suites", default=SUITES, help="suites folder (default: tests/rxe/suites)")
    args = ap.parse_args()

    with open(args.metadata, encoding="utf-8") as f:
        expected = expected_binaries(json.load(f))
    counts = {(pkg, name): n for pkg, name, n, _ in expected}

    found = []
    build_ok = True
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        reason = msg.get("reason")
        if reason == "compiler-message":
            rendered = (msg.get("message") or {}).get("rendered")
            if rendered:
                sys.stderr.write(rendered)
        elif reason == "build-finished":
            build_ok = bool(msg.get("success"))
        elif reason == "compiler-artifact":
            target = msg.get("target") or {}
            exe = msg.get("executable")
            name = target.get("name", "")
            if exe and name.startswith(PREFIX) and "test" in target.get("kind", []):
                found.append((name, package_name(msg.get("package_id", "")), exe))

    with open(args.expected, "w", encoding="utf-8") as f:
        for pkg, name, n, note in expected:
            f.write(f"binary\t{pkg}/{name}\t{n}\t{note}\n")
        for name, note in expected_suites(args.suites):
            f.write(f"suite\t{name}\t1\t{note}\n")
    # A built binary the metadata does not know (should not happen) still runs; its count is unknown (-1),
    # which tally.py reports as a failure instead of guessing.
    for name, pkg, exe in sorted(set(found)):
        print(f"{name}\t{pkg}\t{exe}\t{counts.get((pkg, name), -1)}")
    return 0 if build_ok else 1


if __name__ == "__main__":
    sys.exit(main())
