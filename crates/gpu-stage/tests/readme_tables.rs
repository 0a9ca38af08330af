//! The README's GPU figures are what `bench/tables.py` makes from the committed JSON
//! under `bench/results/`: a figure edited by hand, or a run committed without regenerating, fails here
//! with the diff. Needs `python3` (skipped, and said so, without it; under `make test`, which sets
//! `RDMAKIT_NO_SKIP=1` after installing the test tools, a missing tool is a failure).

use std::path::Path;
use std::process::Command;

#[test]
fn the_readme_gpu_tables_match_the_committed_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = match Command::new("python3")
        .arg(root.join("bench/tables.py"))
        .arg("--check")
        .arg("--root")
        .arg(&root)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(
                std::env::var_os("RDMAKIT_NO_SKIP").is_none(),
                "python3 not runnable ({e}) and RDMAKIT_NO_SKIP is set: install python3"
            );
            eprintln!("SKIPPED: python3 not runnable ({e})");
            return;
        }
    };
    assert!(
        out.status.success(),
        "crates/gpu-stage/README.md drifted from bench/results/ (run `python3 bench/tables.py` and commit):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
