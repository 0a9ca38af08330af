//! `rdmakit doctor`: a NCCL/UCX/Ray/ibverbs log against probe's known failure signatures, each with its
//! cause and fix.

use clap::Args;

use super::io::{read_input, table};
use super::{CmdResult, Failure, code};

/// `rdmakit doctor` arguments.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Log file, or - for stdin.
    pub file: String,
    /// Print findings as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Diagnoses the log and prints the findings.
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
