#!/usr/bin/env python3
"""Hooks kwok/patch/rdmakit_pod.go into a copy of KWOK v0.8.0's pkg/kwok/server (argv[1] is the copy's root).
Each edit is an exact replacement of one upstream line; one that no longer matches stops the build."""
import os
import sys

root = sys.argv[1]
EDITS = {
    "pkg/kwok/server/debugging_exec.go": [
        ("\t// Currently only support local exec.\n",
         "\tctx = rdmakitWithPod(ctx, podNamespace, podName, uid, container)\n\n\t// Currently only support local exec.\n"),
        ("\treturn s.execInContainer(ctx, cmd, in, stdout, stderr)\n}\n",
         "\treturn rdmakitExitCode(s.execInContainer(ctx, cmd, in, stdout, stderr))\n}\n"),
    ],
    "pkg/kwok/server/debugging_logs.go": [
        ("\treturn readLogs(ctx, logsFile, opts, stdout, stderr)\n",
         "\treturn readLogs(ctx, rdmakitLogsFile(logsFile, podNamespace, podName, container), opts, stdout, stderr)\n"),
    ],
}
for rel, edits in EDITS.items():
    path = os.path.join(root, rel)
    text = open(path).read()
    for old, new in edits:
        if text.count(old) != 1:
            sys.exit(f"kwok/patch/apply.py: {rel}: the line to hook is not there once: {old.strip()!r}")
        text = text.replace(old, new)
    with open(path, "w") as f:
        f.write(text)
