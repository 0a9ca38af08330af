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
