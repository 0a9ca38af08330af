//! The Rhai host: a sandboxed engine with rdmakit's modules (`kube::`, `render::`, `report::`...), module
//! imports from `scripts/lib/`, Ctrl-C handling and script errors that name file, line and step.
//!
//! Layout: `modules/` holds one file per script module, all registered from `modules/mod.rs`; `run/` the
//! run's state ([`Ctx`]: out dir, ledger, object ownership, pods seen, redactor, permission pre-check,
//! path sandbox, secret walk); `api_docs` the API reference generated from the registrations;
//! `param_scan` which `--set` keys a workflow reads (from its text); `convert` Rhai <-> JSON; `resolver`
//! imports.

// Registration helpers of the modules (defined before them so they see them).
// Functions are volatile: they talk to the cluster or the file system, so Rhai must never constant-fold them.
// Each registration carries its doc text, parameter names and types into Rhai's metadata, from which
// `docs/rhai-api.md` is generated (`api_docs`).
/// Registers a fallible function; its error gets the script position of the call (Rhai leaves it empty
/// for native functions called through a module path).
macro_rules! regp {
    ($m:expr, $name:expr, $doc:expr, $f:expr, $($a:ident : $t:ty),* $(,)?) => {{
        let f = $f;
        let wrapper = move |ctx: rhai::NativeCallContext<'_>, $($a: $t),*| $crate::host::located(&ctx, f($($a),*));
        let ret = $crate::host::api_docs::return_type_of(&wrapper);
        rhai::FuncRegistration::new($name)
            .with_volatility(true)
            .with_comments([$crate::host::api_docs::doc_comment(&$doc)])
            .with_params_info($crate::host::api_docs::params_info(&[$(concat!(stringify!($a), ": ", stringify!($t))),*], ret))
            .set_into_module($m, wrapper);
    }};
}

/// Registers a fallible function that takes an options map last, twice from one definition: with the
/// map, and without it (empty options): `kube::apply(path)` and `kube::apply(path, #{timeout: 60})`.
macro_rules! regp_opts {
    ($m:expr, $name:expr, $doc:expr, $f:expr, $($a:ident : $t:ty),* $(,)?) => {{
        let f = std::sync::Arc::new($f);
        let without = f.clone();
        regp!($m, $name, $doc, move |$($a: $t),*| (*without)($($a,)* rhai::Map::new()), $($a: $t),*);
        regp!($m, $name, $doc, move |$($a: $t,)* opts: rhai::Map| (*f)($($a,)* opts), $($a: $t,)* opts: rhai::Map);
    }};
}

/// Registers an infallible (or already position-aware) function; the parameters after the closure name
/// its arguments for the API docs.
macro_rules! reg {
    ($m:expr, $name:expr, $doc:expr, $f:expr, $($a:ident : $t:ty),* $(,)?) => {{
        let f = $f;
        let ret = $crate::host::api_docs::return_type_of(&f);
        rhai::FuncRegistration::new($name)
            .with_volatility(true)
            .with_comments([$crate::host::api_docs::doc_comment(&$doc)])
            .with_params_info($crate::host::api_docs::params_info(&[$(concat!(stringify!($a), ": ", stringify!($t))),*], ret))
            .set_into_module($m, f);
    }};
}

pub mod api_docs;
mod convert;
pub use convert::is_namespace_name;
mod modules;
pub use modules::is_value_key;
mod param_scan;
pub use param_scan::ParamUse;
pub mod resolver;
mod run;
pub use run::Ctx;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rhai::{Dynamic, Engine, EvalAltResult, Position, Scope};

use crate::cancel::Cancel;
use crate::exec::Executor;
use crate::report::{RunReport, RunVerdict, Status};

/// Sandbox limits for workflow scripts.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Maximum Rhai operations (waits and cluster calls cost one each).
    pub max_operations: u64,
    /// Maximum function call depth.
    pub max_call_levels: usize,
    /// Maximum expression nesting (global, in functions).
    pub max_expr_depth: (usize, usize),
    /// Maximum string length in bytes (logs are strings: keep this generous).
    pub max_string_size: usize,
    /// Maximum array length.
    pub max_array_size: usize,
    /// Maximum map size.
    pub max_map_size: usize,
    /// Maximum number of imported modules.
    pub max_modules: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_operations: 20_000_000,
            max_call_levels: 48,
            max_expr_depth: (64, 48),
            max_string_size: 32 << 20,
            max_array_size: 200_000,
            max_map_size: 20_000,
            max_modules: 64,
        }
    }
}

/// Everything a workflow run needs besides the script.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Where bundles, plan.sh and reports go.
    pub out_dir: PathBuf,
    /// `--set key=value` pairs, visible as `params::get(key, default)`.
    pub params: BTreeMap<String, String>,
    /// `--allow-shell`.
    pub allow_shell: bool,
    /// Directories searched by `import` (before the embedded `scripts/lib/`).
    pub lib_dirs: Vec<PathBuf>,
    /// Sandbox limits.
    pub limits: Limits,
    /// Directory of user vendor profiles searched before built-ins (`scripts/vendors/`).
    pub vendor_dirs: Vec<PathBuf>,
    /// Send the script's `print` to stderr, keeping stdout for data (`--json`).
    pub print_to_stderr: bool,
    /// Folders a script may read besides the out dir (`fs::read`, `kube::cp`, `kube::apply`...): the
    /// workflow's own folder and its library folders.
    pub read_dirs: Vec<PathBuf>,
    /// Single files a script may read: the ones named on the command line (`--set KEY=PATH`).
    pub read_files: Vec<PathBuf>,
    /// `--set-secret KEY=VALUE`: scripts get them as opaque values (`params::secret`/`params::get`) and
    /// the run redacts them from everything it shows or writes.
    pub secrets: BTreeMap<String, crate::secrets::SecretText>,
    /// `--bundle DIR`: `render::system` takes the files from this edited bundle instead of rendering them.
    pub bundle: Option<crate::manifests::UserBundle>,
    /// `--accept-lint`: lint errors in an edited bundle are recorded as warnings instead of stopping the run.
    pub accept_lint: bool,
}

impl HostConfig {
    /// Defaults writing into `out_dir`.
    pub fn new(out_dir: impl Into<PathBuf>) -> Self {
        Self {
            out_dir: out_dir.into(),
            params: BTreeMap::new(),
            allow_shell: false,
            lib_dirs: Vec::new(),
            limits: Limits::default(),
            vendor_dirs: Vec::new(),
            print_to_stderr: false,
            read_dirs: Vec::new(),
            read_files: Vec::new(),
            secrets: BTreeMap::new(),
            bundle: None,
            accept_lint: false,
        }
    }
}

/// A script failure, located.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{location}: {message}{}", .step.as_ref().map(|s| format!("\n  during step: {s}")).unwrap_or_default())]
pub struct ScriptError {
    /// `file:line:col` (or the file alone when the position is unknown).
    pub location: String,
    /// The innermost message.
    pub message: String,
    /// The workflow step that was running.
    pub step: Option<String>,
    /// Call chain (outermost first), e.g. `in function verify::expect_contains (scripts/lib/verify.rhai:12)`.
    pub trace: Vec<String>,
    /// True when Ctrl-C stopped the script.
    pub interrupted: bool,
    /// True when a sandbox limit stopped the script.
    pub limit: bool,
    /// True when the failure came from the cluster (rejection, timeout...).
    pub cluster: bool,
}

/// What a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// The finished report.
    pub report: RunReport,
    /// The error that stopped the workflow, if any.
    pub error: Option<ScriptError>,
}

impl RunOutcome {
    /// The verdict.
    pub fn verdict(&self) -> RunVerdict {
        self.report.verdict.unwrap_or(RunVerdict::Error)
    }
}

/// The Rhai host.
#[derive(Debug)]
pub struct Host {
    engine: Engine,
    ctx: Arc<Ctx>,
}

impl Host {
    /// Builds an engine with every rdmakit module registered.
    pub fn new(
        exec: Arc<dyn Executor>,
        config: HostConfig,
        cancel: Cancel,
        workflow_name: &str,
    ) -> Self {
        let report = RunReport::new(workflow_name, exec.is_dry_run());
        let out = crate::outdir::OutDir::new(&config.out_dir);
        let ctx = Arc::new(Ctx {
            exec,
            config,
            report: Mutex::new(report),
            cancel,
            out,
            ledger: run::Ledger::default(),
            params_read: Mutex::new(Default::default()),
            redactor: crate::secrets::Redactor::default(),
            not_ours: Mutex::new(Vec::new()),
            prechecked: std::sync::atomic::AtomicBool::new(false),
            pods_seen: Mutex::new(Default::default()),
        });
        for (k, v) in &ctx.config.secrets {
            ctx.redactor.add(k, v.expose());
        }
        let mut engine = Engine::new();
        let l = ctx.config.limits;
        engine
            .set_max_operations(l.max_operations)
            .set_max_call_levels(l.max_call_levels)
            .set_max_expr_depths(l.max_expr_depth.0, l.max_expr_depth.1)
            .set_max_string_size(l.max_string_size)
            .set_max_array_size(l.max_array_size)
            .set_max_map_size(l.max_map_size)
            .set_max_modules(l.max_modules)
            .set_strict_variables(true);
        let cancel = ctx.cancel.clone();
        engine.on_progress(move |_| {
            cancel
                .is_cancelled()
                .then(|| Dynamic::from("interrupted (Ctrl-C)"))
        });
        if ctx.config.print_to_stderr {
            engine.on_print(|s| eprintln!("{s}"));
        } else {
            engine.on_print(|s| println!("{s}"));
        }
        engine.on_debug(|s, src, pos| {
            eprintln!(
                "[debug] {}:{}: {s}",
                src.unwrap_or("script"),
                pos.line().unwrap_or(0)
            )
        });
        engine.set_module_resolver(resolver::LibResolver {
            dirs: ctx.config.lib_dirs.clone(),
        });
        engine
            .register_type_with_name::<SecretParam>("Secret")
            .register_fn("to_string", |s: &mut SecretParam| {
                format!("<secret {}>", s.key)
            })
            .register_fn("to_debug", |s: &mut SecretParam| {
                format!("<secret {}>", s.key)
            });
        engine
            .register_type_with_name::<ClusterFault>("ClusterError")
            .register_fn("to_string", |f: &mut ClusterFault| f.0.clone())
            .register_fn("to_debug", |f: &mut ClusterFault| format!("{:?}", f.0));
        modules::register(&mut engine, &ctx);
        Self { engine, ctx }
    }

    /// The engine (to compile or inspect functions).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Shared context (report, executor).
    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    /// Runs a script. `source_name` is how errors name the file. The report is finished (or aborted) and
    /// written to the out dir either way.
    pub fn run(&self, source_name: &str, script: &str) -> RunOutcome {
        // A run owns what it writes: the previous run's files in this out dir go first (only those).
        match self.ctx.out.claim() {
            Ok(c) if !c.kept.is_empty() => tracing::warn!(
                "{}: kept {} (changed since rdmakit wrote them)",
                self.ctx.config.out_dir.display(),
                c.kept.join(", ")
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot clear the previous run's files: {e}"),
        }
        let mut scope = Scope::new();
        scope.push_constant("DRY_RUN", self.ctx.exec.is_dry_run());
        scope.push_constant("OUT_DIR", self.ctx.config.out_dir.display().to_string());
        let result = self
            .engine
            .compile_with_scope(&scope, script)
            .map_err(EvalAltResult::from)
            .map_err(Box::new)
            .and_then(|mut ast| {
                ast.set_source(source_name);
                self.engine.run_ast_with_scope(&mut scope, &ast)
            });
        let error = result.err().map(|e| self.locate(source_name, &e));
        if let Some(e) = &error {
            self.ctx.exec.stopped(&e.to_string());
        }
        self.clean_up(error.is_some());
        let error = error.map(|mut e| {
            let r = &self.ctx.redactor;
            e.message = r.redact(&e.message);
            e.trace = e.trace.iter().map(|t| r.redact(t)).collect();
            e
        });
        let mut report = self.ctx.report().clone();
        match &error {
            None if report.verdict.is_none() => {
                report.finish();
            }
            None => {}
            Some(e) if e.interrupted => {
                report.abort(RunVerdict::Interrupted, "interrupted by Ctrl-C")
            }
            Some(e) => report.abort(RunVerdict::Error, &e.to_string()),
        }
        report.map_text(&|t| self.ctx.redactor.redact(t));
        if let Err(e) = self.ctx.write_report(&report) {
            tracing::error!("could not write the report: {e}");
        }
        RunOutcome { report, error }
    }

    /// A run deletes what it applied and did not delete itself, unless `keep=true`: everything after a script
    /// error or Ctrl-C (`stopped`), only its own objects (the merged registry Secret) when it finished. After
    /// Ctrl-C the cancellation is cleared for the cleanup; a second Ctrl-C still exits at once (cli::run).
    fn clean_up(&self, stopped: bool) {
        let c = &self.ctx;
        if c.ledger.is_empty() {
            return;
        }
        if c.exec.is_dry_run() {
            // plan.sh ends by deleting what the run made for itself (the merged credentials).
            c.exec
                .begin_step("Delete what the run made for itself (merged registry credentials)");
            c.ledger.clean_up(c.exec.as_ref(), &mut c.report(), false);
            return;
        }
        let keep = c.config.params.get("keep").is_some_and(|v| v == "true");
        let mut report = c.report();
        if keep {
            report.check(
                "cleanup",
                Status::Info,
                "keep=true: the objects this run applied are left in place",
            );
            return;
        }
        c.cancel.clear();
        c.ledger.clean_up(c.exec.as_ref(), &mut report, stopped);
    }

    fn locate(&self, source_name: &str, err: &EvalAltResult) -> ScriptError {
        let mut trace = Vec::new();
        let mut file = source_name.to_owned();
        let mut pos = err.position();
        let mut cur = err;
        loop {
            match cur {
                EvalAltResult::ErrorInFunctionCall(name, src, inner, p) => {
                    let here = if p.is_none() {
                        file.clone()
                    } else {
                        format!("{file}:{}", p.line().unwrap_or(0))
                    };
                    trace.push(format!("in function {name} (called at {here})"));
                    if !src.is_empty() {
                        file = src.clone();
                    }
                    pos = inner.position();
                    cur = inner.as_ref();
                }
                EvalAltResult::ErrorInModule(name, inner, p) => {
                    let here = if p.is_none() {
                        file.clone()
                    } else {
                        format!("{file}:{}", p.line().unwrap_or(0))
                    };
                    trace.push(format!("in module {name} (imported at {here})"));
                    file = name.clone();
                    pos = inner.position();
                    cur = inner.as_ref();
                }
                _ => break,
            }
        }
        let location = match (pos.line(), pos.position()) {
            (Some(l), Some(c)) => format!("{file}:{l}:{c}"),
            (Some(l), None) => format!("{file}:{l}"),
            _ => file,
        };
        let interrupted =
            matches!(cur, EvalAltResult::ErrorTerminated(..)) || self.ctx.cancel.is_cancelled();
        let limit = matches!(
            cur,
            EvalAltResult::ErrorTooManyOperations(..)
                | EvalAltResult::ErrorStackOverflow(..)
                | EvalAltResult::ErrorDataTooLarge(..)
                | EvalAltResult::ErrorTooManyModules(..)
        ) || matches!(
            cur,
            EvalAltResult::ErrorParsing(rhai::ParseErrorType::ExprTooDeep, _)
        );
        let (message, cluster) = match cur {
            EvalAltResult::ErrorRuntime(v, _) => match v.read_lock::<ClusterFault>() {
                Some(f) => (f.0.clone(), true),
                None => (v.to_string(), false),
            },
            other => (strip_position(&other.to_string()), false),
        };
        let step = self.ctx.report().steps.last().cloned();
        ScriptError {
            location,
            message,
            step,
            trace,
            interrupted,
            limit,
            cluster,
        }
    }
}

fn strip_position(s: &str) -> String {
    // Rhai appends " (line N, position M)"; we print the location ourselves.
    match s.rfind(" (line ") {
        Some(i) if s.ends_with(')') => s[..i].to_owned(),
        _ => s.to_owned(),
    }
}

/// A failure that came from the cluster (a rejection, timeout, transport error, failed wait or a checked
/// command that failed), carried through Rhai as the error value itself so the CLI tells it from a script
/// or input error by type (exit 3 vs 2). Scripts that catch it see a `ClusterError` whose `to_string` is
/// the message.
#[derive(Debug, Clone)]
pub(crate) struct ClusterFault(pub(crate) String);

/// A secret parameter as a script holds it: it prints as `<secret KEY>`, never as its value, and only
/// `kube::exec`'s `stdin` and `kube::apply_secret` take it.
#[derive(Debug, Clone)]
pub(crate) struct SecretParam {
    pub(crate) key: String,
    pub(crate) value: crate::secrets::SecretText,
}

/// A [`ClusterFault`] as a Rhai error.
pub(crate) fn cluster_error(msg: impl Into<String>) -> Box<EvalAltResult> {
    EvalAltResult::ErrorRuntime(Dynamic::from(ClusterFault(msg.into())), Position::NONE).into()
}

/// Position helper for error construction in modules.
pub(crate) fn runtime_error(msg: impl Into<String>) -> Box<EvalAltResult> {
    EvalAltResult::ErrorRuntime(Dynamic::from(msg.into()), Position::NONE).into()
}

/// Gives an error from a native function the position of the script call that made it.
pub(crate) fn located<T>(
    ctx: &rhai::NativeCallContext<'_>,
    r: Result<T, Box<EvalAltResult>>,
) -> Result<T, Box<EvalAltResult>> {
    r.map_err(|mut e| {
        if e.position().is_none() {
            e.set_position(ctx.call_position());
        }
        e
    })
}
