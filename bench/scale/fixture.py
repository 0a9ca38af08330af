#!/usr/bin/env python3
"""N simulated eRDMA GPU nodes for the scale benchmark (bench/scale/run.py) on the control-plane tier, shaped like
seed 000's (tests/cluster/fixtures/nodes.yaml), pool label rdmakit.test/pool=scale, with planted faults:

  every 97th node   no aliyun/erdma capacity       (preflight: not eligible, named)
  every 89th node   label rdmakit.test/not-ready   (KWOK never readies it: NotReady, not counted)
  every 83rd node   containerd memlock 64 KiB      (preflight --pods: the pod's memlock fails, named)

and one probe pod per node (a DaemonSet the controller-manager expands, requesting aliyun/erdma and IPC_LOCK as
the workload's pods do). Usage: fixture.py N NAMESPACE > scale.yaml; fixture.py --expected N prints the
planted faults among N nodes as JSON.
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
        json.dump(expected(int(sys.argv[2])), sys.stdout)
        sys.exit(0)
    n, ns = int(sys.argv[1]), sys.argv[2]
    sys.stdout.write("".join(node(i) for i in range(n)))
    sys.stdout.write(daemonset(ns))
