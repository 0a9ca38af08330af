//! Validation of custom resources (RayCluster, MPIJob) and DRA objects against the vendored
//! schemas: seed manifests pass strict mode; typos, wrong types and missing fields are caught.

use k8s_render::manifest::Severity;
use k8s_render::manifest::{self, Document, FieldPath};
use k8s_render::validate::{self, ValidateOptions, Validator, Violation, ViolationKind};

fn fixture(name: &str) -> Vec<Document> {
    let path = format!("{}/tests/fixtures/check/{name}", env!("CARGO_MANIFEST_DIR"));
    manifest::read_path(&path).expect("fixture parses")
}

fn strict(docs: &[Document]) -> Vec<Violation> {
    validate::validate(docs, &ValidateOptions::default())
}

fn at<'v>(violations: &'v [Violation], path: &str) -> Vec<&'v Violation> {
    violations
        .iter()
        .filter(|v| v.location.path.to_string() == path)
        .collect()
}

#[test]
fn seed_manifests_pass_strict_validation() {
    for name in [
        "ray-cluster-erdma.yaml",
        "raycluster-shared-device.yaml",
        "dranet-mpijob.yaml",
        "vke-rdma-pod.yaml",
    ] {
        let docs = fixture(name);
        let v = strict(&docs);
        assert!(
            v.is_empty(),
            "{name}: {}",
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn misspelt_field_is_an_error_in_strict_mode_and_a_warning_without() {
    let docs = fixture("ray-cluster-typos.yaml");
    let v = strict(&docs);
    let typo = at(&v, "spec.workerGroupSpecs[0].template.spec.hostNetwrok");
    assert_eq!(typo.len(), 1, "{v:#?}");
    assert_eq!(typo[0].kind, ViolationKind::UnknownField);
    assert!(
        typo[0].message.contains("did you mean \"hostNetwork\""),
        "{}",
        typo[0].message
    );
    assert_eq!(typo[0].location.line, Some(22));

    let lax = validate::validate(
        &docs,
        &ValidateOptions {
            strict: false,
            ..ValidateOptions::default()
        },
    );
    let lax_typo = at(&lax, "spec.workerGroupSpecs[0].template.spec.hostNetwrok");
    assert_eq!(lax_typo.len(), 1, "{lax:#?}");
    assert_eq!(lax_typo[0].severity, Severity::Warning);
    assert!(
        lax.iter()
            .filter(|v| v.kind == ViolationKind::UnknownField)
            .all(|v| v.severity == Severity::Warning),
        "{lax:#?}"
    );
    // The type error is reported in both modes.
    assert_eq!(
        at(&lax, "spec.headGroupSpec.rayStartParams.num-gpus").len(),
        1
    );
}

#[test]
fn unquoted_ray_start_param_names_document_path_and_type() {
    let docs = fixture("ray-cluster-typos.yaml");
    let v = strict(&docs);
    let hit = at(&v, "spec.headGroupSpec.rayStartParams.num-gpus");
    assert_eq!(hit.len(), 1, "{v:#?}");
    assert_eq!(hit[0].kind, ViolationKind::WrongType);
    let text = hit[0].to_string();
    assert!(
        text.ends_with("/check/ray-cluster-typos.yaml doc 0 (RayCluster ray-erdma-cluster) line 11: spec.headGroupSpec.rayStartParams.num-gpus: expected string, got integer 0 (rayStartParams values must be quoted strings: write \"0\")")
            && text.starts_with(env!("CARGO_MANIFEST_DIR")),
        "{text}"
    );
}

#[test]
fn missing_required_field_is_reported_after_defaults() {
    let docs = fixture("ray-cluster-typos.yaml");
    let v = strict(&docs);
    let missing = at(&v, "spec.workerGroupSpecs[0].groupName");
    assert_eq!(missing.len(), 1, "{v:#?}");
    assert_eq!(missing[0].kind, ViolationKind::MissingRequired);
    // minReplicas/maxReplicas are required too, but have schema defaults: not reported.
    assert!(at(&v, "spec.workerGroupSpecs[0].minReplicas").is_empty());
    assert!(at(&v, "spec.workerGroupSpecs[0].maxReplicas").is_empty());
    assert_eq!(v.len(), 3, "{v:#?}");
}

fn parse(yaml: &str) -> Vec<Document> {
    manifest::parse_str("test.yaml", yaml).expect("test YAML parses")
}

#[test]
fn mpijob_wrong_type_enum_and_quantity() {
    let docs = parse(
        r#"
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: nccl-test
spec:
  slotsPerWorker: "2"
  mpiImplementation: OpenMPl
  mpiReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: nccl
            image: nccl-tests
            resources:
              limits:
                memory: 16 GB
"#,
    );
    let v = strict(&docs);
    let slots = at(&v, "spec.slotsPerWorker");
    assert_eq!(slots.len(), 1, "{v:#?}");
    assert!(
        slots[0]
            .message
            .contains("expected integer, got string \"2\" (remove the quotes)"),
        "{}",
        slots[0].message
    );
    let mpi = at(&v, "spec.mpiImplementation");
    assert_eq!(mpi[0].kind, ViolationKind::InvalidValue);
    assert!(mpi[0].message.contains("\"OpenMPI\""), "{}", mpi[0].message);
    let mem = at(
        &v,
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.limits.memory",
    );
    assert_eq!(mem.len(), 1, "{v:#?}");
    assert_eq!(mem[0].kind, ViolationKind::InvalidValue);
    assert_eq!(v.len(), 3, "{v:#?}");
}

#[test]
fn custom_resource_metadata_is_checked_as_object_meta() {
    let docs = parse(
        r#"
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: demo
  lables:
    app: ray
  annotations:
    replicas: 2
spec:
  headGroupSpec:
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.57.0
"#,
    );
    let v = strict(&docs);
    assert_eq!(
        at(&v, "metadata.lables")[0].kind,
        ViolationKind::UnknownField
    );
    assert!(
        at(&v, "metadata.lables")[0]
            .message
            .contains("did you mean \"labels\"")
    );
    assert_eq!(
        at(&v, "metadata.annotations.replicas")[0].kind,
        ViolationKind::WrongType
    );
}

#[test]
fn unknown_kinds_and_versions_are_explained() {
    let docs = parse(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\napiVersion: ray.io/v1beta1\nkind: RayCluster\nmetadata: {name: r}\n",
    );
    let v = strict(&docs);
    assert_eq!(v.len(), 2);
    assert!(
        v.iter()
            .all(|x| x.kind == ViolationKind::UnknownKind && x.severity == Severity::Error)
    );
    assert!(
        v[0].message.contains("supported kinds:") && v[0].message.contains("ray.io/v1 RayCluster"),
        "{}",
        v[0].message
    );
    assert!(
        v[1].message.contains("served as ray.io/v1 RayCluster"),
        "{}",
        v[1].message
    );

    let lenient = validate::validate(
        &docs,
        &ValidateOptions {
            allow_unknown_kinds: true,
            ..ValidateOptions::default()
        },
    );
    assert!(lenient.iter().all(|x| x.severity == Severity::Warning));
}

#[test]
fn extra_crds_can_be_added() {
    let crd = parse(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
"#,
    );
    let mut validator = Validator::new(ValidateOptions::default());
    validator.add_crd(&crd[0]).expect("valid CRD");
    assert!(
        validator
            .supported_kinds()
            .contains(&"example.com/v1 Widget".to_owned())
    );
    let docs = parse(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n  size: 0\n  extra: {anything: [1, 2]}\n",
    );
    let v = validator.validate_all(&docs);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(
        v[0].location.path,
        FieldPath::root().key("spec").key("size")
    );
    assert!(v[0].message.contains("below the minimum"));

    let not_a_crd = parse("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    assert!(validator.add_crd(&not_a_crd[0]).is_err());
}

/// Schema defaults are applied as the API server applies them without copying the document: a default
/// satisfies `required`, and a default lands where it is inserted and is checked there (its own required
/// fields and its own defaults), while the document itself is left as it was.
#[test]
fn defaults_satisfy_required_and_are_checked_where_they_land() {
    let crd = parse(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  names: {kind: Gadget, plural: gadgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            required: [mode, limits, policy]
            properties:
              mode: {type: string, default: fast, enum: [fast, slow]}
              limits:
                type: object
                default: {}
                required: [depth]
                properties:
                  depth: {type: integer, default: 3, minimum: 1}
              policy:
                type: object
                default: {}
                required: [owner]
                properties:
                  owner: {type: string}
"#,
    );
    let mut validator = Validator::new(ValidateOptions::default());
    validator.add_crd(&crd[0]).expect("valid CRD");
    let docs = parse("apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\nspec: {}\n");
    let before = docs[0].value.clone();
    let v = validator.validate_all(&docs);
    // mode and limits (and limits.depth, defaulted inside the defaulted object) are satisfied; the
    // defaulted policy object lacks its required owner, as it would on the API server.
    let paths: Vec<String> = v.iter().map(|x| x.location.path.to_string()).collect();
    assert_eq!(paths, ["spec.policy.owner"], "{v:#?}");
    assert!(v[0].message.contains("required field is missing"), "{v:#?}");
    assert_eq!(
        docs[0].value, before,
        "validation must not change the document"
    );

    // A value given explicitly is checked, not the default.
    let docs = parse(
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\nspec: {mode: warp, limits: {depth: 0}, policy: {owner: me}}\n",
    );
    let v = validator.validate_all(&docs);
    let paths: Vec<String> = v.iter().map(|x| x.location.path.to_string()).collect();
    assert_eq!(paths, ["spec.limits.depth", "spec.mode"], "{v:#?}");
}

#[test]
fn crds_in_the_stream_are_learnt_and_checked() {
    let docs = parse(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  names: {kind: Gadget, plural: gadgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              ports: {type: integer}
---
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g}
spec: {ports: "8"}
"#,
    );
    let v = strict(&docs);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(
        (v[0].location.doc, v[0].location.path.to_string()),
        (1, "spec.ports".to_owned())
    );
}

#[test]
fn vendored_crds_are_valid_custom_resource_definitions() {
    for name in ["ray.io_rayclusters.yaml", "kubeflow.org_mpijobs.yaml"] {
        let path = format!("{}/schemas/{name}", env!("CARGO_MANIFEST_DIR"));
        let docs = manifest::read_path(&path).expect("CRD parses");
        assert_eq!(docs[0].kind, "CustomResourceDefinition");
        let v = strict(&docs);
        assert!(v.is_empty(), "{name}: {v:#?}");
    }
}

#[test]
fn embedded_resources_and_preserved_fields() {
    let docs = parse(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: wrappers.example.com}
spec:
  group: example.com
  names: {kind: Wrapper, plural: wrappers}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              object:
                type: object
                x-kubernetes-embedded-resource: true
                properties:
                  spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
              count:
                x-kubernetes-int-or-string: true
                anyOf: [{type: integer}, {type: string}]
---
apiVersion: example.com/v1
kind: Wrapper
metadata: {name: ok}
spec:
  count: "50%"
  object:
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: inner}
    spec: {anything: {goes: [1]}}
---
apiVersion: example.com/v1
kind: Wrapper
metadata: {name: bad}
spec:
  count: 1.5
  object:
    metadata: {nmae: inner}
"#,
    );
    let v = strict(&docs);
    let got: Vec<String> = v
        .iter()
        .map(|x| format!("{} {} {:?}", x.location.doc, x.location.path, x.kind))
        .collect();
    assert_eq!(
        got,
        [
            "2 spec.count WrongType",
            "2 spec.object.apiVersion MissingRequired",
            "2 spec.object.kind MissingRequired",
            "2 spec.object.metadata.nmae UnknownField",
        ],
        "{v:#?}"
    );
}
