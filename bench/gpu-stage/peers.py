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
- nccl_socket_sendrecv_s{N} (`--nccl-sockets 1,4,8`): the same with N sockets in all, like our N TCP
                      connections. NCCL opens NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD sockets per
                      channel, and send/recv to a network peer uses NCCL_NCHANNELS_PER_NET_PEER channels
                      (2 by default, so its default is 2 sockets, and NTHREADS=N alone gives 2N). Each
                      split of N into C channels x N/C threads (C = 1, 2; one socket per thread) runs as
                      nccl_socket_sendrecv_s{N}_c{C}; s{N} is NCCL's best of them (by median).
On one GPU (--src == --dst) each rank gets its own NCCL_HOSTID: NCCL refuses two ranks on one device
of one host (duplicate GPU), and with distinct host IDs it treats the ranks as two hosts, so the
transfer takes NCCL's network path (NET/Socket over lo) - GPU0 -> host -> socket -> host -> GPU0, the
same path our TCP transport takes.

Every figure is verified: the received tensor is compared with the sent one on every iteration.
The JSON file is rewritten after each peer, so one failing peer loses nothing else.
Usage: peers.py --out FILE [--src 0] [--dst 1] [--size-mib 512] [--iters 5] [--warmup 2]
                [--only naive,pinned,floor,nccl,nccl-sockets] [--nccl-sockets 1,4,8]
"""
import argparse
import json
import os
import re
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


def timed(what, iters, warmup, devices, reset, body, result):
    """warmup + iters rounds of reset() (untimed), body() (timed, the devices synchronized on both
    sides) and a check that result() equals the wanted tensor; returns the measured seconds."""
    secs = []
    for i in range(warmup + iters):
        want = reset()
        for d in devices:
            torch.cuda.synchronize(d)
        t = time.perf_counter()
        body()
        for d in devices:
            torch.cuda.synchronize(d)
        dt = time.perf_counter() - t
        if not torch.equal(result(), want):
            raise RuntimeError(f"{what} iteration {i}: data mismatch")
        if i >= warmup:
            secs.append(dt)
    return secs


def naive(n, iters, warmup, src, dst):
    x = pattern(n, f"cuda:{src}")
    want = pattern(n, f"cuda:{dst}")
    got = {}

    def body():
        got["y"] = x.cpu().to(f"cuda:{dst}")

    secs = timed("naive", iters, warmup, {src, dst}, lambda: want, body, lambda: got.pop("y"))
    return summary(n, secs, True, what=f'tensor.cpu().to("cuda:{dst}") from cuda:{src}')


def pinned_d2h(n, iters, warmup, src):
    x = pattern(n, f"cuda:{src}")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    want = x.cpu()
    secs = timed("pinned", iters, warmup, {src}, lambda: (host.zero_(), want)[1],
                 lambda: host.copy_(x, non_blocking=True), lambda: host)
    return summary(n, secs, True, what=f"torch pinned host tensor copy_(cuda:{src} tensor, non_blocking=True)")


def pinned_h2d(n, iters, warmup, dst):
    host = pattern(n, "cpu").pin_memory()
    y = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst}")
    want = pattern(n, f"cuda:{dst}")
    secs = timed("pinned H2D", iters, warmup, {dst}, lambda: (y.zero_(), want)[1],
                 lambda: y.copy_(host, non_blocking=True), lambda: y)
    return summary(n, secs, True, what=f"torch cuda:{dst} tensor copy_(pinned host tensor, non_blocking=True)")


def pinned_floor(n, iters, warmup, src, dst):
    """One pinned D2H then one pinned H2D of the same bytes, back to back, timed together."""
    x = pattern(n, f"cuda:{src}")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    y = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst}")
    want = pattern(n, f"cuda:{dst}")

    def body():
        host.copy_(x, non_blocking=True)
        torch.cuda.synchronize(src)
        y.copy_(host, non_blocking=True)

    secs = timed("pinned floor", iters, warmup, {src, dst}, lambda: (y.zero_(), want)[1], body, lambda: y)
    return summary(n, secs, True, what=f"torch pinned D2H (cuda:{src}) then pinned H2D (cuda:{dst}), back to back")


def transport_seen(log_path):
    """The lines of one rank's NCCL log (kept beside the JSON) that say which transport and how many sockets it used."""
    keep = ("via NET/", "Using network", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_HOSTID",
            "NET/Socket :", "Duplicate GPU")
    try:
        with open(log_path, errors="replace") as f:
            lines = [ln.strip() for ln in f if any(k in ln for k in keep)]
    except OSError as e:
        return {"error": f"no NCCL log: {e}"}
    via = sorted({ln.split(" via ")[1].split()[0] for ln in lines if " via " in ln})
    # "Channel 01/1 : 0[0] -> 1[0] [receive] via NET/Socket/0/Shared": connection index 1 is send/recv's.
    p2p = {m.group(1) for m in (re.search(r"Channel (\d+)/1 : .* via NET/", ln) for ln in lines) if m}
    return {"via": via, "p2p_channels": len(p2p), "lines": lines[:40]}


def nccl_worker(rank, n, iters, warmup, port, result_path, devices, sockets, channels):
    if devices[0] == devices[1]:
        # Two "hosts" to NCCL (see the module doc): no duplicate-GPU refusal, and no P2P/SHM between them.
        os.environ["NCCL_HOSTID"] = f"rdmakit-peer-rank{rank}"
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NCCL_P2P_DISABLE="1",
        NCCL_SHM_DISABLE="1",
        NCCL_IB_DISABLE="1",
        NCCL_SOCKET_IFNAME="lo",
        NCCL_NVLS_ENABLE="0",
        # What NCCL chose, kept in the result: init/net/env lines only, all logged before the timed loop.
        NCCL_DEBUG="INFO",
        NCCL_DEBUG_SUBSYS="INIT,NET,ENV,P2P",
        NCCL_DEBUG_FILE=f"{result_path}.rank{rank}.log",
    )
    os.environ.update(nccl_socket_env(sockets, channels))
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
            json.dump({"seconds": secs, "verified": ok, "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
                       "transport": transport_seen(f"{result_path}.rank{rank}.log")}, f)
    dist.barrier()
    dist.destroy_process_group()


def nccl_socket_env(sockets, channels):
    """N sockets in all: `channels` channels to the peer, N/channels helper threads of one socket each."""
    if not sockets:
        return {}
    return dict(NCCL_NCHANNELS_PER_NET_PEER=str(channels), NCCL_MAX_P2P_NCHANNELS=str(channels),
                NCCL_SOCKET_NTHREADS=str(sockets // channels), NCCL_NSOCKS_PERTHREAD="1")


def nccl(n, iters, warmup, tmp, src, dst, sockets=None, channels=1):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    path = f"{tmp}.nccl-{f's{sockets}-c{channels}' if sockets else 'default'}.json"
    mp.spawn(nccl_worker, args=(n, iters, warmup, port, path, (src, dst), sockets, channels), nprocs=2, join=True)
    with open(path) as f:
        r = json.load(f)
    os.remove(path)
    env = "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1"
    if src == dst:
        env += " NCCL_HOSTID=rdmakit-peer-rank{0,1}"
    env += "".join(f" {k}={v}" for k, v in nccl_socket_env(sockets, channels).items())
    out = summary(n, r["seconds"], r["verified"],
                  what=f"NCCL send/recv, 2 processes (cuda:{src} -> cuda:{dst}), {env}, 127.0.0.1",
                  sockets=sockets, channels=channels if sockets else None, nccl_version=r["nccl_version"],
                  transport=r["transport"])
    if sockets and r["transport"].get("p2p_channels") != channels:
        raise RuntimeError(f"NCCL used {r['transport'].get('p2p_channels')} send/recv channels, not {channels}: "
                           f"the socket count is not {sockets}")
    return out


def nccl_best(name, n, iters, warmup, tmp, src, dst, sockets, res):
    """Each split of `sockets` into 1 or 2 channels, kept as {name}_c{C}; returns NCCL's best."""
    tried = []
    for c in (1, 2):
        if sockets % c:
            continue
        try:
            res[f"{name}_c{c}"] = nccl(n, iters, warmup, tmp, src, dst, sockets, c)
            tried.append(res[f"{name}_c{c}"])
        except Exception as e:  # one failing split must not lose the other
            traceback.print_exc()
            res[f"{name}_c{c}"] = {"error": f"{type(e).__name__}: {e}"}
    if not tried:
        raise RuntimeError(f"no split of {sockets} sockets ran")
    return dict(max(tried, key=lambda x: x["gib_s_median"]), best_of=[f"{name}_c{x['channels']}" for x in tried])


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
                    help="socket counts in all for the nccl-sockets part (channels x threads, one socket each)")
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
            (f"nccl_socket_sendrecv_s{k}",
             (lambda k=k: nccl_best(f"nccl_socket_sendrecv_s{k}", n, a.iters, a.warmup, a.out, src, dst, k, res)))
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
