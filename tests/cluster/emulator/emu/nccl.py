"""A stand-in for NCCL's transport choice and its log lines, decided from what one rank's pod really has.

NCCL (2.2x) picks its network plugin at init: NET/IB unless NCCL_IB_DISABLE=1, on the verbs devices the
process can open (the pod's /dev/infiniband), filtered by NCCL_IB_HCA (`^` excludes, `=` matches names
exactly, otherwise prefixes; `:port` suffixes); with no usable device it says "NET/IB : No device found." and
carries on over sockets (NET/Socket). The bootstrap and NET/Socket use NCCL_SOCKET_IFNAME (same syntax, matched
against the pod's interfaces; default: not lo/docker); none found is ncclInvalidUsage. Over IB, queue pairs
and registered memory are locked memory: under a 64 KiB RLIMIT_MEMLOCK ibv_create_qp fails with ENOMEM and
the communicator init fails with ncclSystemError. The line formats are NCCL's (crates/probe/tests/fixtures/logs).
"""
import os
import time

# NCCL releases with a known crash in ncclNetInit on these nodes (the image's pin decides).
SEGV_VERSIONS = {"2.28.9"}
# Locked memory NCCL's IB transport needs for its queue pairs and buffers (bytes).
IB_MEMLOCK_NEED = 64 << 20


class NcclError(Exception):
    """ncclCommInitRank failed: `kind` is NCCL's result name, `last` its "Last error" line."""

    def __init__(self, kind, last, code):
        super().__init__(f"{kind}: {last}")
        self.kind, self.last, self.code = kind, last, code


def match_list(spec, names):
    """NCCL's device/interface list syntax applied to names."""
    if not spec:
        return list(names)
    exclude, exact = spec.startswith("^"), False
    spec = spec.lstrip("^")
    if spec.startswith("="):
        exact, spec = True, spec[1:]
    pats = [p.split(":")[0] for p in spec.split(",") if p]
    hit = [n for n in names if any((n == p) if exact else n.startswith(p) for p in pats)]
    return [n for n in names if n not in hit] if exclude else hit


class Rank:
    """One NCCL rank in `pod` with environment `env` (the process's own)."""

    def __init__(self, pod, env, rank=0, tid=None):
        self.pod, self.env, self.rank = pod, env, rank
        self.pid = os.getpid()
        self.tid = tid or self.pid + 87
        self.host = pod.name
        self.lines = []
        self.version = pod.nccl_version()
        self.transport, self.devices, self.ifname, self.addr = None, [], None, None

    def who(self, tid=None):
        return f"{self.host}:{self.pid}:{tid or self.tid} [0]"  # [cudaDev]

    def info(self, msg, tid=None):
        self.lines.append(f"{self.who(tid)} NCCL INFO {msg}")

    def warn(self, where, msg):
        self.lines.append(f"{self.who()} {where} NCCL WARN {msg}")

    def init(self):
        """ncclCommInitRank: bootstrap interface, then the net plugin. Raises NcclError like NCCL fails."""
        if not self.version:
            raise NcclError("ImportError", "libnccl.so.2: cannot open shared object file: No such file or directory", 1)
        ifs = {n: ip for n, ip in self.pod.interfaces().items()}
        want = self.env.get("NCCL_SOCKET_IFNAME", "")
        if want:
            self.info(f"NCCL_SOCKET_IFNAME set by environment to {want}", self.pid)
        cands = match_list(want, list(ifs)) if want else [n for n in ifs if not n.startswith(("lo", "docker"))]
        if not cands:
            self.warn("misc/socket.cc:525", "Bootstrap : no socket interface found")
            raise NcclError("ncclInvalidUsage", "Bootstrap : no socket interface found", 5)
        self.ifname, self.addr = cands[0], ifs[cands[0]]
        self.info(f"Bootstrap: Using {self.ifname}:{self.addr}<0>", self.pid)
        self.lines.append(f"NCCL version {self.version}+cuda13.0")
        if self.version in SEGV_VERSIONS:
            raise NcclError("SIGSEGV", "ncclNetInit", -11)
        disabled = self.env.get("NCCL_IB_DISABLE", "0") == "1"
        if "NCCL_IB_DISABLE" in self.env:
            self.info(f"NCCL_IB_DISABLE set by environment to {self.env['NCCL_IB_DISABLE']}.")
        devs = []
        if not disabled:
            hca = self.env.get("NCCL_IB_HCA", "")
            if hca:
                self.info(f"NCCL_IB_HCA set to {hca}")
            # NCCL's IB plugin skips ports that are not ACTIVE and devices without a usable GID.
            node = self.pod.node
            broken = node.knob("rdma-gid") == "none" or node.knob("port-state", "PORT_ACTIVE") != "PORT_ACTIVE"
            usable = [] if broken else self.pod.devices()
            devs = match_list(hca, usable)
            if not devs:
                self.info("NET/IB : No device found.")
        if devs:
            kind = self.pod.node.kind
            link = {"erdma": "RoCE", "mlx5": "IB", "efa": "IB"}.get(kind, "IB")
            listed = " ".join(f"[{i}]{d}:1/{link}" for i, d in enumerate(devs))
            self.info(f"NET/IB : Using {listed} [RO]; OOB {self.ifname}:{self.addr}<0>")
            self.info("Using network IB")
            self.info(f"NET/IB : GPU Direct RDMA Disabled for HCA 0 '{devs[0]}'")
            self.transport, self.devices = "IB", devs
        else:
            self.info(f"NET/Socket : Using [0]{self.ifname}:{self.addr}<0>")
            self.info("Using network Socket")
            self.transport = "Socket"

    def connect(self, nranks):
        """Setting up the channels: over IB the queue pairs need locked memory."""
        self.info(f"ncclCommInitRank comm 0x55d9607ee240 rank {self.rank} nranks {nranks} cudaDev 0 nvmlDev 0 "
                  f"busId 3b000 commId 0x8c1f9d0a3e2b11aa - Init START")
        if self.transport == "IB":
            memlock = self.pod.memlock()
            if memlock is not None and memlock < IB_MEMLOCK_NEED:
                self.warn("misc/ibvwrap.cc:130", "Call to ibv_create_qp failed with error Unknown error -12")
                self.info("transport/net_ib.cc:1030 -> 2")
                self.info("init.cc:1222 -> 2")
                raise NcclError("ncclSystemError", "Call to ibv_create_qp failed", 2)

    def send(self, nbytes):
        """Bytes this rank puts on the network: over IB they are the node's device counters."""
        if self.transport == "IB":
            self.pod.node.add_bytes(self.devices, nbytes)

    def rate(self):
        """GiB/s one transfer reaches (the node fixture's figures), for the time a transfer takes."""
        key = "ib-gib-s" if self.transport == "IB" else "socket-gib-s"
        return float(self.pod.node.knob(key, "12" if self.transport == "IB" else "1.2"))

    def flush_log(self):
        """The lines go where NCCL_DEBUG_FILE says (%h host, %p pid) when NCCL_DEBUG is set, else stderr."""
        if not self.env.get("NCCL_DEBUG"):
            return ""
        text = "".join(line + "\n" for line in self.lines)
        dest = self.env.get("NCCL_DEBUG_FILE", "")
        if dest and dest != "stderr":
            path = dest.replace("%h", self.host).replace("%p", str(self.pid))
            mapped = self.pod.map_one(path)
            os.makedirs(os.path.dirname(mapped), exist_ok=True)
            with open(mapped, "a") as f:
                f.write(text)
            return ""
        return text


def transfer_seconds(nbytes, rank):
    return nbytes / (rank.rate() * 2**30)


def sleep_for(nbytes, rank):
    time.sleep(min(transfer_seconds(nbytes, rank), 30.0))
