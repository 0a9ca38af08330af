#!/usr/bin/env python3
"""Ray Direct Transport (RDT) demo: move a GPU tensor between two nodes with @@TRANSPORT_NAME@@ over @@FABRIC@@.

Rendered by rdmakit for profile @@PROFILE@@ (rdt_transport=@@TRANSPORT@@). Run it on the Ray head pod:

    HEAD=$(kubectl get pod -l ray.io/cluster=@@CLUSTER@@,ray.io/node-type=head -o jsonpath='{.items[0].metadata.name}')
    kubectl cp @@FILE@@ $HEAD:/tmp/@@FILE@@ -c ray-head
    kubectl exec $HEAD -c ray-head -- python /tmp/@@FILE@@ [--size-mib @@SIZE_MIB@@] [--iters @@ITERATIONS@@] [--tcp]

A Producer and a Consumer actor are forced onto different nodes by a STRICT_SPREAD placement group.
The producer's method is marked with a tensor transport, so Ray sends the returned CUDA tensor GPU to
GPU instead of copying it through the object store:
  * nccl (seed 000): NCCL over the RDMA devices; needs an explicit collective group.
  * rdmakit: gpu-stage through the rdmakit_rdt wheel (the bundle's Dockerfile installs it): GPU -> page-locked
    ring -> RDMA (classic verbs, striped over the profile's devices, no GPUDirect) -> ring -> GPU. The actors
    meet through Ray's KV store on the first transfer; rdmakit_rdt.register() runs before the classes.

Two requirements that are easy to miss:
  * The receiving actor needs enable_tensor_transport=True. Only actors that declare a tensor transport
    get the background thread that receives RDT objects; without it the receive queues behind consume(),
    which itself waits for the tensor, and the call fails with
    "ObjectRef ... not found in RDT object store after 60.0s".
  * The NCCL backend needs an explicit collective group (create_collective_group); rdmakit does not.

--tcp repeats the run with @@TCP_KEY@@=@@TCP_VALUE@@ in the actors: it still succeeds, but the RDMA device
counters (@@TX_COUNTER@@ of @@DEVICE_GLOB@@) stay flat. That A/B is how you prove the default run used RDMA.

Do not modify a tensor after returning it: RDT does not copy, producer and consumer may share memory.
An actor joins one collective group per backend; a failed run can leave an NCCLUniqueIDStore actor
behind that must be cleaned up before retrying.
"""

import argparse
import sys
import time

import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

MIB = 1024 * 1024
FABRIC = @@FABRIC_PY@@
DEFAULT_SIZE_MIB = @@SIZE_MIB@@
DEFAULT_ITERS = @@ITERATIONS@@
TRANSPORT = @@TRANSPORT_PY@@
# The A/B switch (--tcp) and what the default run sets, per transport.
TCP_ENV = {@@TCP_KEY_PY@@: @@TCP_VALUE_PY@@}
RDMA_ENV = {"RDMAKIT_TRANSPORT": "rdma"} if TRANSPORT == "rdmakit" else {}
PRODUCER_OPTIONS = {}
if TRANSPORT == "rdmakit":
    import rdmakit_rdt

    # Registers "RDMAKIT" before the classes below: @ray.method checks the name when the class is defined.
    rdmakit_rdt.register()
    PRODUCER_OPTIONS = {"enable_tensor_transport": True}


@ray.remote(num_gpus=1, num_cpus=1, **PRODUCER_OPTIONS)
class Producer:
    def where(self):
        return ray.get_runtime_context().get_node_id(), torch.cuda.get_device_name(0)

    @ray.method(tensor_transport=@@TENSOR_TRANSPORT_PY@@)
    def make_tensor(self, n: int, fill: float):
        return torch.full((n,), fill, dtype=torch.float32, device="cuda")


# The receiver needs enable_tensor_transport=True as well (see the module docstring).
@ray.remote(num_gpus=1, num_cpus=1, enable_tensor_transport=True)
class Consumer:
    def where(self):
        return ray.get_runtime_context().get_node_id(), torch.cuda.get_device_name(0)

    def consume(self, tensor: torch.Tensor, fill: float):
        torch.cuda.synchronize()
        ok = bool(torch.all(tensor == fill).item())
        return str(tensor.device), tensor.numel(), ok


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=DEFAULT_SIZE_MIB, help="tensor size in MiB")
    p.add_argument("--iters", type=int, default=DEFAULT_ITERS, help="transfers to time")
    p.add_argument("--tcp", action="store_true", help="set @@TCP_KEY@@=@@TCP_VALUE@@ in the actors (A/B run)")
    return p.parse_args()


def main():
    args = parse_args()
    ray.init(address="auto")
    pg = placement_group([{"GPU": 1, "CPU": 1}, {"GPU": 1, "CPU": 1}], strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=300)
    options = []
    for index in range(2):
        opts = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=index
            )
        }
        env = TCP_ENV if args.tcp else RDMA_ENV
        if env:
            opts["runtime_env"] = {"env_vars": env}
        options.append(opts)
    producer = Producer.options(**options[0]).remote()
    consumer = Consumer.options(**options[1]).remote()
    group = None
    all_ok = True
    try:
        p_node, p_gpu = ray.get(producer.where.remote())
        c_node, c_gpu = ray.get(consumer.where.remote())
        print(f"producer node={p_node} gpu={p_gpu}", flush=True)
        print(f"consumer node={c_node} gpu={c_gpu}", flush=True)
        if p_node == c_node:
            print("producer and consumer share a node: the transfer would not cross the network", flush=True)
            return 1
        if TRANSPORT == "nccl":
            from ray.experimental.collective import create_collective_group

            group = create_collective_group([producer, consumer], backend="nccl")
        n = args.size_mib * MIB // 4
        for i in range(args.iters):
            fill = float(i + 1)
            start = time.perf_counter()
            ref = producer.make_tensor.remote(n, fill)
            device, numel, ok = ray.get(consumer.consume.remote(ref, fill))
            elapsed = time.perf_counter() - start
            ok = ok and numel == n
            all_ok = all_ok and ok
            rate = args.size_mib / 1024 / elapsed
            check = "checksum OK" if ok else "checksum MISMATCH"
            print(
                f"iter {i}: {args.size_mib} MiB -> {device} in {elapsed * 1000:.1f} ms ({rate:.2f} GiB/s), {check}",
                flush=True,
            )
    finally:
        if group is not None:
            try:
                from ray.experimental.collective import destroy_collective_group

                destroy_collective_group(group)
            except Exception as exc:  # cleanup must not hide the result
                print(f"warning: could not destroy the collective group: {exc}", file=sys.stderr)
        for actor in (producer, consumer):
            ray.kill(actor)
        remove_placement_group(pg)
    transport = "TCP (@@TCP_KEY@@=@@TCP_VALUE@@)" if args.tcp else FABRIC
    print(f"RDT over {transport}: {'OK' if all_ok else 'FAILED'}", flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
