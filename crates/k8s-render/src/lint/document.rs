//! The rules over one manifest document: its pods (RDMA devices, capabilities, host network, DRA
//! claims, requests and limits, `/dev/shm`, vendor mounts), its Ray groups, its mesh sidecars, and
//! the text rules over every string in it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::catalog::*;
use super::nccl::lint_nccl_env;
use super::pod::{
    Container, EnvVar, PodSite, find_pods, is_gpu_resource, is_rdma_claim, is_rdma_resource,
};
use super::text::{good_nccl_pin, other_vendor, text_rules};
use super::{Finding, LintOptions, Rule};
use crate::DevicePattern;
use crate::manifest::{Document, FieldPath, Location, PathSeg, Severity};

pub(super) struct Ctx<'a> {
    pub(super) doc: &'a Document,
    pub(super) options: &'a LintOptions,
    pub(super) out: &'a mut Vec<Finding>,
}

impl Ctx<'_> {
    pub(super) fn emit(
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
            location: Location::in_document(self.doc, path),
            message,
            why: rule.why,
            fix: fix.into(),
        });
    }

    pub(super) fn hit(
        &mut self,
        rule: &'static Rule,
        path: FieldPath,
        message: String,
        fix: impl Into<String>,
    ) {
        self.emit(rule, rule.severity, path, message, fix);
    }
}

pub(super) fn lint_document(doc: &Document, options: &LintOptions, out: &mut Vec<Finding>) {
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
        .as_ref()
        .is_some_and(DevicePattern::names_erdma)
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
        // Only with a profile: outside an RDMA bundle IPC_LOCK has other uses (mlock, hugepages), and
        // only when the container asks for no device at all (an unknown resource may be the NIC).
        if options.device_pattern.is_some()
            && !pod_rdma
            && !pod_has_any_claim
            && !c.privileged()
            && c.names_ipc_lock()
            && !c.requests_other_device()
        {
            let fix = match options.extra_rdma_resources.first() {
                Some(r) => format!("add {r}: \"1\" to the container's resources.limits"),
                // A DRA profile: the device comes from a claim.
                None => "add a resourceClaim for the profile's RDMA DeviceClass to the pod and list it in the container's resources.claims".to_string(),
            };
            cx.hit(
                IPC_LOCK_WITHOUT_RDMA,
                c.path.key("resources").key("limits"),
                format!("container {:?} ({role}) adds IPC_LOCK for RDMA but its pod requests no RDMA resource or claim", c.name),
                format!("{fix}; drop IPC_LOCK if this container does no RDMA"),
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

/// Text rules over every string in the document (commands, args, env, ConfigMap data), in document
/// order. The path of a string is built only when a rule fires on it (most strings have none).
fn lint_strings(cx: &mut Ctx<'_>, erdma: bool) {
    fn any_string(v: &Value, pred: &impl Fn(&str) -> bool) -> bool {
        match v {
            Value::String(s) => pred(s),
            Value::Array(a) => a.iter().any(|x| any_string(x, pred)),
            Value::Object(m) => m.values().any(|x| any_string(x, pred)),
            _ => false,
        }
    }
    /// A step of the path being walked, borrowed from the document.
    enum Step<'v> {
        Key(&'v str),
        Index(usize),
    }
    struct Walk<'c, 'd, 'v> {
        cx: &'c mut Ctx<'d>,
        erdma: bool,
        other_vendor: bool,
        has_good_pin: bool,
        /// The path of the value being walked.
        path: Vec<Step<'v>>,
    }
    impl<'v> Walk<'_, '_, 'v> {
        fn value(&mut self, v: &'v Value) {
            match v {
                Value::String(s) => {
                    let hits = text_rules(
                        s,
                        self.erdma,
                        self.other_vendor,
                        self.has_good_pin,
                        self.cx.options.plugin.as_ref(),
                    );
                    if hits.is_empty() {
                        return;
                    }
                    let path = FieldPath::from_segments(
                        self.path
                            .iter()
                            .map(|s| match s {
                                Step::Key(k) => PathSeg::Key((*k).to_owned()),
                                Step::Index(i) => PathSeg::Index(*i),
                            })
                            .collect(),
                    );
                    for ((rule, severity, message, fix), _) in hits {
                        self.cx.emit(rule, severity, path.clone(), message, fix);
                    }
                }
                Value::Array(a) => {
                    for (i, x) in a.iter().enumerate() {
                        self.path.push(Step::Index(i));
                        self.value(x);
                        self.path.pop();
                    }
                }
                Value::Object(m) => {
                    for (k, x) in m {
                        self.path.push(Step::Key(k));
                        self.value(x);
                        self.path.pop();
                    }
                }
                _ => {}
            }
        }
    }
    let doc = cx.doc;
    let has_good_pin = any_string(&doc.value, &good_nccl_pin);
    let other_vendor = other_vendor(cx.options);
    Walk {
        cx,
        erdma,
        other_vendor,
        has_good_pin,
        path: Vec::new(),
    }
    .value(&doc.value);
}
