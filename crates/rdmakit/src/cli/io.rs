//! What the subcommands share for input and output: reading a file or stdin, the table style, `--format`
//! (plain, JSON, SARIF) and JSON printing.

use anyhow::Context as _;

use super::Failure;

/// A file's text, or stdin's for `-`.
pub(super) fn read_input(file: &str) -> Result<String, Failure> {
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

/// A table in the style every subcommand prints.
pub(super) fn table(header: &[&str]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    t.set_header(header.to_vec());
    t
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
    pub(super) fn of(format: Option<Format>, json: bool) -> Format {
        if json {
            Format::Json
        } else {
            format.unwrap_or(Format::Plain)
        }
    }
}

/// Pretty JSON of `v` on stdout.
pub(super) fn print_json(v: &impl serde::Serialize) -> Result<(), Failure> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(Failure::input)?
    );
    Ok(())
}

/// `rdmakit` at this binary's version, as SARIF logs name their tool.
pub(super) fn sarif_tool() -> k8s_render::sarif::Tool {
    k8s_render::sarif::Tool::rdmakit(env!("CARGO_PKG_VERSION"))
}
