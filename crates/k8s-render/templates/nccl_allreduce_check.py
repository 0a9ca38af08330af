#!/usr/bin/env python3
"""Two-rank NCCL all_reduce across two nodes, without Ray: is it @@FABRIC@@/NCCL or the Ray setup?

Rendered by rdmakit for profile @@PROFILE@@. Usage, with the pods of @@PODS_FILE@@ running on two nodes:

    for p in @@POD0@@ @@POD1@@; do kubectl cp nccl_allreduce_check.py $p:/tmp/nccl_allreduce_check.py; done
    MASTER=$(kubectl get pod @@POD0@@ -o jsonpath='{.status.podIP}')
    kubectl exec @@POD0@@ -- python /tmp/nccl_allreduce_check.py --rank 0 --master-addr $MASTER &
    kubectl exec @@POD1@@ -- python /tmp/nccl_allreduce_check.py --rank 1 --master-addr $MASTER
    wait

A/B against TCP: run both ranks again with @@TCP_KEY@@=@@TCP_VALUE@@, e.g.
    kubectl exec @@POD0@@ -- env @@TCP_KEY@@=@@TCP_VALUE@@ python /tmp/nccl_allreduce_check.py --rank 0 --master-addr $MASTER

Each rank prints the time of every all_reduce and how many bytes its RDMA devices (@@DEVICE_GLOB@@,
excluded: @@DEVICE_EXCLUDE@@; counter @@TX_COUNTER@@) sent meanwhile. Over RDMA the counter grows by
about the data moved; with
@@TCP_KEY@@=@@TCP_VALUE@@ the time can be similar but the counter stays flat: that tells the two paths apart.
NCCL logs go to @@NCCL_DEBUG_FILE@@ when NCCL_DEBUG is set (look for "@@LOG_MARKER@@").
"""

import argparse
import fnmatch
import os
import sys
import time

import torch
import torch.distributed as dist

MIB = 1024 * 1024
FABRIC = @@FABRIC_PY@@
DEVICE_GLOB = @@DEVICE_GLOB_PY@@
TX_COUNTER = @@TX_COUNTER_PY@@
# Bytes per counter unit (mlx5 port_xmit_data counts 4-byte words).
COUNTER_MULTIPLIER = @@MULTIPLIER@@


# Devices DEVICE_GLOB matches that carry none of this traffic (a front-end or storage NIC).
DEVICE_EXCLUDE = @@DEVICE_EXCLUDE_PY@@
SYSFS = "/sys/class/infiniband"


def counter_devices():
    """This pod's devices of the profile: a DEVICE_GLOB match (a comma-separated list of globs) and no
    DEVICE_EXCLUDE match, the same rule the product's counter proof uses."""
    try:
        names = sorted(os.listdir(SYSFS))
    except OSError:
        return []
    globs = [g.strip() for g in DEVICE_GLOB.split(",") if g.strip()]
    return [
        n for n in names
        if any(fnmatch.fnmatchcase(n, g) for g in globs)
        and not any(fnmatch.fnmatchcase(n, g) for g in DEVICE_EXCLUDE)
    ]


def tx_bytes():
    """Sum of the transmit counters of every counter device, in bytes (None if none is readable)."""
    total, found = 0, False
    for dev in counter_devices():
        try:
            with open(os.path.join(SYSFS, dev, TX_COUNTER)) as f:
                total += int(f.read().strip())
                found = True
        except (OSError, ValueError):
            continue
    return total * COUNTER_MULTIPLIER if found else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, required=True, help="0 or 1")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--master-addr", required=True, help="IP of rank 0's pod")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--size-mib", type=int, default=@@SIZE_MIB@@, help="all_reduce size in MiB")
    p.add_argument("--iters", type=int, default=5)
    args = p.parse_args()

    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.rank,
        world_size=args.world_size,
    )
    n = args.size_mib * MIB // 4
    x = torch.ones(n, dtype=torch.float32, device="cuda")
    dist.all_reduce(x)  # warm-up: communicator setup is not timed
    torch.cuda.synchronize()
    before = tx_bytes()
    ok_all = True
    for i in range(args.iters):
        x.fill_(1.0)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        ok = bool(torch.all(x == float(args.world_size)).item())
        ok_all = ok_all and ok
        print(
            f"rank {args.rank} iter {i}: all_reduce {args.size_mib} MiB in {elapsed * 1000:.1f} ms, "
            f"{'result OK' if ok else 'result WRONG'}",
            flush=True,
        )
    after = tx_bytes()
    ib = os.environ.get("@@TCP_KEY@@", "unset")
    if before is None or after is None:
        print(f"rank {args.rank}: no readable {TX_COUNTER} under {DEVICE_GLOB} (@@TCP_KEY@@={ib})", flush=True)
    else:
        print(
            f"rank {args.rank}: {FABRIC} tx during check: {(after - before) / 2**30:.3f} GiB (@@TCP_KEY@@={ib})",
            flush=True,
        )
    dist.destroy_process_group()
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
