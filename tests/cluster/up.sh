#!/usr/bin/env bash
# Starts the control-plane tier on loopback and writes target/cluster/kubeconfig:
#   kwokctl (binary runtime, our binaries) -> etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
#   the kwok controller; then the operators' own CRDs, the KubeRay operator and the MPI Operator as host
#   processes; then the seeds' simulated nodes, DRANET's DaemonSet and ResourceSlices.
# The kwok controller runs with tests/cluster/emulator/bin first on PATH: pod exec lands in the node emulator.
# tests/cluster/down.sh stops all of it. Start-up time goes to target/cluster/up-time.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/cluster"
bin="$out/bin"
name="${RDMAKIT_CLUSTER_NAME:-rdmakit}"
export KWOK_WORKDIR="$out/kwok"
state="$out/emu-state"
t0=$SECONDS

for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl mpi-operator ray-operator; do
  [[ -x "$bin/$b" ]] || { echo "up.sh: $bin/$b is missing: run tests/cluster/build.sh first" >&2; exit 2; }
done
if [[ -f "$out/kubeconfig" ]]; then
  echo "up.sh: a cluster is already up ($out/kubeconfig); run tests/cluster/down.sh first" >&2
  exit 2
fi

# A failed start leaves nothing running.
trap 'rc=$?; if [[ $rc != 0 && -z "${RDMAKIT_CLUSTER_KEEP_ON_FAILURE:-}" ]]; then echo "up.sh: start-up failed (exit $rc); stopping what started" >&2; "$here/down.sh" >&2 || true; fi' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port="$(free_port)"
# The interpreter itself, not a pyenv shim (a shell script that would find the emulated `bash` on PATH).
python="$(python3 -c 'import sys; print(sys.executable)')"
rm -rf "$state" && mkdir -p "$state" "$out/logs"

# RDMAKIT_TIER_AUDIT=1 (bench/scale): the API server writes an audit log, logs/audit.log, of the reads and
# execs on the objects rdmakit works with, so requests can be told apart by user agent (rdmakit, kubectl in
# the emulator, the controllers). Status writes, leases and events (the simulated kubelets' heartbeats) are
# left out: at 1,000 nodes they would be most of the log.
audit_args=""
if [[ -n "${RDMAKIT_TIER_AUDIT:-}" ]]; then
  cat >"$out/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  resources:
  - group: ""
    resources: [nodes/status, pods/status, events, pods/binding]
  - group: coordination.k8s.io
  - group: events.k8s.io
- level: Metadata
  resources:
  - group: ""
    resources: [nodes, pods, pods/exec, namespaces]
  - group: resource.k8s.io
  - group: apps
    resources: [daemonsets]
- level: None
EOF
  audit_args="
  - key: audit-policy-file
    value: $out/audit-policy.yaml
  - key: audit-log-path
    value: $out/logs/audit.log
  - key: audit-log-maxsize
    value: \"2000\""
fi

config="$out/kwokctl.yaml"
cat >"$config" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  kubeVersion: v1.36.3
  kubeApiserverPort: $port
  bindAddress: 127.0.0.1
  kubeAuthorization: true
  kubeAdmission: true
  kubeApiserverBinary: $bin/kube-apiserver
  kubeControllerManagerBinary: $bin/kube-controller-manager
  kubeSchedulerBinary: $bin/kube-scheduler
  kubectlBinary: $bin/kubectl
  etcdBinary: $bin/etcd
  kwokControllerBinary: $bin/kwok
  enableCRDs: [ClusterExec, ClusterLogs]
  # KWOK renews each node's lease every quarter of this (10 s), well inside the controller-manager's 40 s
  # grace period: nodes do not flap NotReady under load.
  nodeLeaseDurationSeconds: 40
componentsPatches:
- name: kube-apiserver
  extraArgs:
  # Every simulated node's kubelet is the kwok controller on 127.0.0.1, the nodes' ExternalIP; their
  # InternalIPs (127.0.1.N, fixtures/nodes.yaml) are each node's own address, which hostNetwork pods get.
  # Node names such as cn-beijing.10.0.5.75 resolve nowhere.
  - key: kubelet-preferred-address-types
    value: ExternalIP,InternalIP$audit_args
# Under load (1,000 simulated nodes on 2 cores, bench/scale) a lease renewal can miss its 5 s: the
# controller-manager then exits ("leaderelection lost") and nothing restarts it; namespaces stop
# terminating and DaemonSets stop expanding. One instance of each: no election.
- name: kube-controller-manager
  extraArgs:
  - key: leader-elect
    value: "false"
- name: kube-scheduler
  extraArgs:
  - key: leader-elect
    value: "false"
- name: kwok-controller
  extraArgs:
  # kwokctl leaves --node-ip empty in the binary runtime: nodes then get no InternalIP, and the API server
  # has no address to reach the kwok "kubelet" for exec and logs.
  - key: node-ip
    value: 127.0.0.1
  extraEnvs:
  - name: PATH
    value: $here/emulator/bin:$PATH
  - name: RDMAKIT_EMU_STATE
    value: $state
  - name: RDMAKIT_EMU_PYTHON
    value: $python
---
$(cat "$here/kwok/stages.yaml")
EOF

echo "up.sh: starting the control plane (kwokctl, binary runtime) on 127.0.0.1:$port"
"$bin/kwokctl" create cluster --name "$name" --config "$config" --timeout 5m --wait 5m >"$out/logs/kwokctl.log" 2>&1 ||
  { tail -40 "$out/logs/kwokctl.log" >&2; exit 1; }
"$bin/kwokctl" get kubeconfig --name "$name" >"$out/kubeconfig.tmp"
export KUBECONFIG="$out/kubeconfig.tmp"
k() { "$bin/kubectl" "$@"; }

echo "up.sh: installing the operators' CRDs (KubeRay v1.5.1, MPI Operator v0.7.0)"
gomod="$(cd "$here/components/operators" && go env GOMODCACHE)"
kuberay="$gomod/github.com/ray-project/kuberay/ray-operator@v1.5.1"
mpiop="$gomod/github.com/kubeflow/mpi-operator@v0.7.0"
k apply --server-side -f "$kuberay/config/crd/bases/" >/dev/null
k apply --server-side -f "$mpiop/manifests/base/kubeflow.org_mpijobs.yaml" >/dev/null
# Not `kubectl wait --for condition=Established` at once: a CRD created a moment ago has no conditions yet,
# and kubectl fails on that instead of waiting.
for crd in rayclusters.ray.io rayjobs.ray.io rayservices.ray.io mpijobs.kubeflow.org; do
  for _ in $(seq 100); do
    [[ "$(k get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]] && break
    sleep 0.2
  done
  k wait --for condition=Established --timeout=30s "crd/$crd" >/dev/null
done
k create namespace mpi-operator >/dev/null

echo "up.sh: starting the KubeRay operator and the MPI Operator"
"$bin/ray-operator" --kubeconfig "$KUBECONFIG" --metrics-addr 0 --health-probe-bind-address 0 \
  --enable-leader-election=false >"$out/logs/ray-operator.log" 2>&1 &
echo $! >"$out/ray-operator.pid"
"$bin/mpi-operator" --kubeConfig "$KUBECONFIG" --monitoring-port 0 --lock-namespace mpi-operator \
  >"$out/logs/mpi-operator.log" 2>&1 &
echo $! >"$out/mpi-operator.pid"

# Istio's sidecar injection, as a real mutating webhook the API server calls (webhooks/): pods created in a
# namespace labelled istio-injection=enabled get an istio-proxy container. It serves kwokctl's admin
# certificate, whose names include 127.0.0.1, signed by the cluster's CA.
pki="$KWOK_WORKDIR/clusters/$name/pki"
rm -f "$out/istio-sidecar-injector.port"
"$python" "$here/webhooks/istio-sidecar-injector" "$pki/admin.crt" "$pki/admin.key" "$out/istio-sidecar-injector.port" \
  >"$out/logs/istio-sidecar-injector.log" 2>&1 &
echo $! >"$out/istio-sidecar-injector.pid"
for _ in $(seq 50); do [[ -s "$out/istio-sidecar-injector.port" ]] && break; sleep 0.1; done
[[ -s "$out/istio-sidecar-injector.port" ]] ||
  { echo "up.sh: the sidecar injector did not start:" >&2; tail -20 "$out/logs/istio-sidecar-injector.log" >&2; exit 1; }
k apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: istio-sidecar-injector
webhooks:
- name: sidecar-injector.istio.io
  clientConfig:
    url: https://127.0.0.1:$(cat "$out/istio-sidecar-injector.port")/inject
    caBundle: $(base64 -w0 "$pki/ca.crt")
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  namespaceSelector:
    matchLabels: {istio-injection: enabled}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
  reinvocationPolicy: Never
YAML

echo "up.sh: creating the simulated nodes, DRANET and its ResourceSlices"
k apply -f "$here/fixtures/nodes.yaml" >/dev/null
k apply -f "$here/fixtures/dranet.yaml" >/dev/null
k apply -f "$here/fixtures/storage.yaml" >/dev/null
# Every pod exec, in every namespace, goes to the node emulator, which learns the pod from the patched KWOK;
# container logs come from the emulator's state, one file per container (logs/NS/POD/CONTAINER.log, written
# by emulator/pod-runner for the pods whose command it runs).
k apply -f - >/dev/null <<YAML
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: node-emulator
spec:
  execs:
  - local: {}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: node-emulator
spec:
  logs:
  - logsFile: $state/logs/{namespace}/{pod}/{container}.log
YAML
k wait --for condition=Ready --timeout=30s node -l type=kwok >/dev/null
k -n kube-system rollout status daemonset/dranet --timeout=120s >/dev/null

# The operators are up when they have acted once: KubeRay's and the MPI Operator's leases or logs.
for op in ray-operator mpi-operator; do
  kill -0 "$(cat "$out/$op.pid")" 2>/dev/null || { echo "up.sh: $op exited:" >&2; tail -20 "$out/logs/$op.log" >&2; exit 1; }
done

mv "$out/kubeconfig.tmp" "$out/kubeconfig"
# MPIJob launchers run their command (emulator/pod-runner): started with the final kubeconfig.
RDMAKIT_EMU_STATE="$state" "$python" "$here/emulator/pod-runner" "$bin/kubectl" "$out/kubeconfig" "$state" \
  >"$out/logs/pod-runner.log" 2>&1 &
echo $! >"$out/pod-runner.pid"
echo "$state" >"$out/emu-state.path"
echo "start-up: $((SECONDS - t0)) s" | tee "$out/up-time.txt"
echo "up.sh: cluster $name is up: export KUBECONFIG=$out/kubeconfig"
trap - EXIT
