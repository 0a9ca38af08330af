"""``RdmakitTensorTransport``: Ray Direct Transport over gpu-stage (TCP or RDMA, CUDA or host memory).

Two-sided: Ray runs ``send_multiple_tensors`` on the source actor and ``recv_multiple_tensors`` on
the destination actor at the same time, each on the actor's ``_ray_system`` thread (one at a time
per actor, in the order the owner submitted them). Why not one-sided: see ``is_one_sided``.

GPU ordering: at extract (on the producer's task thread, right after the method returned) one CUDA
event per device is recorded on the stream the producer named with ``produced_on(stream)``, or on
the device's current stream; the send waits for exactly those events before gpu-stage's copies
start. On receive the buffers are allocated on the receiving thread's current stream, and the
receive waits for the work queued there (a block the caching allocator hands back may still have
the consumer's kernels queued on it) before gpu-stage writes.

Connections: one channel per (source actor, destination actor) and direction, made on first use
and reused. Each process listens on one port, bound to the node's Ray address. Rendezvous goes
through Ray's internal KV store: the receiver publishes ``host:port|nonce`` under ``"<dst>:<src>"``
(namespace ``rdmakit_rdt``) and accepts; the sender waits for a nonce it has not used yet,
connects and deletes the entry. Every connection presents the object's token (32 random bytes the
producer minted at extract; it travels in Ray's object metadata, is never printed and never in the
KV store) and the sender's settings, which the receiver adopts; the receiver refuses and drops any
other connection (a port scan, a stale sender) and goes on waiting. Every object's header carries
its token too. A channel is dropped when a transfer on it fails, when its peer's connections
close (the peer died or restarted), and when it sat idle for ``RDMAKIT_IDLE_S``.

Abort (``can_abort_transport`` is True): ``abort_transport`` fires the native abort handle of the
transfer of that object with that peer (fails the staging ring, shuts the sockets down), so the
blocked send/recv raises within milliseconds; a wait for the peer checks the same handle every
50 ms. An abort that arrives before its transfer starts refuses that (object, peer) transfer only.
Without an abort, the set-up of a transfer (rendezvous, connect, accept) is bounded by
``RDMAKIT_TIMEOUT_S`` counted from the transfer's start, and every later step by the same bound on
progress.

Errors raised through Ray are ``RdmakitTransportError`` and subclasses: both the native
``RdmakitError`` classes and Ray's ``RayDirectTransportError``.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import ray
from ray.exceptions import RayDirectTransportError
from ray.experimental import internal_kv
from ray.experimental.rdt.tensor_transport_manager import (
    CommunicatorMetadata,
    TensorTransportManager,
    TensorTransportMetadata,
)

from . import _native
from .buffers import (
    describe_all,
    exported,
    is_torch_tensor,
    ready_for_write,
    record_ready,
    synchronize_cuda,
    wait_ready,
)

logger = logging.getLogger(__name__)

KV_NAMESPACE = "rdmakit_rdt"
DEFAULT_IDLE_S = 300.0
_MARKS = 1024  # bound on remembered aborts and ended transfers


# ---- errors ---------------------------------------------------------------------------------


class RdmakitTransportError(_native.RdmakitError, RayDirectTransportError):
    """A transfer through Ray failed; the message names the cause. Both an ``RdmakitError`` (a
    ``RuntimeError``) and Ray's ``RayDirectTransportError``."""

    def __init__(self, message: str = "") -> None:
        Exception.__init__(self, message)
        # RaySystemError's fields (its __init__ is not the one that runs).
        self.client_exc = message
        self.traceback_str = None

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (type(self), (str(self),))


class RdmakitTransportTimeoutError(RdmakitTransportError, _native.RdmakitTimeoutError):
    """A wait on the peer exceeded ``RDMAKIT_TIMEOUT_S``."""


class RdmakitTransportAbortedError(RdmakitTransportError, _native.RdmakitAbortedError):
    """Ray (or ``abort_transport``) aborted the transfer."""


class RdmakitTransportRefusedError(RdmakitTransportError, _native.RdmakitRefusedError):
    """The peer refused the handshake."""


def _to_ray(e: BaseException) -> BaseException:
    """The Ray-side class for a native error (other exceptions pass through)."""
    if isinstance(e, RdmakitTransportError) or not isinstance(e, _native.RdmakitError):
        return e
    for native, ours in (
        (_native.RdmakitTimeoutError, RdmakitTransportTimeoutError),
        (_native.RdmakitAbortedError, RdmakitTransportAbortedError),
        (_native.RdmakitRefusedError, RdmakitTransportRefusedError),
    ):
        if isinstance(e, native):
            return ours(str(e))
    return RdmakitTransportError(str(e))


# ---- metadata -------------------------------------------------------------------------------


@dataclass
class RdmakitTransportMetadata(TensorTransportMetadata):
    """Shapes and dtypes (Ray's fields), plus what the receiver needs to check and allocate."""

    obj_id: str = ""
    nbytes: List[int] = field(default_factory=list)
    # "torch" or "numpy": what the receiver allocates.
    kind: str = "torch"
    # The object's token: never in a repr, a log line or the KV store.
    token: bytes = field(default=b"", repr=False, compare=False)


@dataclass
class RdmakitCommunicatorMetadata(CommunicatorMetadata):
    """The two actors of a transfer (hex actor ids)."""

    src_actor_id: str = ""
    dst_actor_id: str = ""


def _my_actor_id() -> str:
    aid = ray.get_runtime_context().get_actor_id()
    if aid is None:
        raise RdmakitTransportError(
            "rdmakit transfers run inside Ray actors (this process is not one)"
        )
    return aid


def _node_host() -> str:
    return ray.util.get_node_ip_address()


def _advertise_host() -> str:
    host = os.environ.get("RDMAKIT_ADVERTISE_ADDR", "").strip()
    return host or _node_host()


def _with_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _bind_addr() -> str:
    """``RDMAKIT_BIND_ADDR``, else the node's Ray address with a free port (not every interface)."""
    return os.environ.get("RDMAKIT_BIND_ADDR", "").strip() or _with_port(_node_host(), 0)


def _idle_s() -> float:
    raw = os.environ.get("RDMAKIT_IDLE_S", "").strip()
    if not raw:
        return DEFAULT_IDLE_S
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not v > 0:
        raise RdmakitTransportError(f"invalid RDMAKIT_IDLE_S={raw!r}: expected seconds above 0")
    return v


# ---- per-process state ----------------------------------------------------------------------


class _State:
    """Per-process channels (one transport manager instance serves every transfer of the actor)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.send: Dict[str, Any] = {}  # dst actor id -> SendChannel
        self.recv: Dict[str, Any] = {}  # src actor id -> RecvChannel
        self.used_nonce: Dict[str, str] = {}  # dst actor id -> nonce of the last connect
        # (role, peer) -> (obj_id, Abort) of the transfer in progress, for abort_transport.
        self.active: Dict[Tuple[str, str], Tuple[str, Any]] = {}
        # (obj_id, role, peer) aborted before the transfer started here -> reason (bounded).
        self.aborted: "OrderedDict[Tuple[str, str, str], str]" = OrderedDict()
        # (obj_id, role, peer) of transfers that ended here: a late abort marks nothing.
        self.ended: "OrderedDict[Tuple[str, str, str], None]" = OrderedDict()
        # obj_id -> CUDA events recorded at extract (the send waits for them).
        self.ready: Dict[str, List[Any]] = {}
        self.listener: Optional[Any] = None
        self.accept_lock = threading.Lock()  # one accept at a time on the shared listener
        self.reaper: Optional[threading.Thread] = None
        self.probed: set = set()  # actor ids that answered the probe (caller side)
        self.stats = {
            "send_channels_opened": 0,
            "recv_channels_opened": 0,
            "channels_evicted": 0,
            "objects_sent": 0,
            "objects_received": 0,
            "bytes_sent": 0,
            "bytes_received": 0,
            "objects_collected": 0,
            "send_failures": 0,
            "recv_failures": 0,
            "aborts": 0,
            "handshakes_refused_by_peer": 0,
            "rendezvous_retries": 0,
        }
        # role -> (wall-clock start, end) of this process's last successful transfer.
        self.last: Dict[str, Tuple[float, float]] = {}
        self.overrides: Dict[str, Any] = {}


_STATE = _State()
_TLS = threading.local()


def _bounded_put(d: "OrderedDict[Any, Any]", key: Any, value: Any) -> None:
    d[key] = value
    d.move_to_end(key)
    while len(d) > _MARKS:
        d.popitem(last=False)


def configure(**overrides: Any) -> None:
    """Explicit settings for this process (they win over the environment), e.g.
    ``configure(transport="rdma", rdma_devices="erdma_0,erdma_1", qps=4)``. Applies to channels
    opened afterwards. Call it in each actor (e.g. in ``__init__``)."""
    _native.Config(**overrides)  # validate now: a bad value fails here, naming the setting
    with _STATE.lock:
        _STATE.overrides = dict(overrides)


def produced_on(stream: Any) -> None:
    """Names the CUDA stream the tensors of the object this actor method is about to return were
    written on (call it inside the method, before returning). The transfer then waits for that
    stream's work up to this point, instead of the device's current stream."""
    _TLS.stream = stream


def stats() -> Dict[str, Any]:
    """Counters of this process: channels opened and evicted, objects and bytes moved, failures,
    aborts, connections refused by this process's listener."""
    with _STATE.lock:
        out: Dict[str, Any] = dict(_STATE.stats)
        out["open_send_channels"] = len(_STATE.send)
        out["open_recv_channels"] = len(_STATE.recv)
        out["active_transfers"] = len(_STATE.active)
        out["last_send"] = _STATE.last.get("send")
        out["last_recv"] = _STATE.last.get("recv")
        listener = _STATE.listener
    out["connections_refused"] = listener.refused if listener is not None else 0
    out["listen_address"] = listener.address if listener is not None else None
    return out


def _count(name: str, n: int = 1) -> None:
    with _STATE.lock:
        _STATE.stats[name] += n
    _export(name, n)


_METRICS: Dict[str, Any] = {}


def _export(name: str, n: int) -> None:
    """Also counts in Ray's metrics (``ray.util.metrics``, scraped with the node's other metrics)
    as ``rdmakit_rdt_<name>``; best effort (no metrics agent, no export)."""
    try:
        c = _METRICS.get(name)
        if c is None:
            from ray.util.metrics import Counter  # noqa: PLC0415

            c = _METRICS[name] = Counter(
                f"rdmakit_rdt_{name}", description=f"rdmakit-rdt: {name.replace('_', ' ')}"
            )
        c.inc(n)
    except Exception:  # noqa: BLE001 (metrics must never fail a transfer)
        _METRICS[name] = _NoMetric()


class _NoMetric:
    def inc(self, n: int) -> None:
        pass


def _config(timeout_s: Optional[float] = None):
    with _STATE.lock:
        overrides = dict(_STATE.overrides)
    if timeout_s is not None:
        overrides["timeout_s"] = max(timeout_s, 0.001)
    return _native.Config(**overrides)


def _listener() -> Any:
    """This process's one listening socket (made on the first receive)."""
    with _STATE.lock:
        if _STATE.listener is None:
            _STATE.listener = _native.Listener(_bind_addr())
        return _STATE.listener


def _hand_abort_to(key: Tuple[str, str], ch: Any) -> None:
    """A reused channel has its own abort handle: route later aborts of the current object to it
    (and pass on one that fired in between)."""
    with _STATE.lock:
        obj_id, fresh = _STATE.active[key]
        _STATE.active[key] = (obj_id, ch)
    if fresh.reason is not None:
        ch.abort(fresh.reason)


def sweep() -> int:
    """Closes channels whose peer went away (its connections closed) or that sat idle longer than
    ``RDMAKIT_IDLE_S``; returns how many. Runs before every transfer and every
    ``RDMAKIT_IDLE_S / 4`` seconds on a daemon thread."""
    limit = _idle_s()
    victims = []
    with _STATE.lock:
        busy = {peer for (_, peer) in _STATE.active}
        for table in (_STATE.send, _STATE.recv):
            for peer, ch in list(table.items()):
                if peer in busy:
                    continue
                if ch.closed is not None or ch.idle_s > limit:
                    victims.append(table.pop(peer))
    for ch in victims:
        ch.close()
    if victims:
        _count("channels_evicted", len(victims))
    return len(victims)


def _reusable(table: Dict[str, Any], peer: str) -> Optional[Any]:
    """The open channel with ``peer``; one that closed (its peer went away) is dropped here."""
    with _STATE.lock:
        ch = table.get(peer)
        if ch is None or ch.closed is None:
            return ch
        table.pop(peer)
    ch.close()
    _count("channels_evicted")
    return None


def _start_reaper() -> None:
    with _STATE.lock:
        if _STATE.reaper is not None:
            return

        def run() -> None:
            while True:
                time.sleep(max(_idle_s() / 4, 1.0))
                try:
                    sweep()
                except Exception:  # noqa: BLE001 (keep reaping)
                    logger.exception("rdmakit-rdt: sweeping idle channels failed")

        _STATE.reaper = threading.Thread(target=run, name="rdmakit-rdt-reaper", daemon=True)
        _STATE.reaper.start()


def probe() -> Tuple[bool, str]:
    """Whether this process can run rdmakit transfers with its settings: the native module loads,
    the settings are valid, a CUDA ring can be made when ``RDMAKIT_BACKEND=cuda``, and with
    ``RDMAKIT_TRANSPORT=rdma`` the build has RDMA and every named device exists."""
    try:
        cfg = _config()
    except Exception as e:  # noqa: BLE001 (the answer is the reason)
        return False, f"invalid settings: {e}"
    if cfg.backend == "cuda" and not _native.cuda_available():
        return False, "RDMAKIT_BACKEND=cuda but no CUDA driver or GPU is visible"
    if cfg.transport == "rdma":
        if not _native.has_rdma():
            return False, "RDMAKIT_TRANSPORT=rdma but this wheel was built without RDMA"
        missing = [
            d for d in cfg.rdma_devices if not os.path.isdir(f"/sys/class/infiniband/{d}")
        ]
        if missing:
            return False, f"RDMA devices not present on this node: {', '.join(missing)}"
    return True, ""


def _ray_probe(_self: Any) -> Tuple[bool, str]:
    from rdmakit_rdt.transport import probe as p  # noqa: PLC0415 (runs in the actor)

    return p()


class RdmakitTensorTransport(TensorTransportManager):
    """Ray Direct Transport backend ``RDMAKIT`` (torch tensors, CUDA and CPU)."""

    backend_name = "RDMAKIT"

    def tensor_transport_backend(self) -> str:
        return self.backend_name

    @staticmethod
    def is_one_sided() -> bool:
        # Ray 2.60's one-sided contract could carry a receiver pull (extract runs on the producer
        # and may register the tensors with a serving thread; Ray calls only recv on the
        # consumer and abort only there; garbage_collect runs on the producer), so this is a
        # choice, not a limit of Ray: the serving side (a per-process server holding the
        # registered objects, staging once for many consumers) is not built yet. Two-sided means
        # fan-out from one producer is serial on its `_ray_system` thread (see the README).
        return False

    @staticmethod
    def can_abort_transport() -> bool:
        return True

    def actor_has_tensor_transport(self, actor: "ray.actor.ActorHandle") -> bool:
        """Asks the actor (once per actor and process) whether it can run transfers: see
        ``probe``. Runs on the actor's ``_ray_system`` thread, so the first call on a new actor
        waits for its constructor."""
        aid = actor._actor_id.hex()
        with _STATE.lock:
            if aid in _STATE.probed:
                return True
        try:
            ok, why = ray.get(
                actor.__ray_call__.options(concurrency_group="_ray_system").remote(_ray_probe),
                timeout=_config().timeout_s * 2,
            )
        except Exception as e:  # noqa: BLE001 (the answer is no, with the reason logged)
            logger.warning("rdmakit-rdt: actor %s did not answer the probe: %s", aid, e)
            return False
        if ok:
            with _STATE.lock:
                _STATE.probed.add(aid)
        else:
            logger.warning("rdmakit-rdt: actor %s cannot use RDMAKIT: %s", aid, why)
        return ok

    # ---- source actor -------------------------------------------------------------------

    def extract_tensor_transport_metadata(
        self, obj_id: str, rdt_object: List[Any]
    ) -> RdmakitTransportMetadata:
        stream = getattr(_TLS, "stream", None)
        _TLS.stream = None
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
        # The producer's work on these tensors so far: the send waits for exactly this.
        events = record_ready(rdt_object, stream) if device == "cuda" else []
        with _STATE.lock:
            _STATE.ready[obj_id] = events
        return RdmakitTransportMetadata(
            tensor_meta=tensor_meta,
            tensor_device=device,
            obj_id=obj_id,
            nbytes=[s[3] for s in specs],
            kind=kind,
            token=secrets.token_bytes(32),
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
        start, wall = time.monotonic(), time.time()
        meta, comm = tensor_transport_metadata, communicator_metadata
        dst = comm.dst_actor_id
        key = ("send", dst)
        abort = _native.Abort()
        try:
            self._refuse_if_aborted(meta.obj_id, *key)
            with _STATE.lock:
                _STATE.active[key] = (meta.obj_id, abort)
                events = _STATE.ready.get(meta.obj_id)
            with exported(tensors) as specs:
                if events is None:
                    synchronize_cuda(tensors)  # extracted elsewhere: the old, coarser order
                else:
                    wait_ready(events)
                ch = self._send_channel(comm, meta, abort, start)
                sent = ch.send(meta.obj_id, specs, meta.token)
            _count("objects_sent")
            _count("bytes_sent", sent)
            with _STATE.lock:
                _STATE.last["send"] = (wall, time.time())
        except BaseException as e:
            _count("send_failures")
            with _STATE.lock:
                ch = _STATE.send.pop(dst, None)
            if ch is not None:
                ch.close()
            raise _to_ray(e) from e
        finally:
            self._ended(meta.obj_id, key)
        _start_reaper()

    def _send_channel(
        self, comm: RdmakitCommunicatorMetadata, meta: RdmakitTransportMetadata, abort: Any,
        start: float,
    ) -> Any:
        dst = comm.dst_actor_id
        sweep()
        ch = _reusable(_STATE.send, dst)
        if ch is not None:
            # Reused: later aborts of this object go to the channel's own handle.
            _hand_abort_to(("send", dst), ch)
            return ch
        timeout = _config().timeout_s
        deadline = start + timeout
        key = f"{dst}:{comm.src_actor_id}"
        with _STATE.lock:
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
                    try:
                        ch = _native.SendChannel.connect(
                            addr, _config(deadline - time.monotonic()), abort, meta.token
                        )
                        break
                    except (_native.RdmakitRefusedError, _native.RdmakitTimeoutError) as e:
                        # Refused (that address is another process now, or another object's
                        # receive) or silent: wait for the receiver to publish a fresh entry.
                        last = nonce
                        _count("handshakes_refused_by_peer")
                        _count("rendezvous_retries")
                        logger.info("rdmakit-rdt: %s; waiting for a fresh rendezvous", e)
                    except _native.RdmakitError as e:
                        if abort.reason is not None:
                            raise
                        if "connecting connection" not in str(e):
                            raise
                        # Nobody listens there (a stale entry of a process that died).
                        last = nonce
                        _count("rendezvous_retries")
            if time.monotonic() >= deadline:
                raise _native.RdmakitTimeoutError(
                    f"timed out after {timeout:g}s waiting for actor {dst} to listen for "
                    f"this actor (KV key {key!r} in namespace {KV_NAMESPACE!r}); is its receive "
                    "running?"
                )
            time.sleep(0.01)
        # The entry is used up: delete it unless the receiver already published a newer one.
        if internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE) == raw:
            internal_kv._internal_kv_del(key, namespace=KV_NAMESPACE)
        with _STATE.lock:
            _STATE.used_nonce[dst] = nonce
            _STATE.send[dst] = ch
        _count("send_channels_opened")
        return ch

    # ---- destination actor --------------------------------------------------------------

    def recv_multiple_tensors(
        self,
        obj_id: str,
        tensor_transport_metadata: RdmakitTransportMetadata,
        communicator_metadata: RdmakitCommunicatorMetadata,
        target_buffers: Optional[List[Any]] = None,
    ) -> List[Any]:
        start, wall = time.monotonic(), time.time()
        meta, comm = tensor_transport_metadata, communicator_metadata
        src = comm.src_actor_id
        key = ("recv", src)
        abort = _native.Abort()
        try:
            self._refuse_if_aborted(obj_id, *key)
            with _STATE.lock:
                _STATE.active[key] = (obj_id, abort)
            # Inside the try: a bad buffer also closes the channel, so the sender fails at once.
            out = target_buffers if target_buffers is not None else _allocate(meta)
            # Whatever is queued on the buffers' stream (the consumer's) runs before we write.
            ready_for_write(out)
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
                ch = self._recv_channel(comm, meta, abort, start)
                got = ch.recv(meta.obj_id or obj_id, specs, meta.token)
            _count("objects_received")
            _count("bytes_received", got)
            with _STATE.lock:
                _STATE.last["recv"] = (wall, time.time())
        except BaseException as e:
            _count("recv_failures")
            with _STATE.lock:
                ch = _STATE.recv.pop(src, None)
            if ch is not None:
                ch.close()
            raise _to_ray(e) from e
        finally:
            self._ended(obj_id, key)
        _start_reaper()
        return out

    def _recv_channel(
        self, comm: RdmakitCommunicatorMetadata, meta: RdmakitTransportMetadata, abort: Any,
        start: float,
    ) -> Any:
        src = comm.src_actor_id
        sweep()
        ch = _reusable(_STATE.recv, src)
        if ch is not None:
            _hand_abort_to(("recv", src), ch)
            return ch
        listener = _listener()
        key = f"{comm.dst_actor_id}:{src}"
        value = f"{_with_port(_advertise_host(), listener.port)}|{uuid.uuid4().hex}"
        timeout = _config().timeout_s
        with _STATE.accept_lock:
            internal_kv._internal_kv_put(key, value, overwrite=True, namespace=KV_NAMESPACE)
            try:
                ch = listener.accept(
                    _config(start + timeout - time.monotonic()), abort, meta.token
                )
            except BaseException:
                # Nobody came (or an abort): take the entry back unless a newer one replaced it.
                cur = internal_kv._internal_kv_get(key, namespace=KV_NAMESPACE)
                if cur is not None and cur.decode() == value:
                    internal_kv._internal_kv_del(key, namespace=KV_NAMESPACE)
                raise
        with _STATE.lock:
            _STATE.recv[src] = ch
        _count("recv_channels_opened")
        return ch

    # ---- both ---------------------------------------------------------------------------

    def garbage_collect(
        self,
        obj_id: str,
        tensor_transport_meta: TensorTransportMetadata,
        tensors: List[Any],
    ) -> None:
        # Nothing is registered per object: the staging ring (and its RDMA registration) belongs
        # to the channel and is reused. Forget the object's events and abort marks.
        with _STATE.lock:
            _STATE.ready.pop(obj_id, None)
            for k in [k for k in _STATE.aborted if k[0] == obj_id]:
                del _STATE.aborted[k]
            _STATE.stats["objects_collected"] += 1

    def abort_transport(
        self, obj_id: str, communicator_metadata: RdmakitCommunicatorMetadata
    ) -> None:
        comm = communicator_metadata
        me = ray.get_runtime_context().get_actor_id()
        roles = []
        if me == comm.src_actor_id:
            roles.append(("send", comm.dst_actor_id))
        if me == comm.dst_actor_id:
            roles.append(("recv", comm.src_actor_id))
        reason = f"Ray aborted the transfer of object {obj_id}"
        _count("aborts")
        with _STATE.lock:
            for key in roles:
                active = _STATE.active.get(key)
                if active is not None and active[0] == obj_id:
                    active[1].abort(reason)
                elif (obj_id, *key) not in _STATE.ended:
                    # Not started here yet: refuse this (object, peer) transfer when it starts.
                    # Other consumers of the same object are not affected.
                    _bounded_put(_STATE.aborted, (obj_id, *key), reason)

    @staticmethod
    def _ended(obj_id: str, key: Tuple[str, str]) -> None:
        with _STATE.lock:
            _STATE.active.pop(key, None)
            _bounded_put(_STATE.ended, (obj_id, *key), None)

    @staticmethod
    def _refuse_if_aborted(obj_id: str, role: str, peer: str) -> None:
        with _STATE.lock:
            # A mark is used once: a later transfer of the same object with the same peer (Ray
            # retrying it) is not refused again.
            reason = _STATE.aborted.pop((obj_id, role, peer), None)
        if reason is not None:
            raise RdmakitTransportAbortedError(reason)


class RdmakitNumpyTransport(RdmakitTensorTransport):
    """The same backend registered for numpy arrays (``RDMAKIT_NUMPY``, CPU)."""

    backend_name = "RDMAKIT_NUMPY"


def _allocate(meta: RdmakitTransportMetadata) -> List[Any]:
    if meta.kind == "numpy":
        return [np.empty(shape, dtype=dtype) for shape, dtype in meta.tensor_meta]
    import torch  # noqa: PLC0415 (only torch objects reach here)

    if meta.tensor_device == "cuda":
        if not torch.cuda.is_available():
            raise RdmakitTransportError(
                "the object holds CUDA tensors but this actor sees no GPU (num_gpus=0?)"
            )
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in meta.tensor_meta]
