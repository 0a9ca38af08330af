"""Turning torch tensors, numpy arrays and buffer-protocol objects into the native layer's
``(device type, device index, address, byte length)`` descriptions.

The address and length are a promise to the native layer: every function here takes them from a
contiguous object and the caller keeps that object alive (and unmodified) for the whole transfer.
What can be checked is checked here (contiguity, device type, writability of receive buffers) and
again natively (non-null, no wrap-around, CUDA allocation bounds and device).
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import numpy as np

Buffer = Tuple[str, int, int, int]


def _torch():
    try:
        import torch  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return None
    return torch


def is_torch_tensor(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def describe(obj: Any, index: int = 0, *, writable: bool = False) -> Buffer:
    """The native description of one tensor/array (``index`` is its position, for messages)."""
    if is_torch_tensor(obj):
        if not obj.is_contiguous():
            raise ValueError(
                f"tensor {index} is not contiguous (shape {tuple(obj.shape)}, stride "
                f"{tuple(obj.stride())}); call .contiguous() before returning it"
            )
        dev = obj.device
        if dev.type == "cpu":
            idx = 0
        elif dev.type == "cuda":
            idx = dev.index if dev.index is not None else _torch().cuda.current_device()
        else:
            raise ValueError(
                f"tensor {index} is on {dev}; rdmakit moves cpu and cuda tensors only"
            )
        return (dev.type, int(idx), int(obj.data_ptr()), int(obj.numel() * obj.element_size()))
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            view = memoryview(obj)
        except TypeError:
            raise TypeError(
                f"buffer {index}: {type(obj).__name__} is neither a torch tensor, a numpy "
                "array nor a buffer-protocol object"
            ) from None
        if not view.c_contiguous:
            raise ValueError(f"buffer {index} is not C-contiguous")
        arr = np.frombuffer(view.cast("B"), dtype=np.uint8) if view.nbytes else np.empty(0, np.uint8)
        if writable and view.readonly:
            raise ValueError(f"buffer {index} is read-only; a receive needs writable memory")
    if not arr.flags.c_contiguous:
        raise ValueError(
            f"array {index} is not C-contiguous (shape {arr.shape}, strides {arr.strides}); "
            "use np.ascontiguousarray"
        )
    if writable and not arr.flags.writeable:
        raise ValueError(f"array {index} is read-only; a receive needs writable memory")
    return ("cpu", 0, int(arr.__array_interface__["data"][0]), int(arr.nbytes))


def describe_all(objs: Sequence[Any], *, writable: bool = False) -> List[Buffer]:
    return [describe(o, i, writable=writable) for i, o in enumerate(objs)]


def synchronize_cuda(objs: Sequence[Any]) -> None:
    """Waits for the work queued on each CUDA tensor's current stream, so the copy engine reads
    finished data (the transfer runs on gpu-stage's own streams)."""
    torch = _torch()
    if torch is None:
        return
    seen = set()
    for o in objs:
        if isinstance(o, torch.Tensor) and o.device.type == "cuda":
            idx = o.device.index if o.device.index is not None else torch.cuda.current_device()
            if idx not in seen:
                seen.add(idx)
                torch.cuda.current_stream(idx).synchronize()
