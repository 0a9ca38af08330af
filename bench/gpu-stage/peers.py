#!/usr/bin/env python3
"""Peer figures for the gpu-stage benchmarks, measured in the same run as stage_bench.

GPU `--src` sends to GPU `--dst` (default 0 → 1, or 0 → 0 on a one-GPU machine: GPU0 → host → GPU0
measures the same staging path, both copy directions on one GPU's link).

- naive_cpu_to_cuda1: tensor.cpu().to(f"cuda:{dst}") (pageable staging, what a naive stage does; the
                      key keeps its old name whatever --dst is, so older summaries stay comparable)
- torch_pinned_d2h:   one copy_ of the whole tensor into a pinned host tensor (cross-check of
                      stage_bench's own pinned_d2h); torch_pinned_h2d the other way, on --dst;
                      torch_pinned_d2h_then_h2d both back to back (the floor of a staged transfer)
- nccl_socket_sendrecv: NCCL send/recv between two processes on 127.0.0.1 with
                      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 (NCCL's own
                      host-staged socket path), NCCL's default socket count
- nccl_socket_sendrecv_s{N} (`--nccl-sockets 1,4,8`): the same with NCCL_SOCKET_NTHREADS=N and
                      NCCL_NSOCKS_PERTHREAD=1, N sockets like our N TCP connections
NCCL needs two GPUs: it refuses two ranks on one device, so with --src == --dst the NCCL peers are
recorded as skipped, with that reason, and not measured.

Every figure is verified: the received tensor is compared with the sent one on every iteration.
The JSON file is rewritten after each peer, so one failing peer loses nothing else.
Usage: peers.py --out FILE [--src 0] [--dst 1] [--size-mib 512] [--iters 5] [--warmup 2]
                [--only naive,pinned,floor,nccl,nccl-sockets] [--nccl-sockets 1,4,8]
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


def naive(n, iters, warmup, src, dst):
    x = pattern(n, f"cuda:{src}")
    want = pattern(n, f"cuda:{dst}")
    secs = []
    for i in range(warmup + iters):
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        t = time.perf_counter()
        y = x.cpu().to(f"cuda:{dst}")
        torch.cuda.synchronize(dst)
        dt = time.perf_counter() - t
        if not torch.equal(y, want):
            raise RuntimeError(f"naive iteration {i}: data mismatch")
        if i >= warmup:
            secs.append(dt)
        del y
    return summary(n, secs, True, what=f'tensor.cpu().to("cuda:{dst}") from cuda:{src}')


def pinned_d2h(n, iters, warmup, src):
    x = pattern(n, f"cuda:{src}")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    want = x.cpu()
    secs = []
    for i in range(warmup + iters):
        host.zero_()
        torch.cuda.synchronize(src)
        t = time.perf_counter()
        host.copy_(x, non_blocking=True)
        torch.cuda.synchronize(src)
        dt = time.perf_counter() - t
        if not torch.equal(host, want):
            raise RuntimeError(f"pinned iteration {i}: data mismatch")
        if i >= warmup:
            secs.append(dt)
    return summary(n, secs, True, what=f"torch pinned host tensor copy_(cuda:{src} tensor, non_blocking=True)")


def pinned_h2d(n, iters, warmup, dst):
    host = pattern(n, "cpu").pin_memory()
    y = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst}")
    want = pattern(n, f"cuda:{dst}")
    secs = []
    for i in range(warmup + iters):
        y.zero_()
        torch.cuda.synchronize(dst)
        t = time.perf_counter()
        y.copy_(host, non_blocking=True)
        torch.cuda.synchronize(dst)
        dt = time.perf_counter() - t
        if not torch.equal(y, want):
            raise RuntimeError(f"pinned H2D iteration {i}: data mismatch")
        if i >= warmup:
            secs.append(dt)
    return summary(n, secs, True, what=f"torch cuda:{dst} tensor copy_(pinned host tensor, non_blocking=True)")


def pinned_floor(n, iters, warmup, src, dst):
    """One pinned D2H then one pinned H2D of the same bytes, back to back, timed together."""
    x = pattern(n, f"cuda:{src}")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    y = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst}")
    want = pattern(n, f"cuda:{dst}")
    secs = []
    for i in range(warmup + iters):
        y.zero_()
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        t = time.perf_counter()
        host.copy_(x, non_blocking=True)
        torch.cuda.synchronize(src)
        y.copy_(host, non_blocking=True)
        torch.cuda.synchronize(dst)
        dt = time.perf_counter() - t
        if not torch.equal(y, want):
            raise RuntimeError(f"pinned floor iteration {i}: data mismatch")
        if i >= warmup:
            secs.append(dt)
    return summary(n, secs, True, what=f"torch pinned D2H (cuda:{src}) then pinned H2D (cuda:{dst}), back to back")


def nccl_worker(rank, n, iters, warmup, port, result_path, devices, sockets):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NCCL_P2P_DISABLE="1",
        NCCL_SHM_DISABLE="1",
        NCCL_IB_DISABLE="1",
        NCCL_SOCKET_IFNAME="lo",
        NCCL_NVLS_ENABLE="0",
    )
    if sockets:
        # N sockets in total, one per helper thread: the same count as our N TCP connections.
        os.environ.update(NCCL_SOCKET_NTHREADS=str(sockets), NCCL_NSOCKS_PERTHREAD="1")
    gpu = devices[rank]
    torch.cuda.set_device(gpu)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device(f"cuda:{gpu}"))
    dev = f"cuda:{gpu}"
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


NCCL_ONE_GPU = ("not measured: NCCL refuses two ranks on one GPU (ncclInvalidUsage, duplicate GPU), so the "
                "socket peer needs two GPUs; run with --src 0 --dst 1 on a machine with two")


def nccl(n, iters, warmup, tmp, src, dst, sockets=None):
    if src == dst:
        return {"skipped": NCCL_ONE_GPU}
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    path = tmp + ".nccl.json"
    mp.spawn(nccl_worker, args=(n, iters, warmup, port, path, (src, dst), sockets), nprocs=2, join=True)
    with open(path) as f:
        r = json.load(f)
    os.remove(path)
    env = "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1"
    if sockets:
        env += f" NCCL_SOCKET_NTHREADS={sockets} NCCL_NSOCKS_PERTHREAD=1"
    return summary(n, r["seconds"], r["verified"],
                   what=f"NCCL send/recv, 2 processes (cuda:{src} -> cuda:{dst}), {env}, 127.0.0.1",
                   sockets=sockets, nccl_version=r["nccl_version"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--src", type=int, default=0, help="sending GPU")
    ap.add_argument("--dst", type=int, default=None, help="receiving GPU (default 1, or 0 with one GPU)")
    ap.add_argument("--only", default="naive,pinned,floor,nccl")
    ap.add_argument("--nccl-sockets", default="1,4,8",
                    help="socket counts for the nccl-sockets part (NCCL_SOCKET_NTHREADS, one socket each)")
    a = ap.parse_args()
    n = a.size_mib << 20
    src = a.src
    dst = a.dst if a.dst is not None else (1 if torch.cuda.device_count() > 1 else 0)
    res = {"env": {"torch": torch.__version__, "src": src, "dst": dst,
                   "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}}
    parts = {
        "naive": [("naive_cpu_to_cuda1", lambda: naive(n, a.iters, a.warmup, src, dst))],
        "pinned": [("torch_pinned_d2h", lambda: pinned_d2h(n, a.iters, a.warmup, src)),
                   ("torch_pinned_h2d", lambda: pinned_h2d(n, a.iters, a.warmup, dst))],
        "floor": [("torch_pinned_d2h_then_h2d", lambda: pinned_floor(n, a.iters, a.warmup, src, dst))],
        "nccl": [("nccl_socket_sendrecv", lambda: nccl(n, a.iters, a.warmup, a.out, src, dst))],
        "nccl-sockets": [
            (f"nccl_socket_sendrecv_s{k}", (lambda k=k: nccl(n, a.iters, a.warmup, a.out, src, dst, k)))
            for k in (int(x) for x in a.nccl_sockets.split(","))
        ],
    }
    todo = [p for key in a.only.split(",") for p in parts[key]]
    for name, fn in todo:
        try:
            res[name] = fn()
            if "skipped" in res[name]:
                print(f"{name:<24} skipped: {res[name]['skipped']}", flush=True)
            else:
                print(f"{name:<24} median {res[name]['gib_s_median']:8.2f} GiB/s  best {res[name]['gib_s_best']:8.2f}  verified={res[name]['verified']}", flush=True)
        except Exception as e:  # one failing peer must not lose the others
            traceback.print_exc()
            res[name] = {"error": f"{type(e).__name__}: {e}"}
        torch.cuda.empty_cache()
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
