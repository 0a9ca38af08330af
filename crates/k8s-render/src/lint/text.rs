//! Rules over free text: strings in manifests, Dockerfiles, Ray programs. NCCL pins, torch's
//! bundled NCCL, the Ray Direct Transport requirements, NIXL on eRDMA, GLOO, and `ray.get` of an
//! RDT reference.

use std::sync::OnceLock;

use regex::Regex;

use super::catalog::*;
use super::{Finding, LintOptions, PluginLint, Rule, sort};
use crate::DevicePattern;
use crate::manifest::{FieldPath, Location, Severity};

/// Lints plain text that is not a manifest (a Dockerfile, a shell or Python script) for the
/// rules that apply to text: known-bad NCCL pins, torch's bundled NCCL, NIXL on eRDMA, and the
/// Ray RDT requirements (receiver with `enable_tensor_transport=True`, NCCL collective group).
/// Findings have the root path and the line of the match.
pub fn lint_text(source: &str, text: &str, options: &LintOptions) -> Vec<Finding> {
    let mut out = Vec::new();
    let erdma = options
        .device_pattern
        .as_ref()
        .is_some_and(DevicePattern::names_erdma);
    let has_good_pin = good_nccl_pin(text);
    for ((rule, severity, message, fix), at) in text_rules(
        text,
        erdma,
        other_vendor(options),
        has_good_pin,
        options.plugin.as_ref(),
    ) {
        let line = text[..at].matches('\n').count() as u64 + 1;
        out.push(Finding {
            rule: rule.id,
            severity,
            location: Location::in_file(source, "text", FieldPath::root(), line),
            message,
            why: rule.why,
            fix,
        });
    }
    sort(&mut out);
    out
}

pub(super) type TextHit = (&'static Rule, Severity, String, String);

pub(super) fn other_vendor(options: &LintOptions) -> bool {
    options
        .device_pattern
        .as_ref()
        .is_some_and(|p| !p.names_erdma())
}

pub(super) fn bad_nccl_re() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)(nccl[a-z0-9_.\-]*?(?:==|=|:|-|_|\s)?v?)(2\.28\.[79])(?:[^0-9]|$)").ok()
    })
    .as_ref()
}

pub(super) fn good_nccl_pin(text: &str) -> bool {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?i)nvidia-nccl-cu1[0-9]\s*==\s*\d").ok())
        .as_ref()
        .is_some_and(|r| r.is_match(text))
}

pub(super) fn cached(
    cell: &'static OnceLock<Option<Regex>>,
    pattern: &str,
) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

/// Rules that look at free text (strings in manifests, Dockerfiles, Ray programs). Each hit
/// carries the byte offset of the match, so callers can turn it into a line.
///
/// `other_vendor` is true when the profile's devices are known not to be eRDMA: the NCCL
/// segfault is eRDMA-specific, so a bad pin is then only a warning.
pub(super) fn text_rules(
    text: &str,
    erdma: bool,
    other_vendor: bool,
    has_good_pin: bool,
    plugin: Option<&PluginLint>,
) -> Vec<(TextHit, usize)> {
    let pin_severity = if other_vendor && !erdma {
        Severity::Warning
    } else {
        Severity::Error
    };
    let mut hits = Vec::new();
    if let Some(p) = plugin {
        hits.extend(plugin_version_hits(text, p));
    }
    if let Some(re) = bad_nccl_re() {
        for c in re.captures_iter(text) {
            let version = c.get(2).map_or("", |m| m.as_str());
            let whole = c.get(0);
            let matched = whole.map_or("", |m| m.as_str()).trim_end();
            hits.push((
                (
                    BAD_NCCL,
                    pin_severity,
                    format!("pins NCCL {version} ({matched:?})"),
                    "pin a working NCCL, e.g. `pip install nvidia-nccl-cu13==2.30.7` (or 2.29.7 / 2.28.3), after installing torch".to_owned(),
                ),
                whole.map_or(0, |m| m.start()),
            ));
        }
    }
    static TORCH: OnceLock<Option<Regex>> = OnceLock::new();
    if !has_good_pin && let Some(re) = cached(&TORCH, r"(?i)\btorch\s*==\s*2\.11(\.\d+)?\b") {
        for m in re.find_iter(text) {
            hits.push((
                (
                    TORCH_NCCL,
                    if other_vendor && !erdma { Severity::Info } else { Severity::Warning },
                    format!("installs {}, whose bundled NCCL is 2.28.9", m.as_str()),
                    "also install `nvidia-nccl-cu13==2.30.7` (after torch) so the bundled 2.28.9 is replaced".to_owned(),
                ),
                m.start(),
            ));
        }
    }
    static TRANSPORT: OnceLock<Option<Regex>> = OnceLock::new();
    static ENABLE: OnceLock<Option<Regex>> = OnceLock::new();
    let Some(transport_re) = cached(&TRANSPORT, r#"tensor_transport\s*=\s*["']([A-Za-z]+)["']"#)
    else {
        return hits;
    };
    let mut first_transport = None;
    for c in transport_re.captures_iter(text) {
        let backend = c.get(1).map_or("", |m| m.as_str()).to_ascii_lowercase();
        let at = c.get(0).map_or(0, |m| m.start());
        first_transport.get_or_insert((backend.clone(), at));
        if backend == "gloo" {
            hits.push((
                (
                    GLOO_CPU,
                    Severity::Warning,
                    "uses tensor_transport=\"gloo\": GPU tensors go through host memory and TCP"
                        .to_owned(),
                    "use @ray.method(tensor_transport=\"nccl\") with a NCCL collective group"
                        .to_owned(),
                ),
                at,
            ));
        }
        if erdma && backend == "nixl" {
            hits.push((
                (
                    NIXL_ERDMA,
                    Severity::Error,
                    "uses tensor_transport=\"nixl\" on eRDMA".to_owned(),
                    "use @ray.method(tensor_transport=\"nccl\") (and enable_tensor_transport=True on the receiver)".to_owned(),
                ),
                at,
            ));
        }
    }
    hits.extend(rdt_ray_get(text));
    if let Some((backend, at)) = first_transport {
        let enabled = cached(&ENABLE, r"enable_tensor_transport\s*=\s*True")
            .is_some_and(|r| r.is_match(text));
        if !enabled {
            hits.push((
                (
                    RDT_RECEIVER,
                    Severity::Error,
                    format!("uses tensor_transport=\"{backend}\" but no actor sets enable_tensor_transport=True"),
                    "declare the receiving actor with @ray.remote(num_gpus=1, enable_tensor_transport=True)".to_owned(),
                ),
                at,
            ));
        }
        if backend == "nccl" && !text.contains("create_collective_group") {
            hits.push((
                (
                    RDT_GROUP,
                    Severity::Error,
                    "uses tensor_transport=\"nccl\" without create_collective_group".to_owned(),
                    "call ray.experimental.collective.create_collective_group([producer, consumer], backend=\"nccl\") before the first transfer".to_owned(),
                ),
                at,
            ));
        }
    }
    hits
}

/// A plugin version on the profile's known-bad list after one of its markers (`aws-ofi-nccl-1.12.0`,
/// `AWS_OFI_NCCL_VERSION=v1.12.0-aws`).
fn plugin_version_hits(text: &str, p: &PluginLint) -> Vec<(TextHit, usize)> {
    if p.known_bad.is_empty() {
        return Vec::new();
    }
    let mut markers: Vec<String> = vec![p.name.clone()];
    markers.extend(p.version_markers.iter().cloned());
    let mut hits = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for m in markers.iter().filter(|m| !m.trim().is_empty()) {
        let Ok(re) = Regex::new(&format!(
            r"(?i){}[\s=:@/_-]{{0,3}}v?(\d+(?:\.\d+)+)",
            regex::escape(m)
        )) else {
            continue;
        };
        for c in re.captures_iter(text) {
            let (Some(whole), Some(v)) = (c.get(0), c.get(1)) else {
                continue;
            };
            if !p.known_bad.iter().any(|b| b == v.as_str()) || !seen.insert(whole.start()) {
                continue;
            }
            let good = if p.known_good.is_empty() {
                "a version outside the known-bad list".to_owned()
            } else {
                p.known_good.join(" or ")
            };
            hits.push((
                (
                    PLUGIN_BAD,
                    Severity::Error,
                    format!(
                        "pins {} {}{} ({:?})",
                        p.name,
                        v.as_str(),
                        p.bad_reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default(),
                        whole.as_str()
                    ),
                    format!("pin {} {good} instead", p.name),
                ),
                whole.start(),
            ));
        }
    }
    hits
}

/// `ray.get` on what a `tensor_transport` method returns: directly
/// (`ray.get(p.send.remote())`) or through a variable (`ref = p.send.remote()` ... `ray.get(ref)`).
fn rdt_ray_get(text: &str) -> Vec<(TextHit, usize)> {
    static METHOD: OnceLock<Option<Regex>> = OnceLock::new();
    let Some(method_re) = cached(
        &METHOD,
        r#"@ray\.method\([^)]*tensor_transport\s*=\s*["'][A-Za-z]+["'][^)]*\)\s*\n\s*def\s+([A-Za-z_][A-Za-z0-9_]*)"#,
    ) else {
        return Vec::new();
    };
    let methods: Vec<&str> = method_re
        .captures_iter(text)
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .collect();
    let mut hits = Vec::new();
    for m in methods {
        let escaped = regex::escape(m);
        let direct = Regex::new(&format!(
            r"ray\.get\(\s*\[?\s*[A-Za-z_][A-Za-z0-9_.\[\]]*\.{escaped}\.remote\("
        ));
        let assigned = Regex::new(&format!(
            r"(?m)^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*[A-Za-z_][A-Za-z0-9_.\[\]]*\.{escaped}\.remote\("
        ));
        let mut at_of = Vec::new();
        if let Ok(re) = direct {
            at_of.extend(re.find_iter(text).map(|x| x.start()));
        }
        if let Ok(re) = assigned {
            for c in re.captures_iter(text) {
                let (Some(var), Some(whole)) = (c.get(1), c.get(0)) else {
                    continue;
                };
                let get = Regex::new(&format!(
                    r"ray\.get\(\s*\[?\s*{}\b",
                    regex::escape(var.as_str())
                ));
                if let Ok(get) = get
                    && let Some(g) = get.find_at(text, whole.end())
                {
                    at_of.push(g.start());
                }
            }
        }
        for at in at_of {
            hits.push((
                (
                    RDT_DRIVER_GET,
                    Severity::Warning,
                    format!("calls ray.get on the result of RDT method {m}(): the tensor is copied through the object store"),
                    format!("pass the reference from {m}.remote() to the consuming actor's method (consumer.consume.remote(ref)) and ray.get only its small result"),
                ),
                at,
            ));
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_nccl_regex() {
        let re = bad_nccl_re().expect("regex compiles");
        assert!(re.is_match("pip install nvidia-nccl-cu13==2.28.9"));
        assert!(re.is_match("nvidia-nccl-cu12==2.28.7 torch"));
        assert!(re.is_match("apt-get install libnccl2=2.28.9-1+cuda13.0"));
        assert!(re.is_match("NCCL_VERSION=2.28.7"));
        assert!(!re.is_match("nvidia-nccl-cu13==2.30.7"));
        assert!(!re.is_match("nvidia-nccl-cu13==2.28.3"));
        assert!(!re.is_match("nccl-tests:12.2.2-cudnn8-devel-ubuntu22.04-nccl2.19.3-1-85f9143"));
        assert!(!re.is_match("nvidia-nccl-cu13==2.28.90"));
    }
}
