//! DRA: why a ResourceClaim stays pending. The devices a driver publishes in its ResourceSlices
//! against the CEL selectors of a DeviceClass (or claim), naming the attribute no device has.
//!
//! Only the forms DeviceClasses for RDMA NICs use are understood: `device.driver == "x"`,
//! `"domain" in device.attributes`, and `device.attributes["domain"].name` or
//! `device.attributes["domain"]["name"]`, optionally compared with `==` to a string, bool or
//! integer literal. Other CEL is ignored (it cannot produce a false gap).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ParseError;
use crate::verdict::{Check, Verdict};

/// A device as a ResourceSlice publishes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraDevice {
    /// Node of the slice (`spec.nodeName`), empty for network-attached pools.
    pub node: String,
    /// Driver (`spec.driver`, e.g. `dra.net`).
    pub driver: String,
    /// Device name in the slice.
    pub name: String,
    /// Attributes by fully qualified name (`dra.net/rdma`) → value as text (`true`, `erdma_0`).
    pub attributes: BTreeMap<String, String>,
}

/// One condition of a CEL selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SelectorTerm {
    /// `device.driver == "<driver>"`.
    Driver(String),
    /// `"<domain>" in device.attributes`.
    Domain(String),
    /// `device.attributes["<domain>"].<name>` (== `value` when compared).
    Attribute {
        /// `domain/name`.
        key: String,
        /// Literal compared with, quotes removed; `None` means "truthy" (`true`).
        value: Option<String>,
    },
}

impl std::fmt::Display for SelectorTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectorTerm::Driver(d) => write!(f, "device.driver == \"{d}\""),
            SelectorTerm::Domain(d) => write!(f, "\"{d}\" in device.attributes"),
            SelectorTerm::Attribute {
                key,
                value: Some(v),
            } => write!(f, "{key} == {v}"),
            SelectorTerm::Attribute { key, value: None } => write!(f, "{key}"),
        }
    }
}

impl SelectorTerm {
    fn holds(&self, d: &DraDevice) -> bool {
        match self {
            SelectorTerm::Driver(x) => d.driver == *x,
            SelectorTerm::Domain(x) => d
                .attributes
                .keys()
                .any(|k| k.split_once('/').is_some_and(|(dom, _)| dom == x)),
            SelectorTerm::Attribute { key, value } => match (d.attributes.get(key), value) {
                (Some(have), Some(want)) => have == want,
                (Some(have), None) => have == "true",
                (None, _) => false,
            },
        }
    }
}

/// Why no device can satisfy a selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectorGap {
    /// Index of the selector (0-based, in DeviceClass order).
    pub selector: usize,
    /// The term no device satisfies (or, for `device`, the first term the closest device misses).
    pub term: String,
    /// What the devices have instead, in words.
    pub reason: String,
    /// For a combination that no single device satisfies: the closest device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

static ATTR: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"device\.attributes\["([^"]+)"\](?:\.([A-Za-z_]\w*)|\["([^"]+)"\])(?:\s*==\s*("[^"]*"|true|false|-?\d+))?"#,
    )
    .ok()
});
static DRIVER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"device\.driver\s*==\s*"([^"]+)""#).ok());
/// `"D" in device.attributes` (the domain D exists) and `"K" in device.attributes["D"]` (the attribute
/// D/K exists: seed 002's second selector, `"erdma" in device.attributes["alibaba.dra.net"]`).
static DOMAIN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#""([^"]+)"\s+in\s+device\.attributes(?:\s*\[\s*"([^"]+)"\s*\])?"#).ok()
});

/// The terms of one CEL selector expression that this module understands.
pub fn parse_cel_selector(expr: &str) -> Vec<SelectorTerm> {
    let mut out = Vec::new();
    if let Some(re) = DRIVER.as_ref() {
        out.extend(
            re.captures_iter(expr)
                .map(|c| SelectorTerm::Driver(c[1].to_string())),
        );
    }
    if let Some(re) = DOMAIN.as_ref() {
        out.extend(re.captures_iter(expr).map(|c| match c.get(2) {
            Some(domain) => SelectorTerm::Attribute {
                key: format!("{}/{}", domain.as_str(), &c[1]),
                value: None,
            },
            None => SelectorTerm::Domain(c[1].to_string()),
        }));
    }
    if let Some(re) = ATTR.as_ref() {
        for c in re.captures_iter(expr) {
            let name = c.get(2).or_else(|| c.get(3)).map_or("", |m| m.as_str());
            out.push(SelectorTerm::Attribute {
                key: format!("{}/{name}", &c[1]),
                value: c.get(4).map(|m| m.as_str().trim_matches('"').to_string()),
            });
        }
    }
    out
}

/// For each selector, the terms no published device satisfies; when every term is satisfied by
/// some device but no device satisfies all selectors together, the device that comes closest.
pub fn dra_selector_gaps(selectors: &[String], devices: &[DraDevice]) -> Vec<SelectorGap> {
    let terms: Vec<(usize, SelectorTerm)> = selectors
        .iter()
        .enumerate()
        .flat_map(|(i, s)| parse_cel_selector(s).into_iter().map(move |t| (i, t)))
        .collect();
    let mut gaps = Vec::new();
    for (i, t) in &terms {
        if devices.iter().any(|d| t.holds(d)) {
            continue;
        }
        let reason = match t {
            SelectorTerm::Attribute { key, .. } => {
                let values: Vec<String> = devices
                    .iter()
                    .filter_map(|d| d.attributes.get(key).map(|v| format!("{}={v}", d.name)))
                    .collect();
                if values.is_empty() {
                    format!("no published device has the attribute {key}")
                } else {
                    format!(
                        "devices carry {key} with other values: {}",
                        values.join(", ")
                    )
                }
            }
            SelectorTerm::Driver(_) => {
                let mut drivers: Vec<&str> = devices.iter().map(|d| d.driver.as_str()).collect();
                drivers.sort_unstable();
                drivers.dedup();
                format!("published drivers: {}", list_or_none(&drivers))
            }
            SelectorTerm::Domain(_) => "no published device has an attribute in that domain".into(),
        };
        gaps.push(SelectorGap {
            selector: *i,
            term: t.to_string(),
            reason,
            device: None,
        });
    }
    if gaps.is_empty()
        && !terms.is_empty()
        && !devices
            .iter()
            .any(|d| terms.iter().all(|(_, t)| t.holds(d)))
    {
        let closest = devices
            .iter()
            .min_by_key(|d| terms.iter().filter(|(_, t)| !t.holds(d)).count());
        if let Some(d) = closest
            && let Some((i, t)) = terms.iter().find(|(_, t)| !t.holds(d))
        {
            gaps.push(SelectorGap {
                selector: *i,
                term: t.to_string(),
                reason: "each condition holds for some device, but no single device satisfies all of them"
                    .into(),
                device: Some(format!("{}/{}", d.node, d.name)),
            });
        }
    }
    gaps
}

/// A device that meets some of a DeviceClass's conditions but not all: the scheduler cannot select it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LackingDevice {
    /// `node/device` as [`DraSelection::selected`] names devices.
    pub device: String,
    /// The conditions it does not meet, as [`DraSelection::terms`] writes them.
    pub missing: Vec<String>,
}

/// Which published devices a DeviceClass's CEL selectors select, node by node ([`select_devices`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraSelection {
    /// The conditions understood, in selector order, without repeats (`device.driver == "dra.net"`,
    /// `dra.net/rdma == true`); an existence test of an attribute that is also compared is left out.
    pub terms: Vec<String>,
    /// The attributes the conditions name (`dra.net/rdma`), for a listing of the slices.
    pub attributes: Vec<String>,
    /// The driver the selectors demand (`device.driver == "X"`), if they name one.
    pub driver: Option<String>,
    /// Selectors of which no condition is understood: only the scheduler evaluates them.
    pub unchecked: Vec<String>,
    /// Node → the devices that meet every condition (`name`, or `name (rdma device)` where DRANET's
    /// `dra.net/rdmaDevice` names the verbs device).
    pub selected: BTreeMap<String, Vec<String>>,
    /// Devices of the demanded driver that meet some attribute condition but not all (seed 002's device
    /// whose node DRANET could not tell is eRDMA): invisible to the scheduler.
    pub lacking: Vec<LackingDevice>,
}

impl DraSelection {
    /// `node (n: devices)` for each node with at least `count` selected devices, and `node has n of count`
    /// for each node with fewer.
    pub fn nodes_with(&self, count: usize) -> (Vec<String>, Vec<String>) {
        let mut able = Vec::new();
        let mut short = Vec::new();
        for (node, devs) in &self.selected {
            if devs.len() >= count {
                able.push(format!("{node} ({}: {})", devs.len(), devs.join(", ")));
            } else {
                short.push(format!("{node} has {} of {count}", devs.len()));
            }
        }
        (able, short)
    }
}

/// The understood terms of `selectors`, without repeats and without an attribute's existence test when
/// the same attribute is also compared; with the selectors that yield no term.
fn selection_terms(selectors: &[String]) -> (Vec<SelectorTerm>, Vec<String>) {
    let mut terms: Vec<SelectorTerm> = Vec::new();
    let mut unchecked = Vec::new();
    for s in selectors {
        let parsed = parse_cel_selector(s);
        if parsed.is_empty() {
            unchecked.push(s.clone());
        }
        for t in parsed {
            if !terms.contains(&t) {
                terms.push(t);
            }
        }
    }
    let compared: Vec<String> = terms
        .iter()
        .filter_map(|t| match t {
            SelectorTerm::Attribute {
                key,
                value: Some(_),
            } => Some(key.clone()),
            _ => None,
        })
        .collect();
    terms.retain(
        |t| !matches!(t, SelectorTerm::Attribute { key, value: None } if compared.contains(key)),
    );
    (terms, unchecked)
}

/// The devices of `devices` that a DeviceClass with these CEL selectors selects, per node, and those
/// that meet only part of them. Only the forms of [`parse_cel_selector`] are judged; a selector of
/// another shape is returned in [`DraSelection::unchecked`].
pub fn select_devices(selectors: &[String], devices: &[DraDevice]) -> DraSelection {
    let (terms, unchecked) = selection_terms(selectors);
    let driver = terms.iter().find_map(|t| match t {
        SelectorTerm::Driver(d) => Some(d.clone()),
        _ => None,
    });
    let mut attributes: Vec<String> = Vec::new();
    for t in &terms {
        if let SelectorTerm::Attribute { key, .. } = t
            && !attributes.contains(key)
        {
            attributes.push(key.clone());
        }
    }
    let mut selected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut lacking = Vec::new();
    for d in devices {
        let shown = match d.attributes.get("dra.net/rdmaDevice") {
            Some(rd) if *rd != d.name => format!("{} ({rd})", d.name),
            _ => d.name.clone(),
        };
        let missing: Vec<&SelectorTerm> = terms.iter().filter(|t| !t.holds(d)).collect();
        if missing.is_empty() {
            if !terms.is_empty() {
                selected.entry(d.node.clone()).or_default().push(shown);
            }
            continue;
        }
        let other_driver = missing.iter().any(|t| matches!(t, SelectorTerm::Driver(_)));
        let some_attribute = terms
            .iter()
            .any(|t| matches!(t, SelectorTerm::Attribute { .. }) && t.holds(d));
        if !other_driver && some_attribute {
            lacking.push(LackingDevice {
                device: format!("{}/{shown}", d.node),
                missing: missing.iter().map(|t| t.to_string()).collect(),
            });
        }
    }
    DraSelection {
        terms: terms.iter().map(ToString::to_string).collect(),
        attributes,
        driver,
        unchecked,
        selected,
        lacking,
    }
}

fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn err(message: impl Into<String>) -> ParseError {
    ParseError::new("resourceslices", None, message)
}

/// Devices from `kubectl get resourceslices -o json` (a List, or one ResourceSlice). Reads
/// `resource.k8s.io/v1` (`spec.devices[].attributes`) and v1beta1 (`spec.devices[].basic`);
/// unqualified attribute names belong to the driver's domain.
pub fn parse_resource_slices(json: &str) -> Result<Vec<DraDevice>, ParseError> {
    let v: Value = serde_json::from_str(json).map_err(|e| {
        err(format!(
            "not JSON ({e}); pass `kubectl get resourceslices -o json`"
        ))
    })?;
    let slices: Vec<&Value> = match v.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None if v.get("kind").and_then(Value::as_str) == Some("ResourceSlice") => vec![&v],
        None => return Err(err("neither a List with `items` nor a ResourceSlice")),
    };
    let mut out = Vec::new();
    for s in slices {
        let spec = s
            .get("spec")
            .ok_or_else(|| err("a ResourceSlice without `spec`"))?;
        let driver = spec
            .get("driver")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let node = spec
            .get("nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(devices) = spec.get("devices").and_then(Value::as_array) else {
            continue;
        };
        for d in devices {
            let attrs = d
                .get("attributes")
                .or_else(|| d.get("basic").and_then(|b| b.get("attributes")))
                .and_then(Value::as_object);
            let mut attributes = BTreeMap::new();
            for (k, val) in attrs.into_iter().flatten() {
                let key = if k.contains('/') {
                    k.clone()
                } else {
                    format!("{driver}/{k}")
                };
                let text = ["bool", "string", "int", "version"]
                    .iter()
                    .find_map(|t| val.get(*t))
                    .map(|x| match x {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                if let Some(t) = text {
                    attributes.insert(key, t);
                }
            }
            out.push(DraDevice {
                node: node.to_string(),
                driver: driver.to_string(),
                name: d
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                attributes,
            });
        }
    }
    Ok(out)
}

/// A DeviceClass from `kubectl get deviceclass NAME -o json` (`resource.k8s.io/v1` or
/// `v1beta1`): its name and the CEL expressions of `spec.selectors[].cel.expression`.
pub fn parse_device_class(json: &str) -> Result<(String, Vec<String>), ParseError> {
    let class_err = |m: String| ParseError::new("deviceclass", None, m);
    let v: Value = serde_json::from_str(json).map_err(|e| {
        class_err(format!(
            "not JSON ({e}); pass `kubectl get deviceclass NAME -o json`"
        ))
    })?;
    if v.get("kind").and_then(Value::as_str) != Some("DeviceClass") {
        return Err(class_err("not a DeviceClass (`kind` differs)".into()));
    }
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let selectors = v
        .pointer("/spec/selectors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.pointer("/cel/expression").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    Ok((name, selectors))
}

/// The preflight checks of one DeviceClass against the devices the ResourceSlices publish: `ok`
/// with the devices that satisfy every selector, else one `fail` per gap that names the
/// attribute (or driver) no device has, so a claim that would stay pending says why before it
/// is created.
pub fn device_class_checks(class: &str, selectors: &[String], devices: &[DraDevice]) -> Vec<Check> {
    let subject = format!("DeviceClass {class}");
    let gaps = dra_selector_gaps(selectors, devices);
    if gaps.is_empty() {
        let terms: Vec<SelectorTerm> = selectors
            .iter()
            .flat_map(|s| parse_cel_selector(s))
            .collect();
        let matching: Vec<String> = devices
            .iter()
            .filter(|d| terms.iter().all(|t| t.holds(d)))
            .map(|d| format!("{}/{}", d.node, d.name))
            .collect();
        let summary = if matching.is_empty() {
            "no published device, and the selectors say nothing this check can evaluate".to_string()
        } else {
            format!(
                "{} device(s) satisfy every selector: {}",
                matching.len(),
                matching.join(", ")
            )
        };
        let verdict = if matching.is_empty() {
            Verdict::Warn
        } else {
            Verdict::Ok
        };
        return vec![Check::new("dra-device-class", subject, verdict, summary)];
    }
    gaps.into_iter()
        .map(|g| {
            Check::new(
                "dra-device-class",
                subject.clone(),
                Verdict::Fail,
                format!(
                    "selector {} cannot be satisfied: {} ({}{})",
                    g.selector + 1,
                    g.term,
                    g.reason,
                    g.device
                        .map(|d| format!("; closest device {d}"))
                        .unwrap_or_default()
                ),
            )
            .with_fix(
                "A claim for this class stays pending until a device publishes what the selector \
                 asks for. Check that the DRA driver (DRANET: its pod on each node) runs where the \
                 devices are, compare `kubectl get resourceslices -o yaml` with the selector, and \
                 fix the DeviceClass or the node (a driver that did not recognise the instance \
                 publishes no vendor attribute).",
            )
        })
        .collect()
}
