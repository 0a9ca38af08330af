//! The environment rules of one container: `NCCL_IB_HCA` against the profile's devices, the
//! variables that force NCCL onto TCP, UCX on eRDMA, the GID index, and what the profile's net plugin
//! needs.

use super::catalog::*;
use super::document::Ctx;
use super::pod::{Container, EnvVar, PodSite};
use crate::DevicePattern;
use crate::manifest::Severity;

#[allow(clippy::too_many_arguments)]
pub(super) fn lint_nccl_env(
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
                (options.device_pattern.as_ref(), hca.value.as_deref())
            && let Some(bad) = hca_mismatch(v, pattern)
        {
            cx.hit(
                HCA_MISMATCH,
                hca.path.clone(),
                format!("NCCL_IB_HCA={v}: {bad:?} does not match the device pattern {pattern}"),
                format!(
                    "set NCCL_IB_HCA to a device name (or prefix) matching {pattern}, e.g. {}",
                    pattern.example()
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
    lint_plugin_env(cx, c, role, pod_rdma, pod_has_any_claim);
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
fn lint_plugin_env(
    cx: &mut Ctx<'_>,
    c: &Container<'_>,
    role: &str,
    pod_rdma: bool,
    pod_has_any_claim: bool,
) {
    let Some(plugin) = cx.options.plugin.as_ref() else {
        return;
    };
    if !pod_rdma && !pod_has_any_claim {
        // The plugin's provider settings say the container means to use the fabric: it needs the device.
        if let Some((key, e)) = plugin
            .required_env
            .iter()
            .find_map(|(key, _)| c.env_value(key).map(|e| (key, e)))
        {
            cx.hit(
                PLUGIN_WITHOUT_RDMA,
                e.path.clone(),
                format!(
                    "container {:?} ({role}) sets {key}{} for the {} plugin but the pod requests no RDMA resource or claim",
                    c.name,
                    origin(e),
                    plugin.name
                ),
                match cx.options.extra_rdma_resources.as_slice() {
                    [] => "add the profile's DRA resourceClaim for the RDMA devices to the pod".to_string(),
                    r => format!(
                        "request the profile's RDMA resource in resources.limits ({}: the instance's device count) or add a DRA resourceClaim",
                        r.join(", ")
                    ),
                },
            );
        }
        return;
    }
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

/// Returns the first `NCCL_IB_HCA` entry that selects no device of the pattern: an entry is a name
/// prefix, or an exact name after a leading `=`; a leading `^` excludes devices and is not checked.
fn hca_mismatch(value: &str, pattern: &DevicePattern) -> Option<String> {
    let v = value.trim();
    if v.is_empty() || v.starts_with('^') {
        return None; // exclusion lists name devices to avoid
    }
    let (exact, list) = match v.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    for entry in list.split(',') {
        let dev = entry.split(':').next().unwrap_or("").trim();
        if dev.is_empty() {
            continue;
        }
        let ok = if exact {
            pattern.matches(dev)
        } else {
            pattern.matches_prefix(dev)
        };
        if !ok {
            return Some(dev.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hca_patterns() {
        let p = |s: &str| DevicePattern::from(s);
        assert_eq!(hca_mismatch("erdma", &p("erdma_*")), None);
        assert_eq!(hca_mismatch("erdma_0", &p("erdma_*")), None);
        assert_eq!(hca_mismatch("erdma_0:1,erdma_1:1", &p("erdma_*")), None);
        assert_eq!(
            hca_mismatch("mlx5_0", &p("erdma_*")),
            Some("mlx5_0".to_owned())
        );
        assert_eq!(hca_mismatch("=mlx5", &p("mlx5_*")), Some("mlx5".to_owned()));
        assert_eq!(hca_mismatch("^mlx5_2", &p("erdma_*")), None);
        assert_eq!(hca_mismatch("mlx5_1", &p("erdma_*,mlx5_*")), None);
    }
}
