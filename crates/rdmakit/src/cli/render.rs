//! `rdmakit render`: a vendor profile's manifests, Dockerfile and programs into a bundle directory, or the
//! manifests as one YAML stream.

use std::path::PathBuf;

use clap::Args;

use super::{CmdResult, Failure, Global, code, parse_set};

/// `rdmakit render` arguments.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Systems to render (image, buildkit, raycluster, rdt-demo, nccl-check, dra, mpijob, rdma-test-pod, all).
    #[arg(required = true)]
    pub systems: Vec<String>,
    /// Vendor profile: built-in name or a .rhai file.
    #[arg(long, short)]
    pub profile: String,
    /// Override a value (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set)]
    pub set: Vec<(String, String)>,
    /// Bundle directory.
    #[arg(long, default_value = "out/bundle")]
    pub out: PathBuf,
    /// Print the manifests as one YAML stream instead of writing files.
    #[arg(long)]
    pub stdout: bool,
}

/// Renders the systems for the profile.
pub fn render(_g: &Global, a: RenderArgs) -> CmdResult {
    let profile = rdmakit::profiles::load(&a.profile).map_err(Failure::input)?;
    let mut values = k8s_render::Values::default();
    for (k, v) in &a.set {
        values
            .set(k, v)
            .map_err(|e| Failure::input(anyhow::anyhow!("--set {e}")))?;
    }
    values.check().map_err(Failure::input)?;
    let systems: Vec<k8s_render::System> = if a.systems.iter().any(|s| s == "all") {
        k8s_render::System::all()
            .iter()
            .copied()
            .filter(|s| s.applies_to(&profile))
            .collect()
    } else {
        a.systems
            .iter()
            .map(|s| s.parse::<k8s_render::System>().map_err(Failure::input))
            .collect::<Result<_, _>>()?
    };
    // A key none of these systems reads would change nothing: refuse it, naming what does read it.
    for (k, _) in &a.set {
        k8s_render::Values::check_read_by(k, &systems)
            .map_err(|e| Failure::input(anyhow::anyhow!("--set {e}")))?;
    }
    let bundle = k8s_render::render_systems(&systems, &profile, &values).map_err(Failure::input)?;
    if a.stdout {
        print!("{}", bundle.to_stream());
        return Ok(code::OK);
    }
    let written = bundle.write_to(&a.out).map_err(Failure::input)?;
    for p in written {
        println!("{}", p.display());
    }
    Ok(code::OK)
}
