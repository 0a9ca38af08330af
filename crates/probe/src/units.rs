//! Byte and bandwidth formatting shared by reports.

/// Bytes in one GiB.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// `1.53 GiB`, `64 KiB`, `12 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// Bytes as GiB with three decimals, the way the runbook reports counter deltas (`0.000 GiB`).
pub fn gib3(b: u64) -> String {
    format!("{:.3} GiB", b as f64 / GIB)
}
