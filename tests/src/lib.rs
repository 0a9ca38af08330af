//! Cross-crate integration tests for rdmakit. The tests live in `tests/tests/`; this library holds what more
//! than one of them needs: the repository root, a command's output as one text, a `PATH` with stand-ins
//! first, and the bundle listing the snapshots hold.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::Output;

/// The repository root (the workspace), from which the tests read scripts, fixtures and results.
pub fn repo_root() -> &'static Path {
    // CARGO_MANIFEST_DIR is this crate's absolute folder, tests/, so it always has a parent.
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests)
}

/// A finished command's stdout followed by its stderr: what a failed assertion shows.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// This process's `PATH` with `dir` searched first, so a script under test finds the stand-ins (or the tier's
/// kubectl) there before anything installed.
pub fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Every file of a bundle as `==> path <==` followed by its text: what the bundle snapshots hold.
pub fn bundle_listing(b: &k8s_render::Bundle) -> String {
    let mut out = String::new();
    for f in b.files() {
        out.push_str(&format!("==> {} <==\n{}", f.path, f.contents));
    }
    out
}
