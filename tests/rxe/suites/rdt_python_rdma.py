#!/usr/bin/env python3
"""rdmakit-rdt's native send/recv over RDMA on soft-RoCE (run by rdt-python-rdma.sh inside the VM).

    rdt_python_rdma.py check JSON_OUT      # the receiver side of every case; spawns the senders
    rdt_python_rdma.py send ADDR SCENARIO  # one sender process (spawned by `check`)
    rdt_python_rdma.py serve SCENARIO      # one producer's server for the pull case (spawned by `check`)

Every case is two processes: this one listens on $RDMAKIT_RXE_IP (a rdmakit_rdt.Listener), a sender
process connects (objects from python/rdmakit-rdt/tests/peer.py, as in the package's test_native.py);
the channel is gpu-stage's RDMA transport (RDMAKIT_TRANSPORT=rdma,
RDMAKIT_RDMA_DEVICES=rxe0, RDMAKIT_GID_INDEX=1, host backend, 1 MiB chunks), the same _native layer
the Ray transport uses. Objects are made by `objects(scenario)` on both sides from fixed seeds, so the
receiver compares every byte. rxe0's hw_counters (sent_pkts, rcvd_pkts) are read before and after the
size cases; an RDMA transfer of N bytes needs at least N / 4096 packets (4096 is RoCE's largest MTU),
and the same kind of transfer with RDMAKIT_TRANSPORT=tcp must leave them below that (the A/B).
Exit 0 when every case passed; the JSON has each case's outcome, time and counter deltas.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List

import numpy as np

# The objects of the package's own two-process tests (python/rdmakit-rdt/tests/peer.py): random bytes
# from fixed seeds, and 8 dtypes/shapes per object. Its EDGE_SIZES assume 1 MiB chunks (RDMAKIT_CHUNK below).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python", "rdmakit-rdt", "tests"))
from peer import EDGE_SIZES, MIB, _bytes, mixed  # noqa: E402

CHUNK = MIB
MAX_MTU = 4096
DEV = os.environ.get("RDMAKIT_RXE_DEVICE", "rxe0")
IP = os.environ.get("RDMAKIT_RXE_IP", "10.99.0.1")
TIMEOUT_S = 20.0

SETTINGS = {
    "RDMAKIT_TRANSPORT": "rdma",
    "RDMAKIT_RDMA_DEVICES": DEV,
    "RDMAKIT_GID_INDEX": os.environ.get("RDMAKIT_RXE_GID_INDEX", "1"),
    "RDMAKIT_BACKEND": "host",
    "RDMAKIT_CHUNK": "1MiB",
    "RDMAKIT_SLOTS": "4",
    "RDMAKIT_TIMEOUT_S": str(int(TIMEOUT_S)),
}
for k, v in SETTINGS.items():
    os.environ.setdefault(k, v)

import rdmakit_rdt as r  # noqa: E402 (after the environment it reads)


def objects(scenario: str) -> List[List[np.ndarray]]:
    if scenario == "sizes":
        # One array per object at each edge size, then all the small edge sizes in one object, then
        # two objects of 8 dtypes/shapes each.
        single = [[_bytes(n, i)] for i, n in enumerate(EDGE_SIZES)]
        several = [[_bytes(n, 50 + i) for i, n in enumerate(EDGE_SIZES[:-1])]]
        return single + several + [mixed(1), mixed(2)]
    if scenario in ("one", "one-then-wait"):
        return [[_bytes(CHUNK + 1, 9)]]
    if scenario == "tcp-ab":
        return [[_bytes(16 * MIB, 11)]]
    raise ValueError(scenario)


def counters() -> Dict[str, int]:
    base = f"/sys/class/infiniband/{DEV}/ports/1/hw_counters"
    return {n: int(open(f"{base}/{n}").read()) for n in ("sent_pkts", "rcvd_pkts")}


def delta(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    return {k: after[k] - before[k] for k in before}


# ---------------------------------------------------------------- sender process
def send_main(addr: str, scenario: str) -> None:
    ch = r.SendChannel.connect(addr, r.Config(), r.Abort())
    if scenario == "forever":
        # Streams 8 MiB objects until the receiver's side kills this process.
        data = _bytes(8 * MIB, 5)
        i = 0
        while True:
            r.send(ch, f"obj-{i}", [data])
            i += 1
    for i, o in enumerate(objects(scenario)):
        r.send(ch, f"obj-{i}", o)
    if scenario == "one-then-wait":
        time.sleep(60)  # keeps the channel open: the receiver's abort, not our exit, ends its wait


# ---------------------------------------------------------------- receiver side
def spawn(addr: str, scenario: str, env: Dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "send", addr, scenario],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )


def open_channel(scenario: str, **overrides):
    listener = r.Listener(f"{IP}:0")
    addr = f"{IP}:{listener.port}"
    env = {f"RDMAKIT_{k.upper()}": str(v) for k, v in overrides.items()}
    proc = spawn(addr, scenario, env)
    cfg = r.Config(**overrides) if overrides else r.Config()
    ch = listener.accept(cfg, r.Abort())
    return proc, ch


def reap(proc: subprocess.Popen, want_ok: bool = True) -> str:
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError("the sender did not finish within 30 s")
    text = out.decode(errors="replace")
    if want_ok and proc.returncode != 0:
        raise AssertionError(f"sender exited {proc.returncode}: {text[-2000:]}")
    return text


def receive_all(ch, scenario: str) -> int:
    total = 0
    for i, obj in enumerate(objects(scenario)):
        dst = [np.empty_like(a) for a in obj]
        for b in dst:
            b.reshape(-1).view(np.uint8).fill(0xAB)  # so a byte that never arrived shows
        n = r.recv(ch, f"obj-{i}", dst)
        want = sum(a.nbytes for a in obj)
        assert n == want, f"object {i}: {n} bytes received, {want} sent"
        for k, (a, b) in enumerate(zip(obj, dst)):
            assert a.shape == b.shape and a.dtype == b.dtype, f"object {i} buffer {k}: shape/dtype"
            assert a.tobytes() == b.tobytes(), f"object {i} buffer {k} ({a.nbytes} B): bytes differ"
        total += n
    return total


def case_sizes(res: dict) -> None:
    proc, ch = open_channel("sizes")
    before = counters()
    t = time.monotonic()
    total = receive_all(ch, "sizes")
    secs = time.monotonic() - t
    after = counters()
    reap(proc)
    ch.close()
    d = delta(before, after)
    floor = total // MAX_MTU
    res.update(
        objects=len(objects("sizes")),
        sizes=EDGE_SIZES,
        bytes=total,
        seconds=round(secs, 3),
        mb_s=round(total / secs / 1e6, 2),
        counters_before=before,
        counters_after=after,
        counter_delta=d,
        packet_floor=floor,
    )
    assert d["sent_pkts"] >= floor and d["rcvd_pkts"] >= floor, (
        f"{DEV} counted {d} packets for {total} bytes over RDMA; expected >= {floor} each way"
    )


def case_tcp_ab(res: dict) -> None:
    # The same kind of transfer over TCP: the bytes arrive, rxe0's counters must not account for them.
    proc, ch = open_channel("tcp-ab", transport="tcp")
    before = counters()
    total = receive_all(ch, "tcp-ab")
    after = counters()
    reap(proc)
    ch.close()
    d = delta(before, after)
    floor = total // MAX_MTU
    res.update(transport="tcp", bytes=total, counter_delta=d, packet_floor=floor)
    assert d["sent_pkts"] < floor and d["rcvd_pkts"] < floor, (
        f"{DEV} counted {d} packets during a TCP transfer of {total} bytes (floor {floor}): "
        "the counters do not tell RDMA from TCP"
    )


def case_sender_killed(res: dict) -> None:
    proc, ch = open_channel("forever")
    try:
        dst = np.empty(8 * MIB, np.uint8)
        r.recv(ch, "obj-0", [dst])  # the sender is alive and streaming the next object
        os.kill(proc.pid, signal.SIGKILL)
        t = time.monotonic()
        err = None
        received = 1
        try:
            for i in range(1, 1000):
                r.recv(ch, f"obj-{i}", [dst])
                received += 1
        except r.RdmakitError as e:
            err = e
        took = time.monotonic() - t
        res.update(objects_before_error=received, seconds_to_error=round(took, 3),
                   error=str(err)[:500] if err else None, error_type=type(err).__name__ if err else None)
        assert err is not None, "no error after the sender was killed"
        assert took < TIMEOUT_S, f"the receiver raised after {took:.1f}s (timeout {TIMEOUT_S}s)"
        assert ch.closed is not None, "the channel is not marked closed"
        try:
            r.recv(ch, "again", [dst])
            raise AssertionError("a receive on the closed channel did not raise")
        except r.RdmakitError as e:
            res["after_close"] = str(e)[:200]
    finally:
        proc.kill()
        proc.wait()


def case_abort(res: dict) -> None:
    proc, ch = open_channel("one-then-wait")
    abort_reason = "rxe suite says stop"
    try:
        dst = np.empty(CHUNK + 1, np.uint8)
        r.recv(ch, "obj-0", [dst])
        threading.Timer(0.3, lambda: ch.abort(abort_reason)).start()
        t = time.monotonic()
        err = None
        try:
            r.recv(ch, "obj-1", [dst])
        except r.RdmakitError as e:
            err = e
        took = time.monotonic() - t
        res.update(seconds_to_error=round(took, 3), error=str(err)[:500] if err else None,
                   error_type=type(err).__name__ if err else None)
        assert err is not None, "the receive of an object that never comes did not end on abort"
        assert abort_reason in str(err), f"the error does not name the abort: {err}"
        assert took < 5, f"the abort took {took:.1f}s"
    finally:
        proc.kill()
        proc.wait()


def case_wrong_object(res: dict) -> None:
    proc, ch = open_channel("one")
    dst = np.zeros(CHUNK + 1, np.uint8)
    try:
        r.recv(ch, "obj-7", [dst])
        raise AssertionError("a different object was accepted")
    except r.RdmakitError as e:
        res["error"] = str(e)[:500]
        assert "obj-0" in str(e) and "obj-7" in str(e), str(e)
    assert not dst.any(), "bytes landed in the buffer of a refused object"
    reap(proc, want_ok=False)


# ---------------------------------------------------------------- receiver pull (what runs under Ray)
def serve_main(scenario: str) -> None:
    """A producer: a Server on $RDMAKIT_RXE_IP registers the scenario's objects under the token the
    consumer put in RDMAKIT_TEST_TOKEN (hex: a secret goes through the environment, never argv),
    prints its port and serves until the consumer kills it."""
    from rdmakit_rdt.buffers import pinned

    token = bytes.fromhex(os.environ.pop("RDMAKIT_TEST_TOKEN"))
    server = r.Server(f"{IP}:0", r.Config())
    kept = []
    for i, o in enumerate(objects(scenario)):
        specs, keep = pinned(o)
        server.register(f"obj-{i}", specs, token, keep)
        kept.append(keep)
    print(f"PORT {server.port}", flush=True)
    time.sleep(120)


def case_pull(res: dict) -> None:
    # The consumer connects to the producer's server and pulls each object over RDMA: the direction
    # Ray's one-sided transport uses (transport.py's recv_multiple_tensors). A wrong token is refused.
    from rdmakit_rdt import exported

    token = secrets.token_bytes(32)
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "serve", "sizes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "RDMAKIT_TEST_TOKEN": token.hex()},
    )
    try:
        line = proc.stdout.readline().decode(errors="replace")
        assert line.startswith("PORT "), f"the producer did not start: {line}{proc.stdout.read(4000)!r}"
        ch = r.RecvChannel.connect(f"{IP}:{int(line.split()[1])}", r.Config(), r.Abort(), token)
        before = counters()
        t = time.monotonic()
        total = 0
        for i, obj in enumerate(objects("sizes")):
            dst = [np.empty_like(a) for a in obj]
            for b in dst:
                b.reshape(-1).view(np.uint8).fill(0xAB)  # so a byte that never arrived shows
            with exported(dst, writable=True) as specs:
                n = ch.pull(f"obj-{i}", specs, token)
            want = sum(a.nbytes for a in obj)
            assert n == want, f"object {i}: {n} bytes pulled, {want} registered"
            for k, (a, b) in enumerate(zip(obj, dst)):
                assert a.tobytes() == b.tobytes(), f"object {i} buffer {k} ({a.nbytes} B): bytes differ"
            total += n
        secs = time.monotonic() - t
        after = counters()
        wrong = np.zeros(CHUNK + 1, np.uint8)
        try:
            with exported([wrong], writable=True) as specs:
                ch.pull("obj-0", specs, secrets.token_bytes(32))
            raise AssertionError("a pull with another token was served")
        except r.RdmakitError as e:
            res["wrong_token"] = str(e)[:300]
        assert not wrong.any(), "bytes landed in the buffer of a refused pull"
        ch.close()
        d = delta(before, after)
        floor = total // MAX_MTU
        res.update(bytes=total, seconds=round(secs, 3), mb_s=round(total / secs / 1e6, 2),
                   counter_delta=d, packet_floor=floor)
        assert d["sent_pkts"] >= floor and d["rcvd_pkts"] >= floor, (
            f"{DEV} counted {d} packets for {total} bytes pulled over RDMA; expected >= {floor} each way"
        )
    finally:
        proc.kill()
        proc.wait()


CASES = [
    ("edge sizes, several arrays and dtypes per object, verified; rxe counters", case_sizes),
    ("receiver pull from a producer's server (Ray's direction), verified; rxe counters; a wrong token refused", case_pull),
    ("A/B: the same kind of transfer over TCP leaves rxe's counters still", case_tcp_ab),
    ("sender SIGKILLed mid-stream: the receiver raises within the timeout", case_sender_killed),
    ("abort from another thread ends a waiting receive", case_abort),
    ("a different object is refused before any byte lands", case_wrong_object),
]


def check_main(json_out: str) -> int:
    assert r.has_rdma(), f"{r.__file__}: this rdmakit_rdt has no RDMA transport (wheel built without --features rdma)"
    report = {
        "suite": "rdt-python-rdma",
        "module": r.__file__,
        "device": DEV,
        "listen_ip": IP,
        "settings": {k: os.environ[k] for k in SETTINGS},
        "config": repr(r.Config()),
        "cases": [],
    }
    failed = 0
    for name, fn in CASES:
        res: dict = {"case": name}
        t = time.monotonic()
        try:
            fn(res)
            res["ok"] = True
        except Exception as e:  # noqa: BLE001 (every case runs; the first failure is not the only one)
            res["ok"] = False
            res["failure"] = f"{type(e).__name__}: {e}"[:2000]
            failed += 1
        res["wall_s"] = round(time.monotonic() - t, 2)
        report["cases"].append(res)
        print(("PASS " if res["ok"] else "FAIL ") + name + f" ({res['wall_s']}s)", flush=True)
        print("  " + json.dumps({k: v for k, v in res.items() if k not in ("case", "ok")}), flush=True)
    report["passed"] = len(CASES) - failed
    report["failed"] = failed
    with open(json_out + ".tmp", "w") as f:
        json.dump(report, f, indent=2)
    os.replace(json_out + ".tmp", json_out)
    return 1 if failed else 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "send":
        send_main(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve_main(sys.argv[2])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        return check_main(sys.argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
