"""Driver for test_ray_nodes.py (run as its own process): two Ray nodes on one machine, on two
addresses (the machine's own, where Ray puts the head, and 127.0.0.2), an actor on each; the consumer on the second node
pulls from the producer's server on the first. Prints one JSON line with what it saw."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import numpy as np
import ray
from ray.cluster_utils import Cluster

import rdmakit_rdt

NP = rdmakit_rdt.register("RDMAKIT_NUMPY")


@ray.remote(num_cpus=0, resources={"node_a": 1}, enable_tensor_transport=True)
class Producer:
    @ray.method(tensor_transport=NP)
    def make(self, n, value):
        return np.full(n, value, dtype=np.uint8)

    def where(self):
        return ray.util.get_node_ip_address(), rdmakit_rdt.stats()["listen_address"]

    def served(self):
        return rdmakit_rdt.stats()["served"]


@ray.remote(num_cpus=0, resources={"node_b": 1}, enable_tensor_transport=True)
class Consumer:
    def check(self, a):
        return [a.nbytes, int(a.min()), int(a.max())]

    def where(self):
        return ray.util.get_node_ip_address()

    def peers(self):
        return sorted(rdmakit_rdt.transport._STATE.sessions)


def wait_served(p, n=1, within=30.0):
    deadline = time.monotonic() + within
    while (got := ray.get(p.served.remote())) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith("RDMAKIT_")}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    # Its own temp dir: Ray writes the newest cluster's address there (ray_current_cluster), which a
    # later plain `ray.init()` on this machine would otherwise try to join.
    tmp = tempfile.mkdtemp(prefix="rk2n-", dir="/tmp")
    # The head on the machine's own address (Ray's default), the second node on 127.0.0.2.
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"node_a": 1}, "include_dashboard": False, "temp_dir": tmp})
    cluster.add_node(node_ip_address="127.0.0.2", num_cpus=2, resources={"node_b": 1},
                     temp_dir=tmp)
    try:
        ray.init(address=cluster.address, runtime_env={"env_vars": env}, log_to_driver=False)
        p, c = Producer.remote(), Consumer.remote()
        n = 3 * (1 << 20) + 5
        got = ray.get(c.check.remote(p.make.remote(n, 77)), timeout=120)
        out = {
            "got": got,
            "producer_node": None,
            "server": None,
            "consumer_node": ray.get(c.where.remote()),
            "consumer_sessions": ray.get(c.peers.remote()),
            # Counted once the server's send returned, which can be just after the consumer's
            # check: wait for it.
            "served": wait_served(p),
        }
        out["producer_node"], out["server"] = ray.get(p.where.remote())
        out["head_node"] = cluster.head_node.node_ip_address
        print("RESULT " + json.dumps(out), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
