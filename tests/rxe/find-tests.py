#!/usr/bin/env python3
"""Reads `cargo test --no-run --message-format=json` from stdin and lists the soft-RoCE test binaries.

Prints one line per test executable whose target name starts with `rxe_`:
`<target name>\t<package name>\t<executable path>`. Compiler diagnostics (warnings and errors) are
passed through to stderr as cargo would have printed them, so a failed build stays readable.
"""

import json
import re
import sys

PREFIX = "rxe_"


def package_name(package_id: str) -> str:
    # Newer cargo: "path+file:///work/main/crates/erdma-verbs#erdma-verbs@0.1.0" (or "#0.1.0" when the
    # name equals the directory); older cargo: "erdma-verbs 0.1.0 (path+file://...)".
    if "#" in package_id:
        frag = package_id.rsplit("#", 1)[1]
        if "@" in frag:
            return frag.split("@", 1)[0]
        return re.sub(r"[/#].*$", "", package_id.rsplit("#", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    return package_id.split(" ", 1)[0]


def main() -> int:
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
    for name, pkg, exe in sorted(set(found)):
        print(f"{name}\t{pkg}\t{exe}")
    return 0 if build_ok else 1


if __name__ == "__main__":
    sys.exit(main())
