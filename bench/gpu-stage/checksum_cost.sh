#!/usr/bin/env bash
# What the TCP transport's per-transfer checksum (TcpOptions::checksum, issue 26) costs at 512 MiB on one
# GPU machine: `stage_bench tcp` without and with `--checksum`, interleaved ROUNDS times (so drift hits both
# alike), each run two processes over loopback, SRC GPU -> host -> TCP -> host -> DST GPU, verified.
# Usage: [ROUNDS=5 CONNS="1 8" SRC=0 DST=0 ITERS=10 SLOTS=16] bench/gpu-stage/checksum_cost.sh BIN_DIR OUT_DIR
#   (SLOTS=16: the ring `stage_bench all`'s TCP sweep uses for 8 connections, 4 MiB chunks)
#   BIN_DIR holds stage_bench: cargo build --release -p gpu-stage --examples (BIN_DIR=target/release/examples)
# Writes OUT_DIR/checksum-cost.jsonl (one stage_bench --json array per run) and prints the median GiB/s of
# each setting and the ratio; the README's rule: on by default only where it costs < 3 %.
set -euo pipefail
BIN=${1:?BIN_DIR}
OUT=${2:?OUT_DIR}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-5}
CONNS=${CONNS:-1 8}
SRC=${SRC:-0}
DST=${DST:-0}
ITERS=${ITERS:-10}
SLOTS=${SLOTS:-16}
log="$OUT/checksum-cost.jsonl"
: >"$log"
for conns in $CONNS; do
  for round in $(seq 1 "$ROUNDS"); do
    for mode in off on; do
      extra=()
      [ "$mode" = on ] && extra=(--checksum)
      line=$("$BIN/stage_bench" tcp --size 512MiB --connections "$conns" --src "$SRC" --dst "$DST" --slots "$SLOTS" \
        --iters "$ITERS" --warmup 2 --json "${extra[@]}" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))')
      printf '{"connections":%s,"checksum":"%s","round":%s,"result":%s}\n' "$conns" "$mode" "$round" "$line" >>"$log"
    done
  done
done
python3 - "$log" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for conns in sorted({r["connections"] for r in rows}):
    med = {}
    for mode in ("off", "on"):
        xs = [x["gib_s_median"] for r in rows if r["connections"] == conns and r["checksum"] == mode
              for x in r["result"]]
        ok = all(x["verified"] for r in rows if r["connections"] == conns and r["checksum"] == mode
                 for x in r["result"])
        med[mode] = statistics.median(xs)
        print(f"connections={conns} checksum={mode}: median {med[mode]:.2f} GiB/s over {len(xs)} runs, verified={ok}")
    print(f"connections={conns}: with/without = {med['on'] / med['off']:.3f} (cost {100 * (1 - med['on'] / med['off']):.1f} %)")
PY
