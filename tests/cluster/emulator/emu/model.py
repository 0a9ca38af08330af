"""The emulated node under one pod exec: what that pod really has, derived from its spec, its node and its
ResourceClaims as the API server holds them (read with kubectl and the tier's kubeconfig), never from the
namespace it runs in.

KWOK's exec (patched by tests/cluster/build.sh) puts the pod into the command's environment
(KWOK_EXEC_POD_NAMESPACE, _NAME, _UID, _CONTAINER). From there:
  devices   only what the pod was allocated: the device-plugin RDMA resources its container requests, or the
            devices in the status.allocation of the ResourceClaims its container uses (names from the
            ResourceSlices); the node's kind of device (erdma, mlx5, efa) is the node fixture's
  memlock   the node's container runtime (annotation emulator.rdmakit.test/containerd-memlock)
  CapEff    containerd's default set, + CAP_IPC_LOCK when securityContext adds it, all when privileged
  mounts    hostPath and emptyDir volumes as declared; /dev/shm 64 MiB unless an emptyDir Memory volume is
            mounted there
  GPUs      the container's nvidia.com/gpu* limit, the model from the node's labels
  env       the container's env and envFrom (an exec's own `env K=V` wins)
  address   the pod IP KWOK assigned (the node's InternalIP for hostNetwork pods; each node has its own)
State is keyed by what it belongs to: $RDMAKIT_EMU_STATE/nodes/<node>/ holds the node's device counters and
hostPath contents, $RDMAKIT_EMU_STATE/pods/<uid>/ the pod's own filesystem (/tmp, /ctx, emptyDirs).
"""
import json
import os
import re
import time

ANN = "emulator.rdmakit.test/"
# Device-plugin resources that hand a pod RDMA devices (the vendors' profiles name them).
RDMA_RESOURCES = re.compile(r"^(aliyun/erdma|rdma/rdma_shared_device_\w+|rdma/shared_ib|rdma/\w+|"
                            r"vpc\.amazonaws\.com/efa|vke\.volcengine\.com/infiniband-rdma)$")
CAPS_DEFAULT = 0x00000000a80425fb  # containerd's default capability set
CAP_IPC_LOCK = 1 << 14
CAPS_ALL = 0x000001ffffffffff
COUNTER = {"erdma": "ports/1/hw_counters/hw_tx_bytes_cnt", "efa": "ports/1/hw_counters/tx_bytes",
           "mlx5": "ports/1/counters/port_xmit_data"}
UNIT = {"mlx5": 4}  # port_xmit_data counts 4-byte words
# A fresh node's counters: traffic from before the test (never 0, so a reader that sums nothing is visible).
INITIAL = {"erdma": 7340032000, "efa": 91268055040, "mlx5": 1835008000}


# Paths every pod has, mapped into its own directory wherever they appear.
BASE_PATHS = ("/tmp", "/ctx", "/dev/infiniband", "/sys/class/infiniband", "/sys/class/net", "/proc/self/limits",
              "/proc/self/status")


class EmuError(Exception):
    """The emulator cannot answer (no pod identity, the API server unreachable): a cluster error, exit 125."""


def state_dir():
    s = os.environ.get("RDMAKIT_EMU_STATE", "")
    if not s:
        raise EmuError("node-emulator: RDMAKIT_EMU_STATE is not set (the kwok controller must run with it)")
    return s


# The resources the emulator reads, by the names its callers use: (API path, plural, namespaced).
RESOURCES = {
    "pod": ("api/v1", "pods", True),
    "pods": ("api/v1", "pods", True),
    "node": ("api/v1", "nodes", False),
    "configmap": ("api/v1", "configmaps", True),
    "resourceclaims.resource.k8s.io": ("apis/resource.k8s.io/v1", "resourceclaims", True),
    "resourceslices.resource.k8s.io": ("apis/resource.k8s.io/v1", "resourceslices", False),
}


def api_get(kind, ns="", name="", selector="", timeout=30):
    """One GET to the API server with the tier's kubeconfig credentials, as JSON (an object, or a list
    without a name). A `kubectl get` per read cost ~65 ms of CPU (a Go process start), most of an exec's
    own cost at 1,000 probed pods (bench/scale); this costs a TLS handshake."""
    import http.client
    import urllib.parse
    group, plural, namespaced = RESOURCES[kind]
    path = f"/{group}/" + (f"namespaces/{ns}/" if namespaced and ns else "") + plural + (f"/{name}" if name else "")
    if selector:
        path += "?" + urllib.parse.urlencode({"labelSelector": selector})
    host, port, ctx = _api()
    what = f"get {kind} {name or selector}".rstrip() + (f" -n {ns}" if ns else "")
    try:
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=timeout)
        conn.request("GET", path, headers={"Accept": "application/json", "User-Agent": "node-emulator"})
        r = conn.getresponse()
        body = r.read()
        conn.close()
    except (OSError, http.client.HTTPException) as e:
        raise EmuError(f"node-emulator: {what}: {e}")
    try:
        obj = json.loads(body)
    except ValueError:
        raise EmuError(f"node-emulator: {what}: HTTP {r.status}, not JSON: {body[:200]!r}")
    if r.status != 200:
        raise EmuError(f"node-emulator: {what}: HTTP {r.status}: {obj.get('message', '')}")
    return obj


_API = []


def _api():
    """(host, port, SSL context) from the tier's kubeconfig (kwokctl's: one cluster, one user, the
    certificates inline); the PEM files are written once into the state directory."""
    if _API:
        return _API[0]
    import base64
    import ssl
    import urllib.parse
    out = os.path.dirname(state_dir())
    config = os.path.join(out, "kubeconfig")
    if not os.path.isfile(config):
        config = config + ".tmp"  # during up.sh
    text = read(config, "")
    fields = dict(re.findall(r"^\s*(server|certificate-authority-data|client-certificate-data|client-key-data):"
                             r"\s*(\S+)\s*$", text, re.M))
    missing = {"server", "certificate-authority-data", "client-certificate-data", "client-key-data"} - set(fields)
    if missing:
        raise EmuError(f"node-emulator: {config}: no {', '.join(sorted(missing))} (kwokctl's kubeconfig has them)")
    url = urllib.parse.urlsplit(fields["server"])
    pem_dir = os.path.join(state_dir(), "api")
    os.makedirs(pem_dir, exist_ok=True)
    paths = {}
    for field, file in (("certificate-authority-data", "ca.pem"), ("client-certificate-data", "cert.pem"),
                        ("client-key-data", "key.pem")):
        path = os.path.join(pem_dir, file)
        data = base64.b64decode(fields[field]).decode()
        if read(path, None) != data:
            tmp = f"{path}.{os.getpid()}"
            write(tmp, data)
            os.replace(tmp, path)
        paths[file] = path
    ctx = ssl.create_default_context(cafile=paths["ca.pem"])
    ctx.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    _API.append((url.hostname, url.port or 443, ctx))
    return _API[0]


def _kubectl_env():
    """kubectl runs outside the pod: the machine's PATH, not the emulator's commands."""
    return dict(os.environ, HOME=os.environ.get("HOME") or "/tmp",
                PATH=os.environ.get("RDMAKIT_EMU_REAL_PATH", "/usr/local/bin:/usr/bin:/bin"))


def expand(spec):
    """'mlx5_0,mlx5_1' or 'rdmap{79..110}s0' -> device names."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        m = re.match(r"^(.*)\{(\d+)\.\.(\d+)\}(.*)$", part)
        if m:
            out += [f"{m.group(1)}{i}{m.group(4)}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
        else:
            out.append(part)
    return out


def quantity_bytes(q):
    m = re.match(r"^(\d+)([KMGT]i?)?$", q or "")
    if not m:
        return None
    mult = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "K": 10**3, "M": 10**6, "G": 10**9,
            "T": 10**12}.get(m.group(2) or "", 1)
    return int(m.group(1)) * mult


class Node:
    """One simulated node: its fixture (labels, annotations, addresses) and its device counters."""

    def __init__(self, obj):
        self.obj = obj
        self.name = obj["metadata"]["name"]
        self.ann = obj["metadata"].get("annotations") or {}
        self.labels = obj["metadata"].get("labels") or {}
        self.kind = self.ann.get(ANN + "rdma-kind", "")
        self.devices = expand(self.ann.get(ANN + "rdma-devices", ""))
        addrs = (obj.get("status") or {}).get("addresses") or []
        self.ip = next((a["address"] for a in addrs if a["type"] == "InternalIP"), "127.0.0.1")
        self.dir = os.path.join(state_dir(), "nodes", self.name)

    def knob(self, name, default=""):
        return self.ann.get(ANN + name, default)

    def memlock(self):
        """RLIMIT_MEMLOCK of the node's containers in bytes, or None for unlimited (LimitMEMLOCK=infinity)."""
        v = self.knob("containerd-memlock", "infinity")
        return None if v in ("infinity", "unlimited") else int(v)

    def gpu_model(self):
        return self.knob("gpu-model") or self.labels.get("nvidia.com/gpu.product", "").replace("-", " ") or \
            self.labels.get("aliyun.accelerator/nvidia_name", "NVIDIA GPU").replace("-", " ")

    def counter_path(self, dev):
        return os.path.join(self.dir, "sys/class/infiniband", dev, COUNTER[self.kind])

    def device_dir(self, dev):
        """The node's /sys/class/infiniband/<dev>, created with its counter on first use."""
        d = os.path.join(self.dir, "sys/class/infiniband", dev)
        p = self.counter_path(dev)
        if not os.path.exists(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
            i = self.devices.index(dev) if dev in self.devices else 0
            write(p, f"{INITIAL[self.kind] + i * 4096}\n")
        return d

    def add_bytes(self, devs, nbytes):
        """Traffic the node sent: nbytes spread over devs (counter units), unless the fixture freezes them."""
        if self.knob("counters") == "frozen" or not devs:
            return
        unit = UNIT.get(self.kind, 1)
        for dev in devs:
            self.device_dir(dev)
            p = self.counter_path(dev)
            lock = p + ".lock"
            with open(lock, "w") as lf:
                import fcntl
                fcntl.flock(lf, fcntl.LOCK_EX)
                write(p, f"{int(read(p, '0').strip() or 0) + nbytes // len(devs) // unit}\n")


class Pod:
    """The pod of this exec, its container and node, and what they give the processes in it."""

    def __init__(self, ns, name, container=None, uid=None):
        self.ns, self.name = ns, name
        self.obj = cached_pod(ns, name, uid)
        spec = self.obj["spec"]
        self.uid = self.obj["metadata"]["uid"]
        containers = spec.get("containers", []) + spec.get("initContainers", [])
        self.container = next((c for c in containers if c["name"] == container), None) or containers[0]
        node_name = spec.get("nodeName", "")
        exec_id = os.environ.get("EMU_EXEC_ID")
        if exec_id:
            # One exec sees one node: the exec's first process read it (node-emulator pod_env) and its
            # children use that copy, instead of a GET each (two per probed pod at scale, bench/scale).
            self.node = Node(cached("node", "", node_name, key=f"node-{node_name}-exec-{exec_id}", ttl=3600))
        else:
            self.node = Node(cached("node", "", node_name, key=node_name))
        self.dir = os.path.join(state_dir(), "pods", self.uid)
        self.root = os.path.join(self.dir, "root")
        self.host_network = bool(spec.get("hostNetwork"))
        status = self.obj.get("status") or {}
        self.ip = status.get("podIP") or (self.node.ip if self.host_network else "")

    @staticmethod
    def current():
        ns, name = os.environ.get("KWOK_EXEC_POD_NAMESPACE"), os.environ.get("KWOK_EXEC_POD_NAME")
        if not ns or not name:
            raise EmuError("node-emulator: no pod identity (KWOK_EXEC_POD_*): the kwok controller must be "
                           "the one tests/cluster/build.sh patched")
        uid = os.environ.get("KWOK_EXEC_POD_UID")
        if not uid and os.environ.get("EMU_POD_KEY") == f"{ns}/{name}":
            # A process the exec's first emulator process started: that one read the pod afresh and its uid
            # is this pod's (every command of one exec would otherwise GET the pod again: ~9 GETs per probed
            # pod at scale, bench/scale).
            uid = os.environ.get("EMU_POD_ENV")
        return Pod(ns, name, os.environ.get("KWOK_EXEC_CONTAINER"), uid)

    # -- what the spec asks for ------------------------------------------------------------------------
    def limits(self):
        r = self.container.get("resources") or {}
        return {**(r.get("requests") or {}), **(r.get("limits") or {})}

    def gpus(self):
        return sum(int(v) for k, v in self.limits().items() if k.startswith("nvidia.com/gpu"))

    def rdma_requests(self):
        return {k: v for k, v in self.limits().items() if RDMA_RESOURCES.match(k) and str(v) not in ("0", "")}

    def devices(self):
        """The RDMA devices this container was allocated, in the node's order."""
        node = self.node
        if not node.kind:
            return []
        got = []
        per_res = json.loads(node.knob("rdma-resource-devices", "{}") or "{}")
        for res, n in self.rdma_requests().items():
            if res in per_res:
                got += per_res[res]
            elif node.kind == "efa":
                got += node.devices[:int(n)]  # one EFA interface per unit
            else:
                got += node.devices
        got += self.claimed_devices()
        return [d for d in node.devices if d in set(got)]

    def claimed_devices(self):
        """DRA: the devices of the ResourceClaims this container uses, allocated (status.allocation) by the
        scheduler; the IB device name is the slice's dra.net/rdmaDevice attribute of each allocated device."""
        used = {c["name"] for c in (self.container.get("resources") or {}).get("claims") or []}
        if not used:
            return []
        names = {s["name"]: s.get("resourceClaimName")
                 for s in (self.obj.get("status") or {}).get("resourceClaimStatuses") or []}
        for c in self.obj["spec"].get("resourceClaims") or []:
            if c.get("resourceClaimName"):
                names.setdefault(c["name"], c["resourceClaimName"])
        out = []
        for ref in used:
            claim_name = names.get(ref)
            if not claim_name:
                continue
            claim = api_get("resourceclaims.resource.k8s.io", self.ns, claim_name)
            for res in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
                attrs = slice_device(res["driver"], res["pool"], res["device"])
                dev = (attrs.get("dra.net/rdmaDevice") or attrs.get("rdmaDevice") or {}).get("string")
                if dev:
                    out.append(dev)
        return out

    def memlock(self):
        return self.node.memlock()

    def cap_eff(self):
        sc = self.container.get("securityContext") or {}
        if sc.get("privileged"):
            return CAPS_ALL
        caps = CAPS_DEFAULT
        c = sc.get("capabilities") or {}
        drop = {x.upper().removeprefix("CAP_") for x in c.get("drop") or []}
        if "ALL" in drop:
            caps = 0
        add = {x.upper().removeprefix("CAP_") for x in c.get("add") or []}
        if "IPC_LOCK" in add:
            caps |= CAP_IPC_LOCK
        if "IPC_LOCK" in drop:
            caps &= ~CAP_IPC_LOCK
        return caps

    def volumes(self):
        """(mountPath, volume) for each volumeMount of the container."""
        vols = {v["name"]: v for v in self.obj["spec"].get("volumes") or []}
        return [(m["mountPath"].rstrip("/") or "/", vols.get(m["name"], {}))
                for m in self.container.get("volumeMounts") or []]

    def shm_bytes(self):
        for path, v in self.volumes():
            if path == "/dev/shm" and (v.get("emptyDir") or {}).get("medium") == "Memory":
                limit = quantity_bytes((v.get("emptyDir") or {}).get("sizeLimit"))
                return limit or 1 << 40  # no sizeLimit: half the node's memory on a real node; large here
        return 64 << 20

    def env(self):
        """The container's environment as the kubelet sets it (env over envFrom; the fields KWOK knows)."""
        out = dict(self.image().get("env") or {})  # the image's ENV, under the container's
        for src in self.container.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                data = api_get("configmap", self.ns, src["configMapRef"]["name"]).get("data") or {}
                out.update({prefix + k: v for k, v in data.items()})
        fields = {"spec.nodeName": self.node.name, "metadata.name": self.name, "metadata.namespace": self.ns,
                  "status.podIP": self.ip, "status.hostIP": self.node.ip}
        for e in self.container.get("env") or []:
            if "value" in e:
                out[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: out.get(m.group(1), m.group(0)), e["value"])
            elif "fieldRef" in (e.get("valueFrom") or {}):
                out[e["name"]] = fields.get(e["valueFrom"]["fieldRef"]["fieldPath"], "")
        return out

    def interfaces(self):
        """The pod's network interfaces: eth0 with its IP (hostNetwork: the node's own), and lo."""
        return {"lo": "127.0.0.1", "eth0": self.ip or self.node.ip}

    def image(self):
        """What the image registry knows of the container's image (the stand-in buildctl pushes there)."""
        ref = self.container.get("image", "")
        return json.loads(read(os.path.join(state_dir(), "images", image_key(ref) + ".json"), "{}") or "{}")

    def nccl_version(self):
        return self.image().get("nccl")

    def net_plugins(self):
        """NCCL net plugins the container can load: the image's (`net_plugins` of its registry record), and the
        node's (annotation emulator.rdmakit.test/host-net-plugins: {host dir: plugin}) where a hostPath volume
        of the container mounts that directory."""
        out = list(self.image().get("net_plugins") or [])
        host = json.loads(self.node.knob("host-net-plugins", "{}") or "{}")
        mounted = {(v.get("hostPath") or {}).get("path", "").rstrip("/") for _, v in self.volumes()}
        out += [p for d, p in host.items() if d.rstrip("/") in mounted]
        return out

    # -- the pod's filesystem --------------------------------------------------------------------------
    def populate(self):
        """The pod's view: /dev/infiniband and /sys/class/infiniband hold only its devices (the latter link to
        the node's, so counters are the node's), /proc/self from its limits and caps, its volumes."""
        for d in ("tmp", "ctx", "dev/infiniband", "sys/class/infiniband", "proc/self", "dev/shm", "site"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        devs = self.devices()
        want = set()
        for i, dev in enumerate(devs):
            want.add(dev)
            link = os.path.join(self.root, "sys/class/infiniband", dev)
            if not os.path.islink(link):
                os.symlink(self.node.device_dir(dev), link)
            q = os.path.join(self.root, "dev/infiniband", f"uverbs{i}")
            if not os.path.exists(q):
                write(q, "")
        if devs and not os.path.exists(os.path.join(self.root, "dev/infiniband/rdma_cm")):
            write(os.path.join(self.root, "dev/infiniband/rdma_cm"), "")
        memlock = self.memlock()
        write(os.path.join(self.root, "proc/self/limits"), LIMITS.format(
            memlock="unlimited" if memlock is None else str(memlock)))
        caps = f"{self.cap_eff():016x}"
        write(os.path.join(self.root, "proc/self/status"),
              f"Name:\tsh\nState:\tR (running)\nCapInh:\t0000000000000000\nCapPrm:\t{caps}\n"
              f"CapEff:\t{caps}\nCapBnd:\t{caps}\n")
        # The image's Python packages, as importlib.metadata sees them.
        nccl = self.nccl_version()
        site = os.path.join(self.root, "site")
        for d in os.listdir(site):
            if d.endswith(".dist-info") and not d.startswith(f"nvidia_nccl_cu13-{nccl}."):
                import shutil
                shutil.rmtree(os.path.join(site, d))
        if nccl:
            di = os.path.join(site, f"nvidia_nccl_cu13-{nccl}.dist-info")
            os.makedirs(di, exist_ok=True)
            write(os.path.join(di, "METADATA"), f"Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: {nccl}\n")

    def mapped(self):
        """Absolute paths inside the pod -> where they are here, longest first."""
        m = {p: os.path.join(self.root, p.lstrip("/")) for p in BASE_PATHS + ("/dev/shm",)}
        for path, v in self.volumes():
            if "hostPath" in v:
                m[path] = os.path.join(self.node.dir, "host", v["hostPath"]["path"].lstrip("/"))
            elif "emptyDir" in v:
                m[path] = os.path.join(self.dir, "volumes", v.get("name", "empty"))
            elif "configMap" in v:
                m[path] = os.path.join(self.dir, "volumes", v.get("name", "cm"))
                self.project_config_map(m[path], v["configMap"])
            else:
                continue
            os.makedirs(m[path], exist_ok=True)
        return dict(sorted(m.items(), key=lambda kv: -len(kv[0])))

    def map_one(self, path):
        """One absolute path inside the pod -> where it is here (unmapped paths stay as they are)."""
        for inside, here in self.mapped().items():
            if path == inside or path.startswith(inside + "/"):
                return here + path[len(inside):]
        return path

    def map_text(self, text, volumes=False):
        """The mapped absolute paths in a script's text (the pod's mount namespace, by substitution): one
        pass, longest path first, so a replacement is never mapped again. Volume mount paths only for a
        command's own path arguments (volumes=True): in a script they are as often grep patterns matched
        against what `mount` prints."""
        m = self.mapped()
        if not volumes:
            m = {k: v for k, v in m.items() if k in BASE_PATHS}
        m = {state_dir(): state_dir(), **m}  # already mapped: stays
        m = dict(sorted(m.items(), key=lambda kv: -len(kv[0])))
        alt = "|".join(re.escape(p) for p in m)
        return re.sub(r"(?<![\w/.])(" + alt + r")(?=/|\b|$)", lambda g: m[g.group(1)], text)

    def project_config_map(self, where, ref):
        os.makedirs(where, exist_ok=True)
        try:
            cm = api_get("configmap", self.ns, ref["name"])
        except EmuError:
            return
        items = ref.get("items")
        data = cm.get("data") or {}
        for k, v in data.items():
            target = next((i["path"] for i in items if i["key"] == k), None) if items else k
            if target:
                write(os.path.join(where, target), v)


def image_key(ref):
    return re.sub(r"[^A-Za-z0-9._-]", "_", ref)


def slice_device(driver, pool, device):
    """The attributes of one device in the ResourceSlices (driver, pool)."""
    slices = cached("resourceslices.resource.k8s.io", "", "", key=f"slices-{driver}-{pool}", ttl=5)
    for s in slices.get("items", []):
        sp = s["spec"]
        if sp.get("driver") == driver and sp.get("pool", {}).get("name") == pool:
            for d in sp.get("devices") or []:
                if d["name"] == device:
                    return d.get("attributes") or {}
    return {}


def cached_pod(ns, name, uid):
    """The pod's JSON; once per uid (a pod's spec does not change; its status is read again after 2 s)."""
    # Without a uid (the API server's exec URL to the kubelet often carries none) a name is no identity: a pod
    # deleted and re-created under the same name within the TTL got the old pod's spec (found by hand: an
    # edited bundle run right after an unedited one PASSed). Read it afresh then.
    if not uid:
        obj = cached("pod", ns, name, key=f"pod-{ns}-{name}", ttl=0)
        # Kept under its uid too, for the processes this exec starts (they know the uid: Pod.current).
        store(f"pod-{obj['metadata']['uid']}", obj)
        return obj
    exec_id = os.environ.get("EMU_EXEC_ID")
    if exec_id:
        # One exec sees one pod: the copy its first process read (node-emulator pod_env), however long
        # the exec's commands take under load (a 10 s TTL was outlived at 1,000 pods: 2 GETs a pod).
        return cached("pod", ns, name, key=f"pod-{uid}-exec-{exec_id}", ttl=3600)
    return cached("pod", ns, name, key=f"pod-{uid}", ttl=10)


def cached(kind, ns, name, key, ttl=2.0):
    path = os.path.join(state_dir(), "cache", image_key(key) + ".json")
    try:
        if time.time() - os.path.getmtime(path) < ttl:
            return json.loads(read(path, ""))
    except (OSError, ValueError):
        pass
    obj = api_get(kind, ns, name)
    store(key, obj)
    return obj


def store(key, obj):
    path = os.path.join(state_dir(), "cache", image_key(key) + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    write(tmp, json.dumps(obj))
    os.replace(tmp, path)


def read(p, default):
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return default


def write(p, text):
    """Written aside and renamed into place: another exec (of this run, or of another lane of the tier) may
    read the file while it is being written."""
    os.makedirs(os.path.dirname(p), exist_ok=True)
    tmp = "%s.%d.tmp" % (p, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, p)


# A container's /proc/self/limits under containerd; {memlock} is the pod's locked-memory limit.
LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max file size             unlimited            unlimited            bytes
Max data size             unlimited            unlimited            bytes
Max stack size            8388608              unlimited            bytes
Max core file size        unlimited            unlimited            bytes
Max resident set          unlimited            unlimited            bytes
Max processes             unlimited            unlimited            processes
Max open files            1048576              1048576              files
Max locked memory         {memlock:<20} {memlock:<20} bytes
Max address space         unlimited            unlimited            bytes
Max file locks            unlimited            unlimited            locks
Max pending signals       2062113              2062113              signals
Max msgqueue size         819200               819200               bytes
Max nice priority         0                    0
Max realtime priority     0                    0
Max realtime timeout      unlimited            unlimited            us
"""
