//! `rdmakit lint`: manifests and Dockerfiles for RDMA pitfalls (k8s-render's rules, with a profile's facts
//! when given), or what one rule checks (`--explain`).

use std::path::PathBuf;

use clap::Args;

use super::io::{Format, Input, expand, is_yaml, print_json, report_problems, sarif_tool, table};
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

/// What lint found in its inputs, read and linted a document at a time.
struct Linted {
    findings: Vec<k8s_render::lint::Finding>,
    documents: usize,
    dockerfiles: usize,
    /// Inputs that could not be read or parsed, each a message naming the file.
    problems: Vec<String>,
}

impl Linted {
    /// Lints one input's text: a Dockerfile ([`k8s_render::lint::is_dockerfile`]) or YAML manifests,
    /// parsed and linted one document at a time so memory stays bounded by the largest document.
    fn add(&mut self, shown: &str, text: &str, opts: &k8s_render::lint::LintOptions) {
        if k8s_render::lint::is_dockerfile(shown, text) {
            self.dockerfiles += 1;
            self.findings
                .extend(k8s_render::lint::lint_dockerfile(shown, text, opts));
            return;
        }
        // Parsed and linted on every core, in stream order.
        let linted = k8s_render::lint::lint_stream(shown, text, opts);
        self.documents += linted.documents;
        self.findings.extend(linted.findings);
        if let Some(e) = linted.error {
            self.problems.push(e.to_string());
        }
    }
}

/// A file, `-` (stdin, named `<stdin>`), or a directory: its `*.yaml`/`*.yml` and its Dockerfiles (by
/// name, or text that starts with `FROM`), in name order; other files are skipped. An input that cannot be
/// read is a problem (reported, the rest still linted); a binary file in a directory is not an input.
fn lint_inputs(paths: &[PathBuf], opts: &k8s_render::lint::LintOptions) -> Linted {
    let found = expand(paths, &|_| true);
    let mut out = Linted {
        findings: Vec::new(),
        documents: 0,
        dockerfiles: 0,
        problems: found.problems,
    };
    let given: Vec<&PathBuf> = paths.iter().collect();
    let mut linted: Vec<&PathBuf> = Vec::new();
    for input in &found.inputs {
        let shown = input.shown();
        let in_dir = matches!(input, Input::File(p) if !given.contains(&p));
        let yaml = matches!(input, Input::File(p) if is_yaml(p));
        let bytes = match input.read() {
            Ok(b) => b,
            Err(p) => {
                out.problems.push(p);
                continue;
            }
        };
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            // A binary file in the directory is neither YAML nor a Dockerfile.
            Err(_) if in_dir && !yaml => continue,
            Err(e) => {
                out.problems
                    .push(format!("{shown}: not UTF-8 text: {}", e.utf8_error()));
                continue;
            }
        };
        if in_dir && !yaml && !k8s_render::lint::is_dockerfile(&shown, &text) {
            continue;
        }
        out.add(&shown, &text, opts);
        if let Input::File(f) = input {
            linted.push(f);
        }
    }
    for p in paths.iter().filter(|p| p.is_dir()) {
        let any = linted.iter().any(|f| f.starts_with(p));
        if !any
            && !out
                .problems
                .iter()
                .any(|m| m.starts_with(&p.display().to_string()))
        {
            out.problems.push(format!(
                "{}: no .yaml files or Dockerfiles in this directory",
                p.display()
            ));
        }
    }
    out
}

/// Lints the inputs and prints the findings.
pub fn lint(a: LintArgs) -> CmdResult {
    if let Some(rule) = &a.explain {
        let text =
            k8s_render::lint::explain(rule).map_err(|e| Failure::input(anyhow::anyhow!(e)))?;
        println!("{text}");
        return Ok(code::OK);
    }
    let profile = match &a.profile {
        Some(p) => Some(rdmakit::profiles::load(p).map_err(Failure::input)?),
        None => None,
    };
    let opts = rdmakit::bridge::lint_options(profile.as_ref(), a.nodes, a.benchmark);
    let mut linted = lint_inputs(&a.paths, &opts);
    if linted.documents == 0 && linted.dockerfiles == 0 && linted.problems.is_empty() {
        return Err(Failure::input(anyhow::anyhow!(
            "no input: {} held no Kubernetes document or Dockerfile (empty, or only comments and `---`); nothing was linted",
            a.paths
                .iter()
                .map(|p| if p.as_os_str() == "-" {
                    "<stdin>".to_owned()
                } else {
                    p.display().to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    k8s_render::lint::sort_findings(&mut linted.findings);
    let findings = linted.findings;
    let errors = findings
        .iter()
        .filter(|f| f.severity == k8s_render::manifest::Severity::Error)
        .count();
    match Format::of(a.format, a.json) {
        Format::Json => print_json(&findings)?,
        Format::Sarif => print_json(&k8s_render::sarif::lint_log(&findings, &sarif_tool()))?,
        Format::Plain if findings.is_empty() => match linted.dockerfiles {
            0 => println!("no RDMA pitfalls in {} document(s)", linted.documents),
            n => println!(
                "no RDMA pitfalls in {} document(s) and {n} Dockerfile(s)",
                linted.documents
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
    report_problems(&linted.problems);
    Ok(if !linted.problems.is_empty() {
        code::INPUT
    } else if errors > 0 {
        code::FINDINGS
    } else {
        code::OK
    })
}
