//! `bench::nccl_tests` / `rdt` / `perftest` with options, as scripts call them: the run judged against
//! the rate a profile's instance type should reach (`probe::expect`), the check and the model's table
//! recorded in the report; without a profile, the run on its own. The fixtures are the seeds' logs.
#![allow(clippy::unwrap_used)]

mod common;

use common::fixture;
use rdmakit::host::RunOutcome;
use rdmakit::report::Status;

fn run(script: &str) -> RunOutcome {
    let out = tempfile::tempdir().unwrap();
    let (r, _) = common::dry_run("b", script, out.path(), &[], None);
    assert!(
        r.error.is_none(),
        "{}",
        r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
    );
    r
}

#[test]
fn rdt_against_the_profile_records_the_fraction_and_the_model() {
    let rdt = fixture("logs/rdt-demo-ok.log");
    let r = run(&format!(
        r#"
        step("bench");
        let d = bench::rdt({rdt:?}, #{{ profile: "aliyun-erdma", instance_type: "ecs.ebmgn9gc.64xlarge", nic_write_gib_s: 20.4, name: "RDT demo vs expected" }});
        // The parse fields stay; the verdict, its check and the model come on top.
        if d.iterations != 3 || !d.ok {{ throw `rdt ${{d}}`; }}
        if d.bench.expectation == () {{ throw `no expectation: ${{d.bench}}`; }}
        if !d.expectation_table.contains("staged through host memory") {{ throw d.expectation_table; }}
        if d.check.id != "rdt-bandwidth" {{ throw `check ${{d.check}}`; }}
        "#
    ));
    let c = r
        .report
        .checks
        .iter()
        .find(|c| c.name == "RDT demo vs expected")
        .unwrap_or_else(|| panic!("{:?}", r.report.checks));
    // Seed 000: 11.7 GiB/s steady state of the node's expectation is between 40 % and 80 %: a warning,
    // recorded as a warning with the fractions in the detail.
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.detail.contains("% of one NIC"), "{}", c.detail);
    let t = r
        .report
        .tables
        .iter()
        .find(|t| t.title == "RDT demo vs expected: expected rate (model)")
        .unwrap_or_else(|| panic!("{:?}", r.report.tables));
    assert!(
        t.text.contains("190") || t.text.contains("20.4"),
        "{}",
        t.text
    );
    // Dry-run: nothing measured.
    assert!(r.report.measurements.is_empty());
}

#[test]
fn nccl_tests_and_perftest_judge_with_and_without_a_profile() {
    let nccl = fixture("logs/nccl-tests-erdma.log");
    let wrong = fixture("logs/nccl-tests-wrong.log");
    let perf = fixture("ib_write_bw.txt");
    let r = run(&format!(
        r#"
        step("bench");
        // Seed 002's 9.06 GB/s peak busbw (8.44 GiB/s) against one 190 Gb/s eRDMA NIC (19.9 GiB/s): 42 %,
        // between the fail and ok fractions.
        let n = bench::nccl_tests({nccl:?}, #{{ profile: "aliyun-erdma", instance_type: "ecs.ebmgn9gc.64xlarge", name: "busbw vs expected" }});
        if n.peak_busbw_gbps != 9.06 || n.bench.verdict != "warn" || n.check.verdict != "warn" {{ throw `nccl ${{n}}`; }}
        let f = n.bench.expectation.fraction;
        if f < 0.42 || f > 0.43 {{ throw `fraction ${{f}}`; }}
        // Without a profile: the run alone, no model.
        let w = bench::nccl_tests({wrong:?}, #{{ name: "wrong values" }});
        if w.expectation_table != () || w.bench.expectation != () {{ throw `alone ${{w}}`; }}
        // perftest is held against one NIC's own expectation; record: false leaves the report alone.
        let p = bench::perftest({perf:?}, #{{ profile: "aliyun-erdma", instance_type: "ecs.ebmgn9gc.64xlarge", record: false }});
        if p.bench.expectation.expectation.path != "nic" {{ throw `perftest ${{p.bench}}`; }}
        "#
    ));
    let status = |name: &str| {
        r.report
            .checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name}: {:?}", r.report.checks))
            .status
    };
    assert_eq!(status("busbw vs expected"), Status::Warn);
    assert_eq!(status("wrong values"), Status::Fail);
    assert_eq!(r.report.checks.len(), 2, "{:?}", r.report.checks);
    assert_eq!(r.report.tables.len(), 1, "{:?}", r.report.tables);
}

#[test]
fn bad_options_are_script_errors_that_say_what_to_pass() {
    let rdt = fixture("logs/rdt-demo-ok.log");
    for (opts, needle) in [
        (r#"#{ profil: "aliyun-erdma" }"#, "profil"),
        (r#"#{ profile: "aliyun-erdma-dra" }"#, "nic_gbps"),
        (
            r#"#{ profile: "aliyun-erdma", instance_type: "ecs.ebmgn9gc.64xlarge", ok_fraction: 2.0 }"#,
            "ok_fraction 2",
        ),
    ] {
        let out = tempfile::tempdir().unwrap();
        let (r, _) = common::dry_run(
            "b",
            &format!("bench::rdt({rdt:?}, {opts});"),
            out.path(),
            &[],
            None,
        );
        let e = r
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("{opts}: no error"));
        assert!(e.to_string().contains(needle), "{opts}: {e}");
    }
}
