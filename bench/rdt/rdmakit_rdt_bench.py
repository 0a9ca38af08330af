#!/usr/bin/env python3
"""Actor -> actor tensor transfers through Ray Direct Transport ``RDMAKIT`` against its peers,
measured in the same run, verified on every iteration, written as JSON.

Paths (each at every size, same producer/consumer actors, same node):

- ``rdmakit``: ``@ray.method(tensor_transport="RDMAKIT")`` (gpu-stage over TCP loopback).
- ``object_store``: the same method without ``tensor_transport`` (Ray's object store).
- ``cuda_ipc``: Ray's own ``CUDA_IPC`` transport (same-node best case, reported for honesty;
  CUDA only, ``--no-cuda-ipc`` skips it).
- ``native``: the same rdmakit binding between two plain processes, no Ray
  (``rdmakit_rdt.SendChannel``/``RecvChannel``): Ray's overhead is ``rdmakit`` against this.
- ``stage_bench`` (with ``--stage-bench PATH``): gpu-stage's own Rust TCP bench
  (``stage_bench tcp --src 0 --dst 0``), the figure in crates/gpu-stage/README.md.

Timing: the producer creates (and for RDT registers) the object first; the clock starts in the
driver when the consumer's task is submitted and stops in the consumer once the data is on its
device (``torch.cuda.synchronize``). Then the consumer compares every byte with the expected
pattern (not timed). Median and best of ``--iters`` timed runs after ``--warmup`` runs.

On the GPU machine (one H200, torch, no Ray):

    pip install ray-2.60.0-cp312-*.whl rdmakit_rdt-0.1.0-cp310-abi3-*.whl
    python bench/rdt/rdmakit_rdt_bench.py --out bench/results/rdmakit-rdt/rdt-h200.json \
        [--stage-bench target/release/examples/stage_bench]

Without a GPU, ``--device cpu --array numpy`` runs the same code on numpy arrays (a smoke test
of the script; the numbers mean little).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

MIB = 1 << 20
GIB = 1 << 30
SIZES = {"4KiB": 4 << 10, "1MiB": MIB, "16MiB": 16 * MIB, "64MiB": 64 * MIB, "512MiB": 512 * MIB}


def parse_size(s: str) -> int:
    if s in SIZES:
        return SIZES[s]
    for suffix, mult in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10), ("B", 1)):
        if s.endswith(suffix):
            return int(s[: -len(suffix)]) * mult
    return int(s)


# ---- the data: same pattern on both sides, different per iteration -------------------------


def make(n: int, seed: int, device: str, array: str):
    if array == "numpy":
        return ((np.arange(n, dtype=np.int64) * (seed + 1) + seed) % 251).astype(np.uint8)
    import torch

    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else "cpu"
    t = (torch.arange(n, dtype=torch.int64, device=dev) * (seed + 1) + seed) % 251
    return t.to(torch.uint8)


def verify(x, n: int, seed: int, device: str, array: str) -> bool:
    if array == "numpy":
        return bool(np.array_equal(x, make(n, seed, device, array)))
    import torch

    return bool(torch.equal(x, make(n, seed, device, array)))


def sync(device: str, array: str) -> None:
    if array == "torch" and device == "cuda":
        import torch

        torch.cuda.synchronize()


# ---- Ray paths -----------------------------------------------------------------------------


def ray_paths(args, sizes: List[int], results: Dict[str, Any], save) -> None:
    import ray

    import rdmakit_rdt

    rdmakit_rdt.register()
    env = {k: v for k, v in os.environ.items() if k.startswith("RDMAKIT_")}
    ray.init(include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    gpus = 0.5 if args.device == "cuda" else 0
    device, array = args.device, args.array
    use_ipc = args.device == "cuda" and not args.no_cuda_ipc

    @ray.remote(num_gpus=gpus, enable_tensor_transport=True)
    class Producer:
        def prepare(self, n, seed):
            self.t = make(n, seed, device, array)
            sync(device, array)

        @ray.method(tensor_transport="RDMAKIT")
        def rdmakit(self):
            return self.t

        def object_store(self):
            return self.t

        if use_ipc:

            @ray.method(tensor_transport="CUDA_IPC")
            def cuda_ipc(self):
                return self.t

        def stats(self):
            return rdmakit_rdt.stats()

    @ray.remote(num_gpus=gpus, enable_tensor_transport=True)
    class Consumer:
        def consume(self, x, n, seed):
            sync(device, array)
            done = time.perf_counter()
            on_device = str(getattr(x, "device", "cpu"))
            return done, verify(x, n, seed, device, array), on_device

        def stats(self):
            return rdmakit_rdt.stats()

    p, c = Producer.remote(), Consumer.remote()
    paths = ["rdmakit", "object_store"] + (["cuda_ipc"] if use_ipc else [])
    for path in paths:
        for n in sizes:
            times, verified, where = [], 0, None
            for it in range(args.warmup + args.iters):
                seed = it % 200
                ray.get(p.prepare.remote(n, seed))
                ref = getattr(p, path).remote()
                ray.wait([ref], fetch_local=False)  # the object exists (RDT: metadata is back)
                start = time.perf_counter()
                done, ok, where = ray.get(c.consume.remote(ref, n, seed))
                if it >= args.warmup:
                    times.append(done - start)
                    verified += int(ok)
                elif not ok:
                    raise SystemExit(f"{path} {n} B: warm-up data mismatch")
                del ref
            record(results, path, n, times, verified, {"consumer_device": where})
            save()
    results["rdmakit_stats"] = {"producer": ray.get(p.stats.remote()),
                                "consumer": ray.get(c.stats.remote())}
    ray.shutdown()


# ---- the binding without Ray ---------------------------------------------------------------


def _native_receiver(port_q, done_q, sizes, args):
    import rdmakit_rdt as r

    listener = r.Listener("127.0.0.1:0")
    port_q.put(listener.port)
    ch = listener.accept(r.Config(), r.Abort())
    for n in sizes:
        for it in range(args.warmup + args.iters):
            if args.array == "numpy":
                dst = np.empty(n, np.uint8)
            else:
                import torch

                dev = "cuda" if args.device == "cuda" else "cpu"
                dst = torch.empty(n, dtype=torch.uint8, device=dev)
            r.recv(ch, f"{n}-{it}", [dst])
            sync(args.device, args.array)
            done = time.perf_counter()
            done_q.put((n, it, done, verify(dst, n, it % 200, args.device, args.array)))


def native_path(args, sizes: List[int], results: Dict[str, Any], save) -> None:
    import rdmakit_rdt as r

    ctx = mp.get_context("spawn")
    port_q, done_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_native_receiver, args=(port_q, done_q, sizes, args))
    proc.start()
    port = port_q.get(timeout=120)
    ch = r.SendChannel.connect(f"127.0.0.1:{port}", r.Config(), r.Abort())
    for n in sizes:
        times, verified = [], 0
        for it in range(args.warmup + args.iters):
            src = make(n, it % 200, args.device, args.array)
            sync(args.device, args.array)
            start = time.perf_counter()
            r.send(ch, f"{n}-{it}", [src])
            _, _, done, ok = done_q.get(timeout=300)
            if it >= args.warmup:
                times.append(done - start)
                verified += int(ok)
        record(results, "native", n, times, verified, {})
        save()
    ch.close()
    proc.join(timeout=60)


def stage_bench_path(args, n: int, results: Dict[str, Any], save) -> None:
    # --json prints the results (a JSON array) on stdout, as `rdmakit bench stage --json` does.
    cmd = [args.stage_bench, "tcp", "--size", f"{n}B", "--src", "0", "--dst", "0",
           "--iters", str(args.iters), "--warmup", str(args.warmup), "--json"]
    if args.device != "cuda":
        cmd += ["--backend", "host"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    results["stage_bench"] = {"command": " ".join(cmd), "rc": proc.returncode,
                              "stdout": proc.stdout[-4000:], "stderr": proc.stderr[-4000:]}
    if proc.returncode == 0:
        try:
            results["stage_bench"]["result"] = json.loads(proc.stdout)
        except ValueError:
            pass
    save()


# ---- bookkeeping ---------------------------------------------------------------------------


def record(results, path, n, times, verified, extra) -> None:
    gib = [n / t / GIB for t in times if t > 0]
    entry = {
        "bytes": n,
        "iterations": len(times),
        "verified_iterations": verified,
        "seconds": times,
        "median_s": statistics.median(times) if times else None,
        "median_gib_s": statistics.median(gib) if gib else None,
        "best_gib_s": max(gib) if gib else None,
        **extra,
    }
    results["paths"].setdefault(path, {})[str(n)] = entry
    print(f"{path:<13} {n:>11} B  median {entry['median_gib_s'] or 0:8.3f} GiB/s  "
          f"best {entry['best_gib_s'] or 0:8.3f}  verified {verified}/{len(times)}", flush=True)


def ratios(results) -> Dict[str, Any]:
    p = results["paths"]
    n = str(max((int(k) for path in p.values() for k in path), default=0))

    def med(path):
        return (p.get(path, {}).get(n) or {}).get("median_gib_s")

    out: Dict[str, Any] = {"bytes": int(n)}
    rk = med("rdmakit")
    for peer, target in (("object_store", ">= 10x"), ("native", ">= 0.8x"), ("cuda_ipc", None)):
        v = med(peer)
        if rk and v:
            out[f"rdmakit_over_{peer}"] = rk / v
            if target:
                out[f"rdmakit_over_{peer}_target"] = target
    sb = ((results.get("stage_bench") or {}).get("result") or {})
    sb = sb[0] if isinstance(sb, list) and sb else sb
    sb_gib = sb.get("gib_s_median") if isinstance(sb, dict) else None
    if rk and sb_gib:
        out["rdmakit_over_stage_bench_tcp"] = rk / sb_gib
        out["rdmakit_over_stage_bench_tcp_target"] = ">= 0.8x"
    if med("native") and sb_gib:
        out["native_over_stage_bench_tcp"] = med("native") / sb_gib
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="4KiB,1MiB,64MiB,512MiB")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--array", choices=["torch", "numpy"], default="torch")
    ap.add_argument("--no-cuda-ipc", action="store_true")
    ap.add_argument("--skip", default="", help="comma list of: ray,native")
    ap.add_argument("--stage-bench", help="path of gpu-stage's stage_bench example binary")
    ap.add_argument("--out", default="bench/results/rdmakit-rdt/rdt.json")
    args = ap.parse_args()
    if args.array == "numpy" and args.device == "cuda":
        ap.error("numpy arrays live on the CPU: use --device cpu with --array numpy")
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    import rdmakit_rdt

    results: Dict[str, Any] = {
        "what": "actor -> actor transfer through RDMAKIT vs Ray object store, CUDA_IPC, and the "
                "rdmakit binding / gpu-stage stage_bench without Ray",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "rdmakit_rdt": rdmakit_rdt.__version__,
        "config": repr(rdmakit_rdt.Config()),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("RDMAKIT_", "CUDA_", "NCCL_"))},
        "args": vars(args),
        "paths": {},
    }
    try:
        import ray

        results["ray"] = ray.__version__
    except ImportError:
        results["ray"] = None
    if args.array == "torch":
        import torch

        results["torch"] = torch.__version__
        if args.device == "cuda":
            results["gpu"] = torch.cuda.get_device_name(0)

    def save() -> None:
        results["ratios"] = ratios(results)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=2, default=str)
        os.replace(tmp, args.out)

    skip = set(filter(None, args.skip.split(",")))
    if "native" not in skip:
        native_path(args, sizes, results, save)
    if "ray" not in skip:
        ray_paths(args, sizes, results, save)
    if args.stage_bench:
        stage_bench_path(args, max(sizes), results, save)
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    save()
    print(json.dumps(results["ratios"], indent=2))


if __name__ == "__main__":
    main()
