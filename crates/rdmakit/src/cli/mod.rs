//! Argument parsing, logging setup, exit codes and the subcommands, one file each (`run`, `render`,
//! `validate`, `lint`, `host_probe` for `rdmakit probe`, `preflight`, `check`, `doctor`, `bench`, `profiles`, the hidden `rhai_api`); `io`
//! holds what they share for reading input and printing tables, JSON and SARIF.

mod bench;
mod check;
mod doctor;
mod host_probe;
mod io;
mod lint;
mod preflight;
mod profiles;
mod render;
mod rhai_api;
mod run;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Exit codes scripts can rely on.
pub mod code {
    /// Success: PASS verdict, dry-run plan complete, no findings.
    pub const OK: u8 = 0;
    /// The command worked and found problems: FAIL verdict, lint/doctor findings, validation errors.
    pub const FINDINGS: u8 = 1;
    /// Bad usage or input: unknown flag, unreadable file, script error, unknown profile, a missing or
    /// unreadable kubeconfig, an unknown context.
    pub const INPUT: u8 = 2;
    /// The cluster failed us: unreachable, rejected an apply, a wait timed out, a missing CRD.
    pub const CLUSTER: u8 = 3;
    /// Interrupted by Ctrl-C.
    pub const INTERRUPTED: u8 = 130;
}

const AFTER_HELP: &str = "\
Examples:
  rdmakit run scripts/workflows/erdma-ray-rdt.rhai --dry-run --out out/erdma-ray-rdt
  rdmakit run erdma-ray-rdt --set registry=registry.example.com/me --set worker_replicas=2
  rdmakit render raycluster --profile aliyun-erdma --set worker_replicas=2 --stdout | kubectl apply -f -
  rdmakit lint out/erdma-ray-rdt/bundle --profile aliyun-erdma
  rdmakit validate --strict my-raycluster.yaml
  kubectl logs my-pod | rdmakit doctor -
  rdmakit profiles

Exit codes:
  0 ok (PASS, or a complete dry-run plan)   1 findings (FAIL verdict, lint or doctor findings)
  2 usage or input error (incl. script errors, no or unreadable kubeconfig, unknown --context)
  3 cluster error (unreachable, rejected, timeout; the server URL and context are named)
  130 interrupted (Ctrl-C)";

/// rdmakit: GPU-to-GPU transfers over RDMA on Kubernetes that work the first time, and proof that they did.
#[derive(Debug, Parser)]
#[command(name = "rdmakit", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command accepts (kubectl conventions).
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// Kubeconfig context to use (like kubectl --context).
    #[arg(long, global = true, env = "RDMAKIT_CONTEXT")]
    pub context: Option<String>,
    /// Namespace for namespaced objects (like kubectl -n).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// More log output (-v info, -vv debug, -vvv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a workflow script (build -> deploy -> verify -> report), or print its plan with --dry-run.
    #[command(after_help = run::AFTER_HELP)]
    Run(run::RunArgs),
    /// Render manifests, Dockerfile and programs for a vendor profile into a bundle directory.
    #[command(after_help = render_after_help())]
    Render(render::RenderArgs),
    /// Validate manifests against the Kubernetes and CRD schemas.
    #[command(after_help = "Examples:
  rdmakit validate --strict out/erdma-ray-rdt/bundle
  rdmakit validate my-raycluster.yaml mpi-job.yaml
  rdmakit validate --strict --format sarif manifests/ > validate.sarif   # CI code scanning

Exit codes: 0 valid, 1 schema errors (each names file, line and field path), 2 unreadable input")]
    Validate(validate::ValidateArgs),
    /// Lint manifests and Dockerfiles for RDMA pitfalls (each finding: file and line, field path, why it
    /// breaks, the fix).
    ///
    /// A directory is linted as its `*.yaml`/`*.yml` files and its Dockerfiles (`Dockerfile`,
    /// `Containerfile`, `*.Dockerfile`, `Dockerfile.*`, or text whose first instruction is `FROM`); other
    /// files are skipped. With `--profile` the profile's device names, RDMA resources, userspace packages,
    /// APT source and NCCL GID index are checked.
    #[command(after_help = "Examples:
  rdmakit lint my-raycluster.yaml --profile aliyun-erdma --nodes 2
  rdmakit lint out/dranet-nccl-tests/bundle --profile aliyun-erdma-dra --benchmark --json
  rdmakit lint Dockerfile --profile aliyun-erdma        # NCCL pins, RDMA packages, vendor APT source
  rdmakit lint manifests/ --format sarif > rdmakit.sarif   # CI code scanning shows findings inline
  rdmakit lint --explain nccl-known-bad-version

Exit codes: 0 no errors (warnings are printed), 1 errors, 2 unreadable input, unknown profile or
unknown --explain rule")]
    Lint(lint::LintArgs),
    /// Probe this host (inside a pod or on a node): RDMA devices, memlock, NCCL, GPUs.
    #[command(after_help = "Examples:
  kubectl exec \"$WORKER\" -c ray-worker -- rdmakit probe
  rdmakit probe --json > facts.json      # a workflow reads it with probe::facts(text)

Exit codes: 0 nothing fails, 1 a check fails (each with its fix)")]
    Probe(host_probe::HostProbeArgs),
    /// Check a cluster before a run: nodes with GPU and RDMA capacity for a profile (device-plugin
    /// resources or DRANET's ResourceSlices), the DRANET pods, and the APIs the workflows need.
    #[command(after_help = "Examples:
  rdmakit preflight --profile aliyun-erdma --nodes 2
  rdmakit preflight --profile aliyun-erdma-dra --json

Exit codes: 0 ready (warnings are printed), 1 a check fails (each with its fix), 2 bad input (unknown
profile), 3 the cluster cannot be reached")]
    Preflight(preflight::PreflightArgs),
    /// Validate a cluster's RDMA for a profile: the preflight state, facts from a pod shaped like the
    /// workload's on every eligible node, the environment linted against them, a pairwise `ib_write_bw`
    /// matrix per rail proven by the byte counters on both ends, and a JSON and HTML report.
    #[command(after_help = check::AFTER_HELP)]
    Check(check::CheckArgs),
    /// Read a NCCL/UCX/Ray/ibverbs log and name the cause and fix of known failures.
    #[command(after_help = "Examples:
  kubectl logs \"$LAUNCHER\" | rdmakit doctor -
  rdmakit doctor /tmp/nccl-worker-0.log --json

Exit codes: 0 no problem found (positive findings such as NET/IB in use are shown), 1 warn/fail findings,
2 unreadable input")]
    Doctor(doctor::DoctorArgs),
    /// Benchmark gpu-stage: staged GPU -> host -> transport -> host -> GPU transfers (in-process, TCP,
    /// RDMA; server and client roles across two nodes) and the pinned-copy ceiling.
    Bench(bench::BenchArgs),
    /// List vendor profiles (built-in and the user's), or show one.
    ///
    /// The list holds the built-ins, then user profiles: `./scripts/vendors/*.rhai` in the working directory
    /// (files identical to a built-in are that built-in), each `--path`, and every `*.rhai` in
    /// `$XDG_CONFIG_HOME/rdmakit/profiles` (default `~/.config/rdmakit/profiles`). Each row says where it
    /// comes from; a user profile is used by its name (`--profile NAME`, `--set profile=NAME`, `profiles
    /// NAME`) or its path; a built-in's name always means the built-in. Exit 2 when a listed script does
    /// not load (the error names the file and line), or for an unknown name (the known ones listed).
    #[command(after_help = "Examples:
  rdmakit profiles
  rdmakit profiles --path ./vendors        # also list every .rhai in ./vendors
  rdmakit profiles aliyun-erdma --json
  rdmakit profiles ./my-vendor.rhai       # check a new vendor's profile file")]
    Profiles(profiles::ProfilesArgs),
    /// Print the Rhai API reference (docs/rhai-api.md) generated from the engine's registrations.
    #[command(hide = true)]
    RhaiApi,
}

/// `render --help`'s epilogue: examples, every `--set` key (from `Values::KEYS`) and the exit codes.
fn render_after_help() -> String {
    format!(
        "Examples:
  rdmakit render raycluster rdt-demo --profile aliyun-erdma --set worker_replicas=2 --out out/bundle
  rdmakit render all --profile volcengine-ib --stdout | kubectl apply -f -
  rdmakit render image --profile ./my-vendor.rhai --out out/my-vendor

--set keys (key, kind, meaning [the systems that read it], default; an empty value resets a key whose
default is derived; a key none of the rendered systems reads is refused):
{}
Exit codes: 0 rendered, 2 bad input (unknown system or profile, bad --set value, a key the systems do not
read)",
        k8s_render::Values::keys_help()
    )
}

fn init_logging(verbose: u8) {
    use std::io::IsTerminal as _;
    // kube-client's own log lines repeat what rdmakit reports as one error: off unless asked for (-v).
    let default = match verbose {
        0 => "warn,kube=off,kube_client=off,kube_runtime=off",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// An error with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: code::INPUT,
            error: error.into(),
        }
    }
    pub fn cluster(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: code::CLUSTER,
            error: error.into(),
        }
    }
}

pub type CmdResult = Result<u8, Failure>;

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                code::INPUT
            } else {
                code::OK
            });
        }
    };
    init_logging(cli.global.verbose);
    if let Some(ns) = cli.global.namespace.as_deref()
        && !rdmakit::host::is_namespace_name(ns)
    {
        eprintln!(
            "error: -n {ns:?}: not a namespace name (lowercase letters, digits and '-', at most 63, starting \
             and ending with a letter or digit)"
        );
        return ExitCode::from(code::INPUT);
    }
    let result = match cli.command {
        Command::Run(a) => run::run(&cli.global, a),
        Command::Render(a) => render::render(&cli.global, a),
        Command::Validate(a) => validate::validate(a),
        Command::Lint(a) => lint::lint(a),
        Command::Probe(a) => host_probe::host_probe(&cli.global, a),
        Command::Preflight(a) => preflight::preflight(&cli.global, a),
        Command::Check(a) => check::check(&cli.global, a),
        Command::Doctor(a) => doctor::doctor(a),
        Command::Bench(a) => bench::bench(a),
        Command::Profiles(a) => profiles::profiles(a),
        Command::RhaiApi => rhai_api::rhai_api(),
    };
    match result {
        Ok(c) => ExitCode::from(c),
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}

/// The async runtime every cluster-facing command drives kube-rs on.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(Failure::input)
}

/// A kube client for the kubeconfig, context and namespace of the global flags. A local configuration
/// problem (no or unreadable kubeconfig, unknown context) is a usage error (exit 2); `what` says what the
/// user can do instead.
pub(crate) fn connect_client(
    global: &Global,
    runtime: &tokio::runtime::Runtime,
    what: &str,
) -> Result<rdmakit::exec::kube::Connection, Failure> {
    use anyhow::Context as _;
    let opts = rdmakit::exec::kube::ClusterOptions {
        kubeconfig: global.kubeconfig.clone(),
        context: global.context.clone(),
        namespace: global.namespace.clone(),
    };
    runtime
        .block_on(rdmakit::exec::kube::connect(&opts))
        .context(format!("cluster configuration ({what})"))
        .map_err(Failure::input)
}

/// The profile (built-in name or file) and the `--set` values over its defaults, checked.
pub(crate) fn profile_and_values(
    profile: &str,
    set: &[(String, String)],
) -> Result<(k8s_render::Profile, k8s_render::Values), Failure> {
    let profile = rdmakit::profiles::load(profile).map_err(Failure::input)?;
    let mut values = k8s_render::Values::default();
    for (k, v) in set {
        values
            .set(k, v)
            .map_err(|e| Failure::input(anyhow::anyhow!("--set {e}")))?;
    }
    values.check().map_err(Failure::input)?;
    Ok((profile, values))
}

/// Parses `key=value`.
pub fn parse_set(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("expected key=value, got {s:?}")),
    }
}
