//! Modules backed by the other workspace crates: `render::` and `profiles::` (k8s-render + profiles.rs),
//! `validate::` and `lint::` (k8s-render), `doctor::` and `probe::` (probe).

use std::sync::Arc;

use k8s_render::{Profile, System, Values};
use rhai::{Array, Dynamic, Engine, EvalAltResult, Map, Module};
use serde::Serialize;

use super::convert::to_dyn;
use super::{Ctx, runtime_error};

type RResult<T> = Result<T, Box<EvalAltResult>>;

fn ser<T: Serialize>(v: &T) -> RResult<Dynamic> {
    let json = serde_json::to_value(v).map_err(|e| runtime_error(e.to_string()))?;
    to_dyn(&json)
}

/// Loads a profile: a user file under a vendor dir or a path, else a built-in.
pub(crate) fn load_profile(ctx: &Ctx, name: &str) -> RResult<Profile> {
    for dir in &ctx.config.vendor_dirs {
        let p = dir.join(format!("{name}.rhai"));
        if p.is_file() {
            return crate::profiles::load_file(&p).map_err(|e| runtime_error(e.to_string()));
        }
    }
    crate::profiles::load(name).map_err(|e| runtime_error(e.to_string()))
}

/// True when `key` is a render value (so `--set key=...` goes to [`Values`]).
pub fn is_value_key(key: &str) -> bool {
    key.starts_with("node_selector.") || Values::KEYS.iter().any(|(k, _, _)| *k == key)
}

fn dyn_to_setting(d: &Dynamic) -> String {
    if d.is_unit() {
        String::new()
    } else {
        d.to_string()
    }
}

/// Values from the script's map, then every `--set` that names a render value.
pub(crate) fn build_values(ctx: &Ctx, script: &Map) -> RResult<Values> {
    let mut v = Values::default();
    for (k, d) in script {
        v.set(k.as_str(), &dyn_to_setting(d))
            .map_err(|e| runtime_error(format!("render values: {e}")))?;
    }
    for (k, val) in &ctx.config.params {
        if is_value_key(k) {
            v.set(k, val)
                .map_err(|e| runtime_error(format!("--set {e}")))?;
        }
    }
    v.check()
        .map_err(|e| runtime_error(format!("render values: {e}")))?;
    Ok(v)
}

/// The values with every derived name filled in, as workflows need them. The profile's value defaults
/// (`gpus_per_worker: 2` on aliyun-erdma-dra) apply to every key the script and `--set` leave alone, as
/// rendering applies them.
fn resolved_values(v: &Values, p: &Profile) -> RResult<Dynamic> {
    let v = &v
        .with_profile_defaults(p)
        .map_err(|e| runtime_error(format!("profile {} values: {e}", p.name)))?;
    let mut json = serde_json::to_value(v).map_err(|e| runtime_error(e.to_string()))?;
    if let Some(o) = json.as_object_mut() {
        o.insert("cluster_name".into(), v.cluster_name_for(p).into());
        o.insert("worker_group".into(), v.worker_group_for(p).into());
        o.insert("mpijob_name".into(), v.mpijob_name_for(p).into());
        o.insert("image".into(), v.image_for(p).into());
        o.insert("nccl_version".into(), v.nccl_version_for(p).into());
        o.insert("slots_per_worker".into(), v.slots_for().into());
    }
    to_dyn(&json)
}

pub(crate) fn register(engine: &mut Engine, ctx: &Arc<Ctx>) {
    engine.register_static_module("render", render_module(ctx).into());
    engine.register_static_module("profiles", profiles_module(ctx).into());
    engine.register_static_module("doctor", doctor_module().into());
    engine.register_static_module("probe", probe_module(ctx).into());
    engine.register_static_module("bench", super::analysis::bench_module(ctx).into());
    engine.register_static_module("validate", validate_module(ctx).into());
    engine.register_static_module("lint", lint_module(ctx).into());
}

fn render_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    // system(name, profile, values) -> #{system, dir, files, manifests}; files land in OUT/bundle/.
    let c = ctx.clone();
    regp!(&mut m, "system", move |system: &str,
                                 profile: &str,
                                 values: Map|
          -> RResult<Map> {
        let sys: System = system
            .parse()
            .map_err(|e: k8s_render::UnknownSystem| runtime_error(e.to_string()))?;
        let p = load_profile(&c, profile)?;
        let v = build_values(&c, &values)?;
        let bundle = k8s_render::render(sys, &p, &v)
            .map_err(|e| runtime_error(format!("render {system} for {profile}: {e}")))?;
        let dir = c.config.out_dir.join("bundle");
        bundle
            .write_to(&dir)
            .map_err(|e| runtime_error(format!("write {}: {e}", dir.display())))?;
        let mut files = Array::new();
        let mut manifests = Array::new();
        for f in bundle.files() {
            let rel = format!("bundle/{}", f.path);
            c.wrote(&rel)?;
            if f.kind == k8s_render::FileKind::Manifest {
                manifests.push(rel.clone().into());
            }
            files.push(rel.into());
        }
        let shown: Vec<String> = files.iter().map(|f| f.to_string()).collect();
        c.exec.note(&format!("rendered {system} for profile {profile}: {}", shown.join(", ")));
        let mut r = Map::new();
        r.insert("system".into(), system.into());
        r.insert("dir".into(), "bundle".into());
        r.insert("files".into(), files.into());
        r.insert("manifests".into(), manifests.into());
        Ok(r)
    }, system: &str, profile: &str, values: Map);
    // stream(name, profile, values) -> the manifests as one YAML stream (nothing written).
    let c = ctx.clone();
    regp!(&mut m, "stream", move |system: &str,
                                 profile: &str,
                                 values: Map|
          -> RResult<String> {
        let sys: System = system
            .parse()
            .map_err(|e: k8s_render::UnknownSystem| runtime_error(e.to_string()))?;
        let p = load_profile(&c, profile)?;
        let v = build_values(&c, &values)?;
        Ok(k8s_render::render(sys, &p, &v)
            .map_err(|e| runtime_error(e.to_string()))?
            .to_stream())
    }, system: &str, profile: &str, values: Map);
    // values(profile, values) -> resolved values (cluster_name, image, worker_replicas, ...).
    let c = ctx.clone();
    regp!(&mut m, "values", move |profile: &str,
                                 values: Map|
          -> RResult<Dynamic> {
        let p = load_profile(&c, profile)?;
        let v = build_values(&c, &values)?;
        resolved_values(&v, &p)
    }, profile: &str, values: Map);
    reg!(&mut m, "systems", || -> Array {
        System::all()
            .iter()
            .map(|s| Dynamic::from(s.name().to_owned()))
            .collect()
    });
    m
}

fn profiles_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "load", move |name: &str| -> RResult<Dynamic> {
        ser(&load_profile(&c, name)?)
    }, name: &str);
    // nccl_log_marker(profile): what NCCL's INFO log prints when the profile's transport carries the
    // traffic (`NET/IB : Using`, a plugin's `NET/OFI`). A function, not a field of `load`'s map: that map goes
    // back into bench::/probe::, which refuse unknown fields.
    let c = ctx.clone();
    regp!(&mut m, "nccl_log_marker", move |name: &str| -> RResult<String> {
        Ok(load_profile(&c, name)?.nccl_log_marker())
    }, name: &str);
    reg!(&mut m, "names", || -> Array {
        crate::profiles::builtin_names()
            .iter()
            .map(|n| Dynamic::from((*n).to_owned()))
            .collect()
    });
    m
}

fn doctor_module() -> Module {
    let mut m = Module::new();
    // scan(text) -> [#{id, severity, line, evidence, cause, fix}]
    regp!(&mut m, "scan", |text: &str| -> RResult<Dynamic> {
        let d = probe::doctor::diagnose(text).map_err(|e| runtime_error(format!("doctor: {e}")))?;
        ser(&d.findings)
    }, text: &str);
    m
}

fn probe_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    super::analysis::add_probe_fns(&mut m, ctx);
    regp!(&mut m, "ibv_devinfo", |text: &str| -> RResult<Dynamic> {
        ser(&probe::parse::parse_ibv_devinfo(text)
            .map_err(|e| runtime_error(format!("ibv_devinfo output: {e}")))?)
    }, text: &str);
    // dra_selection(slices, selectors, count) -> probe's DraSelection + able/short: which of the listed
    // ResourceSlices' devices (kube::list("ResourceSlice")) the DeviceClass's CEL selectors select, per node.
    regp!(&mut m, "dra_selection", |slices: Array, selectors: Array, count: i64| -> RResult<Dynamic> {
        dra_selection(&slices, &selectors, count)
    }, slices: Array, selectors: Array, count: i64);
    // all_reduce_min_bytes(log, nodes) -> the bytes the nodes' devices must transmit together for the log's
    // all_reduce_perf table (probe: 2(N-1) x the sizes x the timed iterations).
    regp!(&mut m, "all_reduce_min_bytes", |log: &str, nodes: i64| -> RResult<i64> {
        let run = probe::parse::parse_nccl_tests(log)
            .map_err(|e| runtime_error(format!("probe::all_reduce_min_bytes: nccl-tests output: {e}")))?;
        Ok(i64::try_from(run.all_reduce_min_bytes(node_count(nodes))).unwrap_or(i64::MAX))
    }, log: &str, nodes: i64);
    // planned_all_reduce_min_bytes(min_size, max_size, nodes) -> the same for the sizes an MPIJob asks for
    // (`-b 512M -e 8G -f 2`, nccl-tests' default iterations), before there is a log.
    regp!(&mut m, "planned_all_reduce_min_bytes", |min: &str, max: &str, nodes: i64| -> RResult<i64> {
        let size = |s: &str, what: &str| {
            probe::parse::nccl_tests::parse_size(s).ok_or_else(|| {
                runtime_error(format!("probe::planned_all_reduce_min_bytes: {what} {s:?} is not an nccl-tests size (1024, 4K, 512M, 8G)"))
            })
        };
        let b = probe::parse::nccl_tests::planned_all_reduce_min_bytes(
            size(min, "min_size")?,
            size(max, "max_size")?,
            probe::parse::nccl_tests::DEFAULT_ITERS,
            node_count(nodes),
        );
        Ok(i64::try_from(b).unwrap_or(i64::MAX))
    }, min: &str, max: &str, nodes: i64);
    // worker_fit(nodes, #{gpu_resource, gpus, resources, labels}) -> #{fit, unfit}: which of kube::nodes()'s
    // nodes can take a worker asking for that (probe::preflight::worker_fit).
    regp!(&mut m, "worker_fit", |nodes: Array, needs: Map| -> RResult<Dynamic> {
        let what = "probe::worker_fit";
        let needs: probe::preflight::WorkerNeeds = rhai::serde::from_dynamic(&needs.into())
            .map_err(|e| runtime_error(format!("{what}: needs must be #{{gpu_resource, gpus, resources, labels}} ({e})")))?;
        let nodes: Vec<probe::preflight::NodeInfo> = nodes.iter().map(|d| node_info(d, what)).collect::<RResult<_>>()?;
        ser(&probe::preflight::worker_fit(&nodes, &needs))
    }, nodes: Array, needs: Map);
    // vke_kubelet_problem(version) -> why VKE's RDMA device plugin cannot run on that kubelet, or ()
    reg!(
        &mut m,
        "vke_kubelet_problem",
        |version: Dynamic| -> Dynamic {
            let v = if version.is_unit() {
                None
            } else {
                Some(version.to_string())
            };
            probe::preflight::vke_rdma_kubelet_problem(v.as_deref())
                .map_or(Dynamic::UNIT, Dynamic::from)
        }
    );
    m
}

/// A node as kube::nodes() returns it (`#{name, labels, capacity, ...}`), for probe.
fn node_info(d: &Dynamic, what: &str) -> RResult<probe::preflight::NodeInfo> {
    let m = d.read_lock::<Map>().ok_or_else(|| {
        runtime_error(format!(
            "{what}: each node must be a map from kube::nodes()"
        ))
    })?;
    let text_map = |key: &str| -> std::collections::BTreeMap<String, String> {
        m.get(key)
            .and_then(|v| v.read_lock::<Map>().map(|x| x.clone()))
            .map(|x| {
                x.into_iter()
                    .filter(|(_, v)| !v.is_unit())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(probe::preflight::NodeInfo {
        name: m.get("name").map(|n| n.to_string()).unwrap_or_default(),
        capacity: text_map("capacity"),
        allocatable: text_map("allocatable"),
        labels: text_map("labels"),
        ..Default::default()
    })
}

/// A node count from a script: negative is none, beyond u32 is u32::MAX.
fn node_count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// probe::dra_selection's glue: the slices as `kube::list` returned them, back to JSON for probe's parser.
fn dra_selection(slices: &Array, selectors: &Array, count: i64) -> RResult<Dynamic> {
    let what = "probe::dra_selection";
    let items: Vec<serde_json::Value> = slices
        .iter()
        .map(rhai::serde::from_dynamic)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            runtime_error(format!(
                "{what}: slices must be what kube::list(\"ResourceSlice\") returned ({e})"
            ))
        })?;
    let list = serde_json::json!({ "items": items });
    let devices = probe::preflight::parse_resource_slices(&list.to_string())
        .map_err(|e| runtime_error(format!("{what}: {e}")))?;
    let selectors: Vec<String> = selectors
        .iter()
        .map(|d| {
            d.clone().into_string().map_err(|t| {
                runtime_error(format!(
                    "{what}: selectors must be CEL strings (the profile's rdma.selectors), got {t}"
                ))
            })
        })
        .collect::<RResult<_>>()?;
    let sel = probe::preflight::select_devices(&selectors, &devices);
    let (able, short) = sel.nodes_with(usize::try_from(count.max(0)).unwrap_or(usize::MAX));
    let mut v = serde_json::to_value(&sel).map_err(|e| runtime_error(e.to_string()))?;
    v["able"] = able.into();
    v["short"] = short.into();
    to_dyn(&v)
}

/// Every manifest document under `dir` (a file or a bundle directory), with names relative to the out dir.
pub fn read_docs(
    path: &std::path::Path,
    shown: &dyn Fn(&std::path::Path) -> String,
) -> Result<Vec<k8s_render::manifest::Document>, String> {
    let files = crate::manifests::yaml_files(path).map_err(|e| e.to_string())?;
    parse_docs(&files, shown)
}

/// What a workflow's `validate::`/`lint::` read: in the out dir, only the files this run wrote.
fn run_docs(
    ctx: &Ctx,
    path: &std::path::Path,
) -> Result<Vec<k8s_render::manifest::Document>, String> {
    let files = ctx.yaml_files(path).map_err(|e| e.to_string())?;
    parse_docs(&files, &|f| ctx.display_path(f))
}

fn parse_docs(
    files: &[std::path::PathBuf],
    shown: &dyn Fn(&std::path::Path) -> String,
) -> Result<Vec<k8s_render::manifest::Document>, String> {
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        docs.extend(k8s_render::manifest::parse_str(&shown(f), &text).map_err(|e| e.to_string())?);
    }
    Ok(docs)
}

/// Lint options: the profile's device pattern, device-plugin resources, userspace packages, APT
/// source and GID index ([`LintOptions::for_profile`](k8s_render::lint::LintOptions::for_profile)).
pub fn lint_options(
    profile: Option<&Profile>,
    nodes: Option<u32>,
    benchmark: bool,
) -> k8s_render::lint::LintOptions {
    match profile {
        Some(p) => k8s_render::lint::LintOptions::for_profile(p, nodes, benchmark),
        None => k8s_render::lint::LintOptions {
            rdma_nodes: nodes,
            benchmark,
            ..Default::default()
        },
    }
}

fn validate_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    // bundle(dir) -> violations; records "bundle: schema validation" (local files, no cluster involved).
    let c = ctx.clone();
    regp!(&mut m, "bundle", move |dir: &str| -> RResult<Dynamic> {
        let path = c.resolve_path(dir, "validate::bundle")?;
        let docs = run_docs(&c, &path).map_err(runtime_error)?;
        let violations = k8s_render::validate::validate(&docs, &k8s_render::validate::ValidateOptions::default());
        let errors: Vec<String> = violations
            .iter()
            .filter(|v| v.severity == k8s_render::manifest::Severity::Error)
            .map(|v| v.to_string())
            .collect();
        c.exec.note(&format!("validated {dir} against the Kubernetes/CRD schemas: {} error(s)", errors.len()));
        let mut r = c.report();
        if errors.is_empty() {
            r.check("bundle: schema validation (strict)", crate::report::Status::Pass, &format!("{} document(s) valid", docs.len()));
        } else {
            r.check("bundle: schema validation (strict)", crate::report::Status::Fail, &errors.join("; "));
        }
        drop(r);
        ser(&violations)
    }, dir: &str);
    m
}

fn lint_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    // bundle(dir, #{profile, nodes, benchmark}) -> findings; errors fail the report, warnings are noted.
    let c = ctx.clone();
    regp!(&mut m, "bundle", move |dir: &str, opts: Map| -> RResult<Dynamic> {
        super::convert::check_keys("lint::bundle", &opts, &["profile", "nodes", "benchmark"])?;
        let profile = match super::convert::opt_str(&opts, "profile")? {
            Some(p) => Some(load_profile(&c, &p)?),
            None => None,
        };
        let nodes = super::convert::opt_int(&opts, "nodes")?.map(|n| n.clamp(0, i64::from(u32::MAX)) as u32);
        let benchmark = super::convert::opt_bool(&opts, "benchmark")?.unwrap_or(false);
        let path = c.resolve_path(dir, "lint::bundle")?;
        let docs = run_docs(&c, &path).map_err(runtime_error)?;
        let findings = k8s_render::lint::lint(&docs, &lint_options(profile.as_ref(), nodes, benchmark));
        let mut r = c.report();
        let mut errors = 0;
        for f in &findings {
            let status = match f.severity {
                k8s_render::manifest::Severity::Error => {
                    errors += 1;
                    crate::report::Status::Fail
                }
                _ => crate::report::Status::Info,
            };
            r.check(&format!("bundle lint: {} ({})", f.rule, f.severity), status, &f.to_string());
        }
        c.exec.note(&format!("linted {dir} for RDMA pitfalls: {errors} error(s), {} finding(s) in all", findings.len()));
        if errors == 0 {
            r.check("bundle: RDMA lint", crate::report::Status::Pass, &format!("no errors in {} document(s), {} note(s)", docs.len(), findings.len()));
        }
        drop(r);
        ser(&findings)
    }, dir: &str, opts: Map);
    m
}
