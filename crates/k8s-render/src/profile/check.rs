//! What serde cannot check in a profile: names, resource names, DNS policy, capabilities, paths,
//! the transport's own consistency, instance types, version lists, and the profile's value defaults.

use super::{NcclTransport, PluginSource, Profile, RdmaAttachment};

/// A profile field that is present but wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile field `{field}`: {message}")]
pub struct ProfileInvalid {
    /// Dotted path of the field (`nccl.pin`).
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

pub(super) fn invalid(field: impl Into<String>, message: impl Into<String>) -> ProfileInvalid {
    ProfileInvalid {
        field: field.into(),
        message: message.into(),
    }
}

/// `Ok(())` when `ok`, else the field's error: one line per validation rule.
fn ensure(
    ok: bool,
    field: impl Into<String>,
    message: impl Into<String>,
) -> Result<(), ProfileInvalid> {
    if ok {
        Ok(())
    } else {
        Err(invalid(field, message))
    }
}

const DNS_POLICIES: &[&str] = &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];

impl Profile {
    /// Checks what serde cannot: names, resource names, DNS policy, NCCL pin against its own bad list.
    pub fn check(&self) -> Result<(), ProfileInvalid> {
        if !is_dns_label(&self.name) {
            return Err(invalid(
                "name",
                format!("`{}` must be lowercase letters, digits and '-'", self.name),
            ));
        }
        if !is_dns_label(&self.short_name) {
            return Err(invalid(
                "short_name",
                format!(
                    "`{}` must be lowercase letters, digits and '-'",
                    self.short_name
                ),
            ));
        }
        if self.fabric.trim().is_empty() {
            return Err(invalid("fabric", "must not be empty (e.g. \"eRDMA\")"));
        }
        check_resource_name("gpu_resource", &self.gpu_resource)?;
        match &self.rdma {
            RdmaAttachment::DevicePlugin { resources } => {
                if resources.is_empty() {
                    return Err(invalid(
                        "rdma.resources",
                        "a device-plugin profile needs at least one resource (e.g. \"aliyun/erdma\": 1)",
                    ));
                }
                for (name, count) in resources {
                    check_resource_name(&format!("rdma.resources.{name}"), name)?;
                    if *count == 0 {
                        return Err(invalid(
                            format!("rdma.resources.{name}"),
                            "count must be at least 1",
                        ));
                    }
                }
            }
            RdmaAttachment::Dra(dra) => {
                if !is_dns_subdomain(&dra.device_class) {
                    return Err(invalid("rdma.device_class", "must be a DNS subdomain"));
                }
                if !is_dns_label(&dra.claim_template) {
                    return Err(invalid("rdma.claim_template", "must be a DNS label"));
                }
                if !is_dns_label(&dra.request_name) {
                    return Err(invalid("rdma.request_name", "must be a DNS label"));
                }
                if dra.selectors.is_empty() {
                    return Err(invalid(
                        "rdma.selectors",
                        "needs at least one CEL expression",
                    ));
                }
                if dra.count == 0 {
                    return Err(invalid("rdma.count", "must be at least 1"));
                }
            }
        }
        if let Some(policy) = &self.pod.dns_policy
            && !DNS_POLICIES.contains(&policy.as_str())
        {
            return Err(invalid(
                "pod.dns_policy",
                format!("`{policy}` is not one of {}", DNS_POLICIES.join(", ")),
            ));
        }
        for (i, cap) in self.pod.capabilities.iter().enumerate() {
            if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                return Err(invalid(
                    format!("pod.capabilities[{i}]"),
                    format!("`{cap}` is not a capability name such as IPC_LOCK"),
                ));
            }
        }
        for (i, m) in self.pod.host_paths.iter().enumerate() {
            if !m.host_path.starts_with('/') || !m.mount_path.starts_with('/') {
                return Err(invalid(
                    format!("pod.host_paths[{i}]"),
                    "host_path and mount_path must be absolute",
                ));
            }
            if !is_dns_label(&m.name) {
                return Err(invalid(
                    format!("pod.host_paths[{i}].name"),
                    "must be a DNS label",
                ));
            }
        }
        if let Some(shm) = &self.pod.shm
            && !is_dns_label(&shm.volume_name)
        {
            return Err(invalid("pod.shm.volume_name", "must be a DNS label"));
        }
        for (key, values) in &self.node_label_values {
            if let Some(v) = self.node_labels.get(key)
                && !values.contains(v)
            {
                return Err(invalid(
                    format!("node_label_values.{key}"),
                    format!("must include the node_labels value `{v}`"),
                ));
            }
        }
        for (i, e) in self.node_label_exceptions.iter().enumerate() {
            if e.instance_type.trim().is_empty() || e.label.trim().is_empty() {
                return Err(invalid(
                    format!("node_label_exceptions[{i}]"),
                    "instance_type and label must not be empty",
                ));
            }
        }
        self.check_transport()?;
        self.check_env_sources()?;
        self.check_instance_types()?;
        if let Some(pin) = &self.nccl.pin {
            check_version("nccl.pin", pin)?;
            if self.nccl.known_bad.contains(pin) {
                return Err(invalid(
                    "nccl.pin",
                    format!("{pin} is in the profile's own known_bad list"),
                ));
            }
        }
        for (i, v) in self.nccl.known_bad.iter().enumerate() {
            check_version(&format!("nccl.known_bad[{i}]"), v)?;
        }
        for (i, v) in self.nccl.known_good.iter().enumerate() {
            check_version(&format!("nccl.known_good[{i}]"), v)?;
        }
        if let Some(problem) = self.devices.name_pattern.problem() {
            return Err(invalid("devices.name_pattern", problem));
        }
        for (i, g) in self.devices.exclude.iter().enumerate() {
            ensure(
                is_device_glob(g.as_str()),
                format!("devices.exclude[{i}]"),
                format!(
                    "`{g}` must be one device-name glob (letters, digits, '_', '-', '.', '*', '?'), e.g. mlx5_bond_*"
                ),
            )?;
        }
        if self.devices.tx_counter.starts_with('/') || self.devices.tx_counter.is_empty() {
            return Err(invalid(
                "devices.tx_counter",
                "must be relative to /sys/class/infiniband/<dev>/ (e.g. ports/1/hw_counters/hw_tx_bytes_cnt)",
            ));
        }
        if self.devices.counter_multiplier == 0 {
            return Err(invalid("devices.counter_multiplier", "must be at least 1"));
        }
        for (i, p) in self.userspace.packages.iter().enumerate() {
            if p.is_empty() || p.contains(char::is_whitespace) {
                return Err(invalid(
                    format!("userspace.packages[{i}]"),
                    "must be one apt package name",
                ));
            }
        }
        let mut probe = crate::Values::default();
        for (key, setting) in &self.values {
            let field = format!("values.{key}");
            let Some(text) = crate::values::setting_text(setting) else {
                return Err(invalid(
                    field,
                    format!("`{setting}` must be a string, number or boolean"),
                ));
            };
            probe
                .set(key, &text)
                .map_err(|e| invalid(field, e.to_string()))?;
        }
        probe
            .check()
            .map_err(|e| invalid("values", e.to_string()))?;
        Ok(())
    }

    fn check_transport(&self) -> Result<(), ProfileInvalid> {
        if let Some(ifname) = &self.nccl.socket_ifname {
            // It reaches NCCL_SOCKET_IFNAME and the MPIJob launcher's `btl_tcp_if_include`: a value NCCL
            // cannot parse leaves NCCL with no bootstrap interface ("no socket interface found").
            ensure(
                crate::values::grammar::is_socket_ifname(ifname),
                "nccl.socket_ifname",
                format!(
                    "`{}` is not NCCL_SOCKET_IFNAME's grammar: an optional `^` (exclude) or `=` (exact), then \
                     comma-separated interface names or prefixes, e.g. \"eth0\", \"^docker,lo\", \"=ens1f0\"",
                    crate::values::grammar::escaped(ifname)
                ),
            )?;
        }
        let hca = self.nccl.ib_hca.as_deref().map(str::trim);
        match &self.nccl.transport {
            NcclTransport::IbVerbs => {
                if hca.is_none_or(str::is_empty) {
                    return Err(invalid(
                        "nccl.ib_hca",
                        "must name the device or prefix (e.g. erdma_0) for the ib-verbs transport; \
                         a fabric NCCL reaches through a net plugin sets nccl.transport: #{ kind: \"net-plugin\", ... } instead",
                    ));
                }
            }
            NcclTransport::Sockets => {
                ensure(
                    hca.is_none(),
                    "nccl.ib_hca",
                    "the sockets transport does not read NCCL_IB_HCA: remove it",
                )?;
            }
            NcclTransport::NetPlugin(p) => {
                let f = |k: &str| format!("nccl.transport.{k}");
                ensure(
                    !p.name.trim().is_empty(),
                    f("name"),
                    "must name the plugin (e.g. aws-ofi-nccl)",
                )?;
                if p.library.contains('/') || !p.library.contains(".so") {
                    return Err(invalid(
                        f("library"),
                        format!(
                            "`{}` must be the library's file name (e.g. libnccl-net-ofi.so); its directory goes in library_dir",
                            p.library
                        ),
                    ));
                }
                ensure(
                    p.library_dir.starts_with('/'),
                    f("library_dir"),
                    "must be an absolute directory inside the container (e.g. /opt/aws-ofi-nccl/install/lib)",
                )?;
                for (i, k) in p.required_env.iter().enumerate() {
                    ensure(
                        p.env.contains_key(k),
                        format!("nccl.transport.required_env[{i}]"),
                        format!("`{k}` is required but not set in nccl.transport.env"),
                    )?;
                }
                for k in p.env.keys() {
                    ensure(
                        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        format!("nccl.transport.env.{k}"),
                        "must be an environment variable name",
                    )?;
                }
                for (i, v) in p.known_bad.iter().enumerate() {
                    check_version(&format!("nccl.transport.known_bad[{i}]"), v)?;
                }
                for (i, v) in p.known_good.iter().enumerate() {
                    check_version(&format!("nccl.transport.known_good[{i}]"), v)?;
                }
                if let Some(v) = &p.version {
                    check_version(&f("version"), v)?;
                    ensure(
                        !p.known_bad.contains(v),
                        f("version"),
                        format!("{v} is in the plugin's own known_bad list"),
                    )?;
                }
                for (i, pkg) in p.packages.iter().enumerate() {
                    ensure(
                        !pkg.is_empty() && !pkg.contains(char::is_whitespace),
                        format!("nccl.transport.packages[{i}]"),
                        "must be one apt package name",
                    )?;
                }
                match p.source {
                    PluginSource::Image => {
                        ensure(
                            !p.install.is_empty(),
                            f("install"),
                            "a plugin with source \"image\" needs the Dockerfile steps that install it \
                                 (or source: \"host\" with a pod.host_paths mount when a node installer provides it)",
                        )?;
                    }
                    PluginSource::Host => {
                        let mounted = self.pod.host_paths.iter().any(|m| {
                            let mp = m.mount_path.trim_end_matches('/');
                            p.library_dir == mp || p.library_dir.starts_with(&format!("{mp}/"))
                        });
                        ensure(
                            mounted,
                            f("library_dir"),
                            format!(
                                "{} comes from the host but no pod.host_paths entry is mounted at or above it",
                                p.library_dir
                            ),
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Every variable the rendered RDMA containers get comes from one field: a second source (FI_PROVIDER
    /// in `nccl.extra_env` and `nccl.transport.env`) would render the variable twice.
    fn check_env_sources(&self) -> Result<(), ProfileInvalid> {
        let n = &self.nccl;
        let mut set: Vec<(String, String)> = Vec::new();
        let mut fixed = |var: &str, field: &str| set.push((var.to_owned(), field.to_owned()));
        match &n.transport {
            NcclTransport::IbVerbs => {
                fixed("NCCL_IB_DISABLE", "nccl.transport (ib-verbs)");
                fixed("NCCL_IB_HCA", "nccl.ib_hca");
            }
            NcclTransport::NetPlugin(_) if n.ib_hca.is_some() => {
                fixed("NCCL_IB_HCA", "nccl.ib_hca")
            }
            NcclTransport::NetPlugin(_) => {}
            NcclTransport::Sockets => fixed("NCCL_NET", "nccl.transport (sockets)"),
        }
        if n.socket_ifname.is_some() {
            fixed("NCCL_SOCKET_IFNAME", "nccl.socket_ifname");
        }
        if n.gid_index.is_some() {
            fixed("NCCL_IB_GID_INDEX", "nccl.gid_index");
        }
        let plugin_env = self.net_plugin().map(|p| &p.env);
        let sources = plugin_env
            .into_iter()
            .flat_map(|e| e.keys().map(|k| (k, format!("nccl.transport.env.{k}"))))
            .chain(
                n.extra_env
                    .keys()
                    .map(|k| (k, format!("nccl.extra_env.{k}"))),
            );
        for (var, field) in sources {
            if let Some((_, first)) = set.iter().find(|(v, _)| v == var) {
                return Err(invalid(
                    field.clone(),
                    format!(
                        "`{var}` is also set by {first}: the rendered pods would carry it twice; set it in one of {first} and {field}"
                    ),
                ));
            }
            set.push((var.clone(), field));
        }
        Ok(())
    }

    fn check_instance_types(&self) -> Result<(), ProfileInvalid> {
        for (name, it) in &self.instance_types {
            let f = |k: &str| format!("instance_types.{name}.{k}");
            ensure(
                !name.trim().is_empty() && !name.contains(char::is_whitespace),
                "instance_types",
                format!("`{name}` is not an instance type name"),
            )?;
            ensure(it.gpus != 0, f("gpus"), "must be at least 1")?;
            ensure(
                it.rdma_devices != 0,
                f("rdma_devices"),
                "must be at least 1",
            )?;
            ensure(it.nics != Some(0), f("nics"), "must be at least 1")?;
            if let Some(g) = it.nic_gbps
                && !(g.is_finite() && g > 0.0)
            {
                return Err(invalid(
                    f("nic_gbps"),
                    format!("{g} must be a positive line rate in Gb/s (e.g. 400)"),
                ));
            }
            ensure(
                (3..=6).contains(&it.pcie_gen),
                f("pcie_gen"),
                format!("{} is not a PCIe generation from 3 to 6", it.pcie_gen),
            )?;
            ensure(it.pcie_lanes != 0, f("pcie_lanes"), "must be at least 1")?;
            for (r, n) in &it.resources {
                check_resource_name(&f(&format!("resources.{r}")), r)?;
                ensure(
                    *n != 0,
                    f(&format!("resources.{r}")),
                    "count must be at least 1",
                )?;
                match &self.rdma {
                    RdmaAttachment::DevicePlugin { resources } if !resources.contains_key(r) => {
                        return Err(invalid(
                            f(&format!("resources.{r}")),
                            format!(
                                "`{r}` is not one of rdma.resources ({})",
                                resources.keys().cloned().collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    }
                    RdmaAttachment::Dra(_) => {
                        return Err(invalid(
                            f("resources"),
                            "a DRA profile has no device-plugin resources: leave it out (the claim's count is rdma.count)",
                        ));
                    }
                    RdmaAttachment::DevicePlugin { .. } => {}
                }
            }
        }
        if self.values.contains_key("instance_type") {
            self.instance_type(None)
                .map_err(|e| invalid("values.instance_type", e.message))?;
        }
        Ok(())
    }
}

fn check_version(field: &str, v: &str) -> Result<(), ProfileInvalid> {
    let ok = !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("`{v}` is not a version like 2.30.7"),
        ))
    }
}

/// `[prefix/]name` as Kubernetes accepts for extended resources.
fn check_resource_name(field: &str, name: &str) -> Result<(), ProfileInvalid> {
    let (prefix, base) = match name.split_once('/') {
        Some((p, b)) => (Some(p), b),
        None => (None, name),
    };
    let base_ok = !base.is_empty()
        && base.len() <= 63
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && base.starts_with(|c: char| c.is_ascii_alphanumeric())
        && base.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(is_dns_subdomain);
    if base_ok && prefix_ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("`{name}` is not a resource name like vendor.com/device"),
        ))
    }
}

/// One glob over device names, nothing a shell or a path would read otherwise.
fn is_device_glob(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*' | '?'))
}

pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        assert!(check_resource_name("f", "aliyun/erdma").is_ok());
        assert!(check_resource_name("f", "rdma/rdma_shared_device_a").is_ok());
        assert!(check_resource_name("f", "vke.volcengine.com/infiniband-rdma").is_ok());
        assert!(check_resource_name("f", "nvidia.com/gpu-h800").is_ok());
        let e = check_resource_name("gpu_resource", "Nvidia.com/gpu").unwrap_err();
        assert_eq!(e.field, "gpu_resource");
        assert!(check_resource_name("f", "a/").is_err());
    }

    fn minimal(transport: serde_json::Value, ib_hca: Option<&str>) -> serde_json::Value {
        serde_json::json!({
            "name": "t", "fabric": "T", "short_name": "t",
            "rdma": {"kind": "device-plugin", "resources": {"example.com/rdma": 1}},
            "nccl": {"transport": transport, "ib_hca": ib_hca},
            "devices": {"name_pattern": "x_*", "tx_counter": "ports/1/counters/port_xmit_data"},
        })
    }

    #[test]
    fn a_socket_ifname_outside_nccls_grammar_is_refused() {
        let mut json = minimal(serde_json::json!({"kind": "ib-verbs"}), Some("x"));
        json["nccl"]["socket_ifname"] = serde_json::json!("eth0 eth1");
        let e = Profile::from_json(json.clone())
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.socket_ifname");
        assert!(e.message.contains("^docker,lo"), "{e}");
        json["nccl"]["socket_ifname"] = serde_json::json!("$(id)");
        assert!(Profile::from_json(json.clone()).unwrap().check().is_err());
        json["nccl"]["socket_ifname"] = serde_json::json!("^docker,lo");
        assert!(Profile::from_json(json).unwrap().check().is_ok());
    }

    #[test]
    fn transport_checks_name_the_field() {
        let ok = Profile::from_json(minimal(serde_json::json!({"kind": "ib-verbs"}), Some("x")))
            .unwrap();
        assert!(ok.check().is_ok() && ok.uses_ib_verbs());
        let e = Profile::from_json(minimal(serde_json::json!({"kind": "ib-verbs"}), None))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.ib_hca");
        let e = Profile::from_json(minimal(serde_json::json!({"kind": "sockets"}), Some("x")))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.ib_hca");
        let plugin = serde_json::json!({
            "kind": "net-plugin", "name": "p", "library": "libnccl-net-p.so",
            "library_dir": "/opt/p/lib", "env": {"P_PROVIDER": "x"},
            "required_env": ["P_PROVIDER", "P_OTHER"], "install": ["true"],
        });
        let e = Profile::from_json(minimal(plugin, None))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.transport.required_env[1]");
        let host = serde_json::json!({
            "kind": "net-plugin", "name": "p", "library": "libnccl-net.so",
            "library_dir": "/usr/local/p/lib", "source": "host",
        });
        let e = Profile::from_json(minimal(host, None))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.transport.library_dir");
        assert!(e.message.contains("host_paths"), "{e}");
    }

    #[test]
    fn instance_types_are_checked() {
        let mut v = minimal(serde_json::json!({"kind": "ib-verbs"}), Some("x"));
        v["instance_types"] = serde_json::json!({
            "big": {"gpus": 8, "rdma_devices": 4, "nic_gbps": 200.0, "gpudirect": true, "pcie_gen": 9}
        });
        let e = Profile::from_json(v.clone()).unwrap().check().unwrap_err();
        assert_eq!(e.field, "instance_types.big.pcie_gen");
        v["instance_types"]["big"]["pcie_gen"] = serde_json::json!(5);
        v["values"] = serde_json::json!({"instance_type": "small"});
        let e = Profile::from_json(v.clone()).unwrap().check().unwrap_err();
        assert_eq!(e.field, "values.instance_type");
        assert!(e.message.contains("big"), "{e}");
        v["values"] = serde_json::json!({"instance_type": "big"});
        let p = Profile::from_json(v).unwrap();
        p.check().unwrap();
        let f = p.expectation_facts(None).unwrap();
        assert_eq!(
            (f.nics_per_node, f.nics_used, f.nic_line_gbps),
            (4, 4, 200.0)
        );
    }

    /// Issue 25: FI_PROVIDER in both maps rendered a RayCluster with the variable twice.
    #[test]
    fn a_variable_from_two_fields_is_refused_naming_both() {
        let plugin = serde_json::json!({
            "kind": "net-plugin", "name": "aws-ofi-nccl", "library": "libnccl-net-ofi.so",
            "library_dir": "/opt/aws-ofi-nccl/lib", "env": {"FI_PROVIDER": "efa"}, "install": ["true"],
        });
        let mut v = minimal(plugin, None);
        v["nccl"]["extra_env"] =
            serde_json::json!({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"});
        let e = Profile::from_json(v.clone()).unwrap().check().unwrap_err();
        assert_eq!(e.field, "nccl.extra_env.FI_PROVIDER");
        assert!(e.message.contains("nccl.transport.env.FI_PROVIDER"), "{e}");
        v["nccl"]["extra_env"] = serde_json::json!({"FI_EFA_USE_DEVICE_RDMA": "1"});
        Profile::from_json(v).unwrap().check().unwrap();
        // A variable a field renders counts too.
        let mut v = minimal(serde_json::json!({"kind": "ib-verbs"}), Some("mlx5"));
        v["nccl"]["extra_env"] = serde_json::json!({"NCCL_IB_HCA": "=mlx5_0"});
        let e = Profile::from_json(v).unwrap().check().unwrap_err();
        assert_eq!(e.field, "nccl.extra_env.NCCL_IB_HCA");
        assert!(e.message.contains("nccl.ib_hca"), "{e}");
    }

    #[test]
    fn exclude_globs_are_checked() {
        let mut v = minimal(serde_json::json!({"kind": "ib-verbs"}), Some("x"));
        v["devices"]["exclude"] = serde_json::json!(["x_bond_*", "x_1; id"]);
        let e = Profile::from_json(v).unwrap().check().unwrap_err();
        assert_eq!(e.field, "devices.exclude[1]");
    }

    #[test]
    fn versions() {
        assert!(check_version("v", "2.30.7").is_ok());
        assert!(check_version("v", "2.30.x").is_err());
        assert!(check_version("v", "").is_err());
    }
}
