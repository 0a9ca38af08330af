//! What the API server and the operators reject (or silently break) beyond the OpenAPI schema:
//! each broken manifest here passed `validate --strict` before these checks existed.

use k8s_render::manifest::{self, Severity};
use k8s_render::validate::{self, ValidateOptions, Violation, ViolationKind};

fn violations(yaml: &str) -> Vec<Violation> {
    let docs = manifest::parse_str("case.yaml", yaml).expect("parses");
    validate::validate(&docs, &ValidateOptions::default())
}

/// Exactly one violation, at `path`, of `kind` and `severity`, whose message contains `needle`.
fn one(yaml: &str, path: &str, kind: ViolationKind, severity: Severity, needle: &str) -> Violation {
    let v = violations(yaml);
    assert_eq!(v.len(), 1, "{v:#?}");
    let v = v.into_iter().next().expect("one");
    assert_eq!(v.location.path.to_string(), path, "{v}");
    assert_eq!((v.kind, v.severity), (kind, severity), "{v}");
    assert!(v.message.contains(needle), "{v}");
    v
}

const POD_HEAD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n";

#[test]
fn container_without_image() {
    let v = one(
        &format!("{POD_HEAD}  containers:\n  - name: c\n"),
        "spec.containers[0].image",
        ViolationKind::MissingRequired,
        Severity::Error,
        "container \"c\" has no image",
    );
    assert_eq!(v.location.line, Some(6), "reported at the container");
    // In a Deployment template and a RayCluster worker group too.
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers:\n      - {name: c, image: \"\"}\n";
    one(
        deploy,
        "spec.template.spec.containers[0].image",
        ViolationKind::MissingRequired,
        Severity::Error,
        "set image",
    );
}

#[test]
fn volume_mount_naming_no_volume() {
    let yaml = format!(
        "{POD_HEAD}  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - {{name: dshm, mountPath: /dev/shm}}\n  volumes:\n  - name: shm\n    emptyDir: {{medium: Memory}}\n"
    );
    let v = one(
        &yaml,
        "spec.containers[0].volumeMounts[0].name",
        ViolationKind::InvalidValue,
        Severity::Error,
        "volumeMount \"dshm\" names no volume of the pod (declared: shm; did you mean \"shm\"?)",
    );
    assert_eq!(v.location.line, Some(9));
}

#[test]
fn container_claim_without_pod_resource_claims() {
    let yaml = format!(
        "{POD_HEAD}  containers:\n  - name: c\n    image: busybox\n    resources:\n      claims:\n      - name: erdma\n"
    );
    one(
        &yaml,
        "spec.containers[0].resources.claims[0].name",
        ViolationKind::InvalidValue,
        Severity::Error,
        "add `resourceClaims: [{name: erdma",
    );
}

#[test]
fn host_path_type_outside_the_enum() {
    let yaml = format!(
        "{POD_HEAD}  containers:\n  - {{name: c, image: busybox}}\n  volumes:\n  - name: topo\n    hostPath: {{path: /var/run/nvidia-topologyd, type: Dir}}\n"
    );
    one(
        &yaml,
        "spec.volumes[0].hostPath.type",
        ViolationKind::InvalidValue,
        Severity::Error,
        "\"Dir\" is not a HostPathType: did you mean \"Directory\"?",
    );
    // Every real type (and the empty one) passes.
    for t in "\"\" DirectoryOrCreate Directory FileOrCreate File Socket CharDevice BlockDevice"
        .split(' ')
    {
        let ok = format!(
            "{POD_HEAD}  containers:\n  - {{name: c, image: busybox}}\n  volumes:\n  - name: v\n    hostPath: {{path: /x, type: {t}}}\n"
        );
        assert!(violations(&ok).is_empty(), "{t}: {:#?}", violations(&ok));
    }
}

#[test]
fn duplicate_container_and_volume_names() {
    let yaml = format!(
        "{POD_HEAD}  containers:\n  - {{name: c, image: busybox}}\n  - {{name: c, image: busybox}}\n  volumes:\n  - {{name: v, emptyDir: {{}}}}\n  - {{name: v, emptyDir: {{}}}}\n"
    );
    let v = violations(&yaml);
    let paths: Vec<String> = v.iter().map(|v| v.location.path.to_string()).collect();
    assert_eq!(
        paths,
        ["spec.containers[1].name", "spec.volumes[1].name"],
        "{v:#?}"
    );
    assert!(v[0].message.contains("already used by spec.containers[0]"));
}

const MPIJOB: &str = "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: j}\nspec:\n  mpiReplicaSpecs:\n    Launcher:\n      replicas: 1\n      template:\n        spec:\n          containers:\n          - {name: l, image: nccl-tests}\n";

#[test]
fn mpijob_replica_type_other_than_launcher_or_worker() {
    let yaml = format!(
        "{MPIJOB}    worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n          - {{name: w, image: nccl-tests}}\n"
    );
    let v = one(
        &yaml,
        "spec.mpiReplicaSpecs.worker",
        ViolationKind::InvalidValue,
        // The API server accepts the key (the control-plane tier applies it); the operator ignores it, so
        // the job that runs has no workers: refused.
        Severity::Error,
        "did you mean \"Worker\"? the API server accepts it (the CRD's mpiReplicaSpecs is an open map), but the MPI Operator v0.7.0 acts only on Launcher and Worker",
    );
    assert_eq!(v.location.line, Some(12));
    let good = format!(
        "{MPIJOB}    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n          - {{name: w, image: nccl-tests}}\n"
    );
    assert!(violations(&good).is_empty(), "{:#?}", violations(&good));
}

fn raycluster(replicas: &str) -> String {
    format!(
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {{name: r}}\nspec:\n  headGroupSpec:\n    rayStartParams: {{}}\n    template:\n      spec:\n        containers:\n        - {{name: ray-head, image: rayproject/ray:2.57.0}}\n  workerGroupSpecs:\n  - groupName: g\n    {replicas}\n    rayStartParams: {{}}\n    template:\n      spec:\n        containers:\n        - {{name: ray-worker, image: rayproject/ray:2.57.0}}\n"
    )
}

#[test]
fn ray_replicas_outside_min_max_is_an_error_under_strict_and_min_above_max_always() {
    let clamped = raycluster("replicas: 5\n    minReplicas: 1\n    maxReplicas: 2");
    let v = one(
        &clamped,
        "spec.workerGroupSpecs[0].replicas",
        ViolationKind::InvalidValue,
        Severity::Error,
        "replicas 5 is outside minReplicas..maxReplicas (1..2): the API server accepts it, KubeRay v1.5.1 clamps it and runs 2 worker pod(s), not 5",
    );
    assert_eq!(v.location.line, Some(13));
    let docs = manifest::parse_str("case.yaml", &clamped).expect("parses");
    let lax = validate::validate(
        &docs,
        &ValidateOptions {
            strict: false,
            ..ValidateOptions::default()
        },
    );
    assert_eq!(lax.len(), 1, "{lax:#?}");
    assert_eq!(lax[0].severity, Severity::Warning);
    one(
        &raycluster("replicas: 1\n    minReplicas: 3\n    maxReplicas: 2"),
        "spec.workerGroupSpecs[0].minReplicas",
        ViolationKind::InvalidValue,
        Severity::Error,
        "minReplicas 3 is greater than maxReplicas 2: the API server accepts the RayCluster, and KubeRay v1.5.1 logs",
    );
    assert!(
        violations(&raycluster(
            "replicas: 2\n    minReplicas: 1\n    maxReplicas: 2"
        ))
        .is_empty()
    );
}

#[test]
fn the_vendored_kuberay_is_the_one_the_cluster_serves() {
    // authOptions.enableK8sTokenAuth arrived after KubeRay v1.5.1: the v1.5.1 API server prunes
    // or (strict) rejects it, so strict validation must too.
    let yaml = raycluster("replicas: 1\n    minReplicas: 1\n    maxReplicas: 1").replace(
        "spec:\n  headGroupSpec:",
        "spec:\n  authOptions:\n    enableK8sTokenAuth: true\n  headGroupSpec:",
    );
    let v = violations(&yaml);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].kind, ViolationKind::UnknownField);
    assert_eq!(
        v[0].location.path.to_string(),
        "spec.authOptions.enableK8sTokenAuth"
    );
}

#[test]
fn node_selector_and_label_values_follow_the_label_grammar() {
    let pod = format!(
        "{POD_HEAD}  nodeSelector:\n    foo: \"bar; baz\"\n  containers:\n  - {{name: c, image: busybox}}\n"
    );
    let v = one(
        &pod,
        "spec.nodeSelector.foo",
        ViolationKind::InvalidValue,
        Severity::Error,
        "nodeSelector value \"bar; baz\" is not a label value",
    );
    assert!(
        v.message.contains("the API server rejects the object"),
        "{v}"
    );
    assert_eq!(v.location.line, Some(6));
    // Inside a custom resource the API server accepts it; the operator's pod create is refused.
    let ray = raycluster("replicas: 1").replace(
        "    template:\n      spec:\n        containers:\n        - {name: ray-worker",
        "    template:\n      spec:\n        nodeSelector: {pool: \"a b\"}\n        containers:\n        - {name: ray-worker",
    );
    let v = one(
        &ray,
        "spec.workerGroupSpecs[0].template.spec.nodeSelector.pool",
        ViolationKind::InvalidValue,
        Severity::Error,
        "the API server accepts this custom resource",
    );
    assert!(
        v.message
            .contains("the pods the operator creates from it are rejected")
    );
    let labels = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\n    rdma/nic/type: erdma\n    ok.example.com/nic: \"-x\"\n    fine: \"\"\n";
    let v = violations(labels);
    let got: Vec<String> = v.iter().map(|v| v.location.path.to_string()).collect();
    assert_eq!(
        got,
        [
            "metadata.labels[\"ok.example.com/nic\"]",
            "metadata.labels[\"rdma/nic/type\"]"
        ],
        "{v:#?}"
    );
    assert!(
        v[1].message
            .contains("label key \"rdma/nic/type\" is not a label key")
    );
    let good = format!(
        "{POD_HEAD}  nodeSelector:\n    kubernetes.io/hostname: node-1\n  containers:\n  - {{name: c, image: busybox}}\n"
    );
    assert!(violations(&good).is_empty(), "{:#?}", violations(&good));
}

#[test]
fn config_map_and_secret_data_over_one_mib_are_refused() {
    let limit = 1024 * 1024;
    let cm = |n: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big}}\ndata:\n  a: {}\n  b: xy\n",
            "x".repeat(n - 2)
        )
    };
    assert!(violations(&cm(limit)).is_empty());
    let v = one(
        &cm(limit + 1),
        "data",
        ViolationKind::InvalidValue,
        Severity::Error,
        "ConfigMap data + binaryData hold 1048577 bytes, over the API server's limit of 1048576 bytes",
    );
    assert!(
        v.message.contains("largest: a 1048575 bytes, b 2 bytes"),
        "{v}"
    );
    // A Secret counts decoded bytes: 4 base64 characters are 3 bytes; stringData counts as written.
    let b64 = "QUJD".repeat(limit / 3 + 1);
    let secret =
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ndata:\n  k: {b64}\n");
    one(
        &secret,
        "data",
        ViolationKind::InvalidValue,
        Severity::Error,
        "Secret data + stringData hold 1048578 bytes",
    );
    let small = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ndata:\n  k: {}\n",
        "QUJD".repeat(limit / 3)
    );
    assert!(violations(&small).is_empty(), "{:#?}", violations(&small));
}
