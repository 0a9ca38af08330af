"""Ray actors (and the driver) on a local Ray instance, numpy arrays through RDMAKIT_NUMPY over TCP:
the consumer pulls from the producer's server (one-sided). (Torch tensors through RDMAKIT:
test_ray_torch.py.)"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed in this venv")

import rdmakit_rdt  # noqa: E402
from peer import EDGE_SIZES, MIB, mixed  # noqa: E402

# Before the actor classes: @ray.method checks the transport name when the class is defined.
# Numpy arrays travel as RDMAKIT_NUMPY (RDMAKIT carries torch tensors where torch is installed).
NP = rdmakit_rdt.register("RDMAKIT_NUMPY")


def _shim_ray_collective_without_torch():
    """Ray 2.60's driver-side RDT monitor (`_abort_transport`) imports ray.experimental.collective,
    which imports torch: without torch (this venv) that import fails, the monitor thread dies and
    Ray never calls abort_transport. So that the abort tests run Ray's real monitor path, the
    driver gets a stand-in module with the one function the monitor uses (it only matters for
    NCCL/GLOO groups, which these tests do not make)."""
    import sys
    import types

    try:
        import ray.experimental.collective  # noqa: F401
        return
    except ImportError:
        pass
    stub = types.ModuleType("ray.experimental.collective")

    def destroy_collective_group(name):
        raise ValueError(f"no collective group {name!r} (test stand-in)")

    stub.destroy_collective_group = destroy_collective_group
    sys.modules["ray.experimental.collective"] = stub


_shim_ray_collective_without_torch()


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Producer:
    @ray.method(tensor_transport=NP)
    def edge(self, i):
        return [np.random.default_rng(i).integers(0, 256, EDGE_SIZES[i], dtype=np.uint8)]

    @ray.method(tensor_transport=NP)
    def mixed(self, seed):
        return {"arrays": mixed(seed), "note": f"seed {seed}"}

    @ray.method(tensor_transport=NP)
    def big(self, n, value):
        return np.full(n, value, dtype=np.uint8)

    def stats(self):
        return rdmakit_rdt.stats()

    def metrics(self):
        return _metric_kinds()

    def pid(self):
        return os.getpid()

    # The transport's own entry points, for what Ray does not let a test reach (a pull of an
    # object that was garbage-collected).
    def register(self, obj_id, n, value):
        from rdmakit_rdt.transport import RdmakitTensorTransport

        self._kept = getattr(self, "_kept", {})
        arr = self._kept[obj_id] = np.full(n, value, dtype=np.uint8)
        return RdmakitTensorTransport().extract_tensor_transport_metadata(obj_id, [arr])

    def collect(self, obj_id, meta):
        from rdmakit_rdt.transport import RdmakitTensorTransport

        RdmakitTensorTransport().garbage_collect(obj_id, meta, [self._kept.pop(obj_id)])


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Consumer:
    def digest(self, obj):
        arrays = obj if isinstance(obj, list) else obj["arrays"]
        return [(a.shape, str(a.dtype), a.tobytes()) for a in arrays]

    def check_big(self, *arrays):
        return [(a.nbytes, int(a.min()), int(a.max())) for a in arrays]

    def stats(self):
        return rdmakit_rdt.stats()

    def metrics(self):
        return _metric_kinds()

    def pid(self):
        return os.getpid()

    def pull(self, obj_id, meta):
        """Pulls through the transport's entry point; the error's class and message, if any."""
        from rdmakit_rdt.transport import RdmakitCommunicatorMetadata, RdmakitTensorTransport

        try:
            (a,) = RdmakitTensorTransport().recv_multiple_tensors(
                obj_id, meta, RdmakitCommunicatorMetadata()
            )
            return (a.nbytes, int(a.min()), int(a.max()))
        except Exception as e:  # noqa: BLE001 (the test inspects it)
            return f"{type(e).__name__}: {e}"


def _metric_kinds():
    """Which of this process's counters reached Ray's metrics (a ``ray.util.metrics.Counter``) and
    which fell back to counting nowhere (``_NoMetric``: making or incrementing it raised)."""
    from rdmakit_rdt import transport

    return {name: type(m).__name__ for name, m in transport._METRICS.items()}


def _served_spans(actor, obj_id):
    return [sp for sp in ray.get(actor.stats.remote())["serve_spans"] if sp[0] == obj_id]


def _until(what, f, timeout=30):
    deadline = time.monotonic() + timeout
    while not (v := f()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)
    return v


def test_edge_sizes_arrive_intact_over_one_reused_channel(cluster):
    p, c = Producer.remote(), Consumer.remote()
    for i, n in enumerate(EDGE_SIZES):
        (shape, dtype, data), = ray.get(c.digest.remote(p.edge.remote(i)))
        want = np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8)
        assert shape == (n,) and dtype == "uint8"
        assert data == want.tobytes(), f"size {n}"
    got = ray.get(c.stats.remote())
    sent = _until("served", lambda: (st := ray.get(p.stats.remote()))["served"] == len(EDGE_SIZES) and st)
    assert sent["sessions_opened"] == 1, sent  # set up once, reused for every object
    assert got["recv_channels_opened"] == 1, got
    assert got["objects_received"] == len(EDGE_SIZES)
    assert got["bytes_received"] == sum(EDGE_SIZES) == sent["bytes_served"]


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
    assert ray.get(p.stats.remote())["sessions_opened"] == 1


def test_transfers_of_two_actor_pairs_run_at_the_same_time(cluster):
    # One actor runs its transfers one at a time (Ray's `_ray_system` thread has concurrency 1),
    # so "at once" needs two pairs: p1 -> c1 and p2 -> c2, submitted together, must overlap.
    p1, p2, c1, c2 = Producer.remote(), Producer.remote(), Consumer.remote(), Consumer.remote()
    big = 48 * MIB
    # Warm both channels up (their set-up is not what is measured).
    assert ray.get([c1.check_big.remote(p1.big.remote(1, 0)), c2.check_big.remote(p2.big.remote(1, 0))])
    r1, r2 = p1.big.remote(big, 1), p2.big.remote(big, 2)
    ray.wait([r1, r2], num_returns=2, fetch_local=False)
    a, b = c1.check_big.remote(r1), c2.check_big.remote(r2)
    assert ray.get([a, b]) == [[(big, 1, 1)], [(big, 2, 2)]]
    (s1, e1), (s2, e2) = (ray.get(c.stats.remote())["last_recv"] for c in (c1, c2))
    assert max(s1, s2) < min(e1, e2), f"no overlap: {s1:.3f}-{e1:.3f} and {s2:.3f}-{e2:.3f}"
    # Two objects from two producers into one consumer call, and one object to two consumers.
    both = c1.check_big.remote(p1.big.remote(MIB, 3), p2.big.remote(MIB, 4))
    r5 = p1.big.remote(MIB, 5)
    assert ray.get(both) == [(MIB, 3, 3), (MIB, 4, 4)]
    assert ray.get([c1.check_big.remote(r5), c2.check_big.remote(r5)]) == [[(MIB, 5, 5)]] * 2


def test_fan_out_to_three_consumers_at_once(cluster):
    p = Producer.remote()
    cs = [Consumer.remote() for _ in range(3)]
    # Sessions first (their set-up is not what is measured).
    warm = p.big.remote(1, 0)
    assert ray.get([c.check_big.remote(warm) for c in cs]) == [[(1, 0, 0)]] * 3
    n = 64 * MIB
    ref = p.big.remote(n, 11)
    ray.wait([ref], fetch_local=False)
    start = time.monotonic()
    assert ray.get([c.check_big.remote(ref) for c in cs]) == [[(n, 11, 11)]] * 3
    took = time.monotonic() - start
    oid = ref.hex()
    spans = _until("three serves", lambda: len(sp := _served_spans(p, oid)) == 3 and sp)
    assert all(ok and nbytes == n for _, _, _, nbytes, ok in spans), spans
    # Served at the same time by the producer's server, not one after another: every serve began
    # before the first one ended (two-sided, the sends ran one by one on `_ray_system`).
    last_start = max(sp[1] for sp in spans)
    first_end = min(sp[2] for sp in spans)
    t0 = min(sp[1] for sp in spans)
    shown = ", ".join(f"{(a - t0) * 1e3:.0f}-{(b - t0) * 1e3:.0f} ms" for _, a, b, _, _ in spans)
    print(f"fan-out 1->3 of {n >> 20} MiB: {took * 1e3:.0f} ms; serve spans {shown}")
    assert last_start < first_end, f"served one after another: {shown}"


def test_ray_get_in_the_driver_and_ray_put_from_the_driver(cluster):
    p, c = Producer.remote(), Consumer.remote()
    n = 3 * MIB + 7
    a = ray.get(p.big.remote(n, 42), timeout=60)  # the driver pulls from the producer
    assert isinstance(a, np.ndarray) and a.nbytes == n and int(a.min()) == int(a.max()) == 42
    got = ray.get(p.mixed.remote(5), timeout=60)
    assert [x.tobytes() for x in got["arrays"]] == [x.tobytes() for x in mixed(5)]
    # The driver as the producer: its own server serves the actor.
    put = ray.put(np.full(MIB, 9, dtype=np.uint8), _tensor_transport=NP)
    assert ray.get(c.check_big.remote(put), timeout=60) == [(MIB, 9, 9)]
    _until("the driver served", lambda: rdmakit_rdt.stats()["served"] == 1)


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Peer:
    @ray.method(tensor_transport=NP)
    def make(self, n, value):
        return np.full(n, value, dtype=np.uint8)

    def check(self, a):
        return (a.nbytes, int(a.min()), int(a.max()))


def test_two_actors_pull_from_each_other_at_once_without_waiting(cluster):
    a, b = Peer.remote(), Peer.remote()
    n = 32 * MIB
    for round_ in range(3):
        ra, rb = a.make.remote(n, 2 * round_), b.make.remote(n, 2 * round_ + 1)
        ray.wait([ra, rb], num_returns=2, fetch_local=False)
        start = time.monotonic()
        # a pulls b's object while b pulls a's, each served by the other's server while its own
        # `_ray_system` thread pulls. (This passed on the two-sided code too: with one owner
        # submitting, Ray queues each transfer's send before its receive. What a busy
        # `_ray_system` thread did to a two-sided send is the next test.)
        got = ray.get([a.check.remote(rb), b.check.remote(ra)], timeout=60)
        took = time.monotonic() - start
        assert got == [(n, 2 * round_ + 1, 2 * round_ + 1), (n, 2 * round_, 2 * round_)]
        assert took < 5, f"round {round_}: {took:.1f}s"


def _busy(self, seconds):
    time.sleep(seconds)
    return seconds


def test_a_pull_does_not_wait_for_the_producers_ray_system_thread(cluster):
    p, c = Producer.remote(), Consumer.remote()
    assert ray.get(c.check_big.remote(p.big.remote(1, 0))) == [(1, 0, 0)]  # session ready
    ref = p.big.remote(8 * MIB, 4)
    ray.wait([ref], fetch_local=False)
    # The producer's `_ray_system` thread (concurrency 1) is busy for 8 s: two-sided, Ray's
    # `__ray_send__` for this transfer queued behind it.
    busy = p.__ray_call__.options(concurrency_group="_ray_system").remote(_busy, 8)
    time.sleep(0.5)
    start = time.monotonic()
    assert ray.get(c.check_big.remote(ref), timeout=60) == [(8 * MIB, 4, 4)]
    took = time.monotonic() - start
    assert took < 4, f"the pull waited for the producer's _ray_system thread: {took:.1f}s"
    assert ray.get(busy) == 8


@ray.remote(num_cpus=0, enable_tensor_transport=True, max_restarts=1)
class RestartableProducer:
    def __init__(self):
        # Ray 2.60 registers custom transports only when the actor is first created.
        rdmakit_rdt.register(NP)

    @ray.method(tensor_transport=NP)
    def big(self, n, value):
        return np.full(n, value, dtype=np.uint8)

    def pid(self):
        return os.getpid()


def test_the_first_transfer_after_a_producer_restart_works(cluster):
    p = RestartableProducer.remote()
    c = Consumer.remote()
    assert ray.get(c.check_big.remote(p.big.remote(2 * MIB, 1))) == [(2 * MIB, 1, 1)]
    old = ray.get(p.pid.remote())
    ray.kill(p, no_restart=False)
    deadline = time.monotonic() + 60
    while True:  # the restarted process answers with a new pid
        try:
            if ray.get(p.pid.remote(), timeout=10) != old:
                break
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        assert time.monotonic() < deadline, "the producer did not restart"
        time.sleep(0.2)
    # Same actor id, new process: the consumer's channel from the dead one must not be reused.
    assert ray.get(c.check_big.remote(p.big.remote(2 * MIB, 2)), timeout=60) == [(2 * MIB, 2, 2)]
    got = ray.get(c.stats.remote())
    assert got["recv_channels_opened"] == 2 and got["recv_failures"] == 0, got
    assert got["channels_evicted"] >= 1, got


def test_a_consumer_killed_mid_transfer_leaves_the_producer_serving_the_next(cluster):
    p = Producer.remote()
    c1, c2 = Consumer.remote(), Consumer.remote()
    assert ray.get(c1.check_big.remote(p.big.remote(1, 0))) == [(1, 0, 0)]  # session ready
    n = 384 * MIB
    ref = p.big.remote(n, 7)
    ray.wait([ref], fetch_local=False)
    victim = c1.check_big.remote(ref)
    _until("the pull started", lambda: ray.get(p.stats.remote())["serving"] > 0)
    ray.kill(c1)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(victim, timeout=60)
    # The producer's serving thread for c1 sees the connections go and ends; the producer lives.
    st = _until("the serve failed", lambda: (s := ray.get(p.stats.remote()))["serve_failures"] == 1 and s)
    assert st["serving"] == 0, st
    # The same object to a healthy consumer, by the producer that survived.
    assert ray.get(c2.check_big.remote(ref), timeout=60) == [(n, 7, 7)]
    _until("served", lambda: ray.get(p.stats.remote())["served"] == 2)


def test_a_pull_after_garbage_collect_is_refused_by_name(cluster):
    p, c = Producer.remote(), Consumer.remote()
    meta = ray.get(p.register.remote("obj-gc", MIB, 5))
    assert meta.address.rsplit(":", 1)[0] == ray.util.get_node_ip_address(), meta.address
    assert ray.get(c.pull.remote("obj-gc", meta)) == (MIB, 5, 5)
    ray.get(p.collect.remote("obj-gc", meta))
    err = ray.get(c.pull.remote("obj-gc", meta))
    assert isinstance(err, str) and "RdmakitTransportRefusedError" in err, err
    assert "obj-gc" in err and "not registered" in err, err
    # The producer goes on serving.
    meta2 = ray.get(p.register.remote("obj-2", MIB, 6))
    assert ray.get(c.pull.remote("obj-2", meta2)) == (MIB, 6, 6)
    assert ray.get(p.stats.remote())["pulls_refused"] == 1


def test_the_server_binds_the_node_address(cluster):
    p, c = Producer.remote(), Consumer.remote()
    assert ray.get(c.check_big.remote(p.big.remote(MIB, 3))) == [(MIB, 3, 3)]
    addr = ray.get(p.stats.remote())["listen_address"]
    assert addr.rsplit(":", 1)[0] == ray.util.get_node_ip_address(), addr
    assert ray.get(c.stats.remote())["listen_address"] is None  # a pure consumer listens nowhere


def test_idle_channels_are_evicted_and_reopened(cluster, test_env):
    env = {"runtime_env": {"env_vars": {**test_env, "RDMAKIT_IDLE_S": "1",
                                        "PYTHONPATH": os.path.dirname(__file__)}}}
    p, c = Producer.options(**env).remote(), Consumer.options(**env).remote()
    assert ray.get(c.check_big.remote(p.big.remote(MIB, 1))) == [(MIB, 1, 1)]
    time.sleep(2.5)  # the reaper runs every 1 s (RDMAKIT_IDLE_S / 4, at least 1 s)
    sent, got = ray.get(p.stats.remote()), ray.get(c.stats.remote())
    # The consumer's reaper closed its session, and the server idles its end out too.
    assert got["open_sessions"] == 0 and got["channels_evicted"] == 1, got
    assert sent["sessions_open"] == 0, sent
    assert ray.get(c.check_big.remote(p.big.remote(MIB, 2))) == [(MIB, 2, 2)]
    got, sent = ray.get(c.stats.remote()), ray.get(p.stats.remote())
    assert got["recv_channels_opened"] == 2 and sent["sessions_opened"] == 2
    # The new sessions took the closed ones' staging rings from each process's pool.
    assert (got["pool"]["allocated"], got["pool"]["reused"]) == (1, 1), got["pool"]
    assert (sent["pool"]["allocated"], sent["pool"]["reused"]) == (1, 1), sent["pool"]


def test_an_actor_that_cannot_run_the_transport_is_found_at_submit(cluster, test_env):
    env = {"runtime_env": {"env_vars": {**test_env, "RDMAKIT_TRANSPORT": "rdma",
                                        "RDMAKIT_RDMA_DEVICES": "nosuchdev0",
                                        "PYTHONPATH": os.path.dirname(__file__)}}}
    p = Producer.options(**env).remote()
    with pytest.raises(ValueError, match="does not have tensor transport RDMAKIT_NUMPY"):
        p.big.remote(1, 0)
    assert Producer.remote().big.remote(1, 0) is not None  # a healthy one passes the probe


def test_errors_are_ray_direct_transport_errors():
    import pickle

    from ray.exceptions import RayDirectTransportError

    from rdmakit_rdt import transport as t

    e = t._to_ray(rdmakit_rdt.RdmakitTimeoutError("timed out after 1s waiting for x"))
    assert isinstance(e, RayDirectTransportError) and isinstance(e, rdmakit_rdt.RdmakitTimeoutError)
    assert str(e) == "timed out after 1s waiting for x"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is t.RdmakitTransportTimeoutError and str(back) == str(e)
    assert isinstance(t._to_ray(rdmakit_rdt.RdmakitAbortedError("x")), rdmakit_rdt.RdmakitAbortedError)
    meta = t.RdmakitTransportMetadata(tensor_meta=[], token=b"\x01" * 32)
    assert "token" not in repr(meta) and "\\x01" not in repr(meta)


def test_a_dead_sender_makes_the_receiver_raise_within_the_timeout(cluster):
    p, c = Producer.remote(), Consumer.remote()
    ref = p.big.remote(8 * MIB, 5)
    ray.wait([ref], fetch_local=False)
    assert ray.get(c.check_big.remote(ref)) == [(8 * MIB, 5, 5)]  # the channel exists
    ref2 = p.big.remote(8 * MIB, 6)
    ray.wait([ref2], fetch_local=False)
    pid = ray.get(p.pid.remote())
    ray.kill(p)

    def gone():
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True

    # ray.kill returns at once: wait until the process is gone (its server threads could still
    # serve the pull meanwhile, which would be right, but not what this test is about).
    _until("the producer exited", gone)
    start = time.monotonic()
    with pytest.raises(Exception) as info:  # noqa: B017 (Ray wraps the cause)
        ray.get(c.check_big.remote(ref2), timeout=60)
    took = time.monotonic() - start
    assert not isinstance(info.value, ray.exceptions.GetTimeoutError), "the receiver hung"
    assert took < 30, f"took {took:.1f}s"
    # The cause is named: the producer's server is gone (its session closed, nobody listens).
    assert "RdmakitTransportError" in str(info.value), str(info.value)
    assert "connecting connection 0" in str(info.value), str(info.value)
    # The consumer survives and still works with a new producer.
    p2 = Producer.remote()
    assert ray.get(c.check_big.remote(p2.big.remote(MIB, 9))) == [(MIB, 9, 9)]


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Aborter:
    """Runs the transport's own entry points inside an actor, to time abort_transport."""

    def abort_during(self, address: str):
        import threading

        from rdmakit_rdt.transport import (
            RdmakitCommunicatorMetadata,
            RdmakitTensorTransport,
            RdmakitTransportMetadata,
        )

        t = RdmakitTensorTransport()
        meta = RdmakitTransportMetadata(
            tensor_meta=[((4,), np.dtype(np.uint8))], tensor_device="cpu", obj_id="obj-x",
            address=address, nbytes=[4], kind="numpy", token=os.urandom(32),
        )
        comm = RdmakitCommunicatorMetadata()
        out = {}

        def run():
            try:
                t.recv_multiple_tensors("obj-x", meta, comm)
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
        # An abort for an object whose pull has not started yet is remembered and refuses it.
        t.abort_transport("obj-y", comm)
        meta.obj_id = "obj-y"
        try:
            t.recv_multiple_tensors("obj-y", meta, comm)
            early = None
        except Exception as e:  # noqa: BLE001
            early = f"{type(e).__name__}: {e}"
        return out.get("error", "still running"), took, early


def test_abort_transport_ends_a_pull_waiting_on_a_silent_producer_at_once(cluster):
    import socket

    # A "producer" that accepts connections (the kernel's backlog) and never answers.
    silent = socket.socket()
    silent.bind((ray.util.get_node_ip_address(), 0))
    silent.listen(16)
    try:
        a = Aborter.remote()
        host, port = silent.getsockname()[:2]
        err, took, early = ray.get(a.abort_during.remote(f"{host}:{port}"), timeout=60)
    finally:
        silent.close()
    assert err is not None and "RdmakitTransportAbortedError" in err and "obj-x" in err, err
    assert took < 1.0, f"abort took {took:.2f}s"
    assert early is not None and "obj-y" in early, early


def test_a_port_scan_and_wrong_tokens_at_the_producer_are_refused_and_serving_goes_on(cluster):
    import socket

    p, c = Producer.remote(), Consumer.remote()
    assert ray.get(c.check_big.remote(p.big.remote(MIB, 1))) == [(MIB, 1, 1)]  # p serves now
    addr = ray.get(p.stats.remote())["listen_address"]
    host, port = addr.rsplit(":", 1)
    before = ray.get(p.stats.remote())["connections_refused"]
    socket.create_connection((host, int(port))).close()  # a scan: connect, close
    silent = socket.create_connection((host, int(port)))  # connects, says nothing
    junk = socket.create_connection((host, int(port)))
    junk.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"." * 100)
    # An rdmakit consumer with a token the producer never minted.
    with pytest.raises(rdmakit_rdt.RdmakitRefusedError):
        rdmakit_rdt.RecvChannel.connect(addr, rdmakit_rdt.Config(), rdmakit_rdt.Abort(), os.urandom(32))
    try:
        # A new consumer, and the old one, are served meanwhile.
        c2 = Consumer.remote()
        ref = p.big.remote(2 * MIB, 2)
        assert ray.get([c.check_big.remote(ref), c2.check_big.remote(ref)], timeout=60) == [[(2 * MIB, 2, 2)]] * 2
        _until("four refused", lambda: ray.get(p.stats.remote())["connections_refused"] - before >= 3)
    finally:
        silent.close()
        junk.close()
    st = _until("the silent one refused too",
                lambda: (s := ray.get(p.stats.remote()))["connections_refused"] - before == 4 and s)
    assert st["serve_failures"] == 0 and st["served"] == 3, st


def test_two_pulls_at_once_from_one_process_to_one_producer_use_two_sessions(cluster):
    import threading

    from rdmakit_rdt import transport as t

    tr = t.RdmakitTensorTransport()
    n = 32 * MIB
    arrays = {f"drv-{i}": np.full(n, 20 + i, dtype=np.uint8) for i in range(2)}
    metas = {k: tr.extract_tensor_transport_metadata(k, [a]) for k, a in arrays.items()}
    addr = metas["drv-0"].address
    opened = rdmakit_rdt.stats()["recv_channels_opened"]
    out, errors = {}, []

    def pull(k):
        try:
            (got,) = tr.recv_multiple_tensors(k, metas[k], t.RdmakitCommunicatorMetadata())
            out[k] = (got.nbytes, int(got.min()), int(got.max()))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=pull, args=(k,)) for k in arrays]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    try:
        assert not errors, errors
        assert out == {"drv-0": (n, 20, 20), "drv-1": (n, 21, 21)}
        # The driver pulled from its own server: two at once need two sessions, both kept.
        assert rdmakit_rdt.stats()["recv_channels_opened"] - opened == 2
        with t._STATE.lock:
            assert len(t._STATE.sessions.get(addr, [])) == 2
    finally:
        for k, m in metas.items():
            tr.garbage_collect(k, m, [arrays[k]])


def test_counters_are_exported_as_ray_metrics(cluster):
    p, c = Producer.remote(), Consumer.remote()
    # An empty object first (Ray's Counter.inc refuses 0: that once turned bytes_received off).
    for i in (0, 1):
        ray.get(c.digest.remote(p.edge.remote(i)))
    consumer = ray.get(c.metrics.remote())
    producer = ray.get(p.metrics.remote())
    # Each counter a transfer touches is a real Counter in both processes (a name Ray refuses, or a
    # changed metrics API, turns it into _NoMetric and fails this).
    assert {"recv_channels_opened", "objects_received", "bytes_received"} <= consumer.keys(), consumer
    assert "objects_registered" in producer, producer
    assert set(consumer.values()) | set(producer.values()) == {"Counter"}, (consumer, producer)
