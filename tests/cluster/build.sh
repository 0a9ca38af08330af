#!/usr/bin/env bash
# Builds the control-plane tier's upstream components from their pinned Go modules into target/cluster/bin:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok and kwokctl (one module, one
# `go build`, so k8s.io packages compile once), then the KubeRay operator and the MPI Operator (a second module:
# both are on k8s.io v0.34). GOMODCACHE and GOCACHE are Go's defaults (or what the caller exports); a stamp of
# the go.mod/go.sum contents and the Go version skips the build when nothing changed, so a second run compiles
# and links nothing. Times go to target/cluster/build-times.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/cluster"
bin="$out/bin"
mkdir -p "$bin"

command -v go >/dev/null || { echo "build.sh: the control-plane tier needs Go (1.26+) on PATH" >&2; exit 2; }

# `build.sh --background` (make test's first step): this build at low priority in the background, so that it
# takes the CPU the steps before the tier leave idle (package downloads, test runs, Ray start-ups); a later
# build.sh (run.sh's) waits for it and then finds everything up to date. Its output: target/cluster/build-bg.log.
bg_pid="$out/build-bg.pid"
if [[ "${1:-}" == --background ]]; then
  if [[ -f "$bg_pid" ]] && grep -qs build.sh "/proc/$(cat "$bg_pid")/cmdline"; then
    echo "build.sh: a background build is already running (pid $(cat "$bg_pid"))"
    exit 0
  fi
  nohup nice -n 10 "$0" >"$out/build-bg.log" 2>&1 </dev/null &
  echo $! >"$bg_pid"
  echo "build.sh: building the tier's Go components in the background (pid $!, log target/cluster/build-bg.log)"
  exit 0
fi
if [[ -f "$bg_pid" && "$(cat "$bg_pid")" != "$$" ]]; then
  pid="$(cat "$bg_pid")"
  t_wait=$SECONDS
  if grep -qs build.sh "/proc/$pid/cmdline"; then
    echo "build.sh: waiting for the background build (pid $pid, log target/cluster/build-bg.log)"
    while kill -0 "$pid" 2>/dev/null; do sleep 2; done
  fi
  echo "waited for the background build: $((SECONDS - t_wait)) s" | tee "$out/build-wait.txt"
  sed 's/^/build.sh: background: /' "$out/build-times.txt" 2>/dev/null || true
  keep_times=1
  rm -f "$bg_pid"
fi

stamp_of() { (go version; cat "$0"; [[ $1 == kubernetes ]] && cat "$here"/kwok/patch/*; cat "$here/components/$1/go.mod" "$here/components/$1/go.sum") | sha256sum | cut -d' ' -f1; }

# KWOK v0.8.0 never closes a pod exec's stdin pipe when the client's stdin ends (pkg/utils/exec/exec.go copies
# into cmd.StdinPipe() and stops), so `kubectl cp` and every exec that reads stdin to EOF hang. The fix is one
# line, applied at build time to a copy of the downloaded module under target/ (the module cache stays as
# downloaded, and go refuses overlays there); a generated go.mod (-modfile) points sigs.k8s.io/kwok at it.
# No upstream source is committed here.
kwok_patched_modfile() {
  local mod patched="$out/kwok-patched" file
  mod="$(cd "$here/components/kubernetes" && go mod download -json sigs.k8s.io/kwok | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  rm -rf "$patched" && cp -r "$mod" "$patched" && chmod -R u+w "$patched"
  file="$patched/pkg/utils/exec/exec.go"
  sed -i 's|^\(\t*\)_, _ = io.Copy(inPipe, opt.In)$|\1_, _ = io.Copy(inPipe, opt.In)\n\1_ = inPipe.Close() // rdmakit: deliver EOF to the command|' "$file"
  grep -q 'rdmakit: deliver EOF' "$file" || { echo "build.sh: the KWOK stdin fix no longer applies to $file" >&2; exit 1; }
  # The pod's identity in every exec's environment, real exit codes, per-container log files
  # (kwok/patch/rdmakit_pod.go says why); each hook is one call in KWOK's own code.
  cp "$here/kwok/patch/rdmakit_pod.go" "$patched/pkg/kwok/server/"
  python3 "$here/kwok/patch/apply.py" "$patched"
  cp "$here/components/kubernetes/go.mod" "$out/kubernetes.go.mod"
  cp "$here/components/kubernetes/go.sum" "$out/kubernetes.go.sum"
  echo "replace sigs.k8s.io/kwok => $patched" >>"$out/kubernetes.go.mod"
}

# build MODULE BINARIES... PACKAGES...: one `go build` per module, skipped when its stamp matches.
build() {
  local module="$1" bins="$2"; shift 2
  local stamp="$out/.stamp-$module" want have=""
  want="$(stamp_of "$module")"
  [[ -f "$stamp" ]] && have="$(cat "$stamp")"
  local missing=0
  for b in $bins; do [[ -x "$bin/$b" ]] || missing=1; done
  if [[ "$want" == "$have" && $missing == 0 ]]; then
    echo "build.sh: $module: up to date ($bins)"
    echo "$module: up to date (0 s)" >>"$out/build-times.txt"
    return
  fi
  echo "build.sh: $module: go build $* (first build takes minutes)"
  local t0=$SECONDS
  local modfile=()
  if [[ "$module" == kubernetes ]]; then kwok_patched_modfile; modfile=(-modfile "$out/kubernetes.go.mod"); fi
  (cd "$here/components/$module" && go build -trimpath -ldflags='-s -w' "${modfile[@]}" -o "$bin/" "$@")
  echo "$want" >"$stamp"
  echo "$module: built in $((SECONDS - t0)) s" | tee -a "$out/build-times.txt"
}

# The background build's times stay (this run only finds its binaries up to date).
[[ "${keep_times:-0}" == 1 ]] || : >"$out/build-times.txt"
build kubernetes "kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl ./etcd \
  sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
build operators "mpi-operator ray-operator" \
  github.com/kubeflow/mpi-operator/cmd/mpi-operator github.com/ray-project/kuberay/ray-operator

# Go's build cache holds ~4.5 GB of compiled k8s.io packages that nothing reads once the binaries exist; a
# one-shot run (CI's clean clone sets RDMAKIT_PRUNE_GOCACHE=1) gives the disk back. The module cache stays:
# a test diffs the vendored CRDs against it.
if [[ "${RDMAKIT_PRUNE_GOCACHE:-0}" == 1 ]]; then
  echo "build.sh: RDMAKIT_PRUNE_GOCACHE=1: go clean -cache ($(du -sh "$(go env GOCACHE)" 2>/dev/null | cut -f1))"
  go clean -cache
fi
