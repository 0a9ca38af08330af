#![no_main]
//! Fuzz the linter on manifests and the Dockerfile and text rules on the same bytes, and the
//! SARIF serializer on whatever they find.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let options = k8s_render::lint::LintOptions {
        device_pattern: Some("erdma_*".into()),
        ..Default::default()
    };
    let text = String::from_utf8_lossy(data);
    let mut findings = k8s_render::lint::lint_dockerfile("Dockerfile", &text, &options);
    findings.extend(k8s_render::lint::lint_text("fuzz.py", &text, &options));
    if let Ok(docs) = k8s_render::manifest::read_from("fuzz.yaml", data) {
        findings.extend(k8s_render::lint::lint(&docs, &options));
    }
    let log = k8s_render::sarif::lint_log(&findings, &k8s_render::sarif::Tool::rdmakit("0"));
    assert_eq!(log["runs"][0]["results"].as_array().map(Vec::len), Some(findings.len()));
});
