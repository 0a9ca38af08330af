"""A stand-in for Open MPI's mpirun and for nccl-tests' all_reduce_perf, run by the MPIJob's own launcher script.

mpirun (in the launcher pod) reads the hostfile the MPI Operator generated (OMPI_MCA_orte_default_hostfile, the
operator's ConfigMap mounted at /etc/mpi), refuses an -np above the hostfile's slots as Open MPI does, maps the
ranks by slot and starts each host's ranks in its worker pod through the API server (`kubectl exec POD -- env
K=V... PROGRAM ARGS`: the way the MPI Operator's kubexec started orted), with the -x exports (NAME=value, or
the launcher's own value of NAME) on top of the worker container's environment. It relays the ranks' output,
and exits non-zero, with Open MPI's messages, when a rank does.

all_reduce_perf (in a worker pod, one process per rank) is nccl-tests as far as its output goes: rank 0 prints
the header and the devices, every rank's NCCL is emu.nccl deciding the transport from its own pod (devices,
NCCL_IB_HCA, NCCL_SOCKET_IFNAME, memlock, the image's and the node's net plugins), a rank asks for -g GPUs of
its pod's nvidia.com/gpu limit (CUDA's 'invalid device ordinal' when the pod has too few), NCCL's
intra-node shared memory needs room in the pod's /dev/shm, and the table's times and bus bandwidth come from
the nodes' link rates (node fixture), the devices the ranks use and the sizes asked for. Every timed and
warm-up iteration puts the ring's inter-node bytes (2(R-1)/R of the size per node) on the counters of the
devices that node's ranks use.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid

from . import model, nccl

# NCCL's intra-node shared-memory segment per peer (the size in NCCL's own "failed to extend" message).
SHM_SEGMENT = 9637892
LINE = "-" * 74


def _kubectl():
    out = os.path.dirname(model.state_dir())
    return [os.path.join(out, "bin", "kubectl"), "--kubeconfig", os.path.join(out, "kubeconfig")]


def parse_size(s):
    m = re.match(r"^(\d+)([KMG]?)$", s.strip().upper())
    if not m:
        raise ValueError(s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


# ------------------------------------------------------------------------------------------------- mpirun
# Options of Open MPI 4 that take a value (the rest of the leading dash words are flags).
WITH_VALUE = {"-np", "-n", "--np", "-c", "-bind-to", "--bind-to", "-map-by", "--map-by", "-H", "-host", "--host",
              "-hostfile", "--hostfile", "-machinefile", "-npernode", "--npernode", "-wdir", "--wdir", "-rf"}


def mpirun(pod, args):
    np_, exports, mca, prog, hostfile = None, [], {}, None, None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--mca", "-mca", "--gmca", "-gmca") and i + 2 < len(args):
            mca[args[i + 1]] = args[i + 2]
            i += 3
        elif a == "-x" and i + 1 < len(args):
            exports.append(args[i + 1])
            i += 2
        elif a in WITH_VALUE and i + 1 < len(args):
            if a in ("-np", "-n", "--np", "-c"):
                np_ = int(args[i + 1])
            if a in ("-hostfile", "--hostfile", "-machinefile"):
                hostfile = args[i + 1]
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            prog = args[i:]
            break
    if not prog:
        sys.stderr.write("mpirun: no executable was specified\n")
        return 1
    hostfile = hostfile or mca.get("orte_default_hostfile") or os.environ.get("OMPI_MCA_orte_default_hostfile")
    hosts = read_hostfile(pod, hostfile)
    if hosts is None:
        sys.stderr.write(f"{LINE}\nOpen RTE was unable to open the hostfile:\n    {hostfile}\n"
                         f"Check to make sure the path and filename are correct.\n{LINE}\n")
        return 1
    total = sum(n for _, n in hosts)
    if np_ is None:
        np_ = total
    if np_ > total:
        sys.stderr.write(
            f"{LINE}\nThere are not enough slots available in the system to satisfy the {np_}\n"
            f"slots that were requested by the application:\n\n  {prog[0]}\n\n"
            f"Either request fewer slots for your application, or make more slots\navailable for use.\n\n"
            f"A \"slot\" is the Open MPI term for an allocatable unit where we can\nlaunch a process.  "
            f"The number of slots available are defined by the\nenvironment in which Open MPI processes "
            f"are run:\n\n  1. Hostfile, via \"slots=N\" clauses (N defaults to number of\n     processor "
            f"cores if not provided)\n{LINE}\n")
        return 1
    # By slot: each host takes its slots' worth of ranks in order.
    placed, rank = [], 0
    for host, slots in hosts:
        n = min(slots, np_ - rank)
        if n > 0:
            placed.append((host, rank, n))
            rank += n
    env_out = []
    for x in exports:
        name, eq, value = x.partition("=")
        if eq:
            env_out.append(f"{name}={value}")
        elif name in os.environ:
            env_out.append(f"{name}={os.environ[name]}")
    job = uuid.uuid4().hex[:12]
    rdv = os.path.join(model.state_dir(), "rendezvous", f"mpi-{job}")
    os.makedirs(rdv, exist_ok=True)
    procs = []
    for host, first, n in placed:
        target = worker_pod(pod, host)
        if isinstance(target, str):
            sys.stderr.write(target)
            _abort(rdv)
            _stop(procs)
            return 255
        ns, name, container = target
        cmd = _kubectl() + ["exec", "-n", ns, name, "-c", container, "--", "env", *env_out,
                            f"OMPI_COMM_WORLD_SIZE={np_}", f"EMU_MPI_FIRST_RANK={first}", f"EMU_MPI_LOCAL_SIZE={n}",
                            f"EMU_MPI_HOSTS={len(placed)}", f"EMU_MPI_JOB={job}", *prog]
        procs.append((host, first, subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, env=model._kubectl_env())))
    relays = []
    for _, _, p in procs:
        for src, dst in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
            t = threading.Thread(target=_relay, args=(src, dst), daemon=True)
            t.start()
            relays.append(t)
    first_bad = None
    pending = list(procs)
    while pending:
        for item in list(pending):
            rc = item[2].poll()
            if rc is None:
                continue
            pending.remove(item)
            if rc != 0 and first_bad is None:
                first_bad = (item, rc)
                _abort(rdv)
        time.sleep(0.05)
    for t in relays:
        t.join(timeout=5)
    if first_bad is None:
        return 0
    (host, first, _), rc = first_bad
    sys.stdout.flush()
    sys.stderr.write(
        f"{LINE}\nPrimary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, "
        f"the job has been aborted.\n{LINE}\n{LINE}\nmpirun detected that one or more processes exited with "
        f"non-zero status, thus causing\nthe job to be terminated. The first process to do so was:\n\n"
        f"  Process name: [[{int(job[:4], 16)},1],{first}]\n  Exit code:    {rc}\n{LINE}\n")
    return rc


def _relay(src, dst):
    for line in iter(src.readline, b""):
        text = line.decode(errors="replace")
        if text.startswith("command terminated with exit code"):
            continue  # kubectl's own line, not the rank's
        dst.write(text)
        dst.flush()


def _abort(rdv):
    with open(os.path.join(rdv, "abort"), "w") as f:
        f.write("aborted by mpirun\n")


def _stop(procs):
    for _, _, p in procs:
        p.kill()


def read_hostfile(pod, path):
    """[(host, slots)] of an Open MPI hostfile as the pod sees it, or None when there is none."""
    if not path:
        return [("localhost", 1)]
    text = model.read(pod.map_one(path), None)
    if text is None:
        return None
    hosts = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        slots = next((int(p.split("=", 1)[1]) for p in parts[1:] if p.startswith(("slots=", "max_slots="))), 1)
        hosts.append((parts[0], slots))
    return hosts


def worker_pod(launcher, host, wait_s=60):
    """(namespace, pod, container) of a hostfile entry (`POD.SERVICE.NAMESPACE.svc`), once the pod is Running;
    else the message ssh would give (the operator's images reach workers by their Service's DNS name)."""
    labels = host.split(".")
    name, ns = labels[0], labels[2] if len(labels) > 2 else launcher.ns
    t0 = time.time()
    while True:
        try:
            p = model.api_get("pod", ns, name)
            if (p.get("status") or {}).get("phase") == "Running":
                return ns, name, p["spec"]["containers"][0]["name"]
        except model.EmuError:
            pass
        if time.time() - t0 > wait_s:
            return (f"ssh: Could not resolve hostname {host}: Name or service not known\n{LINE}\n"
                    f"ORTE was unable to reliably start one or more daemons.\n{LINE}\n")
        time.sleep(1)


# ---------------------------------------------------------------------------------------------------- env
def env_then(pod, args, dispatch):
    """`env K=V... CMD ARGS`: the assignments over the process's environment, then CMD as the pod runs it."""
    i = 0
    while i < len(args) and "=" in args[i] and not args[i].startswith("="):
        k, _, v = args[i].partition("=")
        os.environ[k] = v
        i += 1
    if i == len(args):
        for k, v in sorted(os.environ.items()):
            print(f"{k}={v}")
        return 0
    return dispatch(pod, args[i], args[i + 1:])


# ------------------------------------------------------------------------------------------ all_reduce_perf
def all_reduce_perf(pod, path, args):
    """One host's ranks (EMU_MPI_*: set by mpirun), or one rank (EMU_MPI_RANK)."""
    tests = pod.image().get("nccl_tests")  # the directory the image has nccl-tests' binaries in
    if not tests or os.path.dirname(path) not in (tests, ""):
        sys.stderr.write(f"env: '{path}': No such file or directory\n")
        return 127
    if "EMU_MPI_RANK" in os.environ:
        return _rank(pod, args)
    first = int(os.environ.get("EMU_MPI_FIRST_RANK", "0"))
    n = int(os.environ.get("EMU_MPI_LOCAL_SIZE", "1"))
    os.environ.setdefault("OMPI_COMM_WORLD_SIZE", str(n))
    os.environ.setdefault("EMU_MPI_JOB", uuid.uuid4().hex[:12])
    os.environ.setdefault("EMU_MPI_HOSTS", "1")
    emulator = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node-emulator")
    procs = []
    for local in range(n):
        env = dict(os.environ, EMU_MPI_RANK=str(first + local), EMU_MPI_LOCAL_RANK=str(local))
        procs.append(subprocess.Popen([sys.executable, emulator, "all_reduce_perf", path, *args], env=env))
    rc = 0
    for p in procs:
        r = p.wait()
        rc = rc or r
    return rc


class Aborted(Exception):
    pass


class _Rdv:
    def __init__(self, job):
        self.dir = os.path.join(model.state_dir(), "rendezvous", f"mpi-{job}")
        os.makedirs(self.dir, exist_ok=True)

    def put(self, name, obj):
        tmp = os.path.join(self.dir, f".{name}.{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(obj, f)
        os.replace(tmp, os.path.join(self.dir, name))

    def get_all(self, prefix, world, timeout=120):
        t0 = time.time()
        while True:
            if os.path.exists(os.path.join(self.dir, "abort")):
                raise Aborted()
            got = []
            for r in range(world):
                try:
                    with open(os.path.join(self.dir, f"{prefix}{r}")) as f:
                        got.append(json.load(f))
                except (OSError, ValueError):
                    break
            if len(got) == world:
                return got
            if time.time() - t0 > timeout:
                raise Aborted()
            time.sleep(0.05)

    def abort(self):
        _abort(self.dir)


def _opts(args):
    o = {"b": "32M", "e": "32M", "f": "2", "g": "1", "c": "1", "n": "20", "w": "5", "t": "1"}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) == 2 and i + 1 < len(args):
            o[a[1]] = args[i + 1]
            i += 2
        else:
            i += 1
    return o


def _rank(pod, args):
    rank = int(os.environ["EMU_MPI_RANK"])
    local = int(os.environ.get("EMU_MPI_LOCAL_RANK", "0"))
    nlocal = int(os.environ.get("EMU_MPI_LOCAL_SIZE", "1"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    hosts = int(os.environ.get("EMU_MPI_HOSTS", "1"))
    rdv = _Rdv(os.environ["EMU_MPI_JOB"])
    o = _opts(args)
    host = pod.name
    try:
        sizes, size = [], parse_size(o["b"])
        while size <= parse_size(o["e"]):
            sizes.append(size)
            size = size * int(o["f"]) if int(o["f"]) > 1 else size + parse_size(o["f"])
        gpus_per_rank, iters, warmup = int(o["g"]), int(o["n"]), int(o["w"])
    except (ValueError, ZeroDivisionError):
        sys.stderr.write(f"{host}: invalid all_reduce_perf arguments: {' '.join(args)}\n")
        rdv.abort()
        return 1
    # CUDA: the rank's GPUs are devices local*g .. local*g+g-1 of the pod's nvidia.com/gpu limit.
    have = pod.gpus()
    if have == 0 or (local + 1) * gpus_per_rank > have:
        err = "no CUDA-capable device is detected" if have == 0 else "invalid device ordinal"
        print(f"{host}: Test CUDA failure common.cu:1279 '{err}'", flush=True)
        print(f" .. {host} pid {os.getpid()}: Test failure common.cu:1148", flush=True)
        rdv.abort()
        return 1
    env = dict(os.environ)
    r = nccl.Rank(pod, env, rank)
    try:
        rdv.put(f"dev{rank}", {"host": host, "pid": os.getpid(), "gpu": local * gpus_per_rank})
        devs = rdv.get_all("dev", world)
        if rank == 0:
            lines = [f"# nThread {o['t']} nGpus {gpus_per_rank} minBytes {sizes[0] if sizes else 0} maxBytes "
                     f"{sizes[-1] if sizes else 0} step: {o['f']}(factor) warmup iters: {warmup} iters: {iters} "
                     f"agg iters: 1 validation: {o['c']} graph: 0", "#", "# Using devices"]
            for i, d in enumerate(devs):
                lines.append(f"#  Rank {i:2d} Group  0 Pid {d['pid']:6d} on {d['host']:>10} device  {d['gpu']} "
                             f"[0x{0x53 + d['gpu'] * 0x11:02x}] {pod.node.gpu_model()}")
            print("\n".join(lines), flush=True)
        try:
            r.init()
            rdv.put(f"net{rank}", r.transport)
            nets = rdv.get_all("net", world)
            if len(set(nets)) != 1:
                r.warn("transport/net.cc:683", f"peer ranks use different networks: {nets}")
                raise nccl.NcclError("ncclRemoteError", "remote process exited or there was a network error", 6)
            r.connect(world)
            shm_need = (nlocal - 1) * SHM_SEGMENT * nlocal
            if nlocal > 1 and env.get("NCCL_SHM_DISABLE") != "1" and shm_need > pod.shm_bytes():
                seg = f"/dev/shm/nccl-{uuid.uuid4().hex[:6]}"
                r.warn("misc/shmutils.cc:87", f"Error: failed to extend {seg} to {SHM_SEGMENT} bytes, "
                       f"error: No space left on device (28)")
                r.warn("misc/shmutils.cc:129", f"Error while creating shared memory segment {seg} "
                       f"(size {SHM_SEGMENT}), error: No space left on device (28)")
                raise nccl.NcclError("ncclSystemError", f"Error while creating shared memory segment {seg}", 2)
        except nccl.NcclError as e:
            sys.stdout.write(r.flush_log(stdout=True))
            print(f"{host}: Test NCCL failure common.cu:1316 '"
                  f"{'unhandled system error' if e.kind == 'ncclSystemError' else 'invalid usage' if e.kind == 'ncclInvalidUsage' else 'remote process exited or there was a network error' if e.kind == 'ncclRemoteError' else e.kind}"
                  f" (run with NCCL_DEBUG=INFO for details) / {e.last}'", flush=True)
            print(f" .. {host} pid {os.getpid()}: Test failure common.cu:1148", flush=True)
            rdv.abort()
            return 1 if e.code >= 0 else 128 - e.code
        sys.stdout.write(r.flush_log(stdout=True))
        sys.stdout.flush()
        # The node's network rate: its link rate over the devices its ranks use (sockets: the node's figure).
        rdv.put(f"rate{rank}", {"host": host, "rate": r.node_rate_bytes_s()})
        rates = rdv.get_all("rate", world)
        per_host = {}
        for x in rates:
            per_host.setdefault(x["host"], x["rate"])
        bottleneck = min(per_host.values())
        ring = 2 * (world - 1) / world
        if rank == 0:
            print("#\n#                                                              out-of-place                "
                  "       in-place          \n#       size         count      type   redop    root     time   "
                  "algbw   busbw #wrong     time   algbw   busbw #wrong\n#        (B)    (elements)            "
                  "                   (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ", flush=True)
        total_bus = []
        for size in sizes:
            # Inter-node bytes: each node sends 2(R-1)/R of the size per iteration; its ranks share that.
            if hosts > 1:
                r.send(int(size * ring * (warmup + iters) / nlocal))
            # NCCL's protocols reach their peak at large messages: ~94 % of the link, less for small ones.
            eff = 0.94 * size / (size + (4 << 20))
            busbw = bottleneck * eff / 1e9 if hosts > 1 else 150.0 * eff
            t_us = size * ring / (busbw * 1e9) * 1e6 if world > 1 else size / (busbw * 1e9) * 1e6
            algbw = size / (t_us * 1e-6) / 1e9
            total_bus.append(busbw)
            time.sleep(min(0.05, t_us * 1e-6 * (warmup + iters)))
            wrong = "N/A" if o["c"] == "0" else "0"
            if rank == 0:
                print(f"{size:12d}  {size // 4:12d}     float     sum      -1  {t_us:7.0f}  {algbw:6.2f}  {busbw:6.2f}  "
                      f"{wrong:>5}  {t_us * 1.002:7.0f}  {algbw / 1.002:6.2f}  {busbw / 1.002:6.2f}  {wrong:>5}",
                      flush=True)
        rdv.put(f"done{rank}", 1)
        rdv.get_all("done", world)
        if rank == 0:
            avg = sum(total_bus) / len(total_bus) if total_bus else 0.0
            print(f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {avg:.5f} \n#", flush=True)
        return 0
    except Aborted:
        return 1
