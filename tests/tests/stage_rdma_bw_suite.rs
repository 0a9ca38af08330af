//! `tests/rxe/suites/stage-rdma-bw.sh` outside the VM, against a fake `rdmakit` and a fake
//! `ib_write_bw`: the JSON's `verified` is what the bench reported (not a constant), and a round that
//! completes unverified fails the suite.
//!
//! Needs `bash`, `python3` and coreutils' `timeout`, as the suite does.
// Helpers outside #[test] fns unwrap too: a broken fixture is a failed test.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use rdmakit_tests::{output_text, path_with, repo_root};

/// perftest stand-in: the server announces itself, the client prints a result row (0.19 Gb/s average).
const FAKE_PERFTEST: &str = r#"#!/bin/bash
last=${@: -1}
if [ "$last" = 127.0.0.1 ]; then
  echo " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]"
  echo " 4194304 32 0.20 0.19 0.005"
else
  echo "Waiting for client to connect..."; sleep 0.3
fi
"#;

/// `rdmakit bench` stand-in: the server announces itself (on stderr, as rdmakit does); the client
/// prints its result as a JSON array; its Nth call (FAKE_UNVERIFIED) reports 2 of 3 iterations
/// verified and exits 1 (rdmakit's exit for a result that did not verify), the others 3 of 3.
const FAKE_BENCH: &str = r#"#!/bin/bash
[ "$1" = bench ] || exit 2
[ "$2" = pinned ] && exit 1
case " $* " in *" stage "*" --transport rdma "*) ;; *) echo "error: not an RDMA stage bench: $*" >&2; exit 2 ;; esac
role= json=
while [ $# -gt 0 ]; do case "$1" in --role) role=$2; shift ;; --json) json=1 ;; esac; shift; done
if [ "$role" = server ]; then echo "rdmakit bench: waiting for a client on 127.0.0.1:18520 (rdma)" >&2; sleep 0.2; exit 0; fi
[ -n "$json" ] || { echo "error: the client was not asked for --json" >&2; exit 2; }
n=$(( $(cat "$FAKE_CALLS" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$FAKE_CALLS"
if [ "$n" = "${FAKE_UNVERIFIED:-0}" ]; then v=false vi=2 rc=1; else v=true vi=3 rc=0; fi
echo "[{\"bytes\": 67108864, \"seconds\": [2.5, 2.6], \"verified\": $v, \"verified_iterations\": $vi}]"
exit $rc
"#;

fn write_exe(path: &Path, body: &str) {
    fs::write(path, body).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs the suite (one config, two rounds); returns its exit code, output and the JSON it wrote.
fn run_suite(unverified_call: u32) -> (i32, String, serde_json::Value) {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    write_exe(&bin.join("ib_write_bw"), FAKE_PERFTEST);
    write_exe(&bin.join("rdmakit"), FAKE_BENCH);
    let root = repo_root();
    let out = d.path().join("out");
    let o = Command::new("bash")
        .arg(root.join("tests/rxe/suites/stage-rdma-bw.sh"))
        .env("PATH", path_with(&bin))
        .env("RDMAKIT_ROOT", root)
        .env("RDMAKIT_RXE_OUT", &out)
        .env("STAGE_BENCH", bin.join("rdmakit"))
        .env("STAGE_BW_CONFIGS", "1:8")
        .env("STAGE_BW_ROUNDS", "2")
        .env("FAKE_CALLS", d.path().join("calls"))
        .env("FAKE_UNVERIFIED", unverified_call.to_string())
        .output()
        .unwrap();
    let text = output_text(&o);
    let json = fs::read_to_string(out.join("stage-rdma-bw.json"))
        .unwrap_or_else(|e| panic!("no JSON ({e}):\n{text}"));
    (
        o.status.code().unwrap_or(-1),
        text,
        serde_json::from_str(&json).unwrap(),
    )
}

#[test]
fn verified_is_what_the_bench_reported() {
    let (rc, out, j) = run_suite(0);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(j["verified"], true, "{j:#}");
    // Two completed rounds of 1 warmup + 2 timed iterations, every one verified by the receiver.
    assert_eq!(j["verified_iterations"], 6, "{j:#}");
    assert_eq!(j["expected_iterations"], 6, "{j:#}");
    assert_eq!(j["configs"][0]["unverified_runs"], 0, "{j:#}");
    assert_eq!(
        j["configs"][0]["rounds"]["gpu_stage_rdma_gbps"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn an_unverified_round_is_recorded_as_such_and_fails_the_suite() {
    let (rc, out, j) = run_suite(2);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("NOT VERIFIED: receiver matched 2 of 3 iterations"),
        "{out}"
    );
    assert!(
        out.contains("FAIL stage-rdma-bw: a round of ours completed without verifying"),
        "{out}"
    );
    assert_eq!(j["verified"], false, "{j:#}");
    assert_eq!(j["verified_iterations"], 5, "{j:#}");
    assert_eq!(j["expected_iterations"], 6, "{j:#}");
    let c = &j["configs"][0];
    assert_eq!(c["unverified_runs"], 1, "{j:#}");
    // The unverified round's rate is not used.
    assert_eq!(
        c["rounds"]["gpu_stage_rdma_gbps"].as_array().unwrap().len(),
        1,
        "{j:#}"
    );
}
