//! `rdmakit validate`: manifests against the Kubernetes and CRD schemas.

use std::path::PathBuf;

use clap::Args;

use super::io::{Format, Input, expand, is_yaml, print_json, report_problems, sarif_tool};
use super::{CmdResult, Failure, code};

/// `rdmakit validate` arguments.
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

/// Validates the documents and prints the violations. Each file is parsed and validated a document at
/// a time (memory bounded by the largest document, not the file). A file that cannot be read or parsed is
/// reported on stderr and the rest still validated; the exit code is then 2. No document at all is
/// exit 2 too ("no input"), not a pass.
pub fn validate(a: ValidateArgs) -> CmdResult {
    let found = expand(&a.paths, &is_yaml);
    let mut problems = found.problems;
    let opts = k8s_render::validate::ValidateOptions {
        strict: a.strict,
        ..Default::default()
    };
    let mut stream = k8s_render::validate::Stream::new(opts);
    for input in &found.inputs {
        let bytes = match input.read() {
            Ok(b) => b,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        let shown = input.shown();
        let text = match std::str::from_utf8(&bytes) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{shown}: not UTF-8 text: {e}"));
                continue;
            }
        };
        // Parsed and validated on every core, in stream order.
        if let Some(e) = stream.push_text(&shown, text) {
            problems.push(e.to_string());
        }
    }
    let documents = stream.documents();
    let violations = stream.finish();
    if documents == 0 && problems.is_empty() {
        let names: Vec<String> = found.inputs.iter().map(Input::shown).collect();
        return Err(Failure::input(anyhow::anyhow!(
            "no input: {} held no Kubernetes document (empty, or only comments and `---`); nothing was validated",
            names.join(", ")
        )));
    }
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
                "{documents} document(s), {errors} error(s), {} warning(s)",
                violations.len() - errors
            );
        }
    }
    report_problems(&problems);
    Ok(if !problems.is_empty() {
        code::INPUT
    } else if errors > 0 {
        code::FINDINGS
    } else {
        code::OK
    })
}
