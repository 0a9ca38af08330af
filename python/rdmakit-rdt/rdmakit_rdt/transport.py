"""``RdmakitTensorTransport``: Ray Direct Transport over gpu-stage (TCP or RDMA, CUDA or host memory).

Two-sided: Ray runs ``send_multiple_tensors`` on the source actor and ``recv_multiple_tensors`` on
the destination actor at the same time, each on the actor's ``_ray_system`` thread (one at a time
per actor, in the order the owner submitted them).

Connections: one channel per (source actor, destination actor) and direction, made on first use
and reused for every later object. Rendezvous goes through Ray's internal KV store: the receiver
binds a fresh port, publishes ``host:port|nonce`` under ``"<dst>:<src>"`` (namespace
``rdmakit_rdt``) and accepts; the sender polls the key until it sees a nonce it has not used
yet and connects. A failed channel is dropped by both ends and the next object makes a new one.

Every object is checked end to end: a 64-byte header (object id, buffer count, sizes) precedes
the data and the receiver refuses anything else before a byte lands in its buffers.

Abort (``can_abort_transport`` is True): ``abort_transport`` fires the channel's native abort
handle (fails the staging ring and shuts the sockets down), so the blocked ``send``/``recv`` on the
other thread of both actors raises within milliseconds; a wait for the peer (rendezvous, accept)
checks the same handle every 50 ms. Without an abort, every blocking step is bounded by
``RDMAKIT_TIMEOUT_S`` (30 s, under Ray's 60 s RDT timeout).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import ray
from ray.experimental import internal_kv
from ray.experimental.rdt.tensor_transport_manager import (
    CommunicatorMetadata,
    TensorTransportManager,
    TensorTransportMetadata,
)

from . import _native
from .buffers import describe_all, exported, is_torch_tensor, synchronize_cuda

KV_NAMESPACE = "rdmakit_rdt"


@dataclass
class RdmakitTransportMetadata(TensorTransportMetadata):
    """Shapes and dtypes (Ray's fields), plus what the receiver needs to check and allocate."""

    obj_id: str = ""
    nbytes: List[int] = field(default_factory=list)
    # "torch" or "numpy": what the receiver allocates.
    kind: str = "torch"


@dataclass
class RdmakitCommunicatorMetadata(CommunicatorMetadata):
    """The two actors of a transfer (hex actor ids)."""

    src_actor_id: str = ""
    dst_actor_id: str = ""


def _my_actor_id() -> str:
    aid = ray.get_runtime_context().get_actor_id()
    if aid is None:
        raise _native.RdmakitError(
            "rdmakit transfers run inside Ray actors (this process is not one)"
        )
    return aid


def _advertise_host() -> str:
    host = os.environ.get("RDMAKIT_ADVERTISE_ADDR", "").strip()
    return host or ray.util.get_node_ip_address()


class _State:
    """Per-process channels (one transport manager instance serves every transfer of the actor)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.send: Dict[str, Any] = {}  # dst actor id -> SendChannel
        self.recv: Dict[str, Any] = {}  # src actor id -> RecvChannel
        self.used_nonce: Dict[str, str] = {}  # dst actor id -> nonce of the last connect
        # (role, peer) -> (obj_id, Abort) of the transfer in progress, for abort_transport.
        self.active: Dict[Tuple[str, str], Tuple[str, Any]] = {}
        # Objects aborted before their transfer started on this side (bounded).
        self.aborted: "OrderedDict[str, str]" = OrderedDict()
        self.stats = {
            "send_channels_opened": 0,
            "recv_channels_opened": 0,
            "objects_sent": 0,
            "objects_received": 0,
            "bytes_sent": 0,
            "bytes_received": 0,
            "objects_collected": 0,
        }
        self.overrides: Dict[str, Any] = {}


_STATE = _State()


def configure(**overrides: Any) -> None:
    """Explicit settings for this process (they win over the environment), e.g.
    ``configure(transport="rdma", rdma_devices="erdma_0,erdma_1", qps=4)``. Applies to channels
    opened afterwards. Call it in each actor (e.g. in ``__init__``)."""
    _native.Config(**overrides)  # validate now: a bad value fails here, naming the setting
    with _STATE.lock:
        _STATE.overrides = dict(overrides)


def stats() -> Dict[str, int]:
    """Counters of this process (channels opened, objects and bytes moved)."""
    with _STATE.lock:
        return dict(_STATE.stats)


def _config():
    with _STATE.lock:
        overrides = dict(_STATE.overrides)
    return _native.Config(**overrides)


def _hand_abort_to(key: Tuple[str, str], ch: Any) -> None:
    """A reused channel has its own abort handle: route later aborts of the current object to it
    (and pass on one that fired in between)."""
    with _STATE.lock:
        obj_id, fresh = _STATE.active[key]
        _STATE.active[key] = (obj_id, ch)
    if fresh.reason is not None:
        ch.abort(fresh.reason)


class RdmakitTensorTransport(TensorTransportManager):
    """Ray Direct Transport backend ``RDMAKIT`` (torch tensors, CUDA and CPU)."""

    backend_name = "RDMAKIT"

    def tensor_transport_backend(self) -> str:
        return self.backend_name

    @staticmethod
    def is_one_sided() -> bool:
        return False

    @staticmethod
    def can_abort_transport() -> bool:
        return True

    def actor_has_tensor_transport(self, actor: "ray.actor.ActorHandle") -> bool:
        # Channels are made on demand; every actor that can import rdmakit_rdt has the transport.
        return True

    # ---- source actor -------------------------------------------------------------------

    def extract_tensor_transport_metadata(
        self, obj_id: str, rdt_object: List[Any]
    ) -> RdmakitTransportMetadata:
        tensor_meta = []
        device: Optional[str] = None
        kind = "torch"
        for i, t in enumerate(rdt_object):
            if is_torch_tensor(t):
                dev, k = t.device.type, "torch"
                tensor_meta.append((t.shape, t.dtype))
            elif isinstance(t, np.ndarray):
                dev, k = "cpu", "numpy"
                tensor_meta.append((tuple(t.shape), t.dtype))
            else:
                raise TypeError(
                    f"tensor {i} of object {obj_id} is a {type(t).__name__}; rdmakit moves torch "
                    "tensors and numpy arrays"
                )
            if device is None:
                device, kind = dev, k
            elif dev != device or k != kind:
                raise ValueError(
                    f"object {obj_id} mixes {kind}/{device} and {k}/{dev} tensors; all tensors "
                    "of one object must be of the same kind and device type"
                )
        # Contiguity and device are checked now, where the user's task can still see the error.
        specs = describe_all(rdt_object)
        return RdmakitTransportMetadata(
            tensor_meta=tensor_meta,
            tensor_device=device,
            obj_id=obj_id,
            nbytes=[s[3] for s in specs],
            kind=kind,
        )

    def get_communicator_metadata(
        self,
        src_actor: "ray.actor.ActorHandle",
        dst_actor: "ray.actor.ActorHandle",
        backend: Optional[str] = None,
    ) -> RdmakitCommunicatorMetadata:
        if src_actor is None:
            raise ValueError(
                "RDMAKIT is two-sided: the object must come from an actor (not ray.put in the "
                "driver)"
            )
        return RdmakitCommunicatorMetadata(
            src_actor_id=src_actor._actor_id.hex(),
            dst_actor_id=dst_actor._actor_id.hex(),
        )

    def send_multiple_tensors(
        self,
        tensors: List[Any],
        tensor_transport_metadata: RdmakitTransportMetadata,
        communicator_metadata: RdmakitCommunicatorMetadata,
    ) -> None:
        meta, comm = tensor_transport_metadata, communicator_metadata
        dst = comm.dst_actor_id
        self._refuse_if_aborted(meta.obj_id)
        abort = _native.Abort()
        key = ("send", dst)
        with _STATE.lock:
            _STATE.active[key] = (meta.obj_id, abort)
        try:
            with exported(tensors) as specs:
                synchronize_cuda(tensors)
                ch = self._send_channel(comm, abort)
                sent = ch.send(meta.obj_id, specs)
            with _STATE.lock:
                _STATE.stats["objects_sent"] += 1
                _STATE.stats["bytes_sent"] += sent
        except BaseException:
            with _STATE.lock:
                ch = _STATE.send.pop(dst, None)
            if ch is not None:
                ch.close()
            raise
        finally:
            with _STATE.lock:
                _STATE.active.pop(key, None)

    def _send_channel(self, comm: RdmakitCommunicatorMetadata, abort: Any) -> Any:
        dst = comm.dst_actor_id
        with _STATE.lock:
            ch = _STATE.send.get(dst)
        if ch is not None and ch.closed is None:
            # Reused: later aborts of this object go to the channel's own handle.
            _hand_abort_to(("send", dst), ch)
            return ch
        cfg = _config()
        key = f"{dst}:{comm.src_actor_id}"
        deadline = time.monotonic() + cfg.timeout_s
        last = _STATE.used_nonce.get(dst)
        while True:
            if abort.reason is not None:
                raise _native.RdmakitAbortedError(
                    f"aborted while waiting for actor {dst} to listen: {abort.reason}"
                )
            raw = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
            if raw:
                addr, _, nonce = raw.decode().partition("|")
                if nonce != last:
                    break
            if time.monotonic() >= deadline:
                raise _native.RdmakitTimeoutError(
                    f"timed out after {cfg.timeout_s:g}s waiting for actor {dst} to listen for "
                    f"this actor (KV key {key!r} in namespace {KV_NAMESPACE!r}); is its receive "
                    "running?"
                )
            time.sleep(0.01)
        ch = _native.SendChannel.connect(addr, cfg, abort)
        with _STATE.lock:
            _STATE.used_nonce[dst] = nonce
            _STATE.send[dst] = ch
            _STATE.stats["send_channels_opened"] += 1
        return ch

    # ---- destination actor --------------------------------------------------------------

    def recv_multiple_tensors(
        self,
        obj_id: str,
        tensor_transport_metadata: RdmakitTransportMetadata,
        communicator_metadata: RdmakitCommunicatorMetadata,
        target_buffers: Optional[List[Any]] = None,
    ) -> List[Any]:
        meta, comm = tensor_transport_metadata, communicator_metadata
        src = comm.src_actor_id
        self._refuse_if_aborted(obj_id)
        abort = _native.Abort()
        key = ("recv", src)
        with _STATE.lock:
            _STATE.active[key] = (obj_id, abort)
        try:
            # Inside the try: a bad buffer also closes the channel, so the sender fails at once.
            out = target_buffers if target_buffers is not None else _allocate(meta)
            with exported(out, writable=True) as specs:
                if len(specs) != len(meta.nbytes):
                    raise ValueError(
                        f"{len(specs)} target buffers for object {obj_id}, which has "
                        f"{len(meta.nbytes)} tensors"
                    )
                for i, (spec, n) in enumerate(zip(specs, meta.nbytes)):
                    if spec[3] != n:
                        raise ValueError(
                            f"target buffer {i} of object {obj_id} has {spec[3]} bytes, the "
                            f"object's tensor {i} has {n}"
                        )
                ch = self._recv_channel(comm, abort)
                got = ch.recv(meta.obj_id or obj_id, specs)
            with _STATE.lock:
                _STATE.stats["objects_received"] += 1
                _STATE.stats["bytes_received"] += got
        except BaseException:
            with _STATE.lock:
                ch = _STATE.recv.pop(src, None)
            if ch is not None:
                ch.close()
            raise
        finally:
            with _STATE.lock:
                _STATE.active.pop(key, None)
        return out

    def _recv_channel(self, comm: RdmakitCommunicatorMetadata, abort: Any) -> Any:
        src = comm.src_actor_id
        with _STATE.lock:
            ch = _STATE.recv.get(src)
        if ch is not None and ch.closed is None:
            _hand_abort_to(("recv", src), ch)
            return ch
        cfg = _config()
        listener = _native.Listener(os.environ.get("RDMAKIT_BIND_ADDR", "").strip() or "0.0.0.0:0")
        key = f"{comm.dst_actor_id}:{src}"
        value = f"{_advertise_host()}:{listener.port}|{uuid.uuid4().hex}"
        internal_kv._internal_kv_put(key, value, overwrite=True, namespace=KV_NAMESPACE)
        ch = listener.accept(cfg, abort)
        with _STATE.lock:
            _STATE.recv[src] = ch
            _STATE.stats["recv_channels_opened"] += 1
        return ch

    # ---- both ---------------------------------------------------------------------------

    def garbage_collect(
        self,
        obj_id: str,
        tensor_transport_meta: TensorTransportMetadata,
        tensors: List[Any],
    ) -> None:
        # Nothing is registered per object: the staging ring (and its RDMA registration) belongs
        # to the channel and is reused. Forget a pending abort mark for the object.
        with _STATE.lock:
            _STATE.aborted.pop(obj_id, None)
            _STATE.stats["objects_collected"] += 1

    def abort_transport(
        self, obj_id: str, communicator_metadata: RdmakitCommunicatorMetadata
    ) -> None:
        comm = communicator_metadata
        me = ray.get_runtime_context().get_actor_id()
        peer_roles = []
        if me == comm.src_actor_id:
            peer_roles.append(("send", comm.dst_actor_id))
        if me == comm.dst_actor_id:
            peer_roles.append(("recv", comm.src_actor_id))
        reason = f"Ray aborted the transfer of object {obj_id}"
        fired = False
        with _STATE.lock:
            for key in peer_roles:
                active = _STATE.active.get(key)
                if active is not None and active[0] == obj_id:
                    active[1].abort(reason)
                    fired = True
            if not fired:
                # Not started here yet (or already over): refuse it if it starts later.
                _STATE.aborted[obj_id] = reason
                while len(_STATE.aborted) > 1024:
                    _STATE.aborted.popitem(last=False)

    @staticmethod
    def _refuse_if_aborted(obj_id: str) -> None:
        with _STATE.lock:
            reason = _STATE.aborted.get(obj_id)
        if reason is not None:
            raise _native.RdmakitAbortedError(reason)


class RdmakitNumpyTransport(RdmakitTensorTransport):
    """The same backend registered for numpy arrays (``RDMAKIT_NUMPY``, CPU)."""

    backend_name = "RDMAKIT_NUMPY"


def _allocate(meta: RdmakitTransportMetadata) -> List[Any]:
    if meta.kind == "numpy":
        return [np.empty(shape, dtype=dtype) for shape, dtype in meta.tensor_meta]
    import torch  # noqa: PLC0415 (only torch objects reach here)

    if meta.tensor_device == "cuda":
        if not torch.cuda.is_available():
            raise _native.RdmakitError(
                "the object holds CUDA tensors but this actor sees no GPU (num_gpus=0?)"
            )
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in meta.tensor_meta]
