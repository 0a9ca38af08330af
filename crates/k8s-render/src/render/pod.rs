//! The shared part of every RDMA pod: resources, NCCL environment, capabilities, volumes, scheduling.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, HostPathVolumeSource,
    LocalObjectReference, PodAffinityTerm, PodAntiAffinity, PodResourceClaim, PodSpec,
    ResourceClaim, ResourceRequirements, SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::RenderError;
use crate::profile::{DraSettings, InstanceType, NcclTransport, Profile, RdmaAttachment};
use crate::values::Values;

/// Label every rendered object carries.
pub(crate) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "rdmakit");

/// A checked profile and values pair.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) profile: &'a Profile,
    pub(crate) values: &'a Values,
    /// The instance type the values (or the profile's default) name.
    pub(crate) instance: Option<&'a InstanceType>,
}

/// What a container should hold.
pub(crate) struct ContainerSpec<'a> {
    pub(crate) name: &'a str,
    pub(crate) image: String,
    pub(crate) command: Option<Vec<String>>,
    pub(crate) args: Option<Vec<String>>,
    pub(crate) gpus: u32,
    pub(crate) cpu: Option<&'a str>,
    pub(crate) memory: Option<&'a str>,
    /// Give the container the profile's RDMA device, capabilities and mounts.
    pub(crate) rdma: bool,
    /// Give the container the NCCL environment (only with `rdma`).
    pub(crate) nccl: bool,
    /// Write requests as well as limits (seed 000/001 style); limits only otherwise (seed 002/004 style).
    pub(crate) requests: bool,
    /// Extra environment after the NCCL variables.
    pub(crate) extra_env: Vec<(String, String)>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(profile: &'a Profile, values: &'a Values) -> Result<Self, RenderError> {
        profile.check().map_err(|source| RenderError::Profile {
            profile: profile.name.clone(),
            source,
        })?;
        values.check()?;
        if let Some(version) = values.nccl_version_for(profile)
            && profile.nccl_version_is_bad(&version)
        {
            return Err(RenderError::BadNcclVersion {
                version,
                profile: profile.name.clone(),
                reason: profile
                    .nccl
                    .bad_reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
                good: profile.nccl.known_good.join(", "),
            });
        }
        let instance = profile
            .instance_type(values.instance_type.as_deref())
            .map_err(|_| crate::values::ValuesError::BadValue {
                key: "instance_type".to_owned(),
                value: values.instance_type.clone().unwrap_or_default(),
                expected: if profile.instance_types.is_empty() {
                    format!(
                        "nothing: profile {} has no instance_types table (add one, or leave instance_type unset)",
                        profile.name
                    )
                } else {
                    format!(
                        "one of profile {}'s instance types: {}",
                        profile.name,
                        profile
                            .instance_types
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            })?
            .map(|(_, it)| it);
        if let (Some(plugin), Some(version)) =
            (profile.net_plugin(), values.plugin_version_for(profile))
            && profile.plugin_version_is_bad(&version)
        {
            return Err(RenderError::BadPluginVersion {
                plugin: plugin.name.clone(),
                version,
                profile: profile.name.clone(),
                reason: plugin
                    .bad_reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
                good: plugin.known_good.join(", "),
            });
        }
        Ok(Ctx {
            profile,
            values,
            instance,
        })
    }

    /// Device-plugin resources of an RDMA container: the instance type's counts where it has
    /// them, else the profile's.
    pub(crate) fn rdma_resources(&self) -> BTreeMap<String, u32> {
        match &self.profile.rdma {
            RdmaAttachment::DevicePlugin { resources } => {
                let mut out = resources.clone();
                if let Some(it) = self.instance {
                    for (k, v) in &it.resources {
                        out.insert(k.clone(), *v);
                    }
                }
                out
            }
            RdmaAttachment::Dra(_) => BTreeMap::new(),
        }
    }

    /// Annotations of RDMA pods (secondary networks), `None` when the profile has none.
    pub(crate) fn pod_annotations(&self) -> Option<BTreeMap<String, String>> {
        let a = &self.profile.pod.annotations;
        (!a.is_empty()).then(|| a.clone())
    }

    /// The variable and value that force NCCL onto TCP for an A/B run: `NCCL_IB_DISABLE=1` for
    /// NCCL's IB transport, `NCCL_NET=Socket` where a net plugin (or nothing) carries the traffic.
    pub(crate) fn tcp_switch(&self) -> (&'static str, &'static str) {
        self.profile.tcp_switch()
    }

    /// What NCCL's INFO log prints when the fabric carries the traffic.
    pub(crate) fn log_marker(&self) -> String {
        self.profile.nccl_log_marker()
    }

    /// NCCL variables of the transport, in the order they are rendered (without the debug ones).
    pub(crate) fn transport_env(&self) -> Vec<(String, String)> {
        let n = &self.profile.nccl;
        let mut env = Vec::new();
        match &n.transport {
            NcclTransport::IbVerbs => {
                env.push(("NCCL_IB_DISABLE".to_owned(), "0".to_owned()));
                env.push((
                    "NCCL_IB_HCA".to_owned(),
                    n.ib_hca.clone().unwrap_or_default(),
                ));
            }
            NcclTransport::NetPlugin(p) => {
                if let Some(h) = &n.ib_hca {
                    env.push(("NCCL_IB_HCA".to_owned(), h.clone()));
                }
                for (k, v) in &p.env {
                    env.push((k.clone(), v.clone()));
                }
            }
            NcclTransport::Sockets => {
                env.push(("NCCL_NET".to_owned(), "Socket".to_owned()));
            }
        }
        if let Some(ifname) = &n.socket_ifname {
            env.push(("NCCL_SOCKET_IFNAME".to_owned(), ifname.clone()));
        }
        if let Some(gid) = n.gid_index {
            env.push(("NCCL_IB_GID_INDEX".to_owned(), gid.to_string()));
        }
        for (k, v) in &n.extra_env {
            env.push((k.clone(), v.clone()));
        }
        env
    }

    pub(crate) fn dra(&self) -> Option<&'a DraSettings> {
        match &self.profile.rdma {
            RdmaAttachment::Dra(d) => Some(d),
            RdmaAttachment::DevicePlugin { .. } => None,
        }
    }

    pub(crate) fn image(&self) -> String {
        self.values.image_for(self.profile)
    }

    /// Metadata with the namespace from values and the managed-by label plus `labels`.
    pub(crate) fn meta(&self, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        let mut all = BTreeMap::new();
        all.insert(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned());
        for (k, v) in labels {
            all.insert((*k).to_owned(), (*v).to_owned());
        }
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: self.values.namespace.clone(),
            labels: Some(all),
            ..ObjectMeta::default()
        }
    }

    /// NCCL environment of an RDMA container: device, interface, GID, debug logging to files.
    pub(crate) fn nccl_env(&self) -> Vec<EnvVar> {
        let mut env = self.transport_env();
        if !self.values.nccl_debug.is_empty() {
            env.push(("NCCL_DEBUG".to_owned(), self.values.nccl_debug.clone()));
            if !self.values.nccl_debug_file.is_empty() {
                env.push((
                    "NCCL_DEBUG_FILE".to_owned(),
                    self.values.nccl_debug_file.clone(),
                ));
            }
        }
        env.into_iter().map(|(k, v)| env_var(&k, &v)).collect()
    }

    pub(crate) fn container(&self, spec: ContainerSpec<'_>) -> Container {
        let mut quantities: BTreeMap<String, Quantity> = BTreeMap::new();
        if let Some(cpu) = spec.cpu {
            quantities.insert("cpu".to_owned(), Quantity(cpu.to_owned()));
        }
        if let Some(mem) = spec.memory {
            quantities.insert("memory".to_owned(), Quantity(mem.to_owned()));
        }
        if spec.gpus > 0 {
            quantities.insert(
                self.profile.gpu_resource.clone(),
                Quantity(spec.gpus.to_string()),
            );
        }
        let mut claims = None;
        if spec.rdma {
            match &self.profile.rdma {
                RdmaAttachment::DevicePlugin { .. } => {
                    for (name, count) in self.rdma_resources() {
                        quantities.insert(name, Quantity(count.to_string()));
                    }
                }
                RdmaAttachment::Dra(dra) => {
                    claims = Some(vec![ResourceClaim {
                        name: dra.request_name.clone(),
                        request: None,
                    }]);
                }
            }
        }
        let resources =
            (!quantities.is_empty() || claims.is_some()).then(|| ResourceRequirements {
                claims,
                limits: (!quantities.is_empty()).then(|| quantities.clone()),
                requests: (spec.requests && !quantities.is_empty()).then_some(quantities),
            });
        let mut env = if spec.rdma && spec.nccl {
            self.nccl_env()
        } else {
            Vec::new()
        };
        env.extend(spec.extra_env.iter().map(|(k, v)| env_var(k, v)));
        let pod = &self.profile.pod;
        let security_context =
            (spec.rdma && !pod.capabilities.is_empty()).then(|| SecurityContext {
                capabilities: Some(Capabilities {
                    add: Some(pod.capabilities.clone()),
                    drop: None,
                }),
                ..SecurityContext::default()
            });
        let mut mounts = Vec::new();
        if spec.rdma {
            if let Some(shm) = &pod.shm {
                mounts.push(VolumeMount {
                    name: shm.volume_name.clone(),
                    mount_path: "/dev/shm".to_owned(),
                    ..VolumeMount::default()
                });
            }
            for m in &pod.host_paths {
                mounts.push(VolumeMount {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: m.read_only.then_some(true),
                    ..VolumeMount::default()
                });
            }
        }
        Container {
            name: spec.name.to_owned(),
            image: Some(spec.image),
            command: spec.command,
            args: spec.args,
            env: (!env.is_empty()).then_some(env),
            resources,
            security_context,
            volume_mounts: (!mounts.is_empty()).then_some(mounts),
            ..Container::default()
        }
    }

    /// Pod spec around `containers`. With `rdma`, the profile's pod settings, scheduling and volumes apply.
    pub(crate) fn pod_spec(
        &self,
        containers: Vec<Container>,
        rdma: bool,
        pull_secret: bool,
    ) -> PodSpec {
        let pod = &self.profile.pod;
        let mut spec = PodSpec {
            containers,
            image_pull_secrets: pull_secret
                .then(|| self.values.pull_secret.clone())
                .flatten()
                .map(|name| vec![LocalObjectReference { name }]),
            ..PodSpec::default()
        };
        if !rdma {
            return spec;
        }
        if pod.host_network {
            spec.host_network = Some(true);
        }
        if pod.host_ipc {
            spec.host_ipc = Some(true);
        }
        spec.dns_policy = pod.dns_policy.clone();
        let selector = self.node_selector();
        spec.node_selector = (!selector.is_empty()).then_some(selector);
        let tolerations: Vec<Toleration> = self
            .profile
            .tolerations
            .iter()
            .map(|t| Toleration {
                key: Some(t.key.clone()),
                operator: Some(t.operator.clone()),
                value: t.value.clone(),
                effect: t.effect.clone(),
                toleration_seconds: None,
            })
            .collect();
        spec.tolerations = (!tolerations.is_empty()).then_some(tolerations);
        let mut volumes = Vec::new();
        if let Some(shm) = &pod.shm {
            volumes.push(Volume {
                name: shm.volume_name.clone(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".to_owned()),
                    size_limit: shm.size_limit.clone().map(Quantity),
                }),
                ..Volume::default()
            });
        }
        for m in &pod.host_paths {
            volumes.push(Volume {
                name: m.name.clone(),
                host_path: Some(HostPathVolumeSource {
                    path: m.host_path.clone(),
                    type_: m.host_path_type.clone(),
                }),
                ..Volume::default()
            });
        }
        spec.volumes = (!volumes.is_empty()).then_some(volumes);
        if let Some(dra) = self.dra() {
            spec.resource_claims = Some(vec![PodResourceClaim {
                name: dra.request_name.clone(),
                resource_claim_name: None,
                resource_claim_template_name: Some(dra.claim_template.clone()),
            }]);
        }
        spec
    }

    /// Profile node selector with the values' entries applied (an empty value removes an entry).
    pub(crate) fn node_selector(&self) -> BTreeMap<String, String> {
        let mut sel = self.profile.node_selector.clone();
        for (k, v) in &self.values.node_selector {
            if v.is_empty() {
                sel.remove(k);
            } else {
                sel.insert(k.clone(), v.clone());
            }
        }
        sel
    }
}

pub(crate) fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

/// Required anti-affinity: no two pods matching `labels` on one node.
pub(crate) fn spread_by_hostname(labels: &[(&str, &str)]) -> Affinity {
    let match_labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(match_labels),
                    match_expressions: None,
                }),
                topology_key: "kubernetes.io/hostname".to_owned(),
                ..PodAffinityTerm::default()
            }]),
            preferred_during_scheduling_ignored_during_execution: None,
        }),
        ..Affinity::default()
    }
}

pub(crate) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}
