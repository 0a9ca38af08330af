//! A structural-schema checker over JSON values: OpenAPI v3 as CRDs use it, and the JSON schemas
//! k8s-openapi generates (whose `$ref`s resolve into their definitions). Defaults before `required`,
//! `null` as unset, int-or-string, preserve-unknown-fields, embedded resources, list types.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::{Issue, ViolationKind, suggest};
use crate::manifest::{FieldPath, PathSeg, describe_value};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
/// Arbitrary JSON (CRD `default`/`enum` values); k8s-openapi's schema says "object", which is wrong.
const ANY_JSON: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON";

/// `{"$ref": ObjectMeta}`, for checking `metadata` of custom and embedded resources.
pub(super) fn object_meta_ref() -> &'static Value {
    static META: OnceLock<Value> = OnceLock::new();
    META.get_or_init(|| serde_json::json!({ "$ref": format!("#/$defs/{OBJECT_META}") }))
}

/// The path of the value being checked, built from borrowed steps: a [`FieldPath`] is made only for a
/// value that has an issue (most have none), not for every value checked.
#[derive(Clone, Copy, Debug)]
pub(super) enum At<'a> {
    /// A path given whole (the root, `metadata`).
    Path(&'a FieldPath),
    /// Key `k` below a path.
    Key(&'a At<'a>, &'a str),
    /// Item `i` below a path.
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    /// The path as a [`FieldPath`].
    pub(super) fn path(&self) -> FieldPath {
        let mut steps = Vec::new();
        let mut cur = self;
        let base = loop {
            match cur {
                At::Path(p) => break *p,
                At::Key(up, k) => {
                    steps.push(PathSeg::Key((*k).to_owned()));
                    cur = up;
                }
                At::Index(up, i) => {
                    steps.push(PathSeg::Index(*i));
                    cur = up;
                }
            }
        };
        let mut segs = base.segments().to_vec();
        segs.extend(steps.into_iter().rev());
        FieldPath::from_segments(segs)
    }

    /// True when any key step equals `key`.
    fn contains_key(&self, key: &str) -> bool {
        let mut cur = self;
        loop {
            match cur {
                At::Path(p) => return p.contains_key(key),
                At::Key(up, k) => {
                    if *k == key {
                        return true;
                    }
                    cur = up;
                }
                At::Index(up, _) => cur = up,
            }
        }
    }
}

/// A structural-schema checker over JSON values (OpenAPI v3 as used by CRDs, and the JSON
/// schemas k8s-openapi generates, whose `$ref`s resolve into `defs`).
pub(super) struct Ctx<'a> {
    defs: Option<&'a Map<String, Value>>,
    strict: bool,
    /// Keys of the root object left to the caller (a custom resource's `apiVersion`, `kind` and
    /// `metadata`, which the API server handles itself whatever the CRD schema says).
    root_skip: &'static [&'static str],
    pub(super) issues: Vec<Issue>,
}

fn truthy(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

impl<'a> Ctx<'a> {
    pub(super) fn new(defs: Option<&'a Map<String, Value>>, strict: bool) -> Self {
        Self {
            defs,
            strict,
            root_skip: &[],
            issues: Vec::new(),
        }
    }

    /// The root object's `keys` are not checked (nor required) here.
    pub(super) fn skipping_root_keys(mut self, keys: &'static [&'static str]) -> Self {
        self.root_skip = keys;
        self
    }

    fn push(&mut self, path: &At<'_>, kind: ViolationKind, message: String) {
        self.issues.push(Issue {
            path: path.path(),
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

    /// Checks `value` against `schema`. Nothing is copied or changed: a schema `default` for an absent
    /// field is checked where the API server would insert it, so the value is borrowed throughout.
    pub(super) fn check(&mut self, value: &Value, schema: &'a Value, path: &At<'_>) {
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
                        let mut trial =
                            Ctx::new(self.defs, self.strict).skipping_root_keys(self.root_skip);
                        trial.check(value, b, path);
                        trial.issues.iter().all(|i| i.warning)
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

    fn wrong_type(&mut self, expected: &str, value: &Value, path: &At<'_>) {
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

    fn check_object(&mut self, value: &Value, schema: &'a Value, path: &At<'_>) {
        let Some(obj) = value.as_object() else {
            self.wrong_type("object", value, path);
            return;
        };
        let skip: &[&str] = match path {
            At::Path(p) if p.is_root() => self.root_skip,
            _ => &[],
        };
        let absent = |k: &str| !skip.contains(&k) && obj.get(k).is_none_or(Value::is_null);
        let props = schema.get("properties").and_then(Value::as_object);
        // Defaults first: the API server defaults before it checks `required`, and then validates the
        // default where it put it.
        let mut defaulted: Vec<&str> = Vec::new();
        if let Some(props) = props {
            for (k, ps) in props {
                let (resolved, _) = self.resolve(ps);
                if let Some(d) = resolved.get("default")
                    && absent(k)
                {
                    defaulted.push(k);
                    self.check(d, ps, &At::Key(path, k));
                }
            }
        }
        if let Some(req) = schema.get("required").and_then(Value::as_array) {
            for r in req.iter().filter_map(Value::as_str) {
                if absent(r) && !defaulted.contains(&r) {
                    let expected = props
                        .and_then(|p| p.get(r))
                        .map(|s| self.type_label(s))
                        .unwrap_or_else(|| "a value".to_owned());
                    self.push(
                        &At::Key(path, r),
                        ViolationKind::MissingRequired,
                        format!("required field is missing (expected {expected})"),
                    );
                }
            }
        }
        let additional = schema.get("additionalProperties");
        let preserve = truthy(schema, "x-kubernetes-preserve-unknown-fields");
        let embedded = truthy(schema, "x-kubernetes-embedded-resource");
        for (k, child) in obj {
            if skip.contains(&k.as_str()) {
                continue;
            }
            let child_path = At::Key(path, k);
            if let Some(ps) = props.and_then(|p| p.get(k)) {
                self.check(child, ps, &child_path);
            } else if let Some(ap) = additional.filter(|a| a.is_object()) {
                self.check(child, ap, &child_path);
            } else if embedded && matches!(k.as_str(), "apiVersion" | "kind") {
                if !child.is_string() {
                    self.wrong_type("string", child, &child_path);
                }
            } else if embedded && k == "metadata" {
                self.check(child, object_meta_ref(), &child_path);
            } else if additional == Some(&Value::Bool(false)) || !preserve {
                // A field the schema does not declare: the API server prunes it without a word (or,
                // under `kubectl apply --validate=strict`, rejects it). An error under --strict, a
                // warning otherwise, so a typo such as `imagePullPolcy` is never passed in silence.
                let warning = additional != Some(&Value::Bool(false)) && !self.strict;
                let hint = props
                    .and_then(|p| suggest(k, p.keys().map(String::as_str)))
                    .map(|s| format!(" (did you mean {s:?}?)"))
                    .unwrap_or_default();
                let known = match props {
                    Some(p) if !p.is_empty() => String::new(),
                    _ => " (this object declares no fields)".to_owned(),
                };
                let consequence = if warning {
                    "the API server drops it, so it has no effect (an error with --strict)"
                } else {
                    "the API server drops or rejects it"
                };
                self.issues.push(Issue {
                    path: child_path.path(),
                    kind: ViolationKind::UnknownField,
                    message: format!("unknown field {k:?}{hint}{known}; {consequence}"),
                    warning,
                });
            }
        }
        if embedded {
            for k in ["apiVersion", "kind"] {
                if !preserve && absent(k) {
                    self.push(
                        &At::Key(path, k),
                        ViolationKind::MissingRequired,
                        "required field is missing (an embedded object needs apiVersion and kind)"
                            .to_owned(),
                    );
                }
            }
        }
    }

    fn check_array(&mut self, value: &Value, schema: &'a Value, path: &At<'_>) {
        let Some(items) = value.as_array() else {
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
            for (i, item) in items.iter().enumerate() {
                self.check(item, item_schema, &At::Index(path, i));
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
                            &At::Index(path, i),
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
                            &At::Index(path, i),
                            ViolationKind::InvalidValue,
                            format!("duplicate value {} in a set", describe_value(item)),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn check_string(&mut self, value: &Value, schema: &Value, path: &At<'_>) {
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

    fn check_number(&mut self, value: &Value, schema: &Value, path: &At<'_>) {
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

    fn check_quantity(&mut self, value: &Value, path: &At<'_>) {
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
pub(super) fn dropped_fields(input: &Value, output: &Value, path: &At<'_>, out: &mut Vec<Issue>) {
    match (input, output) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => dropped_fields(v, w, &At::Key(path, k), out),
                    None if !v.is_null() => out.push(Issue {
                        path: At::Key(path, k).path(),
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
                dropped_fields(v, w, &At::Index(path, i), out);
            }
        }
        _ => {}
    }
}

/// `Some(matches)`, or `None` when the (Go RE2) pattern does not compile here.
fn pattern_matches(pattern: &str, s: &str) -> Option<bool> {
    // One cache per thread: validation runs on every core, and a shared cache behind a lock was taken
    // for every string checked.
    thread_local! {
        static CACHE: RefCell<HashMap<String, Option<Regex>>> = RefCell::new(HashMap::new());
    }
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        // Look up before inserting: the pattern is copied once, not on every string checked.
        if let Some(re) = cache.get(pattern) {
            return re.as_ref().map(|r| r.is_match(s));
        }
        let re = cache
            .entry(pattern.to_owned())
            .or_insert_with(|| Regex::new(pattern).ok());
        re.as_ref().map(|r| r.is_match(s))
    })
}
