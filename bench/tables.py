#!/usr/bin/env python3
"""Every README benchmark table, generated from the committed results in bench/results/.

Usage: bench/tables.py [--check] [--root DIR]

Every block between `<!-- bench-tables:begin NAME -->` and `<!-- bench-tables:end NAME -->` in the files
of BLOCKS (the top README's summary; gpu-stage's README: the soft-RoCE runs and the GPU runs) is replaced by
what NAME's generator makes from the JSON; nothing else in the file is touched. Without --check the files
are rewritten; with --check nothing is written and the exit status is 1, with a diff, when a file differs
from what the JSON gives (a hand-edited figure, or a result committed without regenerating), 0 when they
agree. `tests/tests/bench_tables.rs` runs the check in `cargo test`.

Figures: GiB/s medians for the H200 runs (gpu-stage-summary.json's `ratios`, the ratio by medians);
Gb/s best and mean of the alternating rounds for the soft-RoCE runs (each file's own `ratio` = best / best
and `ratio_mean`). A new GPU run: commit its folder under bench/results/, point CURRENT at it, run this
script, commit the READMEs.
"""

import argparse
import decimal
import difflib
import json
import os
import re
import statistics
import sys

RESULTS = "bench/results"


def load(root, *parts):
    with open(os.path.join(root, RESULTS, *parts), encoding="utf-8") as f:
        return json.load(f)


def load_optional(root, *parts):
    """What `load` gives, or None where the run did not write that file."""
    return load(root, *parts) if os.path.exists(os.path.join(root, RESULTS, *parts)) else None


def fixed(x, places):
    """`x` to `places` decimals, halves rounded up, from its shortest decimal form: the JSON's 0.865 is
    0.87 (binary floating point would make it 0.86)."""
    q = decimal.Decimal(1).scaleb(-places)
    return str(decimal.Decimal(repr(x)).quantize(q, rounding=decimal.ROUND_HALF_UP))


def gbps(x):
    """Gb/s as perftest prints them: 2 decimals, a third when it carries information (0.119, 0.12)."""
    s = fixed(x, 3)
    return s[:-1] if s.endswith("0") else s


def gib(x):
    """GiB/s to 2 decimals."""
    return fixed(x, 2)


def ratio(x, places=2):
    return f"{fixed(x, places)}×"


def span(values, fmt=ratio):
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo).rstrip('×')}–{fmt(hi)}"


def summary_ratio(summary, ours, peer_prefix):
    for r in summary["ratios"]:
        if r["ours"] == ours and r["peer"].startswith(peer_prefix):
            return r
    raise KeyError(f"no ratio {ours} vs {peer_prefix}* in the summary")


# ---------------------------------------------------------------- soft-RoCE RDMA transport runs
def qps_of_perftest(cmd):
    m = re.search(r"-q (\d+)", cmd)
    return int(m.group(1)) if m else 1


def rdma_rows(root):
    """One row per (run, config) of gpu-stage-rdma-rxe.json, in file order."""
    d = load(root, "gpu-stage-rdma-rxe.json")
    rows = []
    for i, run in enumerate(d["runs"], 1):
        configs = run.get("configs") or [run]
        for c in configs:
            rounds = c["rounds"]
            rows.append({
                "run": i,
                "qps": c["qps"],
                "slots": c["slots"],
                "peer_qps": qps_of_perftest(c["perftest_cmd"]),
                "timed": run.get("timed_iterations_per_round"),
                "ours": rounds["gpu_stage_rdma_gbps"],
                "peer": rounds["perftest_gbps"],
                "ratio": c.get("ratio"),
                "ratio_mean": c.get("ratio_mean"),
                "target": run.get("target_ratio", d.get("target_ratio", 0.9)),
            })
    return rows


def like_for_like(rows, qps):
    return [r for r in rows if r["qps"] == qps and r["peer_qps"] == qps and r["ratio"] is not None]


def rdma_runs_table(root):
    out = ["| configuration | ours (Gb/s) | `ib_write_bw` (Gb/s) | ratio best / mean | target 0.9× |",
           "| --- | --- | --- | --- | --- |"]
    for r in rdma_rows(root):
        if r["peer_qps"] != r["qps"]:
            what = f"ours {r['qps']} QPs vs perftest's default {r['peer_qps']} QP (run {r['run']})"
            met = "(not like for like)"
        else:
            what = f"{r['qps']} QP{'s' if r['qps'] > 1 else ''} each"
            if r["slots"] != 8:
                what += f", {r['slots']} slots"
            extra = [f"run {r['run']}"]
            if r["timed"] and r["timed"] != 2:
                extra.append(f"{r['timed']} timed iteration{'s' if r['timed'] > 1 else ''}")
            if len(r["ours"]) == 1:
                extra.append("one round")
            what += f" ({', '.join(extra)})"
            met = "✔" if r["ratio"] is not None and r["ratio"] >= r["target"] else "✘"
        ours = ", ".join(gbps(x) for x in r["ours"])
        peer = ", ".join(gbps(x) for x in r["peer"])
        rt = f"{ratio(r['ratio'])} / {ratio(r['ratio_mean'])}" if r["ratio"] is not None else "–"
        out.append(f"| {what} | {ours} | {peer} | {rt} | {met} |")
    return "\n".join(out)


def rdma_summary(root):
    rows = rdma_rows(root)
    parts = []
    for qps in (1, 2):
        lf = like_for_like(rows, qps)
        if not lf:
            continue
        met = sum(r["ratio"] >= r["target"] for r in lf)
        parts.append(
            f"{qps} QP{'s' if qps > 1 else ''} each: {span([r['ratio'] for r in lf])} best, "
            f"{span([r['ratio_mean'] for r in lf])} mean, at or above 0.9× in {met} of {len(lf)}"
        )
    n = len({r["run"] for r in rows})
    return (f"Across the like-for-like configurations of all {n} runs (the table above): "
            + "; ".join(parts) + ".")


# ---------------------------------------------------------------- top README summary
def readme_summary(root):
    chained = load(root, "gpu-stage-chained/gpu-stage-summary.json")
    inproc = summary_ratio(chained, "inprocess", "pinned_d2h")
    naive = summary_ratio(chained, "inprocess", "naive_cpu_to_cuda1")
    tcp = summary_ratio(chained, "tcp", "nccl_socket_sendrecv")
    earlier = [summary_ratio(load(root, f), "inprocess", "pinned_d2h")["ratio_median"]
               for f in ("gpu-stage-summary.json", "gpu-stage-rerun-after-lane-refactor/gpu-stage-summary.json")]
    gib_s = lambda x: f"{gib(x)} GiB/s"  # noqa: E731
    rows = rdma_rows(root)
    one, two = like_for_like(rows, 1), like_for_like(rows, 2)
    quiet = load(root, "erdma-write-bw-rxe-quiet.json")
    loaded = load(root, "erdma-write-bw-rxe.json")

    def wbw(d):
        # Best and mean from the rounds themselves (the file's own figures are already rounded to 4 places).
        ours, peer = d["rounds"]["erdma_verbs_gbps"], d["rounds"]["perftest_gbps"]
        return (f"{fixed(max(ours), 3)} Gb/s best, {fixed(statistics.mean(ours), 3)} mean",
                f"{fixed(max(peer), 3)} best, {fixed(statistics.mean(peer), 3)} mean",
                f"{ratio(d['ratio'])} best, {ratio(d['ratio_mean'])} mean", f"≥ {d['target_ratio']:.2f}×")

    def met(lf):
        return sum(r["ratio"] >= r["target"] for r in lf)

    out_rdt = rdt_rows(root)
    out = [
        "| benchmark (same-run peer) | ours | peer | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        f"| gpu-stage GPU0 → host → GPU1, 512 MiB, H200 pair, event-chained stage (`bench/results/gpu-stage-chained/`) "
        f"| {gib_s(inproc['ours_gib_s_median'])} | pinned D2H alone {gib_s(inproc['peer_gib_s_median'])} "
        f"| {ratio(inproc['ratio_median'], 3)} (earlier threaded stage: {' and '.join(ratio(x, 3) for x in earlier)}) "
        f"| ≥ {inproc['target']:.2f}× |",
        f"| same | {gib_s(naive['ours_gib_s_median'])} | `tensor.cpu().to(\"cuda:1\")` {gib_s(naive['peer_gib_s_median'])} "
        f"| {ratio(naive['ratio_median'], 1)} | ≥ {naive['target']:.0f}× |",
        f"| gpu-stage two processes over TCP loopback, 512 MiB, same run, 4 connections against NCCL's default "
        f"socket count, H200 pair | {gib_s(tcp['ours_gib_s_median'])} "
        f"| NCCL sockets (P2P/SHM/IB off) {gib_s(tcp['peer_gib_s_median'])} | {ratio(tcp['ratio_median'])} "
        f"| ≥ {tcp['target']:.0f}× |",
        equal_sockets_row(root),
        "| gpu-stage over RDMA (WRITE_WITH_IMM into the peer's ring, credits), 64 MiB in 4 MiB chunks, host backend, "
        f"rxe in a TCG VM, {len({r['run'] for r in rows})} runs (`bench/results/gpu-stage-rdma-rxe.json`) "
        f"| 1 QP: {span([max(r['ours']) for r in one], gbps)} Gb/s best per run; "
        f"2 QPs: {span([max(r['ours']) for r in two], gbps)} "
        f"| `ib_write_bw -s 4194304` with the same QP count: {span([max(r['peer']) for r in one], gbps)} (`-q 1`); "
        f"{span([max(r['peer']) for r in two], gbps)} (`-q 2`) "
        f"| 1 QP: {span([r['ratio'] for r in one])} best, ≥ 0.9× in {met(one)} of {len(one)}; "
        f"2 QPs: {span([r['ratio'] for r in two])}, ≥ 0.9× in {met(two)} of {len(two)} (see crates/gpu-stage/README.md) "
        "| ≥ 0.90× |",
        "| erdma-verbs RDMA WRITE, 1 MiB, rxe in a TCG VM, quiet host (`bench/results/erdma-write-bw-rxe-quiet.json`) "
        "| {} | `ib_write_bw -d rxe0 -x 1`: {} | {} | {} |".format(*wbw(quiet)),
        "| same, host loaded by parallel builds (`bench/results/erdma-write-bw-rxe.json`) | {} | {} | {} | {} |".format(
            *wbw(loaded)),
    ] + out_rdt
    return "\n".join(out)


# The newest run with NCCL's socket peer at our connection counts (bench/gpu-stage/peers.py --only nccl-sockets).
EQUAL_SOCKETS = "gpu-stage-at-24407e5-h200x1"


def equal_sockets_row(root):
    """Ours at 1/4/8 TCP connections beside NCCL send/recv at the same socket count, one run."""
    res = {r["part"]: r["result"] for r in load(root, f"{EQUAL_SOCKETS}/gpu-stage-results.json")}
    peers = load(root, f"{EQUAL_SOCKETS}/gpu-stage-peers.json")
    pairs = [(k, res[f"tcp-sweep connections={k}"]["gib_s_median"], peers[f"nccl_socket_sendrecv_s{k}"]["gib_s_median"])
             for k in (1, 4, 8)]
    return (
        f"| gpu-stage two processes over TCP loopback, 512 MiB, one H200 GPU0 → host → GPU0, 1/4/8 connections "
        f"(`bench/results/{EQUAL_SOCKETS}/`) | {' / '.join(fixed(o, 2) for _, o, _ in pairs)} GiB/s "
        f"| NCCL send/recv over sockets at the same socket counts (its faster channel split): "
        f"{' / '.join(fixed(p, 2) for _, _, p in pairs)} GiB/s "
        f"| {' / '.join(ratio(o / p) for _, o, p in pairs)} | ≥ 1.0× at 1; ≥ 1.5× at 4 and 8 |"
    )


def rdt_rows(root):
    """Ray Direct Transport through RDMAKIT (python/rdmakit-rdt), 512 MiB CUDA tensors actor -> actor on one
    H200 over TCP loopback: every committed run (rdmakit-rdt*/rdt-h200.json), oldest first, with the object
    store and gpu-stage's stage_bench tcp measured in the same run."""
    runs = []
    for name in sorted(os.listdir(os.path.join(root, "bench", "results"))):
        path = os.path.join("bench", "results", name, "rdt-h200.json")
        if name.startswith("rdmakit-rdt") and os.path.exists(os.path.join(root, path)):
            d = load(root, os.path.join(name, "rdt-h200.json"))
            if "paths" in d:  # the issue-14 bench's layout; issue 27's is rdt27_rows
                runs.append((d["started"], name, d))
    rows = []
    for _, name, d in sorted(runs):
        big = str(d["ratios"]["bytes"])
        ours = d["paths"]["rdmakit"][big]["median_gib_s"]
        store = d["paths"]["object_store"][big]["median_gib_s"]
        r = d["ratios"]
        rows.append(
            f"| Ray RDT `tensor_transport=\"RDMAKIT\"`, 512 MiB CUDA tensor actor → actor, one H200, TCP loopback "
            f"(`bench/results/{name}/`, {d['started'][:10]}) | {fixed(ours, 2)} GiB/s "
            f"| Ray object store {fixed(store, 2)} GiB/s; gpu-stage `stage_bench tcp` without Ray "
            f"{fixed(ours / r['rdmakit_over_stage_bench_tcp'], 2)} GiB/s "
            f"| {ratio(r['rdmakit_over_object_store'], 1)} the object store; "
            f"{ratio(r['rdmakit_over_stage_bench_tcp'])} stage_bench tcp | ≥ 10×; ≥ 0.80× |"
        )
    return rows + rdt27_rows(root)


# ---------------------------------------------------------------- Ray RDT, issue 27's bench
# The newest run of issue 27's bench: (folder, JSON file). The GPU it ran on is in the JSON.
RDT27, RDT27_FILE = "rdmakit-rdt-issue27-h200x1-at-e742cd5", "rdt-h200.json"


def rdt27(root):
    return load(root, RDT27, RDT27_FILE)


def gpu_short(d):
    """`H100` / `H200` from the JSON's device name."""
    return next((m for m in ("H100", "H200") if m in d.get("gpu", "")), d.get("gpu", "GPU"))


def size_label(n):
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def met_word(ok):
    return "met" if ok else "missed"


def rdt27_rows(root):
    """The top README's summary rows from issue 27's run (paths interleaved per iteration)."""
    d = rdt27(root)
    w, t, f = d["workloads"], d["targets"], d["fits"]
    pb, sd = t["per_byte_vs_stage_bench"], t["state_dict"]
    big = w[f"sizes/{512 << 20}"]["rdmakit"]
    return [
        f"| Ray RDT `RDMAKIT`, one CUDA tensor actor → actor, one {gpu_short(d)}, TCP loopback, paths interleaved, "
        f"{big['iterations']} iterations (`bench/results/{RDT27}/`) | per-byte {gib(f['rdmakit']['per_byte_gib_s'])} "
        f"GiB/s (fit {size_label(min(f['rdmakit']['fit_sizes']))}–{size_label(max(f['rdmakit']['fit_sizes']))}); 512 MiB {gib(big['median_gib_s'])} GiB/s "
        f"| `stage_bench tcp` 512 MiB, same connections, 4 blocks between the Ray runs: "
        f"{gib(pb['stage_bench_512MiB_gib_s'])} GiB/s; object store {gib(f['object_store']['per_byte_gib_s'])} GiB/s "
        f"| {ratio(pb['ratio_fitted'])} (fit), {ratio(pb['ratio_512MiB_median'])} (512 MiB median) "
        f"| ≥ 0.95× |",
        f"| same, state dict: 254 bf16 tensors, {fixed(w['state_dict']['rdmakit']['bytes'] / 2 ** 30, 2)} GiB, one object "
        f"| {gib(w['state_dict']['rdmakit']['median_gib_s'])} GiB/s "
        f"| same bytes as one tensor {gib(w['state_dict']['one_tensor']['median_gib_s'])} GiB/s; object store "
        f"{gib(w['state_dict']['object_store']['median_gib_s'])} GiB/s "
        f"| {ratio(sd['rdmakit_over_one_tensor'])} one tensor; {ratio(sd['rdmakit_over_object_store'], 1)} the object store "
        f"| ≥ 0.85×; ≥ 20× |",
    ]


def binding_row(root, w, bf):
    """The binding's fixed cost: the bench's loop (a new object registered before each pull), and,
    where the run has small-pull*.json (bench/rdt/small_pull.py), a pull of a kept 4 KiB object."""
    runs = sorted(x for x in os.listdir(os.path.join(root, RESULTS, RDT27))
                  if x.startswith("small-pull") and x.endswith(".json"))
    kept = [load(root, RDT27, x)["median_us"]["cuda->cuda"] for x in runs]
    where = "4 KiB CUDA, two processes, no Ray"
    bench = f"{fixed(bf['us'], 0)} µs in the bench's loop (a new object made and registered before each pull)"
    if not kept:
        return f"| fixed cost in the binding alone ≤ 150 µs | {bench}, {where} | {met_word(bf['met'])} |"
    shown = " and ".join(f"{fixed(k, 0)} µs" for k in kept)
    ok = all(k <= 150 for k in kept)
    return (f"| fixed cost in the binding alone ≤ 150 µs | a kept object pulled over a kept session: {shown} "
            f"({len(kept)} run{'s' if len(kept) > 1 else ''} of `small_pull.py`, {where}); {bench} "
            f"| {met_word(ok)} (kept object); {met_word(bf['met'])} (bench loop) |")


def native_host(nat):
    """fanout_native.py's host figures, where the run recorded them: how busy the machine's CPUs were,
    other settings swept, and what a plain CPU copy moves on that machine."""
    keys = ("one_pair", "one_producer_three_consumers", "three_pairs")
    if "host_copy" not in nat:
        return ""
    busy = " / ".join(fixed(nat[k]["machine_busy_cpus"], 1) for k in keys)
    out = f" (CPUs busy {busy} of {nat['one_pair']['cpus']})"
    settings = dict.fromkeys(k.split("@", 1)[1] for k in nat if "@" in k)  # in the run's order
    for setting in settings:
        pair, three = nat.get(f"one_pair@{setting}"), nat.get(f"three_pairs@{setting}")
        if pair and three:
            out += (f"; with `{setting}`: one pair {gib(pair['aggregate_gib_s'])}, three pairs "
                    f"{gib(three['aggregate_gib_s'])}")
    most = max(nat["host_copy"], key=int)
    return out + (f"; a plain CPU copy on {most} threads moves {gib(nat['host_copy'][most]['copy_gib_s'])} GiB/s, "
                  f"and loopback TCP copies every byte twice")


def fan_out_context(root, d):
    """What bounds a fan-out on one GPU: three stage_bench at once, and the native pairs."""
    out = []
    par = d.get("stage_bench_3_parallel") or {}
    if par.get("aggregate_gib_s"):
        secs = [statistics.median(r["result"]["seconds"]) * 1e3 for r in par["runs"]]
        alone = statistics.median(statistics.median(b["result"]["seconds"]) * 1e3
                                  for b in d.get("stage_bench_blocks", []) if isinstance(b.get("result"), dict))
        out.append(f"three `stage_bench tcp` (gpu-stage alone) started together but not synchronized per "
                   f"transfer: their medians sum to {gib(par['aggregate_gib_s'])} GiB/s, yet each of their transfers "
                   f"took {fixed(min(secs), 1)}–{fixed(max(secs), 1)} ms against {fixed(alone, 1)} ms for one run "
                   f"alone: they barely overlapped, so the sum is no concurrent figure")
    for name, what in (("fanout-native.json", "without Ray, producer and consumer in separate processes"),
                       ("fanout-native-mps.json", "the same under an MPS daemon (the processes share the GPU "
                                                  "without time-slicing between their contexts)")):
        nat = load_optional(root, RDT27, name)
        if nat:
            out.append(f"{what}: one pair {gib(nat['one_pair']['aggregate_gib_s'])}, one producer serving three "
                       f"{gib(nat['one_producer_three_consumers']['aggregate_gib_s'])}, three separate pairs "
                       f"{gib(nat['three_pairs']['aggregate_gib_s'])} GiB/s in all" + native_host(nat))
    ray_mps = next(filter(None, (load_optional(root, RDT27, x) for x in ("rdt-h200-mps.json", "rdt-h100-mps.json"))),
                   None)
    if ray_mps and (ray_mps.get("targets") or {}).get("fan_out_3"):
        fw = ray_mps["workloads"]["fan_out"]
        out.append(f"Ray's fan-out under MPS: {fixed(fw['3_consumers']['median_s'] * 1e3, 2)} ms vs "
                   f"{fixed(fw['1_consumer']['median_s'] * 1e3, 2)} ms ({ratio(ray_mps['targets']['fan_out_3']['ratio'])})")
    return "; " + "; ".join(out) if out else ""


def rdt27_targets(root):
    """python/rdmakit-rdt/README.md: issue 27's targets, met or missed, from the committed run."""
    d = rdt27(root)
    w, t, f = d["workloads"], d["targets"], d["fits"]
    fc, bf, pb = t["fixed_cost_vs_object_store"], t["binding_fixed_cost"], t["per_byte_vs_stage_bench"]
    sd, ms, fo = t["state_dict"], t["many_small"], t["fan_out_3"]
    ms_ = lambda x: f"{fixed(x * 1e3, 2)} ms"  # noqa: E731
    rows = [
        "| target (issue 27) | measured (medians, same run) | result |",
        "| --- | --- | --- |",
        f"| fixed cost through Ray ≤ the object store's at 4 KiB | RDMAKIT {fixed(fc['rdmakit_ms'], 2)} ms, "
        f"object store {fixed(fc['object_store_ms'], 2)} ms, CUDA_IPC {fixed(f['cuda_ipc']['fixed_ms'], 2)} ms "
        f"({ratio(fc['ratio'])}) | {met_word(fc['met'])} |",
        binding_row(root, w, bf),
        f"| per-byte rate ≥ 0.95× `stage_bench tcp` | fit {gib(pb['rdmakit_fitted_per_byte_gib_s'])} GiB/s vs "
        f"{gib(pb['stage_bench_512MiB_gib_s'])} ({ratio(pb['ratio_fitted'])}); the 512 MiB median alone "
        f"{gib(pb['rdmakit_512MiB_median_gib_s'])} GiB/s ({ratio(pb['ratio_512MiB_median'])}) "
        f"| {met_word(pb['met_fitted'])} (fit); {met_word(pb['met_512MiB_median'])} (512 MiB median) |",
        f"| state dict ≥ 0.85× one tensor of the same bytes; ≥ 20× the object store "
        f"| {ms_(w['state_dict']['rdmakit']['median_s'])} vs {ms_(w['state_dict']['one_tensor']['median_s'])} "
        f"({ratio(sd['rdmakit_over_one_tensor'])}); object store {ms_(w['state_dict']['object_store']['median_s'])} "
        f"({ratio(sd['rdmakit_over_object_store'], 1)}); CUDA_IPC {ms_(w['state_dict']['cuda_ipc']['median_s'])} "
        f"| {met_word(sd['met_over_one_tensor'])}; {met_word(sd['met_over_object_store'])} |",
        f"| 2,048 × 64 KiB ≥ 5× the object store | {ms_(w['many_small']['rdmakit']['median_s'])} vs "
        f"{ms_(w['many_small']['object_store']['median_s'])} ({ratio(ms['rdmakit_over_object_store'])}); "
        f"as one tensor {ms_(w['many_small']['one_tensor']['median_s'])} | {met_word(ms['met_over_object_store'])} |",
        f"| fan-out to 3 consumers ≤ 1.5× one consumer (512 MiB) | {ms_(w['fan_out']['3_consumers']['median_s'])} "
        f"vs {ms_(w['fan_out']['1_consumer']['median_s'])} ({ratio(fo['ratio'])}){fan_out_context(root, d)} "
        f"| {met_word(fo['met'])} |",
        "",
        "| size | RDMAKIT | object store | CUDA_IPC | RDMAKIT GiB/s |",
        "| --- | --- | --- | --- | --- |",
    ]
    sizes = sorted(int(k.split("/")[1]) for k in w if k.startswith("sizes/"))
    for n in sizes:
        e = w[f"sizes/{n}"]
        rows.append(f"| {size_label(n)} | {ms_(e['rdmakit']['median_s'])} | {ms_(e['object_store']['median_s'])} "
                    f"| {ms_(e['cuda_ipc']['median_s'])} | {gib(e['rdmakit']['median_gib_s'])} |")
    it = {e["iterations"] for ws in w.values() for e in ws.values()}
    span = size_label(min(f["rdmakit"]["fit_sizes"])) + "–" + size_label(max(f["rdmakit"]["fit_sizes"]))
    rows += ["", f"{'/'.join(str(i) for i in sorted(it))} iterations per path, every one verified; fits "
             f"(least squares, {span}): RDMAKIT {gib(f['rdmakit']['per_byte_gib_s'])} GiB/s + "
             f"{fixed(f['rdmakit']['lsq_intercept_ms'], 2)} ms, object store "
             f"{gib(f['object_store']['per_byte_gib_s'])} GiB/s + {fixed(f['object_store']['lsq_intercept_ms'], 2)} ms."]
    return "\n".join(rows)


# ---------------------------------------------------------------- gpu-stage on GPUs (H200 runs)
# The newest run per machine kind: (folder under bench/results/, what the machine was).
CURRENT = [
    ("gpu-stage-at-1943b79-h200x1", "one H200, GPU0 → host → GPU0"),
    ("gpu-stage-at-2833875", "two H200s, GPU0 → host → GPU1"),
]


def results_by_part(results):
    return {r["part"]: r["result"] for r in results}


def current_table(root):
    """The newest run of each machine kind in CURRENT: the in-process stage beside its peers in that run."""
    rows = [
        "| machine (run) | what | ours, median GiB/s (best) | peer in the same run, median GiB/s | ratio (medians) | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for folder, machine in CURRENT:
        res = results_by_part(load(root, folder, "gpu-stage-results.json"))
        peers = load_optional(root, folder, "gpu-stage-peers.json") or {}
        ceiling = load_optional(root, folder, "gpu-stage-ceiling.json")
        where = f"{machine} (`{RESULTS}/{folder}/`)"
        ours = res["inprocess"]
        d2h, h2d = res["pinned_d2h"], res["pinned_h2d"]
        rows.append(
            f"| {where} | in-process stage, 512 MiB, {ours['chunk_bytes'] >> 20} MiB × {ours['slots']} "
            f"| **{gib(ours['gib_s_median'])}** ({gib(ours['gib_s_best'])}) "
            f"| pinned D2H alone {gib(d2h['gib_s_median'])}, H2D alone {gib(h2d['gib_s_median'])} "
            f"| **{ratio(ours['gib_s_median'] / d2h['gib_s_median'])}** vs D2H | ≥ 0.90× |"
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
                f"| **{ratio(ours['gib_s_median'] / c)}**{' of the faster' if len(together) > 1 else ''} | ≥ 0.97× |"
            )
        else:
            rows.append("| | same | | D2H and H2D at once (the copy-engine ceiling): not measured in this run | | ≥ 0.97× |")
        naive = peers.get("naive_cpu_to_cuda1")
        if naive and "gib_s_median" in naive:
            # peers.py names what it ran (`tensor.cpu().to("cuda:0") from cuda:0` on one GPU).
            what = naive.get("what", 'tensor.cpu().to("cuda:1")').split(" from ")[0]
            rows.append(
                f"| | same | {gib(ours['gib_s_median'])} | `{what}` {gib(naive['gib_s_median'])} "
                f"| **{ratio(ours['gib_s_median'] / naive['gib_s_median'], 1)}** | ≥ 30× |"
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
                f"{gib(p['gib_s_median'])} | **{ratio(r['gib_s_median'] / p['gib_s_median'])}** | {target} |"
            )
    return "\n".join(rows)


def sweep_table(root):
    """The chunk × buffers sweep of the newest one-GPU run."""
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
        data = load_optional(root, folder, "gpu-stage-small.json")
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
                f"| {p['label']} | {fixed(ours, 1)} | {fixed(floor, 1)} | {ratio(ours / floor)} | {target} |"
            )
        return "\n".join(out)
    return ("Not measured yet: no committed run has `gpu-stage-small.json` "
            "(`stage_bench small`, run by `bench/gpu-stage/run_gpu.sh`).")


# ---------------------------------------------------------------- cluster scale (bench/scale)
def growth(xs, ys):
    """The log-log slope from the smallest to the largest size: 1.0 is linear, below it sublinear."""
    import math
    if ys[0] <= 0 or ys[-1] <= 0:
        return None
    return math.log(ys[-1] / ys[0]) / math.log(xs[-1] / xs[0])


def fit_at(xs, ys, x):
    """The least-squares line through (xs, ys), read at x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((a - mx) ** 2 for a in xs)
    b = sum((a - mx) * (c - my) for a, c in zip(xs, ys)) / sxx if sxx else 0.0
    return my + b * (x - mx)


def rdmakit_requests(r):
    """rdmakit's own requests by verb and resource (the audit log's user agent), as `list nodes 2`."""
    mine = (r.get("requests_by_agent") or {}).get("rdmakit") or {}
    return ", ".join(f"{k} {v}" for k, v in sorted(mine.items())) or "(no audit log)"


def scale_table(root):
    doc = load_optional(root, "scale", "preflight.json")
    if not doc:
        return "Not measured yet: no `bench/results/scale/preflight.json` (`bench/scale/run.py 100 300 1000`)."
    rs = sorted(doc["results"], key=lambda r: r["nodes"])
    out = [
        "| nodes | probed pods | wall | rdmakit CPU | rdmakit peak RSS | rdmakit's API requests | "
        "API server CPU | whole machine CPU | planted faults named |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rs:
        named = sum(1 for v in r["planted_faults_named"].values() if v)
        out.append(
            f"| {r['nodes']} | {r['probed_pods']} | {fixed(r['wall_s'], 1)} s | {fixed(r['rdmakit_cpu_s'], 2)} s | "
            f"{fixed(r['rdmakit_peak_rss_mib'], 1)} MiB | {rdmakit_requests(r)} | {fixed(r['apiserver_cpu_s'], 1)} s | "
            f"{fixed(r['machine_cpu_s'], 0)} s | {named} of {len(r['planted_faults_named'])} kinds "
            f"({sum(r['planted_faults'].values())} nodes) |"
        )
    checks = [r for r in rs if r.get("check")]
    if checks:
        out += [
            "",
            "`rdmakit check --no-matrix` on the same pool (a check pod per eligible node created, Ready, its facts "
            "read by exec, deleted):",
            "",
            "| nodes | checked nodes | wall | rdmakit CPU | rdmakit peak RSS | rdmakit's API requests | "
            "planted faults named | verdict |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in checks:
            c = r["check"]
            named = sum(1 for v in c["planted_faults_named"].values() if v)
            out.append(
                f"| {r['nodes']} | {c['checked_nodes']} | {fixed(c['wall_s'], 1)} s | {fixed(c['rdmakit_cpu_s'], 2)} s | "
                f"{fixed(c['rdmakit_peak_rss_mib'], 1)} MiB | {rdmakit_requests(c)} | "
                f"{named} of {len(c['planted_faults_named'])} kinds | {c['verdict']} |"
            )
    node_only = [r for r in rs if r.get("node_preflight")]
    if node_only:
        out += [
            "",
            "Node-level `rdmakit preflight --profile P` (no pods) on the whole pool, by each shape's profile: the N "
            "eRDMA nodes, and N/4 each of DRANET (a ResourceSlice per node), EFA and shared-device nodes beside them:",
            "",
            "| nodes in the pool | profile | its nodes | eligible | wall | rdmakit peak RSS | API requests (all clients) "
            "| planted faults named | no other node left out |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in node_only:
            for profile, p in r["node_preflight"].items():
                kinds = {k: v for k, v in p["planted_faults_named"].items() if k != "only_those"}
                named = sum(1 for v in kinds.values() if v)
                lists = ", ".join(f"{k} {v}" for k, v in sorted(p["requests"].items()) if k.startswith("LIST"))
                total = r["nodes"] + sum(q["shape_nodes"] for k, q in r["node_preflight"].items()
                                         if k != "aliyun-erdma")
                out.append(
                    f"| {total} | {profile} | {p['shape_nodes']} | {p['eligible']} | {fixed(p['wall_s'], 2)} s | "
                    f"{fixed(p['rdmakit_peak_rss_mib'], 1)} MiB | {lists} | {named} of "
                    f"{len(kinds)} kinds ({sum(p['planted_faults'].values())} nodes) | "
                    f"{'yes' if p['planted_faults_named'].get('only_those') else 'no'} |"
                )
    if len(rs) < 2:
        return "\n".join(out)
    xs = [r["nodes"] for r in rs]
    out.append("")
    slopes = []
    for key, label in (("wall_s", "wall"), ("rdmakit_cpu_s", "rdmakit CPU"),
                       ("rdmakit_peak_rss_mib", "rdmakit peak RSS"), ("apiserver_cpu_s", "API server CPU")):
        g = growth(xs, [r[key] for r in rs])
        if g is not None:
            slopes.append(f"{label} {fixed(g, 2)}")
    if len(checks) == len(rs):
        for key, label in (("wall_s", "check wall"), ("rdmakit_peak_rss_mib", "check peak RSS")):
            g = growth(xs, [r["check"][key] for r in rs])
            if g is not None:
                slopes.append(f"{label} {fixed(g, 2)}")
    if len(node_only) == len(rs):
        for profile in rs[-1]["node_preflight"]:
            g = growth(xs, [r["node_preflight"][profile]["wall_s"] for r in rs])
            if g is not None:
                slopes.append(f"node-level preflight wall ({profile}) {fixed(g, 2)}")
    out.append(f"Growth from {xs[0]} to {xs[-1]} nodes, as the exponent of nodes (1.00 is linear): "
               + ", ".join(slopes) + ".")
    # What the exec-bound walls are made of: the simulated nodes' CPU for each exec, which rises with the load
    # of a saturated 2-core machine, not rdmakit's own cost.
    per_pod = [r["machine_cpu_s"] / max(r["probed_pods"], 1) for r in rs]
    out.append("")
    out.append(
        "The exec-bound walls (`preflight --pods`, `check`) follow the simulated nodes' cost, not rdmakit's: the "
        "whole machine spent " + ", ".join(f"{fixed(c, 2)} CPU-s a probed pod at {x}" for x, c in zip(xs, per_pod))
        + " nodes (the emulator's processes contend for the same two cores as the pool grows), while rdmakit's "
        "own CPU and memory grow below linear."
    )
    if all("machine_idle_cpu_per_s" in r for r in rs):
        idle = [r["machine_idle_cpu_per_s"] for r in rs]
        above = [(r["machine_cpu_s"] - i * r["wall_s"]) / max(r["probed_pods"], 1) for r, i in zip(rs, idle)]
        out.append(
            "The simulated cluster's own load with rdmakit idle (10 s before each run: KWOK's node heartbeats, the "
            "controllers, the API server's watches) was " + ", ".join(f"{fixed(i, 2)} CPU-s/s at {x}" for x, i in zip(xs, idle))
            + " nodes, of the machine's 2; above it, a probed pod cost " + ", ".join(f"{fixed(a, 2)}" for a in above)
            + " CPU-s: what grows with the pool is the cluster's background, not the cost of an exec."
        )
    big = 5000
    wall = fit_at(xs, [r["wall_s"] for r in rs], big)
    cpu = fit_at(xs, [r["rdmakit_cpu_s"] for r in rs], big)
    rss = fit_at(xs, [r["rdmakit_peak_rss_mib"] for r in rs], big)
    api = fit_at(xs, [r["apiserver_cpu_s"] for r in rs], big)
    machine = fit_at(xs, [r["machine_cpu_s"] for r in rs], big)
    share = rs[-1]["rdmakit_cpu_s"] / rs[-1]["machine_cpu_s"] if rs[-1]["machine_cpu_s"] else 0
    out.append("")
    out.append(
        f"On paper, {big:,} nodes by the same lines (least squares through the measured points): wall "
        f"{fixed(wall / 60, 1)} min, rdmakit CPU {fixed(cpu, 0)} s and peak RSS {fixed(rss, 0)} MiB, API server CPU "
        f"{fixed(api, 0)} s; lists stay at one request per 500 objects ({big // 500} pages each for nodes and pods), "
        f"execs one per pod ({big:,}). The limit hit first is exec throughput: rdmakit's own share of the "
        f"machine's CPU at {xs[-1]} nodes was {fixed(100 * share, 1)} %, the rest the simulated nodes' exec handling "
        f"(the API server's exec proxy, the KWOK controller and the Python node emulator: about "
        f"{fixed(rs[-1]['machine_cpu_s'] / max(rs[-1]['probed_pods'], 1), 2)} CPU-s a pod on this machine), so on "
        f"this 2-core machine {big:,} nodes would take {fixed(machine / 120, 0)} min of both cores. On a real cluster "
        f"each exec is served by its own node's kubelet, and the bound is the width of the fan-out (`--parallel`, "
        f"64 at most by default) against the API server's exec streams, long before rdmakit's memory or the API "
        f"server's QPS for the paged lists."
    )
    return "\n".join(out)


def validate_cost_table(root):
    """`validate --strict` and `lint` on the 50 MB file (bench/validate-cost/run.sh), beside the target."""
    doc = load(root, "validate-cost.json")
    t = doc["target"]
    out = [
        f"On a {doc['input_bytes'] / 1e6:.0f} MB file of {doc['input_documents']:,} documents "
        f"(`bench/validate-cost/run.sh`, {doc['cpus']} cores, at {doc['commit']}; target at most "
        f"{t['wall_s']:g} s and {t['max_rss_kib'] // 1024} MiB each):",
        "",
        "| command | runs | wall (median, range) | peak RSS | within target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for cmd, line in (("validate", "`rdmakit validate --strict`"), ("lint", "`rdmakit lint`")):
        runs = [r for r in doc["runs"] if r["command"] == cmd]
        walls = [r["wall_s"] for r in runs]
        rss = max(r["max_rss_kib"] for r in runs)
        ok = all(r["wall_s"] <= t["wall_s"] and r["max_rss_kib"] <= t["max_rss_kib"] and r["exit"] == 0
                 for r in runs)
        out.append(f"| {line} | {len(runs)} | {fixed(statistics.median(walls), 2)} s "
                   f"({fixed(min(walls), 2)}–{fixed(max(walls), 2)}) | {rss / 1024:.1f} MiB | "
                   f"{'yes' if ok else 'no'} |")
    return "\n".join(out)


# ---------------------------------------------------------------- driver
# file -> block name -> generator
BLOCKS = {
    "README.md": {"summary": readme_summary, "scale": scale_table, "validate-cost": validate_cost_table},
    "python/rdmakit-rdt/README.md": {"rdt-issue27": rdt27_targets},
    "crates/gpu-stage/README.md": {
        "rdma-rxe-runs": rdma_runs_table,
        "rdma-rxe-summary": rdma_summary,
        "h200-current": current_table,
        "h200-sweep": sweep_table,
        "small-transfers": small_table,
    },
}


def render(root, rel, text):
    for name, gen in BLOCKS[rel].items():
        begin = f"<!-- bench-tables:begin {name} -->"
        end = f"<!-- bench-tables:end {name} -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            raise SystemExit(f"bench/tables.py: {rel} needs exactly one `{begin}` and one `{end}` line")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{gen(root)}\n{end}{tail}"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff when a file drifted")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="repository root (default: the one this script is in)")
    ap.add_argument("--files", action="store_true",
                    help="print the files (relative to the root) whose tables this script writes, and exit")
    a = ap.parse_args()
    if a.files:
        print("\n".join(BLOCKS))
        return 0
    drifted = []
    for rel in BLOCKS:
        path = os.path.join(a.root, rel)
        with open(path, encoding="utf-8") as f:
            old = f.read()
        new = render(a.root, rel, old)
        if new == old:
            continue
        if a.check:
            drifted.append(rel)
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), f"{rel} (committed)", f"{rel} (from {RESULTS}/)"))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"bench/tables.py: rewrote {rel}")
    if drifted:
        print(f"bench/tables.py: {', '.join(drifted)} differ from {RESULTS}/; run `python3 bench/tables.py` "
              "and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
