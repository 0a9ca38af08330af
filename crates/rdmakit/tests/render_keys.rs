//! `Values::KEYS` says which systems read each `--set` key, and `render`/`run` refuse a key none of the
//! rendered systems reads: measured here, not assumed. For every built-in profile, system and key, the
//! system is rendered with different valid values of the key; a key is read by a system exactly when
//! some profile's output (or error) differs.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use k8s_render::values::ValueKind;
use k8s_render::{Profile, System, Values};

/// Different valid values of `key` for `profile` (`None`: the profile has no second choice).
fn values_of(key: &k8s_render::values::Key, p: &Profile) -> Option<Vec<String>> {
    let pair = |a: &str, b: &str| Some(vec![a.to_owned(), b.to_owned()]);
    match key.kind {
        ValueKind::Count { min, max } => {
            let a = min.max(1) + 1;
            (a < max).then(|| vec![a.to_string(), (a + 1).to_string()])
        }
        ValueKind::Quantity => pair("3", "5"),
        ValueKind::Name => pair("name-a", "name-b"),
        ValueKind::Subdomain => pair("ssd-a", "ssd-b"),
        ValueKind::Version => pair("9.9.1", "9.9.2"),
        ValueKind::Registry => pair("a.example.com/x", "b.example.com/x"),
        ValueKind::Repository => pair("img-a", "img-b"),
        ValueKind::Image => pair("a.example.com/i:1", "b.example.com/i:2"),
        ValueKind::ByteSize => pair("600M", "700M"),
        ValueKind::Path => pair("/tmp/a.log", "/tmp/b.log"),
        ValueKind::Executable => pair("/opt/a", "/opt/b"),
        ValueKind::NcclDebug => pair("WARN", "TRACE"),
        ValueKind::LabelValue => {
            let types: Vec<String> = p.instance_types.keys().cloned().collect();
            (types.len() >= 2).then_some(types)
        }
        ValueKind::Flag => pair("true", "false"),
        ValueKind::Choice(words) => pair(words[0], words[1]),
        ValueKind::Text => pair("echo a", "echo b"),
        ValueKind::NodeSelector => pair("a", "b"),
    }
}

fn rendered(system: System, p: &Profile, key: &str, value: &str) -> String {
    let mut v = Values::default();
    v.set(key, value)
        .unwrap_or_else(|e| panic!("{key}={value}: {e}"));
    match k8s_render::render(system, p, &v) {
        Ok(b) => b
            .files()
            .iter()
            .map(|f| format!("{}\n{}", f.path, f.contents))
            .collect(),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn keys_say_which_systems_read_them() {
    let profiles: Vec<Profile> = rdmakit::profiles::builtin_names()
        .iter()
        .map(|n| rdmakit::profiles::load_builtin(n).unwrap())
        .collect();
    let mut observed = BTreeSet::new();
    for key in Values::KEYS {
        let name = if key.kind == ValueKind::NodeSelector {
            "node_selector.example.com/pool"
        } else {
            key.name
        };
        for p in &profiles {
            let Some(values) = values_of(key, p) else {
                continue;
            };
            for &system in System::all() {
                if !system.applies_to(p) {
                    continue;
                }
                let first = rendered(system, p, name, &values[0]);
                if values[1..]
                    .iter()
                    .any(|v| rendered(system, p, name, v) != first)
                {
                    observed.insert((key.name, system.name()));
                }
            }
        }
    }
    let listed: BTreeSet<(&str, &str)> = Values::KEYS
        .iter()
        .flat_map(|k| k.systems.iter().map(move |s| (k.name, s.name())))
        .collect();
    let unlisted: Vec<_> = observed.difference(&listed).collect();
    let unread: Vec<_> = listed.difference(&observed).collect();
    assert!(
        unlisted.is_empty() && unread.is_empty(),
        "read but not listed in Values::KEYS: {unlisted:?}\nlisted but read by no profile: {unread:?}"
    );
}
