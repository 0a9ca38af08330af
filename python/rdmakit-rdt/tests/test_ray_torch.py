"""Torch tensors (CPU) through RDMAKIT under a real local Ray: what a weight sync sends — a
transformer-shaped bf16 state dict with the odd members real ones have (a 0-dim step counter, a
bool mask, fp16, an empty tensor, a view at a storage offset), to one consumer, to three at once,
and to the driver. Skipped where torch is not installed (make test installs it)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this venv")
ray = pytest.importorskip("ray", reason="ray is not installed in this venv")

import rdmakit_rdt  # noqa: E402

# RDMAKIT carries torch tensors where torch is installed.
T = rdmakit_rdt.register()

LAYERS, HIDDEN = 28, 64


def state_dict(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16)

    sd = {"embed.weight": w(1000, HIDDEN)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        for name in ("q", "k", "v", "o"):
            sd[p + f"attn.{name}.weight"] = w(HIDDEN, HIDDEN)
        sd[p + "mlp.up.weight"] = w(4 * HIDDEN, HIDDEN)
        sd[p + "mlp.down.weight"] = w(HIDDEN, 4 * HIDDEN)
        sd[p + "norm1.weight"] = w(HIDDEN)
        sd[p + "norm2.weight"] = w(HIDDEN)
        sd[p + "mlp.up.bias"] = w(4 * HIDDEN)
    sd["step"] = torch.tensor(seed, dtype=torch.int64)  # 0-dim
    sd["mask"] = torch.rand(33, generator=g) > 0.5
    sd["scale"] = torch.randn(17, generator=g).half()
    sd["empty"] = torch.empty(0, HIDDEN, dtype=torch.bfloat16)
    # A view whose data starts 28 bytes into its storage (data_ptr, not the storage's start).
    sd["view"] = torch.arange(1000, dtype=torch.int32)[7:503]
    return sd


def served(actor, n: int) -> int:
    """The producer's served count once it reaches `n` (30 s at most): the server counts a serve
    when its send returned, which can be just after the consumer has the bytes."""
    deadline = time.monotonic() + 30
    while (got := ray.get(actor.stats.remote())["served"]) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def mismatches(got: dict, seed: int) -> list:
    want = state_dict(seed)
    bad = [k for k in want if k not in got]
    for k, t in got.items():
        w = want.get(k)
        if w is None or t.dtype != w.dtype or t.shape != w.shape or not torch.equal(t, w):
            bad.append(k)
    return bad


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Trainer:
    @ray.method(tensor_transport=T)
    def weights(self, seed):
        return state_dict(seed)

    @ray.method(tensor_transport=T)
    def transposed(self):
        return {"w": torch.ones(4, 8).t()}

    def stats(self):
        return rdmakit_rdt.stats()


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Rollout:
    def load(self, sd, seed):
        # Received as torch tensors in host memory, then checked against the producer's values.
        assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in sd.values())
        return mismatches(sd, seed)

    def stats(self):
        return rdmakit_rdt.stats()


def test_a_bf16_state_dict_with_odd_members_arrives_exact(cluster):
    t, r = Trainer.remote(), Rollout.remote()
    n = len(state_dict(0))
    assert n >= 250
    for seed in (1, 2):
        assert ray.get(r.load.remote(t.weights.remote(seed), seed), timeout=120) == []
    st = ray.get(r.stats.remote())
    assert st["objects_received"] == 2
    nbytes = sum(x.numel() * x.element_size() for x in state_dict(0).values())
    assert st["bytes_received"] == 2 * nbytes
    assert served(t, 2) == 2


def test_weight_sync_to_three_rollouts_at_once_and_to_the_driver(cluster):
    t = Trainer.remote()
    rs = [Rollout.remote() for _ in range(3)]
    ref = t.weights.remote(7)
    assert ray.get([r.load.remote(ref, 7) for r in rs], timeout=120) == [[], [], []]
    assert mismatches(ray.get(ref, timeout=120), 7) == []
    assert served(t, 4) == 4


def test_a_non_contiguous_tensor_is_refused_naming_the_fix(cluster):
    t, r = Trainer.remote(), Rollout.remote()
    with pytest.raises(Exception, match=r"not contiguous.*\.contiguous\(\)"):
        ray.get(r.load.remote(t.transposed.remote(), 0), timeout=60)
