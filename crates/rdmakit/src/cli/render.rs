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
    /// Print instead of writing files: the manifests as one YAML stream (a Dockerfile or program beside
    /// them follows, commented out, after its own `---`), or a lone Dockerfile or program as it is.
    #[arg(long)]
    pub stdout: bool,
}

/// Renders the systems for the profile.
pub fn render(_g: &Global, a: RenderArgs) -> CmdResult {
    let (profile, values) = super::profile_and_values(&a.profile, &a.set)?;
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
        print!("{}", stdout_text(&bundle));
        return Ok(code::OK);
    }
    let written = bundle.write_to(&a.out).map_err(Failure::input)?;
    for p in written {
        println!("{}", p.display());
    }
    Ok(code::OK)
}

/// What `--stdout` prints. A bundle of one Dockerfile or program is that file as it is (`render image
/// --stdout | docker build -f - .`); several such files each follow a `# ===== file: NAME =====` line.
/// Beside manifests, each one follows the YAML stream as a document of comment lines, so the output
/// still pipes into `kubectl apply -f -` (which skips an empty document) and nothing is left out.
fn stdout_text(bundle: &k8s_render::bundle::Bundle) -> String {
    use k8s_render::bundle::FileKind;
    let files = bundle.files();
    let others: Vec<_> = files
        .iter()
        .filter(|f| f.kind != FileKind::Manifest)
        .collect();
    if others.len() == files.len() {
        if let [only] = others.as_slice() {
            return only.contents.clone();
        }
        return others
            .iter()
            .map(|f| format!("# ===== file: {} =====\n{}", f.path, f.contents))
            .collect();
    }
    let mut out = bundle.to_stream();
    for f in others {
        let what = match f.kind {
            FileKind::Dockerfile => "a Dockerfile",
            _ => "a program",
        };
        out.push_str(&format!(
            "---\n# ===== file: {} ({what}, not a manifest: its lines are commented out so kubectl skips them; `--out DIR` writes the file) =====\n",
            f.path
        ));
        for line in f.contents.lines() {
            out.push_str(if line.is_empty() { "#" } else { "# " });
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
