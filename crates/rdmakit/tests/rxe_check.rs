//! `rdmakit check` on a real RDMA device (soft-RoCE VM tier, tests/rxe): the dump script read back from the
//! real rxe sysfs (port, GID table with RoCE types and netdevs), the GID-index lint against it, and the matrix
//! runner moving real `ib_write_bw` traffic with the real counters read before and after.
//!
//! The VM's kernel (Debian 12, 6.1) binds rxe's UDP socket to the initial network namespace, so "nodes" in
//! separate namespaces cannot reach each other over rxe, and two rxe devices in one namespace cannot either
//! (local delivery goes through `lo`, which has no rxe device). Both "pods" are therefore processes on the one
//! device `rxe0` (perftest's own loopback form): the runner, the commands, the counters and the judgement
//! are real; only the pair is one machine.

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

fn run_one(spec: &ExecSpec) -> ExecOutput {
    let started = Instant::now();
    let mut cmd = Command::new("timeout");
    cmd.arg(format!("{}", spec.timeout.as_secs().max(1)))
        .args(&spec.command);
    match cmd.output() {
        Ok(o) => ExecOutput {
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            code: o.status.code().map_or(-1, i64::from),
            error: (started.elapsed() > spec.timeout).then(|| "deadline passed".to_owned()),
            ..ExecOutput::default()
        },
        Err(e) => ExecOutput {
            stderr: e.to_string(),
            code: -1,
            ..ExecOutput::default()
        },
    }
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
    /// All at once; the first to fail stops the others, as the cluster executor's `exec_many` does (a
    /// perftest server whose client failed would otherwise wait out its deadline).
    fn exec_many(&self, specs: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        use std::process::Stdio;
        let mut kids: Vec<_> = specs
            .iter()
            .map(|sp| {
                Command::new("timeout")
                    .arg(format!("{}", sp.timeout.as_secs().max(1)))
                    .args(&sp.command)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| ExecError::Refused(format!("spawn: {e}")))
            })
            .collect::<Result<_, _>>()?;
        let mut failed = false;
        loop {
            let mut running = 0;
            for k in kids.iter_mut() {
                match k.try_wait() {
                    Ok(Some(st)) if !st.success() => failed = true,
                    Ok(None) => running += 1,
                    _ => {}
                }
            }
            if running == 0 {
                break;
            }
            if failed {
                for k in kids.iter_mut() {
                    let _ = k.kill();
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(kids
            .into_iter()
            .map(|k| match k.wait_with_output() {
                Ok(o) => ExecOutput {
                    stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
                    code: o.status.code().map_or(-1, i64::from),
                    ..ExecOutput::default()
                },
                Err(e) => ExecOutput {
                    stderr: e.to_string(),
                    code: -1,
                    ..ExecOutput::default()
                },
            })
            .collect())
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
    let o = run_one(&ExecSpec {
        command: vec!["sh".into(), "-c".into(), probe::check::DUMP_SCRIPT.into()],
        timeout: Duration::from_secs(60),
        ..ExecSpec::default()
    });
    assert_eq!(o.code, 0, "{}", o.stderr);
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
    let v1 = p
        .gids
        .iter()
        .find(|g| g.gid_type.as_deref() == Some("IB/RoCE v1"))
        .expect("rxe lists a RoCE v1 entry")
        .index;
    let bad = probe::check::lint(&[facts("node-a", &[("NCCL_IB_GID_INDEX", &v1.to_string())])]);
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
        gpu: None,
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
