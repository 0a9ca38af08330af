#!/usr/bin/env python3
"""Peer figures for the gpu-stage benchmarks, measured in the same run as stage_bench.

- naive_cpu_to_cuda1: tensor.cpu().to("cuda:1") (pageable staging, what a naive stage does)
- torch_pinned_d2h:   one copy_ of the whole tensor into a pinned host tensor (cross-check of
                      stage_bench's own pinned_d2h)
- nccl_socket_sendrecv: NCCL send/recv between two processes on 127.0.0.1 with
                      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 (NCCL's own
                      host-staged socket path)

Every figure is verified: the received tensor is compared with the sent one on every iteration.
The JSON file is rewritten after each peer, so one failing peer loses nothing else.
Usage: peers.py --out FILE [--size-mib 512] [--iters 5] [--warmup 2]
"""
import argparse
import json
import os
import socket
import statistics
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

GIB = float(1 << 30)


def pattern(n, device):
    # Deterministic bytes, identical on every device and process.
    x = torch.arange(n, dtype=torch.int64, device=device)
    return ((x * 2654435761) >> 7).remainder(251).to(torch.uint8)


def summary(n, seconds, verified, **extra):
    rates = sorted(n / s / GIB for s in seconds)
    out = {
        "bytes": n,
        "seconds": seconds,
        "gib_s_best": rates[-1],
        "gib_s_median": rates[len(rates) // 2],
        "verified": verified,
    }
    out.update(extra)
    return out


def naive(n, iters, warmup):
    x = pattern(n, "cuda:0")
    want = pattern(n, "cuda:1")
    secs = []
    for i in range(warmup + iters):
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        t = time.perf_counter()
        y = x.cpu().to("cuda:1")
        torch.cuda.synchronize(1)
        dt = time.perf_counter() - t
        if not torch.equal(y, want):
            raise RuntimeError(f"naive iteration {i}: data mismatch")
        if i >= warmup:
            secs.append(dt)
        del y
    return summary(n, secs, True, what='tensor.cpu().to("cuda:1")')


def pinned_d2h(n, iters, warmup):
    x = pattern(n, "cuda:0")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    want = x.cpu()
    secs = []
    for i in range(warmup + iters):
        host.zero_()
        torch.cuda.synchronize(0)
        t = time.perf_counter()
        host.copy_(x, non_blocking=True)
        torch.cuda.synchronize(0)
        dt = time.perf_counter() - t
        if not torch.equal(host, want):
            raise RuntimeError(f"pinned iteration {i}: data mismatch")
        if i >= warmup:
            secs.append(dt)
    return summary(n, secs, True, what="torch pinned host tensor copy_(cuda:0 tensor, non_blocking=True)")


def nccl_worker(rank, n, iters, warmup, port, result_path):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NCCL_P2P_DISABLE="1",
        NCCL_SHM_DISABLE="1",
        NCCL_IB_DISABLE="1",
        NCCL_SOCKET_IFNAME="lo",
        NCCL_NVLS_ENABLE="0",
    )
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device(f"cuda:{rank}"))
    dev = f"cuda:{rank}"
    if rank == 0:
        buf = pattern(n, dev)
    else:
        buf = torch.empty(n, dtype=torch.uint8, device=dev)
        want = pattern(n, dev)
    secs = []
    ok = True
    for i in range(warmup + iters):
        if rank == 1:
            buf.zero_()
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        t = time.perf_counter()
        if rank == 0:
            dist.send(buf, dst=1)
        else:
            dist.recv(buf, src=0)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        if rank == 1 and not torch.equal(buf, want):
            ok = False
        if i >= warmup:
            secs.append(dt)
    if rank == 1:
        with open(result_path, "w") as f:
            json.dump({"seconds": secs, "verified": ok, "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))}, f)
    dist.barrier()
    dist.destroy_process_group()


def nccl(n, iters, warmup, tmp):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    path = tmp + ".nccl.json"
    mp.spawn(nccl_worker, args=(n, iters, warmup, port, path), nprocs=2, join=True)
    with open(path) as f:
        r = json.load(f)
    os.remove(path)
    return summary(n, r["seconds"], r["verified"],
                   what="NCCL send/recv, 2 processes, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1, 127.0.0.1",
                   nccl_version=r["nccl_version"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", default="naive,pinned,nccl")
    a = ap.parse_args()
    n = a.size_mib << 20
    res = {"env": {"torch": torch.__version__, "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}}
    parts = {
        "naive": ("naive_cpu_to_cuda1", lambda: naive(n, a.iters, a.warmup)),
        "pinned": ("torch_pinned_d2h", lambda: pinned_d2h(n, a.iters, a.warmup)),
        "nccl": ("nccl_socket_sendrecv", lambda: nccl(n, a.iters, a.warmup, a.out)),
    }
    for key in a.only.split(","):
        name, fn = parts[key]
        try:
            res[name] = fn()
            print(f"{name:<24} median {res[name]['gib_s_median']:8.2f} GiB/s  best {res[name]['gib_s_best']:8.2f}  verified={res[name]['verified']}", flush=True)
        except Exception as e:  # one failing peer must not lose the others
            traceback.print_exc()
            res[name] = {"error": f"{type(e).__name__}: {e}"}
        torch.cuda.empty_cache()
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
