//! The data-path matrix: which node pairs are measured (`ring`, a `sample` with its coverage, or `all`) and in
//! which rounds, and each cell judged — perftest's
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
    /// Every ordered pair: n × (n − 1), for a handful of nodes.
    All,
    /// The ring plus `peers − 1` more distances drawn from `seed`: node *i* to *i + d* for each distance *d*,
    /// so every node sends `peers` times and receives `peers` times, and far-apart nodes (other racks,
    /// other leaf switches) are paired too. The coverage is `peers / (n − 1)` of the ordered pairs.
    Sample {
        /// Peers per node (at least 1; 1 is the ring).
        peers: usize,
        /// The draw; the same seed gives the same pairs.
        seed: u64,
    },
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
        (_, Pairs::Sample { peers, seed }) => sample_distances(n, peers, seed)
            .into_iter()
            .flat_map(|d| (0..n).map(move |i| (i, (i + d) % n)))
            .collect(),
    }
}

/// Distance 1 (the ring) and `peers − 1` distinct others from 2..n, drawn by a splitmix64 shuffle of `seed`
/// (no dependency for a reproducible draw).
fn sample_distances(n: usize, peers: usize, seed: u64) -> Vec<usize> {
    let mut rest: Vec<usize> = (2..n).collect();
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let take = peers.max(1).min(n - 1) - 1;
    for k in 0..take {
        let left = (rest.len() - k) as u64;
        let pick = k + usize::try_from(next() % left).unwrap_or(0);
        rest.swap(k, pick);
    }
    let mut out = vec![1];
    out.extend_from_slice(&rest[..take]);
    out
}

/// The pairs split into rounds in which no node is in two pairs: one round's cells can run at once
/// without two tests sharing a node's NIC. Greedy, first round that fits, pairs in order: a ring takes 2
/// rounds (3 for an odd count), `sample` about 2 per peer, `all` about 2 (n − 1).
pub fn rounds(n: usize, pairs: &[(usize, usize)]) -> Vec<Vec<(usize, usize)>> {
    let mut rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut busy: Vec<Vec<bool>> = Vec::new();
    for &(a, b) in pairs {
        let k = busy
            .iter()
            .position(|used| !used[a] && !used[b])
            .unwrap_or_else(|| {
                busy.push(vec![false; n]);
                rounds.push(Vec::new());
                busy.len() - 1
            });
        busy[k][a] = true;
        busy[k][b] = true;
        rounds[k].push((a, b));
    }
    rounds
}

/// What a pair plan costs and covers, said before it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairPlan {
    /// `ring`, `all` or `sample`.
    pub mode: String,
    /// Nodes in the matrix.
    pub nodes: usize,
    /// Ordered pairs measured (each on every rail).
    pub pairs: usize,
    /// Rounds of node-disjoint pairs (what one at a time per node takes).
    pub rounds: usize,
    /// Measured pairs over all n × (n − 1) ordered pairs.
    pub coverage: f64,
}

impl PairPlan {
    /// The plan of `mode` over `n` nodes.
    pub fn of(n: usize, mode: Pairs) -> PairPlan {
        let p = pairs(n, mode);
        let all = n.saturating_mul(n.saturating_sub(1));
        PairPlan {
            mode: match mode {
                Pairs::Ring => "ring",
                Pairs::All => "all",
                Pairs::Sample { .. } => "sample",
            }
            .to_owned(),
            nodes: n,
            pairs: p.len(),
            rounds: rounds(n, &p).len(),
            coverage: if all == 0 {
                0.0
            } else {
                p.len() as f64 / all as f64
            },
        }
    }

    /// One line: `ring over 1000 nodes: 1000 of 999000 ordered pairs (0.10 %), 2 rounds of node-disjoint pairs`.
    pub fn describe(&self) -> String {
        format!(
            "{} over {} nodes: {} of {} ordered pairs ({:.2} %), {} round(s) of node-disjoint pairs",
            self.mode,
            self.nodes,
            self.pairs,
            self.nodes.saturating_mul(self.nodes.saturating_sub(1)),
            100.0 * self.coverage,
            self.rounds
        )
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
    fn a_sample_sends_and_receives_peers_times_per_node_without_repeats() {
        let n = 1000;
        let p = pairs(n, Pairs::Sample { peers: 4, seed: 7 });
        assert_eq!(p.len(), 4 * n);
        let distinct: std::collections::BTreeSet<_> = p.iter().collect();
        assert_eq!(distinct.len(), p.len(), "a pair measured twice");
        for v in 0..n {
            assert_eq!(p.iter().filter(|(a, _)| *a == v).count(), 4);
            assert_eq!(p.iter().filter(|(_, b)| *b == v).count(), 4);
        }
        assert!(p.iter().all(|(a, b)| a != b));
        // The ring is in it, the draw is reproducible, and another seed draws other distances.
        assert!(pairs(n, Pairs::Ring).iter().all(|r| distinct.contains(r)));
        assert_eq!(p, pairs(n, Pairs::Sample { peers: 4, seed: 7 }));
        assert_ne!(p, pairs(n, Pairs::Sample { peers: 4, seed: 8 }));
        // More peers than there are other nodes: every pair, once.
        assert_eq!(pairs(5, Pairs::Sample { peers: 9, seed: 1 }).len(), 20);
        assert_eq!(
            pairs(5, Pairs::Sample { peers: 1, seed: 1 }),
            pairs(5, Pairs::Ring)
        );
    }

    #[test]
    fn rounds_never_put_a_node_in_two_pairs_and_keep_every_pair() {
        for (n, mode) in [
            (1000, Pairs::Ring),
            (999, Pairs::Ring),
            (12, Pairs::All),
            (1000, Pairs::Sample { peers: 3, seed: 1 }),
        ] {
            let p = pairs(n, mode);
            let r = rounds(n, &p);
            assert_eq!(r.iter().map(Vec::len).sum::<usize>(), p.len());
            for round in &r {
                let mut seen = std::collections::BTreeSet::new();
                for (a, b) in round {
                    assert!(
                        seen.insert(*a) && seen.insert(*b),
                        "{mode:?}: node twice in a round"
                    );
                }
            }
            match mode {
                Pairs::Ring => assert!(r.len() <= 3, "{n}: {}", r.len()),
                Pairs::Sample { peers, .. } => assert!(r.len() <= 3 * peers, "{}", r.len()),
                Pairs::All => assert!(r.len() <= 3 * (n - 1), "{}", r.len()),
            }
        }
        let plan = PairPlan::of(1000, Pairs::Ring);
        assert_eq!((plan.pairs, plan.rounds), (1000, 2));
        assert_eq!(
            plan.describe(),
            "ring over 1000 nodes: 1000 of 999000 ordered pairs (0.10 %), 2 round(s) of node-disjoint pairs"
        );
        assert_eq!(PairPlan::of(4, Pairs::All).coverage, 1.0);
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
