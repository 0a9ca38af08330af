//! The data-path matrix: which node pairs are measured (`ring` or `all`), and each cell judged — perftest's
//! rate against the instance type's expected rate, the bytes proven by the vendor's counters on *both*
//! ends (the sender's tx and the receiver's rx, so a run that went over another device or over TCP is
//! flat), and outliers against the other cells of the same rail.

use serde::{Deserialize, Serialize};

use crate::counters::{CounterDelta, DEFAULT_MIN_FRACTION, TrafficProof, prove};
use crate::verdict::Verdict;

/// Which pairs to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pairs {
    /// Node *i* to node *i+1*, the last to the first: every node sends once and receives once.
    Ring,
    /// Every ordered pair.
    All,
}

/// The ordered `(from, to)` index pairs over `n` nodes.
pub fn pairs(n: usize, mode: Pairs) -> Vec<(usize, usize)> {
    match (n, mode) {
        (0 | 1, _) => Vec::new(),
        (2, _) => vec![(0, 1), (1, 0)],
        (_, Pairs::Ring) => (0..n).map(|i| (i, (i + 1) % n)).collect(),
        (_, Pairs::All) => (0..n)
            .flat_map(|i| (0..n).filter(move |j| *j != i).map(move |j| (i, j)))
            .collect(),
    }
}

/// Cells slower than this fraction of their rail's median are outliers.
pub const OUTLIER_FRACTION: f64 = 0.8;
/// A cell below this fraction of the expected rate fails.
pub const MIN_EXPECTED_FRACTION: f64 = 0.5;

/// One measured pair on one rail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Sending node.
    pub from: String,
    /// Receiving node.
    pub to: String,
    /// The rail: the device on the sender and on the receiver (`mlx5_0`).
    pub device: String,
    /// Bytes the test moved (message size × iterations).
    pub bytes: u64,
    /// Measured average, GiB/s (`None`: the test did not finish).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gib_s: Option<f64>,
    /// What the instance type should reach, GiB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_gib_s: Option<f64>,
    /// The sender's counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<TrafficProof>,
    /// The receiver's counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<TrafficProof>,
    /// Judged.
    pub verdict: Verdict,
    /// One line: the rate, its fraction of the expectation, the counters.
    pub summary: String,
    /// Why it failed and what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The test's own error, when it did not finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a run gave for one cell, before judging.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// perftest's average rate, GiB/s.
    pub gib_s: Option<f64>,
    /// The sender's counter delta.
    pub sender: Option<CounterDelta>,
    /// The receiver's counter delta.
    pub receiver: Option<CounterDelta>,
    /// The test's error.
    pub error: Option<String>,
}

/// Judges one cell on its own (rate against the expectation, counters on both ends).
pub fn judge_cell(
    from: &str,
    to: &str,
    device: &str,
    bytes: u64,
    m: Measured,
    expected_gib_s: Option<f64>,
) -> Cell {
    let sender = m
        .sender
        .as_ref()
        .map(|d| prove(d, bytes, DEFAULT_MIN_FRACTION));
    let receiver = m
        .receiver
        .as_ref()
        .map(|d| prove(d, bytes, DEFAULT_MIN_FRACTION));
    let mut verdict = Verdict::Ok;
    let mut parts = Vec::new();
    let mut fix = None;
    match m.gib_s {
        Some(r) => {
            parts.push(format!("{r:.2} GiB/s"));
            if let Some(e) = expected_gib_s.filter(|e| *e > 0.0) {
                parts.push(format!("{:.0}% of the expected {e:.2}", 100.0 * r / e));
                if r < MIN_EXPECTED_FRACTION * e {
                    verdict = Verdict::Fail;
                    fix = Some(format!(
                        "below {:.0}% of what the instance type reaches: check the link rate and MTU on both nodes, the PCIe placement (nvidia-smi topo -m) and the switch port",
                        MIN_EXPECTED_FRACTION * 100.0
                    ));
                }
            }
        }
        None => {
            verdict = Verdict::Fail;
            parts.push(format!(
                "no result: {}",
                m.error.as_deref().unwrap_or("the test did not finish")
            ));
            fix = Some("run `rdmakit doctor` on the test's output (kept in the report); a connection error names the GID index or the address".into());
        }
    }
    for (end, proof) in [("sender", &sender), ("receiver", &receiver)] {
        match proof {
            Some(p) if p.verdict == Verdict::Fail => {
                verdict = Verdict::Fail;
                parts.push(format!("{end}: {}", p.summary));
                fix = fix.or_else(|| Some(format!("the {end}'s counters did not move with the test: the bytes crossed another device (or none was read); {}", p.fix.as_deref().unwrap_or(""))));
            }
            Some(p) => parts.push(format!(
                "{end} counters {:.0}%",
                100.0 * p.fraction.unwrap_or(0.0)
            )),
            None => {
                // Not proven is not passed: the cell can at best warn.
                if verdict == Verdict::Ok {
                    verdict = Verdict::Warn;
                    fix = Some(format!(
                        "the {end}'s byte counters could not be read: the rate alone does not prove which device carried the bytes"
                    ));
                }
                parts.push(format!("{end} counters not read"));
            }
        }
    }
    Cell {
        from: from.to_owned(),
        to: to.to_owned(),
        device: device.to_owned(),
        bytes,
        gib_s: m.gib_s,
        expected_gib_s,
        sender,
        receiver,
        verdict,
        summary: parts.join("; "),
        fix,
        error: m.error,
    }
}

/// Flags cells well below their rail's median (a slow cable, a wrong PCIe slot): a warning on a cell that
/// otherwise passed. Needs three measured cells on the rail to call one an outlier.
pub fn flag_outliers(cells: &mut [Cell]) {
    let mut rails: Vec<&str> = cells.iter().map(|c| c.device.as_str()).collect();
    rails.sort_unstable();
    rails.dedup();
    let rails: Vec<String> = rails.into_iter().map(str::to_owned).collect();
    for rail in rails {
        let mut rates: Vec<f64> = cells
            .iter()
            .filter(|c| c.device == rail)
            .filter_map(|c| c.gib_s)
            .collect();
        if rates.len() < 3 {
            continue;
        }
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        for c in cells.iter_mut().filter(|c| c.device == rail) {
            if let Some(r) = c.gib_s
                && r < OUTLIER_FRACTION * median
            {
                c.summary.push_str(&format!(
                    "; outlier: {:.0}% of the rail's median {median:.2} GiB/s",
                    100.0 * r / median
                ));
                if c.verdict == Verdict::Ok {
                    c.verdict = Verdict::Warn;
                    c.fix = Some("slower than the other pairs on this rail: compare both nodes' link rate, MTU and PCIe placement".into());
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::facts::DeviceKind;

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

    #[test]
    fn pairs_cover_every_node_both_ways() {
        assert!(pairs(1, Pairs::All).is_empty());
        assert_eq!(pairs(2, Pairs::Ring), [(0, 1), (1, 0)]);
        assert_eq!(pairs(3, Pairs::Ring), [(0, 1), (1, 2), (2, 0)]);
        assert_eq!(pairs(3, Pairs::All).len(), 6);
    }

    #[test]
    fn flat_counters_on_either_end_fail_the_cell() {
        let bytes = 1 << 30;
        let ok = judge_cell(
            "a",
            "b",
            "mlx5_0",
            bytes,
            Measured {
                gib_s: Some(11.0),
                sender: Some(delta(bytes + 100, 0)),
                receiver: Some(delta(0, bytes + 100)),
                error: None,
            },
            Some(11.6),
        );
        assert_eq!(ok.verdict, Verdict::Ok, "{ok:?}");
        // The receiver's device saw nothing: the bytes went elsewhere.
        let flat = judge_cell(
            "a",
            "b",
            "mlx5_0",
            bytes,
            Measured {
                gib_s: Some(11.0),
                sender: Some(delta(bytes, 0)),
                receiver: Some(delta(0, 0)),
                error: None,
            },
            Some(11.6),
        );
        assert_eq!(flat.verdict, Verdict::Fail);
        assert!(flat.summary.contains("receiver") && flat.fix.unwrap().contains("receiver"));
        let slow = judge_cell(
            "a",
            "b",
            "mlx5_0",
            bytes,
            Measured {
                gib_s: Some(2.0),
                sender: Some(delta(bytes, 0)),
                receiver: Some(delta(0, bytes)),
                error: None,
            },
            Some(11.6),
        );
        assert_eq!(slow.verdict, Verdict::Fail);
        let broken = judge_cell(
            "a",
            "b",
            "mlx5_0",
            bytes,
            Measured {
                error: Some("Couldn't connect to 10.0.0.2:18515".into()),
                ..Measured::default()
            },
            None,
        );
        assert!(broken.verdict == Verdict::Fail && broken.summary.contains("Couldn't connect"));
    }

    #[test]
    fn a_slow_pair_among_good_ones_is_an_outlier() {
        let mk = |r: f64| {
            judge_cell(
                "a",
                "b",
                "mlx5_0",
                1,
                Measured {
                    gib_s: Some(r),
                    sender: Some(delta(1, 0)),
                    receiver: Some(delta(0, 1)),
                    error: None,
                },
                None,
            )
        };
        let mut cells = vec![mk(11.0), mk(11.2), mk(6.0), mk(10.9)];
        flag_outliers(&mut cells);
        assert_eq!(cells[2].verdict, Verdict::Warn);
        assert!(cells[2].summary.contains("outlier"));
        assert_eq!(cells[0].verdict, Verdict::Ok);
    }
}
