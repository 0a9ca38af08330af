//! `rdmakit run`: load a workflow, pick the executor, run it, print the plan or the verdict.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use rdmakit::cancel::Cancel;
use rdmakit::exec::Executor;
use rdmakit::exec::dry::DryRunExecutor;
use rdmakit::exec::kube::KubeExecutor;
use rdmakit::host::{Host, HostConfig, ParamUse};
use rdmakit::report::RunVerdict;

use super::{CmdResult, Failure, Global, code, parse_set};

pub const AFTER_HELP: &str = "\
WORKFLOW is a .rhai file, or the name of a built-in workflow:
  erdma-ray-rdt             Ray Direct Transport over Alibaba eRDMA (seed 000), end to end
  dranet-nccl-tests         DRANET + MPIJob nccl-tests on ACK (seed 002)
  nccl-tests                the same MPIJob for any profile (device plugin or DRA, IB verbs or a net plugin:
                            --set profile=aws-efa-eks), path proven by its init lines and the device counters
  shared-device-raycluster  RayCluster with rdma/rdma_shared_device_* (seed 001)
  vke-ib-pod                InfiniBand test pod on Volcengine VKE (seed 004)

Examples:
  rdmakit run scripts/workflows/erdma-ray-rdt.rhai --dry-run --out out/erdma-ray-rdt
  rdmakit run erdma-ray-rdt --context ack-prod -n ray \\
      --set registry=registry.cn-beijing.aliyuncs.com/me --set pull_secret_source=acr-pull --set push_secret_source=acr-push

In --dry-run nothing is sent to a cluster: the plan is printed, and OUT/plan.sh holds the equivalent kubectl
commands. A dry-run stopped by a script error writes an incomplete plan: plan.sh prints the error and exits 2
before any command, and plan.json / --json say \"complete\": false with the error.

Every run writes OUT/report.md and OUT/report.json; rendered files go under OUT/bundle/.
--bundle DIR runs an edited bundle instead (rdmakit run W --dry-run --out DIR, edit DIR/bundle/*, then
rdmakit run W --bundle DIR): every file W renders must be in DIR and nothing else; a schema or lint error
stops the run before anything is applied (exit 2) unless --accept-lint records the lint errors as warnings.
OUT/.rdmakit-files lists what the run wrote; the next run in OUT removes those files first (unless changed
since) and never others, and lints, validates and applies only the files it wrote itself.

--set-secret KEY=VALUE (or KEY, with the value in RDMAKIT_SECRET_KEY) passes a secret parameter
(params::secret / params::get): scripts see <secret KEY>, it reaches the cluster only as an exec's stdin or
through kube::apply_secret, and it is redacted from plan.sh (which reads RDMAKIT_SECRET_KEY), plan.json,
the reports, exec output and errors.

A workflow reads (fs::read, kube::cp, kube::apply...) only the out dir, its own folder, its library and
vendor folders, and files named on the command line (--set KEY=PATH); other paths are refused (exit 2).

A live run checks its permissions (SelfSubjectAccessReviews) before its first change and names what the
credentials lack (exit 3, nothing changed); a missing or unreadable kubeconfig or an unknown --context is
exit 2, listing the contexts there are; a cluster error names the server URL and context.

--set KEY must be `keep`, a parameter the workflow reads with params::get(\"KEY\", ...) or
params::secret(\"KEY\") in its own text or a module it imports (comments do not count), or a render value it
uses: one a system it renders reads (rdmakit render --help lists which), or that it reads as a field of
render::values (v.KEY). Any other key is an error (exit 2) before anything runs, naming the nearest known
key (`nccl-tests --set worker_replicas=5`: did you mean mpi_workers?). A render value is checked by its kind
first. --profile P is --set profile=P, the parameter the built-in workflows read. A workflow that computes the key it
reads (params::get(name, ...)) or calls params::all() is checked after it ran, against the keys it read.";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Workflow script (.rhai) or built-in workflow name.
    pub workflow: String,
    /// Talk to no cluster: record every action, print the plan, write plan.sh.
    #[arg(long)]
    pub dry_run: bool,
    /// Vendor profile: a built-in's name, a user profile's name (`rdmakit profiles`) or a .rhai file;
    /// the same as `--set profile=P`.
    #[arg(long, short, value_name = "P")]
    pub profile: Option<String>,
    /// Override a workflow parameter or render value (repeatable); an unknown KEY is an error.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set)]
    pub set: Vec<(String, String)>,
    /// A secret workflow parameter: KEY=VALUE, or KEY alone to read RDMAKIT_SECRET_<KEY> from the
    /// environment (keeps it out of shell history). Never written to plan.sh, plan.json, reports or logs.
    #[arg(long = "set-secret", value_name = "KEY[=VALUE]")]
    pub set_secret: Vec<String>,
    /// Output directory (default: out/<workflow name>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Allow the workflow to run local shell commands (shell::run).
    #[arg(long)]
    pub allow_shell: bool,
    /// Extra directory searched by `import` (before scripts/lib/ next to the workflow).
    #[arg(long, value_name = "DIR")]
    pub lib: Vec<PathBuf>,
    /// Print data as JSON on stdout: the plan (dry-run) or the report (live); the workflow's own output
    /// goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// Apply an edited bundle instead of rendering: the files the workflow renders are taken from DIR
    /// (the --out DIR of a dry-run, or its bundle/ folder), validated and linted like rendered ones.
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// With --bundle: run despite lint errors, recording them in the report as warnings.
    #[arg(long, requires = "bundle")]
    pub accept_lint: bool,
}

struct Loaded {
    name: String,
    source: String,
    display: String,
    dir: Option<PathBuf>,
}

fn load(workflow: &str) -> Result<Loaded, Failure> {
    let path = Path::new(workflow);
    if path.is_file() {
        let source = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(Failure::input)?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workflow".into());
        return Ok(Loaded {
            name,
            source,
            display: workflow.to_owned(),
            dir: path
                .parent()
                .map(|d| {
                    if d.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        d
                    }
                })
                .map(Path::to_owned),
        });
    }
    match rdmakit::workflows::builtin(workflow) {
        Some(source) => {
            let name = workflow.trim_end_matches(".rhai").to_owned();
            Ok(Loaded {
                // Not a local path: the text is the binary's, and a file there may hold other text.
                display: format!("{}/{name}.rhai", rdmakit::workflows::BUILTIN_PREFIX),
                name,
                source: source.to_owned(),
                dir: None,
            })
        }
        None => Err(Failure::input(anyhow::anyhow!(
            "{workflow}: no such file, and not a built-in workflow (built-ins: {})",
            rdmakit::workflows::BUILTIN
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

pub fn run(global: &Global, args: RunArgs) -> CmdResult {
    let wf = load(&args.workflow)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(&wf.name));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("cannot create the out dir {}", out.display()))
        .map_err(Failure::input)?;
    let mut config = HostConfig::new(&out);
    config.params = params(&args).map_err(Failure::input)?;
    config.allow_shell = args.allow_shell;
    config.print_to_stderr = args.json;
    config.lib_dirs = args.lib.clone();
    if let Some(dir) = &args.bundle {
        config.bundle = Some(rdmakit::manifests::UserBundle::read(dir).map_err(Failure::input)?);
        config.accept_lint = args.accept_lint;
    }
    if let Some(dir) = &wf.dir {
        let lib = dir.join("../lib");
        if lib.is_dir() {
            config.lib_dirs.push(lib);
        }
        let vendors = dir.join("../vendors");
        if vendors.is_dir() {
            config.vendor_dirs.push(vendors);
        }
    }
    // What the script may read: the out dir, the workflow's folder and libraries, files named by --set.
    config.read_dirs = wf.dir.iter().cloned().collect();
    config.read_dirs.extend(config.lib_dirs.iter().cloned());
    config.read_dirs.extend(config.vendor_dirs.iter().cloned());
    config.read_files = args
        .set
        .iter()
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_file())
        .collect();
    for item in &args.set_secret {
        let (key, value) = secret_arg(item, args.dry_run).map_err(Failure::input)?;
        config.secrets.insert(key, value);
    }
    let set_keys: Vec<String> = config.params.keys().cloned().collect();
    let uses = ParamUse::scan(&wf.source, &config.lib_dirs);
    let unknown = uses.unknown(config.params.keys().chain(config.secrets.keys()));
    if !uses.dynamic && !unknown.is_empty() {
        return Err(Failure::input(unknown_keys(&wf.name, &uses, &unknown)));
    }
    let workflow_file = Path::new(&wf.display)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();

    let runtime = super::runtime()?;
    let cancel = Cancel::new();
    {
        let cancel = cancel.clone();
        runtime.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "\ninterrupt: stopping after the current action (Ctrl-C again to exit at once)"
                );
                cancel.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(code::INTERRUPTED));
                }
            }
        });
    }

    let dry = args.dry_run.then(|| {
        Arc::new(DryRunExecutor::new(
            &workflow_file,
            global.context.as_deref(),
            global.namespace.as_deref(),
        ))
    });
    let mut origin = None;
    let exec: Arc<dyn Executor> = match &dry {
        Some(d) => d.clone(),
        None => {
            let conn = super::connect_client(
                global,
                &runtime,
                "use --dry-run to see the plan without a cluster",
            )?;
            let client = conn.client.clone();
            origin = Some(conn);
            Arc::new(KubeExecutor::new(
                client,
                runtime.handle().clone(),
                cancel.clone(),
            ))
        }
    };

    // The script runs on this thread (not a runtime worker), so the live executor can block on the runtime.
    let host = Host::new(exec, config, cancel.clone(), &workflow_file);
    let outcome = host.run(&wf.display, &wf.source);
    // Computed keys: what the script did not read was not a parameter of it.
    let unread: Vec<String> = if uses.dynamic {
        let read = host
            .ctx()
            .params_read
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        uses.unknown(set_keys.iter().filter(|k| !read.contains(*k)))
    } else {
        Vec::new()
    };

    if let Some(d) = &dry {
        let plan = d.plan().refusing_failed(&outcome.report);
        let sh = out.join("plan.sh");
        let redact = |t: &str| host.ctx().redactor.redact(t);
        std::fs::write(&sh, redact(&plan.to_shell()))
            .with_context(|| format!("cannot write {}", sh.display()))
            .map_err(Failure::input)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755));
        }
        let js = redact(&serde_json::to_string_pretty(&plan).unwrap_or_default());
        std::fs::write(out.join("plan.json"), js.clone() + "\n")
            .with_context(|| format!("cannot write {}", out.join("plan.json").display()))
            .map_err(Failure::input)?;
        for f in ["plan.sh", "plan.json"] {
            host.ctx().out.record(f).map_err(Failure::input)?;
        }
        if args.json {
            println!("{js}");
        } else {
            print!("{}", redact(&plan.to_text()));
        }
    }

    let report = &outcome.report;
    if args.json && dry.is_none() {
        // Live runs: the report is the data.
        println!(
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        );
    }
    eprintln!();
    let word = report.verdict.map(RunVerdict::word).unwrap_or("ERROR");
    if outcome.error.is_some() {
        // The error itself is printed once, below, with its location and trace.
        eprintln!("verdict: {word}");
    } else {
        eprintln!("verdict: {word} — {}", report.summary);
    }
    let bundle = out.join("bundle");
    if bundle.is_dir() {
        eprintln!("bundle:  {}", bundle.display());
    }
    if dry.is_some() {
        eprintln!("plan:    {}", out.join("plan.sh").display());
    }
    eprintln!(
        "report:  {} (and report.json)",
        out.join("report.md").display()
    );

    if !unread.is_empty() {
        eprintln!("error: {:#}", unknown_keys(&wf.name, &uses, &unread));
        if outcome.error.is_none() {
            return Ok(code::INPUT);
        }
    }
    if let Some(e) = &outcome.error {
        eprintln!("error: {e}");
        for t in &e.trace {
            eprintln!("  {t}");
        }
        if let (true, Some(conn)) = (e.cluster, &origin) {
            eprintln!("  cluster: {conn}");
        }
        return Ok(if e.interrupted {
            code::INTERRUPTED
        } else if e.cluster {
            code::CLUSTER
        } else {
            code::INPUT
        });
    }
    Ok(match outcome.verdict() {
        RunVerdict::Pass | RunVerdict::Planned => code::OK,
        RunVerdict::Fail => code::FINDINGS,
        RunVerdict::Interrupted => code::INTERRUPTED,
        RunVerdict::Error => code::INPUT,
    })
}

/// `--set-secret KEY=VALUE`, or `KEY` with the value in `RDMAKIT_SECRET_KEY` (a dry-run needs no value:
/// its plan.sh reads that variable when it runs).
fn secret_arg(item: &str, dry_run: bool) -> anyhow::Result<(String, rdmakit::secrets::SecretText)> {
    use rdmakit::secrets::{SecretText, env_var};
    if let Some((k, v)) = item.split_once('=') {
        if k.trim().is_empty() {
            anyhow::bail!("--set-secret: expected KEY=VALUE or KEY, got an empty key");
        }
        return Ok((k.trim().to_owned(), SecretText::new(v)));
    }
    let key = item.trim();
    if key.is_empty() {
        anyhow::bail!("--set-secret: expected KEY=VALUE or KEY, got an empty key");
    }
    match std::env::var(env_var(key)) {
        Ok(v) => Ok((key.to_owned(), SecretText::new(v))),
        Err(_) if dry_run => Ok((key.to_owned(), SecretText::default())),
        Err(_) => anyhow::bail!(
            "--set-secret {key}: {} is not set; export it, or pass --set-secret {key}=VALUE",
            env_var(key)
        ),
    }
}

/// The `--set` pairs (the last of a key wins), `--profile P` as `profile=P`, each render value checked
/// by its kind before anything runs.
fn params(args: &RunArgs) -> anyhow::Result<BTreeMap<String, String>> {
    let mut params: BTreeMap<String, String> = args.set.iter().cloned().collect();
    if let Some(p) = &args.profile {
        match params.get("profile") {
            Some(other) if other != p => anyhow::bail!(
                "--profile {p} and --set profile={other} name different profiles; give one of them"
            ),
            _ => {
                params.insert("profile".to_owned(), p.clone());
            }
        }
    }
    let mut values = k8s_render::Values::default();
    for (k, v) in &params {
        if rdmakit::host::is_value_key(k) {
            values.set(k, v).map_err(|e| anyhow::anyhow!("--set {e}"))?;
        }
    }
    Ok(params)
}

fn unknown_keys(workflow: &str, uses: &ParamUse, unknown: &[String]) -> anyhow::Error {
    anyhow::anyhow!(
        "--set {}: not a parameter of {workflow} nor a render value it uses (its parameters: {}; every \
         render value and the systems that read it: rdmakit render --help)",
        unknown.join(", "),
        uses.listed()
    )
}
