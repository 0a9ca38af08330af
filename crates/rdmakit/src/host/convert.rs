//! Conversions between Rhai values and JSON, and option-map accessors.

use std::time::Duration;

use rhai::{Array, Dynamic, EvalAltResult, Map};
use serde_json::Value;

use super::runtime_error;

pub(crate) fn to_dyn(v: &Value) -> Result<Dynamic, Box<EvalAltResult>> {
    rhai::serde::to_dynamic(v)
}

pub(crate) fn opt_str(m: &Map, key: &str) -> Result<Option<String>, Box<EvalAltResult>> {
    match m.get(key) {
        None => Ok(None),
        Some(d) if d.is_unit() => Ok(None),
        Some(d) if d.is_string() => Ok(Some(d.to_string())),
        Some(d) => Err(runtime_error(format!(
            "option `{key}` must be a string, got {}",
            d.type_name()
        ))),
    }
}

pub(crate) fn opt_int(m: &Map, key: &str) -> Result<Option<i64>, Box<EvalAltResult>> {
    match m.get(key) {
        None => Ok(None),
        Some(d) if d.is_unit() => Ok(None),
        Some(d) => d
            .as_int()
            .map(Some)
            .map_err(|t| runtime_error(format!("option `{key}` must be an integer, got {t}"))),
    }
}

pub(crate) fn opt_bool(m: &Map, key: &str) -> Result<Option<bool>, Box<EvalAltResult>> {
    match m.get(key) {
        None => Ok(None),
        Some(d) if d.is_unit() => Ok(None),
        Some(d) => d
            .as_bool()
            .map(Some)
            .map_err(|t| runtime_error(format!("option `{key}` must be true or false, got {t}"))),
    }
}

pub(crate) fn opt_timeout(m: &Map, default_secs: u64) -> Result<Duration, Box<EvalAltResult>> {
    match opt_int(m, "timeout")? {
        None => Ok(Duration::from_secs(default_secs)),
        Some(s) if s > 0 => Ok(Duration::from_secs(s.unsigned_abs())),
        Some(s) => Err(runtime_error(format!(
            "option `timeout` must be a positive number of seconds, got {s}"
        ))),
    }
}

/// Checks that only known option names are used (typos otherwise go unnoticed).
pub(crate) fn check_keys(what: &str, m: &Map, known: &[&str]) -> Result<(), Box<EvalAltResult>> {
    for k in m.keys() {
        if !known.contains(&k.as_str()) {
            return Err(runtime_error(format!(
                "{what}: unknown option `{k}` (known: {})",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

pub(crate) fn str_array(a: &Array, what: &str) -> Result<Vec<String>, Box<EvalAltResult>> {
    a.iter()
        .map(|d| {
            if d.is_string() {
                Ok(d.to_string())
            } else {
                Err(runtime_error(format!(
                    "{what}: every element must be a string, got {}",
                    d.type_name()
                )))
            }
        })
        .collect()
}

/// Whether `ns` is a valid namespace name (an RFC 1123 label): what the API server accepts, and nothing
/// that could change the meaning of a plan.sh line.
pub fn is_namespace_name(ns: &str) -> bool {
    let b = ns.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The `namespace` option, checked to be a namespace name.
pub(crate) fn opt_namespace(m: &Map) -> Result<Option<String>, Box<EvalAltResult>> {
    match opt_str(m, "namespace")? {
        Some(ns) if !is_namespace_name(&ns) => Err(runtime_error(format!(
            "option `namespace`: {ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ))),
        other => Ok(other),
    }
}
