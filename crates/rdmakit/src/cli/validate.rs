//! `rdmakit validate`: manifests against the Kubernetes and CRD schemas.

use std::path::PathBuf;

use clap::Args;

use super::io::{Format, print_json, sarif_tool};
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

/// The documents of files, directories and `-` (stdin), each named as given.
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

/// Validates the documents and prints the violations.
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
