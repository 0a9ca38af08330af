//! SARIF 2.1.0 logs of lint findings and validation violations, so CI systems (GitHub code
//! scanning, GitLab, Azure DevOps) show them inline on the manifest line.
//!
//! Each rule becomes a `reportingDescriptor` (id, summary, rationale as help text, default level);
//! each finding a `result` with `ruleId`/`ruleIndex`, level, message (what was found and the fix),
//! a physical location (`artifactLocation.uri` relative to the working directory, `region.startLine`
//! when the line is known) and a logical location naming the field path.
//!
//! ```
//! use k8s_render::{lint, manifest, sarif};
//! let docs = manifest::parse_str("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    resources:\n      limits: {aliyun/erdma: 1}\n")?;
//! let findings = lint::lint(&docs, &lint::LintOptions::default());
//! let log = sarif::lint_log(&findings, &sarif::Tool::rdmakit("0.1.0"));
//! assert_eq!(log["version"], "2.1.0");
//! let result = &log["runs"][0]["results"][0];
//! assert_eq!(result["ruleId"], "rdma-missing-ipc-lock");
//! assert_eq!(result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "pod.yaml");
//! # Ok::<(), k8s_render::manifest::ManifestError>(())
//! ```

use serde_json::{Value, json};

use crate::lint::{self, Finding, Rule};
use crate::manifest::{Location, Severity};
use crate::validate::{Violation, ViolationKind};

/// The `$schema` every log names.
pub const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The tool a log says produced it (`runs[0].tool.driver`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    /// `rdmakit`.
    pub name: String,
    /// The tool's version (`CARGO_PKG_VERSION` of the binary).
    pub version: String,
    /// Where users read about the tool and its rules.
    pub information_uri: Option<String>,
}

impl Tool {
    /// `rdmakit` at `version`.
    pub fn rdmakit(version: &str) -> Self {
        Tool {
            name: "rdmakit".to_owned(),
            version: version.to_owned(),
            information_uri: None,
        }
    }
}

/// A rule as SARIF needs it.
struct Descriptor {
    id: String,
    summary: String,
    help: String,
    level: &'static str,
}

/// SARIF `level` of a severity (`info` is a `note`).
pub fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

fn descriptor_of(rule: &Rule) -> Descriptor {
    Descriptor {
        id: rule.id.to_owned(),
        summary: rule.summary.to_owned(),
        help: format!(
            "{}\n\nWhy: {}\n\nEach result's message names the fix; `rdmakit lint --explain {}` prints this text.",
            rule.summary, rule.why, rule.id
        ),
        level: level(rule.severity),
    }
}

/// One result. `help_index` is the rule's index in the driver's rule list.
struct ResultAt<'a> {
    rule_index: usize,
    rule_id: &'a str,
    level: &'static str,
    message: String,
    location: &'a Location,
}

fn result_json(r: &ResultAt<'_>) -> Value {
    let at = r.location;
    let mut physical = json!({ "artifactLocation": { "uri": uri_reference(&at.source) } });
    if let Some(line) = at.line.filter(|l| *l >= 1) {
        physical["region"] = json!({ "startLine": line });
    }
    json!({
        "ruleId": r.rule_id,
        "ruleIndex": r.rule_index,
        "level": r.level,
        "message": { "text": r.message },
        "locations": [{
            "physicalLocation": physical,
            "logicalLocations": [{
                "fullyQualifiedName": format!("{} doc {} ({}): {}", at.source, at.doc, at.object, at.path),
                "name": at.path.to_string(),
                "kind": "member",
            }],
        }],
        "properties": { "document": at.doc, "object": at.object, "path": at.path.to_string() },
    })
}

fn log(tool: &Tool, rules: &[Descriptor], results: Vec<Value>) -> Value {
    let rules: Vec<Value> = rules
        .iter()
        .map(|d| {
            json!({
                "id": d.id,
                "name": camel(&d.id),
                "shortDescription": { "text": d.summary },
                "fullDescription": { "text": d.help },
                "help": { "text": d.help },
                "defaultConfiguration": { "level": d.level },
            })
        })
        .collect();
    let mut driver = json!({
        "name": tool.name,
        "version": tool.version,
        "semanticVersion": tool.version,
        "rules": rules,
    });
    if let Some(uri) = &tool.information_uri {
        driver["informationUri"] = Value::String(uri.clone());
    }
    json!({
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": driver },
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    })
}

/// A SARIF 2.1.0 log of lint findings. Every lint rule is listed (so `ruleIndex` is stable
/// across runs); each result's message is the finding's message followed by its fix.
pub fn lint_log(findings: &[Finding], tool: &Tool) -> Value {
    let rules = lint::rules();
    let descriptors: Vec<Descriptor> = rules.iter().map(descriptor_of).collect();
    let results = findings
        .iter()
        .map(|f| {
            let rule_index = rules.iter().position(|r| r.id == f.rule).unwrap_or(0);
            result_json(&ResultAt {
                rule_index,
                rule_id: f.rule,
                level: level(f.severity),
                message: format!("{} Fix: {}", f.message, f.fix),
                location: &f.location,
            })
        })
        .collect();
    log(tool, &descriptors, results)
}

/// Rule id, summary and rationale of each validation problem class.
const VALIDATE_RULES: &[(ViolationKind, &str, &str, &str)] = &[
    (
        ViolationKind::WrongType,
        "validate-wrong-type",
        "A field has the wrong type for its schema",
        "The API server rejects an object whose field types differ from the CRD or Kubernetes schema (rayStartParams values must be strings).",
    ),
    (
        ViolationKind::UnknownField,
        "validate-unknown-field",
        "A field the schema does not declare (strict mode)",
        "The API server drops undeclared fields of custom resources and rejects them on core kinds with strict field validation; a typo such as hostNetwrok silently does nothing.",
    ),
    (
        ViolationKind::MissingRequired,
        "validate-missing-required",
        "A required field is missing",
        "The API server or the operator rejects an object without it (a container without image, a worker group without groupName).",
    ),
    (
        ViolationKind::InvalidValue,
        "validate-invalid-value",
        "A value the API server or the operator refuses or ignores",
        "Enums, patterns, ranges, references between fields (a volumeMount naming no volume, a container claim without a pod claim), duplicate keys and names, MPIJob replica types and KubeRay replica ranges.",
    ),
    (
        ViolationKind::UnknownKind,
        "validate-unknown-kind",
        "No schema for this apiVersion and kind",
        "rdmakit cannot check the object; a wrong apiVersion is also refused by the cluster.",
    ),
    (
        ViolationKind::Decode,
        "validate-decode",
        "The Kubernetes API type refuses the object",
        "The typed decode of the Kubernetes API (k8s-openapi) failed, as the API server's would.",
    ),
    (
        ViolationKind::SchemaUnavailable,
        "validate-schema-unavailable",
        "A built-in schema could not be loaded",
        "The rdmakit build is damaged; reinstall it.",
    ),
];

/// A SARIF 2.1.0 log of validation violations; the rule id is the violation's class
/// (`validate-unknown-field`, `validate-invalid-value`, ...).
pub fn validate_log(violations: &[Violation], tool: &Tool) -> Value {
    let descriptors: Vec<Descriptor> = VALIDATE_RULES
        .iter()
        .map(|(_, id, summary, why)| Descriptor {
            id: (*id).to_owned(),
            summary: (*summary).to_owned(),
            help: format!("{summary}\n\nWhy: {why}"),
            level: "error",
        })
        .collect();
    let results = violations
        .iter()
        .map(|v| {
            let rule_index = VALIDATE_RULES
                .iter()
                .position(|(k, ..)| *k == v.kind)
                .unwrap_or(0);
            result_json(&ResultAt {
                rule_index,
                rule_id: VALIDATE_RULES[rule_index].1,
                level: level(v.severity),
                message: v.message.clone(),
                location: &v.location,
            })
        })
        .collect();
    log(tool, &descriptors, results)
}

/// `rdma-missing-ipc-lock` → `RdmaMissingIpcLock` (SARIF's `name` is an identifier).
fn camel(id: &str) -> String {
    id.split('-')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// A file name as a relative URI reference: `/`-separated, everything outside RFC 3986's
/// unreserved characters percent-encoded (`<stdin>` → `%3Cstdin%3E`).
pub fn uri_reference(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for b in source.replace('\\', "/").bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
