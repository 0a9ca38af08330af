//! Every key `--set` accepts ([`Values::KEYS`]), the kind of each value, and how a value's text is
//! parsed and refused.

use super::{Values, ValuesError};
use crate::profile::is_dns_label;

/// Kinds of value, for `KEYS` and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Any non-empty string.
    Text,
    /// A string; empty clears it back to its derived default.
    OptionalText,
    /// A DNS-1123 label (object names).
    Name,
    /// A DNS-1123 label; empty clears it.
    OptionalName,
    /// An unsigned integer.
    Count,
    /// An unsigned integer; empty clears it.
    OptionalCount,
    /// A Kubernetes quantity (`16`, `64Gi`, `1600G`, `500m`).
    Quantity,
    /// `true` or `false`.
    Flag,
    /// `node_selector.<label key>`; empty value removes the profile's entry.
    NodeSelector,
}

impl ValueKind {
    pub(super) fn expected(self) -> &'static str {
        match self {
            ValueKind::Text => "a non-empty string",
            ValueKind::OptionalText => "a string (empty to use the default)",
            ValueKind::Name => "a lowercase DNS label (letters, digits, '-', at most 63)",
            ValueKind::OptionalName => "a lowercase DNS label, or empty to use the default",
            ValueKind::Count => "a whole number",
            ValueKind::OptionalCount => "a whole number, or empty to use the default",
            ValueKind::Quantity => "a Kubernetes quantity such as 16, 500m, 64Gi or 1600G",
            ValueKind::Flag => "true or false",
            ValueKind::NodeSelector => "a label value (empty removes the entry)",
        }
    }
}

impl Values {
    /// Every key [`Values::set`] accepts, with its kind and a one-line description.
    pub const KEYS: &'static [(&'static str, ValueKind, &'static str)] = &[
        (
            "cluster_name",
            ValueKind::OptionalName,
            "RayCluster name (default ray-<short>-cluster)",
        ),
        (
            "namespace",
            ValueKind::OptionalName,
            "namespace of every object (default: none written)",
        ),
        (
            "registry",
            ValueKind::Text,
            "registry/repository the image is pushed to",
        ),
        (
            "image_name",
            ValueKind::Text,
            "image name inside the registry",
        ),
        (
            "image",
            ValueKind::OptionalText,
            "full image reference (default <registry>/<image_name>:<base tag>-<short>)",
        ),
        ("base_image", ValueKind::Text, "Dockerfile base image"),
        ("ray_version", ValueKind::Text, "spec.rayVersion"),
        (
            "worker_group",
            ValueKind::OptionalName,
            "Ray worker group name (default gpu-<short>)",
        ),
        (
            "worker_replicas",
            ValueKind::Count,
            "Ray GPU worker pods (one per node with hostNetwork)",
        ),
        (
            "gpus_per_worker",
            ValueKind::Count,
            "GPUs per worker / check pod / MPI worker",
        ),
        (
            "head_gpus",
            ValueKind::Count,
            "GPUs of the Ray head (0: CPU-only head)",
        ),
        ("head_cpu", ValueKind::Quantity, "head CPU"),
        ("head_memory", ValueKind::Quantity, "head memory"),
        ("worker_cpu", ValueKind::Quantity, "worker CPU"),
        ("worker_memory", ValueKind::Quantity, "worker memory"),
        (
            "pull_secret",
            ValueKind::OptionalName,
            "imagePullSecrets entry (empty: none)",
        ),
        (
            "push_secret",
            ValueKind::Name,
            "Secret with the merged docker config.json for BuildKit",
        ),
        ("buildkit_image", ValueKind::Text, "BuildKit image"),
        (
            "buildkit_cache_size",
            ValueKind::Quantity,
            "BuildKit cache volume size",
        ),
        (
            "storage_class",
            ValueKind::OptionalText,
            "cache volume storage class (default: the profile's)",
        ),
        (
            "nccl_version",
            ValueKind::OptionalText,
            "NCCL version for the image (default: the profile's pin)",
        ),
        (
            "with_rdmakit",
            ValueKind::Flag,
            "add the rdmakit binary stage to the Dockerfile",
        ),
        ("size_mib", ValueKind::Count, "RDT demo tensor size in MiB"),
        ("iterations", ValueKind::Count, "RDT demo iterations"),
        (
            "check_size_mib",
            ValueKind::Count,
            "NCCL check all_reduce size in MiB",
        ),
        (
            "nccl_debug",
            ValueKind::OptionalText,
            "NCCL_DEBUG (empty: unset)",
        ),
        (
            "nccl_debug_file",
            ValueKind::OptionalText,
            "NCCL_DEBUG_FILE (empty: stderr)",
        ),
        (
            "node_selector.<label>",
            ValueKind::NodeSelector,
            "node selector entry",
        ),
        (
            "mpijob_name",
            ValueKind::OptionalName,
            "MPIJob name (default nccl-test-<short>)",
        ),
        ("nccl_tests_image", ValueKind::Text, "nccl-tests image"),
        ("mpi_workers", ValueKind::Count, "MPI worker pods"),
        (
            "slots_per_worker",
            ValueKind::OptionalCount,
            "MPI slots per worker (default gpus_per_worker)",
        ),
        (
            "nccl_tests_min_bytes",
            ValueKind::Text,
            "all_reduce_perf -b",
        ),
        (
            "nccl_tests_max_bytes",
            ValueKind::Text,
            "all_reduce_perf -e",
        ),
        (
            "nccl_shm_disable",
            ValueKind::Flag,
            "NCCL_SHM_DISABLE=1 in the MPIJob (benchmarks only)",
        ),
        ("test_pod_name", ValueKind::Name, "plain RDMA test pod name"),
        ("test_image", ValueKind::Text, "plain RDMA test pod image"),
        (
            "test_command",
            ValueKind::Text,
            "plain RDMA test pod shell command",
        ),
        (
            "test_pod_gpus",
            ValueKind::Count,
            "GPUs of the plain RDMA test pod",
        ),
        (
            "instance_type",
            ValueKind::OptionalText,
            "instance type of the RDMA nodes, from the profile's instance_types (default: the profile's)",
        ),
        (
            "all_reduce_perf",
            ValueKind::Text,
            "path of all_reduce_perf in the nccl-tests image",
        ),
        (
            "nccl_plugin_version",
            ValueKind::OptionalText,
            "NCCL net plugin version for the image (default: the profile's)",
        ),
        (
            "rdt_transport",
            ValueKind::Text,
            "RDT backend: nccl, or rdmakit (the Dockerfile installs the rdmakit_rdt wheel)",
        ),
    ];
}

pub(super) fn bad(key: &str, value: &str, expected: &str) -> ValuesError {
    ValuesError::BadValue {
        key: key.to_owned(),
        value: value.to_owned(),
        expected: expected.to_owned(),
    }
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

pub(super) enum Parsed {
    Text(String),
    Opt(Option<String>),
    Count(u32),
    OptCount(Option<u32>),
    Flag(bool),
}

impl Parsed {
    pub(super) fn parse(key: &str, value: &str, kind: ValueKind) -> Result<Parsed, ValuesError> {
        let v = value.trim();
        let err = || bad(key, value, kind.expected());
        Ok(match kind {
            ValueKind::Text | ValueKind::NodeSelector => {
                if v.is_empty() {
                    return Err(err());
                }
                Parsed::Text(v.to_owned())
            }
            ValueKind::OptionalText => Parsed::Opt((!v.is_empty()).then(|| v.to_owned())),
            ValueKind::Name => {
                if !is_dns_label(v) {
                    return Err(err());
                }
                Parsed::Text(v.to_owned())
            }
            ValueKind::OptionalName => {
                if v.is_empty() {
                    Parsed::Opt(None)
                } else if is_dns_label(v) {
                    Parsed::Opt(Some(v.to_owned()))
                } else {
                    return Err(err());
                }
            }
            ValueKind::Count => Parsed::Count(v.parse().map_err(|_| err())?),
            ValueKind::OptionalCount => {
                if v.is_empty() {
                    Parsed::OptCount(None)
                } else {
                    Parsed::OptCount(Some(v.parse().map_err(|_| err())?))
                }
            }
            ValueKind::Quantity => {
                if !is_quantity(v) {
                    return Err(err());
                }
                Parsed::Text(v.to_owned())
            }
            ValueKind::Flag => match v {
                "true" => Parsed::Flag(true),
                "false" => Parsed::Flag(false),
                _ => return Err(err()),
            },
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
