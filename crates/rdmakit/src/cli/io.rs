//! What the subcommands share for input and output: reading a file or stdin, the files a command line names
//! (directories expanded, problems with one file reported without dropping the rest), the table style,
//! `--format` (plain, JSON, SARIF) and JSON printing.

use std::path::{Path, PathBuf};

use super::Failure;

/// One input of validate or lint: standard input, or a file named as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Input {
    /// `-`.
    Stdin,
    /// A file (given, or found in a given directory).
    File(PathBuf),
}

impl Input {
    /// How messages name it.
    pub(super) fn shown(&self) -> String {
        match self {
            Input::Stdin => "<stdin>".to_owned(),
            Input::File(p) => p.display().to_string(),
        }
    }

    /// Its bytes, or what stopped reading them (naming the file).
    pub(super) fn read(&self) -> Result<Vec<u8>, String> {
        match self {
            Input::Stdin => {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut b)
                    .map_err(|e| format!("<stdin>: cannot read: {e}"))?;
                Ok(b)
            }
            Input::File(p) => std::fs::read(p).map_err(|e| io_problem(p, &e)),
        }
    }
}

/// The inputs a command line names, and the problems met finding them (each already a message).
#[derive(Debug, Default)]
pub(super) struct Inputs {
    pub(super) inputs: Vec<Input>,
    pub(super) problems: Vec<String>,
}

/// `ELOOP`: too many levels of symbolic links (Linux 40; macOS and the BSDs 62).
const ELOOP: i32 = if cfg!(target_os = "linux") { 40 } else { 62 };

/// What an I/O error on `path` means to the user: a link loop and a dangling link are named as such
/// (the OS's "no such file" for a loop sends people looking for a missing file).
pub(super) fn io_problem(path: &Path, e: &std::io::Error) -> String {
    let shown = path.display();
    if e.raw_os_error() == Some(ELOOP) {
        return format!(
            "{shown}: symbolic link loop (following its links leads back to a link already followed); point the link at a real file or remove it"
        );
    }
    if e.kind() == std::io::ErrorKind::NotFound {
        if let Ok(target) = std::fs::read_link(path) {
            return format!(
                "{shown}: dangling symbolic link to {} (no such file); fix or remove the link",
                target.display()
            );
        }
        return format!("{shown}: no such file or directory");
    }
    format!("{shown}: cannot read: {e}")
}

/// Expands `paths`: `-` is stdin, a file is itself, a directory gives its entries for which `wanted`
/// holds, in name order (`wanted` sees the path, not the content). A directory entry that is a looping
/// or dangling link, or a directory that cannot be listed, is a problem, reported and skipped, so one bad
/// entry neither hides the others nor passes in silence.
pub(super) fn expand(paths: &[PathBuf], wanted: &dyn Fn(&Path) -> bool) -> Inputs {
    let mut out = Inputs::default();
    for p in paths {
        if p.as_os_str() == "-" {
            out.inputs.push(Input::Stdin);
            continue;
        }
        match std::fs::metadata(p) {
            Err(e) => out.problems.push(io_problem(p, &e)),
            Ok(m) if !m.is_dir() => out.inputs.push(Input::File(p.clone())),
            Ok(_) => expand_dir(p, wanted, &mut out),
        }
    }
    out
}

fn expand_dir(dir: &Path, wanted: &dyn Fn(&Path) -> bool, out: &mut Inputs) {
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return out.problems.push(io_problem(dir, &e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = match entry {
            Ok(e) => e.path(),
            Err(e) => {
                out.problems.push(io_problem(dir, &e));
                continue;
            }
        };
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && wanted(&path) => files.push(path),
            // Subdirectories, sockets, files of other kinds: not inputs of a directory.
            Ok(_) => {}
            // A link whose target is gone or loops: a manifest may have been meant here.
            Err(e) if wanted(&path) || path.is_symlink() => {
                out.problems.push(io_problem(&path, &e))
            }
            Err(_) => {}
        }
    }
    files.sort();
    out.inputs.extend(files.into_iter().map(Input::File));
}

/// Whether a path names a YAML file (`*.yaml`, `*.yml`).
pub(super) fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Prints the problems met reading inputs on stderr, after the findings of what could be read; the
/// exit code is then [`super::code::INPUT`].
pub(super) fn report_problems(problems: &[String]) {
    for p in problems {
        eprintln!("error: {p}");
    }
    if !problems.is_empty() {
        eprintln!(
            "{} input(s) could not be read; the findings above are for the rest",
            problems.len()
        );
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
