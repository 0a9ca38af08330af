//! `rdmakit check`'s evidence, end to end without a cluster: a report built from this machine's own dump
//! (the real script under the real `sh`) plus judged matrix cells validates against the committed JSON
//! Schema, a report that breaks the schema is refused by it, and the HTML page loads in headless Chromium
//! offline with the heatmap and every finding in its DOM.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use probe::check::{CheckReport, Dump, Measured, NodeReport, PodFacts, SCHEMA, judge_cell};
use probe::counters::CounterDelta;
use probe::facts::DeviceKind;
use probe::{Check, Verdict};

fn no_skip() -> bool {
    std::env::var_os("RDMAKIT_NO_SKIP").is_some()
}

fn delta(tx: u64, rx: u64) -> CounterDelta {
    CounterDelta {
        device: "mlx5_0".into(),
        port: 1,
        kind: DeviceKind::classify("mlx5_0", None, None),
        deltas: BTreeMap::new(),
        reset: Vec::new(),
        tx_bytes: Some(tx),
        rx_bytes: Some(rx),
        tx_packets: None,
        rx_packets: None,
    }
}

/// Two nodes' facts from this machine's dump, findings, and a 2-node ring on one rail: one good cell, one
/// whose receiver's counters stayed flat.
fn report() -> CheckReport {
    let out = Command::new("sh")
        .args(["-c", probe::check::DUMP_SCRIPT])
        .output()
        .expect("sh runs");
    let dump = Dump::parse(&String::from_utf8_lossy(&out.stdout));
    let facts: Vec<PodFacts> = ["node-a", "node-b"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let tmp = tempfile::tempdir().expect("tempdir");
            let mut f = PodFacts::from_dump(&format!("rdmakit-check-x-{i}"), n, &dump, tmp.path())
                .expect("facts");
            f.env.insert("GLOO_SOCKET_IFNAME".into(), "^lo".into());
            f
        })
        .collect();
    let findings = probe::check::lint(&facts);
    let bytes = 1u64 << 30;
    let cells = vec![
        judge_cell(
            "node-a",
            "node-b",
            "mlx5_0",
            bytes,
            Measured {
                gib_s: Some(11.2),
                sender: Some(delta(bytes, 0)),
                receiver: Some(delta(0, bytes)),
                error: None,
            },
            Some(11.6),
        ),
        judge_cell(
            "node-b",
            "node-a",
            "mlx5_0",
            bytes,
            Measured {
                gib_s: Some(11.0),
                sender: Some(delta(bytes, 0)),
                receiver: Some(delta(0, 0)),
                error: None,
            },
            Some(11.6),
        ),
    ];
    let mut r = CheckReport {
        schema: SCHEMA.into(),
        rdmakit_version: "0.0.0-test".into(),
        profile: "mellanox-ib".into(),
        namespace: "default".into(),
        started: "2026-12-02T10:00:00Z".into(),
        seconds: 12.5,
        verdict: Verdict::Ok,
        state: vec![Check::new(
            "api-served",
            "ray.io/v1 RayCluster",
            Verdict::Ok,
            "served",
        )],
        nodes: facts
            .into_iter()
            .map(|facts| NodeReport { facts })
            .collect(),
        findings,
        matrix: cells,
        pair_plan: None,
        skipped: Vec::new(),
        pods: vec![
            "Pod/rdmakit-check-x-0".into(),
            "Pod/rdmakit-check-x-1".into(),
        ],
        kept: false,
    };
    r.verdict = r.worst();
    r
}

fn schema_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/check-report.v1.schema.json")
}

/// Validates `docs` with jsonschema; `Err` with the violations. `None`: no jsonschema here (a skip).
fn validate(docs: &[serde_json::Value]) -> Option<Result<(), String>> {
    let has = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .output();
    if !has.is_ok_and(|o| o.status.success()) {
        assert!(
            !no_skip(),
            "python3 with jsonschema is not installed (RDMAKIT_NO_SKIP is set; make test-deps installs it)"
        );
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let p = dir.path().join(format!("r{i}.json"));
        std::fs::write(&p, serde_json::to_vec(d).expect("json")).expect("write");
        files.push(p);
    }
    let script = "import json,sys,jsonschema\nschema=json.load(open(sys.argv[1]))\njsonschema.Draft202012Validator.check_schema(schema)\nv=jsonschema.Draft202012Validator(schema)\nbad=0\nfor p in sys.argv[2:]:\n    for e in v.iter_errors(json.load(open(p))):\n        bad+=1; print(p, list(e.absolute_path), e.message)\nsys.exit(1 if bad else 0)\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(schema_path())
        .args(&files)
        .output()
        .expect("python3 runs");
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

#[test]
fn the_report_validates_against_the_committed_schema() {
    let r = report();
    assert_eq!(
        r.verdict,
        Verdict::Fail,
        "the flat receiver and Gloo's `^` fail"
    );
    assert_eq!(r.exit_code(), probe::check::report::exit::FAIL);
    let v = serde_json::to_value(&r).expect("json");
    // The committed copy is the one the crate embeds.
    assert_eq!(
        std::fs::read_to_string(schema_path()).expect("schema"),
        probe::check::report::JSON_SCHEMA
    );
    let Some(res) = validate(std::slice::from_ref(&v)) else {
        println!(
            "SKIP the_report_validates_against_the_committed_schema: python3 with jsonschema is not installed"
        );
        return;
    };
    res.unwrap_or_else(|e| panic!("schema violations:\n{e}"));
    // The schema is not vacuous: a wrong version, a verdict it does not know, a cell without its rail.
    let mut bad = vec![v.clone(), v.clone(), v];
    bad[0]["schema"] = "rdmakit.check/v0".into();
    bad[1]["findings"][0]["verdict"] = "maybe".into();
    bad[2]["matrix"][0]
        .as_object_mut()
        .expect("cell")
        .remove("device");
    for b in &bad {
        assert!(
            validate(std::slice::from_ref(b))
                .expect("validator ran")
                .is_err(),
            "accepted: {}",
            &b.to_string()[..200]
        );
    }
}

#[test]
fn the_html_page_loads_offline_in_chromium_with_the_heatmap_and_findings() {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    else {
        assert!(
            !no_skip(),
            "chromium is not installed (RDMAKIT_NO_SKIP is set; make test-deps installs Debian's chromium)"
        );
        println!(
            "SKIP the_html_page_loads_offline_in_chromium_with_the_heatmap_and_findings: no chromium"
        );
        return;
    };
    let r = report();
    let html = probe::check::html::render(&r);
    // Self-contained: nothing to fetch at view time.
    for needle in ["<script src", "<link ", "http://", "https://", "@import"] {
        assert!(!html.contains(needle), "the page refers to {needle}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("check.html");
    std::fs::write(&page, &html).expect("write");
    let profile = dir.path().join("profile");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--dns-prefetch-disable",
            "--proxy-server=127.0.0.1:9",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the browser parsed, not what we wrote: the verdict badge, one heatmap per rail with a cell per
    // measured pair, every finding as a row.
    assert!(dom.contains("id=\"verdict\">FAIL<"), "{dom}");
    assert!(dom.contains("data-rail=\"mlx5_0\""), "{dom}");
    assert_eq!(dom.matches("<td class=\"cell ").count(), 2, "{dom}");
    let rows = dom.matches("<tr class=\"finding ").count();
    assert_eq!(rows, r.state.len() + r.findings.len(), "{dom}");
    assert!(
        dom.contains("gloo-socket-ifname") && dom.contains("receiver"),
        "{dom}"
    );
    // A screenshot renders; RDMAKIT_CHECK_SCREENSHOT=FILE keeps it (the README image comes from here).
    let shot = dir.path().join("shot.png");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let png = std::fs::read(&shot).unwrap_or_default();
    assert!(
        out.status.success() && png.starts_with(b"\x89PNG"),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(keep) = std::env::var_os("RDMAKIT_CHECK_SCREENSHOT") {
        std::fs::write(&keep, &png).expect("write the screenshot");
    }
}
