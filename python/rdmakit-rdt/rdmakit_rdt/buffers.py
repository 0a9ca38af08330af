"""Turning torch tensors, numpy arrays and buffer-protocol objects into the native layer's
``(device type, device index, address, byte length)`` descriptions.

The address and length are a promise to the native layer: every function here takes them from a
contiguous object and the caller keeps that object alive (and unmodified) for the whole transfer.
What can be checked is checked here (contiguity, device type, writability of receive buffers) and
again natively (non-null, no wrap-around, CUDA allocation bounds and device).

``exported`` is what a transfer uses: it holds a buffer export (a ``memoryview``) of every numpy
array and buffer-protocol object until the transfer returns, so another thread cannot resize or
free the memory mid-transfer (``bytearray.extend`` and ``ndarray.resize`` then raise). Torch
tensors have no export to hold: a CPU or CUDA tensor resized (``resize_``) by another thread during
its own transfer is outside the promise. Receive targets must be writable: read-only arrays and
buffers are refused, and so is a CPU tensor whose memory lies in a read-only mapping (a tensor over
a read-only numpy memmap, which would crash the host worker).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np

Buffer = Tuple[str, int, int, int]


def _torch():
    """torch if this process has imported it (fully), else None. Never imports it: a torch tensor
    can only exist once torch is imported, and importing it for a numpy transfer costs ~2 s on the
    first transfer of a process that does not use torch (a 1.2 s abort in a test). A module still
    being imported by another thread (Ray's workers import torch in the background) counts as not
    imported: no tensor of it exists yet."""
    torch = sys.modules.get("torch")
    return torch if getattr(torch, "Tensor", None) is not None and hasattr(torch, "cuda") else None


def is_torch_tensor(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def _mapping_writable(addr: int, nbytes: int) -> Optional[bool]:
    """Whether ``[addr, addr + nbytes)`` lies in writable mappings of this process (Linux's
    /proc/self/maps); None where that cannot be read. Torch says nothing about a CPU tensor's
    writability (``torch.from_numpy`` of a read-only array only warns), the page table does."""
    if nbytes == 0:
        return True
    end = addr + nbytes
    try:
        with open("/proc/self/maps", "rb") as f:
            at = addr
            for line in f:
                span, perms = line.split(b" ", 2)[:2]
                lo, _, hi = span.partition(b"-")
                lo, hi = int(lo, 16), int(hi, 16)
                if hi <= at:
                    continue
                if lo > at or perms[1:2] != b"w":
                    return False
                at = hi
                if at >= end:
                    return True
    except (OSError, ValueError):
        return None
    return False


def _pin(arr: np.ndarray) -> Any:
    """What keeps ``arr`` from being resized or freed: a buffer export (``resize`` then refuses),
    else (dtypes the buffer protocol cannot name, e.g. datetime64) a reference to a view of it."""
    try:
        return memoryview(arr)
    except (TypeError, ValueError):
        return arr.view(np.uint8) if arr.flags.c_contiguous else arr


def describe(
    obj: Any, index: int = 0, *, writable: bool = False, keep: Optional[List[Any]] = None
) -> Buffer:
    """The native description of one tensor/array (``index`` is its position, for messages).
    With ``keep``, the buffer export that pins the memory is appended to it (see ``exported``)."""
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
        addr, nbytes = int(obj.data_ptr()), int(obj.numel() * obj.element_size())
        if writable and dev.type == "cpu" and _mapping_writable(addr, nbytes) is False:
            raise ValueError(
                f"tensor {index} is in read-only memory (a tensor over a read-only numpy array or "
                "memmap?); a receive needs writable memory"
            )
        return (dev.type, int(idx), addr, nbytes)
    if isinstance(obj, np.ndarray):
        arr = obj
        if keep is not None:
            keep.append(_pin(arr))
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
        if keep is not None:
            # The export pins the object: a bytearray cannot be resized (BufferError) while held.
            keep.append(view)
    if not arr.flags.c_contiguous:
        raise ValueError(
            f"array {index} is not C-contiguous (shape {arr.shape}, strides {arr.strides}); "
            "use np.ascontiguousarray"
        )
    if writable and not arr.flags.writeable:
        raise ValueError(f"array {index} is read-only; a receive needs writable memory")
    return ("cpu", 0, int(arr.__array_interface__["data"][0]), int(arr.nbytes))


def describe_all(objs: Sequence[Any], *, writable: bool = False) -> List[Buffer]:
    """Descriptions only, for checks and sizes; a transfer uses ``exported``, which pins them."""
    return [describe(o, i, writable=writable) for i, o in enumerate(objs)]


@contextlib.contextmanager
def exported(objs: Sequence[Any], *, writable: bool = False) -> Iterator[List[Buffer]]:
    """The descriptions, valid inside the ``with``: every numpy array and buffer object stays
    exported (cannot be resized or freed) until it exits, i.e. for the whole native call."""
    keep: List[Any] = []
    try:
        yield [describe(o, i, writable=writable, keep=keep) for i, o in enumerate(objs)]
    finally:
        for pin in reversed(keep):
            if isinstance(pin, memoryview):
                try:
                    pin.release()
                except BufferError:  # a view made from it is still alive; it goes with it
                    pass


def pinned(objs: Sequence[Any]) -> Tuple[List[Buffer], Tuple[Any, ...]]:
    """The descriptions and what keeps them valid for as long as it is alive: the objects
    themselves and a buffer export of every numpy array and buffer object (they cannot be resized
    or freed while it lives; the exports are released when it is dropped). For a registration
    with the producer's server, which reads the memory whenever a consumer pulls."""
    keep: List[Any] = []
    specs = [describe(o, i, keep=keep) for i, o in enumerate(objs)]
    return specs, (list(objs), keep)


def _cuda_devices(objs: Sequence[Any]) -> List[int]:
    torch = _torch()
    if torch is None:
        return []
    seen: List[int] = []
    for o in objs:
        if isinstance(o, torch.Tensor) and o.device.type == "cuda":
            idx = o.device.index if o.device.index is not None else torch.cuda.current_device()
            if idx not in seen:
                seen.append(idx)
    return seen


def synchronize_cuda(objs: Sequence[Any]) -> None:
    """Waits for everything queued on each CUDA tensor's device's current stream (the native API
    without Ray, where the caller sends right after producing). The Ray transport orders by events
    instead (``record_ready`` at extract, ``wait_ready`` before the copy)."""
    torch = _torch()
    for idx in _cuda_devices(objs):
        torch.cuda.current_stream(idx).synchronize()


# Test-only negative control for the GPU ordering tests (bench/rdt/gpu_order_test.py): with it
# set, no event is recorded or waited for, so those tests can show they detect the race.
_SKIP_ORDER_VAR = "_RDMAKIT_TEST_SKIP_STREAM_ORDER"


def _ordering_on() -> bool:
    return os.environ.get(_SKIP_ORDER_VAR, "") != "1"


def record_ready(objs: Sequence[Any], stream: Any = None) -> List[Any]:
    """Records one CUDA event per device of ``objs`` on the stream that produced them: ``stream``
    if given (a ``torch.cuda.Stream`` of that device, e.g. a side stream the producer wrote on),
    else the device's current stream at this moment. Waiting on them later waits for exactly the
    work queued so far there, not for work queued afterwards (what a stream sync at send time
    would wait for) and not less (a side stream the send-time sync would miss)."""
    torch = _torch()
    events = []
    if torch is None or not _ordering_on():
        return events
    for idx in _cuda_devices(objs):
        s = stream if stream is not None and stream.device.index == idx else None
        s = s if s is not None else torch.cuda.current_stream(idx)
        ev = torch.cuda.Event()
        ev.record(s)
        events.append(ev)
    return events


def wait_ready(events: Sequence[Any]) -> None:
    """Blocks this thread until every event in ``events`` completed (the copies gpu-stage queues
    afterwards on its own streams then read finished data)."""
    for ev in events:
        ev.synchronize()


def ready_for_write(objs: Sequence[Any], stream: Any = None) -> None:
    """Orders a receive after the work queued on the receive buffers' stream: ``stream`` (the one
    they were allocated on) or each device's current stream. The caching allocator hands a block
    freed on a stream back to the next allocation on that stream at once, while kernels queued
    there may still use it; gpu-stage writes on its own stream, so without this wait a receive
    could land before (and be overwritten by) such a kernel."""
    wait_ready(record_ready(objs, stream))
