#!/usr/bin/env python3
"""gpu-stage's README figures on GPUs, generated from the committed results in bench/results/.

Usage: bench/gpu-stage/readme_tables.py [--check] [--root DIR]

Fills the blocks `h200-current`, `h200-sweep` and `small-transfers` of crates/gpu-stage/README.md (between
`<!-- bench-tables:begin NAME -->` and `<!-- bench-tables:end NAME -->`, the same markers as
bench/tables.py, which owns the README's soft-RoCE blocks) from the newest committed run of each machine
kind listed in CURRENT below. With --check nothing is written and the exit status is 1, with a diff, when
the README differs from what the JSON gives. `crates/gpu-stage/tests/readme_tables.rs` runs the check.

A new run: commit its folder under bench/results/, point CURRENT at it, run this script, commit the README.
"""

import argparse
import difflib
import importlib.util
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = "crates/gpu-stage/README.md"
RESULTS = "bench/results"

# The newest run per machine kind: (folder under bench/results/, what the machine was).
CURRENT = [
    ("gpu-stage-at-24407e5-h200x1", "one H200, GPU0 → host → GPU0"),
    ("gpu-stage-at-2833875", "two H200s, GPU0 → host → GPU1"),
]


def tables_module(root):
    """bench/tables.py, for its number formatting (one rounding rule for every README figure)."""
    spec = importlib.util.spec_from_file_location("bench_tables", os.path.join(root, "bench", "tables.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


T = None


def load(root, *parts):
    path = os.path.join(root, RESULTS, *parts)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def gib(x):
    return T.fixed(x, 2)


def results_by_part(results):
    return {r["part"]: r["result"] for r in results}


def current_table(root):
    rows = [
        "| machine (run) | what | ours, median GiB/s (best) | peer in the same run, median GiB/s | ratio (medians) | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for folder, machine in CURRENT:
        res = results_by_part(load(root, folder, "gpu-stage-results.json"))
        peers = load(root, folder, "gpu-stage-peers.json") or {}
        ceiling = load(root, folder, "gpu-stage-ceiling.json")
        where = f"{machine} (`{RESULTS}/{folder}/`)"
        ours = res["inprocess"]
        d2h, h2d = res["pinned_d2h"], res["pinned_h2d"]
        rows.append(
            f"| {where} | in-process stage, 512 MiB, {ours['chunk_bytes'] >> 20} MiB × {ours['slots']} "
            f"| **{gib(ours['gib_s_median'])}** ({gib(ours['gib_s_best'])}) "
            f"| pinned D2H alone {gib(d2h['gib_s_median'])}, H2D alone {gib(h2d['gib_s_median'])} "
            f"| **{T.ratio(ours['gib_s_median'] / d2h['gib_s_median'])}** vs D2H | ≥ 0.90× |"
        )
        # The ceiling is the faster of its host footprints (ceiling.py: whole-size buffers, and ring-sized
        # ones in runs since 24407e5); both are shown.
        together = {k: v for k, v in (ceiling or {}).items() if "_together" in k}
        if together:
            c = max(v["gib_s_median"] for v in together.values())
            shown = ", ".join(
                f"{'ring-sized' if k.endswith('_ring') else 'whole-size'} host buffers {gib(v['gib_s_median'])}"
                for k, v in sorted(together.items())
            ) if len(together) > 1 else gib(c)
            rows.append(
                f"| | same | {gib(ours['gib_s_median'])} | D2H and H2D at once (the copy-engine ceiling) {shown} "
                f"| **{T.ratio(ours['gib_s_median'] / c)}**{' of the faster' if len(together) > 1 else ''} | ≥ 0.97× |"
            )
        else:
            rows.append("| | same | | D2H and H2D at once (the copy-engine ceiling): not measured in this run | | ≥ 0.97× |")
        naive = peers.get("naive_cpu_to_cuda1")
        if naive and "gib_s_median" in naive:
            # peers.py names what it ran (`tensor.cpu().to("cuda:0") from cuda:0` on one GPU).
            what = naive.get("what", 'tensor.cpu().to("cuda:1")').split(" from ")[0]
            rows.append(
                f"| | same | {gib(ours['gib_s_median'])} | `{what}` {gib(naive['gib_s_median'])} "
                f"| **{T.ratio(ours['gib_s_median'] / naive['gib_s_median'], 1)}** | ≥ 30× |"
            )
        else:
            rows.append("| | same | | naive torch copy: not measured in this run | | ≥ 30× |")
        sweep = sorted(
            (r for p, r in res.items() if p.startswith("tcp-sweep")), key=lambda r: r["connections"]
        )
        tcp = " / ".join(gib(r["gib_s_median"]) for r in sweep)
        conns = "/".join(str(r["connections"]) for r in sweep)
        equal = [(r, peers.get(f"nccl_socket_sendrecv_s{r['connections']}")) for r in sweep]
        equal = [(r, p) for r, p in equal if p and "gib_s_median" in p]
        if not equal:
            nccl = peers.get("nccl_socket_sendrecv")
            peer = (
                f"NCCL sockets, NCCL's default socket count: {gib(nccl['gib_s_median'])}; "
                "not measured at equal socket counts in this run"
                if nccl and "gib_s_median" in nccl
                else "NCCL sockets: not measured in this run"
            )
            rows.append(f"| | two processes over TCP loopback, {conns} connections | {tcp} | {peer} | | ≥ 1.5× at equal sockets |")
        for r, p in equal:
            k = r["connections"]
            c = p.get("channels") or 1
            split = f"{c} channel{'s' if c > 1 else ''} × {k // c} socket{'s' if k // c > 1 else ''}"
            if len(p.get("best_of", [])) > 1:
                split += ", the faster of 1 and 2 channels"
            target = "≥ 1.0×" if k == 1 else "≥ 1.5×"
            rows.append(
                f"| | two processes over TCP loopback, {k} connection{'s' if k > 1 else ''} | {gib(r['gib_s_median'])} "
                f"| NCCL send/recv over sockets, {k} socket{'s' if k > 1 else ''} ({split}) "
                f"{gib(p['gib_s_median'])} | **{T.ratio(r['gib_s_median'] / p['gib_s_median'])}** | {target} |"
            )
    return "\n".join(rows)


def sweep_table(root):
    folder, machine = CURRENT[0]
    res = load(root, folder, "gpu-stage-results.json")
    cells = {}
    for r in res:
        if r["part"].startswith("sweep "):
            x = r["result"]
            cells[(x["chunk_bytes"], x["slots"])] = x["gib_s_median"]
    chunks = sorted({c for c, _ in cells})
    slots = sorted({s for _, s in cells})
    best = max(cells.values())
    out = [
        f"In-process, 512 MiB, median GiB/s, {machine} (`{RESULTS}/{folder}/`, plot `gpu-stage-sweep.svg` there):",
        "",
        "| chunk \\ buffers | " + " | ".join(str(s) for s in slots) + " |",
        "| --- | " + " | ".join("---" for _ in slots) + " |",
    ]
    for c in chunks:
        row = []
        for s in slots:
            v = cells.get((c, s))
            t = "" if v is None else gib(v)
            row.append(f"**{t}**" if v == best else t)
        out.append(f"| {c >> 20} MiB | " + " | ".join(row) + " |")
    return "\n".join(out)


def small_table(root):
    """The small-transfer sweep (`stage_bench small`), if a run committed one."""
    for folder, machine in CURRENT:
        data = load(root, folder, "gpu-stage-small.json")
        if data is None:
            continue
        if not data["points"]:
            return (f"{machine} (`{RESULTS}/{folder}/gpu-stage-small.json`): no size completed: "
                    + "; ".join(data.get("errors", [])))
        out = [
            f"{machine} (`{RESULTS}/{folder}/gpu-stage-small.json`): one transfer of each size through the "
            "in-process stage, against one pinned D2H followed by one pinned H2D of the same size (the "
            "floor), both in the same run; medians.",
            "",
            "| size | ours (µs) | floor: D2H + H2D (µs) | ours / floor | target |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in data["points"]:
            ours, floor = p["ours_us_median"], p["floor_us_median"]
            target = "≤ 1.3×" if p["bytes"] == 1 << 20 else ""
            out.append(
                f"| {p['label']} | {T.fixed(ours, 1)} | {T.fixed(floor, 1)} | {T.ratio(ours / floor)} | {target} |"
            )
        return "\n".join(out)
    return ("Not measured yet: no committed run has `gpu-stage-small.json` "
            "(`stage_bench small`, run by `bench/gpu-stage/run_gpu.sh`).")


BLOCKS = {"h200-current": current_table, "h200-sweep": sweep_table, "small-transfers": small_table}


def render(root, text):
    for name, gen in BLOCKS.items():
        begin = f"<!-- bench-tables:begin {name} -->"
        end = f"<!-- bench-tables:end {name} -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            raise SystemExit(f"{README} needs exactly one `{begin}` and one `{end}` line")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{gen(root)}\n{end}{tail}"
    return text


def main():
    global T
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff on drift")
    ap.add_argument("--root", default=ROOT, help="repository root")
    a = ap.parse_args()
    T = tables_module(a.root)
    path = os.path.join(a.root, README)
    with open(path, encoding="utf-8") as f:
        old = f.read()
    new = render(a.root, old)
    if new == old:
        return 0
    if a.check:
        sys.stdout.writelines(difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), f"{README} (committed)", f"{README} (from {RESULTS}/)"))
        print(f"{README} differs from {RESULTS}/; run `python3 bench/gpu-stage/readme_tables.py` and commit",
              file=sys.stderr)
        return 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"rewrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
