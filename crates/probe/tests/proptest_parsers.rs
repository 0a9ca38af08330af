//! No input makes a parser or the doctor panic.

use proptest::prelude::*;

fn lines_strategy() -> impl Strategy<Value = String> {
    // Mix of arbitrary text and fragments of the real formats, so the parsers' deeper branches run.
    let frag = prop_oneof![
        Just("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong".to_string()),
        Just("   536870912     134217728     float     sum      -1    90210    5.95    8.93    N/A    90011    5.96    8.95    N/A".to_string()),
        Just("# Avg bus bandwidth    : 9.02337".to_string()),
        Just("iter 1: 512 MiB -> cuda:0 in 43.5 ms (11.51 GiB/s), checksum OK".to_string()),
        Just("RDT over eRDMA: OK".to_string()),
        Just("hca_id:\terdma_0".to_string()),
        Just("\t\tport:\t1".to_string()),
        Just(" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]".to_string()),
        Just(" 65536      5000             1103.45            1101.22\t\t   0.017620".to_string()),
        Just("NCCL WARN Call to ibv_create_qp failed with error Unknown error -12".to_string()),
        Just("NET/Socket : Using [0]eth0".to_string()),
        Just("*** SIGSEGV received".to_string()),
        Just("@ ncclNetInit()".to_string()),
        Just("NCCL version 2.28.9+cuda13.0".to_string()),
        Just("NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]".to_string()),
        Just("NCCL INFO NCCL_IB_HCA set to mlx5_0".to_string()),
        Just("NCCL INFO NET/IB : No device found.".to_string()),
        Just("NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth1".to_string()),
        Just("NCCL WARN Bootstrap : no socket interface found".to_string()),
        Just("NCCL INFO Initialized NET plugin Socket".to_string()),
        Just("NET/Plugin: Plugin load (libx.so) returned 2 : nope".to_string()),
        Just("with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGidsfe80::1 hca mlx5_0".to_string()),
        Just("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds".to_string()),
        Just("ibv_reg_mr(address=0x1, length=75161927680, access=0xf) failed: Cannot allocate memory".to_string()),
        Just("$ ulimit -l".to_string()),
        Just("64".to_string()),
        "\\PC{0,80}",
        "[0-9 .:#-]{0,60}",
    ];
    prop::collection::vec(frag, 0..30).prop_map(|v| v.join("\n"))
}

mod seed_common;

/// Seed 000's expectation (two 190 Gb/s eRDMA NICs, one used, WRITE 20.4 GiB/s, staged).
fn seed_000() -> probe::expect::Expectation {
    match probe::expect::expect(&seed_common::seed_000()) {
        Ok(e) => e,
        Err(e) => panic!("seed 000 inputs: {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn nccl_tests_never_panics(s in lines_strategy()) {
        if let Ok(run) = probe::parse::parse_nccl_tests(&s) {
            let _ = probe::throughput::nccl_tests(&run).against(&seed_000(), 0.8).check();
        }
    }

    #[test]
    fn nccl_tests_json_never_panics(s in "\\PC{0,200}") {
        let _ = probe::parse::parse_nccl_tests_json(&s);
        let wrapped = format!("{{\"results\":[{s}]}}");
        let _ = probe::parse::parse_nccl_tests_json(&wrapped);
    }

    #[test]
    fn rdt_never_panics(s in lines_strategy()) {
        if let Ok(run) = probe::parse::parse_rdt(&s) {
            let _ = probe::throughput::rdt(&run).against(&seed_000(), 0.8).check();
        }
    }

    #[test]
    fn ibv_devinfo_never_panics(s in lines_strategy()) {
        let _ = probe::parse::parse_ibv_devinfo(&s);
    }

    #[test]
    fn perftest_never_panics(s in lines_strategy()) {
        if let Ok(run) = probe::parse::parse_perftest(&s) {
            let _ = probe::throughput::perftest(&run).against(&seed_000(), 0.8).check();
        }
    }

    #[test]
    fn doctor_never_panics_and_orders_findings(s in lines_strategy()) {
        let d = probe::doctor::diagnose(&s).unwrap();
        let lines: Vec<usize> = d.findings.iter().map(|f| f.line).collect();
        let mut sorted = lines.clone();
        sorted.sort_unstable();
        prop_assert_eq!(lines, sorted);
        for f in &d.findings {
            prop_assert!(f.line >= 1 && f.line <= d.lines_read.max(1));
        }
    }

    #[test]
    fn doctor_reader_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = probe::doctor::diagnose_reader(std::io::Cursor::new(bytes)).unwrap();
    }

    #[test]
    fn resource_slices_and_cel_never_panic(s in "\\PC{0,200}", sel in "\\PC{0,120}") {
        let _ = probe::preflight::parse_resource_slices(&s);
        let wrapped = format!("{{\"items\":[{{\"spec\":{{\"driver\":\"d\",\"devices\":[{s}]}}}}]}}");
        let devices = probe::preflight::parse_resource_slices(&wrapped).unwrap_or_default();
        let _ = probe::preflight::parse_device_class(&s);
        let _ = probe::preflight::device_class_checks("c", &[sel.clone(), s.clone()], &devices);
        let _ = probe::preflight::dra_selector_gaps(&[sel, s], &devices);
    }

    #[test]
    fn expectation_never_panics(gbps in any::<f64>(), nics in 0u32..9, used in 0u32..9, g in 0u8..8, lanes in 0u8..33, m in any::<f64>(), gdr in any::<bool>()) {
        let inputs = probe::expect::ExpectationInputs {
            nic_line_gbps: gbps, nics_per_node: nics, nics_used: used, gpudirect: gdr,
            pcie_gen: g, pcie_lanes: lanes, nic_write_gib_s: None, host_copy_gib_s: None, stream_gib_s: None,
        };
        if let Ok(e) = probe::expect::expect(&inputs) {
            let j = probe::expect::judge(m, &e, 0.8);
            prop_assert!(j.fraction.is_finite() && j.fraction >= 0.0);
            let v = probe::throughput::rate("r", "s", m).against(&e, 0.8);
            prop_assert!(v.run_verdict < probe::Verdict::Warn || v.verdict >= v.run_verdict);
            if let Ok(run) = probe::parse::parse_perftest(&format!(" #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n 65536 10 {m} {m} 0.1\n")) {
                let _ = probe::throughput::perftest(&run).against(&e, 0.8).check();
            }
        }
    }

    #[test]
    fn limit_parsers_never_panic(s in "\\PC{0,120}") {
        let _ = probe::facts::limits::parse_limits(&s);
        let _ = probe::facts::limits::parse_status_caps(&s);
        let _ = probe::facts::nccl::parse_nccl_h(&s);
        let _ = probe::facts::NcclVersion::parse(&s);
        let _ = probe::preflight::parse_quantity(&s);
        let _ = probe::preflight::parse_pod_probe(&s);
        let pod = probe::preflight::PodFacts::from_pod_probe("n", "p", None, &[], &s);
        let _ = probe::preflight::evaluate(
            &probe::preflight::ClusterSnapshot { nodes: vec![], pods: vec![pod] },
            &probe::preflight::PreflightPolicy::default(),
        );
    }
}
