#!/usr/bin/env bash
# Cost of `rdmakit validate --strict` and `rdmakit lint` on a 50 MB multi-document YAML file (issue 25's
# target: each <= 2 s and <= 300 MB peak RSS). Generates the input from rendered bundles (every document
# renamed so none repeats), runs the release binary under /usr/bin/time -v ($RUNS times each, default 3,
# with the 1-minute load average before each run: the machine may be shared), and writes the figures to
# bench/results/validate-cost.json (or $1). Usage: bench/validate-cost/run.sh [out.json] [MB]
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$repo/bench/results/validate-cost.json}"
mb="${2:-50}"
runs="${RUNS:-3}"
bin="${RDMAKIT:-$repo/target/release/rdmakit}"
[ -x "$bin" ] || (cd "$repo" && cargo build --release -p rdmakit --bin rdmakit)
work="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# One copy of several profiles' manifests (RayCluster, MPIJob, DRA objects, pods, ConfigMaps).
# A system a profile does not render (DRA without a DeviceClass) is skipped.
for p in aliyun-erdma mellanox-ib volcengine-ib; do
  for s in raycluster mpijob dra rdma-test-pod nccl-check buildkit; do
    # The MPIJob has no default image (issue 25): name one, as a user must.
    set_image=()
    [ "$s" = mpijob ] && set_image=(--set nccl_tests_image=registry.example.com/nccl-tests:2.19)
    if "$bin" render "$s" --profile "$p" "${set_image[@]}" --stdout >"$work/one.yaml" 2>/dev/null; then
      cat "$work/one.yaml" >>"$work/seed.yaml"
      printf -- '---\n' >>"$work/seed.yaml"
    fi
  done
done
python3 - "$work/seed.yaml" "$work/big.yaml" "$mb" <<'PY'
import re, sys
seed = open(sys.argv[1]).read()
target = int(sys.argv[3]) * 1000 * 1000
with open(sys.argv[2], "w") as f:
    n = written = 0
    while written < target:
        # Unique names, so the documents are 50 MB of distinct objects, not one object repeated.
        chunk = re.sub(r"(?m)^(  name: )([a-z0-9-]+)$", lambda m: f"{m.group(1)}{m.group(2)}-{n}", seed)
        f.write(chunk)
        written += len(chunk)
        n += 1
PY
bytes=$(stat -c %s "$work/big.yaml")
docs=$(grep -c '^kind: ' "$work/big.yaml" || true)

measure() { # name, run number, then the command
  local name="$1" run="$2"; shift 2
  local t0 t1 rc=0 load
  load=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$work/$name.time" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  t1=$(date +%s.%N)
  local rss wall user sys
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/$name.time")
  user=$(awk -F': ' '/User time/ {print $2}' "$work/$name.time")
  sys=$(awk -F': ' '/System time/ {print $2}' "$work/$name.time")
  wall=$(python3 -c "print(round($t1 - $t0, 3))")
  # The last line that says something (lint's table ends with a border).
  grep '[[:alnum:]]' "$work/$name.out" | tail -1 >"$work/$name.summary" || true
  printf '{"command": "%s", "run": %d, "load_avg_1m": %s, "exit": %d, "wall_s": %s, "user_s": %s, "sys_s": %s, "max_rss_kib": %s, "last_line": %s}\n' \
    "$name" "$run" "$load" "$rc" "$wall" "$user" "$sys" "$rss" "$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()[:300]))' "$work/$name.summary")"
}
: >"$work/runs.jsonl"
for i in $(seq 1 "$runs"); do
  measure validate "$i" "$bin" validate --strict "$work/big.yaml" >>"$work/runs.jsonl"
  measure lint "$i" "$bin" lint "$work/big.yaml" >>"$work/runs.jsonl"
done
commit=$(cd "$repo" && git rev-parse --short HEAD)
dirty=$(cd "$repo" && git status --porcelain --untracked-files=no | grep -q . && echo true || echo false)
mkdir -p "$(dirname "$out")"
python3 - "$out" "$commit" "$bytes" "$docs" "$work/runs.jsonl" "$(nproc)" "$dirty" <<'PY'
import json, statistics, sys
out, commit, size, docs, runs_file, cpus, dirty = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_file) if l.strip()]
median = {
    c: {
        "wall_s": statistics.median(r["wall_s"] for r in runs if r["command"] == c),
        "max_rss_kib": max(r["max_rss_kib"] for r in runs if r["command"] == c),
    }
    for c in ("validate", "lint")
}
doc = {
    "what": "rdmakit validate --strict and rdmakit lint on one generated multi-document YAML file",
    "commit": commit,
    "worktree_dirty": dirty == "true",
    "input_bytes": int(size),
    "input_documents": int(docs),
    "cpus": int(cpus),
    "target": {"wall_s": 2.0, "max_rss_kib": 300 * 1024},
    "runs": runs,
    "median_wall_max_rss": median,
    "within_target": all(r["wall_s"] <= 2.0 and r["max_rss_kib"] <= 300 * 1024 for r in runs),
}
json.dump(doc, open(out, "w"), indent=2)
open(out, "a").write("\n")
print(json.dumps(doc, indent=2))
PY
