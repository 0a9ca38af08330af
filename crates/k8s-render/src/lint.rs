//! An RDMA linter for Kubernetes manifests.
//!
//! It finds pod templates anywhere in a document (Pod, Deployment, Job, RayCluster head and
//! worker groups, MPIJob replica specs, any CRD that embeds a `template.spec`), then checks them
//! for the pitfalls the runbooks describe: a Ray head that advertises GPUs it cannot use, RDMA
//! containers without `IPC_LOCK`, `hostNetwork` without `ClusterFirstWithHostNet`, NCCL settings
//! that silently fall back to TCP, NCCL versions that segfault on eRDMA, and vendor-specific
//! rules (Volcengine mGPU, topology mount). Each [`Finding`] carries a rule id, a severity, the
//! document and field path (and line), why it breaks RDMA, and the fix. [`rules`] lists them all.
//!
//! NCCL settings are read from `env` and from shell text in `command`/`args` (`export
//! NCCL_IB_HCA=...`, `mpirun -x NCCL_IB_HCA=...`); in an MPIJob, variables the launcher exports
//! with `-x` are attributed to the worker pods, where NCCL runs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::manifest::{Document, FieldPath, PathSeg, Severity};

#[path = "lint_rules.rs"]
mod catalog;
#[path = "lint_dockerfile.rs"]
mod dockerfile;
#[path = "lint_text.rs"]
mod text;
use catalog::*;
pub use dockerfile::{is_dockerfile, lint_dockerfile};
pub use text::lint_text;
use text::{good_nccl_pin, other_vendor, text_rules};

/// What the linter knows about the target cluster and run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LintOptions {
    /// Number of nodes that have RDMA devices; enables `host-network-replicas-exceed-nodes`.
    pub rdma_nodes: Option<u32>,
    /// The profile's RDMA device name pattern (glob, e.g. `erdma_*` or `mlx5_*`; several may be
    /// given separated by commas); enables `nccl-ib-hca-mismatch`.
    pub device_pattern: Option<String>,
    /// The manifests are a benchmark: `NCCL_SHM_DISABLE=1` is expected and `NCCL_IB_DISABLE=1`
    /// is only a warning (an intentional TCP A/B run).
    pub benchmark: bool,
    /// Extended resource names to treat as RDMA devices beyond the built-in ones
    /// (`aliyun/erdma`, `rdma/*`, `vke.volcengine.com/infiniband-rdma`, `mellanox.com/*`, ...).
    pub extra_rdma_resources: Vec<String>,
    /// The profile's RDMA userspace packages; a Dockerfile must install each of them
    /// (`dockerfile-missing-rdma-userspace`). Empty: libibverbs1 and ibverbs-providers.
    #[serde(default)]
    pub userspace_packages: Vec<String>,
    /// The profile's vendor APT repository (`http://mirrors.cloud.aliyuncs.com/erdma/apt/...`); a
    /// Dockerfile that installs RDMA packages must add it (`dockerfile-apt-without-vendor-source`).
    #[serde(default)]
    pub apt_source: Option<String>,
    /// The profile's `NCCL_IB_GID_INDEX`; enables `nccl-gid-index-mismatch`.
    #[serde(default)]
    pub gid_index: Option<u32>,
    /// The profile reaches the fabric through a net plugin or sockets, not NCCL's IB verbs
    /// transport: the `NCCL_IB_HCA` rules do not apply.
    #[serde(default)]
    pub not_ib_verbs: bool,
    /// The profile's net plugin; enables the `nccl-plugin-*` rules.
    #[serde(default)]
    pub plugin: Option<PluginLint>,
}

/// What the plugin rules check: the library a Dockerfile must install, the environment NCCL
/// containers must carry, and the versions known to fail.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PluginLint {
    /// Plugin name (`aws-ofi-nccl`).
    pub name: String,
    /// Library file (`libnccl-net-ofi.so`).
    pub library: String,
    /// Directory of the library in the container.
    pub library_dir: String,
    /// The image installs the plugin (Dockerfile rule); false: the node provides it.
    pub in_image: bool,
    /// Variables every NCCL container needs, with the profile's values (`FI_PROVIDER=efa`).
    pub required_env: Vec<(String, String)>,
    /// Versions known to fail.
    pub known_bad: Vec<String>,
    /// Why they fail.
    pub bad_reason: Option<String>,
    /// Versions known to work.
    pub known_good: Vec<String>,
    /// Text after which a version follows (`AWS_OFI_NCCL_VERSION`); the name is always one.
    pub version_markers: Vec<String>,
}

impl LintOptions {
    /// Options for manifests and Dockerfiles of `profile`: its device pattern, its device-plugin
    /// resources, its userspace packages and APT source. `rdma_nodes` and `benchmark` as given.
    pub fn for_profile(profile: &crate::Profile, rdma_nodes: Option<u32>, benchmark: bool) -> Self {
        LintOptions {
            rdma_nodes,
            device_pattern: Some(profile.devices.name_pattern.clone()),
            benchmark,
            extra_rdma_resources: match &profile.rdma {
                crate::RdmaAttachment::DevicePlugin { resources } => {
                    resources.keys().cloned().collect()
                }
                crate::RdmaAttachment::Dra(_) => Vec::new(),
            },
            userspace_packages: profile.userspace.packages.clone(),
            apt_source: profile
                .userspace
                .apt_source
                .as_ref()
                .map(|a| a.repo.clone()),
            gid_index: profile.nccl.gid_index,
            not_ib_verbs: !profile.uses_ib_verbs(),
            plugin: profile.net_plugin().map(|p| PluginLint {
                name: p.name.clone(),
                library: p.library.clone(),
                library_dir: p.library_dir.clone(),
                in_image: p.source == crate::profile::PluginSource::Image,
                required_env: p
                    .required_env
                    .iter()
                    .map(|k| (k.clone(), p.env.get(k).cloned().unwrap_or_default()))
                    .collect(),
                known_bad: p.known_bad.clone(),
                bad_reason: p.bad_reason.clone(),
                known_good: p.known_good.clone(),
                version_markers: p.version_markers.clone(),
            }),
        }
    }
}

/// A lint rule: stable id, default severity, and why it matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Stable id, e.g. `rdma-missing-ipc-lock`.
    pub id: &'static str,
    /// Severity most findings of this rule get.
    pub severity: Severity,
    /// One line: what the rule looks for.
    pub summary: &'static str,
    /// Why it breaks RDMA.
    pub why: &'static str,
}

/// Every rule the linter applies.
pub fn rules() -> Vec<Rule> {
    ALL_RULES.iter().map(|r| **r).collect()
}

/// The rule with id `id`, if there is one.
pub fn rule(id: &str) -> Option<Rule> {
    ALL_RULES.iter().find(|r| r.id == id).map(|r| **r)
}

/// What `rdmakit lint --explain RULE` prints: id, default severity, what the rule finds and why
/// it breaks RDMA. An unknown id gets the list of rule ids (closest first when one is close).
pub fn explain(id: &str) -> Result<String, String> {
    match rule(id.trim()) {
        Some(r) => Ok(format!(
            "{} ({})\n  finds: {}\n  why: {}\n  fix: each finding names the field and the change for that manifest",
            r.id, r.severity, r.summary, r.why
        )),
        None => {
            let ids: Vec<&str> = ALL_RULES.iter().map(|r| r.id).collect();
            let hint = crate::validate::suggest(id.trim(), ids.iter().copied())
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            Err(format!(
                "unknown lint rule `{id}`{hint}; rules: {}",
                ids.join(", ")
            ))
        }
    }
}

/// One lint finding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// Rule id (see [`rules`]).
    pub rule: &'static str,
    /// How serious it is.
    pub severity: Severity,
    /// Source file name.
    pub source: String,
    /// Document index.
    pub doc: usize,
    /// `Kind name` of the document.
    pub object: String,
    /// Field path of the offending (or missing) setting.
    pub path: FieldPath,
    /// Source line, when known.
    pub line: Option<u64>,
    /// What was found.
    pub message: String,
    /// Why it breaks RDMA.
    pub why: &'static str,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}[{}] {} doc {} ({})",
            self.severity, self.rule, self.source, self.doc, self.object
        )?;
        if let Some(l) = self.line {
            write!(f, " line {l}")?;
        }
        write!(
            f,
            ": {}: {}\n  why: {}\n  fix: {}",
            self.path, self.message, self.why, self.fix
        )
    }
}

/// Lints documents; findings are sorted by source, document, then path.
///
/// ```
/// use k8s_render::{lint, manifest};
/// let docs = manifest::parse_str("pod.yaml", r#"
/// apiVersion: v1
/// kind: Pod
/// metadata: {name: rdma-test}
/// spec:
///   containers:
///   - name: rdma-test
///     image: busybox
///     resources:
///       limits: {aliyun/erdma: 1}
/// "#)?;
/// let findings = lint::lint(&docs, &lint::LintOptions::default());
/// assert!(findings.iter().any(|f| f.rule == "rdma-missing-ipc-lock"));
/// # Ok::<(), k8s_render::manifest::ManifestError>(())
/// ```
pub fn lint(docs: &[Document], options: &LintOptions) -> Vec<Finding> {
    let mut out = Vec::new();
    for doc in docs {
        lint_document(doc, options, &mut out);
    }
    sort(&mut out);
    out
}

fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        (&a.source, a.doc, &a.path, a.rule, &a.message)
            .cmp(&(&b.source, b.doc, &b.path, b.rule, &b.message))
    });
}

/// An environment variable as the container sees it.
#[derive(Clone, Debug)]
struct EnvVar {
    name: String,
    /// `None` for `valueFrom`.
    value: Option<String>,
    path: FieldPath,
    /// Exported to MPI ranks with `mpirun -x`.
    mpi_export: bool,
}

fn shell_env_re() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r#"(?:^|[\s;'"(])(-x\s+)?((?:NCCL|UCX|FI|OFI_NCCL)_[A-Z0-9_]+|LD_LIBRARY_PATH)=("[^"]*"|'[^']*'|[^\s;&|'"\\)]*)"#,
        )
        .ok()
    })
    .as_ref()
}

fn container_env(c: &Map<String, Value>, cpath: &FieldPath) -> Vec<EnvVar> {
    let mut env = Vec::new();
    if let Some(list) = c.get("env").and_then(Value::as_array) {
        for (i, e) in list.iter().enumerate() {
            let Some(name) = e.get("name").and_then(Value::as_str) else {
                continue;
            };
            let value = match e.get("value") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Null) | None => None,
                Some(other) => Some(other.to_string()),
            };
            env.push(EnvVar {
                name: name.to_owned(),
                value,
                path: cpath.key("env").index(i).key("value"),
                mpi_export: false,
            });
        }
    }
    for field in ["command", "args"] {
        let Some(list) = c.get(field).and_then(Value::as_array) else {
            continue;
        };
        for (i, s) in list.iter().enumerate() {
            let Some(s) = s.as_str() else { continue };
            let Some(re) = shell_env_re() else { continue };
            for cap in re.captures_iter(s) {
                let name = cap.get(2).map_or("", |m| m.as_str()).to_owned();
                let raw = cap.get(3).map_or("", |m| m.as_str());
                let value = raw.trim_matches(|ch| ch == '"' || ch == '\'').to_owned();
                env.push(EnvVar {
                    name,
                    value: Some(value),
                    path: cpath.key(field).index(i),
                    mpi_export: cap.get(1).is_some(),
                });
            }
        }
    }
    env
}

/// A container inside a pod template.
struct Container<'d> {
    path: FieldPath,
    name: String,
    obj: &'d Map<String, Value>,
    env: Vec<EnvVar>,
}

impl Container<'_> {
    fn resources(&self, which: &str) -> Vec<(&str, &Value)> {
        self.obj
            .get("resources")
            .and_then(|r| r.get(which))
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default()
    }

    fn resource_names(&self) -> BTreeSet<&str> {
        self.resources("limits")
            .into_iter()
            .chain(self.resources("requests"))
            .map(|(k, _)| k)
            .collect()
    }

    fn claims(&self) -> Vec<(usize, &str)> {
        self.obj
            .get("resources")
            .and_then(|r| r.get("claims"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter_map(|(i, c)| c.get("name").and_then(Value::as_str).map(|n| (i, n)))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn security(&self) -> Option<&Map<String, Value>> {
        self.obj.get("securityContext").and_then(Value::as_object)
    }

    fn privileged(&self) -> bool {
        self.security()
            .and_then(|s| s.get("privileged"))
            .and_then(Value::as_bool)
            == Some(true)
    }

    fn has_ipc_lock(&self) -> bool {
        self.security()
            .and_then(|s| s.get("capabilities"))
            .and_then(|c| c.get("add"))
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter().filter_map(Value::as_str).any(|c| {
                    c.eq_ignore_ascii_case("IPC_LOCK")
                        || c.eq_ignore_ascii_case("CAP_IPC_LOCK")
                        || c == "ALL"
                })
            })
    }

    fn mounts(&self) -> Vec<(&str, &str)> {
        self.obj
            .get("volumeMounts")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| {
                        Some((
                            m.get("mountPath")?.as_str()?.trim_end_matches('/'),
                            m.get("name")?.as_str()?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn env_value(&self, name: &str) -> Option<&EnvVar> {
        // The last definition wins, as in a shell and in Kubernetes env lists.
        self.env.iter().rev().find(|e| e.name == name)
    }

    fn has_nccl_env(&self) -> bool {
        self.env.iter().any(|e| e.name.starts_with("NCCL_"))
    }
}

/// A pod template found in a document.
struct PodSite<'d> {
    path: FieldPath,
    spec: &'d Map<String, Value>,
    /// Path of the object that holds `replicas` and `template` (a worker group, a replica spec).
    holder: Option<(FieldPath, &'d Map<String, Value>)>,
    containers: Vec<Container<'d>>,
}

impl<'d> PodSite<'d> {
    fn new(
        path: FieldPath,
        spec: &'d Map<String, Value>,
        holder: Option<(FieldPath, &'d Map<String, Value>)>,
    ) -> Self {
        let containers = spec
            .get("containers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter_map(|(i, c)| {
                        let obj = c.as_object()?;
                        let cpath = path.key("containers").index(i);
                        Some(Container {
                            name: obj
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                                .to_owned(),
                            env: container_env(obj, &cpath),
                            path: cpath,
                            obj,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            path,
            spec,
            holder,
            containers,
        }
    }

    fn flag(&self, key: &str) -> bool {
        self.spec.get(key).and_then(Value::as_bool) == Some(true)
    }

    fn pod_claims(&self) -> Vec<(usize, &str, Option<&str>)> {
        self.spec
            .get("resourceClaims")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter_map(|(i, c)| {
                        let name = c.get("name")?.as_str()?;
                        let tmpl = c
                            .get("resourceClaimTemplateName")
                            .or_else(|| c.get("resourceClaimName"))
                            .and_then(Value::as_str);
                        Some((i, name, tmpl))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn is_ray_head(&self) -> bool {
        self.path.contains_key("headGroupSpec")
    }

    fn role(&self) -> String {
        if let Some((_, h)) = &self.holder
            && let Some(g) = h.get("groupName").and_then(Value::as_str)
        {
            return format!("worker group {g:?}");
        }
        if self.is_ray_head() {
            return "Ray head".to_owned();
        }
        let segs = self.path.segments();
        // mpiReplicaSpecs.Worker.template.spec → "Worker"
        if segs.len() >= 3
            && let PathSeg::Key(k) = &segs[segs.len() - 3]
            && segs.len() >= 4
            && matches!(&segs[segs.len() - 4], PathSeg::Key(p) if p.ends_with("ReplicaSpecs"))
        {
            return format!("{k} replicas");
        }
        "pod".to_owned()
    }

    /// `(replicas, maxReplicas)` as declared (or defaulted for single pods / Deployments).
    fn replicas(&self, doc_kind: &str) -> (Option<i64>, Option<i64>) {
        match &self.holder {
            Some((_, h)) => (
                h.get("replicas").and_then(Value::as_i64),
                h.get("maxReplicas").and_then(Value::as_i64),
            ),
            None if doc_kind == "Pod" => (Some(1), None),
            None => (None, None),
        }
    }
}

/// Finds every pod spec (an object with a `containers` list) in a document.
fn find_pods<'d>(doc: &'d Document) -> Vec<PodSite<'d>> {
    crate::pods::pod_specs(&doc.value)
        .into_iter()
        .map(|p| PodSite::new(p.path, p.spec, p.holder))
        .collect()
}

fn is_rdma_resource(name: &str, options: &LintOptions) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("rdma")
        || lower.contains("infiniband")
        || lower.starts_with("mellanox.com/")
        || lower == "vpc.amazonaws.com/efa"
        || options.extra_rdma_resources.iter().any(|r| r == name)
}

fn is_rdma_claim(name: &str, template: Option<&str>) -> bool {
    [Some(name), template].into_iter().flatten().any(|n| {
        let l = n.to_ascii_lowercase();
        l.contains("rdma") || l.contains("infiniband") || l.contains("roce") || l.contains("hca")
    })
}

fn is_gpu_resource(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    l.starts_with("nvidia.com/gpu") || l.starts_with("amd.com/gpu") || l.contains("mgpu")
}

struct Ctx<'a> {
    doc: &'a Document,
    options: &'a LintOptions,
    out: &'a mut Vec<Finding>,
}

impl Ctx<'_> {
    fn emit(
        &mut self,
        rule: &'static Rule,
        severity: Severity,
        path: FieldPath,
        message: String,
        fix: impl Into<String>,
    ) {
        self.out.push(Finding {
            rule: rule.id,
            severity,
            source: self.doc.source.clone(),
            doc: self.doc.index,
            object: self.doc.label(),
            line: self.doc.line_of(&path),
            path,
            message,
            why: rule.why,
            fix: fix.into(),
        });
    }

    fn hit(
        &mut self,
        rule: &'static Rule,
        path: FieldPath,
        message: String,
        fix: impl Into<String>,
    ) {
        self.emit(rule, rule.severity, path, message, fix);
    }
}

fn lint_document(doc: &Document, options: &LintOptions, out: &mut Vec<Finding>) {
    let mut cx = Ctx { doc, options, out };
    let mut pods = find_pods(doc);

    // mpirun -x exports from an MPIJob launcher belong to the worker ranks.
    if doc.kind == "MPIJob" {
        let mut exported = Vec::new();
        for p in pods.iter_mut().filter(|p| p.path.contains_key("Launcher")) {
            for c in &mut p.containers {
                let (mpi, own): (Vec<EnvVar>, Vec<EnvVar>) =
                    c.env.drain(..).partition(|e| e.mpi_export);
                c.env = own;
                exported.extend(mpi);
            }
        }
        for p in pods.iter_mut().filter(|p| !p.path.contains_key("Launcher")) {
            for c in &mut p.containers {
                c.env.splice(0..0, exported.iter().cloned());
            }
        }
    }

    let erdma_doc = doc_mentions_erdma(doc, &pods, options);
    for pod in &pods {
        lint_pod(&mut cx, pod, erdma_doc);
    }
    if doc.kind == "RayCluster" || doc.kind == "RayJob" || doc.kind == "RayService" {
        lint_ray_groups(&mut cx, &pods);
    }
    lint_strings(&mut cx, erdma_doc);
}

fn doc_mentions_erdma(doc: &Document, pods: &[PodSite<'_>], options: &LintOptions) -> bool {
    options
        .device_pattern
        .as_deref()
        .is_some_and(|p| p.contains("erdma"))
        || pods.iter().any(|p| {
            p.containers.iter().any(|c| {
                c.resource_names().iter().any(|r| r.contains("erdma"))
                    || c.env_value("NCCL_IB_HCA")
                        .and_then(|e| e.value.as_deref())
                        .is_some_and(|v| v.contains("erdma"))
            }) || p
                .pod_claims()
                .iter()
                .any(|(_, n, t)| n.contains("erdma") || t.is_some_and(|t| t.contains("erdma")))
        })
        || doc.kind == "DeviceClass" && doc.name.as_deref().is_some_and(|n| n.contains("erdma"))
}

fn lint_pod(cx: &mut Ctx<'_>, pod: &PodSite<'_>, erdma_doc: bool) {
    let options = cx.options;
    let host_network = pod.flag("hostNetwork");
    let host_ipc = pod.flag("hostIPC");
    let claims = pod.pod_claims();
    let rdma_claim_names: BTreeSet<&str> = claims
        .iter()
        .filter(|(_, n, t)| is_rdma_claim(n, *t))
        .map(|(_, n, _)| *n)
        .collect();
    let pod_rdma = pod.containers.iter().any(|c| {
        c.resource_names()
            .iter()
            .any(|r| is_rdma_resource(r, options))
            || c.claims().iter().any(|(_, n)| rdma_claim_names.contains(n))
    });
    let pod_has_any_claim = !claims.is_empty();
    let role = pod.role();

    lint_mesh_sidecar(cx, pod, &role);

    // hostNetwork needs ClusterFirstWithHostNet to resolve cluster names.
    if host_network {
        let dns = pod.spec.get("dnsPolicy").and_then(Value::as_str);
        if dns != Some("ClusterFirstWithHostNet") {
            let path = if dns.is_some() {
                pod.path.key("dnsPolicy")
            } else {
                pod.path.key("hostNetwork")
            };
            cx.hit(
                HOST_NETWORK_DNS,
                path,
                format!(
                    "{role} uses hostNetwork: true with dnsPolicy {}",
                    dns.unwrap_or("unset (ClusterFirst)")
                ),
                format!("set {}.dnsPolicy: ClusterFirstWithHostNet", pod.path),
            );
        }
        lint_host_network_replicas(cx, pod, &role);
    }

    // DRA: claims declared and referenced consistently.
    let referenced: BTreeSet<&str> = pod
        .containers
        .iter()
        .flat_map(|c| c.claims().into_iter().map(|(_, n)| n))
        .collect();
    for (i, name, _) in &claims {
        if !referenced.contains(name) {
            cx.hit(
                DRA_CLAIM,
                pod.path.key("resourceClaims").index(*i),
                format!("resourceClaim {name:?} is not listed in any container's resources.claims"),
                format!("add `resources: {{claims: [{{name: {name}}}]}}` to the container that runs NCCL"),
            );
        }
    }
    let declared: BTreeSet<&str> = claims.iter().map(|(_, n, _)| *n).collect();
    for c in &pod.containers {
        for (j, name) in c.claims() {
            if !declared.contains(name) {
                cx.hit(
                    DRA_CLAIM,
                    c.path.key("resources").key("claims").index(j),
                    format!("container {:?} uses claim {name:?}, which the pod does not declare", c.name),
                    format!("add `{{name: {name}, resourceClaimTemplateName: <template>}}` to {}.resourceClaims", pod.path),
                );
            }
        }
    }

    let vke_rdma = pod.containers.iter().any(|c| {
        c.resource_names()
            .contains("vke.volcengine.com/infiniband-rdma")
    });
    let pod_mounts_topology = pod.containers.iter().any(|c| {
        c.mounts()
            .iter()
            .any(|(p, _)| *p == "/var/run/nvidia-topologyd")
    });

    for c in &pod.containers {
        let names = c.resource_names();
        let c_rdma_resource = names.iter().any(|r| is_rdma_resource(r, options));
        let c_rdma =
            c_rdma_resource || c.claims().iter().any(|(_, n)| rdma_claim_names.contains(n));
        let c_gpu = names.iter().any(|r| is_gpu_resource(r));
        let sec_path = c.path.key("securityContext");

        if c_rdma && !c.has_ipc_lock() && !c.privileged() {
            cx.hit(
                MISSING_IPC_LOCK,
                sec_path.clone(),
                format!("container {:?} ({role}) uses an RDMA device but does not add IPC_LOCK", c.name),
                "add `securityContext: {capabilities: {add: [IPC_LOCK]}}` to the container (and make sure containerd runs with LimitMEMLOCK=infinity so `ulimit -l` is unlimited)",
            );
        }
        if c_rdma && c.privileged() {
            cx.hit(
                PRIVILEGED,
                sec_path.key("privileged"),
                format!("container {:?} ({role}) runs privileged to use RDMA", c.name),
                "drop `privileged: true` and add `capabilities: {add: [IPC_LOCK]}` instead; the RDMA device comes from the resource or claim",
            );
        }

        // Requests and limits of extended resources must agree.
        let limits: BTreeMap<&str, &Value> = c.resources("limits").into_iter().collect();
        for (name, req) in c.resources("requests") {
            if !(is_rdma_resource(name, options) || is_gpu_resource(name)) {
                continue;
            }
            let req_path = c.path.key("resources").key("requests").key(name);
            match limits.get(name) {
                None => cx.hit(
                    REQUEST_LIMIT,
                    req_path,
                    format!("{name} is requested but has no limit in container {:?}", c.name),
                    format!("set resources.limits[{name:?}] to the same value as the request (or only set the limit)"),
                ),
                Some(lim) if quantity_text(lim) != quantity_text(req) => cx.hit(
                    REQUEST_LIMIT,
                    req_path,
                    format!(
                        "{name} request {} differs from limit {} in container {:?}",
                        quantity_text(req),
                        quantity_text(lim),
                        c.name
                    ),
                    "make the request equal to the limit (extended resources cannot be overcommitted)",
                ),
                Some(_) => {}
            }
        }

        if vke_rdma && let Some(mgpu) = names.iter().find(|r| r.contains("mgpu")) {
            let limit_path = if limits.contains_key(mgpu) {
                "limits"
            } else {
                "requests"
            };
            cx.hit(
                VKE_MGPU,
                c.path.key("resources").key(limit_path).key(mgpu),
                format!("container {:?} requests {mgpu} together with vke.volcengine.com/infiniband-rdma", c.name),
                "request whole GPUs (nvidia.com/gpu) on RDMA pods; mGPU and the RDMA device plugin cannot be combined",
            );
        }
        if names.contains("vke.volcengine.com/infiniband-rdma") && !pod_mounts_topology {
            cx.hit(
                VKE_TOPOLOGY,
                c.path.key("volumeMounts"),
                format!("container {:?} uses vke.volcengine.com/infiniband-rdma without mounting /var/run/nvidia-topologyd", c.name),
                "mount a hostPath volume (path /var/run/nvidia-topologyd, type DirectoryOrCreate) read-only at /var/run/nvidia-topologyd",
            );
        }

        lint_nccl_env(cx, pod, c, &role, pod_rdma, pod_has_any_claim, erdma_doc);

        // /dev/shm for NCCL.
        let nccl_pod = c.has_nccl_env() || (c_rdma && c_gpu);
        if nccl_pod && !host_ipc && !has_memory_shm(pod, c) {
            cx.hit(
                NO_DEV_SHM,
                c.path.key("volumeMounts"),
                format!("container {:?} ({role}) runs NCCL without a memory-backed /dev/shm", c.name),
                "add a volume `{name: shm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}` mounted at /dev/shm (or set hostIPC: true)",
            );
        }
    }
}

fn quantity_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn has_memory_shm(pod: &PodSite<'_>, c: &Container<'_>) -> bool {
    let Some((_, vol)) = c.mounts().into_iter().find(|(p, _)| *p == "/dev/shm") else {
        return false;
    };
    pod.spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(vol))
        })
        .is_some_and(|v| {
            v.pointer("/emptyDir/medium").and_then(Value::as_str) == Some("Memory")
                || v.pointer("/hostPath/path").and_then(Value::as_str) == Some("/dev/shm")
        })
}

fn lint_host_network_replicas(cx: &mut Ctx<'_>, pod: &PodSite<'_>, role: &str) {
    let (replicas, max_replicas) = pod.replicas(&cx.doc.kind);
    let holder_path = pod
        .holder
        .as_ref()
        .map(|(p, _)| p.clone())
        .unwrap_or_else(|| pod.path.clone());
    if let Some(nodes) = cx.options.rdma_nodes {
        for (field, n) in [("replicas", replicas), ("maxReplicas", max_replicas)] {
            if let Some(n) = n
                && n > i64::from(nodes)
            {
                cx.hit(
                    REPLICAS_EXCEED_NODES,
                    holder_path.key(field),
                    format!("{role} asks for {field} {n} host-network pods but only {nodes} RDMA node(s) exist"),
                    format!("set {field} to at most {nodes} (one host-network pod per RDMA node)"),
                );
            }
        }
    }
    let many = replicas.unwrap_or(0) > 1 || max_replicas.unwrap_or(0) > 1;
    if many && !spreads_one_per_node(pod.spec) {
        cx.hit(
            NO_SPREAD,
            pod.path.key("affinity"),
            format!("{role} runs several host-network pods without a one-per-node rule"),
            "add affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution with topologyKey: kubernetes.io/hostname and a labelSelector matching the group's pods",
        );
    }
}

fn spreads_one_per_node(spec: &Map<String, Value>) -> bool {
    let anti = spec
        .get("affinity")
        .and_then(|a| a.pointer("/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution"))
        .and_then(Value::as_array)
        .is_some_and(|terms| {
            terms.iter().any(|t| {
                t.get("topologyKey").and_then(Value::as_str) == Some("kubernetes.io/hostname")
            })
        });
    let spread = spec
        .get("topologySpreadConstraints")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("topologyKey").and_then(Value::as_str) == Some("kubernetes.io/hostname")
                    && c.get("maxSkew").and_then(Value::as_i64) == Some(1)
                    && c.get("whenUnsatisfiable").and_then(Value::as_str) == Some("DoNotSchedule")
            })
        });
    anti || spread
}

#[allow(clippy::too_many_arguments)]
fn lint_nccl_env(
    cx: &mut Ctx<'_>,
    pod: &PodSite<'_>,
    c: &Container<'_>,
    role: &str,
    pod_rdma: bool,
    pod_has_any_claim: bool,
    erdma_doc: bool,
) {
    let options = cx.options;
    if let Some(hca) = c.env_value("NCCL_IB_HCA") {
        let value = hca.value.as_deref().unwrap_or("");
        if !pod_rdma && !pod_has_any_claim {
            cx.hit(
                HCA_WITHOUT_RDMA,
                hca.path.clone(),
                format!("container {:?} ({role}) gets NCCL_IB_HCA={value}{} but the pod requests no RDMA resource or claim", c.name, origin(hca)),
                "request the profile's RDMA resource in resources.limits (e.g. aliyun/erdma: 1, rdma/rdma_shared_device_a: 1, vke.volcengine.com/infiniband-rdma: 1) or add a DRA resourceClaim",
            );
        }
        if !options.not_ib_verbs
            && let (Some(pattern), Some(v)) =
                (options.device_pattern.as_deref(), hca.value.as_deref())
            && let Some(bad) = hca_mismatch(v, pattern)
        {
            cx.hit(
                HCA_MISMATCH,
                hca.path.clone(),
                format!("NCCL_IB_HCA={v}: {bad:?} does not match the device pattern {pattern}"),
                format!(
                    "set NCCL_IB_HCA to a device name (or prefix) matching {pattern}, e.g. {}",
                    example_device(pattern)
                ),
            );
        }
        if !options.not_ib_verbs
            && c.env_value("NCCL_SOCKET_IFNAME").is_none()
            && pod.flag("hostNetwork")
        {
            cx.hit(
                SOCKET_IFNAME,
                hca.path.clone(),
                format!("container {:?} ({role}) uses NCCL_IB_HCA on the host network without NCCL_SOCKET_IFNAME", c.name),
                "set NCCL_SOCKET_IFNAME to the node's primary interface (eth0 on ACK/VKE nodes)",
            );
        }
    }
    lint_plugin_env(cx, c, role, pod_rdma);
    if let Some(e) = c.env_value("NCCL_SHM_DISABLE")
        && is_on(e.value.as_deref())
        && !options.benchmark
    {
        cx.hit(
            SHM_DISABLED,
            e.path.clone(),
            format!("container {:?} ({role}) gets NCCL_SHM_DISABLE=1{}", c.name, origin(e)),
            "remove NCCL_SHM_DISABLE for production workloads (keep it only when benchmarking the NIC; lint with benchmark mode then)",
        );
    }
    if let Some(e) = c.env_value("NCCL_IB_DISABLE")
        && is_on(e.value.as_deref())
    {
        let severity = if options.benchmark {
            Severity::Warning
        } else {
            Severity::Error
        };
        cx.emit(
            IB_DISABLED,
            severity,
            e.path.clone(),
            format!("container {:?} ({role}) gets NCCL_IB_DISABLE=1{}: NCCL will use TCP sockets", c.name, origin(e)),
            "set NCCL_IB_DISABLE=0 (or remove it); keep =1 only for a deliberate TCP comparison run",
        );
    }
    if let Some(e) = c.env_value("UCX_NET_DEVICES")
        && e.value.as_deref().map(str::trim) == Some("all")
    {
        cx.hit(
            UCX_ALL,
            e.path.clone(),
            format!(
                "container {:?} ({role}) sets UCX_NET_DEVICES=all{}",
                c.name,
                origin(e)
            ),
            "name the RDMA port, e.g. UCX_NET_DEVICES=mlx5_0:1 (`ibv_devinfo` lists the ports)",
        );
    }
    if let Some(e) = c.env_value("NCCL_SOCKET_IFNAME")
        && matches!(
            e.value.as_deref().map(str::trim),
            Some("" | "^" | "=" | "^=")
        )
    {
        cx.hit(
            SOCKET_IFNAME_NOTHING,
            e.path.clone(),
            format!(
                "container {:?} ({role}) sets NCCL_SOCKET_IFNAME={:?}{}, which selects no interface",
                c.name,
                e.value.as_deref().unwrap_or(""),
                origin(e)
            ),
            "name the interface (NCCL_SOCKET_IFNAME=eth0) or exclude real ones (^lo,docker0)",
        );
    }
    if let (Some(want), Some(e)) = (options.gid_index, c.env_value("NCCL_IB_GID_INDEX"))
        && let Some(v) = e.value.as_deref()
        && v.trim().parse::<u32>().ok() != Some(want)
    {
        cx.hit(
            GID_INDEX,
            e.path.clone(),
            format!(
                "container {:?} ({role}) sets NCCL_IB_GID_INDEX={v}{}, the profile uses {want}",
                c.name,
                origin(e)
            ),
            format!("set NCCL_IB_GID_INDEX={want} (or remove it and let the profile's env set it)"),
        );
    }
    if pod_rdma
        && let Some(e) = c.env_value("PYTORCH_CUDA_ALLOC_CONF")
        && e.value.as_deref().is_some_and(|v| {
            v.replace(' ', "")
                .to_ascii_lowercase()
                .contains("expandable_segments:true")
        })
    {
        cx.hit(
            EXPANDABLE_SEGMENTS,
            e.path.clone(),
            format!(
                "container {:?} ({role}) enables expandable_segments in PYTORCH_CUDA_ALLOC_CONF on an RDMA pod{}",
                c.name,
                origin(e)
            ),
            "remove expandable_segments:True from PYTORCH_CUDA_ALLOC_CONF on pods that move tensors over RDMA",
        );
    }
    if erdma_doc && let Some(e) = c.env.iter().find(|e| e.name.starts_with("UCX_")) {
        cx.emit(
            NIXL_ERDMA,
            Severity::Warning,
            e.path.clone(),
            format!("container {:?} ({role}) configures UCX ({}) on eRDMA", c.name, e.name),
            "stock UCX cannot use eRDMA (no UD, no SRQ); use NCCL, or a UCX rebuilt with the eRDMA patch",
        );
    }
}

/// The plugin's required environment on an RDMA container that runs NCCL, and `NCCL_NET`
/// forcing sockets where the profile's plugin should carry the traffic.
fn lint_plugin_env(cx: &mut Ctx<'_>, c: &Container<'_>, role: &str, pod_rdma: bool) {
    let Some(plugin) = cx.options.plugin.as_ref() else {
        return;
    };
    // Only containers that run NCCL on the fabric: an RDMA device and NCCL settings.
    if !(pod_rdma && c.has_nccl_env()) {
        return;
    }
    for (key, want) in &plugin.required_env {
        match c.env_value(key) {
            None => cx.hit(
                PLUGIN_ENV,
                c.path.key("env"),
                format!(
                    "container {:?} ({role}) runs NCCL with the {} plugin but does not set {key}",
                    c.name, plugin.name
                ),
                format!("add `{{name: {key}, value: \"{want}\"}}` to the container's env (or `-x {key}={want}` to mpirun)"),
            ),
            // A list value (LD_LIBRARY_PATH=a:b, NCCL_NET=x,y) is fine when it holds the wanted entry.
            Some(e)
                if e.value.as_deref().is_some_and(|v| {
                    !want.is_empty()
                        && v.trim() != want
                        && !v.split([':', ',']).any(|part| part.trim() == want)
                }) =>
            {
                let got = e.value.clone().unwrap_or_default();
                cx.hit(
                    PLUGIN_ENV,
                    e.path.clone(),
                    format!(
                        "container {:?} ({role}) sets {key}={got}{}, the {} plugin needs {key}={want}",
                        c.name,
                        origin(e),
                        plugin.name
                    ),
                    format!("set {key}={want}"),
                );
            }
            Some(_) => {}
        }
    }
    if !plugin.in_image {
        let dir = plugin.library_dir.trim_end_matches('/');
        let mounted = c.mounts().iter().any(|(p, _)| {
            let p = p.trim_end_matches('/');
            dir == p || dir.starts_with(&format!("{p}/"))
        });
        if !mounted {
            cx.hit(
                PLUGIN_HOST_MOUNT,
                c.path.key("volumeMounts"),
                format!(
                    "container {:?} ({role}) runs NCCL with the {} plugin but mounts nothing at {}",
                    c.name, plugin.name, plugin.library_dir
                ),
                format!(
                    "mount the node's plugin directory (a hostPath volume) at {} or above it, as the profile's pod.host_paths do",
                    plugin.library_dir
                ),
            );
        }
    }
    if let Some(e) = c.env_value("NCCL_NET")
        && e.value
            .as_deref()
            .map(str::trim)
            .is_some_and(|v| v.eq_ignore_ascii_case("socket"))
    {
        let severity = if cx.options.benchmark {
            Severity::Warning
        } else {
            Severity::Error
        };
        cx.emit(
            PLUGIN_SOCKETS,
            severity,
            e.path.clone(),
            format!(
                "container {:?} ({role}) sets NCCL_NET=Socket{}: the {} plugin is not used",
                c.name,
                origin(e),
                plugin.name
            ),
            "remove NCCL_NET=Socket (keep it only for a deliberate TCP comparison run)",
        );
    }
}

/// A service-mesh sidecar on a pod that runs NCCL: injection asked for in the pod template's (or
/// Pod's) labels or annotations, or a proxy container already in the spec.
fn lint_mesh_sidecar(cx: &mut Ctx<'_>, pod: &PodSite<'_>, role: &str) {
    if !pod.containers.iter().any(Container::has_nccl_env) {
        return;
    }
    let meta_path = match &pod.holder {
        Some((hp, _)) => hp.key("template").key("metadata"),
        None => pod
            .path
            .parent()
            .unwrap_or_else(FieldPath::root)
            .key("metadata"),
    };
    let meta = meta_path.lookup(&cx.doc.value);
    for section in ["labels", "annotations"] {
        for key in ["sidecar.istio.io/inject", "linkerd.io/inject"] {
            let Some(v) = meta
                .and_then(|m| m.get(section))
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
            else {
                continue;
            };
            if matches!(v, "true" | "enabled") {
                let off = if key.starts_with("linkerd") {
                    "disabled"
                } else {
                    "false"
                };
                cx.hit(
                    MESH_SIDECAR,
                    meta_path.key(section).key(key),
                    format!("{role} asks for a mesh sidecar ({key}: {v:?}) on a pod that runs NCCL"),
                    format!("set {key}: \"{off}\" on NCCL pods (or exclude their namespace from injection)"),
                );
            }
        }
    }
    for c in &pod.containers {
        if matches!(c.name.as_str(), "istio-proxy" | "linkerd-proxy") {
            cx.hit(
                MESH_SIDECAR,
                c.path.clone(),
                format!("{role} runs the mesh proxy container {:?} beside NCCL", c.name),
                "remove the proxy from NCCL pods: disable injection for them (sidecar.istio.io/inject: \"false\")",
            );
        }
    }
}

/// Where a variable comes from, when that is not the container itself.
fn origin(e: &EnvVar) -> &'static str {
    if e.mpi_export {
        " (exported by the launcher's mpirun -x)"
    } else {
        ""
    }
}

fn is_on(v: Option<&str>) -> bool {
    matches!(
        v.map(|s| s.trim().to_ascii_lowercase()).as_deref(),
        Some("1" | "true" | "yes" | "on")
    )
}

/// Returns the first `NCCL_IB_HCA` entry that matches no device of the pattern(s).
fn hca_mismatch(value: &str, patterns: &str) -> Option<String> {
    let v = value.trim();
    if v.is_empty() || v.starts_with('^') {
        return None; // exclusion lists name devices to avoid
    }
    let (exact, list) = match v.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let pats: Vec<&str> = patterns
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    for entry in list.split(',') {
        let dev = entry.split(':').next().unwrap_or("").trim();
        if dev.is_empty() {
            continue;
        }
        let ok = pats.iter().any(|p| {
            let prefix = p.split(['*', '?']).next().unwrap_or("");
            glob_match(p, dev) || (!exact && (prefix.starts_with(dev) || dev.starts_with(prefix)))
        });
        if !ok {
            return Some(dev.to_owned());
        }
    }
    None
}

fn example_device(pattern: &str) -> String {
    let first = pattern.split(',').next().unwrap_or(pattern).trim();
    first.replace(['*', '?'], "0")
}

fn glob_match(pattern: &str, text: &str) -> bool {
    fn rec(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| rec(rest, &t[i..])),
            Some(('?', rest)) => !t.is_empty() && rec(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && rec(rest, &t[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    rec(&p, &t)
}

fn lint_ray_groups(cx: &mut Ctx<'_>, pods: &[PodSite<'_>]) {
    for pod in pods {
        let Some((hpath, holder)) = &pod.holder else {
            continue;
        };
        let params = holder.get("rayStartParams").and_then(Value::as_object);
        if let Some(params) = params {
            for (k, v) in params {
                if !v.is_string() {
                    let quoted = Value::String(quantity_text(v));
                    cx.hit(
                        RAY_START_PARAMS_STRING,
                        hpath.key("rayStartParams").key(k),
                        format!("rayStartParams.{k} is {v}, not a string"),
                        format!("quote it: {k}: {quoted}"),
                    );
                }
            }
        }
        if pod.is_ray_head() {
            let head_has_gpu_limit = pod.containers.iter().any(|c| {
                c.resources("limits")
                    .iter()
                    .any(|(r, _)| is_gpu_resource(r))
            });
            let num_gpus = params.and_then(|p| p.get("num-gpus"));
            let zero = num_gpus.is_some_and(|v| quantity_text(v).trim() == "0");
            if !head_has_gpu_limit && !zero {
                let path = match (params, num_gpus) {
                    (_, Some(_)) => hpath.key("rayStartParams").key("num-gpus"),
                    (Some(_), None) => hpath.key("rayStartParams"),
                    (None, None) => hpath.clone(),
                };
                cx.hit(
                    RAY_HEAD_NUM_GPUS,
                    path,
                    "the Ray head has no GPU limit and does not set num-gpus: \"0\"".to_owned(),
                    "set headGroupSpec.rayStartParams: {num-cpus: \"0\", num-gpus: \"0\"} so no work is scheduled on the head",
                );
            }
        }
    }
}

/// Text rules over every string in the document (commands, args, env, ConfigMap data).
fn lint_strings(cx: &mut Ctx<'_>, erdma: bool) {
    fn collect<'v>(v: &'v Value, path: FieldPath, out: &mut Vec<(FieldPath, &'v str)>) {
        match v {
            Value::String(s) => out.push((path, s)),
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    collect(x, path.index(i), out);
                }
            }
            Value::Object(m) => {
                for (k, x) in m {
                    collect(x, path.key(k), out);
                }
            }
            _ => {}
        }
    }
    let mut strings = Vec::new();
    collect(&cx.doc.value, FieldPath::root(), &mut strings);
    let has_good_pin = strings.iter().any(|(_, s)| good_nccl_pin(s));
    for (path, s) in strings {
        for ((rule, severity, message, fix), _) in text_rules(
            s,
            erdma,
            other_vendor(cx.options),
            has_good_pin,
            cx.options.plugin.as_ref(),
        ) {
            cx.emit(rule, severity, path.clone(), message, fix);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hca_patterns() {
        assert_eq!(hca_mismatch("erdma", "erdma_*"), None);
        assert_eq!(hca_mismatch("erdma_0", "erdma_*"), None);
        assert_eq!(hca_mismatch("erdma_0:1,erdma_1:1", "erdma_*"), None);
        assert_eq!(hca_mismatch("mlx5_0", "erdma_*"), Some("mlx5_0".to_owned()));
        assert_eq!(hca_mismatch("=mlx5", "mlx5_*"), Some("mlx5".to_owned()));
        assert_eq!(hca_mismatch("^mlx5_2", "erdma_*"), None);
        assert_eq!(hca_mismatch("mlx5_1", "erdma_*,mlx5_*"), None);
    }

    #[test]
    fn bad_nccl_regex() {
        let re = text::bad_nccl_re().expect("regex compiles");
        assert!(re.is_match("pip install nvidia-nccl-cu13==2.28.9"));
        assert!(re.is_match("nvidia-nccl-cu12==2.28.7 torch"));
        assert!(re.is_match("apt-get install libnccl2=2.28.9-1+cuda13.0"));
        assert!(re.is_match("NCCL_VERSION=2.28.7"));
        assert!(!re.is_match("nvidia-nccl-cu13==2.30.7"));
        assert!(!re.is_match("nvidia-nccl-cu13==2.28.3"));
        assert!(!re.is_match("nccl-tests:12.2.2-cudnn8-devel-ubuntu22.04-nccl2.19.3-1-85f9143"));
        assert!(!re.is_match("nvidia-nccl-cu13==2.28.90"));
    }

    #[test]
    fn every_rule_id_is_unique() {
        let ids: BTreeSet<&str> = ALL_RULES.iter().map(|r| r.id).collect();
        assert_eq!(ids.len(), ALL_RULES.len());
    }
}
