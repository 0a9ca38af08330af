"""Stand-in for the slice of Ray the rendered RDT demos use, on the RayCluster KubeRay really created.

ray.init(address="auto") in a pod finds its cluster from the pod's ray.io/cluster label and the cluster's
worker pods through the API server. Actors run in this process but act as the worker pod their placement put
them on (emu.context): its GPUs, devices, memlock, image and environment (the pod's env, then the actor's
runtime_env). A STRICT_SPREAD placement group takes one worker pod per bundle on distinct nodes with the GPUs
and CPUs asked for, or never becomes ready (Ray waits; the stand-in says so at once). A returned tensor with
tensor_transport="nccl" goes through the collective group's NCCL (emu.nccl: transport from both pods, bytes on
the sender's node devices, time from the node fixture's rate); "RDMAKIT" through rdmakit_rdt, which the image
must carry. What Ray prints from actors is prefixed "(Class pid=N, ip=ADDR)", as Ray's log monitor does.
"""
import hashlib
import os
import sys
import time

from emu import context, model, nccl
from . import exceptions

_cluster = None
_nccl_transports = {"nccl": "NCCL"}


class _Cluster:
    def __init__(self):
        me = context.pod()
        name = (me.obj["metadata"].get("labels") or {}).get("ray.io/cluster")
        if not name:
            raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to "
                                  "by setting `address`")
        pods = model.api_get("pods", me.ns, selector=f"ray.io/cluster={name},ray.io/node-type=worker")
        self.workers = [model.Pod(me.ns, p["metadata"]["name"]) for p in pods["items"]
                        if (p.get("status") or {}).get("phase") == "Running"]
        self.used = {}


def init(address=None, **_kw):
    global _cluster
    _cluster = _Cluster()
    sys.stderr.write(f"INFO worker.py:1879 -- Connecting to existing Ray cluster at address: "
                     f"{context.pod().ip}:6379...\n")


class ObjectRef:
    def __init__(self, value=None, error=None, tensor_from=None, transport=None):
        self.value, self.error, self.tensor_from, self.transport = value, error, tensor_from, transport

    def _resolve(self):
        if self.error:
            raise self.error
        return self.value


def get(refs, timeout=None):
    if isinstance(refs, list):
        return [get(r, timeout) for r in refs]
    return refs._resolve()


def kill(actor):
    pass


def get_runtime_context():
    return _RuntimeContext()


class _RuntimeContext:
    def get_node_id(self):
        return hashlib.sha224(context.pod().node.name.encode()).hexdigest()


# -- placement groups ----------------------------------------------------------------------------------
class _PG:
    def __init__(self, bundles, strategy):
        self.bundles, self.strategy, self.pods, self.error = bundles, strategy, [], None
        taken_nodes = set()
        for b in bundles:
            fit = next((w for w in _cluster.workers if w.gpus() >= b.get("GPU", 0) and w not in self.pods
                        and (strategy != "STRICT_SPREAD" or w.node.name not in taken_nodes)), None)
            if fit is None:
                self.error = exceptions.GetTimeoutError(
                    f"Get timed out: placement group {strategy} {bundles} cannot be placed on the cluster's "
                    f"workers ({', '.join(f'{w.name}: {w.gpus()} GPU on {w.node.name}' for w in _cluster.workers)})")
                break
            self.pods.append(fit)
            taken_nodes.add(fit.node.name)

    def ready(self):
        return ObjectRef(True, self.error)


def _pg(bundles, strategy="PACK", **_kw):
    return _PG(bundles, strategy)


def _remove_pg(pg):
    pass


# -- actors --------------------------------------------------------------------------------------------
def method(**opts):
    def mark(fn):
        fn._ray_method = opts
        return fn
    return mark


def remote(*args, **opts):
    if args and callable(args[0]) and not opts:
        return _ActorClass(args[0], {})
    return lambda cls: _ActorClass(cls, opts)


class _ActorClass:
    def __init__(self, cls, opts):
        self.cls, self.opts = cls, opts

    def options(self, **kw):
        return _ActorClass(self.cls, {**self.opts, **kw})

    def remote(self, *args, **kw):
        return _Actor(self.cls, self.opts, args, kw)


class _Actor:
    def __init__(self, cls, opts, args, kw):
        self.cls_name, self.opts = cls.__name__, opts
        strat = opts.get("scheduling_strategy")
        if strat is not None:
            self.pod = strat.placement_group.pods[strat.index]
        else:
            self.pod = _cluster.workers[0]
        self.env = {**os.environ, **self.pod.env(), **((opts.get("runtime_env") or {}).get("env_vars") or {})}
        self.pid = 2000 + len(_cluster.used) * 97 + os.getpid() % 89
        _cluster.used[id(self)] = self
        self.rank = None
        self.group = None
        with self.acting():
            self.obj = cls(*args, **kw)

    def acting(self):
        return context.acting_as(self.pod, self.env)

    def say(self, text):
        prefix = f"({self.cls_name} pid={self.pid}, ip={self.pod.ip}) "
        sys.stdout.write("".join(prefix + line + "\n" for line in text.splitlines()))
        sys.stdout.flush()

    def __getattr__(self, name):
        if name.startswith("_") or name in ("obj", "cls_name", "opts", "pod", "env", "pid", "rank", "group"):
            raise AttributeError(name)
        return _Method(self, name)


class _Method:
    def __init__(self, actor, name):
        self.actor, self.name = actor, name

    def remote(self, *args, **kw):
        a = self.actor
        fn = getattr(a.obj, self.name)
        transport = (getattr(fn, "_ray_method", {}) or {}).get("tensor_transport")
        try:
            args = [self._receive(x) for x in args]
            with a.acting():
                value = fn(*args, **kw)
        except exceptions.RayError as e:
            return ObjectRef(error=e)
        except Exception as e:  # an exception in an actor method comes back as RayTaskError
            return ObjectRef(error=exceptions.RayTaskError(
                f"ray::{a.cls_name}.{self.name}() (pid={a.pid}, ip={a.pod.ip})\n{type(e).__name__}: {e}"))
        return ObjectRef(value, tensor_from=a if transport else None, transport=transport)

    def _receive(self, x):
        """An argument that is a tensor another actor returned with a tensor transport: moved now."""
        if not isinstance(x, ObjectRef):
            return x
        value = x._resolve()
        if x.tensor_from is None:
            return value
        if not self.actor.opts.get("enable_tensor_transport"):
            raise exceptions.RayTaskError(f"ObjectRef {id(x):x} not found in RDT object store after 60.0s")
        sender = x.tensor_from
        if str(x.transport).lower() == "nccl":
            group = sender.group
            if group is None or self.actor not in group.actors:
                raise exceptions.RayTaskError("No collective group found for the tensor transport nccl: "
                                              "create_collective_group([sender, receiver], backend='nccl') first")
            group.send(sender, value.nbytes())
        else:
            _rdmakit_send(sender, self.actor, value.nbytes())
        return value


class _Collective:
    """A collective group: NCCL ranks in the actors' pods, initialised at the first transfer as Ray does."""

    def __init__(self, actors, backend):
        self.actors, self.backend, self.ready = list(actors), backend, False
        for i, a in enumerate(self.actors):
            a.group, a.rank = self, nccl.Rank(a.pod, a.env, 0, tid=a.pid + 87)
            a.rank.pid = a.pid
            a.rank.host = a.pod.name

    def _init(self):
        for a in self.actors:
            r = a.rank
            try:
                r.init()
                r.connect(len(self.actors))
            except nccl.NcclError as e:
                self._log(a)
                if e.kind == "SIGSEGV":
                    a.say(f"*** SIGSEGV received at time={int(time.time())} on cpu 3 ***\n"
                          f"PC: @     0x7f3a1c2b4e10  (unknown)  ncclNetInit()\nFatal Python error: Segmentation fault")
                    raise exceptions.ActorDiedError("The actor died unexpectedly before finishing this task.")
                raise exceptions.RayTaskError(
                    f"ray::{a.cls_name}.make_tensor() (pid={a.pid}, ip={a.pod.ip})\n"
                    f"torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                    f"ProcessGroupNCCL.cpp:3690, unhandled system error (run with NCCL_DEBUG=INFO for details), "
                    f"NCCL version {r.version}\n{e.kind}: Last error:\n{e.last}")
            self._log(a)
        kinds = {a.rank.transport for a in self.actors}
        if len(kinds) != 1:
            raise exceptions.RayTaskError(f"NCCL ranks use different networks: {sorted(kinds)}")
        self.ready = True

    def _log(self, a):
        text = a.rank.flush_log()
        a.rank.lines = []
        if text:
            a.say(text)

    def send(self, sender, nbytes):
        if not self.ready:
            self._init()
        sender.rank.send(nbytes)
        nccl.sleep_for(nbytes, sender.rank)

    def destroy(self):
        for a in self.actors:
            a.group = None


def _rdmakit_send(sender, receiver, nbytes):
    """rdmakit_rdt's gpu-stage: RDMA over the sender's devices when RDMAKIT_TRANSPORT=rdma, else TCP."""
    try:
        import rdmakit_rdt
    except ImportError as e:
        raise exceptions.RayTaskError(f"ModuleNotFoundError: {e}")
    rdmakit_rdt._send(sender, receiver, nbytes)
