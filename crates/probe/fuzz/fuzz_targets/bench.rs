#![no_main]
//! Fuzz throughput verdicts: whatever `parse_any` recognises in arbitrary text is judged with
//! `probe::throughput` against an expectation built from the first bytes (any NIC rate, NIC count,
//! GPUDirect, PCIe generation, measured rates), then rendered as a report (table and JSON).
//! Nothing may panic, and every fraction must be finite.

use libfuzzer_sys::fuzz_target;
use probe::expect::{ExpectationInputs, expect};

fn f64_at(data: &[u8], at: usize) -> f64 {
    let mut b = [0u8; 8];
    for (i, x) in b.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    f64::from_le_bytes(b)
}

fn opt(data: &[u8], at: usize) -> Option<f64> {
    let v = f64_at(data, at);
    (data.get(at).copied().unwrap_or(0) & 1 == 1).then_some(v)
}

fuzz_target!(|data: &[u8]| {
    let head = data.get(..40).unwrap_or(data);
    let inputs = ExpectationInputs {
        nic_line_gbps: f64_at(head, 0),
        nics_per_node: u32::from(head.get(8).copied().unwrap_or(1) % 9),
        nics_used: u32::from(head.get(9).copied().unwrap_or(1) % 9),
        gpudirect: head.get(10).copied().unwrap_or(0) & 1 == 1,
        pcie_gen: head.get(11).copied().unwrap_or(5) % 8,
        pcie_lanes: head.get(12).copied().unwrap_or(16) % 33,
        nic_write_gib_s: opt(head, 13),
        host_copy_gib_s: opt(head, 21),
        stream_gib_s: opt(head, 29),
    };
    let expectation = expect(&inputs).ok();
    let text = String::from_utf8_lossy(data.get(40..).unwrap_or_default());
    let mut verdicts = Vec::new();
    if let Some(parsed) = probe::parse::parse_any(&text) {
        verdicts.extend(probe::throughput::parsed(&parsed));
    }
    verdicts.push(probe::throughput::rate("fuzz", "fuzz", f64_at(head, 0)));
    let verdicts: Vec<_> = verdicts
        .into_iter()
        .map(|v| v.against_opt(expectation.as_ref(), 0.8))
        .collect();
    for v in &verdicts {
        if let Some(j) = &v.expectation {
            assert!(j.fraction.is_finite() && j.of_one_nic.is_finite() && j.of_node.is_finite());
        }
        let _ = v.check();
    }
    let report = probe::Report::from_throughput("fuzz", &verdicts);
    let _ = report.render_table();
    let _ = report.to_json();
});
