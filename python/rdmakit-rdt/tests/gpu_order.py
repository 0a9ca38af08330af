"""GPU ordering through Ray (the GPU machine: torch, one GPU, Ray from the carry).

    python gpu_order.py --out gpu-order.json

Two races the transport must close, each run twice: with the transport as built (``ordered``,
must be exact) and with the test-only switch ``_RDMAKIT_TEST_SKIP_STREAM_ORDER=1`` in the actors
(``unordered``: no event recorded or waited for), which shows the test detects the race.

- ``producer_side_stream``: the producer fills a tensor with 0x11, then on a side stream queues a
  ~1 s spin and a fill with the real value, names the stream (``rdmakit_rdt.produced_on``) and
  returns. A send that does not wait for the side stream copies 0x11.
- ``consumer_block_reuse``: the consumer allocates a block, queues a ~1 s spin and a fill with
  0xEE on its stream, frees the block (the caching allocator takes it back at once) and returns.
  The receive then allocates the same block (checked by address) on that stream; a receive that
  does not wait for the stream lands first and is overwritten by the fill.

Exit status 0 only if both ``ordered`` runs are exact; the JSON says whether the ``unordered``
runs saw the race (if not, the race was not reproduced and the ordered result proves less).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import ray
import torch

import rdmakit_rdt

rdmakit_rdt.register()
N = 64 << 20
SPIN = int(1.5e9)  # cycles of torch.cuda._sleep: ~0.8 s at the H200's ~1.98 GHz


@ray.remote(num_gpus=0.4, enable_tensor_transport=True)
class Producer:
    @ray.method(tensor_transport="RDMAKIT")
    def side_stream(self, value):
        t = torch.full((N,), 0x11, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            torch.cuda._sleep(SPIN)
            t.fill_(value)
        t.record_stream(s)
        rdmakit_rdt.produced_on(s)
        return t

    @ray.method(tensor_transport="RDMAKIT")
    def ready(self, value):
        t = torch.full((N,), value, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return t


@ray.remote(num_gpus=0.4, enable_tensor_transport=True)
class Consumer:
    def dirty(self):
        x = torch.empty(N, dtype=torch.uint8, device="cuda")
        torch.cuda._sleep(SPIN)
        x.fill_(0xEE)
        self.ptr = x.data_ptr()
        del x  # back in the cache, with the spin and the fill still queued on it
        return self.ptr

    def check(self, t, value):
        torch.cuda.synchronize()
        return {
            "same_block": t.data_ptr() == getattr(self, "ptr", None),
            "wrong_bytes": int((t != value).sum().item()),
            "first": int(t[0].item()),
        }


def run(skip: bool) -> dict:
    env = {"env_vars": {"_RDMAKIT_TEST_SKIP_STREAM_ORDER": "1" if skip else "0"}}
    p, c = Producer.options(runtime_env=env).remote(), Consumer.options(runtime_env=env).remote()
    ray.get(c.check.remote(p.ready.remote(1), 1))  # channel set up, allocator warm
    out = {}
    start = time.monotonic()
    out["producer_side_stream"] = ray.get(c.check.remote(p.side_stream.remote(0x5A), 0x5A))
    out["producer_side_stream"]["seconds"] = time.monotonic() - start
    # The object first: GPU contexts are time-sliced, so a producer kernel queued while the
    # consumer's spin runs would wait for it, and the race would be gone before the receive.
    ref = p.ready.remote(0x77)
    ray.wait([ref], fetch_local=False)
    ptr = ray.get(c.dirty.remote())
    start = time.monotonic()
    out["consumer_block_reuse"] = ray.get(c.check.remote(ref, 0x77))
    out["consumer_block_reuse"]["seconds"] = time.monotonic() - start
    out["consumer_block_reuse"]["dirty_ptr_seen"] = ptr is not None
    ray.kill(p)
    ray.kill(c)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    ray.init(include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith("RDMAKIT_")}})
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "bytes": N}
    res["ordered"] = run(skip=False)
    res["unordered"] = run(skip=True)
    ok = all(v["wrong_bytes"] == 0 for v in res["ordered"].values())
    reuse = res["ordered"]["consumer_block_reuse"]["same_block"]
    res["verdict"] = {
        "ordered_exact": ok,
        "consumer_block_was_reused": reuse,
        "race_seen_unordered": {k: v["wrong_bytes"] > 0 for k, v in res["unordered"].items()},
    }
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    ray.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
