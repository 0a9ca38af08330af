//! Validation of core Kubernetes kinds through the k8s-openapi types.

use k8s_render::manifest::{self, Document, Severity};
use k8s_render::validate::{self, ValidateOptions, Violation, ViolationKind};

fn parse(yaml: &str) -> Vec<Document> {
    manifest::parse_str("core.yaml", yaml).expect("test YAML parses")
}

fn strict(docs: &[Document]) -> Vec<Violation> {
    validate::validate(docs, &ValidateOptions::default())
}

const BUILDKIT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: buildkitd
  labels: {app: buildkitd}
spec:
  replicas: 1
  selector:
    matchLabels: {app: buildkitd}
  template:
    metadata:
      labels: {app: buildkitd}
    spec:
      containers:
      - name: buildkitd
        image: moby/buildkit:v0.23.2
        args: ["--addr", "tcp://0.0.0.0:1234"]
        securityContext: {privileged: true}
        ports: [{containerPort: 1234}]
        volumeMounts: [{name: cache, mountPath: /var/lib/buildkit}]
      volumes:
      - name: cache
        persistentVolumeClaim: {claimName: buildkit-cache}
---
apiVersion: v1
kind: Service
metadata: {name: buildkitd}
spec:
  selector: {app: buildkitd}
  ports: [{port: 1234, targetPort: 1234}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: buildkit-cache}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 200Gi}}
---
apiVersion: v1
kind: Secret
metadata: {name: buildkit-push-creds}
type: Opaque
stringData: {config.json: "{}"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: dockerfile}
data: {Dockerfile: "FROM rayproject/ray-llm:2.57.0-py312-cu130\n"}
"#;

#[test]
fn core_kinds_pass_strict_validation() {
    let docs = parse(BUILDKIT);
    assert_eq!(docs.len(), 5);
    let v = strict(&docs);
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn pod_errors_name_path_type_and_line() {
    let docs = parse(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: rdma-test
spec:
  hostNetwork: "true"
  containers:
  - image: busybox
    imagePullPolcy: Always
    env:
    - name: NCCL_IB_DISABLE
      value: 0
    resources:
      limits:
        memory: lots
"#,
    );
    let v = strict(&docs);
    let find = |p: &str| {
        v.iter()
            .find(|x| x.location.path.to_string() == p)
            .unwrap_or_else(|| panic!("no violation at {p}: {v:#?}"))
    };
    let host = find("spec.hostNetwork");
    assert_eq!(host.kind, ViolationKind::WrongType);
    assert!(
        host.message
            .contains("expected boolean, got string \"true\" (remove the quotes)")
    );
    assert_eq!(host.location.line, Some(6));
    let typo = find("spec.containers[0].imagePullPolcy");
    assert_eq!(typo.kind, ViolationKind::UnknownField);
    assert!(typo.message.contains("did you mean \"imagePullPolicy\""));
    assert_eq!(typo.location.line, Some(9));
    let env = find("spec.containers[0].env[0].value");
    assert!(
        env.message
            .contains("expected string, got integer 0 (quote it: \"0\")"),
        "{}",
        env.message
    );
    assert_eq!(
        find("spec.containers[0].name").kind,
        ViolationKind::MissingRequired
    );
    assert_eq!(
        find("spec.containers[0].resources.limits.memory").kind,
        ViolationKind::InvalidValue
    );
    assert_eq!(v.len(), 5, "{v:#?}");
    assert!(
        host.to_string()
            .starts_with("core.yaml doc 0 (Pod rdma-test) line 6: spec.hostNetwork: ")
    );
}

#[test]
fn non_strict_mode_warns_on_unknown_fields_and_refuses_wrong_types() {
    let docs = parse(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndatta: {a: b}\ndata: {num: 1}\n",
    );
    let lax = validate::validate(
        &docs,
        &ValidateOptions {
            strict: false,
            ..ValidateOptions::default()
        },
    );
    let got: Vec<(String, Severity)> = lax
        .iter()
        .map(|v| (v.location.path.to_string(), v.severity))
        .collect();
    assert_eq!(
        got,
        [
            ("data.num".to_owned(), Severity::Error),
            ("datta".to_owned(), Severity::Warning)
        ],
        "{lax:#?}"
    );
    assert!(
        lax[1].message.contains("did you mean \"data\"?"),
        "{}",
        lax[1]
    );
    assert!(strict(&docs).iter().all(|v| v.severity == Severity::Error));
    assert_eq!(strict(&docs).len(), 2);
}

#[test]
fn dra_objects_are_checked_with_the_v1_types() {
    let docs = parse(
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: erdma}
spec:
  spec:
    devices:
      requests:
      - name: erdma
        exactly:
          deviceClassName: erdma.alibaba.dra.net
          count: "1"
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: Erdma_Class}
spec:
  selectors:
  - cel: {expresion: "device.driver == \"dra.net\""}
"#,
    );
    let v = strict(&docs);
    let paths: Vec<String> = v
        .iter()
        .map(|x| format!("{} {}", x.location.doc, x.location.path))
        .collect();
    assert!(
        paths.contains(&"0 spec.spec.devices.requests[0].exactly.count".to_owned()),
        "{paths:?}"
    );
    assert!(paths.contains(&"1 metadata.name".to_owned()), "{paths:?}");
    assert!(
        paths.contains(&"1 spec.selectors[0].cel.expresion".to_owned()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"1 spec.selectors[0].cel.expression".to_owned()),
        "{paths:?}"
    );
}

#[test]
fn rendered_objects_without_positions_validate_too() {
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "ray-head"},
        "spec": {"ports": [{"port": "6379"}]},
    });
    let doc = Document::from_value("bundle/ray-head-svc.yaml", 0, value).expect("an object");
    let v = strict(std::slice::from_ref(&doc));
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].location.line, None);
    assert_eq!(v[0].location.path.to_string(), "spec.ports[0].port");
}
