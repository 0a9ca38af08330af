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
//!
//! Files: `catalog` (every rule's id, severity and why), `pod` (the pod templates, containers and
//! environment the rules read), `document` (the rules over one manifest document), `nccl` (the NCCL,
//! UCX and net-plugin environment rules), `text` (rules over free text), `dockerfile` (Dockerfile rules).

use std::fmt;

use serde::Serialize;

use crate::DevicePattern;
use crate::manifest::parallel::{self, Flow};
use crate::manifest::{Document, Location, ManifestError, Severity};

mod catalog;
mod dockerfile;
mod document;
mod nccl;
mod pod;
mod text;

use catalog::ALL_RULES;
pub use dockerfile::{is_dockerfile, lint_dockerfile};
pub use text::lint_text;

/// What the linter knows about the target cluster and run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LintOptions {
    /// Number of nodes that have RDMA devices; enables `host-network-replicas-exceed-nodes`.
    pub rdma_nodes: Option<u32>,
    /// The profile's RDMA device name pattern (glob, e.g. `erdma_*` or `mlx5_*`; several may be
    /// given separated by commas); enables `nccl-ib-hca-mismatch`.
    pub device_pattern: Option<DevicePattern>,
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
    /// Where the offending (or missing) setting is (serialised as its fields, beside `severity`).
    #[serde(flatten)]
    pub location: Location,
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
            "{}[{}] {}: {}: {}\n  why: {}\n  fix: {}",
            self.severity,
            self.rule,
            self.location,
            self.location.path,
            self.message,
            self.why,
            self.fix
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
        document::lint_document(doc, options, &mut out);
    }
    sort(&mut out);
    out
}

/// What [`lint_stream`] found in a stream of manifests.
#[derive(Debug)]
pub struct LintedStream {
    /// Documents linted.
    pub documents: usize,
    /// Their findings, in document order, each document's sorted as [`lint`] sorts them.
    pub findings: Vec<Finding>,
    /// The stream's first parse error (the documents after it are not read).
    pub error: Option<ManifestError>,
}

/// Parses `text` (named `source` in messages) and lints its documents one at a time, on every core: the
/// findings of [`lint`] on each document of [`manifest::documents`](crate::manifest::documents)`(source,
/// text)` in turn, up to the stream's first parse error.
pub fn lint_stream(source: &str, text: &str, options: &LintOptions) -> LintedStream {
    let mut out = LintedStream {
        documents: 0,
        findings: Vec::new(),
        error: None,
    };
    let work = |doc: Document| lint(std::slice::from_ref(&doc), options);
    parallel::in_order(
        source,
        text,
        parallel::threads(),
        work,
        |base, _, outcome| {
            let found = match outcome {
                Ok(found) => found,
                Err(e) => {
                    out.error = Some(e);
                    return Flow::Stop;
                }
            };
            for mut f in found {
                out.documents += 1;
                for x in &mut f {
                    x.location.doc += base;
                }
                out.findings.extend(f);
            }
            Flow::Next
        },
    );
    out
}

/// Sorts findings as [`lint`] returns them (file, document, path, rule, message), for a caller that
/// lints documents one at a time and collects the findings.
pub fn sort_findings(findings: &mut [Finding]) {
    sort(findings);
}

pub(super) fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        let (la, lb) = (&a.location, &b.location);
        (&la.source, la.doc, &la.path, a.rule, &a.message)
            .cmp(&(&lb.source, lb.doc, &lb.path, b.rule, &b.message))
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_rule_id_is_unique() {
        let ids: BTreeSet<&str> = ALL_RULES.iter().map(|r| r.id).collect();
        assert_eq!(ids.len(), ALL_RULES.len());
    }
}
