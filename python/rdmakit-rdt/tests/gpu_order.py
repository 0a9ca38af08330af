"""GPU ordering through Ray (the GPU machine: torch, one GPU, Ray from the carry).

    python gpu_order.py --out gpu-order.json [--spin-s 2.0] [--producer-spin-s 0.8]

Two races the transport must close, each run twice: with the transport as built (``ordered``,
must be exact) and with the test-only switch ``_RDMAKIT_TEST_SKIP_STREAM_ORDER=1`` in the actors
(``unordered``: no event recorded or waited for), which shows the test detects the race.

- ``producer_side_stream``: the producer fills a tensor with 0x11, then on a side stream queues a
  spin and a fill with the real value, names the stream (``rdmakit_rdt.produced_on``) and
  returns. A send that does not wait for the side stream copies 0x11.
- ``consumer_block_reuse``: the consumer allocates a block, queues a spin and a fill with 0xEE
  on its stream, frees the block (the caching allocator takes it back at once) and returns.
  The receive (Ray's ``__ray_recv__`` on the ``_ray_system`` thread) then allocates the same block
  (checked by address) on that stream; a receive that does not wait for the stream lands first
  and is overwritten by the fill.
- ``consumer_block_reuse_direct``: the same, without Ray's scheduling in between: one consumer
  method queues the spin and the fill, frees the block and calls the transport's
  ``recv_multiple_tensors`` itself (a second pull of the object of ``consumer_block_reuse``).
- ``consumer_block_reuse_host_source``: as ``_direct``, but the producer's object is in host
  memory and the receive gets a CUDA target allocated right after the free (same block): no
  producer GPU work at all, so time-slicing between the two processes' CUDA contexts cannot
  delay the pull until the consumer's spin ends.

Why earlier runs did not reproduce the consumer race (hypothesis, checked by
``lazy_load_probe``): CUDA's lazy module loading (the default since CUDA 12) loads a kernel at its
first launch, and that load may synchronise the context. The consumer's first uint8 ``fill_`` was
the one queued behind the spin in ``dirty()``, so its launch waited for the spin, and the block
was clean before the receive started. Every kernel the consumer cases launch is now run once
(``warm``) before them. The consumer actors also record, through wrappers around the transport's
``_allocate``, ``ready_for_write`` and ``recv_multiple_tensors`` (library behaviour unchanged),
whether the fill was still pending at each step of the receive.

Exit status 0 only if every ``ordered`` case is exact; the JSON says whether the ``unordered``
runs saw the race and whether the race window was open when the pull began (if not, the race was
not set up and the ordered result proves less).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import ray
import torch

import rdmakit_rdt

rdmakit_rdt.register()
N = 64 << 20
CHUNK = 500_000_000  # cycles per torch.cuda._sleep launch (~0.25 s), so no launch nears 2**31
CALIBRATE = 200_000_000  # cycles timed to learn the SM clock (~0.1 s)
TIMEOUT = 90.0  # bound on any one ray.get
CONSUMER_CASES = (
    "consumer_block_reuse",
    "consumer_block_reuse_direct",
    "consumer_block_reuse_host_source",
)


def _spin(cycles: int) -> None:
    """Queues ``cycles`` SM cycles of spinning on the current stream (one thread block)."""
    cycles = int(cycles)
    while cycles > 0:
        torch.cuda._sleep(min(cycles, CHUNK))
        cycles -= CHUNK


def _wrap_transport(actor) -> str:
    """Wraps the transport's ``_allocate``, ``ready_for_write`` and
    ``RdmakitTensorTransport.recv_multiple_tensors`` in this process so that they record, into
    ``actor.rec`` (the consumer case in progress, when there is one), host times relative to the
    spin's launch and whether the event recorded after the dirty fill had completed; and remember
    the last object's metadata (``actor.last``). Each wrapper calls the original with the same
    arguments and returns its result: the library's behaviour is unchanged."""
    try:
        import rdmakit_rdt.transport as tr  # noqa: PLC0415 (in the actor)

        orig_alloc = tr._allocate
        orig_rfw = tr.ready_for_write
        orig_recv = tr.RdmakitTensorTransport.recv_multiple_tensors

        def note(key_at, key_done):
            rec = actor.rec
            if rec is None:
                return None
            rec[key_at] = round(time.monotonic() - rec["_t0"], 6)
            rec[key_done] = bool(actor.evs[2].query())
            return rec

        def opened():
            try:
                return int(tr._STATE.stats["recv_channels_opened"])
            except Exception:  # noqa: BLE001
                return None

        def _allocate(meta):
            rec = note("alloc_at", "ev_done_at_alloc")
            out = orig_alloc(meta)
            if rec is not None:
                t = out[0] if out else None
                ptr = int(t.data_ptr()) if isinstance(t, torch.Tensor) else None
                rec["alloc_same_block"] = ptr is not None and ptr == rec.get("ptr")
                rec["alloc_thread"] = threading.current_thread().name
                if torch.cuda.is_available():
                    rec["alloc_stream"] = int(torch.cuda.current_stream().cuda_stream)
            return out

        def ready_for_write(objs, stream=None):
            rec = note("order_start_at", "ev_done_at_order_start")
            s = time.monotonic()
            r = orig_rfw(objs, stream)
            if rec is not None:
                rec["order_wait_s"] = round(time.monotonic() - s, 6)
                note("pull_start_at", "ev_done_at_pull_start")
                rec["order_thread"] = threading.current_thread().name
                if torch.cuda.is_available():
                    rec["order_stream"] = int(torch.cuda.current_stream().cuda_stream)
            return r

        def recv_multiple_tensors(self, obj_id, meta, comm, *args, **kwargs):
            rec = note("recv_start_at", "ev_done_at_recv_start")
            before = opened()
            actor.recv_calls += 1
            try:
                return orig_recv(self, obj_id, meta, comm, *args, **kwargs)
            except BaseException as e:
                if rec is not None:
                    rec["recv_error"] = repr(e)
                raise
            finally:
                actor.last = (obj_id, meta, comm)
                if rec is not None:
                    note("recv_end_at", "ev_done_at_recv_end")
                    after = opened()
                    if before is not None and after is not None:
                        rec["sessions_opened_during_recv"] = after - before
                    rec["obj_id"] = getattr(meta, "obj_id", "") or obj_id
                    if "pull_start_at" in rec:
                        rec["pull_s"] = round(rec["recv_end_at"] - rec["pull_start_at"], 6)

        tr._allocate = _allocate
        tr.ready_for_write = ready_for_write
        tr.RdmakitTensorTransport.recv_multiple_tensors = recv_multiple_tensors
        return "ok"
    except Exception as e:  # noqa: BLE001 (diagnostics only: the cases run without them)
        return f"not wrapped: {e!r}"


@ray.remote(num_gpus=0.4, enable_tensor_transport=True)
class Producer:
    @ray.method(tensor_transport="RDMAKIT")
    def side_stream(self, value, cycles):
        t = torch.full((N,), 0x11, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            _spin(cycles)
            t.fill_(value)
        t.record_stream(s)
        rdmakit_rdt.produced_on(s)
        return t

    @ray.method(tensor_transport="RDMAKIT")
    def ready(self, value):
        t = torch.full((N,), value, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return t

    @ray.method(tensor_transport="RDMAKIT")
    def host(self, value):
        return torch.full((N,), value, dtype=torch.uint8)

    def serve_span(self, obj_id):
        """The last serve span of ``obj_id`` (wall-clock start, end, bytes, ok), or None."""
        try:
            spans = [s for s in rdmakit_rdt.stats()["serve_spans"] if s[0] == obj_id]
        except Exception:  # noqa: BLE001
            return None
        return list(spans[-1][1:]) if spans else None


@ray.remote(num_gpus=0.4, enable_tensor_transport=True)
class Consumer:
    def __init__(self):
        self.rec = None  # diagnostics of the consumer case in progress (the wrappers add to it)
        self.ptr = None
        self.last = None  # (obj_id, meta, comm) of the last object received
        self.metas = {}
        self.recv_calls = 0
        self.evs = None
        self.wrapped = _wrap_transport(self)

    def probe(self, spin_s):
        """Calibrates the spin (SM cycles per second) and checks the lazy-loading hypothesis: the
        first uint8 fill of this process launched behind a spin ("cold") vs the second ("warm").
        A cold launch that takes the spin's length and finds the spin done synchronised."""
        torch.cuda._sleep(1000)  # loads the spin kernel with nothing queued
        torch.cuda.synchronize()
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        torch.cuda._sleep(CALIBRATE)
        b.record()
        b.synchronize()
        rate = CALIBRATE / (a.elapsed_time(b) / 1000.0)
        y = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        out = {
            "cycles_per_s": rate,
            "clock_ghz": round(rate / 1e9, 3),
            "spin_s": spin_s,
            "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
            "torch_cuda": torch.version.cuda,
            "wrapped": self.wrapped,
        }
        for label in ("cold", "warm"):
            torch.cuda.synchronize()
            a.record()
            _spin(rate * spin_s)
            c.record()
            t1 = time.monotonic()
            y.fill_(0xEE)
            t2 = time.monotonic()
            out[label] = {
                "fill_launch_s": round(t2 - t1, 6),
                "spin_done_after_fill_launch": bool(c.query()),
            }
            torch.cuda.synchronize()
            out[label]["spin_measured_s"] = round(a.elapsed_time(c) / 1000.0, 4)
        out["lazy_load_synchronised"] = (
            out["cold"]["spin_done_after_fill_launch"] and not out["warm"]["spin_done_after_fill_launch"]
        )
        return out

    def warm(self):
        """Runs once every kernel the consumer cases launch (spin, uint8 fill, !=, sum, item,
        index) and makes the events, so nothing loads lazily (and synchronises) mid-case."""
        self.evs = tuple(torch.cuda.Event(enable_timing=True) for _ in range(3))
        x = torch.empty(N, dtype=torch.uint8, device="cuda")
        for e in self.evs:
            e.record()
        _spin(1000)
        x.fill_(0xEE)
        _ = int((x != 0x77).sum().item()), int(x[0].item())
        torch.cuda.synchronize()
        del x
        return True

    def dirty(self, cycles):
        """Allocates a block, queues the spin and the 0xEE fill on it on the current stream,
        frees it and returns; ``self.rec`` collects this case's diagnostics from here on."""
        torch.cuda.synchronize()  # nothing older is pending
        ev_spin0, _, ev_fill = self.evs
        stream = torch.cuda.current_stream()
        x = torch.empty(N, dtype=torch.uint8, device="cuda")
        rec = {"_t0": time.monotonic(), "_wall0": time.time()}
        ev_spin0.record()
        _spin(cycles)
        t1 = time.monotonic()
        x.fill_(0xEE)
        ev_fill.record()
        t2 = time.monotonic()
        ptr = int(x.data_ptr())
        del x  # back in the cache, with the spin and the fill still queued on it
        rec.update(
            ptr=ptr,
            spin_cycles=int(cycles),
            sleep_launch_s=round(t1 - rec["_t0"], 6),
            fill_launch_s=round(t2 - t1, 6),
            dirty_thread=threading.current_thread().name,
            dirty_stream=int(stream.cuda_stream),
        )
        rec["ev_done_at_dirty_return"] = bool(ev_fill.query())
        rec["dirty_return_at"] = round(time.monotonic() - rec["_t0"], 6)
        self.ptr, self.rec = ptr, rec
        return {"ptr": ptr, "t0": rec["_t0"], "wall0": rec["_wall0"]}

    def check(self, t, value):
        rec, self.rec = self.rec, None
        out = {}
        if rec is not None:
            out["check_start_at"] = round(time.monotonic() - rec["_t0"], 6)
            out["ev_done_at_check_start"] = bool(self.evs[2].query())
        s = time.monotonic()
        torch.cuda.synchronize()
        out["check_sync_s"] = round(time.monotonic() - s, 6)
        out.update(
            same_block=t.data_ptr() == self.ptr,
            wrong_bytes=int((t != value).sum().item()),
            first=int(t[0].item()),
        )
        if rec is not None:
            out["spin_measured_s"] = round(self.evs[0].elapsed_time(self.evs[2]) / 1000.0, 4)
            out.update({k: v for k, v in rec.items() if not k.startswith("_")})
            out["wall0"] = rec["_wall0"]
            done = rec.get("ev_done_at_pull_start")
            out["window_open_at_pull_start"] = None if done is None else not done
        out["recv_calls"] = self.recv_calls
        self.ptr = None
        return out

    def keep(self, t, name):
        """Remembers the metadata of the object just received (``t``) for ``direct``."""
        self.metas[name] = self.last
        return str(t.device)

    def remember(self, name):
        self.metas[name] = self.last
        return self.last is not None

    def direct(self, name, value, cycles):
        """``dirty`` and the receive in one call: the pull starts microseconds after the fill
        was queued. A CUDA object is received through the transport's own allocation; a host
        object into a CUDA block allocated here (the freed one, by address)."""
        from ray.experimental.rdt.util import get_tensor_transport_manager  # noqa: PLC0415

        obj_id, meta, comm = self.metas[name]
        mgr = get_tensor_transport_manager("RDMAKIT")
        self.dirty(cycles)
        rec = self.rec
        target = None
        if meta.tensor_device != "cuda":
            target = [torch.empty(N, dtype=torch.uint8, device="cuda")]
            rec["alloc_same_block"] = int(target[0].data_ptr()) == self.ptr
            rec["alloc_thread"] = threading.current_thread().name
            rec["alloc_stream"] = int(torch.cuda.current_stream().cuda_stream)
        rec["source_device"] = meta.tensor_device
        try:
            out = mgr.recv_multiple_tensors(obj_id, meta, comm, target)
        except BaseException:
            torch.cuda.synchronize()
            self.rec = None
            raise
        return self.check(out[0], value)


def _get(ref):
    return ray.get(ref, timeout=TIMEOUT)


def _case(fn) -> dict:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (recorded; the verdict counts it as not exact)
        return {"error": repr(e), "wrong_bytes": None}


def _serve(p, res: dict) -> None:
    """Adds the producer's serve span of the object, relative to the consumer's spin launch."""
    oid, wall0 = res.get("obj_id"), res.pop("wall0", None)
    if not oid or wall0 is None:
        return
    try:
        span = _get(p.serve_span.remote(oid))
    except Exception as e:  # noqa: BLE001
        res["serve_span_error"] = repr(e)
        return
    if span:
        res["serve_start_at"] = round(span[0] - wall0, 6)
        res["serve_end_at"] = round(span[1] - wall0, 6)
        res["serve_ok"] = span[3]
    res.pop("obj_id", None)


def run(skip: bool, spin_s: float, producer_spin_s: float) -> tuple:
    env = {"env_vars": {"_RDMAKIT_TEST_SKIP_STREAM_ORDER": "1" if skip else "0"}}
    p, c = Producer.options(runtime_env=env).remote(), Consumer.options(runtime_env=env).remote()
    probe = _get(c.probe.remote(min(0.3, spin_s)))
    rate = probe["cycles_per_s"]
    _get(c.check.remote(p.ready.remote(1), 1))  # session set up, allocator warm
    _get(c.warm.remote())
    out: dict = {}

    def side_stream():
        start = time.monotonic()
        r = _get(c.check.remote(p.side_stream.remote(0x5A, int(rate * producer_spin_s)), 0x5A))
        r["seconds"] = time.monotonic() - start
        return r

    out["producer_side_stream"] = _case(side_stream)

    # The object first, made and synchronised: nothing of the producer's runs during the spin but
    # its serving thread's copies.
    ref = p.ready.remote(0x77)
    ray.wait([ref], fetch_local=False, timeout=TIMEOUT)

    def block_reuse():
        d = _get(c.dirty.remote(int(rate * spin_s)))
        returned = time.monotonic()
        r = _get(c.check.remote(ref, 0x77))
        r["seconds"] = time.monotonic() - returned
        r["driver_dirty_returned_at"] = round(returned - d["t0"], 6)
        r["dirty_ptr_seen"] = d["ptr"] is not None
        _get(c.remember.remote("device"))
        _serve(p, r)
        return r

    out["consumer_block_reuse"] = _case(block_reuse)

    def direct(name, value):
        def go():
            start = time.monotonic()
            r = _get(c.direct.remote(name, value, int(rate * spin_s)))
            r["seconds"] = time.monotonic() - start
            _serve(p, r)
            return r

        return go

    out["consumer_block_reuse_direct"] = _case(direct("device", 0x77))

    href = p.host.remote(0x66)

    def host_source():
        where = _get(c.keep.remote(href, "host"))
        r = direct("host", 0x66)()
        r["first_pull_landed_on"] = where
        return r

    out["consumer_block_reuse_host_source"] = _case(host_source)
    ray.kill(p)  # ref and href stay alive until here: the direct pulls re-pull their objects
    ray.kill(c)
    return out, probe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--spin-s", type=float, default=2.0,
                    help="consumer spin before its 0xEE fill, seconds (the race window)")
    ap.add_argument("--producer-spin-s", type=float, default=0.8,
                    help="producer side-stream spin before its fill, seconds")
    args = ap.parse_args()
    t_start = time.monotonic()
    ray.init(include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith("RDMAKIT_")}})
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "bytes": N,
           "spin_s": args.spin_s, "producer_spin_s": args.producer_spin_s}
    probes = {}
    for name, skip in (("ordered", False), ("unordered", True)):
        try:
            res[name], probes[name] = run(skip, args.spin_s, args.producer_spin_s)
        except Exception as e:  # noqa: BLE001 (recorded; counts as not exact)
            res[name] = {"setup": {"error": repr(e), "wrong_bytes": None}}
    res["lazy_load_probe"] = probes

    def exact(v):
        return isinstance(v.get("wrong_bytes"), int) and v["wrong_bytes"] == 0

    ok = all(exact(v) for v in res["ordered"].values())
    res["verdict"] = {
        "ordered_exact": ok,
        "consumer_block_was_reused": {
            k: res["ordered"].get(k, {}).get("same_block") for k in CONSUMER_CASES
        },
        "race_seen_unordered": {
            k: (v["wrong_bytes"] > 0 if isinstance(v.get("wrong_bytes"), int) else None)
            for k, v in res["unordered"].items()
        },
        # True: the dirty fill was still pending when the pull began (the race was set up).
        "window_open_at_pull_start": {
            run_name: {k: res[run_name].get(k, {}).get("window_open_at_pull_start")
                       for k in CONSUMER_CASES}
            for run_name in ("ordered", "unordered")
        },
        "lazy_load_synchronised": {k: v.get("lazy_load_synchronised") for k, v in probes.items()},
    }
    res["total_seconds"] = round(time.monotonic() - t_start, 3)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    ray.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
