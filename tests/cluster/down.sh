#!/usr/bin/env bash
# Stops everything tests/cluster/up.sh started (operators, kwok controller, control plane, etcd) and removes
# the cluster's state, so nothing is left running or half-there. Safe to run when nothing is up.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/cluster"
name="${RDMAKIT_CLUSTER_NAME:-rdmakit}"
export KWOK_WORKDIR="$out/kwok"

for op in pod-runner istio-sidecar-injector ray-operator mpi-operator; do
  pidf="$out/$op.pid"
  if [[ -f "$pidf" ]]; then
    pid="$(cat "$pidf")"
    kill "$pid" 2>/dev/null && for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    rm -f "$pidf"
  fi
done
if [[ -x "$out/bin/kwokctl" && -d "$KWOK_WORKDIR/clusters/$name" ]]; then
  "$out/bin/kwokctl" delete cluster --name "$name" >/dev/null 2>&1 || echo "down.sh: kwokctl delete cluster failed" >&2
fi
# The emulated pods' processes (a rank left running in a pod): whatever still runs the node emulator or a
# program it started from this cluster's state.
if [[ -d "$out/emu-state" ]]; then
  for p in /proc/[0-9]*; do
    if tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "RDMAKIT_EMU_STATE=$out/emu-state"; then
      kill "${p#/proc/}" 2>/dev/null
    fi
  done
fi
# Whatever kwokctl did not stop (a crashed start): processes running our binaries.
for b in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  pkill -f "^$out/kwok/clusters/$name/bin/$b( |$)" 2>/dev/null
  pkill -f "^$out/bin/$b( |$)" 2>/dev/null
done
rm -rf "$KWOK_WORKDIR/clusters/$name" "$out/emu-state" "$out/istio-sidecar-injector.port" "$out/kubeconfig" "$out/kubeconfig.tmp" "$out/emu-state.path"
echo "down.sh: cluster $name stopped"
