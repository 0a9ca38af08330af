//! The executor abstraction: every cluster action a workflow takes goes through [`Executor`].
//!
//! Two implementations: [`dry::DryRunExecutor`] records actions into a [`crate::plan::Plan`] (printed, and written
//! as an equivalent `plan.sh`), and [`kube::KubeExecutor`] performs them through kube-rs. The trait is
//! synchronous because Rhai functions are; the live executor drives its async client on a tokio runtime handle.

pub mod dry;
pub mod fanout;
pub mod kinds;
pub mod kube;
pub mod wait;

pub use kinds::{api_version_for_kind, missing_api_fix};

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::error::ExecError;

/// The field manager name used for server-side apply.
pub const FIELD_MANAGER: &str = "rdmakit";

/// How plan.sh applies, as the live executor does: server-side, as rdmakit, taking over fields another
/// manager set (`--force-conflicts`, kube-rs' `PatchParams::apply(..).force()`): a re-run after a
/// `kubectl edit` converges instead of failing on a conflict.
pub const KUBECTL_APPLY: &str = "apply --server-side --force-conflicts --field-manager=rdmakit";

/// A set of Kubernetes objects read from one file (or rendered in memory).
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Where the objects came from, as shown in plans (relative to the out dir when possible).
    pub display_path: String,
    /// The objects, as JSON values with `apiVersion`, `kind` and `metadata.name`.
    pub objects: Vec<Value>,
}

/// A reference to one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjRef {
    /// `v1`, `ray.io/v1`, ...
    pub api_version: String,
    /// `Pod`, `RayCluster`, ...
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`, when set in the manifest.
    pub namespace: Option<String>,
}

impl ObjRef {
    /// Reads the reference out of an object, or says which field is missing.
    pub fn from_object(obj: &Value, source: &str) -> Result<Self, ExecError> {
        let field = |p: &str| -> Option<String> {
            obj.pointer(p).and_then(Value::as_str).map(str::to_owned)
        };
        let api_version = field("/apiVersion")
            .ok_or_else(|| ExecError::Input(format!("{source}: an object has no apiVersion")))?;
        let kind = field("/kind")
            .ok_or_else(|| ExecError::Input(format!("{source}: an object has no kind")))?;
        let name = field("/metadata/name")
            .ok_or_else(|| ExecError::Input(format!("{source}: {kind} has no metadata.name")))?;
        Ok(Self {
            api_version,
            kind,
            name,
            namespace: field("/metadata/namespace"),
        })
    }

    /// `kind/name` in kubectl's lowercase form (`raycluster/ray-erdma-cluster`).
    pub fn kubectl_name(&self) -> String {
        format!("{}/{}", self.kind.to_lowercase(), self.name)
    }
}

impl std::fmt::Display for ObjRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// What to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitFor {
    /// Pods (by name or label selector) with condition `Ready=True`; at least `expect` of them.
    PodsReady,
    /// A RayCluster whose `status.state` is `ready`.
    RayClusterReady,
    /// An MPIJob with condition `Succeeded` (or `Failed`, which is an error).
    MpiJobFinished,
    /// ResourceClaims (by label selector or all in the namespace) with an allocation, at least `expect`.
    ClaimsAllocated,
    /// Any object with `status.conditions[type=<name>].status == "True"`.
    Condition(String),
}

/// A wait request.
#[derive(Debug, Clone)]
pub struct WaitSpec {
    /// Condition to wait for.
    pub what: WaitFor,
    /// Object kind (`Pod`, `RayCluster`, `MPIJob`, `Deployment`, `ResourceClaim`).
    pub kind: String,
    /// A single object's name...
    pub name: Option<String>,
    /// ...or a label selector.
    pub selector: Option<String>,
    /// Minimum number of matching objects (selector waits).
    pub expect: usize,
    /// Namespace override.
    pub namespace: Option<String>,
    /// Deadline, enforced by the executor.
    pub timeout: Duration,
}

/// An exec request (`kubectl exec POD -c CONTAINER -- COMMAND...`). Its `Debug` never shows stdin (it
/// may carry a secret).
#[derive(Clone, Default)]
pub struct ExecSpec {
    /// Pod name.
    pub pod: String,
    /// Container name (`None`: the pod's default container).
    pub container: Option<String>,
    /// argv.
    pub command: Vec<String>,
    /// Bytes to send to stdin (closed afterwards).
    pub stdin: Option<Vec<u8>>,
    /// In plan.sh, stdin comes from this environment variable (a secret parameter's; its value never
    /// appears in the plan).
    pub stdin_env: Option<String>,
    /// Namespace override.
    pub namespace: Option<String>,
    /// Deadline.
    pub timeout: Duration,
    /// In plan.sh, capture stdout into this shell variable.
    pub capture_var: Option<String>,
    /// Show a spinner with the last output line (long builds).
    pub progress: bool,
    /// Extra environment for the command, rendered as `env K=V ...` in front of it.
    pub env: Vec<(String, String)>,
}

impl std::fmt::Debug for ExecSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecSpec")
            .field("pod", &self.pod)
            .field("container", &self.container)
            .field("command", &self.command)
            .field(
                "stdin",
                &self.stdin.as_ref().map(|b| format!("<{} bytes>", b.len())),
            )
            .field("stdin_env", &self.stdin_env)
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

/// Create or update a generic (Opaque) Secret from values a script holds, secret or not
/// (`kube::apply_secret`): the one way a secret parameter reaches the cluster besides an exec's stdin.
#[derive(Debug, Clone)]
pub struct SecretSpec {
    /// Secret name.
    pub name: String,
    /// Key -> value; `Debug` shows no value.
    pub data: std::collections::BTreeMap<String, crate::secrets::SecretText>,
    /// For plan.sh: key -> the environment variable that holds a secret parameter's value (keys absent
    /// here are plain values, quoted into the plan).
    pub env: std::collections::BTreeMap<String, String>,
    /// Namespace override.
    pub namespace: Option<String>,
    /// Deadline.
    pub timeout: Duration,
}

/// Read one field of one object (`kubectl get KIND NAME -o jsonpath='{.status.podIP}'`).
#[derive(Debug, Clone)]
pub struct FieldSpec {
    /// Kind (`Pod`, `RayCluster`, ...).
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Dotted path such as `.status.podIP`.
    pub path: String,
    /// Namespace override.
    pub namespace: Option<String>,
    /// In plan.sh, capture the value into this shell variable (dry-run returns `${VAR}`).
    pub capture_var: Option<String>,
    /// Deadline.
    pub timeout: Duration,
}

/// Evaluates a dotted path (`.status.podIP`, `.items.0.metadata.name`) on a JSON value; strings come back
/// bare, other values as JSON text.
pub fn field_at(obj: &Value, path: &str) -> Option<String> {
    let mut cur = obj;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        cur = match cur {
            Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            Value::Object(o) => o.get(part)?,
            _ => return None,
        };
    }
    Some(match cur {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// What an exec returned.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExecOutput {
    /// Captured stdout (lossy UTF-8).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8).
    pub stderr: String,
    /// Exit code (0 on success).
    pub code: i64,
    /// True when nothing ran (dry-run placeholder).
    pub dry_run: bool,
    /// `exec_many` only: why this rank has no exit code of its own (`code` is -1): its deadline passed,
    /// or it was stopped because another rank failed first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `exec_many` only: stopped because another rank failed first (what it printed until then is kept).
    pub cancelled: bool,
}

impl ExecOutput {
    /// The last non-empty line of stderr, else of stdout, trimmed (`""` when both are empty): what a failed
    /// command said last.
    pub fn last_line(&self) -> &str {
        self.stderr
            .lines()
            .rev()
            .chain(self.stdout.lines().rev())
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("")
    }
}

/// Copy a local file into a container (`kubectl cp`).
#[derive(Debug, Clone)]
pub struct CopySpec {
    /// Local file.
    pub local: PathBuf,
    /// How the local file is shown in plans.
    pub local_display: String,
    /// Pod name.
    pub pod: String,
    /// Container.
    pub container: Option<String>,
    /// Destination path inside the container.
    pub remote: String,
    /// Namespace override.
    pub namespace: Option<String>,
    /// Deadline.
    pub timeout: Duration,
}

/// Read a container's log.
#[derive(Debug, Clone)]
pub struct LogSpec {
    /// Pod name.
    pub pod: String,
    /// Container.
    pub container: Option<String>,
    /// Only the last N lines.
    pub tail: Option<i64>,
    /// Namespace override.
    pub namespace: Option<String>,
    /// Deadline.
    pub timeout: Duration,
    /// In plan.sh, capture the log into this shell variable.
    pub capture_var: Option<String>,
}

/// List objects of a kind.
#[derive(Debug, Clone)]
pub struct ListSpec {
    /// `v1`, `ray.io/v1`, ...
    pub api_version: String,
    /// `Pod`, `Node`, `ResourceClaim`, ...
    pub kind: String,
    /// Label selector.
    pub selector: Option<String>,
    /// Namespace override (ignored for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// In plan.sh, capture the names into this bash array.
    pub capture_var: Option<String>,
    /// Dry-run only: how many placeholder objects to return.
    pub expect: usize,
    /// Dry-run only: `kubectl -o custom-columns` for plan.sh as (header, jsonpath) pairs.
    pub columns: Vec<(String, String)>,
    /// Deadline.
    pub timeout: Duration,
}

/// Merge docker registry credentials from several `kubernetes.io/dockerconfigjson` Secrets into one
/// generic Secret holding a `config.json` (what BuildKit's client reads).
#[derive(Debug, Clone)]
pub struct MergeSecretsSpec {
    /// Source Secret names, in order; later ones win for a registry that appears twice.
    pub sources: Vec<String>,
    /// Target Secret name (`buildkit-push-creds`).
    pub target: String,
    /// Key in the target Secret (`config.json`).
    pub key: String,
    /// Namespace override.
    pub namespace: Option<String>,
    /// Deadline.
    pub timeout: Duration,
}

/// What the merge produced. Holds registry host names only, never credentials.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MergeSummary {
    /// Target Secret name.
    pub target: String,
    /// Registries present in the merged config.
    pub registries: Vec<String>,
    /// True when nothing ran.
    pub dry_run: bool,
    /// The credentials the merge read (never serialized; `Debug` shows none): the run redacts them from
    /// what it shows and writes.
    #[serde(skip)]
    pub sensitive: Vec<crate::secrets::SecretText>,
}

/// One permission a run needs (a SelfSubjectAccessReview's resource attributes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Access {
    /// `create`, `patch`, `delete`, `get`, `list`.
    pub verb: String,
    /// The object's apiVersion (`v1`, `ray.io/v1`), or a bare kind's apiVersion.
    pub api_version: String,
    /// The kind (`Pod`, `RayCluster`).
    pub kind: String,
    /// A subresource (`exec`, `log`).
    pub subresource: Option<String>,
    /// Namespace (`None`: the run's, or cluster-scoped).
    pub namespace: Option<String>,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.verb, self.kind, self.api_version)?;
        if let Some(s) = &self.subresource {
            write!(f, "/{s}")?;
        }
        if let Some(n) = &self.namespace {
            write!(f, " in namespace {n}")?;
        }
        Ok(())
    }
}

/// The actions a workflow can take on a cluster.
pub trait Executor: Send + Sync + std::fmt::Debug {
    /// True for the dry-run executor.
    fn is_dry_run(&self) -> bool;
    /// Marks the start of a named workflow step (used in plans and progress output).
    fn begin_step(&self, _name: &str) {}
    /// Adds a human note to the plan (`# ...` in plan.sh).
    fn note(&self, _text: &str) {}
    /// The workflow stopped at `error` (a script error, Ctrl-C): a dry-run plan is incomplete, and its
    /// plan.sh refuses to run.
    fn stopped(&self, _error: &str) {}
    /// Dry-run only: a shell line for plan.sh that computes what rdmakit computes in Rust/Rhai (a counter
    /// delta, say). Live executors ignore it.
    fn plan_shell(&self, _summary: &str, _line: &str) {}
    /// Whether the cluster serves `apiVersion`/`kind` (CRD or DRA installed), through discovery.
    fn has_api(&self, api_version: &str, kind: &str, timeout: Duration) -> Result<bool, ExecError>;
    /// Server-side apply of every object in the manifest, in order.
    fn apply(&self, manifest: &Manifest, timeout: Duration) -> Result<Vec<ObjRef>, ExecError>;
    /// Apply the manifest's objects that the cluster does not have; those it has are left alone (they are
    /// someone else's: DRANET's DeviceClass, a cloud add-on's). Returns (applied, already there).
    fn apply_if_absent(
        &self,
        manifest: &Manifest,
        _timeout: Duration,
    ) -> Result<(Vec<ObjRef>, Vec<ObjRef>), ExecError> {
        Err(ExecError::Refused(format!(
            "{}: this executor cannot apply only what is absent",
            manifest.display_path
        )))
    }
    /// Which of `needed` the credentials lack, through SelfSubjectAccessReviews. Empty when all are allowed,
    /// in dry-run, and where the server cannot answer (no authorization API): the actions themselves then
    /// report a refusal.
    fn denied(&self, _needed: &[Access], _timeout: Duration) -> Result<Vec<Access>, ExecError> {
        Ok(Vec::new())
    }
    /// Delete every object in the manifest (missing ones are fine).
    fn delete(&self, manifest: &Manifest, timeout: Duration) -> Result<Vec<ObjRef>, ExecError>;
    /// Block until the condition holds, the deadline passes, or the wait fails.
    fn wait(&self, spec: &WaitSpec) -> Result<Value, ExecError>;
    /// Run a command in a container.
    fn exec(&self, spec: &ExecSpec) -> Result<ExecOutput, ExecError>;
    /// Run several commands at once (e.g. the two ranks of an NCCL check), each under its own deadline;
    /// one result per rank, in the same order. The first rank that fails (non-zero exit, timeout, lost
    /// connection) stops the others: they come back `cancelled` with what they printed so far, so a crash
    /// in one rank while its peer hangs in NCCL init ends at once with the crash's output. The live
    /// executor also kills a stopped (or timed-out) rank's command in its pod ([`kube::RANK_WRAPPER`]). A
    /// rank's own failure (an exit code, its deadline) is in its result (`code`, `error`); `Err` is for
    /// Ctrl-C and for a rank that could not run at all (the exec refused, no exit status): a cluster error.
    fn exec_many(&self, specs: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError>;
    /// Read one field of an object.
    fn get_field(&self, spec: &FieldSpec) -> Result<String, ExecError>;
    /// Copy a local file into a container.
    fn copy_to(&self, spec: &CopySpec) -> Result<(), ExecError>;
    /// Read a container's log.
    fn logs(&self, spec: &LogSpec) -> Result<String, ExecError>;
    /// List objects.
    fn list(&self, spec: &ListSpec) -> Result<Vec<Value>, ExecError>;
    /// Merge registry credentials natively (seed 000's jq pipeline). Secrets are never printed.
    fn merge_registry_secrets(&self, spec: &MergeSecretsSpec) -> Result<MergeSummary, ExecError>;
    /// Create or update an Opaque Secret (server-side apply); the values are never printed or planned.
    fn apply_secret(&self, spec: &SecretSpec) -> Result<ObjRef, ExecError> {
        Err(ExecError::Refused(format!(
            "secret/{}: this executor cannot create Secrets",
            spec.name
        )))
    }
}
