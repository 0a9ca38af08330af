//! `rdmakit check` on a real RDMA device (soft-RoCE VM tier, tests/rxe): the dump script read back from the
//! real rxe sysfs (port, GID table with RoCE types and netdevs), the GID-index lint against it, and the matrix
//! runner moving real `ib_write_bw` traffic with the real counters read before and after.
//!
//! The VM's kernel (Debian 12, 6.1) binds rxe's UDP socket to the initial network namespace, so "nodes" in
//! separate namespaces cannot reach each other over rxe, and two rxe devices in one namespace cannot either
//! (local delivery goes through `lo`, which has no rxe device). Both "pods" are therefore processes on the one
//! device `rxe0` (perftest's own loopback form): the runner, the commands, the counters and the judgement
//! are real; only the pair is one machine.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use probe::check::{Dump, Pairs, PodFacts};
use probe::{Check, Verdict};
use rdmakit::cancel::Cancel;
use rdmakit::check::matrix::{Plan, run};
use rdmakit::check::{LivePod, Rails};
use rdmakit::error::ExecError;
use rdmakit::exec::{
    CopySpec, ExecOutput, ExecSpec, Executor, FieldSpec, ListSpec, LogSpec, Manifest,
    MergeSecretsSpec, MergeSummary, ObjRef, WaitSpec,
};
use serde_json::Value;

fn var(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} is set by tests/rxe/vm-init.sh"))
}

/// Runs each exec as `sh -c` on this machine, the pod name only labelling it: the VM's "pods" are
/// processes. Everything that is not an exec is refused (the matrix needs only execs).
#[derive(Debug)]
struct Local;

fn refused<T>(what: &str) -> Result<T, ExecError> {
    Err(ExecError::Refused(format!(
        "{what}: the VM test executor only runs commands"
    )))
}

/// A started command: its process and the files its output goes to (no pipe to fill, so a command that
/// prints a lot cannot block, and a killed one leaves no reader waiting on a pipe a grandchild holds).
struct Started {
    child: std::process::Child,
    out: std::fs::File,
    err: std::fs::File,
}

fn spawn(spec: &ExecSpec) -> std::io::Result<Started> {
    let (out, err) = (tempfile::tempfile()?, tempfile::tempfile()?);
    // `sh -c 'ib_write_bw ...'` execs the command, so killing the child kills perftest itself. Only ever
    // signal our own child (`Child::kill`): no process groups, no `kill` binary.
    let child = Command::new(&spec.command[0])
        .args(&spec.command[1..])
        .stdout(out.try_clone()?)
        .stderr(err.try_clone()?)
        .spawn()?;
    Ok(Started { child, out, err })
}

fn read_back(mut f: std::fs::File) -> String {
    use std::io::{Read, Seek};
    let mut s = String::new();
    let _ = f.rewind();
    let mut b = Vec::new();
    let _ = f.read_to_end(&mut b);
    s.push_str(&String::from_utf8_lossy(&b));
    s
}

/// Runs all of `specs` at once, each under its deadline; the first to fail stops the others, as the
/// cluster executor's `exec_many` does (a perftest server whose client failed would wait forever).
fn run_all(specs: &[ExecSpec]) -> Vec<ExecOutput> {
    let started = Instant::now();
    let mut kids: Vec<Option<Started>> = specs.iter().map(|s| spawn(s).ok()).collect();
    let mut codes: Vec<Option<i64>> = vec![None; specs.len()];
    let mut stop = false;
    loop {
        let mut running = 0;
        for ((k, sp), code) in kids.iter_mut().zip(specs).zip(codes.iter_mut()) {
            let Some(s) = k else { continue };
            if code.is_some() {
                continue;
            }
            match s.child.try_wait() {
                Ok(Some(st)) => {
                    *code = Some(st.code().map_or(-1, i64::from));
                    stop |= !st.success();
                }
                Ok(None) if stop || started.elapsed() > sp.timeout => {
                    let _ = s.child.kill();
                    running += 1;
                }
                Ok(None) => running += 1,
                Err(_) => *code = Some(-1),
            }
        }
        if running == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    kids.into_iter()
        .zip(codes)
        .map(|(k, code)| match k {
            Some(s) => ExecOutput {
                stdout: read_back(s.out),
                stderr: read_back(s.err),
                code: code.unwrap_or(-1),
                ..ExecOutput::default()
            },
            None => ExecOutput {
                stderr: "could not start".into(),
                code: -1,
                ..ExecOutput::default()
            },
        })
        .collect()
}

fn run_one(spec: &ExecSpec) -> ExecOutput {
    run_all(std::slice::from_ref(spec))
        .pop()
        .unwrap_or_default()
}

impl Executor for Local {
    fn is_dry_run(&self) -> bool {
        false
    }
    fn has_api(&self, _: &str, _: &str, _: Duration) -> Result<bool, ExecError> {
        refused("has_api")
    }
    fn apply(&self, _: &Manifest, _: Duration) -> Result<Vec<ObjRef>, ExecError> {
        refused("apply")
    }
    fn delete(&self, _: &Manifest, _: Duration) -> Result<Vec<ObjRef>, ExecError> {
        refused("delete")
    }
    fn wait(&self, _: &WaitSpec) -> Result<Value, ExecError> {
        refused("wait")
    }
    fn exec(&self, spec: &ExecSpec) -> Result<ExecOutput, ExecError> {
        Ok(run_one(spec))
    }
    fn exec_many(&self, specs: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        Ok(run_all(specs))
    }
    fn get_field(&self, _: &FieldSpec) -> Result<String, ExecError> {
        refused("get_field")
    }
    fn copy_to(&self, _: &CopySpec) -> Result<(), ExecError> {
        refused("copy_to")
    }
    fn logs(&self, _: &LogSpec) -> Result<String, ExecError> {
        refused("logs")
    }
    fn list(&self, _: &ListSpec) -> Result<Vec<Value>, ExecError> {
        refused("list")
    }
    fn merge_registry_secrets(&self, _: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
        refused("merge_registry_secrets")
    }
}

/// This machine's facts, as a check pod's, with `env` in the container.
fn facts(node: &str, env: &[(&str, &str)]) -> PodFacts {
    let started = Instant::now();
    let o = run_one(&ExecSpec {
        command: vec!["sh".into(), "-c".into(), probe::check::DUMP_SCRIPT.into()],
        timeout: Duration::from_secs(60),
        ..ExecSpec::default()
    });
    if let Ok(out) = std::env::var("RDMAKIT_RXE_OUT") {
        let dir = Path::new(&out).join("rxe_check");
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(
            dir.join(format!("dump-{node}.txt")),
            format!(
                "exit {} after {:?}\n{}\n--- stderr\n{}",
                o.code,
                started.elapsed(),
                o.stdout,
                o.stderr
            ),
        );
    }
    assert_eq!(
        o.code,
        0,
        "dump exit {} after {:?}: {}",
        o.code,
        started.elapsed(),
        o.stderr
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut f = PodFacts::from_dump(
        &format!("check-{node}"),
        node,
        &Dump::parse(&o.stdout),
        tmp.path(),
    )
    .expect("facts");
    for (k, v) in env {
        f.env.insert((*k).into(), (*v).into());
    }
    f
}

fn fails<'a>(c: &'a [Check], id: &str) -> Vec<&'a Check> {
    c.iter()
        .filter(|c| c.id == id && c.verdict == Verdict::Fail)
        .collect()
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn the_dump_reads_the_real_rxe_gid_table_and_the_gid_index_lint_holds_against_it() {
    let dev = var("RDMAKIT_RXE_DEVICE");
    let gid: u32 = var("RDMAKIT_RXE_GID_INDEX").parse().expect("a number");
    let f = facts("node-a", &[]);
    let d = f
        .devices
        .iter()
        .find(|d| d.name == dev)
        .unwrap_or_else(|| panic!("no {dev} in {:?}", f.devices));
    let p = &d.ports[0];
    assert!(p.is_active(), "{p:?}");
    assert_eq!(p.link_layer.as_deref(), Some("Ethernet"), "{p:?}");
    assert!(
        p.gids
            .iter()
            .any(|g| g.gid_type.as_deref() == Some("RoCE v2")
                && g.netdev.as_deref() == Some(var("RDMAKIT_RXE_NETDEV").as_str())),
        "{:?}",
        p.gids
    );
    assert_eq!(p.suggested_gid_index(), Some(gid), "{:?}", p.gids);
    assert!(
        f.interfaces.iter().any(|i| i
            .addresses
            .iter()
            .any(|a| a.starts_with(&var("RDMAKIT_RXE_IP")))),
        "{:?}",
        f.interfaces
    );
    // The right index passes; the RoCE v1 entry of the same address fails, naming the right one.
    let good = probe::check::lint(&[facts("node-a", &[("NCCL_IB_GID_INDEX", &gid.to_string())])]);
    assert!(fails(&good, "nccl-ib-gid-index").is_empty(), "{good:#?}");
    // rxe lists only RoCE v2 entries: the link-local one (no IP address, not routable between nodes) is the
    // wrong index here.
    let ll = p
        .gids
        .iter()
        .find(|g| g.gid.starts_with("fe80"))
        .expect("rxe lists its link-local GID")
        .index;
    let bad = probe::check::lint(&[facts("node-a", &[("NCCL_IB_GID_INDEX", &ll.to_string())])]);
    let f = fails(&bad, "nccl-ib-gid-index");
    assert_eq!(f.len(), 1, "{bad:#?}");
    assert!(
        f[0].fix
            .as_deref()
            .unwrap_or("")
            .contains(&format!("to {gid}")),
        "{f:?}"
    );
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn the_matrix_moves_real_traffic_proven_by_both_ends_counters_and_a_dead_peer_fails_its_cell() {
    let dev = var("RDMAKIT_RXE_DEVICE");
    let ip = var("RDMAKIT_RXE_IP");
    let f = [facts("node-a", &[]), facts("node-b", &[])];
    let plan = Plan {
        size: 64 << 10,
        iterations: 200,
        expected_gib_s: Default::default(),
        container: "check".into(),
        namespace: "vm".into(),
        devices: Rails::new("rxe*".into(), Vec::new()),
        max_rails: None,
        gpu: None,
        parallel: None,
    };
    let pod = |n: &str, ip: &str| LivePod {
        name: format!("check-{n}"),
        node: n.into(),
        ip: Some(ip.into()),
        sidecars: Vec::new(),
    };
    let mut skipped = Vec::new();
    let cells = run(
        &Local,
        &plan,
        &[pod("node-a", &ip), pod("node-b", &ip)],
        &f,
        Pairs::Ring,
        &Cancel::new(),
        &mut skipped,
    )
    .expect("runs");
    println!("{cells:#?}");
    assert_eq!(cells.len(), 2, "{skipped:?}");
    for c in &cells {
        assert_eq!(c.device, dev);
        assert!(c.gib_s.is_some_and(|g| g > 0.0), "{c:?}");
        // Both ends' counters moved with the test (rxe counts packets: the packet estimate).
        for p in [&c.sender, &c.receiver] {
            let p = p.as_ref().expect("counters read");
            assert_eq!(p.verdict, Verdict::Ok, "{p:?}");
            assert!(p.measured_packets.is_some_and(|n| n > 0), "{p:?}");
        }
        // Counters proven, no expectation to hold it against, too few cells to call an outlier.
        assert_eq!(c.verdict, Verdict::Ok, "{c:?}");
    }
    // A peer address nothing listens on: the cell fails with perftest's own words, not a rate.
    let cells = run(
        &Local,
        &plan,
        &[pod("node-a", &ip), pod("node-b", "10.99.0.77")],
        &f,
        Pairs::Ring,
        &Cancel::new(),
        &mut skipped,
    )
    .expect("runs");
    let dead = cells.iter().find(|c| c.from == "node-a").expect("a -> b");
    assert_eq!(dead.verdict, Verdict::Fail, "{dead:?}");
    assert!(
        dead.gib_s.is_none() && dead.summary.contains("client exit"),
        "{dead:?}"
    );
}
