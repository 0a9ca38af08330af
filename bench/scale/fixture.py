#!/usr/bin/env python3
"""N simulated eRDMA GPU nodes for the scale benchmark (bench/scale/run.py) on the control-plane tier, shaped like
seed 000's (tests/cluster/fixtures/nodes.yaml), pool label rdmakit.test/pool=scale, with planted faults:

  every 97th node   no aliyun/erdma capacity       (preflight: not eligible, named)
  every 89th node   label rdmakit.test/not-ready   (KWOK never readies it: NotReady, not counted)
  every 83rd node   containerd memlock 64 KiB      (preflight --pods: the pod's memlock fails, named)

and one probe pod per node (a DaemonSet the controller-manager expands, requesting aliyun/erdma and IPC_LOCK as
the workload's pods do). Beside them, in the same pool, N/4 nodes (at least 10) of each hyperscaler shape, for
node-level preflight by its profile (no pods):

  dra      GKE A4 (gke-rdma-dranet): 8 GPUs, a DRANET ResourceSlice of 8 RDMA NICs (dra.net/rdma) and eth0;
           the 8th of every 47 nodes has its slice published without the dra.net/rdma attribute
  efa      AWS p5.48xlarge (aws-efa-eks): 8 GPUs, vpc.amazonaws.com/efa 32; the 8th of every 47 without it
  shared   k8s-rdma-shared-dev-plugin (rdma-shared-device): nvidia.com/gpu-h800 8, rdma/rdma_shared_device_a
           and _b; the 8th of every 47 without them
  and the 14th of every 43 nodes of each shape labelled rdmakit.test/not-ready (NotReady).

Usage: fixture.py N NAMESPACE > scale.yaml; fixture.py --expected N prints the planted faults among N nodes
as JSON (the shapes' under "shapes"); fixture.py --nodes N prints only the N eRDMA nodes (the workflows at scale:
tests/tests/cluster/scale.rs runs the 64-worker MPIJob on them).
"""
import sys


def faults(i):
    return {
        "no_rdma": i % 97 == 96,
        "not_ready": i % 89 == 88,
        "memlock": i % 83 == 82,
    }


def node(i):
    f = faults(i)
    name = f"scale-erdma-{i:05d}"
    ip = f"127.{2 + i // 65536}.{(i // 256) % 256}.{i % 256}"
    memlock = "65536" if f["memlock"] else "infinity"
    rdma = "" if f["no_rdma"] else '    aliyun/erdma: "400"\n'
    not_ready = '    rdmakit.test/not-ready: "true"\n' if f["not_ready"] else ""
    res = f"""    cpu: "256"
    memory: "1000Gi"
    pods: "110"
    ephemeral-storage: "1000Gi"
    nvidia.com/gpu: "8"
{rdma}"""
    return f"""---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
    emulator.rdmakit.test/containerd-memlock: '{memlock}'
    emulator.rdmakit.test/rdma-kind: 'erdma'
    emulator.rdmakit.test/rdma-devices: 'erdma_0'
  labels:
    kubernetes.io/hostname: "{name}"
    kubernetes.io/os: "linux"
    kubernetes.io/arch: "amd64"
    type: "kwok"
    aliyun.accelerator/nvidia_name: "NVIDIA-RTX-PRO-5000-72GB-Blackwell"
    node.kubernetes.io/instance-type: "ecs.ebmgn9gc.64xlarge"
    rdmakit.test/pool: "scale"
{not_ready}status:
  addresses:
  - {{type: InternalIP, address: {ip}}}
  - {{type: ExternalIP, address: 127.0.0.1}}
  - {{type: Hostname, address: {name}}}
  allocatable:
{res}  capacity:
{res}  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: v1.36.3
    kernelVersion: 5.10.134-18.al8.x86_64
    osImage: Alibaba Cloud Linux 3
    containerRuntimeVersion: containerd://1.7.27
"""


def daemonset(ns):
    return f"""---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: scale-probe, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: scale-probe}}}}
  template:
    metadata: {{labels: {{app: scale-probe}}}}
    spec:
      nodeSelector: {{rdmakit.test/pool: scale}}
      tolerations: [{{operator: Exists}}]
      containers:
      - name: probe
        image: registry.example.com/rdma-probe:1
        securityContext: {{capabilities: {{add: [IPC_LOCK]}}}}
        resources: {{limits: {{aliyun/erdma: "1"}}}}
"""


# shape -> (the profile that judges it, its instance type)
SHAPES = {
    "dra": ("gke-rdma-dranet", "a4-highgpu-8g"),
    "efa": ("aws-efa-eks", "p5.48xlarge"),
    "shared": ("rdma-shared-device", "h800-8gpu"),
}


def shape_count(n):
    return max(n // 4, 10)


def shape_faults(i):
    return {"no_rdma": i % 47 == 7, "not_ready": i % 43 == 13}


def shape_node(shape, i):
    """One node of a hyperscaler shape (and, for dra, the ResourceSlice DRANET publishes on it)."""
    f = shape_faults(i)
    name = f"scale-{shape}-{i:05d}"
    ip = f"127.{10 + list(SHAPES).index(shape)}.{(i // 256) % 256}.{i % 256}"
    _, instance = SHAPES[shape]
    gpu = "nvidia.com/gpu-h800" if shape == "shared" else "nvidia.com/gpu"
    rdma = ""
    if shape == "efa" and not f["no_rdma"]:
        rdma = '    vpc.amazonaws.com/efa: "32"\n'
    if shape == "shared" and not f["no_rdma"]:
        rdma = '    rdma/rdma_shared_device_a: "1000"\n    rdma/rdma_shared_device_b: "1000"\n'
    not_ready = '    rdmakit.test/not-ready: "true"\n' if f["not_ready"] else ""
    res = f"""    cpu: "224"
    memory: "2000Gi"
    pods: "110"
    ephemeral-storage: "1000Gi"
    {gpu}: "8"
{rdma}"""
    out = f"""---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: "{name}"
    kubernetes.io/os: "linux"
    kubernetes.io/arch: "amd64"
    type: "kwok"
    node.kubernetes.io/instance-type: "{instance}"
    rdmakit.test/pool: "scale"
    rdmakit.test/shape: "{shape}"
{not_ready}status:
  addresses:
  - {{type: InternalIP, address: {ip}}}
  - {{type: Hostname, address: {name}}}
  allocatable:
{res}  capacity:
{res}  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: v1.36.3
    containerRuntimeVersion: containerd://1.7.27
"""
    if shape == "dra":
        out += resource_slice(name, rdma_attribute=not f["no_rdma"])
    return out


def resource_slice(node_name, rdma_attribute):
    """DRANET's slice on a GKE A4 node: gpu0rdma0..gpu7rdma0 and the gVNIC eth0 (as tests/cluster/fixtures/
    gke-a4-nodes.yaml); without `rdma_attribute` the NICs carry no dra.net/rdma at all."""
    devices = []
    for k in range(8):
        rdma = "        dra.net/rdma:\n          bool: true\n" if rdma_attribute else ""
        devices.append(f"""  - name: gpu{k}rdma0
    attributes:
        dra.net/pciAddress:
          string: "0000:{0x91 + k:02x}:00.0"
{rdma}        dra.net/rdmaDevice:
          string: "mlx5_{k}"
        dra.net/ifName:
          string: "gpu{k}rdma0"
""")
    devices.append("""  - name: eth0
    attributes:
        dra.net/rdma:
          bool: false
        dra.net/ifName:
          string: "eth0"
""")
    return f"""---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: {node_name}-dra.net
  labels:
    rdmakit.test/pool: "scale"
spec:
  driver: dra.net
  nodeName: {node_name}
  pool:
    name: {node_name}
    generation: 1
    resourceSliceCount: 1
  devices:
{"".join(devices)}"""


def shapes(n):
    """Every hyperscaler-shape node (and slice) for a pool of n eRDMA nodes."""
    return "".join(shape_node(s, i) for s in SHAPES for i in range(shape_count(n)))


def expected_shapes(n):
    out = {}
    for shape, (profile, _) in SHAPES.items():
        e = {"profile": profile, "no_rdma": [], "not_ready": [], "healthy": []}
        for i in range(shape_count(n)):
            f = shape_faults(i)
            name = f"scale-{shape}-{i:05d}"
            for k, v in f.items():
                if v:
                    e[k].append(name)
            if not any(f.values()):
                e["healthy"].append(name)
        out[shape] = e
    return out


def expected(n):
    """What preflight must name: the planted faults among the first n nodes."""
    out = {"no_rdma": [], "not_ready": [], "memlock": []}
    for i in range(n):
        for k, v in faults(i).items():
            if v:
                out[k].append(f"scale-erdma-{i:05d}")
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--expected":
        # For the tier test (tests/tests/cluster/scale.rs): the planted faults, one source of truth.
        import json
        n = int(sys.argv[2])
        json.dump(dict(expected(n), shapes=expected_shapes(n)), sys.stdout)
        sys.exit(0)
    if sys.argv[1] == "--nodes":
        sys.stdout.write("".join(node(i) for i in range(int(sys.argv[2]))))
        sys.exit(0)
    n, ns = int(sys.argv[1]), sys.argv[2]
    sys.stdout.write("".join(node(i) for i in range(n)))
    sys.stdout.write(shapes(n))
    sys.stdout.write(daemonset(ns))
