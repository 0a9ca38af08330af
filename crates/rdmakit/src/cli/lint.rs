//! `rdmakit lint`: manifests and Dockerfiles for RDMA pitfalls (k8s-render's rules, with a profile's facts
//! when given), or what one rule checks (`--explain`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use super::io::{Format, print_json, read_input, sarif_tool, table};
use super::{CmdResult, Failure, code};

/// `rdmakit lint` arguments.
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

/// Lints the inputs and prints the findings.
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
                let l = &f.location;
                let at = match l.line {
                    Some(n) => format!("{}:{n} {} {}", l.source, l.object, l.path),
                    None => format!("{} {} {}", l.source, l.object, l.path),
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
