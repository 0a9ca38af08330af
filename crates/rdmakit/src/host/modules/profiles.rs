//! `profiles::` — vendor profiles: load one (a user file under a vendor dir, else a built-in), the NCCL
//! log marker of its transport, the built-in names; and how the other modules take a profile argument.

use std::sync::Arc;

use k8s_render::Profile;
use rhai::{Array, Dynamic, Module};

use super::super::{Ctx, runtime_error};
use super::{RResult, ser};

/// Loads a profile: a user file under a vendor dir or a path, else a built-in.
pub(super) fn load_profile(ctx: &Ctx, name: &str) -> RResult<Profile> {
    for dir in &ctx.config.vendor_dirs {
        let p = dir.join(format!("{name}.rhai"));
        if p.is_file() {
            return crate::profiles::load_file(&p).map_err(|e| runtime_error(e.to_string()));
        }
    }
    crate::profiles::load(name).map_err(|e| runtime_error(e.to_string()))
}

/// A profile given as a name/path (loaded) or as the map `profiles::load` returned.
pub(super) fn profile_arg(ctx: &Ctx, d: &Dynamic, what: &str) -> RResult<Profile> {
    if d.is_string() {
        return load_profile(ctx, &d.to_string());
    }
    rhai::serde::from_dynamic::<Profile>(d).map_err(|e| {
        runtime_error(format!(
            "{what}: the profile argument must be a profile name or what profiles::load returned ({e})"
        ))
    })
}

/// The `profiles::` module.
pub(super) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "load",
        "load(name or path) -> map: a vendor profile (a user file under a vendor dir, else a \
        built-in).",
        move |name: &str| -> RResult<Dynamic> {
        ser(&load_profile(&c, name)?)
    }, name: &str);
    // A function, not a field of `load`'s map: that map goes back into bench::/probe::, which refuse
    // unknown fields.
    let c = ctx.clone();
    regp!(&mut m, "nccl_log_marker",
        "nccl_log_marker(profile) -> text: what NCCL's INFO log prints when the profile's transport \
        carries the traffic (`NET/IB : Using`, a plugin's `NET/OFI`).",
        move |name: &str| -> RResult<String> {
        Ok(load_profile(&c, name)?.nccl_log_marker())
    }, name: &str);
    let c = ctx.clone();
    regp!(&mut m, "device_prefix",
        "device_prefix(profile) -> text: the literal start of the profile's device-name glob, what a \
        device listing shows for each of its devices (`erdma_*` -> `erdma_`, `mlx5_*` -> `mlx5_`); \
        k8s-render's DevicePattern, the one reading of the glob.",
        move |profile: Dynamic| -> RResult<String> {
        let p = profile_arg(&c, &profile, "profiles::device_prefix")?;
        Ok(p.devices.name_pattern.prefix().to_owned())
    }, profile: Dynamic);
    reg!(
        &mut m,
        "names",
        "The built-in profile names.",
        || -> Array {
            crate::profiles::builtin_names()
                .iter()
                .map(|n| Dynamic::from((*n).to_owned()))
                .collect()
        },
    );
    m
}
