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
        want_net = self.env.get("NCCL_NET", "")
        if want_net:
            self.info(f"NCCL_NET set by environment to {want_net}")
        if self.net_plugins(want_net):
            return
        if want_net and want_net not in ("IB", "Socket"):
            self.warn("net.cc:1084", f"Error: network {want_net} not found.")
            raise NcclError("ncclInvalidUsage", f"Error: network {want_net} not found.", 5)
        disabled = self.env.get("NCCL_IB_DISABLE", "0") == "1" or want_net == "Socket"
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
            # EFA devices are no IB or RoCE ports: NCCL's own IB transport does not take them.
            usable = [] if broken or node.kind == "efa" else self.pod.devices()
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

    def net_plugins(self, want_net):
        """The external net plugins the pod has (its image's, or the node's mounted into it), as NCCL loads
        them before its own transports. True when one of them carries the communicator."""
        node = self.pod.node
        broken = node.knob("rdma-gid") == "none" or node.knob("port-state", "PORT_ACTIVE") != "PORT_ACTIVE"
        for p in self.pod.net_plugins():
            name, version = p.get("name"), p.get("version", "")
            if name == "aws-ofi-nccl" and want_net in ("", "AWS Libfabric", "Libfabric"):
                self.info("Successfully loaded external plugin libnccl-net.so")
                self.info(f"NET/OFI Initializing aws-ofi-nccl {version}")
                self.info("NET/OFI Using Libfabric version 2.1")
                provider = self.env.get("FI_PROVIDER", "efa")
                self.info(f"NET/OFI Setting provider_filter to {provider}")
                self.info("NET/OFI Using transport protocol RDMA (platform set)")
                devs = [] if broken or node.kind != "efa" or provider != "efa" else self.pod.devices()
                if devs:
                    self.info(f"NET/OFI Selected provider is efa, fabric is efa (found {len(devs)} nics)")
                    self.info("Initialized NET plugin Libfabric")
                    self.info("Using network Libfabric")
                    self.transport, self.devices = "Libfabric", devs
                    return True
                self.lines.append(f"{self.who()} nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI fi_getinfo() "
                                  f"call failed: No data available")
                self.lines.append(f"{self.who()} nccl_net_ofi_create_plugin:218 NCCL WARN NET/OFI Failed to "
                                  f"initialize rdma protocol")
                self.lines.append(f"{self.who()} nccl_net_ofi_create_plugin:335 NCCL WARN NET/OFI aws-ofi-nccl "
                                  f"initialization failed")
            elif name == "gIB" and want_net in ("", "gIB"):
                self.info(f"NET/gIB : Initializing gIB v{version}")
                usable = [] if broken or node.kind == "efa" else self.pod.devices()
                devs = match_list(self.env.get("NCCL_IB_HCA", ""), usable)
                if devs:
                    self.info(f"NET/gIB : GPU Direct RDMA Enabled for HCA 0 '{devs[0]}'")
                    self.info("Using network gIB")
                    self.transport, self.devices = "gIB", devs
                    return True
                self.info("NET/gIB : No device found.")
        return False

    def node_rate_bytes_s(self):
        """Bytes/s this rank's node moves: its devices' link rate (fixture `link-gbps` per device, else the
        node's `ib-gib-s`) over the devices NCCL uses; over sockets the node's `socket-gib-s`."""
        knob = self.pod.node.knob
        if self.transport in (None, "Socket"):
            return float(knob("socket-gib-s", "1.2")) * 2**30
        if knob("link-gbps"):
            return len(self.devices) * float(knob("link-gbps")) * 1e9 / 8
        return float(knob("ib-gib-s", "12")) * 2**30

    def connect(self, nranks):
        """Setting up the channels: over IB the queue pairs need locked memory."""
        self.info(f"ncclCommInitRank comm 0x55d9607ee240 rank {self.rank} nranks {nranks} cudaDev 0 nvmlDev 0 "
                  f"busId 3b000 commId 0x8c1f9d0a3e2b11aa - Init START")
        if self.transport in ("IB", "Libfabric", "gIB"):
            memlock = self.pod.memlock()
            if memlock is not None and memlock < IB_MEMLOCK_NEED:
                self.warn("misc/ibvwrap.cc:130", "Call to ibv_create_qp failed with error Unknown error -12")
                self.info("transport/net_ib.cc:1030 -> 2")
                self.info("init.cc:1222 -> 2")
                raise NcclError("ncclSystemError", "Call to ibv_create_qp failed", 2)

    def send(self, nbytes):
        """Bytes this rank puts on the network: over IB they are the node's device counters."""
        if self.transport in ("IB", "Libfabric", "gIB"):
            self.pod.node.add_bytes(self.devices, nbytes)

    def rate(self):
        """GiB/s one transfer reaches (the node fixture's figures), for the time a transfer takes."""
        key = "ib-gib-s" if self.transport == "IB" else "socket-gib-s"
        return float(self.pod.node.knob(key, "12" if self.transport == "IB" else "1.2"))

    def flush_log(self, stdout=False):
        """The lines go where NCCL_DEBUG_FILE says (%h host, %p pid) when NCCL_DEBUG is set, else to the
        caller's stream (NCCL's own default is stdout; torch's tests read them from stderr)."""
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
