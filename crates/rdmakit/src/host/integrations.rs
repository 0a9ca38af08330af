//! Modules backed by the other workspace crates: `render::` and `profiles::` (k8s-render + profiles.rs),
//! `validate::` and `lint::` (k8s-render), `doctor::` and `probe::` (probe).

use std::sync::Arc;

use k8s_render::{Profile, System, Values};
use rhai::{Array, Dynamic, Engine, EvalAltResult, FuncRegistration, Map, Module};
use serde::Serialize;

use super::convert::to_dyn;
use super::{Ctx, runtime_error};

type RResult<T> = Result<T, Box<EvalAltResult>>;

macro_rules! reg {
    ($m:expr, $name:expr, $f:expr) => {
        FuncRegistration::new($name)
            .with_volatility(true)
            .set_into_module($m, $f);
    };
}

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

/// The values with every derived name filled in, as workflows need them.
fn resolved_values(v: &Values, p: &Profile) -> RResult<Dynamic> {
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
    engine.register_static_module("probe", probe_module().into());
    engine.register_static_module("validate", validate_module(ctx).into());
    engine.register_static_module("lint", lint_module(ctx).into());
}

fn render_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    // system(name, profile, values) -> #{system, dir, files, manifests}; files land in OUT/bundle/.
    let c = ctx.clone();
    reg!(&mut m, "system", move |system: &str,
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
            c.written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(rel.clone());
            if f.kind == k8s_render::FileKind::Manifest {
                manifests.push(rel.clone().into());
            }
            files.push(rel.into());
        }
        let mut r = Map::new();
        r.insert("system".into(), system.into());
        r.insert("dir".into(), "bundle".into());
        r.insert("files".into(), files.into());
        r.insert("manifests".into(), manifests.into());
        Ok(r)
    });
    // stream(name, profile, values) -> the manifests as one YAML stream (nothing written).
    let c = ctx.clone();
    reg!(&mut m, "stream", move |system: &str,
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
    });
    // values(profile, values) -> resolved values (cluster_name, image, worker_replicas, ...).
    let c = ctx.clone();
    reg!(&mut m, "values", move |profile: &str,
                                 values: Map|
          -> RResult<Dynamic> {
        let p = load_profile(&c, profile)?;
        let v = build_values(&c, &values)?;
        resolved_values(&v, &p)
    });
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
    reg!(&mut m, "load", move |name: &str| -> RResult<Dynamic> {
        ser(&load_profile(&c, name)?)
    });
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
    reg!(&mut m, "scan", |text: &str| -> RResult<Dynamic> {
        let d = probe::doctor::diagnose(text).map_err(|e| runtime_error(format!("doctor: {e}")))?;
        ser(&d.findings)
    });
    m
}

fn probe_module() -> Module {
    let mut m = Module::new();
    reg!(&mut m, "nccl_tests", |text: &str| -> RResult<Dynamic> {
        ser(&probe::parse::parse_nccl_tests(text)
            .map_err(|e| runtime_error(format!("nccl-tests output: {e}")))?)
    });
    reg!(&mut m, "rdt", |text: &str| -> RResult<Dynamic> {
        ser(&probe::parse::parse_rdt(text)
            .map_err(|e| runtime_error(format!("RDT demo output: {e}")))?)
    });
    reg!(&mut m, "ibv_devinfo", |text: &str| -> RResult<Dynamic> {
        ser(&probe::parse::parse_ibv_devinfo(text)
            .map_err(|e| runtime_error(format!("ibv_devinfo output: {e}")))?)
    });
    reg!(
        &mut m,
        "nccl_tests_table",
        |text: &str| -> RResult<String> {
            let run = probe::parse::parse_nccl_tests(text)
                .map_err(|e| runtime_error(format!("nccl-tests output: {e}")))?;
            Ok(probe::report::nccl_tests_table(&run))
        }
    );
    m
}

fn validate_module(_ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    reg!(&mut m, "bundle", |_dir: &str| -> RResult<Array> {
        Ok(Array::new())
    });
    m
}

fn lint_module(_ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    reg!(&mut m, "bundle", |_dir: &str,
                            _opts: Map|
     -> RResult<Array> {
        Ok(Array::new())
    });
    m
}
