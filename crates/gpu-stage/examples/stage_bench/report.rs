//! `stage_bench report`: our figures from `gpu-stage-results.json` beside the peers' (from
//! `bench/gpu-stage/peers.py`), each comparison with its target; writes `gpu-stage-summary.json`
//! and the sweep plots.

use std::collections::BTreeMap;
use std::path::Path;

use gpu_stage::MIB;
use gpu_stage::bench::BenchResult;
use serde::{Deserialize, Serialize};

use super::plot::{Series, line_chart_svg};
use super::{AnyResult, Record, write_json};

/// A peer figure from peers.py.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Peer {
    #[serde(default)]
    gib_s_best: Option<f64>,
    #[serde(default)]
    gib_s_median: Option<f64>,
    #[serde(default)]
    verified: Option<bool>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
struct Ratio {
    what: String,
    ours: String,
    peer: String,
    ours_gib_s_median: Option<f64>,
    peer_gib_s_median: Option<f64>,
    ratio_median: Option<f64>,
    ours_gib_s_best: Option<f64>,
    peer_gib_s_best: Option<f64>,
    ratio_best: Option<f64>,
    target: f64,
    met_median: Option<bool>,
}

pub(crate) fn report(out: &Path, peers: Option<&Path>) -> AnyResult<()> {
    let records: Vec<Record> =
        serde_json::from_slice(&std::fs::read(out.join("gpu-stage-results.json"))?)?;
    let ours: BTreeMap<String, BenchResult> = records
        .iter()
        .filter_map(|r| r.result.clone().map(|res| (r.part.clone(), res)))
        .collect();
    let peer_map: BTreeMap<String, serde_json::Value> = match peers {
        Some(p) if p.exists() => serde_json::from_slice(&std::fs::read(p)?)?,
        _ => BTreeMap::new(),
    };
    let peer = |k: &str| -> Option<Peer> {
        peer_map
            .get(k)
            .and_then(|v| serde_json::from_value::<Peer>(v.clone()).ok())
            .filter(|p| p.error.is_none() && p.verified != Some(false))
    };
    let mut ratios = Vec::new();
    let mut add = |what: &str,
                   ours_key: &str,
                   ours_r: Option<&BenchResult>,
                   peer_key: &str,
                   p: Option<(f64, f64)>,
                   target: f64| {
        let om = ours_r.map(|r| r.gib_s_median);
        let ob = ours_r.map(|r| r.gib_s_best);
        let (pm, pb) = (p.map(|x| x.0), p.map(|x| x.1));
        let rm = om.zip(pm).map(|(a, b)| a / b);
        let rb = ob.zip(pb).map(|(a, b)| a / b);
        ratios.push(Ratio {
            what: what.into(),
            ours: ours_key.into(),
            peer: peer_key.into(),
            ours_gib_s_median: om,
            peer_gib_s_median: pm,
            ratio_median: rm,
            ours_gib_s_best: ob,
            peer_gib_s_best: pb,
            ratio_best: rb,
            target,
            met_median: rm.map(|r| r >= target),
        });
    };
    let pinned = ours
        .get("pinned_d2h")
        .map(|r| (r.gib_s_median, r.gib_s_best));
    let naive = peer("naive_cpu_to_cuda1").and_then(|p| p.gib_s_median.zip(p.gib_s_best));
    let nccl = peer("nccl_socket_sendrecv").and_then(|p| p.gib_s_median.zip(p.gib_s_best));
    add(
        "in-process GPU0->host->GPU1 vs pinned D2H alone",
        "inprocess",
        ours.get("inprocess"),
        "pinned_d2h (ours, cudarc)",
        pinned,
        0.90,
    );
    add(
        "in-process GPU0->host->GPU1 vs tensor.cpu().to('cuda:1')",
        "inprocess",
        ours.get("inprocess"),
        "naive_cpu_to_cuda1 (torch)",
        naive,
        30.0,
    );
    add(
        "two processes over TCP loopback vs NCCL sockets",
        "tcp",
        ours.get("tcp"),
        "nccl_socket_sendrecv (torch.distributed)",
        nccl,
        2.0,
    );
    // The fair NCCL peer: as many sockets as our connections (peers.py --only ...,nccl-sockets).
    // Target 1.5× at equal sockets, and not behind at one.
    for conns in [1usize, 4, 8] {
        let key = format!("nccl_socket_sendrecv_s{conns}");
        let p = peer(&key).and_then(|p| p.gib_s_median.zip(p.gib_s_best));
        add(
            &format!("TCP loopback, {conns} connections vs NCCL with {conns} sockets"),
            &format!("tcp-sweep connections={conns}"),
            ours.get(&format!("tcp-sweep connections={conns}")),
            &key,
            p,
            if conns == 1 { 1.0 } else { 1.5 },
        );
    }

    println!();
    println!(
        "{:<60} {:>10} {:>10} {:>8} {:>8} {:>7}",
        "comparison (GiB/s, median of runs)", "ours", "peer", "ratio", "target", "met"
    );
    for r in &ratios {
        let f = |v: Option<f64>| v.map_or("n/a".to_string(), |x| format!("{x:.2}"));
        println!(
            "{:<60} {:>10} {:>10} {:>8} {:>8} {:>7}",
            r.what,
            f(r.ours_gib_s_median),
            f(r.peer_gib_s_median),
            f(r.ratio_median),
            format!("{:.2}", r.target),
            r.met_median.map_or("n/a".into(), |m| if m {
                "yes".into()
            } else {
                "NO".to_string()
            })
        );
    }
    for (k, _) in peer_map.iter() {
        if let Some(p) = peer(k).filter(|p| p.gib_s_median.is_some()) {
            println!(
                "peer {k:<40} median {:>8.2} GiB/s",
                p.gib_s_median.unwrap_or(0.0)
            );
        }
    }

    // Sweep plot: throughput by chunk size, one line per buffer count.
    let mut by_slots: BTreeMap<usize, Vec<(usize, f64)>> = BTreeMap::new();
    for (k, r) in &ours {
        if k.starts_with("sweep ")
            && let (Some(c), Some(s)) = (r.chunk_bytes, r.slots)
        {
            by_slots.entry(s).or_default().push((c, r.gib_s_median));
        }
    }
    if !by_slots.is_empty() {
        let series: Vec<Series> = by_slots
            .into_iter()
            .map(|(s, mut pts)| {
                pts.sort_by_key(|p| p.0);
                Series {
                    label: format!("{s} buffers"),
                    points: pts
                        .into_iter()
                        .map(|(c, v)| (format!("{} MiB", c / MIB), v))
                        .collect(),
                }
            })
            .collect();
        let mut refs = Vec::new();
        if let Some((m, _)) = pinned {
            refs.push(("pinned D2H alone".to_string(), m));
            refs.push(("0.90 x pinned D2H".to_string(), 0.9 * m));
        }
        let svg = line_chart_svg(
            "gpu-stage in-process GPU0 -> host -> GPU1, 512 MiB (median GiB/s)",
            "chunk size",
            "GiB/s",
            &series,
            &refs,
        );
        std::fs::write(out.join("gpu-stage-sweep.svg"), svg)?;
    }
    let mut tcp_pts: Vec<(usize, f64)> = ours
        .iter()
        .filter(|(k, _)| k.starts_with("tcp-sweep "))
        .filter_map(|(_, r)| r.connections.map(|c| (c, r.gib_s_median)))
        .collect();
    if !tcp_pts.is_empty() {
        tcp_pts.sort_by_key(|p| p.0);
        let mut refs = Vec::new();
        if let Some((m, _)) = nccl {
            refs.push(("NCCL sockets".to_string(), m));
            refs.push(("2 x NCCL sockets".to_string(), 2.0 * m));
        }
        let svg = line_chart_svg(
            "gpu-stage TCP loopback, two processes, 512 MiB (median GiB/s)",
            "parallel connections",
            "GiB/s",
            &[Series {
                label: "gpu-stage TCP".into(),
                points: tcp_pts
                    .into_iter()
                    .map(|(c, v)| (c.to_string(), v))
                    .collect(),
            }],
            &refs,
        );
        std::fs::write(out.join("gpu-stage-tcp-sweep.svg"), svg)?;
    }
    write_json(
        &out.join("gpu-stage-summary.json"),
        &serde_json::json!({ "ratios": ratios, "peers": peer_map }),
    )?;
    Ok(())
}
