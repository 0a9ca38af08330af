//! Every README benchmark table (the top README's summary, gpu-stage's soft-RoCE and GPU tables) is what
//! `bench/tables.py` makes from `bench/results/`: a figure edited by hand, or a result committed without
//! regenerating, fails here with the diff.
//!
//! Needs `python3`.
// Helpers outside #[test] fns unwrap too: a broken fixture is a failed test.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use rdmakit_tests::{output_text as text, repo_root};

fn check(root: &Path) -> Output {
    Command::new("python3")
        .arg(repo_root().join("bench/tables.py"))
        .args(["--check", "--root"])
        .arg(root)
        .output()
        .unwrap()
}

#[test]
fn the_readme_benchmark_tables_match_the_committed_results() {
    let o = check(repo_root());
    assert!(
        o.status.success(),
        "README tables drifted from bench/results/ (run `python3 bench/tables.py` and commit):\n{}",
        text(&o)
    );
}

/// The READMEs the generator writes tables into (`bench/tables.py --files`), so a new one is copied too.
fn readmes() -> Vec<String> {
    let o = Command::new("python3")
        .arg(repo_root().join("bench/tables.py"))
        .arg("--files")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A copy of what the generator reads: the READMEs it writes and bench/results/.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            fs::copy(e.path(), &dst).unwrap();
        }
    }
}

#[test]
fn a_hand_edited_figure_or_a_new_result_fails_the_check() {
    let d = tempfile::tempdir().unwrap();
    copy_tree(
        &repo_root().join("bench/results"),
        &d.path().join("bench/results"),
    );
    let files = readmes();
    assert!(
        files.iter().any(|f| f == "crates/gpu-stage/README.md"),
        "{files:?}"
    );
    for f in &files {
        let dst = d.path().join(f);
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::copy(repo_root().join(f), &dst).unwrap();
    }
    assert!(
        check(d.path()).status.success(),
        "{}",
        text(&check(d.path()))
    );

    // A figure typed into the README that the JSON does not show.
    let readme = d.path().join("crates/gpu-stage/README.md");
    let good = fs::read_to_string(&readme).unwrap();
    let row = "| 1 QP each (run 5) | 0.119, 0.153 | 0.11, 0.12 | 1.27× / 1.18× | ✔ |";
    assert!(good.contains(row), "fixture row not in the README");
    fs::write(&readme, good.replace(row, &row.replace("1.27×", "1.37×"))).unwrap();
    let o = check(d.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("-| 1 QP each (run 5) | 0.119, 0.153 | 0.11, 0.12 | 1.37×"),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("crates/gpu-stage/README.md differ"),
        "{}",
        text(&o)
    );
    fs::write(&readme, &good).unwrap();

    // A result changed without regenerating the top README's table.
    let json = d.path().join("bench/results/erdma-write-bw-rxe-quiet.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    v["ratio"] = serde_json::json!(0.5);
    fs::write(&json, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let o = check(d.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("+| erdma-verbs RDMA WRITE") && text(&o).contains("0.50× best"),
        "{}",
        text(&o)
    );
}
