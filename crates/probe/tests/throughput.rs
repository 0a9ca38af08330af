//! Throughput verdicts against the expectation model, with seed 000's figures: the RDT demo (NCCL
//! underneath) at 11.8 GiB/s over one of two 190 Gb/s eRDMA NICs whose WRITE reaches 20.4 GiB/s.

use std::path::PathBuf;

use probe::expect::{self, ExpectationInputs, Path};
use probe::throughput::{self, ThroughputSource};
use probe::{Report, Verdict, parse};

mod seed_common;
use seed_common::{gpudirect_8x400, seed_000};

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn seed_000_rate_is_58_percent_of_one_nic_27_of_the_node() {
    let e = expect::expect(&seed_000()).unwrap();
    let v = throughput::rate("nccl-rdt", "RDT demo over NCCL", 11.8).against(&e, 0.8);
    assert_eq!(v.kind, ThroughputSource::Rate);
    assert_eq!(v.run_verdict, Verdict::Info);
    assert_eq!(v.verdict, Verdict::Warn);
    let j = v.expectation.as_ref().unwrap();
    assert_eq!(j.fractions(), "58 % of one NIC, 27 % of the node");
    assert_eq!(j.expectation.path, Path::Staged);
    assert_eq!(j.expectation.inputs, seed_000());
    let c = v.check();
    assert!(
        c.summary.contains("58 % of one NIC, 27 % of the node"),
        "{}",
        c.summary
    );
    assert!(
        c.summary
            .contains("2 NIC(s) × 190 Gb/s per node, 1 used; GPUDirect off"),
        "inputs printed: {}",
        c.summary
    );
    assert!(c.fix.unwrap().contains("NCCL_IB_HCA"));
}

#[test]
fn seed_000_rdt_demo_output_against_the_model() {
    let run = parse::parse_rdt(&fixture("logs/rdt-demo-ok.log")).unwrap();
    let e = expect::expect(&seed_000()).unwrap();
    let v = throughput::rdt(&run).against(&e, expect::DEFAULT_OK_FRACTION);
    assert_eq!(v.run_verdict, Verdict::Info, "{}", v.summary);
    // Iterations 1 and 2: 11.51 and 11.84 GiB/s, mean 11.675.
    let m = v.measured_gib_s.unwrap();
    assert!((m - 11.675).abs() < 1e-9, "{m}");
    let j = v.expectation.as_ref().unwrap();
    assert_eq!(j.fractions(), "57 % of one NIC, 26 % of the node");
    assert_eq!(v.verdict, Verdict::Warn);
    assert!(
        v.summary
            .contains("RDT over eRDMA: 11.68 GiB/s steady state")
    );

    // Human: the fractions and the inputs in the table, the model as a note.
    let r = Report::from(&v);
    let [verdict, id, _, detail, fix] = &r.rows()[0];
    assert_eq!((verdict.as_str(), id.as_str()), ("WARN", "rdt-bandwidth"));
    assert!(
        detail.contains("57 % of one NIC, 26 % of the node"),
        "{detail}"
    );
    assert!(detail.contains("NIC WRITE 20.4 GiB/s measured"), "{detail}");
    assert!(fix.contains("NCCL_IB_HCA"), "{fix}");
    let table = r.render_table();
    assert!(table.starts_with("Benchmark — WARN"), "{table}");
    assert!(table.contains("staged = min("), "{table}");
    // JSON: the judgement with the model's inputs, readable back.
    let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
    let x = &json["items"][0]["expectation"];
    assert!(
        (x["of_one_nic"].as_f64().unwrap() - 0.5723).abs() < 1e-3,
        "{x}"
    );
    assert_eq!(x["expectation"]["path"], "staged");
    assert_eq!(x["expectation"]["limited_by"], "NIC");
    assert_eq!(x["expectation"]["inputs"]["nic_line_gbps"], 190.0);
    assert_eq!(x["expectation"]["inputs"]["nic_write_gib_s"], 20.4);
    let back: Report = serde_json::from_value(json).unwrap();
    assert_eq!(back, r);
}

#[test]
fn a_failed_rdt_run_fails_whatever_its_rate() {
    let run = parse::parse_rdt(&fixture("logs/rdt-checksum-mismatch.log")).unwrap();
    let e = expect::expect(&seed_000()).unwrap();
    let v = throughput::rdt(&run).against(&e, 0.8);
    assert_eq!(v.run_verdict, Verdict::Fail);
    assert_eq!(v.verdict, Verdict::Fail);
    assert!(v.summary.contains("bad checksum"), "{}", v.summary);
}

#[test]
fn nccl_tests_peak_busbw_in_gib_against_the_model() {
    let run = parse::parse_nccl_tests(&fixture("logs/nccl-tests-erdma.log")).unwrap();
    let v = throughput::nccl_tests(&run);
    assert_eq!(
        (v.kind, v.verdict),
        (ThroughputSource::NcclTests, Verdict::Info)
    );
    // 9.06 GB/s (decimal) = 8.44 GiB/s.
    let m = v.measured_gib_s.unwrap();
    assert!((m - 9.06e9 / (1u64 << 30) as f64).abs() < 1e-9, "{m}");
    assert!(
        v.summary
            .contains("9.06 GB/s = 8.44 GiB/s, average 9.02 GB/s"),
        "{}",
        v.summary
    );
    assert!(v.expectation.is_none());
    assert!(!v.check().summary.contains("of one NIC"));
    // Without a measured WRITE the NIC is line × 0.9 = 19.9 GiB/s: 42 % of it, warn.
    let e = expect::expect(&ExpectationInputs {
        nic_write_gib_s: None,
        ..seed_000()
    })
    .unwrap();
    let v = v.against(&e, 0.8);
    assert_eq!(v.verdict, Verdict::Warn);
    assert_eq!(
        v.expectation.as_ref().unwrap().fractions(),
        "42 % of one NIC, 19 % of the node"
    );
    assert!(v.check().summary.contains("NIC WRITE not measured"));
}

#[test]
fn nccl_tests_with_wrong_values_fail() {
    let run = parse::parse_nccl_tests(&fixture("logs/nccl-tests-wrong.log")).unwrap();
    let e = expect::expect(&seed_000()).unwrap();
    let v = throughput::nccl_tests(&run).against(&e, 0.8);
    assert_eq!(v.run_verdict, Verdict::Fail, "{}", v.summary);
    assert!(v.summary.contains("wrong values"), "{}", v.summary);
    assert!(v.check().fix.unwrap().contains("corrupted"));
}

#[test]
fn perftest_is_judged_against_one_nic_not_the_gpu_path() {
    // `ib_write_bw -d erdma_0 -x 1 -s 1048576 --report_gbits` between two seed-000 nodes.
    let text = "\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : erdma_0
 Number of qps   : 1\t\tTransport type : IW
 Connection type : RC\t\tUsing SRQ      : OFF
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 1048576    5000             175.40             175.21\t\t   0.020890
---------------------------------------------------------------------------------------
";
    let run = parse::parse_perftest(text).unwrap();
    let e = expect::expect(&seed_000()).unwrap();
    let v = throughput::perftest(&run).against(&e, 0.8);
    assert_eq!(v.subject, "RDMA_Write BW Test on erdma_0");
    let j = v.expectation.as_ref().unwrap();
    assert_eq!(j.expectation.path, Path::Nic);
    // 190 Gb/s × 0.9 = 19.9 GiB/s; 175.21 Gb/s = 20.4 GiB/s is above it.
    assert!(
        (j.expected_gib_s - 19.906).abs() < 0.01,
        "{}",
        j.expected_gib_s
    );
    assert_eq!(v.verdict, Verdict::Ok, "{}", j.summary);
    assert!(j.summary.contains("one NIC's RDMA WRITE"), "{}", j.summary);
    assert!(j.summary.contains("1 used;") && j.summary.contains("NIC WRITE not measured"));
    // The rxe fixture against an eRDMA NIC: far below, and the fix is about the NIC itself.
    let rxe = parse::parse_perftest(&fixture("ib_write_bw.txt")).unwrap();
    let v = throughput::perftest(&rxe).against(&e, 0.8);
    assert_eq!(v.verdict, Verdict::Fail);
    assert!(v.check().fix.unwrap().contains("ibv_devinfo -v"));
}

#[test]
fn no_figure_no_judgement() {
    let e = expect::expect(&seed_000()).unwrap();
    for v in [
        throughput::rate("x", "y", f64::NAN).against(&e, 0.8),
        throughput::rate("x", "y", -1.0).against_opt(Some(&e), 0.8),
    ] {
        assert_eq!(v.verdict, Verdict::Fail);
        assert!(v.expectation.is_none());
    }
    let v = throughput::rate("gpu-stage", "stage", 45.0).against_opt(None, 0.8);
    assert_eq!(v.verdict, Verdict::Info);
    let r = Report::from_throughput("bench", &[v]);
    assert!(r.notes.is_empty());
    assert!(!r.to_json().unwrap().contains("expectation"));
    // parse_any → verdict.
    let p = parse::parse_any(&fixture("logs/nccl-tests-erdma.log")).unwrap();
    assert_eq!(throughput::parsed(&p).unwrap().id, "nccl-tests-busbw");
    let p = parse::parse_any(&fixture("ibv_devinfo.txt")).unwrap();
    assert!(throughput::parsed(&p).is_none());
}

#[test]
fn gpudirect_cluster() {
    // 8 × 400 Gb/s ConnectX-7 with GPUDirect, one NIC per GPU: busbw per rank against one NIC.
    let e = expect::expect(&gpudirect_8x400(1)).unwrap();
    let v = throughput::rate("nccl", "all_reduce", 40.0).against(&e, 0.8);
    let j = v.expectation.unwrap();
    assert_eq!(j.expectation.path, Path::GpuDirect);
    assert_eq!(j.verdict, Verdict::Ok, "{}", j.summary);
    assert!(j.summary.contains("GPUDirect on"));
}

#[test]
fn expectation_table_lists_the_model_and_its_inputs() {
    let e = expect::expect(&seed_000()).unwrap();
    let t = probe::report::expectation_table(&e);
    for want in [
        "staged through host memory",
        "20.4 GiB/s (limited by the NIC)",
        "44.2 GiB/s",
        "2 × 190 Gb/s, 1 used",
        "Gen5 x16",
        "not measured",
    ] {
        assert!(t.contains(want), "{want} missing from\n{t}");
    }
    let g = expect::expect(&gpudirect_8x400(8)).unwrap();
    assert!(probe::report::expectation_table(&g).contains("- (GPUDirect)"));
}
