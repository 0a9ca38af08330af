//! nccl-tests (text and JSON), RDT demo, ibv_devinfo and perftest parsers.

use std::path::PathBuf;

use probe::parse::{self, BwUnit};

fn text(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn nccl_tests_launcher_log() {
    let r = parse::parse_nccl_tests(&text("logs/nccl-tests-erdma.log")).unwrap();
    assert_eq!(r.rows.len(), 5);
    let first = &r.rows[0];
    assert_eq!(first.size, 536_870_912);
    assert_eq!(first.count, 134_217_728);
    assert_eq!(first.dtype, "float");
    assert_eq!(first.redop, "sum");
    assert_eq!(first.root, Some(-1));
    let oop = first.out_of_place.as_ref().unwrap();
    assert_eq!(oop.time_us, 90210.0);
    assert_eq!(oop.algbw_gbps, 5.95);
    assert_eq!(oop.busbw_gbps, 8.93);
    assert_eq!(oop.wrong, None, "N/A");
    assert_eq!(first.in_place.as_ref().unwrap().busbw_gbps, 8.95);
    assert_eq!(r.avg_busbw_gbps, Some(9.02337));
    assert_eq!(r.out_of_bounds, Some(0));
    assert_eq!(r.nccl_version.as_deref(), Some("2.19.3+cuda12.2"));
    assert_eq!(r.header.min_bytes, Some(536_870_912));
    assert_eq!(r.header.max_bytes, Some(8_589_934_592));
    assert_eq!(r.header.iters, Some(20));
    assert_eq!(r.header.warmup_iters, Some(5));
    assert_eq!(r.header.validation, Some(0));
    assert_eq!(r.ranks.len(), 4);
    assert_eq!(r.ranks[2].host, "nccl-test-erdma-worker-1");
    assert_eq!(r.ranks[2].gpu, "NVIDIA L20");
    assert_eq!(r.peak_busbw_gbps(), Some(9.06));
    assert_eq!(r.total_wrong(), None);
}

#[test]
fn nccl_tests_wrong_values() {
    let r = parse::parse_nccl_tests(&text("logs/nccl-tests-wrong.log")).unwrap();
    assert_eq!(r.header.tests_version.as_deref(), Some("2.17.6"));
    assert_eq!(r.header.collective.as_deref(), Some("all_reduce_perf"));
    assert_eq!(r.rows[1].out_of_place.as_ref().unwrap().wrong, Some(12));
    assert_eq!(r.total_wrong(), Some(12));
    assert_eq!(r.out_of_bounds, Some(12));
}

#[test]
fn nccl_tests_old_format_without_root_and_with_timestamps() {
    let t = "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n\
             \x20    1048576        262144     float     sum    101.2   10.36   15.54  0e+00    100.9   10.39   15.59  0e+00\n\
             \x20    2097152        524288     float     sum    150.0   13.98   20.97  0e+00    149.1   14.07   21.10  0e+00  2025-01-02 03:04:05\n";
    let r = parse::parse_nccl_tests(t).unwrap();
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.rows[0].root, None);
    assert_eq!(r.rows[1].in_place.as_ref().unwrap().busbw_gbps, 21.10);
    assert_eq!(r.rows[1].out_of_place.as_ref().unwrap().wrong, Some(0));
}

#[test]
fn nccl_tests_with_mpi_tagged_output() {
    let t = "[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
             [1,0]<stdout>:   536870912     134217728     float     sum      -1    90210    5.95    8.93      0    90011    5.96    8.95      0\n\
             [1,0]<stdout>:# Avg bus bandwidth    : 8.94 \n";
    let r = parse::parse_nccl_tests(t).unwrap();
    assert_eq!(r.rows.len(), 1);
    assert_eq!(r.rows[0].in_place.as_ref().unwrap().wrong, Some(0));
    assert_eq!(r.avg_busbw_gbps, Some(8.94));
}

#[test]
fn parse_any_recognises_each_format() {
    use probe::parse::Parsed;
    let kind = |name: &str| match parse::parse_any(&text(name)) {
        Some(Parsed::NcclTests(_)) => "nccl-tests",
        Some(Parsed::Rdt(_)) => "rdt",
        Some(Parsed::Perftest(_)) => "perftest",
        Some(Parsed::IbvDevinfo(_)) => "ibv_devinfo",
        None => "none",
    };
    assert_eq!(kind("logs/nccl-tests-erdma.log"), "nccl-tests");
    assert_eq!(kind("nccl-tests.json"), "nccl-tests");
    assert_eq!(kind("logs/rdt-demo-ok.log"), "rdt");
    assert_eq!(kind("ib_write_bw.txt"), "perftest");
    assert_eq!(kind("ibv_devinfo.txt"), "ibv_devinfo");
    assert_eq!(kind("logs/nccl-memlock.log"), "none");
    let json = serde_json::to_value(parse::parse_any(&text("ib_write_bw.txt")).unwrap()).unwrap();
    assert_eq!(json["kind"], "perftest");
    assert_eq!(json["result"]["bw"][0]["bytes"], 65536);
}

#[test]
fn nccl_tests_json_output() {
    let j = text("nccl-tests.json");
    let r = parse::parse_nccl_tests_json(&j).unwrap();
    assert_eq!(r.nccl_version.as_deref(), Some("2.30.7"));
    assert_eq!(r.header.collective.as_deref(), Some("all_reduce_perf"));
    assert_eq!(r.header.ngpus, Some(1));
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.rows[0].root, Some(-1));
    assert_eq!(r.rows[0].out_of_place.as_ref().unwrap().busbw_gbps, 8.93);
    assert_eq!(r.rows[1].in_place.as_ref().unwrap().wrong, Some(0));
    assert_eq!(r.avg_busbw_gbps, Some(8.99));
    assert_eq!(r.out_of_bounds, Some(0));
    assert_eq!(r.ranks[0].host, "nccl-test-erdma-worker-0");
    // Text and JSON of the same kind of run agree on the shape.
    let e = parse::parse_nccl_tests_json("{\"results\": [{\"size\": 8}]}").unwrap_err();
    assert!(e.to_string().contains("results[0]"), "{e}");
    let e = parse::parse_nccl_tests_json("{").unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
}

#[test]
fn nccl_tests_rejects_other_text() {
    let e = parse::parse_nccl_tests("hello\nNCCL INFO something\n").unwrap_err();
    assert_eq!(e.what, "nccl-tests");
    assert!(e.message.contains("Avg bus bandwidth"));
}

#[test]
fn rdt_demo_output() {
    let r = parse::parse_rdt(&text("logs/rdt-demo-ok.log")).unwrap();
    assert_eq!(r.iterations.len(), 3);
    let i1 = &r.iterations[1];
    assert_eq!(i1.iter, 1);
    assert_eq!(i1.bytes, 512 << 20);
    assert_eq!(i1.device, "cuda:0");
    assert_eq!(i1.time_ms, 43.5);
    assert_eq!(i1.gib_per_s, 11.51);
    assert!(i1.checksum_ok);
    assert_eq!(r.final_status, Some(("eRDMA".into(), true)));
    assert!(r.ok());
    assert_eq!(r.cross_node(), Some(true));
    let ss = r.steady_state_gib_per_s().unwrap();
    assert!((ss - 11.675).abs() < 1e-9, "{ss}");
    assert_eq!(r.total_bytes(), 3 * (512 << 20));
    assert_eq!(
        r.producer.as_ref().unwrap().gpu,
        "NVIDIA RTX PRO 5000 72GB Blackwell"
    );
}

#[test]
fn rdt_demo_failed_checksum() {
    let r = parse::parse_rdt(&text("logs/rdt-checksum-mismatch.log")).unwrap();
    assert_eq!(r.iterations.len(), 1);
    assert!(!r.iterations[0].checksum_ok);
    assert!(!r.ok());
    assert!(parse::parse_rdt("nothing here").is_err());
    // Ray prefixes actor output.
    let r = parse::parse_rdt("(Consumer pid=3, ip=10.0.0.1) iter 4: 1 GiB -> cuda:1 in 80.0 ms (12.50 GiB/s), checksum OK\n").unwrap();
    assert_eq!(r.iterations[0].bytes, 1 << 30);
    assert_eq!(r.iterations[0].device, "cuda:1");
}

#[test]
fn ibv_devinfo_output() {
    let devs = parse::parse_ibv_devinfo(&text("ibv_devinfo.txt")).unwrap();
    assert_eq!(devs.len(), 2);
    let e = &devs[0];
    assert_eq!(e.hca_id, "erdma_0");
    assert_eq!(e.transport.as_deref(), Some("eRDMA (0)"));
    assert_eq!(e.fw_ver.as_deref(), Some("0.2.0"));
    assert_eq!(e.node_guid.as_deref(), Some("0216:3eff:fe0a:054c"));
    assert_eq!(e.vendor_id_num(), Some(0x1ded));
    assert_eq!(e.vendor_part_id.as_deref(), Some("4223"));
    assert_eq!(e.phys_port_cnt, Some(1));
    let p = &e.ports[0];
    assert_eq!(p.port, 1);
    assert!(p.is_active());
    assert_eq!(p.max_mtu.as_deref(), Some("4096 (5)"));
    assert_eq!(p.active_mtu.as_deref(), Some("1024 (3)"));
    assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
    let m = &devs[1];
    assert_eq!(m.hca_id, "mlx5_0");
    assert_eq!(m.ports[0].link_layer.as_deref(), Some("InfiniBand"));
    assert_eq!(
        m.ports[0].gids.get(&0).map(String::as_str),
        Some("fe80:0000:0000:0000:b8ce:f603:00a1:4e2c")
    );
    assert_eq!(m.extra.get("max_qp").map(String::as_str), Some("131072"));
    // The seed's truncated form (`head -12`, `...`).
    let devs = parse::parse_ibv_devinfo(&text("logs/worker-verify.log")).unwrap();
    assert_eq!(devs[0].ports[0].state.as_deref(), Some("PORT_ACTIVE (4)"));
    let e = parse::parse_ibv_devinfo("No IB devices found\n").unwrap_err();
    assert!(e.message.contains("No IB devices found"));
    let e = parse::parse_ibv_devinfo("hca_id: x\n port: one\n").unwrap_err();
    assert_eq!(e.line, Some(2));
}

#[test]
fn perftest_write_bw_client() {
    let r = parse::parse_perftest(&text("ib_write_bw.txt")).unwrap();
    assert_eq!(r.test.as_deref(), Some("RDMA_Write BW Test"));
    assert_eq!(r.device(), Some("rxe0"));
    assert_eq!(r.settings.get("GID index").map(String::as_str), Some("1"));
    assert_eq!(r.settings.get("Mtu").map(String::as_str), Some("1024[B]"));
    assert_eq!(
        r.settings.get("rdma_cm QPs").map(String::as_str),
        Some("OFF")
    );
    assert_eq!(
        r.settings.get("Connection type").map(String::as_str),
        Some("RC")
    );
    assert_eq!(r.unit, Some(BwUnit::MiBps));
    assert_eq!(r.bw.len(), 1);
    let row = &r.bw[0];
    assert_eq!(row.bytes, 65536);
    assert_eq!(row.iterations, 5000);
    assert_eq!(row.bw_peak, 1103.45);
    assert_eq!(row.bw_average, 1101.22);
    assert_eq!(row.msg_rate_mpps, 0.017620);
    let g = r.best_average_gib_per_s().unwrap();
    assert!((g - 1101.22 / 1024.0).abs() < 1e-9);
}

#[test]
fn perftest_gbits_and_latency() {
    let t = "---\n                    RDMA_Write BW Test\n Device         : erdma_0\n #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 1048576    5000             163.40             163.21\t\t   0.019456\n";
    let r = parse::parse_perftest(t).unwrap();
    assert_eq!(r.unit, Some(BwUnit::Gbps));
    assert_eq!(r.bw[0].bw_average, 163.21);
    assert!((r.best_average_gib_per_s().unwrap() - 163.21e9 / 8.0 / 1073741824.0).abs() < 1e-9);
    let t = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n 2       1000          3.10           8.52         3.21             3.25             0.11            3.60                    8.52   \n";
    let r = parse::parse_perftest(t).unwrap();
    assert_eq!(r.unit, None);
    assert_eq!(r.lat[0].bytes, 2);
    assert_eq!(r.lat[0].values.get("t_avg[usec]"), Some(&3.25));
    assert_eq!(r.lat[0].values.get("99.9% percentile[usec]"), Some(&8.52));
    assert!(parse::parse_perftest("Couldn't connect to 10.0.0.1:18515\n").is_err());
}

#[test]
fn sizes() {
    assert_eq!(parse::parse_size("512", "MiB"), Some(512 << 20));
    assert_eq!(parse::parse_size("1.5", "GiB"), Some(3 << 29));
    assert_eq!(parse::parse_size("64", "KB"), Some(64_000));
    assert_eq!(parse::parse_size("-1", "B"), None);
    assert_eq!(parse::parse_size("NaN", "B"), None);
    assert_eq!(parse::parse_size("1", "parsecs"), None);
}

/// The bytes an all_reduce table must move across the nodes, from the log and before there is one: seed
/// 002's 512 MiB..8 GiB doubling over two nodes, 20 timed iterations.
#[test]
fn all_reduce_floor_from_the_table_and_from_the_sizes_asked_for() {
    let r = parse::parse_nccl_tests(&text("logs/nccl-tests-erdma.log")).unwrap();
    let sizes: u64 = (0..5).map(|i| 536_870_912u64 << i).sum();
    assert_eq!(r.all_reduce_min_bytes(2), sizes * 20 * 2);
    assert_eq!(r.all_reduce_min_bytes(4), sizes * 20 * 2 * 3);
    assert_eq!(
        r.all_reduce_min_bytes(1),
        0,
        "one node sends nothing to another"
    );
    let planned = parse::nccl_tests::planned_all_reduce_min_bytes(
        parse::nccl_tests::parse_size("512M").unwrap(),
        parse::nccl_tests::parse_size("8G").unwrap(),
        parse::nccl_tests::DEFAULT_ITERS,
        2,
    );
    assert_eq!(
        planned,
        r.all_reduce_min_bytes(2),
        "the plan's floor is the log's"
    );
    assert_eq!(
        parse::nccl_tests::planned_all_reduce_min_bytes(0, 1 << 30, 20, 2),
        0
    );
    for (s, b) in [
        ("1024", Some(1024)),
        ("4K", Some(4096)),
        ("512m", Some(512 << 20)),
        ("8G", Some(8 << 30)),
    ] {
        assert_eq!(parse::nccl_tests::parse_size(s), b, "{s}");
    }
    for bad in ["", "G", "1.5G", "-1", "8T", "x"] {
        assert_eq!(parse::nccl_tests::parse_size(bad), None, "{bad}");
    }
}
