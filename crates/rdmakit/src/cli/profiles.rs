//! `rdmakit profiles`: the vendor profiles (built-in and the user's), or one in full.

use clap::Args;

use super::io::table;
use super::{CmdResult, Failure, code};

/// `rdmakit profiles` arguments.
#[derive(Debug, Args)]
pub struct ProfilesArgs {
    /// Show this profile in full: a built-in's name, a listed user profile's name, or a path.
    pub name: Option<String>,
    /// Also list this profile script, or every `*.rhai` in this folder (repeatable). Listed besides the
    /// built-ins, `./scripts/vendors/*.rhai` and `$XDG_CONFIG_HOME/rdmakit/profiles` (or
    /// `~/.config/rdmakit/profiles`).
    #[arg(long, value_name = "FILE|DIR")]
    pub path: Vec<std::path::PathBuf>,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Lists the profiles, or shows one.
pub fn profiles(a: ProfilesArgs) -> CmdResult {
    let search = rdmakit::profiles::Search::from_env(a.path);
    if let Some(name) = &a.name {
        let p = rdmakit::profiles::load_in(name, &search).map_err(Failure::input)?;
        println!(
            "{}",
            serde_json::to_string_pretty(&p).map_err(Failure::input)?
        );
        return Ok(code::OK);
    }
    let listed = rdmakit::profiles::list(&search);
    let shown_path = |l: &rdmakit::profiles::Listed| {
        l.path
            .as_ref()
            .map_or_else(|| "built-in".to_owned(), |p| p.display().to_string())
    };
    // A script that does not load is listed with its error and makes the command exit 2 (input error).
    let broken = listed.iter().filter(|l| l.profile.is_err()).count();
    if a.json {
        let mut rows = Vec::new();
        for l in &listed {
            let mut v = match &l.profile {
                Ok(p) => serde_json::to_value(p).map_err(Failure::input)?,
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            };
            if let Some(m) = v.as_object_mut() {
                m.insert(
                    "origin".into(),
                    serde_json::to_value(&l.origin).map_err(Failure::input)?,
                );
                m.insert("path".into(), serde_json::json!(l.path));
            }
            rows.push(v);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::input)?
        );
    } else {
        let mut t = table(&[
            "profile",
            "from",
            "fabric",
            "RDMA via",
            "GPU resource",
            "description",
        ]);
        for l in &listed {
            let Ok(p) = &l.profile else {
                t.add_row(vec![
                    shown_path(l),
                    l.origin.label().to_owned(),
                    String::new(),
                    String::new(),
                    String::new(),
                    "does not load (error below)".to_owned(),
                ]);
                continue;
            };
            let via = match &p.rdma {
                k8s_render::RdmaAttachment::DevicePlugin { resources } => {
                    resources.keys().cloned().collect::<Vec<_>>().join(", ")
                }
                k8s_render::RdmaAttachment::Dra(d) => format!("DRA DeviceClass {}", d.device_class),
            };
            // Used by its name (or its path); the path says which file that is.
            let name = match &l.path {
                Some(_) => format!("{} ({})", p.name, shown_path(l)),
                None => p.name.clone(),
            };
            t.add_row(vec![
                name,
                l.origin.label().to_owned(),
                p.fabric.clone(),
                via,
                p.gpu_resource.clone(),
                p.description.clone(),
            ]);
        }
        println!("{t}");
        println!(
            "A profile is a Rhai script: copy scripts/vendors/<name>.rhai into ~/.config/rdmakit/profiles (or \
             ./scripts/vendors), edit, and pass its name (or its path) as --profile."
        );
    }
    for l in &listed {
        if let Err(e) = &l.profile {
            eprintln!("error: {e}");
        }
    }
    Ok(if broken > 0 { code::INPUT } else { code::OK })
}
