"""The native layer between two processes over TCP loopback, host backend (no Ray)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import rdmakit_rdt as r
from peer import MIB, objects

HERE = os.path.dirname(os.path.abspath(__file__))


def spawn_sender(port: int, scenario: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "peer.py"), "send", str(port), scenario],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def receive_from(scenario: str):
    listener = r.Listener("127.0.0.1:0")
    proc = spawn_sender(listener.port, scenario)
    ch = listener.accept(r.Config(), r.Abort())
    return proc, ch


def test_edge_sizes_dtypes_and_shapes_arrive_intact():
    proc, ch = receive_from("sizes")
    expected = objects("sizes")
    for i, obj in enumerate(expected):
        dst = [np.empty_like(a) for a in obj]
        for b in dst:
            b.reshape(-1).view(np.uint8).fill(0xAB)  # so a missed byte shows
        n = r.recv(ch, f"obj-{i}", dst)
        assert n == sum(a.nbytes for a in obj)
        for k, (a, b) in enumerate(zip(obj, dst)):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert a.tobytes() == b.tobytes(), f"object {i} buffer {k}"
    assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    ch.close()


def test_torch_cpu_tensors_arrive_intact():
    torch = pytest.importorskip("torch", reason="torch is not installed in this venv")
    proc, ch = receive_from("torch")
    MIB_ = MIB
    want = [[torch.arange(n, dtype=torch.int32) for n in (0, 1, 1000, MIB_ + 3)],
            [torch.ones(3, 4, dtype=torch.float64), torch.zeros(5, dtype=torch.bfloat16)]]
    for i, obj in enumerate(want):
        dst = [torch.full_like(t, 7) for t in obj]
        r.recv(ch, f"obj-{i}", dst)
        for a, b in zip(obj, dst):
            assert torch.equal(a, b)
    assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()


def test_a_sender_killed_mid_transfer_raises_in_the_receiver_quickly():
    proc, ch = receive_from("forever")
    try:
        dst = np.empty(32 * MIB, np.uint8)
        r.recv(ch, "obj-0", [dst])  # the sender is alive and streaming
        os.kill(proc.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(r.RdmakitError) as info:
            for i in range(1, 1000):
                r.recv(ch, f"obj-{i}", [dst])
        took = time.monotonic() - start
        assert took < 5, f"took {took:.1f}s"
        assert "closed" in str(info.value) or "reset" in str(info.value), str(info.value)
        # The channel stays closed, with the reason.
        assert ch.closed is not None
        with pytest.raises(r.RdmakitError, match="closed"):
            r.recv(ch, "again", [dst])
    finally:
        proc.kill()
        proc.wait()


def test_abort_from_another_thread_ends_a_waiting_receive():
    listener = r.Listener("127.0.0.1:0")
    # The peer sends obj-0, then stays connected and silent: a receive of obj-1 waits (its
    # timeout is 10 s) until the abort ends it. Before, the peer exited and "closed" passed too.
    proc = spawn_sender(listener.port, "one_then_wait")
    try:
        abort = r.Abort()
        ch = listener.accept(r.Config(), abort)
        dst = np.empty(4 * MIB, np.uint8)
        r.recv(ch, "obj-0", [dst])
        threading.Timer(0.3, lambda: abort.abort("test says stop")).start()
        start = time.monotonic()
        with pytest.raises(r.RdmakitAbortedError) as info:
            r.recv(ch, "obj-1", [dst])
        took = time.monotonic() - start
        assert 0.25 < took < 3, f"took {took:.2f}s"
        assert "test says stop" in str(info.value), str(info.value)
        assert proc.poll() is None, "the peer exited: the abort was not what ended the receive"
    finally:
        proc.kill()
        proc.wait()


def _token_peer(port: int, token: bytes) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "peer.py"), "send", str(port), "token"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    # The token goes over a pipe, never in argv or the environment.
    proc.stdin.write((token.hex() + "\n").encode())
    proc.stdin.close()
    return proc


def test_a_port_scan_and_a_wrong_token_do_not_break_a_transfer():
    import secrets
    import socket

    listener = r.Listener("127.0.0.1:0")
    token = secrets.token_bytes(32)
    got = {}

    def receive():
        try:
            ch = listener.accept(r.Config(), r.Abort(), token)
            dst = np.zeros(4 * MIB, np.uint8)
            got["n"] = r.recv(ch, "obj-0", [dst], token)
            got["data"] = dst.tobytes()
        except Exception as e:  # noqa: BLE001 (the test reports it)
            got["error"] = e

    t = threading.Thread(target=receive)
    t.start()  # accepting (10 s) while the others come and go
    wrong = _token_peer(listener.port, secrets.token_bytes(32))
    right = None
    try:
        assert wrong.wait(timeout=30) == 3, wrong.stderr.read().decode()
        err = wrong.stderr.read().decode()
        assert "refused" in err and token.hex() not in err, err
        # A port scan (connect, close) and a client speaking another protocol.
        socket.create_connection(("127.0.0.1", listener.port)).close()
        with socket.create_connection(("127.0.0.1", listener.port)) as junk:
            junk.sendall(b"\x16\x03\x01" + b"\x00" * 200)  # a TLS ClientHello's first bytes
            right = _token_peer(listener.port, token)
            t.join(timeout=30)
        assert "error" not in got, got.get("error")
        assert got["n"] == 4 * MIB and got["data"] == objects("token")[0][0].tobytes()
        assert right.wait(timeout=30) == 0, right.stderr.read().decode()
        assert listener.refused >= 3, listener.refused  # wrong token, scan, junk
    finally:
        for p in (right, wrong):
            if p is not None:
                p.kill()
                p.wait()


def test_abort_ends_a_pending_accept():
    listener = r.Listener("127.0.0.1:0")
    abort = r.Abort()
    threading.Timer(0.2, lambda: abort.abort("nobody is coming")).start()
    start = time.monotonic()
    with pytest.raises(r.RdmakitAbortedError, match="nobody is coming"):
        listener.accept(r.Config(), abort)
    assert time.monotonic() - start < 2


def test_accept_times_out_with_a_timeout_error():
    listener = r.Listener("127.0.0.1:0")
    with pytest.raises(r.RdmakitTimeoutError) as info:
        listener.accept(r.Config(timeout_s=0.3), r.Abort())
    assert str(listener.port) in str(info.value)
    assert isinstance(info.value, r.RdmakitError)


def test_the_wrong_object_is_refused_and_named():
    proc, ch = receive_from("one")
    dst = np.zeros(4 * MIB, np.uint8)
    with pytest.raises(r.RdmakitError, match=r'object mismatch.*"obj-0".*"obj-7"'):
        r.recv(ch, "obj-7", [dst])
    assert not dst.any(), "nothing may land in the buffer"
    proc.wait(timeout=10)


def test_bad_buffers_are_refused_before_anything_moves():
    from rdmakit_rdt.buffers import describe_all

    a = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="not C-contiguous"):
        describe_all([a[:, ::2]])
    ro = np.zeros(8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        describe_all([ro], writable=True)
    with pytest.raises(TypeError, match="neither a torch tensor"):
        describe_all([object()])
    # bytes/bytearray through the buffer protocol
    assert describe_all([bytearray(10)])[0][3] == 10


def test_a_receive_target_cannot_be_resized_while_the_transfer_runs():
    # Issue 26, F6: before, the memoryview export ended when describe() returned, so another thread
    # could resize (reallocate) the bytearray while the host worker wrote into the old memory.
    proc, ch = receive_from("late")
    dst = bytearray(4 * MIB)
    done = []
    t = threading.Thread(target=lambda: done.append(r.recv(ch, "obj-0", [dst])))
    t.start()
    time.sleep(0.3)  # the recv is now blocked in the native call (the sender waits 1 s)
    with pytest.raises(BufferError):
        dst.extend(b"x")
    t.join(timeout=30)
    assert done == [4 * MIB]
    assert bytes(dst) == objects("one")[0][0].tobytes()
    dst.extend(b"x")  # released once the call returned
    assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    ch.close()


def test_exports_pin_arrays_and_buffers_until_the_call_returns():
    from rdmakit_rdt.buffers import exported

    ba, arr = bytearray(64), np.zeros(16)
    with exported([ba, arr], writable=True) as specs:
        assert [s[3] for s in specs] == [64, 128]
        with pytest.raises(BufferError):
            ba.extend(b"x")
        with pytest.raises(ValueError):
            arr.resize(32)
    ba.extend(b"x")
    arr.resize(32, refcheck=False)


def test_read_only_mappings_are_refused_as_receive_targets(tmp_path):
    from rdmakit_rdt.buffers import _mapping_writable

    path = tmp_path / "ro.bin"
    path.write_bytes(b"\0" * 8192)
    ro = np.memmap(path, dtype=np.uint8, mode="r")
    addr = ro.__array_interface__["data"][0]
    # A tensor over this memory passes torch's checks; the page table says it is read-only.
    assert _mapping_writable(addr, ro.nbytes) is False
    rw = np.zeros(8192, np.uint8)
    assert _mapping_writable(rw.__array_interface__["data"][0], rw.nbytes) is True
    torch = pytest.importorskip("torch", reason="torch is not installed in this venv")
    from rdmakit_rdt.buffers import describe

    with pytest.warns(UserWarning):  # torch: "The given NumPy array is not writable"
        t = torch.from_numpy(ro)
    with pytest.raises(ValueError, match="read-only memory"):
        describe(t, writable=True)


def test_native_checks_name_the_buffer():
    listener = r.Listener("127.0.0.1:0")
    proc = spawn_sender(listener.port, "one")
    ch = listener.accept(r.Config(), r.Abort())
    with pytest.raises(r.RdmakitError, match="buffer 1: null address"):
        ch.recv("obj-0", [("cpu", 0, 4096, 0), ("cpu", 0, 0, 16)])
    with pytest.raises(r.RdmakitError, match='device type "tpu"'):
        ch.recv("obj-0", [("tpu", 0, 4096, 16)])
    proc.kill()
    proc.wait()


def test_config_reads_the_environment_and_overrides_win(monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "=erdma_0:1,erdma_1:1")
    c = r.Config()
    assert c.rdma_devices == ["erdma_0", "erdma_1"] and c.qps == 4
    assert c.chunk_bytes == MIB and c.tcp_connections == 3  # from conftest's environment
    c = r.Config(chunk="8MiB", qps=6, rdma_devices="mlx5_0")
    assert (c.chunk_bytes, c.qps, c.rdma_devices) == (8 * MIB, 6, ["mlx5_0"])
    with pytest.raises(r.RdmakitError, match="RDMAKIT_SLOTS"):
        r.Config(slots=1)
    with pytest.raises(r.RdmakitError, match="unknown setting"):
        r.Config(chunks="4MiB")


def test_rdma_without_the_feature_is_a_clear_error():
    if r.has_rdma():
        pytest.skip("this wheel has the RDMA transport (tested in the soft-RoCE tier)")
    with pytest.raises(r.RdmakitError, match="rdma. feature"):
        r.SendChannel.connect("127.0.0.1:9", r.Config(transport="rdma", rdma_devices="rxe0"), r.Abort())
