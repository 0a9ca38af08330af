//! A profile as JSON, mutated at one string, written back as a Rhai profile script (`#{ ... }`) that
//! `--set profile=PATH` loads like any user's.

use serde_json::Value;

/// Where a string sits in a JSON tree: a value at `path`, or the key `path.last()` of the object at the
/// rest of `path`.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub path: Vec<Seg>,
    pub is_key: bool,
}

/// One step into a JSON tree.
#[derive(Debug, Clone)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Every string value and every object key in `v`.
pub fn leaves(v: &Value) -> Vec<Leaf> {
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn walk(v: &Value, path: &mut Vec<Seg>, out: &mut Vec<Leaf>) {
    match v {
        Value::String(_) => out.push(Leaf {
            path: path.clone(),
            is_key: false,
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                walk(item, path, out);
                path.pop();
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                path.push(Seg::Key(k.clone()));
                out.push(Leaf {
                    path: path.clone(),
                    is_key: true,
                });
                walk(item, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// `v` with the string at `leaf` replaced by `with` (a key renamed, keeping its value).
pub fn replace(v: &mut Value, leaf: &Leaf, with: &str) {
    let (last, parents) = leaf.path.split_last().expect("a leaf has a path");
    let mut cur = v;
    for seg in parents {
        cur = match seg {
            Seg::Key(k) => &mut cur[k.as_str()],
            Seg::Index(i) => &mut cur[*i],
        };
    }
    match (last, leaf.is_key) {
        (Seg::Key(k), true) => {
            if let Some(map) = cur.as_object_mut()
                && let Some(item) = map.remove(k)
            {
                map.insert(with.to_owned(), item);
            }
        }
        (Seg::Key(k), false) => cur[k.as_str()] = Value::String(with.to_owned()),
        (Seg::Index(i), _) => cur[*i] = Value::String(with.to_owned()),
    }
}

/// A Leaf's path, for messages (`nccl.extra_env.FI_PROVIDER`, `notes[0]`).
pub fn describe(leaf: &Leaf) -> String {
    let mut s = String::new();
    for seg in &leaf.path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => s.push_str(&format!(".{k}")),
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    if leaf.is_key { format!("{s} (key)") } else { s }
}

/// `v` as a Rhai expression: maps `#{"k": v}`, arrays, strings with every non-printable-ASCII character
/// as a `\U` escape, null as `()`.
pub fn to_rhai(v: &Value) -> String {
    match v {
        Value::Null => "()".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => rhai_str(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(to_rhai).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "#{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", rhai_str(k), to_rhai(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn rhai_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}
