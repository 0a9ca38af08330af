"""A node's RDMA devices in sysfs, a pod's network interfaces, and perftest's ib_write_bw, as `rdmakit check`
reads them: everything comes from the node fixture (its kind of device, link layer, GID layout, port state,
NIC rate, counters) and the pod's own spec and allocation (emu/model.py), never from what the check looks for.

Per kind of device (annotation emulator.rdmakit.test/rdma-kind):
  erdma  Ethernet link, one IPv4-mapped GID at index 0 without gid_attrs types (as eRDMA shows it)
  mlx5   InfiniBand (a fe80 GID) unless `link-layer: Ethernet` (RoCE: v1/v2 pairs for the link-local and the
         IPv4 address; `roce-v2-index` moves the IPv4 RoCE v2 entry, as macvlan does per pod)
  efa    no link layer, one fe80 GID
Counters: the tx counter emu/model.py already keeps, and its rx twin.
"""
import json
import os
import time

from .model import INITIAL, UNIT, read, state_dir, write

RX_COUNTER = {"erdma": "ports/1/hw_counters/hw_rx_bytes_cnt", "efa": "ports/1/hw_counters/rx_bytes",
              "mlx5": "ports/1/counters/port_rcv_data"}
RATE = {"erdma": "200 Gb/sec (4X HDR)", "efa": "100 Gb/sec (4X EDR)", "mlx5": "400 Gb/sec (4X NDR)"}
NODE_TYPE = {"erdma": "4: RNIC", "efa": "1: CA", "mlx5": "1: CA"}
VENDOR = {"erdma": ("0x1ded", "0x107f"), "efa": ("0x1d0f", "0xefa1"), "mlx5": ("0x15b3", "0x101d")}
STATE = {"PORT_ACTIVE": ("4: ACTIVE", "5: LinkUp"), "PORT_DOWN": ("1: DOWN", "3: Disabled"),
         "PORT_INIT": ("2: INIT", "5: LinkUp")}


def ipv4_gid(ip):
    a = [int(x) for x in ip.split(".")]
    return f"0000:0000:0000:0000:0000:ffff:{a[0]:02x}{a[1]:02x}:{a[2]:02x}{a[3]:02x}"


def link_local(i):
    return f"fe80:0000:0000:0000:0216:3eff:fe1b:{i:04x}"


def put(p, text):
    """Writes `p` only when its content changes, atomically: concurrent execs read either version, never a
    truncated file (the node's knobs are read again at every exec, so a knob a test sets shows at once)."""
    if read(p, None) == text:
        return
    os.makedirs(os.path.dirname(p), exist_ok=True)
    tmp = f"{p}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, p)


def populate_device(node, dev, d):
    """Ports, GIDs and counters of `dev` under the node's device directory `d`, from the node's knobs as they
    are now (counters are created once and only ever grow)."""
    write = put
    kind, i = node.kind, node.devices.index(dev) if dev in node.devices else 0
    vendor, device = VENDOR.get(kind, ("0x0000", "0x0000"))
    write(os.path.join(d, "node_type"), NODE_TYPE.get(kind, "1: CA") + "\n")
    write(os.path.join(d, "node_guid"), f"0216:3eff:fe1b:{i:04x}\n")
    write(os.path.join(d, "fw_ver"), "28.39.1002\n" if kind == "mlx5" else "0.2.0\n")
    write(os.path.join(d, "device/vendor"), vendor + "\n")
    write(os.path.join(d, "device/device"), device + "\n")
    port = os.path.join(d, "ports/1")
    state, phys = STATE.get(node.knob("port-state", "PORT_ACTIVE"), STATE["PORT_ACTIVE"])
    write(os.path.join(port, "state"), state + "\n")
    write(os.path.join(port, "phys_state"), phys + "\n")
    layer = {"erdma": "Ethernet", "efa": "Unspecified"}.get(kind) or node.knob("link-layer", "InfiniBand")
    write(os.path.join(port, "link_layer"), layer + "\n")
    write(os.path.join(port, "rate"), node.knob("link-rate", RATE.get(kind, "100 Gb/sec (4X EDR)")) + "\n")
    gids = {}
    netdev = node.knob("rdma-netdev", "eth0" if kind == "erdma" else f"net{i + 1}")
    if node.knob("rdma-gid") == "none":
        pass
    elif kind == "erdma":
        gids[0] = (ipv4_gid(node.ip), None, netdev)
    elif kind == "mlx5" and layer == "Ethernet":
        v2 = int(node.knob("roce-v2-index", "3"))
        gids[0] = (link_local(i), "IB/RoCE v1", netdev)
        gids[1] = (link_local(i), "RoCE v2", netdev)
        gids[2] = (ipv4_gid(node.ip), "IB/RoCE v1", netdev)
        gids[v2] = (ipv4_gid(node.ip), "RoCE v2", netdev)
    else:
        gids[0] = (link_local(i), None, None)
    for idx in range(max(gids, default=0) + 2):
        gid, typ, nd = gids.get(idx, ("0000:0000:0000:0000:0000:0000:0000:0000", None, None))
        write(os.path.join(port, "gids", str(idx)), gid + "\n")
        if typ:
            write(os.path.join(port, "gid_attrs/types", str(idx)), typ + "\n")
        if nd and idx in gids:
            write(os.path.join(port, "gid_attrs/ndevs", str(idx)), nd + "\n")
    for idx in os.listdir(os.path.join(port, "gids")):
        if idx.isdigit() and int(idx) > max(gids, default=0) + 1:
            os.remove(os.path.join(port, "gids", idx))
    for sub in ("types", "ndevs"):
        at = os.path.join(port, "gid_attrs", sub)
        for idx in os.listdir(at) if os.path.isdir(at) else []:
            if idx.isdigit() and (int(idx) not in gids or (sub == "types" and gids[int(idx)][1] is None)):
                os.remove(os.path.join(at, idx))
    rx = os.path.join(d, RX_COUNTER[kind])
    if not os.path.exists(rx):
        put(rx, f"{INITIAL[kind] // 2 + i * 4096}\n")


def add_rx_bytes(node, dev, nbytes):
    """Traffic the node received on `dev` (counter units), unless the fixture freezes its counters."""
    if node.knob("counters") == "frozen":
        return
    d = node.device_dir(dev)
    populate_device(node, dev, d)
    p = os.path.join(d, RX_COUNTER[node.kind])
    import fcntl
    with open(p + ".lock", "w") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        write(p, f"{int(read(p, '0').strip() or 0) + nbytes // UNIT.get(node.kind, 1)}\n")


def populate_pod(pod):
    """What `rdmakit check` reads beyond emu/model.py's view: the pod's devices' ports, GIDs and rx counters,
    and its network interfaces."""
    for dev in pod.devices():
        populate_device(pod.node, dev, pod.node.device_dir(dev))
    populate_net(pod)


def populate_net(pod):
    """The pod's /sys/class/net: its interfaces (hostNetwork: the node's), with state, MTU and MAC."""
    for n, (name, _ip) in enumerate(sorted(pod.interfaces().items())):
        d = os.path.join(pod.root, "sys/class/net", name)
        put(os.path.join(d, "operstate"), ("unknown" if name == "lo" else "up") + "\n")
        put(os.path.join(d, "mtu"), ("65536" if name == "lo" else "9000") + "\n")
        put(os.path.join(d, "address"), f"02:42:ac:11:00:{n:02x}\n")


def cmd_ip(pod, args):
    """`ip -o addr show` (and `ip addr`): the pod's interfaces and their IPv4 addresses."""
    if "addr" not in args and "a" not in args:
        print(f"node-emulator: ip {' '.join(args)} is not emulated")
        return 1
    for n, (name, ip) in enumerate(sorted(pod.interfaces().items()), 1):
        prefix = 8 if name == "lo" else 24
        print(f"{n}: {name}    inet {ip}/{prefix} scope {'host' if name == 'lo' else 'global'} {name}")
    return 0


def cmd_df(pod, args):
    """`df -k PATH`: /dev/shm's size from the pod's volumes (64 MiB without a Memory emptyDir)."""
    paths = [a for a in args if not a.startswith("-")] or ["/"]
    print("Filesystem     1K-blocks  Used Available Use% Mounted on")
    for p in paths:
        if p.rstrip("/") == "/dev/shm":
            kib = pod.shm_bytes() // 1024
            print(f"shm            {kib:>9}     0 {kib:>9}   0% /dev/shm")
        else:
            print(f"overlay        {1 << 30:>9}     0 {1 << 30:>9}   0% {p}")
    return 0


def _perftest_args(args):
    opts, host = {}, None
    it = iter(args)
    for a in it:
        if a in ("-d", "-x", "-s", "-n", "-p"):
            opts[a] = next(it, "")
        elif a.startswith("--use_cuda"):
            opts["cuda"] = a.partition("=")[2] or "0"
        elif a.startswith("-"):
            continue
        else:
            host = a
    return opts, host


def _perftest_report(dev, size, iters, gbps, gid):
    g = f" GID index       : {gid}\n" if gid is not None else ""
    return ("---------------------------------------------------------------------------------------\n"
            "                    RDMA_Write BW Test\n"
            f" Dual-port       : OFF\t\tDevice         : {dev}\n"
            " Number of qps   : 1\t\tTransport type : IB\n"
            " Connection type : RC\t\tUsing SRQ      : OFF\n"
            f"{g}"
            "---------------------------------------------------------------------------------------\n"
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" {size:<10} {iters:<10}       {gbps * 1.02:.2f}             {gbps:.2f}\t\t   {gbps * 1e9 / 8 / size / 1e6:.6f}\n"
            "---------------------------------------------------------------------------------------\n")


def cmd_ib_write_bw(pod, args):
    """perftest's RDMA WRITE bandwidth test between two pods: the server registers at its pod address; the
    client finds it by the address it was given, moves size x iterations bytes from its device to the
    server's at the slower node's NIC rate, counting them on both devices."""
    opts, host = _perftest_args(args)
    dev = opts.get("-d", "")
    size, iters = int(opts.get("-s", "65536")), int(opts.get("-n", "5000"))
    devs = pod.devices()
    if dev not in devs:
        print(f" IB device {dev} not found\n Unable to find the Infiniband/RoCE device", flush=True)
        return 1
    if pod.memlock() is not None and pod.memlock() < size * 2:
        print(" Couldn't allocate MR\n failed to create mr\n Failed to create MR", flush=True)
        return 1
    if "cuda" in opts and pod.node.knob("gpudirect") != "true":
        print(" Couldn't register MR: GPUDirect RDMA is not available (no nvidia_peermem, no dma-buf)", flush=True)
        return 1
    reg_dir = os.path.join(state_dir(), "perftest")
    os.makedirs(reg_dir, exist_ok=True)
    gid = opts.get("-x")
    if host is None:
        me = pod.ip or pod.node.ip
        reg = os.path.join(reg_dir, me + ".json")
        done = os.path.join(reg_dir, me + ".done")
        if os.path.exists(done):
            os.remove(done)
        write(reg, json.dumps({"ns": pod.ns, "pod": pod.name, "uid": pod.uid, "dev": dev}))
        print("\n************************************\n* Waiting for client to connect... *\n************************************",
              flush=True)
        deadline = time.time() + 110
        while not os.path.exists(done):
            if time.time() > deadline:
                os.remove(reg)
                return 1
            time.sleep(0.05)
        result = json.loads(read(done, "{}"))
        os.remove(done)
        os.remove(reg)
        print(_perftest_report(dev, size, iters, result.get("gbps", 0.0), gid), flush=True)
        return 0
    reg = os.path.join(reg_dir, host + ".json")
    if not os.path.exists(reg):
        print(f" Couldn't connect to {host}:18515\nUnable to open file descriptor for socket connection"
              " Unable to init the socket connection", flush=True)
        return 1
    from .model import Pod
    server = json.loads(read(reg, "{}"))
    peer = Pod(server["ns"], server["pod"], None, server.get("uid"))

    def rate(node):
        """What one RDMA WRITE stream reaches on the node's NIC: the knob nic-gib-s, else 93 % of the port's
        link rate (the sysfs `rate` line the node shows)."""
        if node.knob("nic-gib-s"):
            return float(node.knob("nic-gib-s"))
        line = node.knob("link-rate", RATE.get(node.kind, "100 Gb/sec"))
        return float(line.split()[0]) * 1e9 / 8 / (1 << 30) * 0.93

    gib_s = min(rate(pod.node), rate(peer.node))
    nbytes = size * iters
    time.sleep(min(nbytes / (gib_s * (1 << 30)), 5.0))
    pod.node.add_bytes([dev], nbytes)
    add_rx_bytes(peer.node, server["dev"], nbytes)
    gbps = gib_s * (1 << 30) * 8 / 1e9
    write(os.path.join(reg_dir, host + ".done"), json.dumps({"gbps": gbps}))
    print(_perftest_report(dev, size, iters, gbps, gid), flush=True)
    return 0
