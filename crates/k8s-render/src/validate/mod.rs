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
//!
//! Files: `crd` (the vendored CRD schemas), `core_kinds` (the k8s-openapi kinds), `schema` (the
//! structural-schema checker both use), `crossref` (what the API server and operators check beyond
//! the schema), `suggest` (did-you-mean for misspelt names).

use std::fmt;

use serde::Serialize;

use crate::manifest::parallel::{self, Flow};
use crate::manifest::{Document, FieldPath, Location, ManifestError, Severity};

mod core_kinds;
mod crd;
mod crossref;
mod labels;
mod schema;
mod suggest;

use core_kinds::{core_kind_without_schema, core_schemas};
use crd::{BUILTIN_CRDS, CrdVersion, crd_versions, load_builtin};
use schema::{At, Ctx, dropped_fields, object_meta_ref};
pub use suggest::suggest;

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
    /// Where it is (serialised as its fields, beside `severity`).
    #[serde(flatten)]
    pub location: Location,
    /// Problem class.
    pub kind: ViolationKind,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.location, self.location.path, self.message
        )
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

    /// Whether a schema (built-in, added, or a core kind's) is known for the document's kind: a
    /// document of any other kind is reported as an unknown kind.
    pub fn knows(&self, doc: &Document) -> bool {
        matches!(self.crd_for(doc), Ok(Some(_)) | Err(_))
            || core_schemas()
                .kinds
                .iter()
                .any(|k| k.api_version == doc.api_version && k.kind == doc.kind)
            || core_kind_without_schema(&doc.api_version, &doc.kind).is_some()
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
                    location: Location {
                        line: doc.line,
                        ..Location::in_document(doc, FieldPath::root())
                    },
                    kind: ViolationKind::SchemaUnavailable,
                    message: e.to_string(),
                }];
            }
        };
        if let Some(crd) = crd {
            // The API server handles the root's type fields itself and validates metadata as
            // ObjectMeta, whatever the CRD schema declares for them.
            let mut ctx = Ctx::new(Some(&core.defs), self.options.strict).skipping_root_keys(&[
                "apiVersion",
                "kind",
                "metadata",
            ]);
            if let Some(meta) = doc.value.get("metadata") {
                let at = FieldPath::root().key("metadata");
                ctx.check(meta, object_meta_ref(), &At::Path(&at));
            }
            ctx.check(&doc.value, &crd.schema, &At::Path(&FieldPath::root()));
            issues = ctx.issues;
        } else if let Some(kind) = core
            .kinds
            .iter()
            .find(|k| k.api_version == doc.api_version && k.kind == doc.kind)
        {
            let mut ctx = Ctx::new(Some(&core.defs), self.options.strict);
            ctx.check(&doc.value, &kind.schema, &At::Path(&FieldPath::root()));
            issues = ctx.issues;
            // The typed decode is the final word; run it only on schema-clean documents so a
            // single mistake is not reported twice.
            if issues.iter().all(|i| i.warning) {
                match (kind.decode)(&doc.value) {
                    Err(message) => issues.push(Issue {
                        path: FieldPath::root(),
                        kind: ViolationKind::Decode,
                        message: format!("the Kubernetes {} type refuses it: {message}", kind.kind),
                        warning: false,
                    }),
                    Ok(round_trip) if self.options.strict => {
                        let root = FieldPath::root();
                        dropped_fields(&doc.value, &round_trip, &At::Path(&root), &mut issues);
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
                // kubectl 1.36 applies the document (its YAML reader keeps the later value, and the API
                // server never sees the first), so the cluster accepts it; the value a reader keeps differs
                // by tool, which is why --strict refuses it. A warning without --strict.
                message: format!(
                    "key {:?} appears twice in one mapping (first at line {}, again at line {}): kubectl applies the later value and drops the first without a word (the API server accepts it), other tools keep the first; delete one",
                    d.path.last_key().unwrap_or("?"),
                    d.first_line,
                    d.line
                ),
                warning: !self.options.strict,
            });
        }
        // What the API server and the operators check beyond the schema (references, enums).
        if !issues.iter().any(|i| i.kind == ViolationKind::UnknownKind) {
            issues.extend(
                crossref::check(doc, self.options.strict)
                    .into_iter()
                    .map(|p| Issue {
                        path: p.path,
                        kind: p.kind,
                        message: p.message,
                        warning: p.severity != Severity::Error,
                    }),
            );
            // Label grammar and data size: the API server's validation beyond the schema.
            let more = labels::check_labels(doc)
                .into_iter()
                .chain(labels::check_data_size(doc));
            issues.extend(more.map(|p| Issue {
                path: p.path,
                kind: p.kind,
                message: p.message,
                warning: false,
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
                location: Location::in_document(doc, i.path),
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
    let mut stream = Stream::new(options.clone());
    for doc in docs {
        stream.push(doc);
    }
    stream.finish()
}

/// Validates a stream of documents one at a time, so a caller that parses, pushes and drops each
/// holds one document's tree (plus those waiting, below) however long the stream is. The result is
/// the same as [`validate`]'s on all of them: CustomResourceDefinitions are learnt as they come, and a
/// document whose kind no schema knows yet waits until [`Stream::finish`] (its CRD may come later).
///
/// ```
/// use k8s_render::{manifest, validate};
/// let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: B}\n";
/// let mut stream = validate::Stream::new(validate::ValidateOptions::default());
/// for doc in manifest::documents("ns.yaml", text) {
///     stream.push(&doc?);
/// }
/// let v = stream.finish();
/// assert_eq!(v.len(), 1);
/// assert_eq!(v[0].location.doc, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Stream {
    validator: Validator,
    waiting: Vec<Document>,
    out: Vec<Violation>,
    documents: usize,
}

impl Stream {
    /// An empty stream validating with `options`.
    pub fn new(options: ValidateOptions) -> Self {
        Self {
            validator: Validator::new(options),
            waiting: Vec::new(),
            out: Vec::new(),
            documents: 0,
        }
    }

    /// Validates one document (or keeps it until [`Stream::finish`] if its kind is not known yet).
    pub fn push(&mut self, doc: &Document) {
        self.documents += 1;
        if doc.kind == "CustomResourceDefinition" && doc.group() == "apiextensions.k8s.io" {
            self.out.extend(self.validator.validate(doc));
            if let Err(e) = self.validator.add_crd(doc) {
                self.out.push(Violation {
                    severity: Severity::Error,
                    location: Location::in_document(doc, FieldPath::root().key("spec")),
                    kind: ViolationKind::InvalidValue,
                    message: e.to_string(),
                });
            }
        } else if self.validator.knows(doc) {
            self.out.extend(self.validator.validate(doc));
        } else {
            self.waiting.push(doc.clone());
        }
    }

    /// Parses `text` (named `source` in messages) and validates its documents, on every core: the same
    /// as pushing each document of [`manifest::documents`](crate::manifest::documents)`(source, text)` in
    /// turn, which stops at the stream's first parse error (returned).
    pub fn push_text(&mut self, source: &str, text: &str) -> Option<ManifestError> {
        /// What a worker did with a document, validating with the built-in schemas only.
        enum Done {
            Checked(Vec<Violation>),
            /// Its kind is unknown so far: it waits for [`Stream::finish`].
            Unknown(Document),
            /// A CRD: learnt in stream order.
            Crd(Document),
        }
        let options = self.validator.options.clone();
        let work = |doc: Document| -> Done {
            if doc.kind == "CustomResourceDefinition" && doc.group() == "apiextensions.k8s.io" {
                return Done::Crd(doc);
            }
            let v = Validator::new(options.clone());
            if v.knows(&doc) {
                Done::Checked(v.validate(&doc))
            } else {
                Done::Unknown(doc)
            }
        };
        let mut error = None;
        parallel::in_order(
            source,
            text,
            parallel::threads(),
            work,
            |base, chunk, outcome| {
                let done = match outcome {
                    Ok(done) => done,
                    Err(e) => {
                        error = Some(e);
                        return Flow::Stop;
                    }
                };
                // Parsed again here (numbered right) once a learnt CRD makes the built-in-only check stale.
                let mut again: Option<Vec<Document>> = None;
                for (j, d) in done.into_iter().enumerate() {
                    let learnt = !self.validator.extra.is_empty();
                    match d {
                        Done::Checked(mut v) if !learnt => {
                            self.documents += 1;
                            for x in &mut v {
                                x.location.doc += base;
                            }
                            self.out.extend(v);
                        }
                        Done::Checked(_) => {
                            let docs =
                                again.get_or_insert_with(|| chunk.parse(base).unwrap_or_default());
                            if let Some(doc) = docs.get(j) {
                                self.push(doc);
                            }
                        }
                        Done::Unknown(mut doc) | Done::Crd(mut doc) => {
                            doc.index += base;
                            self.push(&doc);
                        }
                    }
                }
                Flow::Next
            },
        );
        error
    }

    /// How many documents were pushed.
    pub fn documents(&self) -> usize {
        self.documents
    }

    /// The violations of every pushed document, in document order, then path order.
    pub fn finish(mut self) -> Vec<Violation> {
        for doc in std::mem::take(&mut self.waiting) {
            self.out.extend(self.validator.validate(&doc));
        }
        let mut out = self.out;
        out.sort_by(|a, b| {
            let (a, b) = (&a.location, &b.location);
            (&a.source, a.doc, &a.path).cmp(&(&b.source, b.doc, &b.path))
        });
        out
    }
}

struct Issue {
    path: FieldPath,
    kind: ViolationKind,
    message: String,
    /// Set for problems that are warnings by nature (KubeRay clamping replicas).
    warning: bool,
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
    fn dns_names() {
        assert!(is_dns_subdomain("ray-erdma-cluster"));
        assert!(is_dns_subdomain("erdma.alibaba.dra.net"));
        assert!(!is_dns_subdomain("Ray_Cluster"));
    }
}
