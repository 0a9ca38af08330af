//! Renderers: one module per system, all driven by a [`Profile`] and [`Values`].

mod buildkit;
mod dockerfile;
mod dra;
mod mpijob;
mod nccl_check;
mod pod;
mod raycluster;
mod rdma_pod;
mod rdt_demo;
mod template;

use crate::bundle::{Bundle, BundleError};
use crate::profile::{Profile, ProfileInvalid};
use crate::system::System;
use crate::values::{Values, ValuesError};

pub(crate) use pod::Ctx;

/// Why rendering failed. Nothing is returned (and so nothing written) when any part fails.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The profile has a bad field.
    #[error("profile `{profile}`: {source}")]
    Profile {
        /// Profile name.
        profile: String,
        /// The bad field.
        source: ProfileInvalid,
    },
    /// A value is unusable.
    #[error(transparent)]
    Values(#[from] ValuesError),
    /// The system does not exist for this profile (e.g. DRA objects for a device-plugin profile).
    #[error("system `{system}` does not apply to profile `{profile}`: {reason}")]
    NotApplicable {
        /// The system.
        system: System,
        /// Profile name.
        profile: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The requested NCCL version is known to fail on this fabric.
    #[error(
        "NCCL {version} is known bad on profile `{profile}`{reason}; use one of the known good versions: {good}"
    )]
    BadNcclVersion {
        /// Version asked for.
        version: String,
        /// Profile name.
        profile: String,
        /// `: why` or empty.
        reason: String,
        /// Comma-separated known-good versions.
        good: String,
    },
    /// The requested net plugin version is known to fail.
    #[error(
        "{plugin} {version} is known bad on profile `{profile}`{reason}; use one of the known good versions: {good}"
    )]
    BadPluginVersion {
        /// Plugin name.
        plugin: String,
        /// Version asked for.
        version: String,
        /// Profile name.
        profile: String,
        /// `: why` or empty.
        reason: String,
        /// Comma-separated known-good versions.
        good: String,
    },
    /// A value cannot be written into the artifact without changing its structure (a newline in a
    /// Dockerfile line, an environment name that is no shell name).
    #[error("profile `{profile}`: {problem}")]
    Unsafe {
        /// Profile name.
        profile: String,
        /// The field, the value and why (in the message itself, not a `source`: said once).
        problem: crate::quote::Unsafe,
    },
    /// Assembling the bundle failed.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// A program template kept a placeholder (a bug in this crate).
    #[error("template `{file}` still has placeholder `{placeholder}` after rendering")]
    Template {
        /// Template file.
        file: &'static str,
        /// The placeholder.
        placeholder: String,
    },
}

/// Renders one system for `profile` with `values`.
///
/// Workload systems (RayCluster, NCCL check pods, MPIJob, RDMA test pod) of a DRA profile also contain the
/// DeviceClass and ResourceClaimTemplate their pods refer to.
pub fn render(system: System, profile: &Profile, values: &Values) -> Result<Bundle, RenderError> {
    // The profile's value defaults (the seed's instance type, names) under the user's `--set`.
    let values = values.with_profile_defaults(profile)?;
    let ctx = Ctx::new(profile, &values)?;
    if !system.applies_to(profile) {
        return Err(RenderError::NotApplicable {
            system,
            profile: profile.name.clone(),
            reason:
                "the profile attaches RDMA through a device plugin, not DRA; its pods ask for the \
                     extended resources directly"
                    .to_owned(),
        });
    }
    let mut bundle = Bundle::new();
    let needs_dra = matches!(
        system,
        System::RayCluster | System::NcclCheck | System::MpiJob | System::RdmaTestPod
    ) && ctx.dra().is_some();
    if needs_dra {
        dra::render(&ctx, &mut bundle)?;
    }
    match system {
        System::Image => dockerfile::render(&ctx, &mut bundle)?,
        System::Buildkit => buildkit::render(&ctx, &mut bundle)?,
        System::RayCluster => raycluster::render(&ctx, &mut bundle)?,
        System::RdtDemo => rdt_demo::render(&ctx, &mut bundle)?,
        System::NcclCheck => nccl_check::render(&ctx, &mut bundle)?,
        System::Dra => dra::render(&ctx, &mut bundle)?,
        System::MpiJob => mpijob::render(&ctx, &mut bundle)?,
        System::RdmaTestPod => rdma_pod::render(&ctx, &mut bundle)?,
    }
    Ok(bundle)
}

/// Renders several systems into one bundle (shared files such as the DRA objects appear once).
/// Systems that do not apply to the profile are an error; use [`render_all`] to skip them.
pub fn render_systems(
    systems: &[System],
    profile: &Profile,
    values: &Values,
) -> Result<Bundle, RenderError> {
    let mut bundle = Bundle::new();
    for &system in systems {
        bundle.merge(render(system, profile, values)?)?;
    }
    Ok(bundle)
}

/// Renders every system that applies to `profile`, in [`System::all`] order.
pub fn render_all(profile: &Profile, values: &Values) -> Result<Bundle, RenderError> {
    let systems: Vec<System> = System::all()
        .iter()
        .copied()
        .filter(|s| s.applies_to(profile))
        .collect();
    render_systems(&systems, profile, values)
}
