//! The broken-manifest corpus (`tests/fixtures/broken/`): each file is reported exactly as its
//! `# expect:` line says, and nothing else is reported.

use k8s_render::manifest::{self, Severity};
use k8s_render::validate::{self, ValidateOptions};

#[test]
fn every_broken_manifest_is_reported_as_expected() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/broken");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("corpus dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "corpus has {} files", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| {
                panic!(
                    "{}: first line must be `# expect: <severity> <path>`",
                    path.display()
                )
            });
        let (severity, field) = expect.split_once(' ').expect("severity and path");
        let docs = manifest::read_path(&path).expect("corpus files parse");
        let v = validate::validate(&docs, &ValidateOptions::default());
        let got: Vec<(String, String)> = v
            .iter()
            .map(|v| (v.severity.to_string(), v.location.path.to_string()))
            .collect();
        assert_eq!(
            got,
            [(severity.to_owned(), field.to_owned())],
            "{}: {v:#?}",
            path.display()
        );
        assert!(v[0].location.line.is_some(), "{}: no line", path.display());
        let want = if severity == "warning" {
            Severity::Warning
        } else {
            Severity::Error
        };
        assert_eq!(v[0].severity, want);
    }
}
