//! `kube::` reads: logs, list (any kind; a Secret's values never reach the script), pods by selector,
//! nodes with their capacity, one field of an object.

use std::sync::Arc;

use rhai::{Array, Dynamic, Map, Module};

use super::super::super::convert::{
    check_keys, opt_int, opt_namespace, opt_str, opt_timeout, str_array, to_dyn,
};
use super::super::super::{Ctx, runtime_error};
use super::super::{RResult, exec_err};
use crate::exec::{FieldSpec, ListSpec, LogSpec, api_version_for_kind};

/// `logs`, `list`, `pods`, `nodes`, `get_field`.
pub(super) fn register(m: &mut Module, ctx: &Arc<Ctx>) {
    // logs(pod[, opts]) -> string
    let c = ctx.clone();
    let logs = move |pod: &str, opts: Map| -> RResult<String> {
        check_keys(
            "kube::logs",
            &opts,
            &["container", "tail", "timeout", "namespace", "save_as"],
        )?;
        let spec = LogSpec {
            pod: pod.to_owned(),
            container: opt_str(&opts, "container")?,
            tail: opt_int(&opts, "tail")?,
            namespace: opt_namespace(&opts)?,
            timeout: opt_timeout(&opts, 60)?,
            capture_var: opt_str(&opts, "save_as")?,
        };
        Ok(c.redactor.redact(&c.exec.logs(&spec).map_err(exec_err)?))
    };
    regp_opts!(m, "logs",
        "logs(pod[, #{container, tail, timeout, namespace, save_as}]) -> text: a container's log, \
        redacted.",
        logs, pod: &str);

    // list(kind[, opts]) -> array of objects; pods(selector[, opts]) -> array of names.
    let c = ctx.clone();
    let list = move |kind: &str, opts: Map| -> RResult<Array> {
        check_keys(
            "kube::list",
            &opts,
            &[
                "selector",
                "namespace",
                "save_as",
                "expect",
                "timeout",
                "api_version",
                "columns",
            ],
        )?;
        let api_version = match opt_str(&opts, "api_version")? {
            Some(v) => v,
            None => api_version_for_kind(kind)
                .ok_or_else(|| runtime_error(format!("kube::list: unknown kind {kind:?}; pass #{{api_version: \"group/version\"}}")))?
                .to_owned(),
        };
        let spec = ListSpec {
            api_version,
            kind: kind.to_owned(),
            selector: opt_str(&opts, "selector")?,
            namespace: opt_namespace(&opts)?,
            capture_var: opt_str(&opts, "save_as")?,
            expect: opt_int(&opts, "expect")?.unwrap_or(1).max(1).unsigned_abs() as usize,
            timeout: opt_timeout(&opts, 60)?,
            columns: match opts.get("columns") {
                Some(d) => {
                    let a = d.clone().try_cast::<Array>().ok_or_else(|| runtime_error("kube::list: option `columns` must be an array of \"HEADER:.json.path\""))?;
                    str_array(&a, "kube::list columns")?
                        .into_iter()
                        .map(|c| match c.split_once(':') {
                            Some((h, p)) => Ok((h.to_owned(), p.to_owned())),
                            None => Err(runtime_error(format!(
                                "kube::list: column {c:?} must look like HEADER:.json.path"
                            ))),
                        })
                        .collect::<RResult<Vec<_>>>()?
                }
                None => Vec::new(),
            },
        };
        let mut items = c.exec.list(&spec).map_err(exec_err)?;
        if spec.kind == "Secret" {
            for item in &mut items {
                c.remember_secret(item);
                super::super::super::run::redact_secret(item);
            }
        }
        if !c.redactor.is_empty() {
            let text = serde_json::to_string(&items).map_err(|e| runtime_error(e.to_string()))?;
            items = serde_json::from_str(&c.redactor.redact(&text))
                .map_err(|e| runtime_error(e.to_string()))?;
        }
        items.iter().map(to_dyn).collect()
    };
    regp_opts!(m, "list",
        "list(kind[, #{selector, namespace, save_as, expect, timeout, api_version, columns}]) -> \
        [object, ...]: the objects of a kind (`api_version` for a kind the kinds table does not \
        know; `columns` as \"HEADER:.json.path\" for plan.sh's table; `expect` placeholders in a dry \
        run). A Secret's values come back as `<redacted>` (and are redacted from then on).",
        list.clone(), kind: &str);
    let list4 = list.clone();
    let pods = move |selector: &str, mut opts: Map| -> RResult<Array> {
        opts.insert("selector".into(), selector.into());
        let items = list4("Pod", opts)?;
        Ok(items
            .into_iter()
            .filter_map(|d| d.try_cast::<Map>())
            .filter_map(|o| o.get("metadata").cloned().and_then(|m| m.try_cast::<Map>()))
            .filter_map(|meta| meta.get("name").cloned())
            .collect())
    };
    regp_opts!(m, "pods",
        "pods(selector[, #{namespace, save_as, expect, timeout}]) -> [name, ...]: the names of the \
        pods a label selector matches.",
        pods, selector: &str);

    // nodes() -> [#{name, labels, capacity, allocatable, dry_run}]
    let list5 = list;
    let nodes = move |opts: Map| -> RResult<Array> {
        check_keys("kube::nodes", &opts, &["resources", "columns", "timeout"])?;
        let mut lopts = Map::new();
        if let Some(t) = opts.get("timeout") {
            lopts.insert("timeout".into(), t.clone());
        }
        if let Some(d) = opts.get("resources") {
            let a = d.clone().try_cast::<Array>().ok_or_else(|| {
                runtime_error("kube::nodes: option `resources` must be an array of resource names")
            })?;
            let mut cols: Array = vec![Dynamic::from("NAME:.metadata.name".to_owned())];
            for r in str_array(&a, "kube::nodes resources")? {
                // The column header plan.sh reads it by: `aliyun/erdma` -> `ERDMA`.
                let header = crate::plan::shell_var("", r.rsplit('/').next().unwrap_or(&r));
                cols.push(Dynamic::from(format!(
                    "{header}:.status.capacity.{}",
                    r.replace('.', "\\.")
                )));
            }
            lopts.insert("columns".into(), cols.into());
        }
        // Extra plan.sh columns ("HEADER:.json.path"), e.g. a label or the kubelet version.
        if let Some(d) = opts.get("columns") {
            let extra = d.clone().try_cast::<Array>().ok_or_else(|| {
                runtime_error(
                    "kube::nodes: option `columns` must be an array of \"HEADER:.json.path\"",
                )
            })?;
            let mut cols = lopts
                .get("columns")
                .cloned()
                .and_then(|c| c.try_cast::<Array>())
                .unwrap_or_else(|| vec![Dynamic::from("NAME:.metadata.name".to_owned())]);
            cols.extend(extra);
            lopts.insert("columns".into(), cols.into());
        }
        let items = list5("Node", lopts)?;
        let mut out = Array::new();
        for d in items {
            let o = d.try_cast::<Map>().unwrap_or_default();
            let meta = o
                .get("metadata")
                .cloned()
                .and_then(|m| m.try_cast::<Map>())
                .unwrap_or_default();
            let status = o
                .get("status")
                .cloned()
                .and_then(|m| m.try_cast::<Map>())
                .unwrap_or_default();
            let mut n = Map::new();
            n.insert(
                "name".into(),
                meta.get("name").cloned().unwrap_or(Dynamic::UNIT),
            );
            n.insert(
                "labels".into(),
                meta.get("labels")
                    .cloned()
                    .unwrap_or_else(|| Map::new().into()),
            );
            n.insert(
                "capacity".into(),
                status
                    .get("capacity")
                    .cloned()
                    .unwrap_or_else(|| Map::new().into()),
            );
            n.insert(
                "allocatable".into(),
                status
                    .get("allocatable")
                    .cloned()
                    .unwrap_or_else(|| Map::new().into()),
            );
            // `v1.24.15-vke.12`: vendors gate RDMA support on the kubelet build.
            n.insert(
                "kubelet_version".into(),
                status
                    .get("nodeInfo")
                    .cloned()
                    .and_then(|i| i.try_cast::<Map>())
                    .and_then(|i| i.get("kubeletVersion").cloned())
                    .unwrap_or(Dynamic::UNIT),
            );
            n.insert(
                "dry_run".into(),
                o.get("dry_run").cloned().unwrap_or(false.into()),
            );
            out.push(n.into());
        }
        Ok(out)
    };
    regp_opts!(
        m,
        "nodes",
        "nodes([#{resources, columns, timeout}]) -> [#{name, labels, capacity, allocatable, \
        kubelet_version, dry_run}]: the nodes; `resources` adds plan.sh columns for those \
        capacities, `columns` extra \"HEADER:.json.path\" ones.",
        nodes,
    );

    // get_field(kind, name, ".status.podIP"[, #{var}]) -> string
    let c = ctx.clone();
    let get_field = move |kind: &str, name: &str, path: &str, opts: Map| -> RResult<String> {
        check_keys(
            "kube::get_field",
            &opts,
            &["save_as", "namespace", "timeout"],
        )?;
        if kind == "Secret"
            && !matches!(
                path.trim_start_matches('.').split('.').next(),
                Some("metadata" | "type")
            )
        {
            return Err(runtime_error(format!(
                "kube::get_field: secret/{name} {path}: scripts read a Secret's metadata and type only, never its values (use kube::merge_registry_secrets to combine registry credentials)"
            )));
        }
        let spec = FieldSpec {
            kind: kind.to_owned(),
            name: name.to_owned(),
            path: path.to_owned(),
            namespace: opt_namespace(&opts)?,
            capture_var: opt_str(&opts, "save_as")?,
            timeout: opt_timeout(&opts, 60)?,
        };
        Ok(c.redactor
            .redact(&c.exec.get_field(&spec).map_err(exec_err)?))
    };
    regp_opts!(m, "get_field",
        "get_field(kind, name, \".status.podIP\"[, #{save_as, namespace, timeout}]) -> text: one field \
        of one object (strings bare, other values as JSON). On a Secret only metadata and type are \
        readable, never its values.",
        get_field, kind: &str, name: &str, path: &str);
}
