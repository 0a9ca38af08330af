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

/// How validate and lint print what they find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table (lint) or one line per violation (validate), then a summary.
    Plain,
    /// The findings as a JSON array.
    Json,
    /// A SARIF 2.1.0 log (GitHub code scanning, GitLab, Azure DevOps show the findings inline).
    Sarif,
}

impl Format {
    /// `--format`, or `json` for `--json` (clap refuses both together).
    fn of(format: Option<Format>, json: bool) -> Format {
        if json {
            Format::Json
        } else {
            format.unwrap_or(Format::Plain)
        }
    }
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Manifest files or directories (a directory's *.yaml and *.yml), or - for stdin.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Reject unknown fields.
    #[arg(long)]
    pub strict: bool,
    /// Output format: plain, json or sarif (SARIF 2.1.0, one result per violation).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Manifest files, Dockerfiles or directories (a directory's *.yaml, *.yml and Dockerfiles), or -
    /// for stdin. Not needed with --explain.
    #[arg(required_unless_present = "explain")]
    pub paths: Vec<PathBuf>,
    /// Print what RULE finds, why it breaks RDMA and how findings name the fix, then exit (0; 2 for an
    /// unknown rule, with the rule ids).
    #[arg(long, value_name = "RULE", conflicts_with = "paths")]
    pub explain: Option<String>,
    /// Vendor profile to check device names and NCCL settings against.
    #[arg(long, short)]
    pub profile: Option<String>,
    /// Number of RDMA nodes (checks hostNetwork replica counts).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// The manifests are a benchmark (NCCL_SHM_DISABLE=1 expected).
    #[arg(long)]
    pub benchmark: bool,
    /// Output format: plain, json or sarif (SARIF 2.1.0: rule ids, file and line, help text).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Same as --format json.
    #[arg(long, conflicts_with = "format")]
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
            rdmakit::manifests::read_docs(p, &|f| f.display().to_string())
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
    match Format::of(a.format, a.json) {
        Format::Json => print_json(&violations)?,
        Format::Sarif => print_json(&k8s_render::sarif::validate_log(&violations, &sarif_tool()))?,
        Format::Plain => {
            for v in &violations {
                println!("{}: {v}", v.severity);
            }
            println!(
                "{} document(s), {errors} error(s), {} warning(s)",
                docs.len(),
                violations.len() - errors
            );
        }
    }
    Ok(if errors > 0 { code::FINDINGS } else { code::OK })
}

/// `rdmakit` at this binary's version, as SARIF logs name their tool.
fn sarif_tool() -> k8s_render::sarif::Tool {
    k8s_render::sarif::Tool::rdmakit(env!("CARGO_PKG_VERSION"))
}

fn print_json(v: &impl serde::Serialize) -> Result<(), Failure> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(Failure::input)?
    );
    Ok(())
}

/// What lint reads: YAML documents and Dockerfiles, each named as given on the command line.
#[derive(Default)]
struct LintInputs {
    docs: Vec<k8s_render::manifest::Document>,
    /// (shown name, text) of each Dockerfile.
    dockerfiles: Vec<(String, String)>,
}

impl LintInputs {
    /// Adds one file's text: a Dockerfile ([`k8s_render::lint::is_dockerfile`]) or YAML manifests.
    fn add(&mut self, shown: String, text: String) -> Result<(), Failure> {
        if k8s_render::lint::is_dockerfile(&shown, &text) {
            self.dockerfiles.push((shown, text));
        } else {
            self.docs.extend(
                k8s_render::manifest::parse_str(&shown, &text)
                    .map_err(|e| Failure::input(anyhow::anyhow!(e.to_string())))?,
            );
        }
        Ok(())
    }

    /// A file, `-` (stdin, named `<stdin>`), or a directory: its `*.yaml`/`*.yml` and its
    /// Dockerfiles (by name, or text that starts with `FROM`), in name order; other files are skipped.
    fn read(&mut self, path: &std::path::Path) -> Result<(), Failure> {
        if path.as_os_str() == "-" {
            return self.add("<stdin>".to_owned(), read_input("-")?);
        }
        if !path.is_dir() {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))
                .map_err(Failure::input)?;
            return self.add(path.display().to_string(), text);
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(Failure::input)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        let mut read_any = false;
        for f in files {
            let shown = f.display().to_string();
            let yaml = matches!(f.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
            let text = match std::fs::read_to_string(&f) {
                Ok(t) => t,
                // A binary file in the directory is neither YAML nor a Dockerfile.
                Err(_) if !yaml => continue,
                Err(e) => return Err(Failure::input(anyhow::anyhow!("cannot read {shown}: {e}"))),
            };
            if yaml || k8s_render::lint::is_dockerfile(&shown, &text) {
                read_any = true;
                self.add(shown, text)?;
            }
        }
        if !read_any {
            return Err(Failure::input(anyhow::anyhow!(
                "{}: no .yaml files or Dockerfiles in this directory",
                path.display()
            )));
        }
        Ok(())
    }
}

pub fn lint(a: LintArgs) -> CmdResult {
    if let Some(rule) = &a.explain {
        let text =
            k8s_render::lint::explain(rule).map_err(|e| Failure::input(anyhow::anyhow!(e)))?;
        println!("{text}");
        return Ok(code::OK);
    }
    let mut inputs = LintInputs::default();
    for p in &a.paths {
        inputs.read(p)?;
    }
    let profile = match &a.profile {
        Some(p) => Some(rdmakit::profiles::load(p).map_err(Failure::input)?),
        None => None,
    };
    let opts = rdmakit::bridge::lint_options(profile.as_ref(), a.nodes, a.benchmark);
    let mut findings = k8s_render::lint::lint(&inputs.docs, &opts);
    for (shown, text) in &inputs.dockerfiles {
        findings.extend(k8s_render::lint::lint_dockerfile(shown, text, &opts));
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == k8s_render::manifest::Severity::Error)
        .count();
    match Format::of(a.format, a.json) {
        Format::Json => print_json(&findings)?,
        Format::Sarif => print_json(&k8s_render::sarif::lint_log(&findings, &sarif_tool()))?,
        Format::Plain if findings.is_empty() => match inputs.dockerfiles.len() {
            0 => println!("no RDMA pitfalls in {} document(s)", inputs.docs.len()),
            n => println!(
                "no RDMA pitfalls in {} document(s) and {n} Dockerfile(s)",
                inputs.docs.len()
            ),
        },
        Format::Plain => {
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
