"""What limits a fan-out on one GPU (the GPU machine: torch, one GPU; no Ray needed).

    python fanout_native.py --out fanout-native.json [--iters 10] [--mib 512]
        [--sweep RDMAKIT_TCP_CONNECTIONS=12,16 ...] [--device cpu]

Without Ray, `--mib` MiB CUDA tensors pulled over kept sessions, every pull checked:
- ``one_pair``: one producer process, one consumer process;
- ``one_producer_three_consumers``: one producer process serving three consumer processes at
  once (what a Ray fan-out does);
- ``three_pairs``: three producer processes, each serving its own consumer, all at once.
If three pairs move about three times one pair's bytes per second but one producer serving three
does not, the limit is in the one producer process (its server, or its GPU context's share of the
device); if neither does, it is the GPU's time-slicing between the processes' contexts (a
transfer spans two contexts here: the producer's device→host copies and the consumer's
host→device ones), or the host. For the host, each configuration also records how busy the
machine's CPUs were (``machine_busy_cpus``, from /proc/stat, over the first consumer's pulls; steal
time counts as busy), and ``host_copy`` measures what the host's memory moves with plain CPU copies
(a copy reads and writes each byte; a loopback pull writes each byte into pinned memory by DMA,
copies it into the socket and out again, and reads it by DMA: six memory crossings;
``memory_traffic_gib_s`` is twice the copy rate, an approximation). Each ``--sweep NAME=V1,V2`` adds
one pair and three pairs with that binding setting (``RDMAKIT_TCP_CONNECTIONS``, ``RDMAKIT_CHUNK``,
...) at each value. ``--device cpu`` runs it on host tensors, without a GPU (a smoke run).
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


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def producer(nbytes, reply_q, stop_q, device):
    import torch

    import rdmakit_rdt as r
    from rdmakit_rdt.buffers import pinned

    server = r.Server("127.0.0.1:0", r.Config())
    t = (torch.arange(nbytes, dtype=torch.int64, device=device) % 251).to(torch.uint8)
    sync(torch, device)
    token = secrets.token_bytes(32)
    specs, keep = pinned([t])
    server.register("obj", specs, token, keep, None)
    reply_q.put((server.address, token))
    stop_q.get()
    server.close()


def cpu_jiffies():
    """(busy, total) jiffies over all CPUs, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return sum(v) - idle, sum(v)


def consumer(nbytes, addr, token, iters, go, done_q, first, device):
    import torch

    import rdmakit_rdt as r
    from rdmakit_rdt.buffers import exported, ready_for_write

    out = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    want_sum = int((torch.arange(nbytes, dtype=torch.int64, device=device) % 251).sum())
    ch = r.RecvChannel.connect(addr, r.Config(), r.Abort(), token)
    with exported([out], writable=True) as specs:  # warm: the session's first pull
        ch.pull("obj", specs, token)
    sync(torch, device)
    spans, bad = [], 0
    cpu_s, busy, total = 0.0, 0, 0
    for i in range(iters):
        go.wait()  # every consumer of a round starts together
        out.zero_()
        sync(torch, device)
        j0 = cpu_jiffies() if first else (0, 0)
        c0 = time.process_time()
        t0 = time.time()
        with exported([out], writable=True) as specs:
            ready_for_write([out])
            ch.pull("obj", specs, token)
        sync(torch, device)
        spans.append((t0, time.time()))
        cpu_s += time.process_time() - c0
        if first:
            busy, total = (x + b - a for x, a, b in zip((busy, total), j0, cpu_jiffies()))
        bad += int(int(out.to(torch.int64).sum()) != want_sum)
    ch.close()
    # Where a bound could sit on the host: the CPUs this process may run on, and the CPU seconds
    # all its threads used over the timed pulls (beside their wall-clock seconds).
    cpu = {"cpus_allowed": len(os.sched_getaffinity(0)), "cpu_s": cpu_s,
           "wall_s": sum(b - a for a, b in spans)}
    if first:  # the whole machine, over this consumer's pulls (jiffies: 10 ms, so summed over rounds)
        cpu["machine_busy_cpus"] = busy / total * os.cpu_count() if total else None
    done_q.put((spans, bad, cpu))


def run(ctx, nbytes, producers, consumers_per, iters, device):
    reply_q, stop_q, done_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    prods = [ctx.Process(target=producer, args=(nbytes, reply_q, stop_q, device)) for _ in range(producers)]
    for p in prods:
        p.start()
    addrs = [reply_q.get(timeout=120) for _ in prods]
    n = producers * consumers_per
    go = ctx.Barrier(n)
    cons = [ctx.Process(target=consumer, args=(nbytes, a, t, iters, go, done_q, k == 0, device))
            for k, (a, t) in enumerate((a, t) for a, t in addrs for _ in range(consumers_per))]
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
            "consumer_cpu": [r[2] for r in res],
            "machine_busy_cpus": next(r[2]["machine_busy_cpus"] for r in res if "machine_busy_cpus" in r[2]),
            "cpus": os.cpu_count()}


def host_copy(mib=1024, reps=5):
    """GiB/s a plain CPU copy of `mib` MiB moves (pageable host memory), at several thread counts."""
    import torch

    src = torch.ones(mib * MIB, dtype=torch.uint8)
    dst = torch.empty_like(src)
    out = {}
    for threads in sorted({1, 4, 8, os.cpu_count()}):
        torch.set_num_threads(threads)
        dst.copy_(src)
        secs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            dst.copy_(src)
            secs.append(time.perf_counter() - t0)
        out[str(threads)] = {"copy_gib_s": mib / 1024 / statistics.median(secs),
                             "memory_traffic_gib_s": 2 * mib / 1024 / statistics.median(secs)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
                    help="a binding setting (RDMAKIT_*) and the values to run one pair and three pairs at")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: tensors in host memory, a smoke run of the script (no GPU)")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    nbytes = args.mib * MIB
    import torch

    res = {"what": __doc__.split("\n")[0],
           "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "none (--device cpu)",
           "bytes": nbytes, "iters": args.iters}
    res["one_pair"] = run(ctx, nbytes, 1, 1, args.iters, args.device)
    res["one_producer_three_consumers"] = run(ctx, nbytes, 1, 3, args.iters, args.device)
    res["three_pairs"] = run(ctx, nbytes, 3, 1, args.iters, args.device)
    keys = ["one_pair", "one_producer_three_consumers", "three_pairs"]
    for sweep in args.sweep:
        name, _, values = sweep.partition("=")
        if not name.startswith("RDMAKIT_") or not values:
            ap.error(f"--sweep {sweep!r}: expected RDMAKIT_NAME=V1,V2")
        for v in values.split(","):
            os.environ[name] = v  # the spawned processes read it
            for k, (p, c) in (("one_pair", (1, 1)), ("three_pairs", (3, 1))):
                res[f"{k}@{name}={v}"] = run(ctx, nbytes, p, c, args.iters, args.device)
                res[f"{k}@{name}={v}"]["setting"] = {name: v}
                keys.append(f"{k}@{name}={v}")
        os.environ.pop(name, None)
    res["host_copy"] = host_copy()
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    for k in keys:
        r = res[k]
        print(f"{k:32s} round {r['round_median_ms']:8.1f} ms  aggregate {r['aggregate_gib_s']:6.2f} GiB/s  "
              f"wrong {r['wrong_pulls']}  machine CPUs busy {r['machine_busy_cpus'] or 0:.1f}/{r['cpus']}")
    for t, h in res["host_copy"].items():
        print(f"host copy, {t:>2} threads: {h['copy_gib_s']:6.2f} GiB/s copied ({h['memory_traffic_gib_s']:.1f} GiB/s of memory traffic)")


if __name__ == "__main__":
    main()
