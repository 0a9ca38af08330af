#!/usr/bin/env python3
"""What the two copy engines reach when they run at the same time with no dependency between them.

The in-process stage runs GPU0's device→host copy and GPU1's host→device copy concurrently
through the same host memory and PCIe root complex. This measures that ceiling directly: one
pinned D2H of N bytes on cuda:SRC and one pinned H2D of N bytes on cuda:DST (separate pinned
buffers, separate streams) started together; the rate is N / wall time of both. It also runs
each copy alone in the same process for the side-by-side figure. With --src 0 --dst 0 (one GPU)
both directions share that GPU's link, which is the ceiling of GPU0 → host → GPU0.

Two host footprints: whole-size buffers (N bytes each way, as one big copy), and ring-sized ones
(`_together_ring`: N bytes each way as N/chunk copies cycling through slots x chunk of pinned memory,
the footprint of the stage's own ring). A ring that fits the host's caches can run faster than the
whole-size copies when host memory is the bottleneck, so the ceiling is the faster of the two.
Usage: ceiling.py --out FILE [--src 0] [--dst 1] [--size-mib 512] [--iters 10] [--chunk-mib 4] [--slots 8]
"""
import argparse
import json
import statistics
import time

import torch

GIB = float(1 << 30)


def timed(fn, iters, devices):
    fn()  # warm-up
    secs = []
    for _ in range(iters):
        for d in devices:
            torch.cuda.synchronize(d)
        t = time.perf_counter()
        fn()
        for d in devices:
            torch.cuda.synchronize(d)
        secs.append(time.perf_counter() - t)
    return secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--src", type=int, default=0)
    ap.add_argument("--dst", type=int, default=None, help="default 1, or 0 with one GPU")
    ap.add_argument("--chunk-mib", type=int, default=4, help="chunk of the ring-sized variant")
    ap.add_argument("--slots", type=int, default=8, help="slots of the ring-sized variant")
    a = ap.parse_args()
    n = a.size_mib << 20
    src = a.src
    dst = a.dst if a.dst is not None else (1 if torch.cuda.device_count() > 1 else 0)
    devices = sorted({src, dst})
    src0 = torch.randint(0, 255, (n,), dtype=torch.uint8, device=f"cuda:{src}")
    dst1 = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst}")
    host_a = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host_b = torch.randint(0, 255, (n,), dtype=torch.uint8).pin_memory()
    s0 = torch.cuda.Stream(device=src)
    s1 = torch.cuda.Stream(device=dst)

    def d2h():
        with torch.cuda.stream(s0):
            host_a.copy_(src0, non_blocking=True)

    def h2d():
        with torch.cuda.stream(s1):
            dst1.copy_(host_b, non_blocking=True)

    def both():
        d2h()
        h2d()

    chunk = a.chunk_mib << 20
    ring_a = torch.empty(a.slots * chunk, dtype=torch.uint8, pin_memory=True)
    ring_b = torch.randint(0, 255, (a.slots * chunk,), dtype=torch.uint8).pin_memory()

    def both_ring():
        # Copy i of each direction is queued next to the other's, so both streams start together.
        for i in range(n // chunk):
            j = (i % a.slots) * chunk
            with torch.cuda.stream(s0):
                ring_a[j:j + chunk].copy_(src0[i * chunk:(i + 1) * chunk], non_blocking=True)
            with torch.cuda.stream(s1):
                dst1[i * chunk:(i + 1) * chunk].copy_(ring_b[j:j + chunk], non_blocking=True)

    out = {"bytes": n, "env": {"torch": torch.__version__, "src": src, "dst": dst,
                                "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}}
    for name, fn in [(f"d2h_cuda{src}_alone", d2h), (f"h2d_cuda{dst}_alone", h2d),
                     (f"d2h_cuda{src}_and_h2d_cuda{dst}_together", both),
                     (f"d2h_cuda{src}_and_h2d_cuda{dst}_together_ring", both_ring)]:
        secs = timed(fn, a.iters, devices)
        rates = sorted(n / s / GIB for s in secs)
        out[name] = {"seconds": secs, "gib_s_best": rates[-1],
                     "gib_s_median": statistics.median(rates)}
        if name.endswith("_ring"):
            out[name].update(chunk_bytes=chunk, slots=a.slots)
        print(f"{name:42s} best {rates[-1]:6.2f} GiB/s  median {statistics.median(rates):6.2f}")
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
