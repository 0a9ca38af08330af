#!/usr/bin/env bash
# Benchmark suite (runs INSIDE the soft-RoCE VM, started by tests/rxe/run.sh):
# erdma-verbs' write_bw example against perftest's ib_write_bw on the same rxe device, same message size,
# same TX depth and iteration count, alternating rounds (perftest, ours, perftest, ours, ...).
# Writes $RDMAKIT_RXE_OUT/erdma-write-bw.json with every round, the mean of each tool and ratio = ours/perftest.
#
# Environment: RDMAKIT_ROOT, RDMAKIT_RXE_OUT, RDMAKIT_RXE_DEVICE (rxe0), RDMAKIT_RXE_GID_INDEX (1);
# optional ERDMA_BW_SIZE (1048576), ERDMA_BW_ITERS (100: rxe under TCG moves ~0.05 Gb/s), ERDMA_BW_TX_DEPTH
# (128, perftest's default), ERDMA_BW_ROUNDS (2).
# Exit: 0 measured (the ratio target is reported, not enforced); 1 a run failed; 0 with a SKIP line when
# the release write_bw example has not been built.
set -uo pipefail

ROOT=${RDMAKIT_ROOT:?RDMAKIT_ROOT must be set}
OUT=${RDMAKIT_RXE_OUT:?RDMAKIT_RXE_OUT must be set}
DEV=${RDMAKIT_RXE_DEVICE:-rxe0}
GID=${RDMAKIT_RXE_GID_INDEX:-1}
SIZE=${ERDMA_BW_SIZE:-1048576}
ITERS=${ERDMA_BW_ITERS:-100}
DEPTH=${ERDMA_BW_TX_DEPTH:-128}
ROUNDS=${ERDMA_BW_ROUNDS:-2}
OURS=$ROOT/target/release/examples/write_bw
JSON=$OUT/erdma-write-bw.json

if [ ! -x "$OURS" ]; then
  echo "SKIP erdma-write-bw: $OURS not built; run 'cargo build --release -p erdma-verbs --example write_bw' first"
  exit 0
fi
command -v ib_write_bw >/dev/null || { echo "FAIL erdma-write-bw: perftest's ib_write_bw is not installed"; exit 1; }
mkdir -p "$OUT"
tmp=$(mktemp -d)

# perftest: prints Gb/sec with --report_gbits; the row after the "#bytes" header holds
# size, iterations, peak, average, msg rate.
perftest_round() {
  local srv=$tmp/pt-srv.log cli=$tmp/pt-cli.log
  timeout 120 ib_write_bw -d "$DEV" -x "$GID" -s "$SIZE" -n "$ITERS" -t "$DEPTH" --report_gbits -p 18515 >"$srv" 2>&1 &
  local spid=$!
  for _ in $(seq 1 50); do grep -q 'Waiting for client' "$srv" && break; sleep 0.2; done
  timeout 120 ib_write_bw -d "$DEV" -x "$GID" -s "$SIZE" -n "$ITERS" -t "$DEPTH" --report_gbits -p 18515 127.0.0.1 >"$cli" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
    echo "perftest round failed (client $crc, server $src)" >&2
    cat "$cli" "$srv" >&2
    return 1
  fi
  awk '/#bytes/ {getline; print $4; exit}' "$cli"
}

ours_round() {
  local srv=$tmp/ours-srv.log cli=$tmp/ours-cli.json
  timeout 120 "$OURS" -d "$DEV" -x "$GID" -p 18516 --json >"$srv" 2>&1 &
  local spid=$!
  for _ in $(seq 1 50); do ss -ltn 2>/dev/null | grep -q ':18516 ' && break; sleep 0.2; done
  timeout 120 "$OURS" -d "$DEV" -x "$GID" -p 18516 -s "$SIZE" -n "$ITERS" -t "$DEPTH" --json 127.0.0.1 >"$cli" 2>"$tmp/ours-cli.err"
  local crc=$?
  wait "$spid"
  local src=$?
  if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
    echo "write_bw round failed (client $crc, server $src)" >&2
    cat "$cli" "$tmp/ours-cli.err" "$srv" >&2
    return 1
  fi
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gbps"])' "$cli"
}

pt=() ours=()
for r in $(seq 1 "$ROUNDS"); do
  p=$(perftest_round) || { rm -rf "$tmp"; exit 1; }
  o=$(ours_round) || { rm -rf "$tmp"; exit 1; }
  echo "round $r: perftest ib_write_bw ${p} Gb/s, erdma-verbs write_bw ${o} Gb/s"
  pt+=("$p") ours+=("$o")
done

python3 - "$JSON" "$DEV" "$GID" "$SIZE" "$ITERS" "$DEPTH" "${pt[*]}" "${ours[*]}" "$(uname -r)" <<'PY'
import json, statistics, sys
out, dev, gid, size, iters, depth, pt, ours, kernel = sys.argv[1:]
pt = [float(x) for x in pt.split()]
ours = [float(x) for x in ours.split()]
mp, mo = statistics.mean(pt), statistics.mean(ours)
res = {
    "benchmark": "erdma-verbs RDMA WRITE bandwidth vs perftest ib_write_bw",
    "device": dev, "gid_index": int(gid), "bytes": int(size), "iterations": int(iters), "tx_depth": int(depth),
    "environment": f"soft-RoCE (rdma_rxe) in a TCG VM, kernel {kernel}, server and client on one device",
    "unit": "Gb/s",
    "perftest_cmd": f"ib_write_bw -d {dev} -x {gid} -s {size} -n {iters} -t {depth} --report_gbits",
    "ours_cmd": f"write_bw -d {dev} -x {gid} -s {size} -n {iters} -t {depth}",
    "rounds": {"perftest_gbps": pt, "erdma_verbs_gbps": ours},
    "perftest_gbps": round(mp, 3), "erdma_verbs_gbps": round(mo, 3),
    "ratio": round(mo / mp, 3) if mp > 0 else None,
    "target_ratio": 0.95,
}
res["meets_target"] = res["ratio"] is not None and res["ratio"] >= 0.95
json.dump(res, open(out, "w"), indent=2)
print(json.dumps(res, indent=2))
PY
rc=$?
rm -rf "$tmp"
exit $rc
