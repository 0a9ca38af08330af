#!/usr/bin/env python3
"""Ray's one-sided RDMAKIT transport over RDMA on soft-RoCE (run by rdt-ray-rdma.sh inside the VM).

    rdt_ray_rdma.py ADDRESS JSON_OUT

Joins the Ray head rdt-ray-rdma.sh started (ADDRESS, the VM's rxe address), starts a producer actor and two
consumer actors (RDMAKIT_TRANSPORT=rdma on rxe0 comes from the environment every Ray process inherits), and:

- actor_pull: the producer returns an object of several arrays (edge sizes around the 1 MiB chunk, 8 dtypes)
  with tensor_transport=RDMAKIT_NUMPY; a consumer receives it as an argument (Ray's one-sided path: the
  consumer's recv_multiple_tensors pulls from the producer's server) and returns each array's SHA-256, compared
  with the same arrays made here from the same seeds;
- fan_out: one object passed to both consumers at once, both exact, the producer's server counting two pulls;
- driver_get: ray.get of an RDMAKIT object in this driver process (fetch_multiple_tensors), bytes compared;
- rxe0's hw_counters (sent_pkts, rcvd_pkts) around each case: an RDMA transfer of N bytes needs at least
  N / 4096 packets each way (4096 is RoCE's largest MTU); a TCP fallback would leave them still.

Exit 0 when every case passed; the JSON has each case's outcome, time and counter deltas.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python", "rdmakit-rdt", "tests"))
from peer import MIB, _bytes, mixed  # noqa: E402

DEV = os.environ.get("RDMAKIT_RXE_DEVICE", "rxe0")
MAX_MTU = 4096
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def counters() -> Dict[str, int]:
    base = f"/sys/class/infiniband/{DEV}/ports/1/hw_counters"
    return {n: int(open(f"{base}/{n}").read()) for n in ("sent_pkts", "rcvd_pkts")}


def delta(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    return {k: after[k] - before[k] for k in before}


def make_object(seed: int) -> List[np.ndarray]:
    # Both sides build it from the seed: around the chunk (RDMAKIT_CHUNK=1MiB), an odd size, and mixed dtypes.
    return [_bytes(MIB - 1, seed), _bytes(MIB + 1, seed + 1), _bytes(3 * MIB, seed + 2), *mixed(seed + 3)]


def digests(arrays: List[np.ndarray]) -> List[str]:
    return [hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).tobytes()).hexdigest() for a in arrays]


def main(address: str, out_path: str) -> int:
    res: Dict[str, object] = {"address": address, "device": DEV, "cases": {}}
    log("importing ray and rdmakit_rdt")
    import ray

    import rdmakit_rdt

    res["ray_version"] = ray.__version__
    res["has_rdma"] = bool(rdmakit_rdt.has_rdma())
    NP = rdmakit_rdt.register("RDMAKIT_NUMPY", data_type=np.ndarray)
    log(f"ray {ray.__version__}, transport {os.environ.get('RDMAKIT_TRANSPORT')}; joining {address}")
    ray.init(address=address, log_to_driver=True)
    res["import_and_init_s"] = round(time.monotonic() - T0, 1)

    @ray.remote(num_cpus=0, enable_tensor_transport=True)
    class Producer:
        @ray.method(tensor_transport=NP)
        def make(self, seed):
            return make_object(seed)

        def stats(self):
            s = rdmakit_rdt.stats()
            return {k: s.get(k) for k in ("served", "bytes_served", "pulls_refused", "listen_address")}

    @ray.remote(num_cpus=0, enable_tensor_transport=True)
    class Consumer:
        def digest(self, arrays):
            s = rdmakit_rdt.stats()
            return digests(arrays), {k: s.get(k) for k in ("objects_received", "bytes_received")}

    t = time.monotonic()
    p, c1, c2 = Producer.remote(), Consumer.remote(), Consumer.remote()
    ray.get([p.stats.remote(), c1.digest.remote([]), c2.digest.remote([])], timeout=600)
    res["actors_ready_s"] = round(time.monotonic() - t, 1)
    log(f"three actors ready in {res['actors_ready_s']} s")

    failures = 0

    def case(name, fn):
        nonlocal failures
        before = counters()
        t = time.monotonic()
        try:
            out = fn() or {}
            outcome = "pass"
        except Exception as e:  # noqa: BLE001 (each case reports its own failure and the rest go on)
            out = {"error": f"{type(e).__name__}: {e}"[:2000]}
            outcome = "fail"
            failures += 1
            traceback.print_exc()
        pkts = delta(before, counters())
        want = out.get("bytes", 0) // MAX_MTU
        if outcome == "pass" and not (pkts["sent_pkts"] >= want and pkts["rcvd_pkts"] >= want):
            outcome = "fail"
            failures += 1
            out["error"] = f"{DEV} counted {pkts} packets for {out.get('bytes')} B: fewer than {want} each way (not RDMA?)"
        res["cases"][name] = {"outcome": outcome, "seconds": round(time.monotonic() - t, 2), "packets": pkts, **out}
        log(f"{name}: {outcome.upper()} in {res['cases'][name]['seconds']} s, packets {pkts}, {out}")

    def actor_pull():
        want = digests(make_object(10))
        got, stats = ray.get(c1.digest.remote(p.make.remote(10)), timeout=300)
        assert got == want, f"consumer's digests differ: {got} != {want}"
        return {"bytes": sum(a.nbytes for a in make_object(10)), "consumer": stats}

    def fan_out():
        want = digests(make_object(20))
        ref = p.make.remote(20)
        served_before = ray.get(p.stats.remote())["served"] or 0
        (g1, _), (g2, _) = ray.get([c1.digest.remote(ref), c2.digest.remote(ref)], timeout=300)
        assert g1 == want and g2 == want, "a consumer's digests differ"
        # The server counts a pull after its send returns, a moment after the consumer has the bytes.
        deadline = time.monotonic() + 60
        while (served := (ray.get(p.stats.remote())["served"] or 0) - served_before) < 2:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert served == 2, f"the producer served {served} pulls for two consumers"
        return {"bytes": 2 * sum(a.nbytes for a in make_object(20)), "served": served}

    def driver_get():
        want = make_object(30)
        got = ray.get(p.make.remote(30), timeout=300)
        assert len(got) == len(want), f"{len(got)} arrays, {len(want)} sent"
        for k, (a, b) in enumerate(zip(want, got)):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f"array {k} differs"
        return {"bytes": sum(a.nbytes for a in want), "driver": {k: rdmakit_rdt.stats()[k] for k in ("bytes_received",)}}

    case("actor_pull", actor_pull)
    case("fan_out", fan_out)
    case("driver_get", driver_get)
    res["producer"] = ray.get(p.stats.remote())
    res["passed"] = failures == 0
    with open(out_path, "w") as f:
        json.dump(res, f, indent=2)
    ray.shutdown()
    log(f"{'PASS' if failures == 0 else 'FAIL'}: {len(res['cases']) - failures} of {len(res['cases'])} cases")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
