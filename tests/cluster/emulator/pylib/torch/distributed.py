"""torch.distributed with the NCCL backend between pods: ranks meet through a rendezvous directory keyed by
init_method's address and port (the master's pod IP is no address on this machine), each rank's NCCL is
emu.nccl on its own pod, and every all_reduce really exchanges the ranks' values and puts the ring's bytes
(2(R-1)/R of the size per rank) on the devices of the node that sent them."""
import atexit
import json
import os
import re
import sys
import time

from emu import context, model, nccl


class DistBackendError(RuntimeError):
    pass


_group = None


class _Group:
    def __init__(self, addr, port, rank, world):
        self.rank, self.world, self.calls = rank, world, 0
        self.dir = os.path.join(model.state_dir(), "rendezvous", f"{addr}_{port}")
        os.makedirs(self.dir, exist_ok=True)
        self.me = os.path.join(self.dir, f"rank{rank}.json")

    def publish(self, name, obj):
        tmp = os.path.join(self.dir, f".{name}.{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(obj, f)
        os.replace(tmp, os.path.join(self.dir, name))

    def gather(self, name_of, timeout=120, live=None):
        """Every rank's file `name_of(rank)`. With live=NAMESPACE only registrations of running processes in
        that namespace count (a rank killed in an earlier run, or another test's, leaves its file behind)."""
        t0 = time.time()
        while True:
            got = []
            for r in range(self.world):
                try:
                    with open(os.path.join(self.dir, name_of(r))) as f:
                        v = json.load(f)
                    if live is not None:
                        os.kill(v["pid"], 0)
                        if v.get("ns") != live:
                            break
                    got.append(v)
                except (OSError, ValueError, KeyError, TypeError):
                    break
            if len(got) == self.world:
                return got
            if time.time() - t0 > timeout:
                raise DistBackendError(f"Timed out after {timeout} s waiting for all {self.world} ranks "
                                       f"(rendezvous {os.path.basename(self.dir)})")
            time.sleep(0.05)

    def cleanup(self):
        for f in os.listdir(self.dir) if os.path.isdir(self.dir) else []:
            # Only the registration: a peer may still read this rank's last values (they carry the run's key).
            if f == f"rank{self.rank}.json":
                try:
                    os.remove(os.path.join(self.dir, f))
                except OSError:
                    pass


def _fail(rank, e):
    sys.stderr.write(rank.flush_log())
    raise DistBackendError(
        f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, "
        f"{'unhandled system error' if e.kind == 'ncclSystemError' else 'invalid usage'} "
        f"(run with NCCL_DEBUG=INFO for details), NCCL version {rank.version}\n{e.kind}: Last error:\n{e.last}")


def init_process_group(backend, init_method, rank, world_size, **_kw):
    global _group
    m = re.match(r"^tcp://([^:]+):(\d+)$", init_method or "")
    if backend != "nccl" or not m:
        raise ValueError(f"stand-in torch.distributed: only nccl over tcp:// (got {backend} {init_method})")
    pod, env = context.pod(), context.env()
    g = _Group(m.group(1), m.group(2), rank, world_size)
    atexit.register(g.cleanup)
    r = nccl.Rank(pod, env, rank)
    g.publish(f"rank{rank}.json", {"pod": pod.name, "pid": os.getpid(), "ns": pod.ns})
    ranks = g.gather(lambda i: f"rank{i}.json", live=pod.ns)
    g.pids = [x["pid"] for x in ranks]
    # This run's files carry rank 0's pid: what a killed earlier run left under the same address is not read.
    g.gen = ranks[0]["pid"]
    try:
        r.init()
        g.publish(f"r{rank}-{g.gen}-transport", r.transport)
        transports = g.gather(lambda i: f"r{i}-{g.gen}-transport")
        if len(set(transports)) != 1:
            r.warn("transport/net.cc:683", f"peer ranks use different networks: {transports}")
            raise nccl.NcclError("ncclRemoteError", "remote process exited or there was a network error", 6)
        r.connect(world_size)
    except nccl.NcclError as e:
        _fail(r, e)
    g.nccl = r
    _group = g
    sys.stderr.write(r.flush_log())


def _sync(kind, value):
    g = _group
    g.calls += 1
    g.publish(f"r{g.rank}-{g.gen}-{kind}{g.calls}", value)
    vals = g.gather(lambda i: f"r{i}-{g.gen}-{kind}{g.calls}")
    if g.calls > 2:  # what every rank has read by now
        for old in (f"r{g.rank}-{g.gen}-all_reduce{g.calls - 2}", f"r{g.rank}-{g.gen}-barrier{g.calls - 2}"):
            try:
                os.remove(os.path.join(g.dir, old))
            except OSError:
                pass
    return vals


def all_reduce(t, op=None):
    vals = _sync("all_reduce", t.value)
    nbytes = t.nbytes() * 2 * (_group.world - 1) // _group.world
    _group.nccl.send(nbytes)
    nccl.sleep_for(nbytes, _group.nccl)
    t.value = float(sum(vals))


def barrier():
    _sync("barrier", 0)


def destroy_process_group():
    if _group is not None:
        _group.cleanup()


def get_rank():
    return _group.rank


def get_world_size():
    return _group.world
