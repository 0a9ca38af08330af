"""rdmakit-rdt: gpu-stage as a Ray Direct Transport backend.

    import rdmakit_rdt
    rdmakit_rdt.register()            # before creating the actors, in the driver
    @ray.remote(num_gpus=1, enable_tensor_transport=True)
    class Producer:
        @ray.method(tensor_transport="RDMAKIT")
        def make(self): return torch.ones(1 << 27, device="cuda")

Under Ray the transport is one-sided: the consumer pulls from the producer's ``Server``.
The native layer (``rdmakit_rdt._native``: ``Server`` and ``RecvChannel.connect``/``pull`` for
pulls; ``Listener``, ``SendChannel`` and ``RecvChannel`` for a push between two processes, which
is also what runs over RDMA; ``Config``, ``Abort``) works without Ray: see ``send``/``recv`` below
and the README.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _native
from ._native import (
    Abort,
    Config,
    Listener,
    RdmakitAbortedError,
    RdmakitError,
    RdmakitRefusedError,
    RdmakitTimeoutError,
    RecvChannel,
    SendChannel,
    Server,
    cuda_available,
    has_rdma,
)
from .buffers import exported, ready_for_write, synchronize_cuda

__version__ = _native.__version__

__all__ = [
    "Abort",
    "Config",
    "Listener",
    "RdmakitAbortedError",
    "RdmakitError",
    "RdmakitRefusedError",
    "RdmakitTimeoutError",
    "RecvChannel",
    "SendChannel",
    "Server",
    "configure",
    "produced_on",
    "cuda_available",
    "has_rdma",
    "recv",
    "register",
    "send",
    "stats",
]

_NAMES = ("RDMAKIT", "RDMAKIT_NUMPY")


def register(name: str = "RDMAKIT", data_type: Optional[type] = None) -> str:
    """Registers the transport with Ray for devices ``["cuda", "cpu"]`` and returns its name.

    ``RDMAKIT`` carries torch tensors (``data_type`` defaults to ``torch.Tensor``, or to
    ``numpy.ndarray`` when torch is not installed); ``RDMAKIT_NUMPY`` carries numpy arrays. Call it
    in the driver before creating the actors; calling it again for a registered name is a no-op.
    An actor that may restart (``max_restarts``) must also call it in its ``__init__``: Ray 2.60
    registers custom transports on an actor once per actor id (from the process that creates it,
    or the first that uses it) and caches that, so a restarted process, which keeps the id, is
    never registered again (a TODO in Ray's ``rdt_manager.py``).
    """
    from ray.experimental.rdt import util as rdt_util  # noqa: PLC0415 (Ray is optional)

    from .transport import RdmakitNumpyTransport, RdmakitTensorTransport  # noqa: PLC0415

    name = name.upper()
    if name not in _NAMES:
        raise ValueError(f"unknown transport name {name!r}; expected one of {_NAMES}")
    if data_type is None:
        if name == "RDMAKIT":
            try:
                import torch  # noqa: PLC0415

                data_type = torch.Tensor
            except ImportError:
                import numpy as np  # noqa: PLC0415

                data_type = np.ndarray
        else:
            import numpy as np  # noqa: PLC0415

            data_type = np.ndarray
    cls = RdmakitTensorTransport if name == "RDMAKIT" else RdmakitNumpyTransport
    rdt_util._ensure_default_transports_registered()
    if name in rdt_util.transport_manager_info:
        return name
    rdt_util.register_tensor_transport(name, ["cuda", "cpu"], cls, data_type)
    return name


def configure(**overrides: Any) -> None:
    """Settings for this process that win over the environment (see ``Config``)."""
    from .transport import configure as _configure  # noqa: PLC0415

    _configure(**overrides)


def produced_on(stream: Any) -> None:
    """Inside an actor method returning an RDMAKIT object: names the CUDA stream its tensors were
    written on, so the transfer waits for that stream's work (default: the current stream)."""
    from .transport import produced_on as _produced_on  # noqa: PLC0415

    _produced_on(stream)


def stats() -> dict:
    """This process's counters: pull sessions opened/evicted, objects and bytes pulled, failures,
    aborts; as a producer, its server's (objects served, refused, spans of the last pulls)."""
    from .transport import stats as _stats  # noqa: PLC0415

    return _stats()


def send(
    channel: SendChannel, tag: str, tensors: Sequence[Any], token: Optional[bytes] = None
) -> int:
    """Sends tensors/arrays as one object over a native channel (no Ray); returns bytes sent.
    Waits for the CUDA tensors' current streams first. ``token``: the object's (default: the
    channel's)."""
    with exported(tensors) as specs:
        synchronize_cuda(tensors)
        return channel.send(tag, specs, token)


def recv(
    channel: RecvChannel, tag: str, buffers: Sequence[Any], token: Optional[bytes] = None
) -> int:
    """Receives one object into pre-allocated tensors/arrays (no Ray); returns bytes received.
    Waits for the work queued on the CUDA buffers' current streams before writing into them."""
    with exported(buffers, writable=True) as specs:
        ready_for_write(buffers)
        return channel.recv(tag, specs, token)
