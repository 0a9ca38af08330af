//! perftest output (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`, and the `*_lat` tests).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ParseError;

/// Bandwidth unit of a perftest table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BwUnit {
    /// `[Gb/sec]` (with `--report_gbits`), gigabits per second.
    #[serde(rename = "Gb/s")]
    Gbps,
    /// `[MB/sec]` (older default; perftest means 2^20 bytes).
    #[serde(rename = "MB/s")]
    MBps,
    /// `[MiB/sec]`.
    #[serde(rename = "MiB/s")]
    MiBps,
}

impl BwUnit {
    /// Convert a value in this unit to GiB/s.
    pub fn to_gib_per_s(self, v: f64) -> f64 {
        match self {
            BwUnit::Gbps => v * 1e9 / 8.0 / crate::units::GIB,
            BwUnit::MBps | BwUnit::MiBps => v / 1024.0,
        }
    }
}

/// A bandwidth-test row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerftestBwRow {
    /// Message size.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_average: f64,
    /// Message rate, millions per second.
    pub msg_rate_mpps: f64,
}

/// A latency-test row (microseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerftestLatRow {
    /// Message size.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Columns after `#iterations`, header name → value (`t_min[usec]`, `t_avg[usec]`, ...).
    pub values: BTreeMap<String, f64>,
}

/// A parsed perftest run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerftestRun {
    /// Title, e.g. `RDMA_Write BW Test`.
    pub test: Option<String>,
    /// `key : value` settings of the header block (`Device`, `Mtu`, `GID index`, `Link type`...).
    pub settings: BTreeMap<String, String>,
    /// Bandwidth unit, for BW tests.
    pub unit: Option<BwUnit>,
    /// Bandwidth rows.
    pub bw: Vec<PerftestBwRow>,
    /// Latency rows.
    pub lat: Vec<PerftestLatRow>,
}

impl PerftestRun {
    /// Device name from the header.
    pub fn device(&self) -> Option<&str> {
        self.settings.get("Device").map(String::as_str)
    }

    /// Best average bandwidth, converted to GiB/s.
    pub fn best_average_gib_per_s(&self) -> Option<f64> {
        let unit = self.unit?;
        self.bw
            .iter()
            .map(|r| unit.to_gib_per_s(r.bw_average))
            .fold(None, |a, v| Some(a.map_or(v, |a: f64| a.max(v))))
    }
}

fn settings_in(line: &str, into: &mut BTreeMap<String, String>) {
    // Pairs separated by tabs: ` Dual-port       : OFF\t\tDevice         : rxe0`.
    // A key may itself be followed by a tab before its colon (`rdma_cm QPs\t : OFF`).
    let mut rest = line;
    while let Some(colon) = rest.find(':') {
        let key = rest[..colon].trim().trim_matches('\t').trim();
        let after = &rest[colon + 1..];
        let after_trim = after.trim_start_matches([' ', '\t']);
        let end = after_trim.find('\t').unwrap_or(after_trim.len());
        let value = after_trim[..end].trim();
        if !key.is_empty() && !value.is_empty() && !key.contains('#') {
            into.entry(key.to_string())
                .or_insert_with(|| value.to_string());
        }
        // GID-like values contain colons: stop at the next tab only.
        if end >= after_trim.len() {
            break;
        }
        rest = &after_trim[end..];
    }
}

fn header_columns(line: &str) -> Vec<String> {
    // ` #bytes #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]`
    // Split on runs of 2+ spaces / tabs, then on single spaces for `#bytes #iterations`.
    let mut cols = Vec::new();
    for chunk in line.split(['\t']).flat_map(|c| c.split("  ")) {
        let c = chunk.trim();
        if c.is_empty() {
            continue;
        }
        if c.starts_with('#') && c.contains(" #") {
            cols.extend(c.split_whitespace().map(str::to_string));
        } else {
            cols.push(c.to_string());
        }
    }
    cols
}

/// Parse perftest output (server or client side).
pub fn parse_perftest(text: &str) -> Result<PerftestRun, ParseError> {
    let mut run = PerftestRun::default();
    let mut cols: Option<Vec<String>> = None;
    let mut saw_separator = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        let t = line.trim();
        if t.starts_with("----") {
            saw_separator = true;
            continue;
        }
        if t.starts_with("#bytes") {
            let c = header_columns(t);
            if c.iter().any(|h| h.starts_with("BW average")) {
                run.unit = Some(if t.contains("[Gb/sec]") {
                    BwUnit::Gbps
                } else if t.contains("[MiB/sec]") {
                    BwUnit::MiBps
                } else if t.contains("[MB/sec]") {
                    BwUnit::MBps
                } else {
                    return Err(ParseError::new(
                        "perftest",
                        Some(n + 1),
                        "unknown bandwidth unit; expected [Gb/sec], [MB/sec] or [MiB/sec]",
                    ));
                });
            }
            cols = Some(c);
            continue;
        }
        if let Some(c) = &cols {
            let toks: Vec<&str> = t.split_whitespace().collect();
            if toks.len() >= 2 && toks[0].chars().all(|ch| ch.is_ascii_digit()) {
                let (Ok(bytes), Ok(iterations)) = (toks[0].parse::<u64>(), toks[1].parse::<u64>())
                else {
                    continue;
                };
                let nums: Vec<f64> = toks[2..].iter().filter_map(|x| x.parse().ok()).collect();
                if run.unit.is_some() {
                    if nums.len() < 3 {
                        return Err(ParseError::new(
                            "perftest",
                            Some(n + 1),
                            "bandwidth row needs #bytes #iterations BW-peak BW-average MsgRate",
                        ));
                    }
                    run.bw.push(PerftestBwRow {
                        bytes,
                        iterations,
                        bw_peak: nums[0],
                        bw_average: nums[1],
                        msg_rate_mpps: nums[2],
                    });
                } else {
                    let values = c
                        .iter()
                        .skip(2)
                        .zip(nums.iter())
                        .map(|(k, v)| (k.clone(), *v))
                        .collect();
                    run.lat.push(PerftestLatRow {
                        bytes,
                        iterations,
                        values,
                    });
                }
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        if saw_separator
            && run.test.is_none()
            && !t.contains(':')
            && (t.ends_with("Test") || t.contains(" BW ") || t.contains(" Latency"))
        {
            run.test = Some(t.to_string());
            continue;
        }
        if t.contains(':') {
            settings_in(line, &mut run.settings);
        }
    }
    if run.bw.is_empty() && run.lat.is_empty() {
        return Err(ParseError::new(
            "perftest",
            None,
            "no result table (a `#bytes #iterations ...` header followed by rows); \
             pass the client's or server's complete output, e.g. of `ib_write_bw -d rxe0 -x 1 <server>`",
        ));
    }
    Ok(run)
}
