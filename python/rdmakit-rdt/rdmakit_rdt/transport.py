"""``RdmakitTensorTransport``: Ray Direct Transport backend over gpu-stage (TCP, CUDA or host
memory), one-sided: the consumer pulls from the producer.

What runs where (Ray 2.60's one-sided contract, ``is_one_sided() -> True``):

- Producer, at extract (its task thread, right after the method returned): one CUDA event per
  device is recorded on the stream named with ``produced_on(stream)`` or on the device's current
  stream, a 32-byte token is minted, and the object (its tensors, the events, the token) is
  registered with this process's one ``_native.Server`` (a listening socket bound to the node's
  Ray address, one port per process, serving threads in Rust). The metadata Ray ships to
  consumers carries the server's ``host:port`` and the token (never printed, never in a log or
  the KV store).
- Consumer, ``recv_multiple_tensors`` (an actor's ``_ray_system`` thread; in the driver Ray's
  ``ray.get`` runs it through ``fetch_multiple_tensors``): allocates on and orders against its own
  current stream, opens (or reuses) a pull session with the producer's server, presenting the
  token, and pulls. The producer's Ray threads take no part: its server serves every consumer on
  a thread of its own, so a fan-out to N consumers runs in parallel and transfers between two
  actors in both directions cannot wait on each other. Before staging a CUDA object the serving
  thread waits for the events recorded at extract.
- ``garbage_collect`` (producer) unregisters the object: a later pull is refused, naming it; a
  pull already running finishes. ``abort_transport`` (Ray calls it on the consumer only) cuts that
  consumer's pull: its session closes, the producer's serving thread for it ends, the producer
  and its other consumers go on.

Sessions: one per (consumer process, producer process) at a time, kept and reused for later
pulls (a second concurrent pull from the same producer opens a second one). A session is
dropped when a pull on it fails, when the producer closed it (it exited, or idled it out) and
when it sat idle for ``RDMAKIT_IDLE_S``. Without an abort, opening a session is bounded by
``RDMAKIT_TIMEOUT_S`` counted from the pull's start, and every later step by the same bound on
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
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayDirectTransportError
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
    pinned,
    ready_for_write,
    record_ready,
    wait_ready,
)

logger = logging.getLogger(__name__)

DEFAULT_IDLE_S = 300.0
_SPANS = 64  # serve spans returned by stats()
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
    """Shapes and dtypes (Ray's fields), plus what the consumer needs to pull, check and
    allocate."""

    obj_id: str = ""
    # The producer's server, "host:port".
    address: str = ""
    nbytes: List[int] = field(default_factory=list)
    # "torch" or "numpy": what the receiver allocates.
    kind: str = "torch"
    # The object's token: never in a repr, a log line or the KV store.
    token: bytes = field(default=b"", repr=False, compare=False)


@dataclass
class RdmakitCommunicatorMetadata(CommunicatorMetadata):
    """The two ends of a transfer (hex actor ids; empty for the driver). Informational: a pull
    needs only the tensor metadata."""

    src_actor_id: str = ""
    dst_actor_id: str = ""


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
    """Per-process state (one transport manager instance serves every transfer of the process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Producer: the one server of this process (made at the first extract).
        self.server: Optional[Any] = None
        # Consumer: idle pull sessions, by producer address ("host:port").
        self.sessions: Dict[str, List[Any]] = {}
        # obj_id -> Abort (or the session's channel) of the pull in progress here.
        self.active: Dict[str, Any] = {}
        # obj_ids aborted before their pull started here -> reason (bounded).
        self.aborted: "OrderedDict[str, str]" = OrderedDict()
        # obj_ids whose pull ended here: a late abort marks nothing.
        self.ended: "OrderedDict[str, None]" = OrderedDict()
        self.reaper: Optional[threading.Thread] = None
        self.probed: set = set()  # actor ids that answered the probe (caller side)
        self.stats = {
            "recv_channels_opened": 0,
            "channels_evicted": 0,
            "objects_registered": 0,
            "objects_received": 0,
            "bytes_received": 0,
            "objects_collected": 0,
            "recv_failures": 0,
            "aborts": 0,
        }
        # Wall-clock (start, end) of this process's last successful pull.
        self.last_recv: Optional[Tuple[float, float]] = None
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
    ``configure(tcp_connections=8, chunk="8MiB")``. Applies to sessions opened afterwards (and to
    the server if it is not running yet). Call it in each actor (e.g. in ``__init__``)."""
    _native.Config(**overrides)  # validate now: a bad value fails here, naming the setting
    with _STATE.lock:
        _STATE.overrides = dict(overrides)


def produced_on(stream: Any) -> None:
    """Names the CUDA stream the tensors of the object this actor method is about to return were
    written on (call it inside the method, before returning). The transfer then waits for that
    stream's work up to this point, instead of the device's current stream."""
    _TLS.stream = stream


def stats() -> Dict[str, Any]:
    """Counters of this process. Consumer: sessions opened and evicted, objects and bytes pulled,
    failures, aborts, ``last_recv``. Producer (its server): objects registered and collected,
    ``served``, ``bytes_served``, ``serve_failures``, ``pulls_refused``,
    ``connections_refused``, ``sessions_open``, ``serving``, and ``serve_spans`` (the last pulls
    served: ``(obj_id, start, end, bytes, ok)``, wall-clock seconds). Both: ``pool``, the staging
    rings of this process's sessions (allocated, reused, waited, refused, live_bytes, idle)."""
    with _STATE.lock:
        out: Dict[str, Any] = dict(_STATE.stats)
        out["open_sessions"] = sum(len(v) for v in _STATE.sessions.values())
        out["active_transfers"] = len(_STATE.active)
        out["last_recv"] = _STATE.last_recv
        server = _STATE.server
    # The staging rings of every session of this process (RDMAKIT_PINNED_POOL).
    out["pool"] = _native.pool_stats()
    if server is not None:
        out.update(server.stats())
        out["serve_spans"] = server.spans()[-_SPANS:]
        out["listen_address"] = server.address
    else:
        out["serve_spans"] = []
        out["listen_address"] = None
    return out


def _count(name: str, n: int = 1) -> None:
    with _STATE.lock:
        _STATE.stats[name] += n
    _export(name, n)


_METRICS: Dict[str, Any] = {}


def _export(name: str, n: int) -> None:
    """Also counts in Ray's metrics (``ray.util.metrics``, scraped with the node's other metrics)
    as ``rdmakit_rdt_<name>``; best effort (no metrics agent, no export). Ray's ``Counter.inc``
    refuses 0 (an empty object's bytes), which is skipped: it once turned the counter off for good."""
    if n <= 0:
        return
    c = _METRICS.get(name)
    if c is None:
        try:
            from ray.util.metrics import Counter  # noqa: PLC0415

            c = Counter(f"rdmakit_rdt_{name}", description=f"rdmakit-rdt: {name.replace('_', ' ')}")
        except Exception:  # noqa: BLE001 (metrics must never fail a transfer)
            c = _NoMetric()
        _METRICS[name] = c
    try:
        c.inc(n)
    except Exception:  # noqa: BLE001 (one refused increment does not turn the counter off)
        pass


class _NoMetric:
    def inc(self, n: int) -> None:
        pass


def _config(timeout_s: Optional[float] = None):
    with _STATE.lock:
        overrides = dict(_STATE.overrides)
    if timeout_s is not None:
        overrides["timeout_s"] = max(timeout_s, 0.001)
    return _native.Config(**overrides)


def _server() -> Any:
    """This process's server (made on the first extract), bound to the node's Ray address."""
    with _STATE.lock:
        server = _STATE.server
    if server is not None:
        return server
    # Twice the consumers' idle limit: a consumer drops a session before its server does.
    made = _native.Server(_bind_addr(), _config(), 2 * _idle_s())
    with _STATE.lock:
        if _STATE.server is None:
            _STATE.server = made
        else:  # another thread won
            made.close()
        return _STATE.server


def _hand_abort_to(obj_id: str, ch: Any) -> None:
    """A reused session has its own abort handle: route later aborts of the current object to it
    (and pass on one that fired in between)."""
    with _STATE.lock:
        fresh = _STATE.active[obj_id]
        _STATE.active[obj_id] = ch
    if getattr(fresh, "reason", None) is not None:
        ch.abort(fresh.reason)


def sweep() -> int:
    """Closes idle pull sessions whose producer went away (closed its connections) or that sat
    idle longer than ``RDMAKIT_IDLE_S``; returns how many. Runs before every pull and every
    ``RDMAKIT_IDLE_S / 4`` seconds on a daemon thread."""
    limit = _idle_s()
    victims = []
    with _STATE.lock:
        for addr, pool in list(_STATE.sessions.items()):
            keep = []
            for ch in pool:
                (victims if ch.closed is not None or ch.idle_s > limit else keep).append(ch)
            if keep:
                _STATE.sessions[addr] = keep
            else:
                del _STATE.sessions[addr]
    for ch in victims:
        ch.close()
    if victims:
        _count("channels_evicted", len(victims))
    return len(victims)


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
                    logger.exception("rdmakit-rdt: sweeping idle sessions failed")

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
        # The consumer pulls from the producer's server (registered at extract); Ray calls only
        # recv on the consumer (also in the driver, for ray.get), abort only there, and
        # garbage_collect on the producer. No `__ray_send__` task: nothing queues behind the
        # producer's `_ray_system` thread.
        return True

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
        wait = _config().timeout_s * 2
        try:
            ok, why = ray.get(
                actor.__ray_call__.options(concurrency_group="_ray_system").remote(_ray_probe),
                timeout=wait,
            )
        except GetTimeoutError:
            # No answer is not a "no": a new actor on a loaded machine may still be starting
            # (the probe waits for its constructor). Not cached, so the next call asks again; an
            # actor that really cannot run the transport fails its first pull with the cause.
            logger.warning(
                "rdmakit-rdt: actor %s did not answer the probe within %.0f s (still starting?); "
                "not checked this time",
                aid,
                wait,
            )
            return True
        except Exception as e:  # noqa: BLE001 (the answer is no, with the reason logged)
            logger.warning("rdmakit-rdt: actor %s did not answer the probe: %s", aid, e)
            return False
        if ok:
            with _STATE.lock:
                _STATE.probed.add(aid)
        else:
            logger.warning("rdmakit-rdt: actor %s cannot use RDMAKIT: %s", aid, why)
        return ok

    # ---- producer -----------------------------------------------------------------------

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
        specs, keep = pinned(rdt_object)
        # The producer's work on these tensors so far: the serving thread waits for exactly this.
        events = record_ready(rdt_object, stream) if device == "cuda" else []
        token = secrets.token_bytes(32)
        server = _server()
        server.register(
            obj_id, specs, token, keep, (lambda: wait_ready(events)) if events else None
        )
        _count("objects_registered")
        host = _advertise_host()
        return RdmakitTransportMetadata(
            tensor_meta=tensor_meta,
            tensor_device=device,
            obj_id=obj_id,
            address=_with_port(host, server.port),
            nbytes=[s[3] for s in specs],
            kind=kind,
            token=token,
        )

    def get_communicator_metadata(
        self,
        src_actor: Optional["ray.actor.ActorHandle"],
        dst_actor: Optional["ray.actor.ActorHandle"],
        backend: Optional[str] = None,
    ) -> RdmakitCommunicatorMetadata:
        # Ray passes None for the driver (ray.put as the source, ray.get as the destination).
        return RdmakitCommunicatorMetadata(
            src_actor_id=src_actor._actor_id.hex() if src_actor is not None else "",
            dst_actor_id=dst_actor._actor_id.hex() if dst_actor is not None else "",
        )

    def send_multiple_tensors(
        self,
        tensors: List[Any],
        tensor_transport_metadata: RdmakitTransportMetadata,
        communicator_metadata: RdmakitCommunicatorMetadata,
    ) -> None:
        raise RdmakitTransportError(
            "RDMAKIT is one-sided: the consumer pulls from the producer's server, and Ray never "
            "calls send_multiple_tensors for a one-sided transport"
        )

    def garbage_collect(
        self,
        obj_id: str,
        tensor_transport_meta: TensorTransportMetadata,
        tensors: List[Any],
    ) -> None:
        # Unregister: a later pull is refused by name; a running one finishes (it holds the
        # registration, and with it the tensors, until its send returns).
        with _STATE.lock:
            server = _STATE.server
            _STATE.aborted.pop(obj_id, None)
        if server is not None:
            server.unregister(obj_id)
        _count("objects_collected")

    # ---- consumer -----------------------------------------------------------------------

    def recv_multiple_tensors(
        self,
        obj_id: str,
        tensor_transport_metadata: RdmakitTransportMetadata,
        communicator_metadata: RdmakitCommunicatorMetadata,
        target_buffers: Optional[List[Any]] = None,
    ) -> List[Any]:
        start, wall = time.monotonic(), time.time()
        meta = tensor_transport_metadata
        oid = meta.obj_id or obj_id
        abort = _native.Abort()
        ch = None
        try:
            self._refuse_if_aborted(oid)
            with _STATE.lock:
                _STATE.active[oid] = abort
            out = target_buffers if target_buffers is not None else _allocate(meta)
            # Whatever is queued on the buffers' stream (the consumer's) runs before we write.
            ready_for_write(out)
            with exported(out, writable=True) as specs:
                if len(specs) != len(meta.nbytes):
                    raise ValueError(
                        f"{len(specs)} target buffers for object {oid}, which has "
                        f"{len(meta.nbytes)} tensors"
                    )
                for i, (spec, n) in enumerate(zip(specs, meta.nbytes)):
                    if spec[3] != n:
                        raise ValueError(
                            f"target buffer {i} of object {oid} has {spec[3]} bytes, the "
                            f"object's tensor {i} has {n}"
                        )
                ch, reused = self._session(meta, oid, abort, start)
                try:
                    got = ch.pull(oid, specs, meta.token)
                except _native.RdmakitError as e:
                    # A kept session the producer closed meanwhile (it idled it out, or it
                    # exited): once, on a fresh session (it rewrites every byte of the buffers).
                    if not reused or isinstance(
                        e, (_native.RdmakitAbortedError, _native.RdmakitRefusedError)
                    ):
                        raise
                    ch.close()
                    _count("channels_evicted")
                    logger.info("rdmakit-rdt: a kept session failed (%s); pulling on a new one", e)
                    ch, _ = self._session(meta, oid, abort, start, reuse=False)
                    got = ch.pull(oid, specs, meta.token)
            with _STATE.lock:
                _STATE.sessions.setdefault(meta.address, []).append(ch)
                _STATE.last_recv = (wall, time.time())
            _count("objects_received")
            _count("bytes_received", got)
        except BaseException as e:
            _count("recv_failures")
            if ch is not None:
                ch.close()
            raise _to_ray(e) from e
        finally:
            self._ended(oid)
        _start_reaper()
        return out

    def _session(
        self,
        meta: RdmakitTransportMetadata,
        oid: str,
        abort: Any,
        start: float,
        reuse: bool = True,
    ) -> Tuple[Any, bool]:
        """An idle session with the producer's server (and True), or a new one (and False); a
        later abort of the pull of ``oid`` goes to it."""
        if not meta.address:
            raise RdmakitTransportError(
                f"object {oid} has no producer address in its metadata (made by another "
                "version of rdmakit-rdt?)"
            )
        sweep()
        ch = None
        if reuse:
            with _STATE.lock:
                pool = _STATE.sessions.get(meta.address, [])
                ch = pool.pop() if pool else None
        if ch is not None and ch.closed is None:
            _hand_abort_to(oid, ch)
            return ch, True
        if ch is not None:
            ch.close()
            _count("channels_evicted")
        timeout = _config().timeout_s
        with _STATE.lock:
            # Routes an abort to this pull's own handle again (a failed kept session had it).
            _STATE.active[oid] = abort
        ch = _native.RecvChannel.connect(
            meta.address, _config(start + timeout - time.monotonic()), abort, meta.token
        )
        _count("recv_channels_opened")
        return ch, False

    def abort_transport(
        self, obj_id: str, communicator_metadata: RdmakitCommunicatorMetadata
    ) -> None:
        # Ray calls this on the consumer only (one-sided): it cuts this process's pull of the
        # object. The producer's serving thread for it then fails its send and ends; the producer
        # and its other consumers go on.
        reason = f"Ray aborted the transfer of object {obj_id}"
        _count("aborts")
        with _STATE.lock:
            active = _STATE.active.get(obj_id)
            if active is not None:
                active.abort(reason)
            elif obj_id not in _STATE.ended:
                # Not started here yet: refuse this pull when it starts.
                _bounded_put(_STATE.aborted, obj_id, reason)

    @staticmethod
    def _ended(obj_id: str) -> None:
        with _STATE.lock:
            _STATE.active.pop(obj_id, None)
            _bounded_put(_STATE.ended, obj_id, None)

    @staticmethod
    def _refuse_if_aborted(obj_id: str) -> None:
        with _STATE.lock:
            # A mark is used once: a later pull of the same object (Ray retrying it) is not
            # refused again.
            reason = _STATE.aborted.pop(obj_id, None)
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
                "the object holds CUDA tensors but this process sees no GPU (num_gpus=0?)"
            )
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in meta.tensor_meta]
