//! Values: the few per-deployment settings (names, image, sizes) that complete a profile.
//!
//! The defaults reproduce seed 000 (Ray RDT over eRDMA on ACK) when combined with the `aliyun-erdma`
//! profile. Fields shown as `None` derive their value from the profile (`ray-{short_name}-cluster`, ...).
//! `rdmakit --set key=value` goes through [`Values::set`]; `keys` holds every key it accepts
//! ([`Values::KEYS`]) and how each kind of value is parsed.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::profile::Profile;

pub mod grammar;
mod keys;
mod read_by;

pub use keys::{Key, ValueKind};
use keys::{Parsed, bad};

/// Per-deployment settings. See [`Values::KEYS`] for every key `set` accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Values {
    /// RayCluster name; default `ray-{short_name}-cluster` (`ray-erdma-cluster`).
    pub cluster_name: Option<String>,
    /// Namespace written into every object; `None` leaves it to `kubectl -n` / the context.
    pub namespace: Option<String>,
    /// Registry (with repository path) the derived image is pushed to.
    pub registry: String,
    /// Image name inside the registry.
    pub image_name: String,
    /// Full image reference for Ray and check pods; default `{registry}/{image_name}:{base tag}-{short_name}`.
    pub image: Option<String>,
    /// Base image of the Dockerfile.
    pub base_image: String,
    /// `spec.rayVersion` of the RayCluster.
    pub ray_version: String,
    /// Worker group name; default `gpu-{short_name}`.
    pub worker_group: Option<String>,
    /// Ray GPU worker pods (with hostNetwork, one per node: set it to the node count).
    pub worker_replicas: u32,
    /// GPUs per Ray worker, NCCL check pod and MPI worker.
    pub gpus_per_worker: u32,
    /// GPUs of the Ray head. 0 (default) makes a CPU-only head with `num-cpus: "0"` and `num-gpus: "0"`;
    /// more gives the head GPUs and the profile's RDMA resources (seed 001).
    pub head_gpus: u32,
    /// CPU of the head (requests = limits).
    pub head_cpu: String,
    /// Memory of the head (requests = limits).
    pub head_memory: String,
    /// CPU of each worker (requests = limits).
    pub worker_cpu: String,
    /// Memory of each worker (requests = limits).
    pub worker_memory: String,
    /// docker-registry Secret used to pull the image (`imagePullSecrets`); `None` for public images.
    pub pull_secret: Option<String>,
    /// Secret holding the merged docker `config.json` mounted into the BuildKit client.
    pub push_secret: String,
    /// BuildKit image for buildkitd and the client.
    pub buildkit_image: String,
    /// Size of the BuildKit cache volume (unpacking the Ray image needs more than 100 GiB).
    pub buildkit_cache_size: String,
    /// Storage class of the cache volume; default the profile's, else the cluster default.
    pub storage_class: Option<String>,
    /// NCCL version for the image; default the profile's pin. Known-bad versions are refused.
    pub nccl_version: Option<String>,
    /// Add a Dockerfile stage that copies an `rdmakit` binary from the build context into the image.
    pub with_rdmakit: bool,
    /// Tensor size of the RDT demo in MiB.
    pub size_mib: u32,
    /// Iterations of the RDT demo.
    pub iterations: u32,
    /// Size of the NCCL check all_reduce in MiB.
    pub check_size_mib: u32,
    /// `NCCL_DEBUG` on RDMA containers (empty: not set).
    pub nccl_debug: String,
    /// `NCCL_DEBUG_FILE` (`%h` host, `%p` pid; empty: log to stderr).
    pub nccl_debug_file: String,
    /// Extra node selector entries; an empty value removes a profile entry.
    pub node_selector: BTreeMap<String, String>,
    /// MPIJob name; default `nccl-test-{short_name}`.
    pub mpijob_name: Option<String>,
    /// nccl-tests image of the MPIJob.
    pub nccl_tests_image: String,
    /// MPI worker pods.
    pub mpi_workers: u32,
    /// MPI slots per worker; default `gpus_per_worker`.
    pub slots_per_worker: Option<u32>,
    /// `all_reduce_perf -b`.
    pub nccl_tests_min_bytes: String,
    /// `all_reduce_perf -e`.
    pub nccl_tests_max_bytes: String,
    /// `NCCL_SHM_DISABLE=1` in the MPIJob: forces intra-node traffic over RDMA. For benchmarks only.
    pub nccl_shm_disable: bool,
    /// Name of the plain RDMA test pod.
    pub test_pod_name: String,
    /// Image of the plain RDMA test pod.
    pub test_image: String,
    /// Shell command of the plain RDMA test pod.
    pub test_command: String,
    /// GPUs of the plain RDMA test pod.
    pub test_pod_gpus: u32,
    /// Instance type of the RDMA nodes, a key of the profile's `instance_types`; default the
    /// profile's. Its GPU count is the default `gpus_per_worker` and its resources the
    /// device-plugin counts.
    pub instance_type: Option<String>,
    /// Path of `all_reduce_perf` in the nccl-tests image.
    pub all_reduce_perf: String,
    /// Net plugin version for the image (`${VERSION}` of its install steps); default the
    /// profile's. Known-bad versions are refused.
    pub nccl_plugin_version: Option<String>,
    /// Ray Direct Transport backend of the RDT demo: `nccl` (default) or `rdmakit` (the
    /// rdmakit_rdt wheel, `tensor_transport="RDMAKIT"`); `rdmakit` makes the Dockerfile install the
    /// wheel from the build context.
    pub rdt_transport: String,
    /// Keys given through [`Values::set`]: a profile's value defaults never replace them.
    #[serde(skip)]
    explicit: BTreeSet<String>,
}

impl Default for Values {
    fn default() -> Self {
        Values {
            cluster_name: None,
            namespace: None,
            registry: "registry.example.com/your-namespace".to_owned(),
            image_name: "ray-llm".to_owned(),
            image: None,
            base_image: "rayproject/ray-llm:2.57.0-py312-cu130".to_owned(),
            ray_version: "2.57.0".to_owned(),
            worker_group: None,
            worker_replicas: 2,
            gpus_per_worker: 1,
            head_gpus: 0,
            head_cpu: "4".to_owned(),
            head_memory: "16Gi".to_owned(),
            worker_cpu: "16".to_owned(),
            worker_memory: "64Gi".to_owned(),
            pull_secret: None,
            push_secret: "buildkit-push-creds".to_owned(),
            buildkit_image: "moby/buildkit:v0.23.2".to_owned(),
            buildkit_cache_size: "200Gi".to_owned(),
            storage_class: None,
            nccl_version: None,
            with_rdmakit: false,
            size_mib: 512,
            iterations: 3,
            check_size_mib: 512,
            nccl_debug: "INFO".to_owned(),
            nccl_debug_file: "/tmp/nccl-%h-%p.log".to_owned(),
            node_selector: BTreeMap::new(),
            mpijob_name: None,
            nccl_tests_image: String::new(),
            mpi_workers: 2,
            slots_per_worker: None,
            nccl_tests_min_bytes: "512M".to_owned(),
            nccl_tests_max_bytes: "8G".to_owned(),
            nccl_shm_disable: true,
            test_pod_name: "rdma-test".to_owned(),
            test_image: "busybox".to_owned(),
            test_command: "sleep 10000".to_owned(),
            test_pod_gpus: 0,
            instance_type: None,
            all_reduce_perf: "/opt/nccl_tests/build/all_reduce_perf".to_owned(),
            nccl_plugin_version: None,
            rdt_transport: "nccl".to_owned(),
            explicit: BTreeSet::new(),
        }
    }
}

/// A `--set key=value` that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesError {
    /// The key is not a value.
    #[error("unknown value key `{key}`{}; known keys: {known}", hint.as_ref().map(|h| format!(" (did you mean `{h}`?)")).unwrap_or_default())]
    UnknownKey {
        /// The key given.
        key: String,
        /// The nearest known key, when one is close.
        hint: Option<String>,
        /// Comma-separated list of accepted keys.
        known: String,
    },
    /// The key is a value, but none of the systems being rendered reads it.
    #[error(
        "`{key}` changes nothing here: {systems} do not read it (it is read by {read_by}){}; they read: {keys}",
        hint.as_ref().map(|h| format!("; did you mean `{h}`?")).unwrap_or_default()
    )]
    NotRead {
        /// The key.
        key: String,
        /// The systems being rendered.
        systems: String,
        /// The systems that read it.
        read_by: String,
        /// The nearest key these systems read.
        hint: Option<String>,
        /// The keys these systems read.
        keys: String,
    },
    /// A key with no default that the system being rendered needs.
    #[error("`{key}` has no default and {system} needs it: {fix}")]
    Missing {
        /// The key.
        key: String,
        /// The system that reads it.
        system: String,
        /// How to give it.
        fix: String,
    },
    /// The value does not parse or is out of range. The value is shown escaped (a newline as `\n`).
    #[error("value `{key}={}`: expected {expected}", grammar::escaped(value))]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What the key accepts.
        expected: String,
    },
}

impl Values {
    /// Applies one `key=value` override. The error names the key or the value and what was expected.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ValuesError> {
        let key = key.trim();
        let Some(spec) = Self::key(key) else {
            return Err(unknown_key(key));
        };
        if let Some(label) = key.strip_prefix("node_selector.") {
            if !grammar::is_label_key(label) {
                return Err(bad(
                    key,
                    value,
                    "node_selector.<label key>, the label key `[prefix/]name` as Kubernetes \
                     writes it, e.g. `node_selector.node.kubernetes.io/instance-type=p5.48xlarge`",
                ));
            }
            keys::check(key, value, spec)?;
            self.node_selector
                .insert(label.to_owned(), value.trim().to_owned());
            self.explicit.insert(key.to_owned());
            return Ok(());
        }
        let parsed = Parsed::parse(key, value, spec)?;
        match key {
            "cluster_name" => self.cluster_name = parsed.opt(),
            "namespace" => self.namespace = parsed.opt(),
            "registry" => self.registry = parsed.text(),
            "image_name" => self.image_name = parsed.text(),
            "image" => self.image = parsed.opt(),
            "base_image" => self.base_image = parsed.text(),
            "ray_version" => self.ray_version = parsed.text(),
            "worker_group" => self.worker_group = parsed.opt(),
            "worker_replicas" => self.worker_replicas = parsed.count(),
            "gpus_per_worker" => self.gpus_per_worker = parsed.count(),
            "head_gpus" => self.head_gpus = parsed.count(),
            "head_cpu" => self.head_cpu = parsed.text(),
            "head_memory" => self.head_memory = parsed.text(),
            "worker_cpu" => self.worker_cpu = parsed.text(),
            "worker_memory" => self.worker_memory = parsed.text(),
            "pull_secret" => self.pull_secret = parsed.opt(),
            "push_secret" => self.push_secret = parsed.text(),
            "buildkit_image" => self.buildkit_image = parsed.text(),
            "buildkit_cache_size" => self.buildkit_cache_size = parsed.text(),
            "storage_class" => self.storage_class = parsed.opt(),
            "nccl_version" => self.nccl_version = parsed.opt(),
            "with_rdmakit" => self.with_rdmakit = parsed.flag(),
            "size_mib" => self.size_mib = parsed.count(),
            "iterations" => self.iterations = parsed.count(),
            "check_size_mib" => self.check_size_mib = parsed.count(),
            "nccl_debug" => self.nccl_debug = parsed.text(),
            "nccl_debug_file" => self.nccl_debug_file = parsed.text(),
            "mpijob_name" => self.mpijob_name = parsed.opt(),
            "nccl_tests_image" => self.nccl_tests_image = parsed.text(),
            "mpi_workers" => self.mpi_workers = parsed.count(),
            "slots_per_worker" => self.slots_per_worker = parsed.opt_count(),
            "nccl_tests_min_bytes" => self.nccl_tests_min_bytes = parsed.text(),
            "nccl_tests_max_bytes" => self.nccl_tests_max_bytes = parsed.text(),
            "nccl_shm_disable" => self.nccl_shm_disable = parsed.flag(),
            "test_pod_name" => self.test_pod_name = parsed.text(),
            "test_image" => self.test_image = parsed.text(),
            "test_command" => self.test_command = parsed.text(),
            "test_pod_gpus" => self.test_pod_gpus = parsed.count(),
            "instance_type" => self.instance_type = parsed.opt(),
            "all_reduce_perf" => self.all_reduce_perf = parsed.text(),
            "nccl_plugin_version" => self.nccl_plugin_version = parsed.opt(),
            "rdt_transport" => self.rdt_transport = parsed.text(),
            // KEYS and this match list the same keys; a key in KEYS without an arm is a bug caught by
            // the `every_key_is_settable` test.
            _ => return Err(unknown_key(key)),
        }
        self.explicit.insert(key.to_owned());
        Ok(())
    }

    /// True when `key` was given through [`Values::set`] (`--set`, a workflow's values map).
    pub fn is_set(&self, key: &str) -> bool {
        self.explicit.contains(key.trim())
    }

    /// [`Values::default`] with the profile's value defaults ([`Profile::values`]) applied.
    pub fn for_profile(profile: &Profile) -> Result<Values, ValuesError> {
        Values::default().with_profile_defaults(profile)
    }

    /// These values with the profile's value defaults applied to every key that was neither given
    /// through [`Values::set`] nor changed from [`Values::default`] (a values file read with serde
    /// sets fields without `set`). Rendering calls this, so `--set` always wins over the profile and
    /// the profile wins over the crate's defaults (seed 002: `gpus_per_worker: 2` on
    /// ecs.gn8is-2x.8xlarge).
    pub fn with_profile_defaults(&self, profile: &Profile) -> Result<Values, ValuesError> {
        let mut out = self.profile_values(profile)?;
        // The instance type's GPU count is the node's: a worker that takes the node takes them
        // all (seed 002: 2 L20 on ecs.gn8is-2x.8xlarge), unless gpus_per_worker was given (by
        // the user, a values file, or the profile's own `values`).
        let named = out.instance_type.clone();
        if let Ok(Some((_, it))) = profile.instance_type(named.as_deref())
            && !self.is_set("gpus_per_worker")
            && self.gpus_per_worker == Values::default().gpus_per_worker
            && !profile.values.contains_key("gpus_per_worker")
        {
            out.gpus_per_worker = it.gpus;
        }
        Ok(out)
    }

    fn profile_values(&self, profile: &Profile) -> Result<Values, ValuesError> {
        if profile.values.is_empty() {
            return Ok(self.clone());
        }
        let base = serde_json::to_value(Values::default()).unwrap_or_default();
        let current = serde_json::to_value(self).unwrap_or_default();
        let mut out = self.clone();
        for (key, setting) in &profile.values {
            if self.is_set(key) {
                continue;
            }
            let unchanged = match key.strip_prefix("node_selector.") {
                Some(label) => !self.node_selector.contains_key(label),
                None => base.get(key) == current.get(key),
            };
            if unchanged {
                let text = setting_text(setting).ok_or_else(|| {
                    bad(
                        key,
                        &setting.to_string(),
                        "a string, number or boolean in the profile's `values`",
                    )
                })?;
                out.set(key, &text)?;
                out.explicit.remove(key.as_str());
            }
        }
        Ok(out)
    }

    /// Applies `key=value` strings in order (as `--set` gives them).
    pub fn set_all<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ValuesError> {
        for pair in pairs {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(bad(pair, "", "key=value"));
            };
            self.set(k, v)?;
        }
        Ok(())
    }

    /// Checks every value as [`Values::set`] would (a values file read with serde bypasses `set`), then
    /// what spans keys: `nccl_tests_min_bytes` at most `nccl_tests_max_bytes`.
    pub fn check(&self) -> Result<(), ValuesError> {
        let json = serde_json::to_value(self).unwrap_or_default();
        for spec in Self::KEYS {
            if spec.kind == ValueKind::NodeSelector {
                for (label, value) in &self.node_selector {
                    let key = format!("node_selector.{label}");
                    if !grammar::is_label_key(label) {
                        return Err(bad(
                            &key,
                            value,
                            "node_selector.<label key> with a valid label key",
                        ));
                    }
                    keys::check(&key, value, spec)?;
                }
            } else {
                keys::check(spec.name, &text_of(&json, spec.name), spec)?;
            }
        }
        let (min, max) = (&self.nccl_tests_min_bytes, &self.nccl_tests_max_bytes);
        if let (Some(lo), Some(hi)) = (grammar::byte_size(min), grammar::byte_size(max))
            && lo > hi
        {
            return Err(bad(
                "nccl_tests_min_bytes",
                min,
                &format!("at most nccl_tests_max_bytes ({max})"),
            ));
        }
        Ok(())
    }

    /// The profile's value default for an optional key the user left unset (so callers that
    /// did not apply [`Values::with_profile_defaults`] still name what rendering names).
    fn profile_default(&self, profile: &Profile, key: &str) -> Option<String> {
        if self.is_set(key) {
            return None;
        }
        profile
            .values
            .get(key)
            .and_then(setting_text)
            .filter(|s| !s.is_empty())
    }

    /// RayCluster name: the value, else the profile's default, else `ray-{short_name}-cluster`.
    pub fn cluster_name_for(&self, profile: &Profile) -> String {
        self.cluster_name
            .clone()
            .or_else(|| self.profile_default(profile, "cluster_name"))
            .unwrap_or_else(|| format!("ray-{}-cluster", profile.short_name))
    }

    /// Ray worker group name: the value, else the profile's default, else `gpu-{short_name}`.
    pub fn worker_group_for(&self, profile: &Profile) -> String {
        self.worker_group
            .clone()
            .or_else(|| self.profile_default(profile, "worker_group"))
            .unwrap_or_else(|| format!("gpu-{}", profile.short_name))
    }

    /// MPIJob name: the value, else the profile's default, else `nccl-test-{short_name}`.
    pub fn mpijob_name_for(&self, profile: &Profile) -> String {
        self.mpijob_name
            .clone()
            .or_else(|| self.profile_default(profile, "mpijob_name"))
            .unwrap_or_else(|| format!("nccl-test-{}", profile.short_name))
    }

    /// The image: the value, else the profile's default, else the derived
    /// `{registry}/{image_name}:{tag of base_image}-{short_name}`.
    pub fn image_for(&self, profile: &Profile) -> String {
        if let Some(image) = self
            .image
            .clone()
            .or_else(|| self.profile_default(profile, "image"))
        {
            return image;
        }
        let tag = image_tag(&self.base_image).unwrap_or("latest");
        format!(
            "{}/{}:{}-{}",
            self.registry.trim_end_matches('/'),
            self.image_name,
            tag,
            profile.short_name
        )
    }

    /// NCCL version that goes into the image.
    pub fn nccl_version_for(&self, profile: &Profile) -> Option<String> {
        self.nccl_version
            .clone()
            .or_else(|| self.profile_default(profile, "nccl_version"))
            .or_else(|| profile.nccl.pin.clone())
    }

    /// Net plugin version that goes into the image (`None` without a plugin or a version).
    pub fn plugin_version_for(&self, profile: &Profile) -> Option<String> {
        let plugin = profile.net_plugin()?;
        self.nccl_plugin_version
            .clone()
            .or_else(|| self.profile_default(profile, "nccl_plugin_version"))
            .or_else(|| plugin.version.clone())
    }

    /// MPI slots per worker.
    pub fn slots_for(&self) -> u32 {
        self.slots_per_worker.unwrap_or(self.gpus_per_worker)
    }
}

/// The value of `key` in serialised values as `--set` writes it (empty for an unset optional value).
pub(super) fn text_of(json: &serde_json::Value, key: &str) -> String {
    match json.get(key) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The error for a key `set` does not know, with the nearest known key.
pub(super) fn unknown_key(key: &str) -> ValuesError {
    let names = Values::KEYS.iter().map(|k| k.name);
    ValuesError::UnknownKey {
        key: key.to_owned(),
        hint: crate::validate::suggest(key, names.clone()).map(str::to_owned),
        known: names.collect::<Vec<_>>().join(", "),
    }
}

/// A profile value default as the text `set` parses: strings as they are, numbers and booleans
/// printed; `None` for arrays, maps and null.
pub(crate) fn setting_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The tag of an image reference (`repo:tag` or `host:port/repo:tag`), ignoring digests.
fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':').map(|(_, tag)| tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of `spec`'s kind that differs from the default.
    fn other_value(spec: &Key) -> &'static str {
        match spec.kind {
            ValueKind::Count { .. } => "7",
            ValueKind::Quantity => "8Gi",
            ValueKind::Flag => "true",
            ValueKind::Choice(_) => "rdmakit",
            ValueKind::Image => "example.com/other:1.0",
            ValueKind::Registry => "example.com/other",
            ValueKind::ByteSize => "64K",
            ValueKind::Path => "/var/tmp/x.log",
            ValueKind::Executable => "/usr/bin/all_reduce_perf",
            ValueKind::NcclDebug => "WARN",
            ValueKind::Version => "9.9.9",
            _ => "abc",
        }
    }

    #[test]
    fn every_key_is_settable_and_its_default_is_valid() {
        for spec in Values::KEYS {
            let value = other_value(spec);
            let key = if spec.kind == ValueKind::NodeSelector {
                "node_selector.example.com/pool"
            } else {
                spec.name
            };
            let mut v = Values::default();
            v.set(key, value).unwrap_or_else(|e| panic!("{key}: {e}"));
            if spec.kind == ValueKind::Flag && v == Values::default() {
                // The flag defaults to true: setting it false must change it.
                v.set(key, "false").unwrap_or_else(|e| panic!("{key}: {e}"));
            }
            assert_ne!(v, Values::default(), "{key} changed nothing");
            // The default (or empty, for an optional key) passes its own kind.
            let default = Values::default_text(spec.name);
            if spec.kind != ValueKind::NodeSelector {
                keys::check(spec.name, &default, spec).unwrap_or_else(|e| panic!("{e}"));
            }
            assert!(!spec.systems.is_empty(), "{key} is read by no system");
        }
    }

    #[test]
    fn set_errors_name_key_and_value() {
        let mut v = Values::default();
        let e = v.set("worker_replica", "2").unwrap_err();
        assert!(
            matches!(&e, ValuesError::UnknownKey { key, known, hint } if key == "worker_replica" && known.contains("worker_replicas") && hint.as_deref() == Some("worker_replicas"))
        );
        let e = v.set("worker_replicas", "two").unwrap_err();
        assert_eq!(
            e.to_string(),
            "value `worker_replicas=two`: expected a whole number from 1 to 1024, e.g. `worker_replicas=2`"
        );
        let e = v.set("cluster_name", "Ray_Cluster").unwrap_err();
        assert!(e.to_string().contains("cluster_name=Ray_Cluster"));
        assert!(v.set("worker_memory", "64 GB").is_err());
        assert!(v.set("with_rdmakit", "yes").is_err());
        assert!(v.set_all(["worker_replicas"]).is_err());
    }

    #[test]
    fn set_and_clear() {
        let mut v = Values::default();
        v.set_all(["worker_replicas=4", "namespace=ml", "slots_per_worker=2"])
            .unwrap();
        assert_eq!(v.worker_replicas, 4);
        assert_eq!(v.namespace.as_deref(), Some("ml"));
        assert_eq!(v.slots_per_worker, Some(2));
        v.set("namespace", "").unwrap();
        assert_eq!(v.namespace, None);
        v.set("node_selector.aliyun.accelerator/nvidia_name", "NVIDIA-L20")
            .unwrap();
        assert_eq!(
            v.node_selector
                .get("aliyun.accelerator/nvidia_name")
                .map(String::as_str),
            Some("NVIDIA-L20")
        );
    }

    #[test]
    fn quantities_and_tags() {
        use keys::is_quantity;
        for q in ["16", "500m", "64Gi", "1600G", "0.5", "200Gi"] {
            assert!(is_quantity(q), "{q}");
        }
        for q in ["", "Gi", "64GB", "1.2.3", "-1"] {
            assert!(!is_quantity(q), "{q}");
        }
        assert_eq!(
            image_tag("rayproject/ray-llm:2.57.0-py312-cu130"),
            Some("2.57.0-py312-cu130")
        );
        assert_eq!(image_tag("host:8443/ns/img"), None);
        assert_eq!(image_tag("host:8443/ns/img:1.0@sha256:ab"), Some("1.0"));
    }

    #[test]
    fn default_values_check() {
        assert!(Values::default().check().is_ok());
        let v = Values {
            head_memory: "lots".into(),
            ..Values::default()
        };
        assert!(
            matches!(v.check(), Err(ValuesError::BadValue { key, .. }) if key == "head_memory")
        );
        // A values file bypasses `set`: check refuses what `set` would.
        let v = Values {
            registry: "r.example.com/me\nRUN id".into(),
            ..Values::default()
        };
        assert!(matches!(v.check(), Err(ValuesError::BadValue { key, .. }) if key == "registry"));
        let v = Values {
            nccl_tests_min_bytes: "16G".into(),
            ..Values::default()
        };
        assert!(
            matches!(v.check(), Err(ValuesError::BadValue { key, .. }) if key == "nccl_tests_min_bytes")
        );
    }

    #[test]
    fn every_key_is_listed_in_the_readme_table() {
        let readme = include_str!("../../README.md");
        let table = Values::keys_markdown();
        assert!(
            readme.contains(&table),
            "crates/k8s-render/README.md's key table differs from Values::KEYS; replace it with:\n{table}"
        );
    }
}
