//! SARIF 2.1.0 output: logs of lint findings and validation violations decode as SARIF (the
//! typed structs serde-sarif generates from the OASIS schema) and validate against the schema.

use std::path::PathBuf;

use k8s_render::{lint, manifest, sarif, validate};
use serde_json::Value;

const BROKEN: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: rdma-test}\nspec:\n  hostNetwork: true\n  containers:\n  - name: c\n    image: busybox\n    env:\n    - {name: NCCL_IB_DISABLE, value: \"1\"}\n    volumeMounts:\n    - {name: shm, mountPath: /dev/shm}\n    resources:\n      limits: {aliyun/erdma: 1}\n";

fn logs() -> (Value, Value) {
    let docs = manifest::parse_str("out/bundle/<broken> pod.yaml", BROKEN).expect("parses");
    let findings = lint::lint(&docs, &lint::LintOptions::default());
    let violations = validate::validate(&docs, &validate::ValidateOptions::default());
    assert!(!findings.is_empty() && !violations.is_empty());
    let tool = sarif::Tool::rdmakit("0.1.0");
    (
        sarif::lint_log(&findings, &tool),
        sarif::validate_log(&violations, &tool),
    )
}

#[test]
fn lint_log_has_rules_results_regions_and_help() {
    let (log, _) = logs();
    assert_eq!(log["version"], "2.1.0");
    assert_eq!(log["$schema"], sarif::SCHEMA_URI);
    let run = &log["runs"][0];
    let rules = run["tool"]["driver"]["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), lint::rules().len(), "every rule is described");
    let results = run["results"].as_array().expect("results");
    let ipc = results
        .iter()
        .find(|r| r["ruleId"] == "rdma-missing-ipc-lock")
        .expect("IPC_LOCK finding");
    let index = ipc["ruleIndex"].as_u64().expect("index") as usize;
    assert_eq!(rules[index]["id"], "rdma-missing-ipc-lock");
    assert_eq!(rules[index]["name"], "RdmaMissingIpcLock");
    assert!(
        rules[index]["help"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Why: ibverbs pins"))
    );
    assert_eq!(ipc["level"], "error");
    assert!(
        ipc["message"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Fix: add `securityContext"))
    );
    let loc = &ipc["locations"][0]["physicalLocation"];
    assert_eq!(
        loc["artifactLocation"]["uri"], "out/bundle/%3Cbroken%3E%20pod.yaml",
        "file names become URI references"
    );
    assert!(loc["region"]["startLine"].as_u64().is_some_and(|l| l >= 6));
    // info findings are SARIF notes.
    assert!(
        results
            .iter()
            .all(|r| ["error", "warning", "note"].contains(&r["level"].as_str().unwrap_or("")))
    );
}

#[test]
fn validate_log_names_the_violation_class() {
    let (_, log) = logs();
    let results = log["runs"][0]["results"].as_array().expect("results");
    let mount = results
        .iter()
        .find(|r| r["properties"]["path"] == "spec.containers[0].volumeMounts[0].name")
        .expect("volumeMount violation");
    assert_eq!(mount["ruleId"], "validate-invalid-value");
    assert_eq!(
        mount["locations"][0]["physicalLocation"]["region"]["startLine"],
        12
    );
}

#[test]
fn logs_decode_as_typed_sarif() {
    let (a, b) = logs();
    for log in [a, b] {
        let typed: serde_sarif::sarif::Sarif =
            serde_json::from_value(log.clone()).expect("decodes as SARIF 2.1.0");
        let back = serde_json::to_value(&typed).expect("encodes");
        assert_eq!(
            back["runs"][0]["results"], log["runs"][0]["results"],
            "nothing lost in the typed round trip"
        );
    }
}

/// The OASIS schema serde-sarif ships (`src/schema.json`), found in cargo's registry sources.
fn sarif_schema() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let registries = std::fs::read_dir(home.join("registry/src")).ok()?;
    let mut found: Vec<PathBuf> = registries
        .flatten()
        .filter_map(|r| std::fs::read_dir(r.path()).ok())
        .flat_map(|d| d.flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with("serde-sarif-"))
        .map(|e| e.path().join("src/schema.json"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

#[test]
fn logs_validate_against_the_sarif_2_1_0_schema() {
    let no_skip = std::env::var_os("RDMAKIT_NO_SKIP").is_some();
    let Some(schema) = sarif_schema() else {
        assert!(
            !no_skip,
            "serde-sarif's schema.json is not in cargo's registry sources (RDMAKIT_NO_SKIP is set)"
        );
        println!(
            "SKIP logs_validate_against_the_sarif_2_1_0_schema: serde-sarif's schema.json is not in cargo's registry sources"
        );
        return;
    };
    let script = "import json,sys,jsonschema\nschema=json.load(open(sys.argv[1]))\nv=jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)\nbad=0\nfor p in sys.argv[2:]:\n    for e in v.iter_errors(json.load(open(p))):\n        bad+=1; print(p, list(e.absolute_path), e.message)\nsys.exit(1 if bad else 0)\n";
    let probe = std::process::Command::new("python3")
        .args(["-c", "import jsonschema"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(
            !no_skip,
            "python3 with jsonschema is not installed (RDMAKIT_NO_SKIP is set; make test-deps installs it)"
        );
        println!(
            "SKIP logs_validate_against_the_sarif_2_1_0_schema: python3 with jsonschema is not installed"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = logs();
    let mut files = Vec::new();
    for (name, log) in [("lint.sarif", a), ("validate.sarif", b)] {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(&log).expect("json")).expect("write");
        files.push(p);
    }
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&schema)
        .args(&files)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "SARIF schema violations ({}):\n{}{}",
        schema.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
