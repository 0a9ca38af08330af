#!/bin/bash
# probe-live: `rdmakit probe` and `rdmakit doctor` against the live soft-RoCE device inside the VM.
# The library side (facts, counters moving after ib_write_bw) is crates/probe/tests/rxe_live.rs; this
# checks the CLI front end end to end. Outputs go to $RDMAKIT_RXE_OUT/probe/.
set -euo pipefail
BIN=$RDMAKIT_ROOT/target/debug/rdmakit
DEV=${RDMAKIT_RXE_DEVICE:-rxe0}
OUT=$RDMAKIT_RXE_OUT/probe
mkdir -p "$OUT"
if [ ! -x "$BIN" ]; then
  echo "FAIL: $BIN is not built (tests/rxe/run.sh builds it with the workspace tests)"
  exit 1
fi

# rdmakit probe: exit 0 (no fail verdict) on a healthy rxe VM; JSON names the device.
rc=0
NCCL_IB_HCA=$DEV "$BIN" probe --json >"$OUT/probe.json" 2>"$OUT/probe.stderr" || rc=$?
echo "rdmakit probe --json: exit $rc"
python3 - "$OUT/probe.json" "$DEV" <<'PY'
import json, sys
facts = json.load(open(sys.argv[1]))
dev = sys.argv[2]
devs = {d["name"]: d for d in facts["rdma_devices"]}
assert dev in devs, f"{dev} not in {list(devs)}"
assert devs[dev]["kind"] == "rxe", devs[dev]["kind"]
port = devs[dev]["ports"][0]
assert "ACTIVE" in port["state"], port["state"]
checks = {(c["id"], c["subject"]): c["verdict"] for c in facts["checks"]}
assert checks.get(("ib-hca", "NCCL_IB_HCA")) == "ok", checks
fails = [c for c in facts["checks"] if c["verdict"] == "fail"]
assert not fails, fails
print(f"probe: {dev} {port['state']} ({port.get('link_layer')}), {len(facts['checks'])} checks, no fail")
PY
[ "$rc" -eq 0 ] || { echo "FAIL: rdmakit probe exited $rc"; cat "$OUT/probe.stderr"; exit 1; }
NCCL_IB_HCA=$DEV "$BIN" probe >"$OUT/probe.txt" 2>&1 || true
grep -q "$DEV" "$OUT/probe.txt" || { echo "FAIL: the probe table does not name $DEV"; cat "$OUT/probe.txt"; exit 1; }

# rdmakit doctor -: live ibv_devinfo output is read from stdin; the device is found, nothing fails.
ibv_devinfo -d "$DEV" >"$OUT/ibv_devinfo.txt"
rc=0
"$BIN" doctor --json - <"$OUT/ibv_devinfo.txt" >"$OUT/doctor.json" || rc=$?
echo "rdmakit doctor --json -: exit $rc"
[ "$rc" -eq 0 ] || { echo "FAIL: doctor exited $rc on a healthy device (only positive findings expected)"; exit 1; }
python3 - "$OUT/doctor.json" "$DEV" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ids = [f["id"] for f in d["findings"]]
assert "ibv-hca-id" in ids and "ibv-port-active" in ids, ids
assert d["verdict"] == "ok", d["verdict"]
print(f"doctor: {ids}")
PY
echo "probe-live: OK"
