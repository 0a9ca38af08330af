//! The direct subcommands: render, validate, lint, probe, doctor, profiles (bench lives in `bench`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use super::{CmdResult, Failure, Global, code, parse_set};

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

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Manifest files or directories.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Reject unknown fields.
    #[arg(long)]
    pub strict: bool,
    /// Print findings as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Manifest files or directories.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Vendor profile to check device names and NCCL settings against.
    #[arg(long, short)]
    pub profile: Option<String>,
    /// Number of RDMA nodes (checks hostNetwork replica counts).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// The manifests are a benchmark (NCCL_SHM_DISABLE=1 expected).
    #[arg(long)]
    pub benchmark: bool,
    /// Print findings as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Print facts as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Log file, or - for stdin.
    pub file: String,
    /// Print findings as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ProfilesArgs {
    /// Show this profile in full.
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

fn read_input(file: &str) -> Result<String, Failure> {
    if file == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("cannot read stdin")
            .map_err(Failure::input)?;
        Ok(s)
    } else {
        std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {file}"))
            .map_err(Failure::input)
    }
}

pub(super) fn table(header: &[&str]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    t.set_header(header.to_vec());
    t
}

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

fn docs_of(paths: &[PathBuf]) -> Result<Vec<k8s_render::manifest::Document>, Failure> {
    let mut docs = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            docs.extend(k8s_render::manifest::read_path(p).map_err(Failure::input)?);
            continue;
        }
        docs.extend(
            rdmakit::host::read_docs(p, &|f| f.display().to_string())
                .map_err(|e| Failure::input(anyhow::anyhow!(e)))?,
        );
    }
    Ok(docs)
}

pub fn validate(a: ValidateArgs) -> CmdResult {
    let docs = docs_of(&a.paths)?;
    let opts = k8s_render::validate::ValidateOptions {
        strict: a.strict,
        ..Default::default()
    };
    let violations = k8s_render::validate::validate(&docs, &opts);
    let errors = violations
        .iter()
        .filter(|v| v.severity == k8s_render::manifest::Severity::Error)
        .count();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&violations).map_err(Failure::input)?
        );
    } else {
        for v in &violations {
            println!("{}: {v}", v.severity);
        }
        println!(
            "{} document(s), {errors} error(s), {} warning(s)",
            docs.len(),
            violations.len() - errors
        );
    }
    Ok(if errors > 0 { code::FINDINGS } else { code::OK })
}

pub fn lint(a: LintArgs) -> CmdResult {
    let docs = docs_of(&a.paths)?;
    let profile = match &a.profile {
        Some(p) => Some(rdmakit::profiles::load(p).map_err(Failure::input)?),
        None => None,
    };
    let findings = k8s_render::lint::lint(
        &docs,
        &rdmakit::host::lint_options(profile.as_ref(), a.nodes, a.benchmark),
    );
    let errors = findings
        .iter()
        .filter(|f| f.severity == k8s_render::manifest::Severity::Error)
        .count();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&findings).map_err(Failure::input)?
        );
    } else if findings.is_empty() {
        println!("no RDMA pitfalls in {} document(s)", docs.len());
    } else {
        let mut t = table(&["severity", "rule", "where", "what", "fix"]);
        for f in &findings {
            let at = match f.line {
                Some(l) => format!("{}:{l} {} {}", f.source, f.object, f.path),
                None => format!("{} {} {}", f.source, f.object, f.path),
            };
            t.add_row(vec![
                f.severity.to_string(),
                f.rule.to_owned(),
                at,
                format!("{} {}", f.message, f.why),
                f.fix.clone(),
            ]);
        }
        println!("{t}");
    }
    Ok(if errors > 0 { code::FINDINGS } else { code::OK })
}

pub fn probe(_g: &Global, a: ProbeArgs) -> CmdResult {
    // live(): the NCCL_* environment plus what libibverbs itself sees (a device in sysfs that libibverbs
    // cannot open means the image lacks its provider).
    let opts = probe::ProbeOptions::live();
    let facts = probe::HostFacts::gather(&opts).map_err(Failure::input)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&facts).map_err(Failure::input)?
        );
    } else {
        print!(
            "{}",
            probe::Report::from_checks("rdmakit probe: this host", &facts.checks).render_table()
        );
    }
    Ok(if facts.verdict() >= probe::Verdict::Fail {
        code::FINDINGS
    } else {
        code::OK
    })
}

pub fn doctor(a: DoctorArgs) -> CmdResult {
    let text = read_input(&a.file)?;
    let d = probe::doctor::diagnose(&text).map_err(Failure::input)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&d).map_err(Failure::input)?
        );
    } else if d.findings.is_empty() {
        println!("no known failure signature in {} lines", d.lines_read);
    } else {
        let mut t = table(&["line", "severity", "signature", "cause", "fix"]);
        for f in &d.findings {
            t.add_row(vec![
                f.line.to_string(),
                f.severity.as_str().to_owned(),
                f.id.clone(),
                f.cause.clone(),
                f.fix.clone().unwrap_or_default(),
            ]);
        }
        println!("{t}");
    }
    // Positive findings (NET/IB in use, device name) are reported but do not fail the command.
    Ok(if d.verdict >= probe::Verdict::Warn {
        code::FINDINGS
    } else {
        code::OK
    })
}

pub fn profiles(a: ProfilesArgs) -> CmdResult {
    if let Some(name) = &a.name {
        let p = rdmakit::profiles::load(name).map_err(Failure::input)?;
        println!(
            "{}",
            serde_json::to_string_pretty(&p).map_err(Failure::input)?
        );
        return Ok(code::OK);
    }
    let listed = rdmakit::profiles::list(&rdmakit::profiles::Search::from_env(a.path));
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
            // A user profile is used by its path (`--profile <path>`); a built-in by its name.
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
            "A profile is a Rhai script: copy scripts/vendors/<name>.rhai, edit, and pass its path as --profile."
        );
    }
    for l in &listed {
        if let Err(e) = &l.profile {
            eprintln!("error: {e}");
        }
    }
    Ok(if broken > 0 { code::INPUT } else { code::OK })
}
