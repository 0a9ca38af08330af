//! The soft-RoCE tier's accounting, without a VM: `tests/rxe/find-tests.py` (what the source says must
//! run), `tests/rxe/lib.sh` (how vm-init.sh records one test binary) and `tests/rxe/tally.py` (the
//! verdict) run here on fake results folders, fake cargo output and fake test binaries. The tier must fail
//! when a binary is missing or ran fewer tests than its source has (0 included), when a suite skipped, or
//! when nothing is expected at all; and say how many tests ran.
//!
//! Needs `bash` and `python3`, as tests/rxe/run.sh does.
// Helpers outside #[test] fns unwrap too: a broken fixture is a failed test.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use rdmakit_tests::{output_text as text, repo_root};

fn rxe_dir() -> PathBuf {
    repo_root().join("tests/rxe")
}

/// A results folder as vm-init.sh leaves it: expected.list, results, status (None: the VM did not finish).
fn share(expected: &str, results: &str, status: Option<&str>) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("expected.list"), expected).unwrap();
    fs::write(d.path().join("results"), results).unwrap();
    if let Some(s) = status {
        fs::write(d.path().join("status"), format!("{s}\n")).unwrap();
    }
    d
}

fn tally(dir: &Path, flags: &[&str]) -> (i32, String) {
    let o = Command::new("python3")
        .arg(rxe_dir().join("tally.py"))
        .arg(dir)
        .args(flags)
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), text(&o))
}

/// Runs tally.py and asserts its exit status and that its output contains each of `lines`.
fn expect_tally(dir: &Path, flags: &[&str], rc: i32, lines: &[&str]) -> String {
    let (got, out) = tally(dir, flags);
    assert_eq!(got, rc, "{out}");
    for l in lines {
        assert!(out.contains(l), "missing `{l}` in:\n{out}");
    }
    out
}

fn make_executable(path: &Path) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or_default()
}

const EXPECTED: &str = "binary\terdma-verbs/rxe_loopback\t2\t\n\
binary\tgpu-stage/rxe_rdma\t1\trequired-features: rdma\n\
suite\tprobe-live.sh\t1\t\n";

const CHECKS_OK: &str = "PASS 1 0 check:setup setup: rxe0 on veth0 (10.99.0.1)\n\
PASS 1 0 check:smoke-devinfo smoke: ibv_devinfo -d rxe0 shows PORT_ACTIVE\n\
PASS 1 0 check:smoke-write-bw smoke: ib_write_bw loopback completed (3.4 MB/s average)\n";

const BINS_OK: &str = "PASS 2 0 binary:erdma-verbs/rxe_loopback erdma-verbs/rxe_loopback: 2 of 2 passed\n\
PASS 1 0 binary:gpu-stage/rxe_rdma gpu-stage/rxe_rdma: 1 of 1 passed\n";

#[test]
fn a_complete_run_passes_and_states_how_many_tests_ran() {
    let results = format!("{CHECKS_OK}{BINS_OK}PASS 1 0 suite:probe-live.sh suite probe-live.sh\n");
    let d = share(EXPECTED, &results, Some("0"));
    let out = expect_tally(
        d.path(),
        &[],
        0,
        &[
            "rxe: Rust tests: 3 of 3 expected ran and passed in 2 of 2 rxe_* binaries",
            "rxe: suites: 1 of 1 passed; checks: 3 of 3 passed",
        ],
    );
    assert_eq!(last_line(&out), "rxe: 7 passed, 0 failed", "{out}");
}

#[test]
fn a_binary_that_was_not_built_fails_the_tier_and_is_named() {
    // gpu-stage/rxe_rdma has no result: cargo skipped it (its required feature was not enabled).
    let results = format!(
        "{CHECKS_OK}PASS 2 0 binary:erdma-verbs/rxe_loopback erdma-verbs/rxe_loopback: 2 of 2 passed\n\
         PASS 1 0 suite:probe-live.sh suite probe-live.sh\n"
    );
    let d = share(EXPECTED, &results, Some("0"));
    let out = expect_tally(
        d.path(),
        &[],
        1,
        &[
            "MISSING binary gpu-stage/rxe_rdma: 1 test expected, no result (not built? required-features: rdma)",
            "2 of 3 expected ran and passed in 1 of 2",
        ],
    );
    assert_eq!(last_line(&out), "rxe: 6 passed, 1 failed", "{out}");
}

#[test]
fn fewer_tests_than_the_source_has_fails_even_when_recorded_as_pass() {
    // A results file written without the count check (an older vm-init.sh): the tally still compares.
    let results = format!(
        "{CHECKS_OK}PASS 0 0 binary:erdma-verbs/rxe_loopback erdma-verbs/rxe_loopback: 0 passed\n\
         PASS 1 0 binary:gpu-stage/rxe_rdma gpu-stage/rxe_rdma: 1 of 1 passed\n\
         PASS 1 0 suite:probe-live.sh suite probe-live.sh\n"
    );
    let d = share(EXPECTED, &results, Some("0"));
    let out = expect_tally(
        d.path(),
        &[],
        1,
        &["FAIL binary erdma-verbs/rxe_loopback: 0 of 2 expected tests passed"],
    );
    assert_eq!(last_line(&out), "rxe: 5 passed, 2 failed", "{out}");
}

#[test]
fn a_skipped_suite_fails_the_tier_unless_skips_are_allowed() {
    let results = format!(
        "{CHECKS_OK}{BINS_OK}SKIP 0 0 suite:probe-live.sh suite probe-live.sh (skipped: exit 77)\n"
    );
    let d = share(EXPECTED, &results, Some("0"));
    expect_tally(
        d.path(),
        &[],
        1,
        &[
            "rxe: suites: 0 of 1 passed, 1 skipped (exit 77 fails the tier",
            "FAILED: suite probe-live.sh skipped",
        ],
    );
    expect_tally(d.path(), &["--allow-skip"], 0, &[]);
}

#[test]
fn missing_suites_no_expected_binaries_and_empty_sources_fail() {
    // The suite never reported (the VM stopped after the Rust tests, say).
    let d = share(EXPECTED, &format!("{CHECKS_OK}{BINS_OK}"), Some("0"));
    expect_tally(
        d.path(),
        &[],
        1,
        &["MISSING suite probe-live.sh: no result"],
    );

    // No rxe_* target at all: the tier would test nothing.
    let d = share("suite\tprobe-live.sh\t1\t\n", CHECKS_OK, Some("0"));
    expect_tally(d.path(), &[], 1, &["no rxe_* integration-test target"]);

    // A target whose source has no #[ignore] test runs nothing in the VM.
    let d = share(
        "binary\tprobe/rxe_live\t0\t\n",
        &format!("{CHECKS_OK}PASS 0 0 binary:probe/rxe_live probe/rxe_live: 0 of 0 passed\n"),
        Some("0"),
    );
    expect_tally(
        d.path(),
        &[],
        1,
        &["its source has no #[test] #[ignore] function"],
    );
}

#[test]
fn no_build_reports_the_binaries_as_not_run_and_an_unfinished_vm_is_exit_2() {
    let results = format!("{CHECKS_OK}PASS 1 0 suite:probe-live.sh suite probe-live.sh\n");
    let d = share(EXPECTED, &results, Some("0"));
    let out = expect_tally(d.path(), &["--no-build"], 0, &[]);
    assert!(
        out.contains(
            "rxe: Rust tests not run (--no-build): 2 rxe_* binaries with 3 tests expected"
        ),
        "{out}"
    );

    let d = share(EXPECTED, "PASS 1 0 check:setup setup\n", None);
    let out = expect_tally(d.path(), &[], 2, &["the VM did not finish"]);
    assert!(last_line(&out).ends_with("failed") && !last_line(&out).ends_with(" 0 failed"));
}

/// Runs lib.sh's `run_test_binary` on a fake test executable that prints `stdout` and exits `rc`.
fn run_binary(expected: i64, stdout: &str, rc: i32) -> (String, String) {
    let d = tempfile::tempdir().unwrap();
    let exe = d.path().join("rxe_fake");
    fs::write(
        &exe,
        format!("#!/bin/sh\ncat <<'OUT'\n{stdout}\nOUT\nexit {rc}\n"),
    )
    .unwrap();
    make_executable(&exe);
    let script = format!(
        ". {lib}; run_test_binary fake/rxe_fake {exe} {expected}; echo \"failures=$failures\"",
        lib = rxe_dir().join("lib.sh").display(),
        exe = exe.display(),
    );
    let o = Command::new("bash")
        .args(["-c", &script])
        .env("SHARE", d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let results = fs::read_to_string(d.path().join("results")).unwrap();
    (results.trim_end().to_owned(), text(&o))
}

#[test]
fn vm_init_records_a_binary_that_ran_fewer_tests_than_expected_as_fail() {
    let ok = "test a ... ok\ntest b ... ok\n\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.01s";
    let (r, _) = run_binary(2, ok, 0);
    assert_eq!(
        r,
        "PASS 2 0 binary:fake/rxe_fake fake/rxe_fake: 2 of 2 passed"
    );

    // Ran nothing (every test filtered out), exit 0: was recorded as PASS before.
    let none = "\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 3 filtered out; finished in 0.00s";
    let (r, out) = run_binary(3, none, 0);
    assert_eq!(
        r,
        "FAIL 0 3 binary:fake/rxe_fake fake/rxe_fake: 0 of 3 passed, 3 failed (expected 3 from the source)"
    );
    assert!(out.contains("failures=1"), "{out}");

    let (r, _) = run_binary(3, ok, 0);
    assert!(r.starts_with("FAIL 2 1 "), "{r}");

    // Crashed before libtest's summary: one failure, the exit code named.
    let (r, _) = run_binary(1, "running 1 test\nSegmentation fault", 139);
    assert_eq!(
        r,
        "FAIL 0 1 binary:fake/rxe_fake fake/rxe_fake: 0 of 1 passed, 1 failed (exit 139)"
    );

    // More than the source has: the expected count is stale or the scan missed tests.
    let (r, _) = run_binary(1, ok, 0);
    assert!(
        r.starts_with("FAIL 2 0 ") && r.ends_with("(expected 1 from the source)"),
        "{r}"
    );
}

#[test]
fn find_tests_expects_every_rxe_target_from_metadata_with_its_ignored_test_count() {
    let d = tempfile::tempdir().unwrap();
    let tests = d.path().join("tests");
    fs::create_dir_all(tests.join("common")).unwrap();
    fs::write(
        tests.join("rxe_a.rs"),
        r#"mod common;
/// doc
#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn one() {}
#[test] #[ignore] fn two() {}
#[test]
fn on_the_host() {}
// #[test] #[ignore] fn commented_out() {}
"#,
    )
    .unwrap();
    fs::write(
        tests.join("common/mod.rs"),
        "#[test]\n#[ignore = \"two\nlines\"]\nfn three() {}\n",
    )
    .unwrap();
    fs::write(tests.join("rxe_b.rs"), "#[test]\n#[ignore]\nfn b() {}\n").unwrap();
    let target = |name: &str, feats: &str| {
        format!(
            r#"{{"name":"{name}","kind":["test"],"src_path":"{}","required-features":{feats}}}"#,
            tests.join(format!("{name}.rs")).display()
        )
    };
    let metadata = format!(
        r#"{{"workspace_members":["path+file:///w/crates/pa#0.1.0"],"packages":[{{"name":"pa","id":"path+file:///w/crates/pa#0.1.0","targets":[{},{},{{"name":"lib_x","kind":["lib"],"src_path":"/x"}}]}}]}}"#,
        target("rxe_a", "[]"),
        target("rxe_b", r#"["rdma"]"#)
    );
    fs::write(d.path().join("metadata.json"), metadata).unwrap();
    let suites = d.path().join("suites");
    fs::create_dir_all(&suites).unwrap();
    fs::write(suites.join("ok.sh"), "#!/bin/sh\n").unwrap();
    fs::write(suites.join("not-exec.sh"), "#!/bin/sh\n").unwrap();
    make_executable(&suites.join("ok.sh"));
    // cargo built rxe_a only (rxe_b's feature was off).
    let cargo_json = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/pa#0.1.0","target":{"name":"rxe_a","kind":["test"]},"executable":"/t/debug/deps/rxe_a-1"}
{"reason":"build-finished","success":true}
"#;
    let expected = d.path().join("expected.list");
    let mut child = Command::new("python3")
        .arg(rxe_dir().join("find-tests.py"))
        .arg("--metadata")
        .arg(d.path().join("metadata.json"))
        .arg("--expected")
        .arg(&expected)
        .arg("--suites")
        .arg(&suites)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cargo_json.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "rxe_a\tpa\t/t/debug/deps/rxe_a-1\t3\n"
    );
    assert_eq!(
        fs::read_to_string(&expected).unwrap(),
        "binary\tpa/rxe_a\t3\t\n\
         binary\tpa/rxe_b\t1\trequired-features: rdma\n\
         suite\tnot-exec.sh\t1\tnot executable\n\
         suite\tok.sh\t1\t\n"
    );
}

#[test]
fn the_workspace_expects_its_three_rxe_binaries_with_their_source_counts() {
    // The real workspace through cargo metadata: every rxe_* target must be found, each with tests.
    let root = repo_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let meta = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(meta.status.success(), "{}", text(&meta));
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("metadata.json"), &meta.stdout).unwrap();
    let expected = d.path().join("expected.list");
    let o = Command::new("python3")
        .arg(rxe_dir().join("find-tests.py"))
        .arg("--metadata")
        .arg(d.path().join("metadata.json"))
        .arg("--expected")
        .arg(&expected)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let list = fs::read_to_string(&expected).unwrap();
    let bins: Vec<(&str, usize)> = list
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0] == "binary").then(|| (f[1], f[2].parse().unwrap()))
        })
        .collect();
    let names: Vec<&str> = bins.iter().map(|b| b.0).collect();
    for want in [
        "erdma-verbs/rxe_loopback",
        "gpu-stage/rxe_rdma",
        "rdmakit-probe/rxe_live",
    ] {
        assert!(names.contains(&want), "{want} not expected: {list}");
    }
    // Each count equals a plain grep of the marker in its file (the tests use one form of #[ignore]).
    // A package's folder is not always its name (rdmakit-probe lives in crates/probe): take it from cargo.
    let packages: serde_json::Value = serde_json::from_slice(&meta.stdout).unwrap();
    let dir_of = |pkg: &str| {
        let p = packages["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == pkg)
            .unwrap_or_else(|| panic!("{pkg} not in cargo metadata"));
        Path::new(p["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap()
            .to_path_buf()
    };
    for (name, n) in &bins {
        let (pkg, target) = name.split_once('/').unwrap();
        let src = dir_of(pkg).join(format!("tests/{target}.rs"));
        let marked = fs::read_to_string(&src)
            .unwrap()
            .matches("#[ignore = \"soft-RoCE VM tier")
            .count();
        assert!(*n > 0, "{name} has no VM tests");
        assert_eq!(
            *n,
            marked,
            "{name}: find-tests.py count vs {}",
            src.display()
        );
    }
    // Suites the tier must keep running (a deleted suite would otherwise just drop off the list).
    for suite in ["stage-rdma-bw.sh", "rdt-python-rdma.sh", "rdt-ray-rdma.sh"] {
        assert!(
            list.lines().any(|l| l == format!("suite\t{suite}\t1\t")),
            "{suite} not expected: {list}"
        );
    }
}
