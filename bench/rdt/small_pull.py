"""Where a small pull's time goes (the GPU machine: torch, one GPU; no Ray needed).

    python small_pull.py --out small-pull.json [--iters 300]

A producer process serves one 4 KiB tensor from its `Server`; this process pulls it over one kept
session, `--iters` times per case, the cases interleaved per round. Cases by where the producer's
and the consumer's bytes live (cpu/cuda each), plus the consumer's own steps timed apart: the
event wait before the write (`ready_for_write`) and the `torch.cuda.synchronize()` after it.
Every pull's bytes are checked. Medians in microseconds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import secrets
import statistics
import time

N = 4096
CASES = [("cpu", "cpu"), ("cuda", "cpu"), ("cpu", "cuda"), ("cuda", "cuda")]


def producer(cmd_q, reply_q):
    import torch

    import rdmakit_rdt as r
    from rdmakit_rdt.buffers import pinned

    server = r.Server("127.0.0.1:0", r.Config())
    keep = []
    for dev in ("cpu", "cuda"):
        t = (torch.arange(N, dtype=torch.int32) % 251).to(torch.uint8).to(dev)
        torch.cuda.synchronize()
        token = secrets.token_bytes(32)
        specs, k = pinned([t])
        server.register(f"obj-{dev}", specs, token, k, None)
        keep.append(t)
        reply_q.put((dev, server.address, token))
    # Then, as the bench's binding path does: a new tensor made and registered for each pull.
    while (cmd := cmd_q.get()) is not None:
        op, tag = cmd
        if op == "drop":
            server.unregister(tag)
            continue
        t = (torch.arange(N, dtype=torch.int32) % 251).to(torch.uint8).to("cuda")
        torch.cuda.synchronize()
        token = secrets.token_bytes(32)
        specs, k = pinned([t])
        server.register(tag, specs, token, k, None)
        reply_q.put(token)
    server.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=300)
    args = ap.parse_args()
    import torch

    import rdmakit_rdt as r
    from rdmakit_rdt.buffers import exported, ready_for_write

    ctx = mp.get_context("spawn")
    cmd_q, reply_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=producer, args=(cmd_q, reply_q))
    proc.start()
    objs = {}
    for _ in range(2):
        dev, addr, token = reply_q.get(timeout=120)
        objs[dev] = (addr, token)
    want = (torch.arange(N, dtype=torch.int32) % 251).to(torch.uint8)
    ch = r.RecvChannel.connect(objs["cpu"][0], r.Config(), r.Abort(), objs["cpu"][1])
    dsts = {d: torch.zeros(N, dtype=torch.uint8, device=d) for d in ("cpu", "cuda")}
    times = {f"{s}->{d}": [] for s, d in CASES}
    steps = {"ready_for_write_us": [], "pull_call_us": [], "synchronize_us": []}
    bad = 0
    for i in range(args.iters + 20):
        for src, dst in CASES:
            out = dsts[dst]
            out.zero_()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with exported([out], writable=True) as specs:
                ready_for_write([out])
                t1 = time.perf_counter()
                ch.pull(f"obj-{src}", specs, objs[src][1])
                t2 = time.perf_counter()
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            bad += int(not torch.equal(out.cpu(), want))
            if i >= 20:
                times[f"{src}->{dst}"].append((t3 - t0) * 1e6)
                if (src, dst) == ("cuda", "cuda"):
                    steps["ready_for_write_us"].append((t1 - t0) * 1e6)
                    steps["pull_call_us"].append((t2 - t1) * 1e6)
                    steps["synchronize_us"].append((t3 - t2) * 1e6)
    fresh = []
    out = dsts["cuda"]
    for i in range(args.iters + 20):
        tag = f"fresh-{i}"
        cmd_q.put(("make", tag))
        token = reply_q.get(timeout=60)
        out.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with exported([out], writable=True) as specs:
            ready_for_write([out])
            ch.pull(tag, specs, token)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        cmd_q.put(("drop", tag))
        bad += int(not torch.equal(out.cpu(), want))
        if i >= 20:
            fresh.append((t1 - t0) * 1e6)
    times["cuda->cuda, a new object made and registered before each pull"] = fresh
    ch.close()
    cmd_q.put(None)
    proc.join(timeout=60)
    res = {
        "what": "4 KiB pulls over one kept session between two processes, median us, every pull checked",
        "gpu": torch.cuda.get_device_name(0),
        "iters": args.iters,
        "wrong_pulls": bad,
        "median_us": {k: statistics.median(v) for k, v in times.items()},
        "p90_us": {k: sorted(v)[len(v) * 9 // 10] for k, v in times.items()},
        "cuda_to_cuda_steps_median_us": {k: statistics.median(v) for k, v in steps.items()},
    }
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2, default=str)
    print(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    main()
