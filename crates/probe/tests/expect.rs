//! The expected-bandwidth model against the figures of seed 000 and the GPUDirect case.

use probe::Verdict;
use probe::expect::{self, ExpectationInputs, Path};

mod seed_common;
use seed_common::{gpudirect_8x400, seed_000 as erdma_seed};

#[test]
fn seed_000_nccl_is_58_percent_of_one_nic_and_27_of_the_node() {
    let e = expect::expect(&erdma_seed()).unwrap();
    assert_eq!(e.path, Path::Staged);
    assert_eq!(e.limited_by, "NIC");
    assert!((e.gib_s - 20.4).abs() < 1e-9, "{}", e.gib_s);
    assert!(
        (e.node_line_gib_s - 44.24).abs() < 0.01,
        "{}",
        e.node_line_gib_s
    );
    // PCIe Gen5 x16 × 0.85 ≈ 49.9 GiB/s: above the NIC, so not the bound.
    let host = e.host_copy_gib_s.unwrap();
    assert!((host - 49.87).abs() < 0.05, "{host}");
    let j = expect::judge(11.8, &e, expect::DEFAULT_OK_FRACTION);
    assert!(
        j.summary.contains("58 % of one NIC, 27 % of the node"),
        "{}",
        j.summary
    );
    assert!((j.of_one_nic - 0.578).abs() < 0.001);
    assert!((j.of_node - 0.267).abs() < 0.001);
    assert_eq!(j.verdict, Verdict::Warn);
    assert!(
        j.summary.contains("NIC WRITE 20.4 GiB/s measured"),
        "inputs printed: {}",
        j.summary
    );
    assert!(j.fix.as_deref().unwrap_or_default().contains("NCCL_IB_HCA"));
    // Spreading over both NICs doubles the NIC bound; the host copy is still higher.
    let both = expect::expect(&ExpectationInputs {
        nics_used: 2,
        ..erdma_seed()
    })
    .unwrap();
    assert!((both.gib_s - 40.8).abs() < 1e-9);
    assert_eq!(expect::judge(38.0, &both, 0.8).verdict, Verdict::Ok);
}

#[test]
fn staged_rate_is_the_lowest_bound() {
    let slow_stream = ExpectationInputs {
        stream_gib_s: Some(0.84),
        ..erdma_seed()
    };
    let e = expect::expect(&slow_stream).unwrap();
    assert_eq!(e.limited_by, "staging stream");
    assert!((e.gib_s - 0.84).abs() < 1e-9);
    let slow_host = ExpectationInputs {
        host_copy_gib_s: Some(12.0),
        ..erdma_seed()
    };
    assert_eq!(expect::expect(&slow_host).unwrap().limited_by, "host copy");
    // Far below the expectation is a failure.
    let e = expect::expect(&erdma_seed()).unwrap();
    assert_eq!(expect::judge(0.67, &e, 0.8).verdict, Verdict::Fail);
}

#[test]
fn gpudirect_is_line_rate_times_nics_times_0_9() {
    let e = expect::expect(&gpudirect_8x400(8)).unwrap();
    assert_eq!(e.path, Path::GpuDirect);
    let want = 400e9 / 8.0 / (1u64 << 30) as f64 * 8.0 * 0.9;
    assert!((e.gib_s - want).abs() < 1e-9, "{} vs {want}", e.gib_s);
    assert!(e.host_copy_gib_s.is_none());
    let j = expect::judge(e.gib_s, &e, 0.8);
    assert_eq!(j.verdict, Verdict::Ok);
    assert!(j.fix.is_none());
    assert!(j.summary.contains("GPUDirect on"));
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    for bad in [
        ExpectationInputs {
            nics_used: 0,
            ..erdma_seed()
        },
        ExpectationInputs {
            nics_used: 3,
            ..erdma_seed()
        },
        ExpectationInputs {
            pcie_gen: 2,
            ..erdma_seed()
        },
        ExpectationInputs {
            nic_line_gbps: f64::NAN,
            ..erdma_seed()
        },
        ExpectationInputs {
            nic_write_gib_s: Some(-1.0),
            ..erdma_seed()
        },
    ] {
        let err = expect::expect(&bad).unwrap_err();
        assert!(err.to_string().starts_with("expectation inputs:"), "{err}");
    }
    // A NaN measurement is judged as zero, not propagated.
    let e = expect::expect(&erdma_seed()).unwrap();
    let j = expect::judge(f64::NAN, &e, 0.8);
    assert_eq!((j.verdict, j.measured_gib_s), (Verdict::Fail, 0.0));
    let r = probe::Report::from(&j);
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.to_json().unwrap().contains("expected-bandwidth"));
}

#[test]
fn inputs_read_the_profile_facts_json() {
    // k8s-render's `ExpectationFacts` serialises to these fields (no measured rates); the CLI
    // deserialises it into `ExpectationInputs` and adds what the run measured.
    let facts = r#"{"nic_line_gbps":190.0,"nics_per_node":2,"nics_used":1,"gpudirect":false,"pcie_gen":5,"pcie_lanes":16}"#;
    let mut inputs: ExpectationInputs = serde_json::from_str(facts).unwrap();
    assert_eq!(inputs.nic_write_gib_s, None);
    inputs.nic_write_gib_s = Some(20.4);
    assert_eq!(inputs, erdma_seed());
}
