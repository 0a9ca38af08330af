#!/usr/bin/env python3
"""The rdmakit binding's cost per object without Ray: two processes on this machine, host memory
(numpy), TCP loopback; the clock runs from the sender's ``send`` call to the receiver's ``recv``
returning (both ``perf_counter``, one clock on Linux). Prints one JSON line per size.

    RDMAKIT_BACKEND=host python bench/rdt/fixed_cost.py 0,4096,65536,65537,1048576 [iters]
"""

import json
import multiprocessing as mp
import statistics
import sys
import time

import numpy as np

import rdmakit_rdt as r


def _receiver(q, dq, sizes, iters):
    listener = r.Listener("127.0.0.1:0")
    q.put(listener.port)
    ch = listener.accept(r.Config(), r.Abort())
    for n in sizes:
        dst = np.empty(n, np.uint8)
        for i in range(iters):
            r.recv(ch, f"{n}-{i}", [dst])
            done = time.perf_counter()
            dq.put((done, bool((dst == i % 251).all())))


def main():
    sizes = [int(s) for s in sys.argv[1].split(",")]
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    ctx = mp.get_context("spawn")
    q, dq = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_receiver, args=(q, dq, sizes, iters))
    p.start()
    ch = r.SendChannel.connect(f"127.0.0.1:{q.get(timeout=60)}", r.Config(), r.Abort())
    for n in sizes:
        ts, ok = [], 0
        for i in range(iters):
            src = np.full(n, i % 251, np.uint8)
            start = time.perf_counter()
            r.send(ch, f"{n}-{i}", [src])
            done, good = dq.get(timeout=60)
            ts.append(done - start)
            ok += good
        body = sorted(ts[iters // 10:])  # the first tenth is warm-up
        print(json.dumps({"bytes": n, "iterations": len(body), "verified": ok,
                          "median_us": statistics.median(body) * 1e6,
                          "p10_us": body[len(body) // 10] * 1e6}), flush=True)
    p.join(timeout=60)


if __name__ == "__main__":
    main()
