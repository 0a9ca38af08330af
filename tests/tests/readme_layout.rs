//! The README's layout table matches the tree: every folder it names exists, every module it names for a
//! crate exists in that crate's `src/`, every folder directly under a crate's `src/` is named, and every
//! top-level folder of the repository has a row. A move that forgets the README fails here.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use rdmakit_tests::repo_root;

/// `(folder, description)` of each row of the table under `## Layout`.
fn layout_rows(readme: &str) -> Vec<(String, String)> {
    let start = readme
        .find("\n## Layout\n")
        .expect("README has a ## Layout section");
    let section = &readme[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    section[..end]
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l
                .trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            let folder = cells.first()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((folder.to_owned(), cells.get(1)?.to_string()))
        })
        .collect()
}

/// The `code` spans of a cell, without commands (spans with a space).
fn spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.contains(' '))
        .map(str::to_owned)
        .collect()
}

/// Whether `src` holds a module `name` (`name.rs` or `name/`) at any depth.
fn has_module(src: &Path, name: &str) -> bool {
    if src.join(format!("{name}.rs")).is_file() || src.join(name).is_dir() {
        return true;
    }
    fs::read_dir(src).into_iter().flatten().flatten().any(|e| {
        let p = e.path();
        p.is_dir() && has_module(&p, name)
    })
}

#[test]
fn the_readme_layout_matches_the_tree() {
    let root = repo_root();
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    let rows = layout_rows(&readme);
    assert!(rows.len() >= 10, "too few layout rows parsed: {rows:?}");
    let mut problems = Vec::new();
    for (folder, what) in &rows {
        let dir = root.join(folder);
        if !dir.is_dir() {
            problems.push(format!("{folder}: no such folder"));
            continue;
        }
        let src = dir.join("src");
        for span in spans(what) {
            let name = span.trim_end_matches('/');
            let found = if folder.starts_with("crates/") {
                has_module(&src, name)
            } else {
                dir.join(name).exists()
            };
            if !found {
                problems.push(format!("{folder}: `{span}` is not in the tree"));
            }
        }
        if folder.starts_with("crates/") {
            let named: BTreeSet<String> = spans(what)
                .iter()
                .map(|s| s.trim_end_matches('/').to_owned())
                .collect();
            for e in fs::read_dir(&src).unwrap().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.path().is_dir() && !named.contains(&name) {
                    problems.push(format!("{folder}: src/{name}/ is not named in the README"));
                }
            }
        }
    }
    let tracked = std::process::Command::new("git")
        .args(["ls-files"])
        .current_dir(root)
        .output();
    match tracked {
        Ok(o) if o.status.success() => {
            let tops: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|p| p.split_once('/').map(|(top, _)| format!("{top}/")))
                .collect();
            for top in tops {
                if !rows.iter().any(|(f, _)| f.starts_with(&top)) {
                    problems.push(format!("{top}: a top-level folder with no layout row"));
                }
            }
        }
        // Outside a git checkout (a source tarball) only the rows themselves are checked.
        _ => eprintln!("readme_layout: not a git checkout; top-level folders not checked"),
    }
    assert!(
        problems.is_empty(),
        "README.md ## Layout does not match the tree (fix the table or the tree):\n{}",
        problems.join("\n")
    );
}
