"""What limits a fan-out on one GPU (the GPU machine: torch, one GPU; no Ray needed).

    python fanout_native.py --out fanout-native.json [--iters 10] [--mib 512]

Without Ray, `--mib` MiB CUDA tensors pulled over kept sessions, every pull checked:
- ``one_pair``: one producer process, one consumer process;
- ``one_producer_three_consumers``: one producer process serving three consumer processes at
  once (what a Ray fan-out does);
- ``three_pairs``: three producer processes, each serving its own consumer, all at once.
If three pairs move about three times one pair's bytes per second but one producer serving three
does not, the limit is in the one producer process (its server, or its GPU context's share of the
device); if neither does, it is the GPU's time-slicing between the processes' contexts (a
transfer spans two contexts here: the producer's device→host copies and the consumer's
host→device ones), or the host.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import secrets
import statistics
import time

MIB = 1 << 20


def producer(nbytes, reply_q, stop_q):
    import torch

    import rdmakit_rdt as r
    from rdmakit_rdt.buffers import pinned

    server = r.Server("127.0.0.1:0", r.Config())
    t = (torch.arange(nbytes, dtype=torch.int64, device="cuda") % 251).to(torch.uint8)
    torch.cuda.synchronize()
    token = secrets.token_bytes(32)
    specs, keep = pinned([t])
    server.register("obj", specs, token, keep, None)
    reply_q.put((server.address, token))
    stop_q.get()
    server.close()


def consumer(nbytes, addr, token, iters, go, done_q):
    import torch

    import rdmakit_rdt as r
    from rdmakit_rdt.buffers import exported, ready_for_write

    out = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
    want_sum = int((torch.arange(nbytes, dtype=torch.int64, device="cuda") % 251).sum())
    ch = r.RecvChannel.connect(addr, r.Config(), r.Abort(), token)
    with exported([out], writable=True) as specs:  # warm: the session's first pull
        ch.pull("obj", specs, token)
    torch.cuda.synchronize()
    spans, bad = [], 0
    cpu0 = time.process_time()
    for i in range(iters):
        go.wait()  # every consumer of a round starts together
        out.zero_()
        torch.cuda.synchronize()
        t0 = time.time()
        with exported([out], writable=True) as specs:
            ready_for_write([out])
            ch.pull("obj", specs, token)
        torch.cuda.synchronize()
        spans.append((t0, time.time()))
        bad += int(int(out.to(torch.int64).sum()) != want_sum)
    ch.close()
    # Where a bound could sit on the host: the CPUs this process may run on, and the CPU seconds
    # all its threads used over the timed pulls (beside their wall-clock seconds).
    cpu = {"cpus_allowed": len(os.sched_getaffinity(0)), "cpu_s": time.process_time() - cpu0,
           "wall_s": sum(b - a for a, b in spans)}
    done_q.put((spans, bad, cpu))


def run(ctx, nbytes, producers, consumers_per, iters):
    reply_q, stop_q, done_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    prods = [ctx.Process(target=producer, args=(nbytes, reply_q, stop_q)) for _ in range(producers)]
    for p in prods:
        p.start()
    addrs = [reply_q.get(timeout=120) for _ in prods]
    n = producers * consumers_per
    go = ctx.Barrier(n)
    cons = [ctx.Process(target=consumer, args=(nbytes, a, t, iters, go, done_q))
            for a, t in addrs for _ in range(consumers_per)]
    for c in cons:
        c.start()
    res = [done_q.get(timeout=600) for _ in cons]
    for c in cons:
        c.join(timeout=60)
    for _ in prods:
        stop_q.put(None)
    for p in prods:
        p.join(timeout=60)
    # Per round: from the first start to the last end over all consumers.
    rounds = [max(r[0][i][1] for r in res) - min(r[0][i][0] for r in res) for i in range(iters)]
    med = statistics.median(rounds)
    return {"producers": producers, "consumers": n, "round_median_ms": med * 1e3,
            "aggregate_gib_s": n * nbytes / med / (1 << 30),
            "wrong_pulls": sum(r[1] for r in res), "rounds_ms": [x * 1e3 for x in rounds],
            "consumer_cpu": [r[2] for r in res]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--mib", type=int, default=512)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    nbytes = args.mib * MIB
    import torch

    res = {"what": __doc__.split("\n")[0], "gpu": torch.cuda.get_device_name(0),
           "bytes": nbytes, "iters": args.iters}
    res["one_pair"] = run(ctx, nbytes, 1, 1, args.iters)
    res["one_producer_three_consumers"] = run(ctx, nbytes, 1, 3, args.iters)
    res["three_pairs"] = run(ctx, nbytes, 3, 1, args.iters)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    for k in ("one_pair", "one_producer_three_consumers", "three_pairs"):
        r = res[k]
        print(f"{k:32s} round {r['round_median_ms']:8.1f} ms  aggregate {r['aggregate_gib_s']:6.2f} GiB/s  wrong {r['wrong_pulls']}")


if __name__ == "__main__":
    main()
