"""The other process of the native tests: ``python peer.py send PORT SCENARIO``.

Objects are made by ``objects(scenario)`` on both sides, so the receiver can check every byte.
"""

from __future__ import annotations

import sys
from typing import List

import numpy as np

MIB = 1 << 20
# The tests run with RDMAKIT_CHUNK=1MiB, so these are chunk - 1, chunk and chunk + 1.
EDGE_SIZES = [0, 1, MIB - 1, MIB, MIB + 1, 64 * MIB]


def _bytes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def mixed(seed: int) -> List[np.ndarray]:
    """Several dtypes and shapes in one object (bit patterns from integers, compared as bytes)."""
    shapes = [
        (np.float32, (3, 5, 7)),
        (np.int64, (1000,)),
        (np.bool_, (17,)),
        (np.float16, (2, 2)),
        (np.complex64, (4, 1)),
        (np.int32, ()),
        (np.uint16, (0, 3)),
        (np.float64, (257, 129)),
    ]
    out = []
    for i, (dt, shape) in enumerate(shapes):
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        raw = _bytes(n, seed * 100 + i)
        if dt is np.bool_:
            raw = raw & 1
        out.append(raw.view(dt).reshape(shape))
    return out


def objects(scenario: str) -> List[List[np.ndarray]]:
    if scenario == "sizes":
        return [[_bytes(n, i)] for i, n in enumerate(EDGE_SIZES)] + [mixed(1), mixed(2)]
    if scenario in ("one", "late", "one_then_wait", "token"):
        return [[_bytes(4 * MIB, 9)]]
    raise ValueError(scenario)


def main() -> None:
    import rdmakit_rdt as r

    role, port, scenario = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    assert role == "send"
    # An object token comes on stdin (never in argv): 64 hex digits, or nothing.
    token = None
    if scenario == "token":
        token = bytes.fromhex(sys.stdin.readline().strip())
    try:
        ch = r.SendChannel.connect(f"127.0.0.1:{port}", r.Config(), r.Abort(), token)
    except r.RdmakitRefusedError as e:
        print(f"refused: {e}", file=sys.stderr)
        sys.exit(3)
    if scenario == "forever":
        # Keeps sending 32 MiB objects until the test kills this process.
        data = _bytes(32 * MIB, 5)
        i = 0
        while True:
            r.send(ch, f"obj-{i}", [data])
            i += 1
    if scenario == "torch":
        import torch

        objs = [[torch.arange(n, dtype=torch.int32) for n in (0, 1, 1000, MIB + 3)],
                [torch.ones(3, 4, dtype=torch.float64), torch.zeros(5, dtype=torch.bfloat16)]]
        for i, o in enumerate(objs):
            r.send(ch, f"obj-{i}", o)
        return
    if scenario == "late":
        # Connected, then a pause: the receiver's recv is blocked inside the native call meanwhile.
        import time

        time.sleep(1.0)
    for i, o in enumerate(objects(scenario)):
        r.send(ch, f"obj-{i}", o)
    if scenario == "one_then_wait":
        # Stays connected (and silent) until killed: only an abort can end the next receive.
        import time

        time.sleep(60)


if __name__ == "__main__":
    main()
