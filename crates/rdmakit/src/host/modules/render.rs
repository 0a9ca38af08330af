//! `render::` — render a system's bundle for a profile (k8s-render) into the out dir, or as one YAML
//! stream, and the resolved values workflows name things by; `--set` keys that are render values apply.

use std::sync::Arc;

use k8s_render::{Profile, System, Values};
use rhai::{Array, Dynamic, Map, Module};

use super::super::convert::to_dyn;
use super::super::{Ctx, runtime_error};
use super::RResult;
use super::profiles::load_profile;

/// True when `key` is a render value (so `--set key=...` goes to [`Values`]).
pub fn is_value_key(key: &str) -> bool {
    Values::key(key).is_some()
}

fn dyn_to_setting(d: &Dynamic) -> String {
    if d.is_unit() {
        String::new()
    } else {
        d.to_string()
    }
}

/// Values from the script's map, then every `--set` that names a render value.
fn build_values(ctx: &Ctx, script: &Map) -> RResult<Values> {
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

/// What `render::system`/`stream` render: the system by name, the profile, the values with `--set`.
fn render_inputs(
    ctx: &Ctx,
    system: &str,
    profile: &str,
    values: &Map,
) -> RResult<(System, Profile, Values)> {
    let sys: System = system
        .parse()
        .map_err(|e: k8s_render::UnknownSystem| runtime_error(e.to_string()))?;
    Ok((sys, load_profile(ctx, profile)?, build_values(ctx, values)?))
}

/// `--bundle`: the files `rendered` names, with the contents the user gave them (every one must be there).
fn edited(
    user: &crate::manifests::UserBundle,
    rendered: &k8s_render::Bundle,
    what: &str,
) -> RResult<k8s_render::Bundle> {
    let mut out = k8s_render::Bundle::new();
    for f in rendered.files() {
        let text = user.file(&f.path, what).map_err(runtime_error)?;
        out.add_text(&f.path, f.kind, text.to_owned())
            .map_err(|e| runtime_error(format!("--bundle {}: {e}", user.dir.display())))?;
    }
    Ok(out)
}

/// The `render::` module.
pub(super) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "system",
        "system(system, profile, values) -> #{system, dir, files, manifests}: renders a system \
        (image, buildkit, raycluster, rdt-demo, nccl-check, dra, mpijob, rdma-test-pod) for a \
        profile into `OUT/bundle/`; `--set` keys that are render values apply on top of `values`. \
        With `rdmakit run --bundle DIR` the same files are taken from DIR (the user's edits) instead.",
        move |system: &str,
                                 profile: &str,
                                 values: Map|
          -> RResult<Map> {
        let (sys, p, v) = render_inputs(&c, system, profile, &values)?;
        let bundle = k8s_render::render(sys, &p, &v)
            .map_err(|e| runtime_error(format!("render {system} for {profile}: {e}")))?;
        let dir = c.config.out_dir.join("bundle");
        let bundle = match &c.config.bundle {
            Some(user) => edited(user, &bundle, &format!("{system} for {profile}"))?,
            None => bundle,
        };
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
    let c = ctx.clone();
    regp!(&mut m, "stream",
        "stream(system, profile, values) -> text: the system's manifests as one YAML stream (nothing \
        written).",
        move |system: &str,
                                 profile: &str,
                                 values: Map|
          -> RResult<String> {
        let (sys, p, v) = render_inputs(&c, system, profile, &values)?;
        Ok(k8s_render::render(sys, &p, &v)
            .map_err(|e| runtime_error(e.to_string()))?
            .to_stream())
    }, system: &str, profile: &str, values: Map);
    let c = ctx.clone();
    regp!(&mut m, "values",
        "values(profile, values) -> map: the resolved values: the profile's value defaults (such as \
        `gpus_per_worker: 2` on `aliyun-erdma-dra`) under the script's values and `--set`, and the \
        derived names `cluster_name`, `worker_group`, `mpijob_name`, `image`, `nccl_version`, \
        `slots_per_worker`.",
        move |profile: &str,
                                 values: Map|
          -> RResult<Dynamic> {
        let p = load_profile(&c, profile)?;
        let v = build_values(&c, &values)?;
        resolved_values(&v, &p)
    }, profile: &str, values: Map);
    reg!(
        &mut m,
        "systems",
        "The names of the systems `render::system` renders.",
        || -> Array {
            System::all()
                .iter()
                .map(|s| Dynamic::from(s.name().to_owned()))
                .collect()
        },
    );
    m
}
