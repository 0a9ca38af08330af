//! The Rhai API reference, `docs/rhai-api.md`, generated from the engine's own registration metadata
//! (Rhai's `metadata` feature): every module function is registered with its doc text and parameter
//! names (`reg!`/`regp!`/`regp_opts!` in `host/mod.rs`), so the reference cannot list a function the
//! engine lacks or miss one it has. `rdmakit rhai-api` prints it; the unit test below fails when the
//! committed file drifts from what the engine registers.

use std::fmt::Write as _;
use std::sync::Arc;

use rhai::{Engine, RhaiNativeFunc};
use serde_json::Value;

use super::{Host, HostConfig};
use crate::cancel::Cancel;
use crate::exec::dry::DryRunExecutor;

/// Where the reference lives, relative to the repository root.
pub const PATH: &str = "docs/rhai-api.md";

/// How to regenerate the reference, as the sync test and the file itself say.
pub const REGENERATE: &str = "cargo run -p rdmakit -- rhai-api > docs/rhai-api.md";

/// `text` as Rhai wants a doc comment: every line behind `/// `.
pub(crate) fn doc_comment(text: &str) -> String {
    text.lines()
        .map(|l| format!("/// {l}").trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Rhai's parameter info: `name: type` per parameter (the Rust types as scripts name them), then the
/// return type unless it is `()`.
pub(crate) fn params_info(params: &[&str], ret: &str) -> Vec<String> {
    let mut info: Vec<String> = params
        .iter()
        .map(|p| match p.split_once(": ") {
            Some((name, ty)) => format!("{name}: {}", script_type(ty)),
            None => (*p).to_owned(),
        })
        .collect();
    let ret = script_type(ret);
    if ret != "()" {
        info.push(ret);
    }
    info
}

/// The Rust return type of a function as registered (its `Ok` type for a fallible one).
pub(crate) fn return_type_of<
    A: 'static,
    const N: usize,
    const X: bool,
    R: 'static,
    const F: bool,
    FN,
>(
    _f: &FN,
) -> &'static str
where
    FN: RhaiNativeFunc<A, N, X, R, F>,
{
    FN::return_type_name()
}

/// A Rust type as scripts see it: `string`, `int`, `float`, `bool`, `array`, `map`, `any`, `()`.
fn script_type(rust: &str) -> String {
    // `stringify!` spaces paths out (`rhai :: Map`).
    let t: String = rust.split_whitespace().collect();
    let t = t.as_str();
    if let Some(inner) = t.strip_prefix("core::result::Result<") {
        // `Result<T, Box<EvalAltResult>>`: the script sees T (or the error).
        let mut depth = 0usize;
        let end = inner
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '<' => depth += 1,
                    '>' => depth = depth.saturating_sub(1),
                    ',' if depth == 0 => return true,
                    _ => {}
                }
                false
            })
            .map_or(inner.len(), |(i, _)| i);
        return script_type(&inner[..end]);
    }
    let last = t.rsplit("::").next().unwrap_or(t);
    match t {
        "&str" | "str" | "String" | "alloc::string::String" | "ImmutableString" => "string".into(),
        "i64" => "int".into(),
        "f64" => "float".into(),
        "bool" => "bool".into(),
        "()" => "()".into(),
        "Array" | "rhai::Array" => "array".into(),
        "Map" | "rhai::Map" => "map".into(),
        "Dynamic" | "rhai::Dynamic" => "any".into(),
        _ if t.starts_with("alloc::vec::Vec<") => "array".into(),
        _ if t.contains("BTreeMap<") => "map".into(),
        _ if last == "Dynamic" => "any".into(),
        _ if last == "SecretParam" => "Secret".into(),
        _ => last.to_owned(),
    }
}

/// A function's doc text from its metadata, without the `/// ` leaders.
fn doc_text(f: &Value) -> String {
    f["docComments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .flat_map(str::lines)
        .map(|l| l.trim_start_matches("///").trim())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One signature: `name(a: string, b: map) -> array`.
fn signature(prefix: &str, f: &Value) -> String {
    let params: Vec<String> = f["params"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| match (p["name"].as_str(), p["type"].as_str()) {
            (Some(n), Some(t)) => format!("{n}: {t}"),
            (Some(n), None) => n.to_owned(),
            (None, Some(t)) => format!("_: {t}"),
            (None, None) => "_".to_owned(),
        })
        .collect();
    let ret = match f["returnType"].as_str() {
        Some(r) if !r.is_empty() => format!(" -> {r}"),
        _ => String::new(),
    };
    format!(
        "{prefix}{}({}){ret}",
        f["name"].as_str().unwrap_or("?"),
        params.join(", ")
    )
}

/// Appends one section per function name (its overloads' signatures, then its doc text) of `functions`.
fn functions_section(md: &mut String, prefix: &str, functions: &[Value]) {
    let mut names: Vec<&str> = functions
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let mut overloads: Vec<&Value> = functions.iter().filter(|f| f["name"] == name).collect();
        // Rhai lists overloads of one arity in hash order: sort them so the file is stable.
        overloads.sort_by_key(|f| (f["numParams"].as_u64(), signature(prefix, f)));
        let _ = writeln!(md, "### `{prefix}{name}`\n");
        for f in &overloads {
            let _ = writeln!(md, "- `{}`", signature(prefix, f));
        }
        let mut docs: Vec<String> = overloads.iter().map(|f| doc_text(f)).collect();
        docs.dedup();
        for d in docs.iter().filter(|d| !d.is_empty()) {
            let _ = writeln!(md, "\n{d}");
        }
        md.push('\n');
    }
}

/// The reference for `engine`: the documented global functions, then each static module with its doc
/// and functions (alphabetical, as Rhai's metadata lists them).
pub fn markdown(engine: &Engine) -> Result<String, serde_json::Error> {
    let meta: Value = serde_json::from_str(&engine.gen_fn_metadata_to_json(false)?)?;
    let mut md = format!(
        "# rdmakit's Rhai API\n\n\
         <!-- Generated from the engine's registration metadata; do not edit. Regenerate with\n     \
         {REGENERATE}\n     (a unit test in crates/rdmakit fails while this file is out of date). -->\n\n\
         What a workflow script can call besides Rhai's standard library. Every function that talks to a\n\
         cluster goes through the executor (dry-run: recorded into the plan), has a deadline, and returns\n\
         what it read redacted of every secret the run knows. Options maps refuse unknown keys.\n\n"
    );
    let global: Vec<Value> = meta["functions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| !doc_text(f).is_empty())
        .cloned()
        .collect();
    if !global.is_empty() {
        md.push_str("## Global functions\n\n");
        functions_section(&mut md, "", &global);
    }
    if let Some(modules) = meta["modules"].as_object() {
        for (name, module) in modules {
            let _ = writeln!(md, "## `{name}::`\n");
            if let Some(doc) = module["doc"].as_str().filter(|d| !d.is_empty()) {
                let _ = writeln!(md, "{}\n", doc.trim());
            }
            let functions: Vec<Value> = module["functions"].as_array().cloned().unwrap_or_default();
            functions_section(&mut md, &format!("{name}::"), &functions);
        }
    }
    Ok(format!("{}\n", md.trim_end()))
}

/// The reference for the engine every workflow runs in.
pub fn rhai_api_markdown() -> Result<String, serde_json::Error> {
    let dry = Arc::new(DryRunExecutor::new("rhai-api", None, None));
    let host = Host::new(dry, HostConfig::new("rhai-api"), Cancel::new(), "rhai-api");
    markdown(host.engine())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rhai_api_reference_matches_what_the_engine_registers() {
        let committed = include_str!("../../../../docs/rhai-api.md");
        let generated = rhai_api_markdown().unwrap();
        assert!(
            committed == generated,
            "{PATH} is out of date with the functions the engine registers; regenerate it with\n  {REGENERATE}\n\
             (first line that differs: {:?})",
            committed
                .lines()
                .zip(generated.lines())
                .find(|(a, b)| a != b)
        );
    }

    #[test]
    fn every_module_function_is_documented() {
        let meta: Value = serde_json::from_str(
            &rhai_api_host_engine()
                .gen_fn_metadata_to_json(false)
                .unwrap(),
        )
        .unwrap();
        let modules = meta["modules"].as_object().unwrap();
        assert_eq!(modules.len(), 12, "{:?}", modules.keys());
        for (name, module) in modules {
            assert!(
                module["doc"].as_str().is_some_and(|d| !d.is_empty()),
                "{name}:: has no doc"
            );
            for f in module["functions"].as_array().unwrap() {
                assert!(
                    !doc_text(f).is_empty(),
                    "{name}::{} has no doc text",
                    f["name"]
                );
            }
        }
    }

    #[test]
    fn rust_types_read_as_script_types() {
        assert_eq!(script_type("&str"), "string");
        assert_eq!(script_type("rhai::Map"), "map");
        assert_eq!(script_type("rhai :: Map"), "map");
        assert_eq!(
            script_type(
                "core::result::Result<alloc::vec::Vec<rhai::types::dynamic::Dynamic>, alloc::boxed::Box<rhai::types::error::EvalAltResult>>"
            ),
            "array"
        );
        assert_eq!(
            script_type("core::result::Result<(), alloc::boxed::Box<x::E>>"),
            "()"
        );
        assert_eq!(
            params_info(&["path: &str", "opts: rhai::Map"], "bool"),
            ["path: string", "opts: map", "bool"]
        );
        assert_eq!(doc_comment("a\nb"), "/// a\n/// b");
    }

    fn rhai_api_host_engine() -> Engine {
        let dry = Arc::new(DryRunExecutor::new("t", None, None));
        let host = Host::new(dry, HostConfig::new("t"), Cancel::new(), "t");
        let Host { engine, .. } = host;
        engine
    }
}
