//! `rdmakit check --profile P`: one validation of a cluster's RDMA. The preflight state, then one pod per
//! eligible node shaped like the workload's (the profile's NCCL check pod: its resources or claims,
//! hostNetwork, capabilities, mounts, NCCL environment), the facts read inside each (`probe::check::dump`),
//! the environment judged against them, a pairwise `ib_write_bw` matrix per rail with the byte counters
//! read on both ends, and the evidence: terminal table, `--json` (schema `rdmakit.check/v1`), `--html`.
//! Every pod it created is deleted at the end, on failure and on Ctrl-C (unless `--keep`).

mod pods;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use probe::check::{CheckReport, NodeReport, PairPlan, Pairs, PodFacts, SCHEMA};
use probe::{Check, Verdict};
use rdmakit::cancel::Cancel;
use rdmakit::check::matrix;
use rdmakit::exec::fanout::Fanout;
use rdmakit::exec::kube::KubeExecutor;
use rdmakit::exec::{ExecSpec, Executor};

use super::preflight::{PreflightArgs, evaluate_cluster};
use super::{CmdResult, Failure, Global, code, parse_set};

pub const AFTER_HELP: &str = "\
Examples:
  rdmakit check --profile aliyun-erdma --html check.html --json check.json
  rdmakit check --profile mellanox-ib --nodes pool=train --pairs all
  rdmakit check --profile mellanox-ib --pairs sample --peers 4      # 1,000 nodes: 4,000 pairs, not 999,000
  rdmakit check --profile aws-efa --no-matrix -n rdma-test

Exit codes: 0 pass (warnings allowed), 1 a finding or a matrix cell failed (each with cause and fix),
2 bad input (unknown profile, bad --set), 3 the cluster failed us (unreachable, a check pod never became
Ready), 130 interrupted (the check pods are deleted first)";

/// Which node pairs the matrix measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PairsArg {
    /// Each node to the next, the last to the first.
    Ring,
    /// Every ordered pair: n × (n − 1), for a handful of nodes (the plan's cost is printed first).
    All,
    /// The ring plus `--peers` − 1 more distances drawn from `--seed`: each node sends and receives
    /// `--peers` times, far-apart nodes paired too; the coverage is printed.
    Sample,
}

/// `rdmakit check` arguments.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Vendor profile (built-in name or a .rhai file): its pod shape, devices, counters, expected rates.
    #[arg(short, long)]
    pub profile: String,
    /// Render values for the check pods (image, instance_type, ...), as `rdmakit render --set`.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set)]
    pub set: Vec<(String, String)>,
    /// Only the nodes this label selector matches (default: every node preflight finds eligible).
    #[arg(long, value_name = "SELECTOR")]
    pub nodes: Option<String>,
    /// Which pairs the data-path matrix measures.
    #[arg(long, value_enum, default_value = "ring")]
    pub pairs: PairsArg,
    /// With `--pairs sample`: peers per node (1 is the ring).
    #[arg(long, value_name = "K", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    pub peers: u16,
    /// With `--pairs sample`: the draw (the same seed measures the same pairs).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Skip the data-path matrix (facts and findings only).
    #[arg(long)]
    pub no_matrix: bool,
    /// Measure GPU memory on both ends (`ib_write_bw --use_cuda=0`, GPUDirect RDMA) where the profile's
    /// instance type has it; elsewhere the matrix stays on host memory and the report says why.
    #[arg(long)]
    pub gpu: bool,
    /// Measure at most N rails per pair (the first by device name); default every rail of the profile.
    #[arg(long, value_name = "N")]
    pub rails: Option<usize>,
    /// Message size of each `ib_write_bw` cell, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub size: u64,
    /// Iterations of each cell.
    #[arg(long, default_value_t = 1000)]
    pub iterations: u64,
    /// Write the JSON report here (`-`: stdout, the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the self-contained HTML report here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Keep the check pods (for a look inside); they are deleted otherwise.
    #[arg(long)]
    pub keep: bool,
    /// How long the check pods may take to become Ready, seconds.
    #[arg(long, default_value_t = 300)]
    pub ready_timeout: u64,
    /// Pods created and read at once, and matrix pairs of one round measured at once (default: an
    /// eighth of them, between 8 and 64; `--parallel 1` measures one pair at a time).
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    /// Stop starting per-pod work (creating pods, reading facts) after this many seconds from the start;
    /// what is left is reported as not done.
    #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
    pub deadline: u64,
}

/// Runs the check.
pub fn check(global: &Global, a: CheckArgs) -> CmdResult {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (profile, values) = super::profile_and_values(&a.profile, &a.set)?;
    let shape = pods::Shape::render(&profile, &values)?;
    let gpudirect = matrix::gpudirect(&profile, values.instance_type.as_deref());

    let runtime = super::runtime()?;
    let conn = super::connect_client(global, &runtime, "check --kubeconfig and --context")?;
    let cancel = Cancel::new();
    {
        let cancel = cancel.clone();
        runtime.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ninterrupt: deleting the check pods (Ctrl-C again to exit at once)");
                cancel.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(code::INTERRUPTED));
                }
            }
        });
    }
    let exec = Arc::new(KubeExecutor::new(
        conn.client.clone(),
        runtime.handle().clone(),
        cancel.clone(),
    ));
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| conn.client.default_namespace().to_owned());

    let pre = PreflightArgs {
        profile: Some(a.profile.clone()),
        nodes: 1,
        pods: None,
        pods_namespace: None,
        parallel: None,
        deadline: 600,
        json: false,
    };
    let (state, snapshot) = evaluate_cluster(global, &exec, &conn, &pre)?;
    let mut nodes: Vec<String> = state
        .nodes
        .iter()
        .filter(|n| n.eligible)
        .map(|n| n.name.clone())
        .collect();
    if let Some(sel) = &a.nodes {
        let picked = pods::nodes_matching(&exec, sel).map_err(|e| {
            Failure::cluster(anyhow::Error::new(e).context(format!("cluster {conn}")))
        })?;
        nodes.retain(|n| picked.contains(n));
    }
    let mut report = CheckReport {
        schema: SCHEMA.to_owned(),
        rdmakit_version: env!("CARGO_PKG_VERSION").to_owned(),
        profile: profile.name.clone(),
        namespace: namespace.clone(),
        started: started_at,
        seconds: 0.0,
        verdict: Verdict::Ok,
        state: state.checks.clone(),
        nodes: Vec::new(),
        findings: Vec::new(),
        matrix: Vec::new(),
        pair_plan: None,
        skipped: Vec::new(),
        pods: Vec::new(),
        kept: a.keep,
    };
    if nodes.is_empty() {
        report.findings.push(
            Check::new("check-nodes", "nodes", Verdict::Fail, format!(
                "no node is eligible for profile {}{}", profile.name,
                a.nodes.as_deref().map(|s| format!(" among --nodes {s}")).unwrap_or_default()
            ))
            .with_fix("see the state above: nodes need the profile's GPU and RDMA capacity (rdmakit preflight --profile P)"),
        );
    }

    let run_id = pods::run_id();
    let created = pods::Created::new(exec.clone(), cancel.clone(), namespace.clone(), &run_id);
    let outcome = if nodes.is_empty() {
        Ok(())
    } else {
        gather(
            Gather {
                a: &a,
                exec: &exec,
                shape: &shape,
                nodes: &nodes,
                run_id: &run_id,
                namespace: &namespace,
                expected: expectations(&profile, &values, &snapshot.nodes, &nodes),
                gpudirect,
                created: &created,
                cancel: &cancel,
                started,
            },
            &mut report,
        )
    };
    report.pods = created.names();
    let interrupted = cancel.is_cancelled();
    if interrupted {
        // A partial report must say so: what was not reached is missing, not passed.
        report.findings.push(
            Check::new("check-interrupted", "check", Verdict::Fail,
                "interrupted (Ctrl-C) before the check finished: the nodes, facts and cells not reached are missing from this report")
            .with_fix("run the check again to the end"),
        );
    }
    if !a.keep {
        created.delete_all();
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.verdict = report.worst();
    emit(&a, &report)?;
    if interrupted {
        return Ok(code::INTERRUPTED);
    }
    outcome?;
    Ok(report.exit_code())
}

/// What one NIC should reach on each node: the instance type `--set instance_type=` names, else the node's
/// `node.kubernetes.io/instance-type` label, else the profile's default; with the nodes whose expectation is
/// unknown (a note each: their cells are judged by counters and spread).
fn expectations(
    profile: &k8s_render::Profile,
    values: &k8s_render::Values,
    infos: &[probe::preflight::NodeInfo],
    nodes: &[String],
) -> (std::collections::BTreeMap<String, f64>, Vec<String>) {
    let mut known = std::collections::BTreeMap::new();
    let mut unknown = Vec::new();
    for n in nodes {
        let label = infos
            .iter()
            .find(|i| i.name == *n)
            .and_then(|i| i.labels.get("node.kubernetes.io/instance-type"))
            .filter(|t| profile.instance_types.contains_key(t.as_str()));
        let it = values
            .instance_type
            .as_deref()
            .or(label.map(String::as_str));
        match matrix::expected_gib_s(profile, it) {
            Ok(g) => {
                known.insert(n.clone(), g);
            }
            Err(why) => unknown.push(format!("expected rate on {n}: {why}")),
        }
    }
    (known, unknown)
}

/// What one run's gathering needs.
struct Gather<'a> {
    a: &'a CheckArgs,
    exec: &'a Arc<KubeExecutor>,
    shape: &'a pods::Shape,
    nodes: &'a [String],
    run_id: &'a str,
    namespace: &'a str,
    expected: (std::collections::BTreeMap<String, f64>, Vec<String>),
    gpudirect: Result<(), String>,
    created: &'a pods::Created,
    cancel: &'a Cancel,
    started: Instant,
}

/// Creates the pods, reads the facts, judges them and runs the matrix, filling `report`.
fn gather(g: Gather<'_>, report: &mut CheckReport) -> Result<(), Failure> {
    let Gather {
        a,
        exec,
        shape,
        nodes,
        run_id,
        namespace,
        expected,
        gpudirect,
        created,
        cancel,
        started,
    } = g;
    let deadline = Duration::from_secs(a.deadline).saturating_sub(started.elapsed());
    let cluster = |e: rdmakit::error::ExecError| Failure::cluster(anyhow::Error::new(e));
    let (live, stuck) = shape
        .create(
            exec,
            nodes,
            run_id,
            namespace,
            created,
            pods::Limits {
                ready: Duration::from_secs(a.ready_timeout),
                fanout: Fanout::sized(nodes.len(), a.parallel, Some(deadline)),
            },
        )
        .map_err(cluster)?;
    for s in &stuck {
        report.findings.push(
            Check::new(
                "check-pod-start",
                format!("{} on {}", s.pod, s.node),
                Verdict::Fail,
                format!(
                    "the pod shaped like the workload's did not become Ready within {} s: {}",
                    a.ready_timeout, s.why
                ),
            )
            .with_fix("the workload's pods would not start on that node either: give it the requested GPUs, RDMA resources or claim devices, or leave it out with --nodes SELECTOR"),
        );
    }
    let specs: Vec<ExecSpec> = live
        .iter()
        .map(|p| ExecSpec {
            pod: p.name.clone(),
            container: Some(shape.container.clone()),
            command: vec!["sh".into(), "-c".into(), probe::check::DUMP_SCRIPT.into()],
            namespace: Some(namespace.to_owned()),
            timeout: Duration::from_secs(60),
            ..ExecSpec::default()
        })
        .collect();
    // Independent execs, bounded (one per node: thousands on a big cluster), each pod's failure its own.
    let deadline = Duration::from_secs(a.deadline).saturating_sub(started.elapsed());
    let fanout = Fanout::sized(specs.len(), a.parallel, Some(deadline));
    let outs = fanout.run("read pod facts", &specs, |s| exec.exec(s));
    let mut facts: Vec<PodFacts> = Vec::new();
    for (p, o) in live.iter().zip(outs) {
        let scratch = tempfile::tempdir()
            .map_err(|e| Failure::input(anyhow::anyhow!("a scratch directory: {e}")))?;
        let (stdout, failed) = match o {
            Some(Ok(o)) if o.code == 0 => (o.stdout, None),
            Some(Ok(o)) => {
                let why = format!("the dump exited with {}: {}", o.code, o.last_line());
                (o.stdout, Some(why))
            }
            Some(Err(e)) => (String::new(), Some(format!("exec: {e}"))),
            None => (
                String::new(),
                Some("not read: the overall deadline (--deadline) passed first".into()),
            ),
        };
        let dump = probe::check::Dump::parse(&stdout);
        let mut f = PodFacts::from_dump(&p.name, &p.node, &dump, scratch.path())
            .map_err(|e| Failure::input(anyhow::anyhow!("{}: {e}", p.name)))?;
        f.unreadable.extend(failed);
        f.sidecars = p.sidecars.clone();
        facts.push(f);
    }
    report.findings.extend(probe::check::lint(&facts));
    for f in &facts {
        if !f.unreadable.is_empty() {
            report.findings.push(
                Check::new(
                    "pod-facts",
                    format!("{} on {}", f.pod, f.node),
                    Verdict::Warn,
                    format!("not read: {}", f.unreadable.join("; ")),
                )
                .with_fix(
                    "the check pod's image needs sh, cat, ls (and ip, df, nvidia-smi for the rest)",
                ),
            );
        }
    }
    report.nodes = facts
        .iter()
        .cloned()
        .map(|facts| NodeReport { facts })
        .collect();
    if cancel.is_cancelled() {
        return Ok(());
    }
    if a.no_matrix {
        report.skipped.push("matrix: --no-matrix".into());
    } else if live.len() < 2 {
        report
            .skipped
            .push(format!("matrix: {} node(s), a pair needs two", live.len()));
    } else {
        let mode = match a.pairs {
            PairsArg::Ring => Pairs::Ring,
            PairsArg::All => Pairs::All,
            PairsArg::Sample => Pairs::Sample {
                peers: usize::from(a.peers),
                seed: a.seed,
            },
        };
        // The cost before the work: `all` over a big cluster is n² cells.
        let pair_plan = PairPlan::of(live.len(), mode);
        eprintln!("check: matrix {}", pair_plan.describe());
        if mode == Pairs::All && live.len() > 16 {
            eprintln!(
                "check: --pairs all measures {} pairs on every rail; --pairs sample --peers K measures K per node",
                pair_plan.pairs
            );
        }
        report.pair_plan = Some(pair_plan);
        let (expected, unknown) = expected;
        report.skipped.extend(unknown);
        let gpu = match (a.gpu, gpudirect) {
            (true, Ok(())) => Some(0),
            (true, Err(why)) => {
                report.skipped.push(format!("--gpu: {why}"));
                None
            }
            (false, _) => None,
        };
        let plan = matrix::Plan {
            size: a.size,
            iterations: a.iterations,
            expected_gib_s: expected,
            container: shape.container.clone(),
            namespace: namespace.to_owned(),
            devices: shape.devices.clone(),
            max_rails: a.rails,
            gpu,
            parallel: a.parallel,
        };
        report.matrix = matrix::run(
            &**exec,
            &plan,
            &live,
            &facts,
            mode,
            cancel,
            &mut report.skipped,
        )
        .map_err(cluster)?;
    }
    Ok(())
}

/// Writes `--json`/`--html` and prints the table (to stderr when the JSON goes to stdout).
fn emit(a: &CheckArgs, report: &CheckReport) -> Result<(), Failure> {
    let write = |path: &PathBuf, text: String| -> Result<(), Failure> {
        std::fs::write(path, text)
            .map_err(|e| Failure::input(anyhow::anyhow!("cannot write {}: {e}", path.display())))
    };
    let json = report
        .to_json()
        .map_err(|e| Failure::input(anyhow::anyhow!("{e}")))?;
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if let Some(p) = &a.json
        && !to_stdout
    {
        write(p, json.clone())?;
    }
    if let Some(p) = &a.html {
        write(p, probe::check::html::render(report))?;
    }
    if to_stdout {
        eprint!("{}", report.render_text());
        println!("{json}");
    } else {
        print!("{}", report.render_text());
    }
    Ok(())
}
