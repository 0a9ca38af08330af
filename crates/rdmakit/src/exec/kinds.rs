//! The kinds workflows name by their bare kind (`kube::wait_pods`, `kube::get_field("RayCluster", ..)`,
//! `kube::list("ResourceSlice")`): the one table of each kind's apiVersion, kubectl plural and scope, used
//! by the live executor, the dry-run executor (plan.sh's `kubectl get PLURAL`) and the fake API servers of
//! the tests; and what to install when a cluster does not serve one.

/// One kind workflows use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    /// `Pod`, `RayCluster`, ...
    pub kind: &'static str,
    /// The apiVersion workflows mean by the bare kind (`v1`, `ray.io/v1`).
    pub api_version: &'static str,
    /// The lowercase plural of the API path and of `kubectl get` (`rayclusters`).
    pub plural: &'static str,
    /// Namespaced (`true`) or cluster-scoped.
    pub namespaced: bool,
}

impl KindInfo {
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &'static str {
        self.api_version
            .split_once('/')
            .map_or("", |(group, _)| group)
    }
}

const fn kind(
    kind: &'static str,
    api_version: &'static str,
    plural: &'static str,
    namespaced: bool,
) -> KindInfo {
    KindInfo {
        kind,
        api_version,
        plural,
        namespaced,
    }
}

/// Every kind a workflow may name without an apiVersion.
pub const KINDS: &[KindInfo] = &[
    kind("Pod", "v1", "pods", true),
    kind("Node", "v1", "nodes", false),
    kind("Secret", "v1", "secrets", true),
    kind("Service", "v1", "services", true),
    kind("ConfigMap", "v1", "configmaps", true),
    kind(
        "PersistentVolumeClaim",
        "v1",
        "persistentvolumeclaims",
        true,
    ),
    kind("Namespace", "v1", "namespaces", false),
    kind("ServiceAccount", "v1", "serviceaccounts", true),
    kind("Event", "v1", "events", true),
    kind("Deployment", "apps/v1", "deployments", true),
    kind("DaemonSet", "apps/v1", "daemonsets", true),
    kind("StatefulSet", "apps/v1", "statefulsets", true),
    kind("Job", "batch/v1", "jobs", true),
    kind("RayCluster", "ray.io/v1", "rayclusters", true),
    kind("RayJob", "ray.io/v1", "rayjobs", true),
    kind("MPIJob", "kubeflow.org/v2beta1", "mpijobs", true),
    kind(
        "ResourceClaim",
        "resource.k8s.io/v1",
        "resourceclaims",
        true,
    ),
    kind(
        "ResourceClaimTemplate",
        "resource.k8s.io/v1",
        "resourceclaimtemplates",
        true,
    ),
    kind(
        "ResourceSlice",
        "resource.k8s.io/v1",
        "resourceslices",
        false,
    ),
    kind("DeviceClass", "resource.k8s.io/v1", "deviceclasses", false),
];

/// The table's row for `kind` (exact, as manifests spell it).
pub fn lookup(kind: &str) -> Option<&'static KindInfo> {
    KINDS.iter().find(|k| k.kind == kind)
}

/// The apiVersion workflows mean by a bare kind name.
pub fn api_version_for_kind(kind: &str) -> Option<&'static str> {
    lookup(kind).map(|k| k.api_version)
}

/// kubectl's lowercase plural: the table's for the kinds workflows use, English rules for any other
/// (`Ingress` -> `ingresses`).
pub fn plural_lower(kind: &str) -> String {
    if let Some(k) = lookup(kind) {
        return k.plural.to_owned();
    }
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// How to get an API the cluster does not serve.
pub fn missing_api_fix(kind: &str) -> String {
    match lookup(kind).map(KindInfo::group) {
        Some("ray.io") => "install the KubeRay operator (it serves ray.io/v1)".into(),
        Some("kubeflow.org") => "install the MPI Operator: kubectl apply --server-side -k \"https://github.com/kubeflow/mpi-operator/manifests/overlays/standalone?ref=v0.7.0\"".into(),
        Some("resource.k8s.io") => {
            "use Kubernetes 1.34+ with DynamicResourceAllocation enabled (resource.k8s.io/v1), then install DRANET".into()
        }
        _ => format!("install the CRD or operator that provides {kind}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_with_its_kubectl_plural() {
        for k in KINDS {
            assert_eq!(
                KINDS.iter().filter(|o| o.kind == k.kind).count(),
                1,
                "{}",
                k.kind
            );
            assert_eq!(plural_lower(k.kind), k.plural);
        }
        assert_eq!(plural_lower("Ingress"), "ingresses");
        assert_eq!(plural_lower("Widget"), "widgets");
        assert_eq!(api_version_for_kind("MPIJob"), Some("kubeflow.org/v2beta1"));
        assert_eq!(api_version_for_kind("Widget"), None);
        assert_eq!(lookup("Pod").map(KindInfo::group), Some(""));
        assert!(missing_api_fix("RayJob").contains("KubeRay"));
        assert!(missing_api_fix("ResourceSlice").contains("DynamicResourceAllocation"));
        assert_eq!(
            missing_api_fix("Widget"),
            "install the CRD or operator that provides Widget"
        );
    }
}
