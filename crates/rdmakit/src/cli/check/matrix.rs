//! The data-path matrix, live: for each pair and rail, the byte counters read on both pods, `ib_write_bw`
//! server and client started together (host memory), the counters read again, and the cell judged by
//! `probe::check::judge_cell`. The GID index is each receiver port's RoCE v2 entry (`-x`), none on IB and
//! iWARP.

use std::time::Duration;

use probe::check::{Cell, Dump, Measured, Pairs, PodFacts, flag_outliers, judge_cell, pairs};
use probe::counters::{CounterDelta, CounterSnapshot};
use rdmakit::cancel::Cancel;
use rdmakit::error::ExecError;
use rdmakit::exec::{ExecSpec, Executor};

use super::pods::{LivePod, Rails};

/// How each cell runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub size: u64,
    pub iterations: u64,
    pub expected_gib_s: Option<f64>,
    pub container: String,
    pub namespace: String,
    pub devices: Rails,
}

/// What one NIC's RDMA WRITE should reach on the profile's instance type (`probe::expect::expect_nic`), or
/// why it is not known.
pub fn expected_gib_s(
    profile: &k8s_render::Profile,
    values: &k8s_render::Values,
) -> Result<f64, String> {
    let inputs = rdmakit::bridge::expectation_inputs(profile, values.instance_type.as_deref())
        .map_err(|e| format!("profile {}: {e}", profile.name))?;
    probe::expect::expect_nic(&inputs)
        .map(|e| e.gib_s)
        .map_err(|e| e.to_string())
}

/// A script printing `dev`'s counter files in the dump format.
fn counter_script(dev: &str) -> String {
    format!(
        "echo '### rdmakit-check-dump 1'; for p in /sys/class/infiniband/{dev}/ports/*/counters/* /sys/class/infiniband/{dev}/ports/*/hw_counters/*; do \
         [ -f \"$p\" ] && {{ echo \"### file $p\"; cat \"$p\"; }}; done; echo '### end'"
    )
}

fn snapshot(out: &str, dev: &str) -> Option<CounterSnapshot> {
    let d = Dump::parse(out);
    let tmp = tempfile::tempdir().ok()?;
    d.write_tree(tmp.path()).ok()?;
    probe::counters::snapshot(tmp.path(), dev, 1).ok()
}

/// Runs every cell of `mode` over `pods` (facts in the same order), rails = devices both ends have.
pub fn run(
    exec: &dyn Executor,
    plan: &Plan,
    pods: &[LivePod],
    facts: &[PodFacts],
    mode: Pairs,
    cancel: &Cancel,
    skipped: &mut Vec<String>,
) -> Result<Vec<Cell>, ExecError> {
    let mut cells = Vec::new();
    for (i, j) in pairs(pods.len(), mode) {
        let (from, to) = (&pods[i], &pods[j]);
        let rails: Vec<&probe::facts::RdmaDevice> = facts[j]
            .devices
            .iter()
            .filter(|d| {
                plan.devices.selects(&d.name) && facts[i].devices.iter().any(|s| s.name == d.name)
            })
            .collect();
        if rails.is_empty() {
            skipped.push(format!(
                "matrix {} -> {}: no rail of the profile on both pods",
                from.node, to.node
            ));
        }
        for dev in rails {
            if cancel.is_cancelled() {
                return Ok(cells);
            }
            cells.push(cell(exec, plan, from, to, dev)?);
        }
    }
    flag_outliers(&mut cells);
    Ok(cells)
}

fn spec(plan: &Plan, pod: &LivePod, script: String, timeout: Duration) -> ExecSpec {
    ExecSpec {
        pod: pod.name.clone(),
        container: Some(plan.container.clone()),
        command: vec!["sh".into(), "-c".into(), script],
        namespace: Some(plan.namespace.clone()),
        timeout,
        ..ExecSpec::default()
    }
}

fn cell(
    exec: &dyn Executor,
    plan: &Plan,
    from: &LivePod,
    to: &LivePod,
    dev: &probe::facts::RdmaDevice,
) -> Result<Cell, ExecError> {
    let name = &dev.name;
    let bytes = plan.size.saturating_mul(plan.iterations);
    let t = Duration::from_secs(30);
    let read = |exec: &dyn Executor| -> Result<(Option<CounterSnapshot>, Option<CounterSnapshot>), ExecError> {
        let o = exec.exec_many(&[spec(plan, from, counter_script(name), t), spec(plan, to, counter_script(name), t)])?;
        Ok((snapshot(&o[0].stdout, name), snapshot(&o[1].stdout, name)))
    };
    let Some(addr) = to.ip.clone() else {
        return Ok(judge_cell(
            &from.node,
            &to.node,
            name,
            bytes,
            Measured {
                error: Some(format!("{} has no pod IP", to.name)),
                ..Measured::default()
            },
            plan.expected_gib_s,
        ));
    };
    let gid = dev.ports.first().and_then(|p| {
        if p.link_layer.as_deref() == Some("Ethernet") {
            p.suggested_gid_index()
        } else {
            None
        }
    });
    let x = gid.map(|g| format!(" -x {g}")).unwrap_or_default();
    let common = format!(
        "ib_write_bw -d {name}{x} -s {} -n {} -F --report_gbits",
        plan.size, plan.iterations
    );
    let before = read(exec)?;
    let run_t = Duration::from_secs(120);
    let outs = exec.exec_many(&[
        spec(plan, to, common.clone(), run_t),
        // The server needs a moment to listen; perftest's client does not retry.
        spec(plan, from, format!("sleep 2; {common} {addr}"), run_t),
    ])?;
    let after = read(exec)?;
    let client = &outs[1];
    let gib_s = (client.code == 0)
        .then(|| probe::parse::parse_perftest(&client.stdout).ok())
        .flatten()
        .and_then(|r| r.best_average_gib_per_s());
    let error = gib_s.is_none().then(|| {
        format!(
            "client exit {}: {}; server exit {}: {}",
            client.code,
            client.last_line(),
            outs[0].code,
            outs[0].last_line()
        )
    });
    let delta =
        |b: &Option<CounterSnapshot>, a: &Option<CounterSnapshot>| -> Option<CounterDelta> {
            CounterDelta::between(b.as_ref()?, a.as_ref()?).ok()
        };
    let m = Measured {
        gib_s,
        sender: delta(&before.0, &after.0),
        receiver: delta(&before.1, &after.1),
        error,
    };
    Ok(judge_cell(
        &from.node,
        &to.node,
        name,
        bytes,
        m,
        plan.expected_gib_s,
    ))
}
