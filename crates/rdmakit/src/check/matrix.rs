//! The data-path matrix, live: for each pair and rail, the byte counters read on both pods, `ib_write_bw`
//! server and client started together (host memory), the counters read again, and the cell judged by
//! `probe::check::judge_cell`. Rails pair by position: the k-th device of the profile on the sender with
//! the k-th on the receiver (names sorted; `mlx5_0` with `mlx5_0` on a uniform cluster). Each side's GID index
//! is its own port's RoCE v2 entry (`-x`), none on IB and iWARP. Everything runs through an [`Executor`]:
//! pod exec on a cluster, network namespaces in the soft-RoCE VM test.

use std::time::Duration;

use super::{LivePod, Rails};
use crate::cancel::Cancel;
use crate::error::ExecError;
use crate::exec::fanout::Fanout;
use crate::exec::{ExecSpec, Executor};
use probe::check::{
    Cell, Dump, Measured, Pairs, PodFacts, flag_outliers, judge_cell, pairs, rounds,
};
use probe::counters::{CounterDelta, CounterSnapshot};

/// How each cell runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Message size of `ib_write_bw`, bytes.
    pub size: u64,
    /// Iterations of each cell.
    pub iterations: u64,
    /// What one NIC should reach on each node, GiB/s (by its instance type); a cell is held against the
    /// slower end's, and one with neither is judged by counters and spread alone.
    pub expected_gib_s: std::collections::BTreeMap<String, f64>,
    /// The container every command runs in.
    pub container: String,
    /// The pods' namespace.
    pub namespace: String,
    /// The profile's rails.
    pub devices: Rails,
    /// Measure at most this many rails per pair (the first, by name); `None`: every rail.
    pub max_rails: Option<usize>,
    /// GPU memory instead of host memory on both ends: the CUDA device index for perftest's
    /// `--use_cuda` (GPUDirect RDMA; only where the fabric has it).
    pub gpu: Option<u32>,
    /// Pairs of one round measured at once at most (`None`: `Fanout::sized`'s default for the round).
    pub parallel: Option<usize>,
}

/// What one NIC's RDMA WRITE should reach on the profile's instance type (`probe::expect::expect_nic`), or
/// why it is not known.
pub fn expected_gib_s(
    profile: &k8s_render::Profile,
    instance_type: Option<&str>,
) -> Result<f64, String> {
    let inputs = crate::bridge::expectation_inputs(profile, instance_type)
        .map_err(|e| format!("profile {}: {e}", profile.name))?;
    probe::expect::expect_nic(&inputs)
        .map(|e| e.gib_s)
        .map_err(|e| e.to_string())
}

/// A script printing `dev`'s counter files in the dump format.
fn counter_script(dev: &str) -> String {
    format!(
        "echo '### rdmakit-check-dump 1'; for p in /sys/class/infiniband/{dev}/ports/*/counters/* /sys/class/infiniband/{dev}/ports/*/hw_counters/*; do \
         [ -f \"$p\" ] && {{ v=; {{ IFS= read -r v < \"$p\"; }} 2>/dev/null; echo \"### file $p\"; echo \"$v\"; }}; done; echo '### end'"
    )
}

fn snapshot(out: &str, dev: &str) -> Option<CounterSnapshot> {
    let d = Dump::parse(out);
    let tmp = tempfile::tempdir().ok()?;
    d.write_tree(tmp.path()).ok()?;
    probe::counters::snapshot(tmp.path(), dev, 1).ok()
}

/// Runs every cell of `mode` over `pods` (facts in the same order), rails = devices both ends have. The
/// pairs run in rounds of node-disjoint pairs (`probe::check::rounds`), up to `plan.parallel` pairs of a
/// round at once, each cell printed on stderr as it is judged; a pair's rails run one after another.
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
    let all = pairs(pods.len(), mode);
    let rounds = rounds(pods.len(), &all);
    let count = rounds.len();
    for (r, round) in rounds.into_iter().enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let fan = Fanout::sized(round.len(), plan.parallel, None);
        let label = format!("matrix round {}/{count}", r + 1);
        let done = fan.run_streamed(
            &label,
            &round,
            |&(i, j)| {
                pair(
                    exec,
                    plan,
                    (&pods[i], &pods[j]),
                    (&facts[i], &facts[j]),
                    cancel,
                )
            },
            |res| {
                let (got, _) = res.as_ref().ok()?;
                let lines: Vec<String> = got
                    .iter()
                    .map(|c| {
                        format!(
                            "matrix {} -> {} {}: {} {}",
                            c.from,
                            c.to,
                            c.device,
                            c.verdict.as_str(),
                            c.summary
                        )
                    })
                    .collect();
                (!lines.is_empty()).then(|| lines.join("\n"))
            },
        );
        for res in done.into_iter().flatten() {
            let (got, notes) = res?;
            cells.extend(got);
            skipped.extend(notes);
        }
    }
    flag_outliers(&mut cells);
    Ok(cells)
}

/// One pair's cells, rail by rail, and what it left out.
fn pair(
    exec: &dyn Executor,
    plan: &Plan,
    (from, to): (&LivePod, &LivePod),
    (ff, tf): (&PodFacts, &PodFacts),
    cancel: &Cancel,
) -> Result<(Vec<Cell>, Vec<String>), ExecError> {
    let mut notes = Vec::new();
    let rails = |f: &PodFacts| -> Vec<probe::facts::RdmaDevice> {
        let mut d: Vec<_> = f
            .devices
            .iter()
            .filter(|d| plan.devices.selects(&d.name))
            .cloned()
            .collect();
        d.sort_by(|a, b| a.name.cmp(&b.name));
        d
    };
    let (src, dst) = (rails(ff), rails(tf));
    if src.is_empty() || dst.is_empty() {
        notes.push(format!(
            "matrix {} -> {}: no device of the profile on {}",
            from.node,
            to.node,
            if src.is_empty() { &from.node } else { &to.node }
        ));
    } else if src.len() != dst.len() {
        notes.push(format!(
            "matrix {} -> {}: {} rail(s) against {}; the first {} measured",
            from.node,
            to.node,
            src.len(),
            dst.len(),
            src.len().min(dst.len())
        ));
    }
    let limit = plan.max_rails.unwrap_or(usize::MAX);
    if src.len().min(dst.len()) > limit {
        notes.push(format!(
            "matrix {} -> {}: {} of {} rail(s) measured (--rails {limit})",
            from.node,
            to.node,
            limit,
            src.len().min(dst.len())
        ));
    }
    let mut cells = Vec::new();
    for (k, (s, d)) in src.iter().zip(&dst).take(limit).enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let rail = if s.name == d.name {
            s.name.clone()
        } else {
            format!("rail{k}")
        };
        cells.push(cell(exec, plan, from, to, &rail, s, d)?);
    }
    Ok((cells, notes))
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

/// `ib_write_bw` for one side: its own device and GID index, the message size and count.
fn perftest(plan: &Plan, dev: &probe::facts::RdmaDevice) -> String {
    let gid = dev.ports.first().and_then(|p| {
        (p.link_layer.as_deref() == Some("Ethernet"))
            .then(|| p.suggested_gid_index())
            .flatten()
    });
    let x = gid.map(|g| format!(" -x {g}")).unwrap_or_default();
    let cuda = plan
        .gpu
        .map(|g| format!(" --use_cuda={g}"))
        .unwrap_or_default();
    // `exec`: the process a stop or deadline kills is perftest itself, not a shell it left running (a
    // server left behind keeps port 18515 from the next cell).
    format!(
        "exec ib_write_bw -d {}{x}{cuda} -s {} -n {} -F --report_gbits",
        dev.name, plan.size, plan.iterations
    )
}

/// Whether the profile's instance type has GPUDirect RDMA (what `--gpu` needs), or why not.
pub fn gpudirect(profile: &k8s_render::Profile, instance_type: Option<&str>) -> Result<(), String> {
    let inputs = crate::bridge::expectation_inputs(profile, instance_type)
        .map_err(|e| format!("profile {}: {e}", profile.name))?;
    if inputs.gpudirect {
        Ok(())
    } else {
        Err(format!(
            "profile {} has no GPUDirect RDMA on this instance type (data is staged through host memory): the matrix measures host memory",
            profile.name
        ))
    }
}

fn cell(
    exec: &dyn Executor,
    plan: &Plan,
    from: &LivePod,
    to: &LivePod,
    rail: &str,
    src: &probe::facts::RdmaDevice,
    dst: &probe::facts::RdmaDevice,
) -> Result<Cell, ExecError> {
    let bytes = plan.size.saturating_mul(plan.iterations);
    let t = Duration::from_secs(30);
    let (s, d) = (src.name.as_str(), dst.name.as_str());
    let read = |exec: &dyn Executor| -> Result<(Option<CounterSnapshot>, Option<CounterSnapshot>), ExecError> {
        let o = exec.exec_many(&[spec(plan, from, counter_script(s), t), spec(plan, to, counter_script(d), t)])?;
        Ok((snapshot(&o[0].stdout, s), snapshot(&o[1].stdout, d)))
    };
    let judge = |m: Measured| {
        let e = |n: &str| plan.expected_gib_s.get(n).copied();
        let expected = match (e(&from.node), e(&to.node)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut c = judge_cell(&from.node, &to.node, rail, bytes, m, expected);
        if s != rail || d != rail {
            c.summary = format!("{s} -> {d}: {}", c.summary);
        }
        c
    };
    let Some(addr) = to.ip.clone() else {
        return Ok(judge(Measured {
            error: Some(format!("{} has no pod IP", to.name)),
            ..Measured::default()
        }));
    };
    let before = read(exec)?;
    let run_t = Duration::from_secs(120);
    let outs = exec.exec_many(&[
        spec(plan, to, perftest(plan, dst), run_t),
        // The server needs a moment to listen; perftest's client does not retry.
        spec(
            plan,
            from,
            format!("sleep 2; {} {addr}", perftest(plan, src)),
            run_t,
        ),
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
    Ok(judge(Measured {
        gib_s,
        sender: delta(&before.0, &after.0),
        receiver: delta(&before.1, &after.1),
        error,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use probe::facts::{DeviceKind, GidEntry, RdmaDevice, RdmaPort};

    fn dev(link: &str, gids: Vec<GidEntry>) -> RdmaDevice {
        RdmaDevice {
            name: "mlx5_0".into(),
            kind: DeviceKind::classify("mlx5_0", None, None),
            node_guid: None,
            node_type: None,
            fw_ver: None,
            vendor_id: None,
            device_id: None,
            parent_netdev: None,
            ports: vec![RdmaPort {
                port: 1,
                state: "4: ACTIVE".into(),
                phys_state: None,
                link_layer: Some(link.into()),
                rate: None,
                gids,
                hw_counters: Vec::new(),
                counters: Vec::new(),
            }],
        }
    }

    fn plan(gpu: Option<u32>) -> Plan {
        Plan {
            size: 1 << 20,
            iterations: 100,
            expected_gib_s: Default::default(),
            container: "c".into(),
            namespace: "n".into(),
            devices: Rails::new("mlx5_*".into(), vec!["mlx5_bond_*".into()]),
            max_rails: None,
            gpu,
            parallel: None,
        }
    }

    #[test]
    fn perftest_takes_the_roce_v2_index_on_ethernet_and_cuda_when_asked() {
        let v2 = GidEntry {
            index: 3,
            gid: "0000:0000:0000:0000:0000:ffff:0a00:0105".into(),
            gid_type: Some("RoCE v2".into()),
            netdev: Some("eth1".into()),
        };
        assert_eq!(
            perftest(&plan(None), &dev("Ethernet", vec![v2.clone()])),
            "exec ib_write_bw -d mlx5_0 -x 3 -s 1048576 -n 100 -F --report_gbits"
        );
        // InfiniBand: no GID index; GPU memory on device 0.
        assert_eq!(
            perftest(&plan(Some(0)), &dev("InfiniBand", vec![v2])),
            "exec ib_write_bw -d mlx5_0 --use_cuda=0 -s 1048576 -n 100 -F --report_gbits"
        );
        let rails = plan(None).devices;
        assert!(
            rails.selects("mlx5_3") && !rails.selects("mlx5_bond_0") && !rails.selects("erdma_0")
        );
    }
}
