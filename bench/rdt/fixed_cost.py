#!/usr/bin/env python3
"""The rdmakit binding's cost per object without Ray, as Ray runs it (a pull): two processes on
this machine, host memory (numpy), TCP loopback. The producer process registers each object with
its ``Server``; the consumer pulls it over one kept session, timed from the ``pull`` call to its
return (``perf_counter``). Prints one JSON line per size (``register_us``: the producer's
registration, what Ray's extract adds).

    RDMAKIT_BACKEND=host python bench/rdt/fixed_cost.py 0,4096,65536,65537,1048576 [iters]
"""

import json
import multiprocessing as mp
import secrets
import statistics
import sys
import time

import numpy as np

import rdmakit_rdt as r
from rdmakit_rdt.buffers import exported, pinned


def _producer(cmd_q, reply_q):
    server = r.Server("127.0.0.1:0", r.Config())
    while (cmd := cmd_q.get()) is not None:
        op, tag, n, value = cmd
        if op == "drop":
            server.unregister(tag)
            continue
        src = np.full(n, value, np.uint8)
        token = secrets.token_bytes(32)
        start = time.perf_counter()
        specs, keep = pinned([src])
        server.register(tag, specs, token, keep, None)
        reply_q.put((server.address, token, time.perf_counter() - start))
    server.close()


def main():
    sizes = [int(s) for s in sys.argv[1].split(",")]
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    ctx = mp.get_context("spawn")
    cmd_q, reply_q = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_producer, args=(cmd_q, reply_q))
    p.start()
    ch = None
    for n in sizes:
        ts, regs, ok = [], [], 0
        dst = np.empty(n, np.uint8)
        for i in range(iters):
            tag = f"{n}-{i}"
            cmd_q.put(("make", tag, n, i % 251))
            addr, token, reg = reply_q.get(timeout=60)
            if ch is None:
                ch = r.RecvChannel.connect(addr, r.Config(), r.Abort(), token)
            start = time.perf_counter()
            with exported([dst], writable=True) as specs:
                ch.pull(tag, specs, token)
            ts.append(time.perf_counter() - start)
            regs.append(reg)
            ok += bool((dst == i % 251).all())
            cmd_q.put(("drop", tag, n, 0))
        body = sorted(ts[iters // 10:])  # the first tenth is warm-up
        print(json.dumps({"bytes": n, "iterations": len(body), "verified": ok,
                          "median_us": statistics.median(body) * 1e6,
                          "p10_us": body[len(body) // 10] * 1e6,
                          "register_median_us": statistics.median(regs[iters // 10:]) * 1e6}),
              flush=True)
    cmd_q.put(None)
    p.join(timeout=60)


if __name__ == "__main__":
    main()
