"""Two (and three) Ray actors on a local Ray instance, numpy arrays through RDMAKIT over TCP."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed in this venv")

import rdmakit_rdt  # noqa: E402
from peer import EDGE_SIZES, MIB, mixed  # noqa: E402

# Before the actor classes: @ray.method checks the transport name when the class is defined.
rdmakit_rdt.register()


@pytest.fixture(scope="module")
def cluster(test_env):
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        # The workers import this folder's helpers (peer.py) like the tests do.
        runtime_env={"env_vars": {**test_env, "PYTHONPATH": os.path.dirname(__file__)}},
    )
    yield
    ray.shutdown()


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Producer:
    @ray.method(tensor_transport="RDMAKIT")
    def edge(self, i):
        return [np.random.default_rng(i).integers(0, 256, EDGE_SIZES[i], dtype=np.uint8)]

    @ray.method(tensor_transport="RDMAKIT")
    def mixed(self, seed):
        return {"arrays": mixed(seed), "note": f"seed {seed}"}

    @ray.method(tensor_transport="RDMAKIT")
    def big(self, n, value):
        return np.full(n, value, dtype=np.uint8)

    def stats(self):
        return rdmakit_rdt.stats()


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Consumer:
    def digest(self, obj):
        arrays = obj if isinstance(obj, list) else obj["arrays"]
        return [(a.shape, str(a.dtype), a.tobytes()) for a in arrays]

    def check_big(self, *arrays):
        return [(a.nbytes, int(a.min()), int(a.max())) for a in arrays]

    def stats(self):
        return rdmakit_rdt.stats()


def test_edge_sizes_arrive_intact_over_one_reused_channel(cluster):
    p, c = Producer.remote(), Consumer.remote()
    for i, n in enumerate(EDGE_SIZES):
        (shape, dtype, data), = ray.get(c.digest.remote(p.edge.remote(i)))
        want = np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8)
        assert shape == (n,) and dtype == "uint8"
        assert data == want.tobytes(), f"size {n}"
    sent, got = ray.get(p.stats.remote()), ray.get(c.stats.remote())
    assert sent["send_channels_opened"] == 1, sent  # set up once, reused for every object
    assert got["recv_channels_opened"] == 1, got
    assert sent["objects_sent"] == len(EDGE_SIZES) == got["objects_received"]
    assert got["bytes_received"] == sum(EDGE_SIZES)


def test_many_arrays_of_several_dtypes_and_shapes_per_object(cluster):
    p, c = Producer.remote(), Consumer.remote()
    for seed in (1, 2, 3):
        got = ray.get(c.digest.remote(p.mixed.remote(seed)))
        want = [(a.shape, str(a.dtype), a.tobytes()) for a in mixed(seed)]
        assert got == want


def test_objects_are_reused_and_freed(cluster):
    p, c = Producer.remote(), Consumer.remote()
    ref = p.big.remote(3 * MIB + 1, 7)
    # The same object to the same consumer twice: Ray sends it twice over the same channel.
    for _ in range(2):
        assert ray.get(c.check_big.remote(ref)) == [(3 * MIB + 1, 7, 7)]
    for v in range(5):
        assert ray.get(c.check_big.remote(p.big.remote(MIB, v))) == [(MIB, v, v)]
    del ref
    deadline = time.monotonic() + 20
    while ray.get(p.stats.remote())["objects_collected"] < 6:
        assert time.monotonic() < deadline, ray.get(p.stats.remote())
        time.sleep(0.2)
    assert ray.get(p.stats.remote())["send_channels_opened"] == 1


def test_two_transfers_at_once(cluster):
    p1, p2, c1, c2 = Producer.remote(), Producer.remote(), Consumer.remote(), Consumer.remote()
    big = 16 * MIB
    # Two producers into one consumer (one call, two objects), and one producer into two
    # consumers, all submitted before any result is awaited.
    r1, r2 = p1.big.remote(big, 1), p2.big.remote(big, 2)
    both = c1.check_big.remote(r1, r2)
    r3 = p1.big.remote(big, 3)
    a, b = c1.check_big.remote(r3), c2.check_big.remote(r3)
    assert ray.get(both) == [(big, 1, 1), (big, 2, 2)]
    assert ray.get([a, b]) == [[(big, 3, 3)], [(big, 3, 3)]]


def test_a_dead_sender_makes_the_receiver_raise_within_the_timeout(cluster):
    p, c = Producer.remote(), Consumer.remote()
    ref = p.big.remote(8 * MIB, 5)
    ray.wait([ref], fetch_local=False)
    assert ray.get(c.check_big.remote(ref)) == [(8 * MIB, 5, 5)]  # the channel exists
    ref2 = p.big.remote(8 * MIB, 6)
    ray.wait([ref2], fetch_local=False)
    ray.kill(p)
    start = time.monotonic()
    with pytest.raises(Exception) as info:  # noqa: B017 (Ray wraps the cause)
        ray.get(c.check_big.remote(ref2), timeout=60)
    took = time.monotonic() - start
    assert not isinstance(info.value, ray.exceptions.GetTimeoutError), "the receiver hung"
    assert took < 30, f"took {took:.1f}s"
    # The cause is named: the transport saw the sender's connections close.
    assert "RdmakitError" in str(info.value) and "closed" in str(info.value), str(info.value)
    # The consumer survives and still works with a new producer.
    p2 = Producer.remote()
    assert ray.get(c.check_big.remote(p2.big.remote(MIB, 9))) == [(MIB, 9, 9)]


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Aborter:
    """Runs the transport's own entry points inside an actor, to time abort_transport."""

    def abort_during(self, role: str, peer_id: str):
        import threading

        from rdmakit_rdt.transport import (
            RdmakitCommunicatorMetadata,
            RdmakitTensorTransport,
            RdmakitTransportMetadata,
        )

        me = ray.get_runtime_context().get_actor_id()
        t = RdmakitTensorTransport()
        meta = RdmakitTransportMetadata(
            tensor_meta=[((4,), np.dtype(np.uint8))], tensor_device="cpu", obj_id="obj-x",
            nbytes=[4], kind="numpy",
        )
        if role == "recv":  # waits in accept for a sender that never comes
            comm = RdmakitCommunicatorMetadata(src_actor_id=peer_id, dst_actor_id=me)
            work = lambda: t.recv_multiple_tensors("obj-x", meta, comm)  # noqa: E731
        else:  # waits for a receiver that never listens
            comm = RdmakitCommunicatorMetadata(src_actor_id=me, dst_actor_id=peer_id)
            work = lambda: t.send_multiple_tensors([np.zeros(4, np.uint8)], meta, comm)  # noqa: E731
        out = {}

        def run():
            try:
                work()
                out["error"] = None
            except Exception as e:  # noqa: BLE001 (the test inspects it)
                out["error"] = f"{type(e).__name__}: {e}"

        th = threading.Thread(target=run)
        th.start()
        time.sleep(0.5)
        start = time.monotonic()
        t.abort_transport("obj-x", comm)
        th.join(timeout=30)
        took = time.monotonic() - start
        # An abort for an object that has not started yet is remembered and refuses it.
        t.abort_transport("obj-y", comm)
        meta.obj_id = "obj-y"  # the sender knows its object from the metadata
        try:
            t.recv_multiple_tensors("obj-y", meta, comm) if role == "recv" else \
                t.send_multiple_tensors([np.zeros(4, np.uint8)], meta, comm)
            early = None
        except Exception as e:  # noqa: BLE001
            early = f"{type(e).__name__}: {e}"
        return out.get("error", "still running"), took, early


@pytest.mark.parametrize("role", ["recv", "send"])
def test_abort_transport_ends_a_waiting_transfer_at_once(cluster, role):
    a = Aborter.remote()
    err, took, early = ray.get(a.abort_during.remote(role, "ff" * 16), timeout=60)
    assert err is not None and "RdmakitAbortedError" in err and "obj-x" in err, err
    assert took < 1.0, f"abort took {took:.2f}s"
    assert early is not None and "obj-y" in early, early
