//! Validating manifests against the vendored CRD schemas and the Kubernetes API types.
//!
//! * Custom resources (`ray.io/v1` RayCluster, `kubeflow.org/v2beta1` MPIJob, plus any CRD a
//!   caller adds with [`Validator::add_crd`]) are checked against the `openAPIV3Schema` of the
//!   served version in `schemas/`, the way the API server does: schema `default`s are applied
//!   before `required` is checked, `null` counts as unset, `metadata` is checked as an
//!   `ObjectMeta`, and `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields`,
//!   `x-kubernetes-embedded-resource` and `x-kubernetes-list-type: map|set` are honoured.
//! * Core kinds (Pod, Deployment, Service, PVC, Secret, ConfigMap, ... and DRA
//!   `resource.k8s.io/v1` DeviceClass / ResourceClaimTemplate / ResourceClaim) are checked against
//!   the JSON schema of the k8s-openapi types and then deserialised into those types; in strict
//!   mode a serialise round trip catches any field the types dropped.
//! * Strict mode ([`ValidateOptions::strict`], on by default) reports unknown fields: the raw CRD
//!   schemas have no `additionalProperties: false`, so without it a typo such as `hostNetwrok`
//!   would be silently pruned by the API server.
//!
//! Every [`Violation`] names the document, the field path, the line (for parsed files) and what
//! was expected, e.g. `spec.headGroupSpec.rayStartParams.num-gpus: expected string, got integer 0`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, OnceLock};

use k8s_openapi::schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use regex::Regex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::manifest::{Document, FieldPath, Severity, describe_value};

/// A vendored CRD file (see `schemas/README.md` for source, version and licence).
struct BuiltinCrd {
    file: &'static str,
    group: &'static str,
    kind: &'static str,
    /// Served versions, listed here so that naming the supported kinds needs no parsing; a test
    /// checks them against the file.
    versions: &'static [&'static str],
    text: &'static str,
}

const BUILTIN_CRDS: [BuiltinCrd; 2] = [
    BuiltinCrd {
        file: "ray.io_rayclusters.yaml",
        group: "ray.io",
        kind: "RayCluster",
        versions: &["v1", "v1alpha1"],
        text: include_str!("../schemas/ray.io_rayclusters.yaml"),
    },
    BuiltinCrd {
        file: "kubeflow.org_mpijobs.yaml",
        group: "kubeflow.org",
        kind: "MPIJob",
        versions: &["v2beta1"],
        text: include_str!("../schemas/kubeflow.org_mpijobs.yaml"),
    },
];

/// How strictly to validate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ValidateOptions {
    /// Reject fields the schema does not declare (like kubeconform `-strict`). Default: true.
    pub strict: bool,
    /// Report documents of kinds without a schema as warnings instead of errors. Default: false.
    pub allow_unknown_kinds: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        Self {
            strict: true,
            allow_unknown_kinds: false,
        }
    }
}

/// What kind of problem a [`Violation`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// The value has the wrong JSON type.
    WrongType,
    /// The field is not declared by the schema (strict mode).
    UnknownField,
    /// A required field is missing (after defaults were applied).
    MissingRequired,
    /// The value has the right type but is not allowed (enum, pattern, range, length, duplicate).
    InvalidValue,
    /// No schema is known for this apiVersion/kind.
    UnknownKind,
    /// The Kubernetes API types refused the object.
    Decode,
    /// The schema for this kind could not be loaded (a damaged build).
    SchemaUnavailable,
}

/// One validation problem.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Violation {
    /// Error, or warning for unknown kinds when allowed.
    pub severity: Severity,
    /// Source file name.
    pub source: String,
    /// Document index in the source.
    pub doc: usize,
    /// `Kind name` of the document.
    pub object: String,
    /// Field path inside the document.
    pub path: FieldPath,
    /// Source line of the field (or its nearest present ancestor), when known.
    pub line: Option<u64>,
    /// Problem class.
    pub kind: ViolationKind,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} doc {} ({})", self.source, self.doc, self.object)?;
        if let Some(l) = self.line {
            write!(f, " line {l}")?;
        }
        write!(f, ": {}: {}", self.path, self.message)
    }
}

/// Errors that stop validation altogether (as opposed to [`Violation`]s in a document).
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    /// A vendored CRD schema could not be read (the crate was built from a damaged tree).
    #[error("built-in CRD schema {file} could not be loaded: {message}")]
    BuiltinSchema {
        /// File under `schemas/`.
        file: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A document given to [`Validator::add_crd`] is not a usable CustomResourceDefinition.
    #[error("{doc}: not a usable CustomResourceDefinition: {message}")]
    BadCrd {
        /// `file doc N (Kind name)` of the offending document.
        doc: String,
        /// What is missing.
        message: String,
    },
}

/// One served version of a custom resource.
#[derive(Debug, Clone)]
struct CrdVersion {
    api_version: String,
    kind: String,
    schema: Value,
}

fn crd_versions(crd: &Value) -> Result<Vec<CrdVersion>, String> {
    let spec = crd.get("spec").ok_or("no spec")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("no spec.group")?;
    let kind = spec
        .pointer("/names/kind")
        .and_then(Value::as_str)
        .ok_or("no spec.names.kind")?;
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("no spec.versions")?;
    let mut out = Vec::new();
    for v in versions {
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a version without name")?;
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .ok_or_else(|| format!("version {name} has no schema.openAPIV3Schema"))?;
        out.push(CrdVersion {
            api_version: format!("{group}/{name}"),
            kind: kind.to_owned(),
            schema: schema.clone(),
        });
    }
    if out.is_empty() {
        return Err("no served version".to_owned());
    }
    Ok(out)
}

/// Drops `description:` texts from a controller-gen CRD before parsing: they are most of the
/// file and the validator never reads them. A description is a key with a scalar on its line
/// (`description: text`, `description: |-`) plus every deeper-indented line after it; a property
/// *named* `description` has nothing after the colon and is kept.
fn strip_descriptions(text: &str) -> String {
    let mut out = String::with_capacity(text.len() / 3);
    let mut skip_deeper_than: Option<usize> = None;
    for line in text.lines() {
        let body = line.trim_start_matches(' ');
        let indent = line.len() - body.len();
        if let Some(limit) = skip_deeper_than {
            if body.is_empty() || indent > limit {
                continue;
            }
            skip_deeper_than = None;
        }
        if let Some(rest) = body.strip_prefix("description:") {
            let rest = rest.trim();
            if !rest.is_empty() && !rest.starts_with(['{', '[', '&', '*', '#']) {
                skip_deeper_than = Some(indent);
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Parses one vendored CRD, once per process, on first use.
fn load_builtin(index: usize) -> Result<&'static [CrdVersion], ValidateError> {
    static LOADED: [OnceLock<Result<Vec<CrdVersion>, String>>; 2] =
        [OnceLock::new(), OnceLock::new()];
    let crd = &BUILTIN_CRDS[index];
    let loaded = LOADED[index].get_or_init(|| {
        let value: Value =
            serde_saphyr::from_str(&strip_descriptions(crd.text)).map_err(|e| e.to_string())?;
        crd_versions(&value)
    });
    match loaded {
        Ok(v) => Ok(v),
        Err(message) => Err(ValidateError::BuiltinSchema {
            file: crd.file,
            message: message.clone(),
        }),
    }
}

type DecodeFn = fn(Value) -> Result<Value, String>;

struct CoreKind {
    api_version: &'static str,
    kind: &'static str,
    schema: Value,
    decode: DecodeFn,
}

struct CoreSchemas {
    defs: Map<String, Value>,
    kinds: Vec<CoreKind>,
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
/// Arbitrary JSON (CRD `default`/`enum` values); k8s-openapi's schema says "object", which is wrong.
const ANY_JSON: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON";

/// `{"$ref": ObjectMeta}`, for checking `metadata` of custom and embedded resources.
fn object_meta_ref() -> &'static Value {
    static META: OnceLock<Value> = OnceLock::new();
    META.get_or_init(|| serde_json::json!({ "$ref": format!("#/$defs/{OBJECT_META}") }))
}

fn decode_as<T: DeserializeOwned + Serialize>(v: Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

fn core_kind<T>(generator: &mut SchemaGenerator) -> CoreKind
where
    T: JsonSchema + DeserializeOwned + Serialize + k8s_openapi::Resource,
{
    CoreKind {
        api_version: T::API_VERSION,
        kind: T::KIND,
        schema: generator.subschema_for::<T>().to_value(),
        decode: decode_as::<T>,
    }
}

/// JSON schemas of the k8s-openapi types, generated once per process.
fn core_schemas() -> &'static CoreSchemas {
    static CORE: OnceLock<CoreSchemas> = OnceLock::new();
    CORE.get_or_init(|| {
        use k8s_openapi::api::resource::v1 as dra;
        use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
        let mut g = SchemaSettings::draft2020_12().into_generator();
        let kinds = vec![
            core_kind::<core::Pod>(&mut g),
            core_kind::<core::Service>(&mut g),
            core_kind::<core::PersistentVolumeClaim>(&mut g),
            core_kind::<core::Secret>(&mut g),
            core_kind::<core::ConfigMap>(&mut g),
            core_kind::<core::ServiceAccount>(&mut g),
            core_kind::<core::Namespace>(&mut g),
            core_kind::<apps::Deployment>(&mut g),
            core_kind::<apps::StatefulSet>(&mut g),
            core_kind::<apps::DaemonSet>(&mut g),
            core_kind::<batch::Job>(&mut g),
            core_kind::<dra::DeviceClass>(&mut g),
            core_kind::<dra::ResourceClaimTemplate>(&mut g),
            core_kind::<dra::ResourceClaim>(&mut g),
            core_kind::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(&mut g),
        ];
        let _ = g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
        CoreSchemas {
            defs: g.take_definitions(true),
            kinds,
        }
    })
}

/// Validates documents; holds the schemas of the kinds it knows.
#[derive(Debug)]
pub struct Validator {
    options: ValidateOptions,
    extra: Vec<CrdVersion>,
}

impl Validator {
    /// A validator that knows the vendored CRDs and the core kinds. Schemas are loaded on
    /// first use and shared by all validators of the process.
    pub fn new(options: ValidateOptions) -> Self {
        Self {
            options,
            extra: Vec::new(),
        }
    }

    /// Teaches the validator a further CustomResourceDefinition (`apiextensions.k8s.io/v1`).
    /// Its served versions take precedence over built-in ones of the same apiVersion and kind.
    pub fn add_crd(&mut self, crd: &Document) -> Result<(), ValidateError> {
        if crd.kind != "CustomResourceDefinition" {
            return Err(ValidateError::BadCrd {
                doc: crd.describe(),
                message: format!("kind is {}, expected CustomResourceDefinition", crd.kind),
            });
        }
        let versions = crd_versions(&crd.value).map_err(|message| ValidateError::BadCrd {
            doc: crd.describe(),
            message,
        })?;
        self.extra.extend(versions);
        Ok(())
    }

    /// `apiVersion Kind` of everything this validator has a schema for, sorted.
    pub fn supported_kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = core_schemas()
            .kinds
            .iter()
            .map(|k| format!("{} {}", k.api_version, k.kind))
            .chain(
                self.extra
                    .iter()
                    .map(|c| format!("{} {}", c.api_version, c.kind)),
            )
            .chain(BUILTIN_CRDS.iter().flat_map(|c| {
                c.versions
                    .iter()
                    .map(move |v| format!("{}/{v} {}", c.group, c.kind))
            }))
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }

    fn crd_for(&self, doc: &Document) -> Result<Option<&CrdVersion>, ValidateError> {
        let matches = |c: &&CrdVersion| c.api_version == doc.api_version && c.kind == doc.kind;
        if let Some(c) = self.extra.iter().find(matches) {
            return Ok(Some(c));
        }
        for (i, b) in BUILTIN_CRDS.iter().enumerate() {
            if b.group == doc.group() && b.kind == doc.kind {
                return Ok(load_builtin(i)?.iter().find(matches));
            }
        }
        Ok(None)
    }

    /// Validates every document; violations come in document order, then path order.
    pub fn validate_all(&self, docs: &[Document]) -> Vec<Violation> {
        docs.iter().flat_map(|d| self.validate(d)).collect()
    }

    /// Validates one document.
    pub fn validate(&self, doc: &Document) -> Vec<Violation> {
        let core = core_schemas();
        let mut issues = Vec::new();
        let crd = match self.crd_for(doc) {
            Ok(crd) => crd,
            Err(e) => {
                return vec![Violation {
                    severity: Severity::Error,
                    source: doc.source.clone(),
                    doc: doc.index,
                    object: doc.label(),
                    path: FieldPath::root(),
                    line: doc.line,
                    kind: ViolationKind::SchemaUnavailable,
                    message: e.to_string(),
                }];
            }
        };
        if let Some(crd) = crd {
            let mut ctx = Ctx::new(Some(&core.defs), self.options.strict);
            let mut value = doc.value.clone();
            // The API server handles the root's type fields itself and validates metadata as
            // ObjectMeta, whatever the CRD schema declares for them.
            if let Some(obj) = value.as_object_mut() {
                obj.remove("apiVersion");
                obj.remove("kind");
                if let Some(mut meta) = obj.remove("metadata") {
                    ctx.check(
                        &mut meta,
                        object_meta_ref(),
                        &FieldPath::root().key("metadata"),
                    );
                }
            }
            ctx.check(&mut value, &crd.schema, &FieldPath::root());
            issues = ctx.issues;
        } else if let Some(kind) = core
            .kinds
            .iter()
            .find(|k| k.api_version == doc.api_version && k.kind == doc.kind)
        {
            let mut ctx = Ctx::new(Some(&core.defs), self.options.strict);
            let mut value = doc.value.clone();
            ctx.check(&mut value, &kind.schema, &FieldPath::root());
            issues = ctx.issues;
            // The typed decode is the final word; run it only on schema-clean documents so a
            // single mistake is not reported twice.
            if issues.is_empty() {
                match (kind.decode)(doc.value.clone()) {
                    Err(message) => issues.push(Issue {
                        path: FieldPath::root(),
                        kind: ViolationKind::Decode,
                        message: format!("the Kubernetes {} type refuses it: {message}", kind.kind),
                        warning: false,
                    }),
                    Ok(round_trip) if self.options.strict => {
                        dropped_fields(&doc.value, &round_trip, &FieldPath::root(), &mut issues);
                    }
                    Ok(_) => {}
                }
            }
        } else if let Some(group) = core_kind_without_schema(&doc.api_version, &doc.kind) {
            // A kind every cluster serves but rdmakit carries no schema for: not an error (the API server
            // accepts a valid one), and not silently passed either.
            issues.push(Issue {
                path: FieldPath::root(),
                kind: ViolationKind::UnknownKind,
                message: format!(
                    "{} {} ({group}) is not checked here: rdmakit has no schema for it, the API server validates it (kubectl apply --dry-run=server --validate=strict)",
                    doc.api_version, doc.kind
                ),
                warning: true,
            });
        } else {
            issues.push(Issue {
                path: FieldPath::root(),
                kind: ViolationKind::UnknownKind,
                message: self.unknown_kind_message(doc),
                warning: false,
            });
        }
        for d in &doc.duplicate_keys {
            issues.push(Issue {
                path: d.path.clone(),
                kind: ViolationKind::InvalidValue,
                // A warning: kubectl 1.36 applies the document (its YAML reader keeps the later value, and the
                // API server never sees the first), so rejecting it would disagree with the cluster; the
                // value a reader keeps differs by tool, which is the bug worth naming.
                message: format!(
                    "key {:?} appears twice in one mapping (first at line {}, again at line {}): kubectl applies the later value and drops the first without a word, other tools keep the first; delete one",
                    d.path.last_key().unwrap_or("?"),
                    d.first_line,
                    d.line
                ),
                warning: true,
            });
        }
        // What the API server and the operators check beyond the schema (references, enums).
        if !issues.iter().any(|i| i.kind == ViolationKind::UnknownKind) {
            issues.extend(crate::crossref::check(doc).into_iter().map(|p| Issue {
                path: p.path,
                kind: p.kind,
                message: p.message,
                warning: p.severity != Severity::Error,
            }));
        }
        // Naming rules differ by kind; those we know schemas for all use DNS subdomains.
        if let Some(name) = doc.name.as_deref()
            && !issues.iter().any(|i| i.kind == ViolationKind::UnknownKind)
            && doc.value.pointer("/metadata/name").is_some()
            && !is_dns_subdomain(name)
        {
            issues.push(Issue {
                path: FieldPath::root().key("metadata").key("name"),
                kind: ViolationKind::InvalidValue,
                message: format!(
                    "{name:?} is not a valid object name: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (at most 253 characters)"
                ),
                warning: false,
            });
        }
        issues.sort_by(|a, b| a.path.cmp(&b.path).then(a.message.cmp(&b.message)));
        issues
            .into_iter()
            .map(|i| Violation {
                severity: if i.warning
                    || (i.kind == ViolationKind::UnknownKind && self.options.allow_unknown_kinds)
                {
                    Severity::Warning
                } else {
                    Severity::Error
                },
                source: doc.source.clone(),
                doc: doc.index,
                object: doc.label(),
                line: doc.line_of(&i.path),
                path: i.path,
                kind: i.kind,
                message: i.message,
            })
            .collect()
    }

    fn unknown_kind_message(&self, doc: &Document) -> String {
        let same_kind: Vec<String> = self
            .supported_kinds()
            .into_iter()
            .filter(|k| k.rsplit(' ').next() == Some(doc.kind.as_str()))
            .collect();
        if same_kind.is_empty() {
            format!(
                "no schema for {} {}; supported kinds: {} (add the CRD to validate other custom resources)",
                doc.api_version,
                doc.kind,
                self.supported_kinds().join(", ")
            )
        } else {
            format!(
                "no schema for {} {}: this kind is served as {}",
                doc.api_version,
                doc.kind,
                same_kind.join(", ")
            )
        }
    }
}

/// Built-in Kubernetes kinds with no schema embedded here (cluster infrastructure rather than what rdmakit
/// renders): `Some(group name)` for those, `None` for anything else.
fn core_kind_without_schema(api_version: &str, kind: &str) -> Option<&'static str> {
    Some(match (api_version, kind) {
        ("v1", "Node" | "PersistentVolume" | "Endpoints" | "LimitRange" | "ResourceQuota") => {
            "core"
        }
        ("storage.k8s.io/v1", "StorageClass" | "CSIDriver" | "VolumeAttachment") => {
            "storage.k8s.io"
        }
        ("resource.k8s.io/v1", "ResourceSlice") => "resource.k8s.io",
        (
            "rbac.authorization.k8s.io/v1",
            "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding",
        ) => "rbac.authorization.k8s.io",
        ("scheduling.k8s.io/v1", "PriorityClass") => "scheduling.k8s.io",
        ("policy/v1", "PodDisruptionBudget") => "policy",
        _ => return None,
    })
}

/// Validates documents with the built-in schemas.
///
/// ```
/// use k8s_render::{manifest, validate};
/// let docs = manifest::parse_str(
///     "ray.yaml",
///     "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata:\n  name: demo\nspec:\n  headGroupSpec:\n    rayStartParams:\n      num-gpus: 0\n    template:\n      spec:\n        containers:\n        - name: ray-head\n          image: rayproject/ray:2.57.0\n",
/// )?;
/// let violations = validate::validate(&docs, &validate::ValidateOptions::default());
/// assert_eq!(violations.len(), 1);
/// assert!(violations[0].to_string().contains("rayStartParams.num-gpus: expected string, got integer 0"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// CustomResourceDefinitions in `docs` are validated themselves and then taught to the
/// validator, so a stream that carries its own CRDs validates its custom resources too. A CRD
/// that cannot be used is reported as a violation on that CRD document.
pub fn validate(docs: &[Document], options: &ValidateOptions) -> Vec<Violation> {
    let mut validator = Validator::new(options.clone());
    let mut unusable = Vec::new();
    for doc in docs
        .iter()
        .filter(|d| d.kind == "CustomResourceDefinition" && d.group() == "apiextensions.k8s.io")
    {
        if let Err(e) = validator.add_crd(doc) {
            unusable.push(Violation {
                severity: Severity::Error,
                source: doc.source.clone(),
                doc: doc.index,
                object: doc.label(),
                path: FieldPath::root().key("spec"),
                line: doc.line_of(&FieldPath::root().key("spec")),
                kind: ViolationKind::InvalidValue,
                message: e.to_string(),
            });
        }
    }
    let mut out = validator.validate_all(docs);
    out.extend(unusable);
    out.sort_by(|a, b| (&a.source, a.doc, &a.path).cmp(&(&b.source, b.doc, &b.path)));
    out
}

struct Issue {
    path: FieldPath,
    kind: ViolationKind,
    message: String,
    /// Set for problems that are warnings by nature (KubeRay clamping replicas).
    warning: bool,
}

/// A structural-schema checker over JSON values (OpenAPI v3 as used by CRDs, and the JSON
/// schemas k8s-openapi generates, whose `$ref`s resolve into `defs`).
struct Ctx<'a> {
    defs: Option<&'a Map<String, Value>>,
    strict: bool,
    issues: Vec<Issue>,
}

fn truthy(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

impl<'a> Ctx<'a> {
    fn new(defs: Option<&'a Map<String, Value>>, strict: bool) -> Self {
        Self {
            defs,
            strict,
            issues: Vec::new(),
        }
    }

    fn push(&mut self, path: &FieldPath, kind: ViolationKind, message: String) {
        self.issues.push(Issue {
            path: path.clone(),
            kind,
            message,
            warning: false,
        });
    }

    /// Follows `$ref`s; returns the target schema and the last definition name.
    fn resolve(&self, mut schema: &'a Value) -> (&'a Value, Option<&'a str>) {
        let mut name = None;
        for _ in 0..16 {
            let Some(r) = schema.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let def = r.rsplit('/').next().unwrap_or(r);
            match self.defs.and_then(|d| d.get(def)) {
                Some(target) => {
                    schema = target;
                    name = Some(def);
                }
                None => break,
            }
        }
        (schema, name)
    }

    fn check(&mut self, value: &mut Value, schema: &'a Value, path: &FieldPath) {
        let (schema, def_name) = self.resolve(schema);
        // Kubernetes treats null as "unset" for non-nullable fields (CRD pruning, Go pointers).
        if value.is_null() {
            return;
        }
        if def_name == Some(ANY_JSON) {
            return;
        }
        if def_name == Some(QUANTITY) {
            self.check_quantity(value, path);
            return;
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for s in all {
                self.check(value, s, path);
            }
        }
        if truthy(schema, "x-kubernetes-int-or-string") {
            match value {
                Value::String(_) => self.check_string(value, schema, path),
                Value::Number(n) if !n.is_f64() => self.check_number(value, schema, path),
                _ => self.push(
                    path,
                    ViolationKind::WrongType,
                    format!("expected integer or string, got {}", describe_value(value)),
                ),
            }
            return;
        }
        for (key, exactly_one) in [("anyOf", false), ("oneOf", true)] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                // Branches whose type cannot fit are out; when one remains, check it directly
                // (precise messages, and no repeated trial runs down recursive schemas).
                let fitting: Vec<&'a Value> = branches
                    .iter()
                    .filter(|b| self.type_fits(b, value))
                    .collect();
                if let [only] = fitting.as_slice() {
                    self.check(value, only, path);
                    continue;
                }
                let passing = fitting
                    .iter()
                    .filter(|b| {
                        let mut trial = Ctx::new(self.defs, self.strict);
                        trial.check(&mut value.clone(), b, path);
                        trial.issues.is_empty()
                    })
                    .count();
                if passing == 0 || (exactly_one && passing > 1) {
                    self.push(
                        path,
                        ViolationKind::InvalidValue,
                        format!(
                            "{} does not match {} of the allowed forms",
                            describe_value(value),
                            if exactly_one { "exactly one" } else { "any" }
                        ),
                    );
                }
            }
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!(
                    "{} is not allowed; expected one of {}",
                    describe_value(value),
                    list.join(", ")
                ),
            );
        }
        let ty = schema.get("type").and_then(Value::as_str).or_else(|| {
            (schema.get("properties").is_some() || schema.get("additionalProperties").is_some())
                .then_some("object")
        });
        match ty {
            Some("object") => self.check_object(value, schema, path),
            Some("array") => self.check_array(value, schema, path),
            Some("string") => self.check_string(value, schema, path),
            Some("integer") | Some("number") => self.check_number(value, schema, path),
            Some("boolean") if !value.is_boolean() => self.wrong_type("boolean", value, path),
            _ => {}
        }
    }

    fn wrong_type(&mut self, expected: &str, value: &Value, path: &FieldPath) {
        let mut msg = format!("expected {expected}, got {}", describe_value(value));
        match (expected, value) {
            ("string", Value::Number(_) | Value::Bool(_)) => {
                let quoted = Value::String(value.to_string());
                if path.contains_key("rayStartParams") {
                    msg.push_str(&format!(
                        " (rayStartParams values must be quoted strings: write {quoted})"
                    ));
                } else {
                    msg.push_str(&format!(" (quote it: {quoted})"));
                }
                if value.is_boolean() {
                    msg.push_str("; YAML reads yes/no/on/off/true/false as booleans");
                }
            }
            ("integer" | "number", Value::String(s)) if s.trim().parse::<f64>().is_ok() => {
                msg.push_str(" (remove the quotes)");
            }
            ("boolean", Value::String(s))
                if matches!(s.to_ascii_lowercase().as_str(), "true" | "false") =>
            {
                msg.push_str(" (remove the quotes)");
            }
            _ => {}
        }
        self.push(path, ViolationKind::WrongType, msg);
    }

    fn check_object(&mut self, value: &mut Value, schema: &'a Value, path: &FieldPath) {
        let Some(obj) = value.as_object_mut() else {
            self.wrong_type("object", value, path);
            return;
        };
        let props = schema.get("properties").and_then(Value::as_object);
        // Defaults first: the API server defaults before it checks `required`.
        if let Some(props) = props {
            for (k, ps) in props {
                let (ps, _) = self.resolve(ps);
                if let Some(d) = ps.get("default")
                    && obj.get(k).is_none_or(Value::is_null)
                {
                    obj.insert(k.clone(), d.clone());
                }
            }
        }
        if let Some(req) = schema.get("required").and_then(Value::as_array) {
            for r in req.iter().filter_map(Value::as_str) {
                if obj.get(r).is_none_or(Value::is_null) {
                    let expected = props
                        .and_then(|p| p.get(r))
                        .map(|s| self.type_label(s))
                        .unwrap_or_else(|| "a value".to_owned());
                    self.push(
                        &path.key(r),
                        ViolationKind::MissingRequired,
                        format!("required field is missing (expected {expected})"),
                    );
                }
            }
        }
        let additional = schema.get("additionalProperties");
        let preserve = truthy(schema, "x-kubernetes-preserve-unknown-fields");
        let embedded = truthy(schema, "x-kubernetes-embedded-resource");
        let keys: Vec<String> = obj.keys().cloned().collect();
        for k in keys {
            let child_path = path.key(&k);
            let Some(child) = obj.get_mut(&k) else {
                continue;
            };
            if let Some(ps) = props.and_then(|p| p.get(&k)) {
                self.check(child, ps, &child_path);
            } else if let Some(ap) = additional.filter(|a| a.is_object()) {
                self.check(child, ap, &child_path);
            } else if embedded && matches!(k.as_str(), "apiVersion" | "kind") {
                if !child.is_string() {
                    self.wrong_type("string", child, &child_path);
                }
            } else if embedded && k == "metadata" {
                self.check(child, object_meta_ref(), &child_path);
            } else if additional == Some(&Value::Bool(false)) || (self.strict && !preserve) {
                let hint = props
                    .and_then(|p| suggest(&k, p.keys().map(String::as_str)))
                    .map(|s| format!(" (did you mean {s:?}?)"))
                    .unwrap_or_default();
                let known = match props {
                    Some(p) if !p.is_empty() => String::new(),
                    _ => " (this object declares no fields)".to_owned(),
                };
                self.push(
                    &child_path,
                    ViolationKind::UnknownField,
                    format!("unknown field {k:?}{hint}{known}; the API server drops or rejects it"),
                );
            }
        }
        if embedded {
            for k in ["apiVersion", "kind"] {
                if !preserve && obj.get(k).is_none_or(Value::is_null) {
                    self.push(
                        &path.key(k),
                        ViolationKind::MissingRequired,
                        "required field is missing (an embedded object needs apiVersion and kind)"
                            .to_owned(),
                    );
                }
            }
        }
    }

    fn check_array(&mut self, value: &mut Value, schema: &'a Value, path: &FieldPath) {
        let Some(items) = value.as_array_mut() else {
            self.wrong_type("array", value, path);
            return;
        };
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("needs at least {min} item(s), has {}", items.len()),
            );
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("allows at most {max} item(s), has {}", items.len()),
            );
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter_mut().enumerate() {
                self.check(item, item_schema, &path.index(i));
            }
        }
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut seen: HashMap<String, usize> = HashMap::new();
                for (i, item) in items.iter().enumerate() {
                    if keys.is_empty() || !item.is_object() {
                        break;
                    }
                    let id: Vec<String> = keys
                        .iter()
                        .map(|k| format!("{k}={}", item.get(*k).unwrap_or(&Value::Null)))
                        .collect();
                    let id = id.join(", ");
                    if let Some(first) = seen.insert(id.clone(), i) {
                        self.push(
                            &path.index(i),
                            ViolationKind::InvalidValue,
                            format!(
                                "duplicate entry ({id}); the same key is already at index {first}"
                            ),
                        );
                    }
                }
            }
            Some("set") => {
                let mut seen = HashSet::new();
                for (i, item) in items.iter().enumerate() {
                    if !seen.insert(item.to_string()) {
                        self.push(
                            &path.index(i),
                            ViolationKind::InvalidValue,
                            format!("duplicate value {} in a set", describe_value(item)),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn check_string(&mut self, value: &Value, schema: &Value, path: &FieldPath) {
        let Some(s) = value.as_str() else {
            self.wrong_type("string", value, path);
            return;
        };
        let len = s.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("must be at least {min} character(s) long"),
            );
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("must be at most {max} characters long, is {len}"),
            );
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str)
            && let Some(false) = pattern_matches(p, s)
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("{} does not match the pattern {p}", describe_value(value)),
            );
        }
    }

    fn check_number(&mut self, value: &Value, schema: &Value, path: &FieldPath) {
        let Value::Number(n) = value else {
            let ty = schema
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("integer");
            self.wrong_type(ty, value, path);
            return;
        };
        let wants_int = schema.get("type").and_then(Value::as_str) != Some("number");
        if wants_int && n.is_f64() {
            self.wrong_type("integer", value, path);
            return;
        }
        if schema.get("format").and_then(Value::as_str) == Some("int32")
            && let Some(i) = n.as_i64()
            && i32::try_from(i).is_err()
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("{i} does not fit a 32-bit integer"),
            );
        }
        let x = n.as_f64().unwrap_or(0.0);
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && (x < min || (truthy(schema, "exclusiveMinimum") && x <= min))
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("{n} is below the minimum {min}"),
            );
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && (x > max || (truthy(schema, "exclusiveMaximum") && x >= max))
        {
            self.push(
                path,
                ViolationKind::InvalidValue,
                format!("{n} is above the maximum {max}"),
            );
        }
    }

    fn check_quantity(&mut self, value: &Value, path: &FieldPath) {
        static QTY: OnceLock<Option<Regex>> = OnceLock::new();
        match value {
            Value::Number(_) => {}
            Value::String(s) => {
                let re = QTY.get_or_init(|| {
                    Regex::new(
                        r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(\d+(\.\d*)?|\.\d+)))?$",
                    )
                    .ok()
                });
                if re.as_ref().is_some_and(|r| !r.is_match(s)) {
                    self.push(
                        path,
                        ViolationKind::InvalidValue,
                        format!(
                            "{} is not a Kubernetes quantity (e.g. 1, 500m, 16Gi, 1600G)",
                            describe_value(value)
                        ),
                    );
                }
            }
            _ => self.push(
                path,
                ViolationKind::WrongType,
                format!(
                    "expected a quantity (string or number), got {}",
                    describe_value(value)
                ),
            ),
        }
    }

    /// Whether a value's JSON type is one the schema could accept.
    fn type_fits(&self, schema: &'a Value, value: &Value) -> bool {
        let (s, name) = self.resolve(schema);
        if name == Some(ANY_JSON) {
            return true;
        }
        if name == Some(QUANTITY) || truthy(s, "x-kubernetes-int-or-string") {
            return value.is_string() || value.is_number();
        }
        match s.get("type").and_then(Value::as_str) {
            Some("object") => value.is_object(),
            Some("array") => value.is_array(),
            Some("string") => value.is_string(),
            Some("boolean") => value.is_boolean(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("number") => value.is_number(),
            Some(_) => false,
            None if s.get("properties").is_some() => value.is_object(),
            None => true,
        }
    }

    fn type_label(&self, schema: &'a Value) -> String {
        let (s, _) = self.resolve(schema);
        if truthy(s, "x-kubernetes-int-or-string") {
            return "integer or string".to_owned();
        }
        match s.get("type").and_then(Value::as_str) {
            Some("object") | None if s.get("properties").is_some() => "an object".to_owned(),
            Some("array") => "a list".to_owned(),
            Some(t) => t.to_owned(),
            None => "a value".to_owned(),
        }
    }
}

/// Fields present (and not null) in `input` that the typed round trip dropped.
fn dropped_fields(input: &Value, output: &Value, path: &FieldPath, out: &mut Vec<Issue>) {
    match (input, output) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => dropped_fields(v, w, &path.key(k), out),
                    None if !v.is_null() => out.push(Issue {
                        path: path.key(k),
                        kind: ViolationKind::UnknownField,
                        message: format!(
                            "unknown field {k:?}: the Kubernetes type has no such field"
                        ),
                        warning: false,
                    }),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                dropped_fields(v, w, &path.index(i), out);
            }
        }
        _ => {}
    }
}

/// `Some(matches)`, or `None` when the (Go RE2) pattern does not compile here.
fn pattern_matches(pattern: &str, s: &str) -> Option<bool> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let re = cache
        .entry(pattern.to_owned())
        .or_insert_with(|| Regex::new(pattern).ok());
    re.as_ref().map(|r| r.is_match(s))
}

fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The closest known name to a misspelt one (edit distance ≤ 2, or equal ignoring case).
pub fn suggest<'k>(unknown: &str, known: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    let mut best: Option<(usize, &str)> = None;
    for k in known {
        let d = if k.eq_ignore_ascii_case(unknown) {
            0
        } else {
            edit_distance(unknown, k)
        };
        if d <= 2 && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent swaps
/// (`hostNetwrok` → `hostNetwork` is one edit).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// Kinds in the built-in set, as `apiVersion Kind`, e.g. for `--help` texts.
pub fn builtin_kinds() -> Vec<String> {
    Validator::new(ValidateOptions::default()).supported_kinds()
}

/// Counts violations by severity: (errors, warnings).
pub fn counts(violations: &[Violation]) -> (usize, usize) {
    let errors = violations
        .iter()
        .filter(|v| v.severity == Severity::Error)
        .count();
    (errors, violations.len() - errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposition_is_close() {
        assert_eq!(
            suggest("hostNetwrok", ["hostNetwork", "hostPID"].into_iter()),
            Some("hostNetwork")
        );
        assert_eq!(suggest("zzz", ["hostNetwork"].into_iter()), None);
    }

    fn without_descriptions(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, x| !(k == "description" && x.is_string()));
                m.values_mut().for_each(without_descriptions);
            }
            Value::Array(a) => a.iter_mut().for_each(without_descriptions),
            _ => {}
        }
    }

    #[test]
    fn stripping_descriptions_keeps_every_schema_field() {
        for crd in &BUILTIN_CRDS {
            let mut full: Value = serde_saphyr::from_str(crd.text).expect("vendored CRD parses");
            without_descriptions(&mut full);
            let stripped: Value =
                serde_saphyr::from_str(&strip_descriptions(crd.text)).expect("stripped parses");
            assert!(
                full == stripped,
                "{}: stripping changed the schema",
                crd.file
            );
            let served: Vec<String> = crd_versions(&stripped)
                .expect("served versions")
                .iter()
                .map(|v| v.api_version.clone())
                .collect();
            let listed: Vec<String> = crd
                .versions
                .iter()
                .map(|v| format!("{}/{v}", crd.group))
                .collect();
            assert_eq!(served, listed, "{}", crd.file);
        }
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_subdomain("ray-erdma-cluster"));
        assert!(is_dns_subdomain("erdma.alibaba.dra.net"));
        assert!(!is_dns_subdomain("Ray_Cluster"));
    }
}
