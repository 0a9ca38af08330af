//! Helpers shared by the doctor test files: read a fixture log, diagnose it, find a finding.

#![allow(dead_code)]

use std::path::PathBuf;

use probe::doctor::{self, Diagnosis, Finding};

/// The text of `tests/fixtures/logs/<name>`.
pub fn log(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The diagnosis of a fixture log.
pub fn diag(name: &str) -> Diagnosis {
    doctor::diagnose(&log(name)).expect("builtin knowledge base compiles")
}

/// The ids found, in order.
pub fn ids(d: &Diagnosis) -> Vec<&str> {
    d.findings.iter().map(|f| f.id.as_str()).collect()
}

/// Find a finding and return it, with a helpful panic listing what was found.
pub fn find<'a>(d: &'a Diagnosis, id: &str) -> &'a Finding {
    d.findings.iter().find(|f| f.id == id).unwrap_or_else(|| {
        panic!(
            "no `{id}` finding; found: {:?}",
            d.findings
                .iter()
                .map(|f| (&f.id, f.line))
                .collect::<Vec<_>>()
        )
    })
}

/// A finding's fix, empty when it has none.
pub fn fix(f: &Finding) -> &str {
    f.fix.as_deref().unwrap_or_default()
}
