//! Every key `--set` accepts ([`Values::KEYS`]): its kind, whether empty resets it, what it means and
//! which systems read it; and how a value's text is parsed and refused, by its kind, when it is given.

use super::grammar;
use super::{Values, ValuesError};
use crate::System;

/// Kinds of value: each is checked when parsed, and an error says what it must be with an example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// One line of text: non-empty, no control characters.
    Text,
    /// A DNS-1123 label (object names, namespaces).
    Name,
    /// A DNS-1123 subdomain (storage class names).
    Subdomain,
    /// A version string (`2.30.7`, `v1.14.0`).
    Version,
    /// A registry, with an optional repository path, images are pushed to.
    Registry,
    /// A repository path inside a registry (`ray-llm`, `pai/nccl-tests`).
    Repository,
    /// A full image reference by the OCI distribution grammar (`name[:tag][@digest]`).
    Image,
    /// A whole number within a range.
    Count {
        /// Smallest accepted.
        min: u32,
        /// Largest accepted.
        max: u32,
    },
    /// A Kubernetes quantity (`16`, `64Gi`, `1600G`, `500m`).
    Quantity,
    /// An nccl-tests size: bytes with an optional K, M or G (`512M`, `8G`).
    ByteSize,
    /// An absolute path with no control characters.
    Path,
    /// A program: a path or a bare name without spaces or shell metacharacters.
    Executable,
    /// An NCCL_DEBUG level.
    NcclDebug,
    /// A Kubernetes label value.
    LabelValue,
    /// `true` or `false`.
    Flag,
    /// One of a fixed list of words.
    Choice(&'static [&'static str]),
    /// `node_selector.<label key>`: a label value (empty removes the profile's entry).
    NodeSelector,
}

impl ValueKind {
    /// What a value of this kind must be, for error messages.
    pub fn expected(self) -> String {
        match self {
            ValueKind::Text => "one line of text (no control characters)".to_owned(),
            ValueKind::Name => {
                "a DNS-1123 label: lowercase letters, digits and '-', at most 63, starting and ending \
                 with a letter or digit"
                    .to_owned()
            }
            ValueKind::Subdomain => {
                "a DNS-1123 subdomain: dot-separated DNS labels, at most 253".to_owned()
            }
            ValueKind::Version => {
                "a version: letters, digits and '.', '_', '+', '-', starting with a letter or digit"
                    .to_owned()
            }
            ValueKind::Registry => {
                "a registry host with an optional repository path (OCI reference grammar, no tag, no \
                 spaces)"
                    .to_owned()
            }
            ValueKind::Repository => {
                "a repository path: lowercase components joined by '/', each separated inside by '.', \
                 '_', '__' or '-'"
                    .to_owned()
            }
            ValueKind::Image => {
                "an image reference [registry/]repository[:tag][@digest] by the OCI distribution \
                 grammar (lowercase repository, no spaces)"
                    .to_owned()
            }
            ValueKind::Count { min, max } => format!("a whole number from {min} to {max}"),
            ValueKind::Quantity => "a Kubernetes quantity such as 16, 500m, 64Gi or 1600G".to_owned(),
            ValueKind::ByteSize => {
                "a size in bytes with an optional K, M or G (as nccl-tests -b/-e read it)".to_owned()
            }
            ValueKind::Path => "an absolute path without control characters".to_owned(),
            ValueKind::Executable => {
                "a path or program name of letters, digits and '.', '_', '-', '+', '/' (no spaces or \
                 shell metacharacters)"
                    .to_owned()
            }
            ValueKind::NcclDebug => format!(
                "an NCCL_DEBUG level ({}), or empty to leave it unset",
                grammar::NCCL_DEBUG_LEVELS.join(", ")
            ),
            ValueKind::LabelValue => {
                "a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with \
                 a letter or digit"
                    .to_owned()
            }
            ValueKind::Flag => "true or false".to_owned(),
            ValueKind::Choice(words) => format!("one of {}", words.join(", ")),
            ValueKind::NodeSelector => {
                "a label value (letters, digits, '-', '_', '.', at most 63), or empty to remove the \
                 profile's entry"
                    .to_owned()
            }
        }
    }

    /// A short name of the kind, for the key listing.
    pub fn label(self) -> String {
        match self {
            ValueKind::Text => "text".to_owned(),
            ValueKind::Name => "DNS label".to_owned(),
            ValueKind::Subdomain => "DNS subdomain".to_owned(),
            ValueKind::Version => "version".to_owned(),
            ValueKind::Registry => "registry".to_owned(),
            ValueKind::Repository => "repository".to_owned(),
            ValueKind::Image => "image ref".to_owned(),
            ValueKind::Count { min, max } => format!("{min}..{max}"),
            ValueKind::Quantity => "quantity".to_owned(),
            ValueKind::ByteSize => "bytes".to_owned(),
            ValueKind::Path => "abs path".to_owned(),
            ValueKind::Executable => "program".to_owned(),
            ValueKind::NcclDebug => "NCCL_DEBUG level".to_owned(),
            ValueKind::LabelValue => "label value".to_owned(),
            ValueKind::Flag => "true|false".to_owned(),
            ValueKind::Choice(words) => words.join("|"),
            ValueKind::NodeSelector => "label value".to_owned(),
        }
    }

    /// A value of this kind, for examples where the key has no default.
    fn example(self) -> &'static str {
        match self {
            ValueKind::Text => "some text",
            ValueKind::Name => "my-name",
            ValueKind::Subdomain => "fast-ssd",
            ValueKind::Version => "2.30.7",
            ValueKind::Registry => "registry.example.com/me",
            ValueKind::Repository => "ray-llm",
            ValueKind::Image => "registry.example.com/me/ray-llm:2.57.0",
            ValueKind::Count { .. } => "2",
            ValueKind::Quantity => "64Gi",
            ValueKind::ByteSize => "512M",
            ValueKind::Path => "/tmp/nccl-%h-%p.log",
            ValueKind::Executable => "/opt/nccl_tests/build/all_reduce_perf",
            ValueKind::NcclDebug => "INFO",
            ValueKind::LabelValue => "p5.48xlarge",
            ValueKind::Flag => "true",
            ValueKind::Choice(words) => words.first().copied().unwrap_or_default(),
            ValueKind::NodeSelector => "gpu",
        }
    }

    /// Whether `v` (trimmed, non-empty) is a value of this kind.
    fn accepts(self, v: &str) -> bool {
        match self {
            ValueKind::Text => !v.chars().any(char::is_control),
            ValueKind::Name => grammar::is_dns_label(v),
            ValueKind::Subdomain => grammar::is_dns_subdomain(v),
            ValueKind::Version => grammar::is_version(v),
            ValueKind::Registry => grammar::is_registry(v),
            ValueKind::Repository => grammar::is_repository_path(v),
            ValueKind::Image => grammar::is_image_reference(v),
            ValueKind::Count { min, max } => v
                .parse::<u64>()
                .is_ok_and(|n| n >= u64::from(min) && n <= u64::from(max)),
            ValueKind::Quantity => is_quantity(v),
            ValueKind::ByteSize => grammar::byte_size(v).is_some(),
            ValueKind::Path => grammar::is_absolute_path(v),
            ValueKind::Executable => grammar::is_executable(v),
            ValueKind::NcclDebug => grammar::is_nccl_debug(v),
            ValueKind::LabelValue | ValueKind::NodeSelector => grammar::is_label_value(v),
            ValueKind::Flag => v == "true" || v == "false",
            ValueKind::Choice(words) => words.iter().any(|w| w.eq_ignore_ascii_case(v)),
        }
    }
}

/// One `--set` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key (`node_selector.<label>` stands for every `node_selector.` key).
    pub name: &'static str,
    /// What its value must be.
    pub kind: ValueKind,
    /// Whether an empty value resets it (to the derived default, or unset).
    pub optional: bool,
    /// One line: what it sets.
    pub about: &'static str,
    /// The systems whose output it changes; a `--set` of it for other systems is refused.
    pub systems: &'static [System],
}

const fn key(
    name: &'static str,
    kind: ValueKind,
    systems: &'static [System],
    about: &'static str,
) -> Key {
    Key {
        name,
        kind,
        optional: false,
        about,
        systems,
    }
}

impl Key {
    /// This key, with an empty value resetting it.
    const fn optional(self) -> Key {
        Key {
            optional: true,
            ..self
        }
    }
}

const fn count(min: u32, max: u32) -> ValueKind {
    ValueKind::Count { min, max }
}

use System::{
    Buildkit as BK, Dra as DRA, Image as IMG, MpiJob as MPI, NcclCheck as NC, RayCluster as RC,
    RdmaTestPod as POD, RdtDemo as RDT,
};
use ValueKind as K;

/// The systems that run pods holding the profile's RDMA devices.
const PODS: &[System] = &[RC, NC, MPI, POD];
/// The systems that name the derived image (the Dockerfile's header, the pods that run it).
const IMAGE_USERS: &[System] = &[IMG, RC, NC];

impl Values {
    /// Every key [`Values::set`] accepts: kind, meaning, and the systems that read it.
    pub const KEYS: &'static [Key] = &[
        key(
            "cluster_name",
            K::Name,
            &[RC, RDT],
            "RayCluster name (default ray-<short>-cluster)",
        ).optional(),
        key(
            "namespace",
            K::Name,
            &[BK, RC, NC, DRA, MPI, POD],
            "namespace of every object (default: none written)",
        ).optional(),
        key(
            "registry",
            K::Registry,
            IMAGE_USERS,
            "registry/repository the image is pushed to",
        ),
        key(
            "image_name",
            K::Repository,
            IMAGE_USERS,
            "image name inside the registry",
        ),
        key(
            "image",
            K::Image,
            IMAGE_USERS,
            "full image reference (default <registry>/<image_name>:<base tag>-<short>)",
        ).optional(),
        key("base_image", K::Image, IMAGE_USERS, "Dockerfile base image"),
        key("ray_version", K::Version, &[RC], "spec.rayVersion"),
        key(
            "worker_group",
            K::Name,
            &[RC],
            "Ray worker group name (default gpu-<short>)",
        ).optional(),
        key(
            "worker_replicas",
            count(1, 1024),
            &[RC],
            "Ray GPU worker pods (one per node with hostNetwork)",
        ),
        key(
            "gpus_per_worker",
            count(1, 64),
            &[RC, NC, MPI],
            "GPUs per worker / check pod / MPI worker",
        ),
        key(
            "head_gpus",
            count(0, 64),
            &[RC],
            "GPUs of the Ray head (0: CPU-only head)",
        ),
        key("head_cpu", K::Quantity, &[RC], "head CPU"),
        key("head_memory", K::Quantity, &[RC], "head memory"),
        key("worker_cpu", K::Quantity, &[RC, NC], "worker CPU"),
        key("worker_memory", K::Quantity, &[RC, NC], "worker memory"),
        key(
            "pull_secret",
            K::Name,
            &[RC, NC, MPI],
            "imagePullSecrets entry (empty: none)",
        ).optional(),
        key(
            "push_secret",
            K::Name,
            &[BK],
            "Secret with the merged docker config.json for BuildKit",
        ),
        key("buildkit_image", K::Image, &[BK], "BuildKit image"),
        key(
            "buildkit_cache_size",
            K::Quantity,
            &[BK],
            "BuildKit cache volume size",
        ),
        key(
            "storage_class",
            K::Subdomain,
            &[BK],
            "cache volume storage class (default: the profile's)",
        ).optional(),
        key(
            "nccl_version",
            K::Version,
            &[IMG],
            "NCCL version for the image (default: the profile's pin)",
        ).optional(),
        key(
            "with_rdmakit",
            K::Flag,
            &[IMG],
            "add the rdmakit binary stage to the Dockerfile",
        ),
        key(
            "size_mib",
            count(1, 262_144),
            &[RDT],
            "RDT demo tensor size in MiB",
        ),
        key(
            "iterations",
            count(1, 100_000),
            &[RDT],
            "RDT demo iterations",
        ),
        key(
            "check_size_mib",
            count(1, 262_144),
            &[NC],
            "NCCL check all_reduce size in MiB",
        ),
        key(
            "nccl_debug",
            K::NcclDebug,
            &[RC, NC, MPI],
            "NCCL_DEBUG (empty: unset)",
        ).optional(),
        key(
            "nccl_debug_file",
            K::Path,
            &[RC, NC],
            "NCCL_DEBUG_FILE (empty: stderr)",
        ).optional(),
        key(
            "node_selector.<label>",
            K::NodeSelector,
            PODS,
            "node selector entry (empty: remove the profile's)",
        ).optional(),
        key(
            "mpijob_name",
            K::Name,
            &[MPI],
            "MPIJob name (default nccl-test-<short>)",
        ).optional(),
        key("nccl_tests_image", K::Image, &[MPI], "nccl-tests image (no default: the profile or --set names it)").optional(),
        key("mpi_workers", count(1, 1024), &[MPI], "MPI worker pods"),
        key(
            "slots_per_worker",
            count(1, 64),
            &[MPI],
            "MPI slots per worker (default gpus_per_worker)",
        ).optional(),
        key(
            "nccl_tests_min_bytes",
            K::ByteSize,
            &[MPI],
            "all_reduce_perf -b",
        ),
        key(
            "nccl_tests_max_bytes",
            K::ByteSize,
            &[MPI],
            "all_reduce_perf -e",
        ),
        key(
            "nccl_shm_disable",
            K::Flag,
            &[MPI],
            "NCCL_SHM_DISABLE=1 in the MPIJob (benchmarks only)",
        ),
        key("test_pod_name", K::Name, &[POD], "plain RDMA test pod name"),
        key("test_image", K::Image, &[POD], "plain RDMA test pod image"),
        key(
            "test_command",
            K::Text,
            &[POD],
            "plain RDMA test pod shell command",
        ),
        key(
            "test_pod_gpus",
            count(0, 64),
            &[POD],
            "GPUs of the plain RDMA test pod",
        ),
        key(
            "instance_type",
            K::LabelValue,
            PODS,
            "instance type of the RDMA nodes, from the profile's instance_types (default: the profile's)",
        ).optional(),
        key(
            "all_reduce_perf",
            K::Executable,
            &[MPI],
            "path of all_reduce_perf in the nccl-tests image",
        ),
        key(
            "nccl_plugin_version",
            K::Version,
            &[IMG],
            "NCCL net plugin version for the image (default: the profile's)",
        ).optional(),
        key(
            "rdt_transport",
            K::Choice(RDT_TRANSPORTS),
            &[IMG, RDT],
            "RDT backend: nccl, or rdmakit (the Dockerfile installs the rdmakit_rdt wheel)",
        ),
    ];

    /// The entry of `key` in [`Values::KEYS`] (`node_selector.<anything>` is the node selector entry).
    pub fn key(key: &str) -> Option<&'static Key> {
        let key = key.trim();
        let name = if key.starts_with("node_selector.") {
            "node_selector.<label>"
        } else {
            key
        };
        Self::KEYS.iter().find(|k| k.name == name)
    }

    /// The default of `key` as `--set` would write it (empty: derived from the profile, or unset).
    pub fn default_text(key: &str) -> String {
        let json = serde_json::to_value(Values::default()).unwrap_or_default();
        super::text_of(&json, key.trim())
    }

    /// Every key as a plain-text table (key, kind, default, systems, meaning), for `--help`.
    pub fn keys_help() -> String {
        let rows: Vec<[String; 4]> = Self::KEYS
            .iter()
            .map(|k| {
                [
                    k.name.to_owned(),
                    k.kind.label(),
                    shown_default(k.name),
                    format!("{} [{}]", k.about, systems(k)),
                ]
            })
            .collect();
        let w0 = rows.iter().map(|r| r[0].len()).max().unwrap_or(0);
        let w1 = rows.iter().map(|r| r[1].len()).max().unwrap_or(0);
        let mut out = String::new();
        for r in rows {
            let default = if r[2].is_empty() {
                String::new()
            } else {
                format!(" (default {})", r[2])
            };
            out.push_str(&format!(
                "  {:w0$}  {:w1$}  {}{default}\n",
                r[0], r[1], r[3]
            ));
        }
        out
    }

    /// Every key as a Markdown table (key, kind, default, systems, meaning), for the docs.
    pub fn keys_markdown() -> String {
        let mut out = String::from(
            "| key | kind | default | systems | meaning |\n| --- | --- | --- | --- | --- |\n",
        );
        for k in Self::KEYS {
            let d = shown_default(k.name);
            let d = if d.is_empty() {
                String::new()
            } else {
                format!("`{d}`")
            };
            out.push_str(&format!(
                "| `{}` | {} | {d} | {} | {} |\n",
                k.name,
                k.kind.label().replace('|', "\\|"),
                systems(k),
                k.about
            ));
        }
        out
    }
}

fn shown_default(key: &str) -> String {
    Values::default_text(key)
}

fn systems(k: &Key) -> String {
    k.systems
        .iter()
        .map(|s| s.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The RDT backends `rdt_transport` accepts.
pub(super) const RDT_TRANSPORTS: &[&str] = &["nccl", "rdmakit"];

/// The error for `key=value`: names the key, the value (escaped), what it must be and an example.
pub(super) fn bad(key: &str, value: &str, expected: &str) -> ValuesError {
    ValuesError::BadValue {
        key: key.to_owned(),
        value: value.to_owned(),
        expected: expected.to_owned(),
    }
}

/// [`bad`] for a value of `spec`'s kind, with an example of the key.
fn bad_kind(key: &str, value: &str, spec: &Key) -> ValuesError {
    let default = Values::default_text(spec.name);
    let example = if !default.is_empty() && spec.kind.accepts(&default) {
        default
    } else {
        spec.kind.example().to_owned()
    };
    bad(
        key,
        value,
        &format!("{}, e.g. `{key}={example}`", spec.kind.expected()),
    )
}

/// A quantity as Kubernetes writes them: a decimal number and an optional suffix.
pub(super) fn is_quantity(s: &str) -> bool {
    const SUFFIXES: &[&str] = &[
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    !num.is_empty()
        && num.chars().filter(|c| *c == '.').count() <= 1
        && num != "."
        && SUFFIXES.contains(&suffix)
}

/// Checks `value` (trimmed) against `spec`'s kind: the error names `key`, the value and an example.
pub(super) fn check(key: &str, value: &str, spec: &Key) -> Result<(), ValuesError> {
    let v = value.trim();
    let ok = if v.is_empty() {
        spec.optional
    } else {
        spec.kind.accepts(v)
    };
    if ok {
        Ok(())
    } else {
        Err(bad_kind(key, value, spec))
    }
}

pub(super) enum Parsed {
    Text(String),
    Opt(Option<String>),
    Count(u32),
    OptCount(Option<u32>),
    Flag(bool),
}

impl Parsed {
    /// Parses `value` for `spec` after [`check`]ing it.
    pub(super) fn parse(key: &str, value: &str, spec: &Key) -> Result<Parsed, ValuesError> {
        check(key, value, spec)?;
        let v = value.trim();
        Ok(match spec.kind {
            ValueKind::Count { .. } if v.is_empty() => Parsed::OptCount(None),
            ValueKind::Count { .. } => {
                let n = v.parse().map_err(|_| bad_kind(key, value, spec))?;
                if spec.optional {
                    Parsed::OptCount(Some(n))
                } else {
                    Parsed::Count(n)
                }
            }
            ValueKind::Flag => Parsed::Flag(v == "true"),
            ValueKind::Choice(_) => Parsed::Text(v.to_ascii_lowercase()),
            _ if spec.optional => Parsed::Opt((!v.is_empty()).then(|| v.to_owned())),
            _ => Parsed::Text(v.to_owned()),
        })
    }

    pub(super) fn text(self) -> String {
        match self {
            Parsed::Text(s) => s,
            Parsed::Opt(s) => s.unwrap_or_default(),
            Parsed::Count(n) => n.to_string(),
            Parsed::OptCount(n) => n.map(|n| n.to_string()).unwrap_or_default(),
            Parsed::Flag(b) => b.to_string(),
        }
    }

    pub(super) fn opt(self) -> Option<String> {
        match self {
            Parsed::Opt(s) => s,
            other => Some(other.text()),
        }
    }

    pub(super) fn count(self) -> u32 {
        match self {
            Parsed::Count(n) => n,
            Parsed::OptCount(n) => n.unwrap_or(0),
            _ => 0,
        }
    }

    pub(super) fn opt_count(self) -> Option<u32> {
        match self {
            Parsed::OptCount(n) => n,
            Parsed::Count(n) => Some(n),
            _ => None,
        }
    }

    pub(super) fn flag(self) -> bool {
        matches!(self, Parsed::Flag(true))
    }
}
