//! `stage_bench`: gpu-stage benchmarks (until `rdmakit bench stage` exists).
//!
//! ```text
//! stage_bench inprocess --size 512MiB            # GPU0 → host ring → GPU1
//! stage_bench pinned --size 512MiB               # one pinned D2H and H2D copy (the ceiling)
//! stage_bench tcp --size 512MiB --connections 4  # two processes over TCP loopback
//! stage_bench all --out DIR [--peers peers.json] # everything, JSON written after every part
//! stage_bench small --out DIR --iters 20         # 4 KiB..64 MiB: ours vs pinned D2H + H2D
//! stage_bench report --out DIR --peers peers.json
//! # two processes over RDMA (build with --features rdma), e.g. soft-RoCE:
//! stage_bench rdma --role server --addr 0.0.0.0:18520 --device rxe0 --qps 2 --backend host
//! stage_bench rdma --role client --addr 127.0.0.1:18520 --device rxe0 --qps 2 --backend host
//! ```
//! Add `--backend host` to run without a GPU (measures the pipeline logic on RAM only).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::{Parser, Subcommand, ValueEnum};
use gpu_stage::bench::{self, Backend, BenchConfig, BenchResult, Direction};
use gpu_stage::{MIB, RingConfig, StageError, parse_size};
use plot::{Series, line_chart_svg};
use serde::{Deserialize, Serialize};

mod plot;
mod small;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(
    about = "gpu-stage benchmarks: staging pipeline vs pinned copies, naive staging and NCCL"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendArg {
    Cuda,
    Host,
}

#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Bytes per transfer (B, KiB, MiB, GiB).
    #[arg(long, default_value = "512MiB")]
    size: String,
    /// Chunk (ring buffer) size.
    #[arg(long, default_value = "4MiB")]
    chunk: String,
    /// Ring buffers per direction.
    #[arg(long, default_value_t = 8)]
    slots: usize,
    /// Timed iterations.
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// Untimed, verified iterations first.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Source GPU.
    #[arg(long, default_value_t = 0)]
    src: usize,
    /// Destination GPU.
    #[arg(long, default_value_t = 1)]
    dst: usize,
    /// Parallel TCP connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Backend.
    #[arg(long, value_enum, default_value = "cuda")]
    backend: BackendArg,
    /// Also write the result(s) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Common {
    fn config(&self) -> Result<BenchConfig, StageError> {
        Ok(BenchConfig {
            bytes: parse_size(&self.size)?,
            ring: RingConfig::new(parse_size(&self.chunk)?, self.slots)?,
            warmup: self.warmup,
            iterations: self.iters,
            src_device: self.src,
            dst_device: self.dst,
            connections: self.connections,
            backend: match self.backend {
                BackendArg::Cuda => Backend::Cuda,
                BackendArg::Host => Backend::Host,
            },
            ..BenchConfig::default()
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Role {
    /// Receives (listens on --addr).
    Server,
    /// Sends (connects to --addr) and reports.
    Client,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ConnectArg {
    /// rdma_cm where the device needs it (iWARP, eRDMA), endpoint exchange elsewhere.
    Auto,
    /// Endpoint exchange over the side channel (RoCE, IB).
    Manual,
    /// librdmacm.
    RdmaCm,
}

#[derive(clap::Args, Debug, Clone)]
struct RdmaArgs {
    #[command(flatten)]
    common: Common,
    /// Which end this process is.
    #[arg(long, value_enum)]
    role: Role,
    /// TCP side channel: where the server listens and the client connects.
    #[arg(long, default_value = "127.0.0.1:18520")]
    addr: String,
    /// RDMA device(s); repeat or comma-separate to stripe over several NICs.
    #[arg(long = "device", value_delimiter = ',', required = true)]
    devices: Vec<String>,
    /// GID index (manual connect).
    #[arg(long, default_value_t = 1)]
    gid_index: u32,
    /// Queue pairs in total (chunks are striped over them, and they over the devices).
    #[arg(long, default_value_t = 2)]
    qps: usize,
    /// How queue pairs are connected.
    #[arg(long, value_enum, default_value = "auto")]
    connect: ConnectArg,
    /// rdma_cm server: the IP address to listen on, one per device (default: from the GID).
    #[arg(long = "cm-addr", value_delimiter = ',')]
    cm_addrs: Vec<std::net::IpAddr>,
    /// Seconds any wait for the peer may take.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// GPU src → host ring → GPU dst in one process.
    Inprocess(Common),
    /// One pinned D2H and one pinned H2D copy of the whole size (the copy engine alone).
    Pinned(Common),
    /// Two processes over TCP loopback (this process sends, a child receives).
    Tcp(Common),
    /// Two processes over RDMA (feature `rdma`): run `--role server` on the receiving node and
    /// `--role client` on the sending one; the client prints (and writes with --json) the result.
    Rdma(RdmaArgs),
    /// Internal: the receiving child of `tcp`.
    #[command(hide = true)]
    TcpRecv {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Everything, writing JSON after every part; then `report` if --peers is given.
    All {
        #[command(flatten)]
        common: Common,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Peer figures from bench/gpu-stage/peers.py.
        #[arg(long)]
        peers: Option<PathBuf>,
        /// Chunk sizes of the sweep.
        #[arg(long, default_value = "1MiB,2MiB,4MiB,8MiB,16MiB,32MiB")]
        sweep_chunks: String,
        /// Buffer counts of the sweep.
        #[arg(long, default_value = "2,4,8,16")]
        sweep_slots: String,
        /// Connection counts of the TCP sweep.
        #[arg(long, default_value = "1,2,4,8")]
        sweep_connections: String,
        /// Iterations of each sweep point.
        #[arg(long, default_value_t = 3)]
        sweep_iters: usize,
    },
    /// Small transfers through the in-process stage, each size beside one pinned D2H + one pinned
    /// H2D of the same size back to back (the floor), in the same run; writes
    /// OUT/gpu-stage-small.json. `--size` is ignored; use `--iters 20` or more for stable medians.
    Small {
        #[command(flatten)]
        common: Common,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Transfer sizes.
        #[arg(long, default_value = "4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB")]
        sizes: String,
    },
    /// Print our figures beside the peers, write the summary JSON and the plots.
    Report {
        /// Folder holding gpu-stage-results.json.
        #[arg(long)]
        out: PathBuf,
        /// Peer figures from bench/gpu-stage/peers.py.
        #[arg(long)]
        peers: Option<PathBuf>,
    },
}

/// One part of a run: a result or the error that stopped it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    part: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<BenchResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn print_result(r: &BenchResult) {
    let geometry = match (r.chunk_bytes, r.slots) {
        (Some(c), Some(s)) => format!(" chunk {} MiB x {s}", c / MIB),
        _ => String::new(),
    };
    let conns = r
        .connections
        .map(|c| format!(" {c} conn"))
        .unwrap_or_default();
    println!(
        "{:<12} {:>7.2} GiB/s best {:>7.2} median  {} MiB{geometry}{conns}  verified={} [{}]",
        r.name,
        r.gib_s_best,
        r.gib_s_median,
        r.bytes / MIB as u64,
        r.verified,
        r.devices.join(" -> ")
    );
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> AnyResult<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn run_tcp_pair(cfg: &BenchConfig) -> AnyResult<BenchResult> {
    let exe = std::env::current_exe()?;
    let backend = match cfg.backend {
        Backend::Cuda => "cuda",
        Backend::Host => "host",
    };
    let mut child = Command::new(exe)
        .args([
            "tcp-recv",
            "--listen",
            "127.0.0.1:0",
            "--size",
            &cfg.bytes.to_string(),
            "--chunk",
            &cfg.ring.chunk_bytes.to_string(),
            "--slots",
            &cfg.ring.slots.to_string(),
            "--iters",
            &cfg.iterations.to_string(),
            "--warmup",
            &cfg.warmup.to_string(),
            "--dst",
            &cfg.dst_device.to_string(),
            "--connections",
            &cfg.connections.to_string(),
            "--backend",
            backend,
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("child has no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = match line.trim().strip_prefix("LISTEN ") {
        Some(a) => a.to_string(),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("receiver child did not start (said `{}`)", line.trim()).into());
        }
    };
    let sent = bench::run_tcp_sender(cfg, addr.as_str());
    if sent.is_err() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    let r = sent?;
    if !status.success() {
        return Err(format!("receiver child exited with {status}").into());
    }
    Ok(r)
}

fn tcp_recv(common: &Common, listen: &str) -> AnyResult<()> {
    let cfg = common.config()?;
    let listener = TcpListener::bind(listen)?;
    println!("LISTEN {}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let r = bench::run_tcp_receiver(&cfg, &listener)?;
    eprintln!(
        "tcp receiver: verified {} iterations on {}",
        r.seconds.len(),
        r.devices.join(",")
    );
    Ok(())
}

#[cfg(feature = "rdma")]
fn rdma(args: &RdmaArgs) -> AnyResult<()> {
    use gpu_stage::{ConnectMode, RdmaConfig};
    let cfg = args.common.config()?;
    let rdma = RdmaConfig {
        devices: args.devices.clone(),
        qps: args.qps,
        gid_index: args.gid_index,
        connect: match args.connect {
            ConnectArg::Auto => ConnectMode::Auto,
            ConnectArg::Manual => ConnectMode::Manual,
            ConnectArg::RdmaCm => ConnectMode::RdmaCm,
        },
        cm_addrs: args.cm_addrs.clone(),
        timeout: std::time::Duration::from_secs(args.timeout),
        ..RdmaConfig::default()
    };
    let r = match args.role {
        Role::Server => {
            let listener = TcpListener::bind(args.addr.as_str())?;
            println!("LISTEN {}", listener.local_addr()?);
            std::io::stdout().flush()?;
            bench::run_rdma_receiver(&cfg, &rdma, &listener)?
        }
        Role::Client => bench::run_rdma_sender(&cfg, &rdma, args.addr.as_str())?,
    };
    print_result(&r);
    if let Some(path) = &args.common.json {
        write_json(path, &r)?;
    }
    Ok(())
}

#[cfg(not(feature = "rdma"))]
fn rdma(_args: &RdmaArgs) -> AnyResult<()> {
    Err("stage_bench was built without RDMA support: build it with `--features rdma`".into())
}

fn parse_list(text: &str, sizes: bool) -> AnyResult<Vec<usize>> {
    text.split(',')
        .map(|t| -> AnyResult<usize> {
            if sizes {
                Ok(parse_size(t)?)
            } else {
                Ok(t.trim().parse()?)
            }
        })
        .collect()
}

struct Recorder {
    path: PathBuf,
    records: Vec<Record>,
}

impl Recorder {
    fn push(&mut self, part: String, outcome: AnyResult<BenchResult>) {
        let rec = match outcome {
            Ok(r) => {
                print_result(&r);
                Record {
                    part,
                    result: Some(r),
                    error: None,
                }
            }
            Err(e) => {
                println!("{part:<12} FAILED: {e}");
                Record {
                    part,
                    result: None,
                    error: Some(e.to_string()),
                }
            }
        };
        self.records.push(rec);
        // Written after every part: a later crash or timeout loses nothing measured so far.
        if let Err(e) = write_json(&self.path, &self.records) {
            eprintln!("cannot write {}: {e}", self.path.display());
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn all(
    common: &Common,
    out: &Path,
    peers: Option<&Path>,
    sweep_chunks: &str,
    sweep_slots: &str,
    sweep_connections: &str,
    sweep_iters: usize,
) -> AnyResult<()> {
    std::fs::create_dir_all(out)?;
    let base = common.config()?;
    let mut rec = Recorder {
        path: out.join("gpu-stage-results.json"),
        records: Vec::new(),
    };
    rec.push(
        "pinned_d2h".into(),
        bench::run_pinned_copy(&base, Direction::D2h).map_err(Into::into),
    );
    rec.push(
        "pinned_h2d".into(),
        bench::run_pinned_copy(&base, Direction::H2d).map_err(Into::into),
    );
    rec.push(
        "inprocess".into(),
        bench::run_inprocess(&base).map_err(Into::into),
    );
    rec.push("tcp".into(), run_tcp_pair(&base));
    let mut sweep = base.clone();
    sweep.iterations = sweep_iters;
    for chunk in parse_list(sweep_chunks, true)? {
        for slots in parse_list(sweep_slots, false)? {
            let part = format!("sweep chunk={}MiB slots={slots}", chunk / MIB);
            let outcome = RingConfig::new(chunk, slots)
                .map_err(Into::into)
                .and_then(|ring| {
                    let cfg = BenchConfig {
                        ring,
                        ..sweep.clone()
                    };
                    bench::run_inprocess(&cfg).map_err(Into::into)
                });
            rec.push(part, outcome);
        }
    }
    for conns in parse_list(sweep_connections, false)? {
        let part = format!("tcp-sweep connections={conns}");
        let slots = base.ring.slots.max(2 * conns);
        let outcome = RingConfig::new(base.ring.chunk_bytes, slots)
            .map_err(Into::into)
            .and_then(|ring| {
                let cfg = BenchConfig {
                    ring,
                    connections: conns,
                    ..sweep.clone()
                };
                run_tcp_pair(&cfg)
            });
        rec.push(part, outcome);
    }
    report(out, peers)
}

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

fn report(out: &Path, peers: Option<&Path>) -> AnyResult<()> {
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

fn single(
    common: &Common,
    f: impl FnOnce(&BenchConfig) -> AnyResult<Vec<BenchResult>>,
) -> AnyResult<()> {
    let cfg = common.config()?;
    let results = f(&cfg)?;
    for r in &results {
        print_result(r);
    }
    if let Some(path) = &common.json {
        write_json(path, &results)?;
    }
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let outcome = match &cli.cmd {
        Cmd::Inprocess(c) => single(c, |cfg| Ok(vec![bench::run_inprocess(cfg)?])),
        Cmd::Pinned(c) => single(c, |cfg| {
            Ok(vec![
                bench::run_pinned_copy(cfg, Direction::D2h)?,
                bench::run_pinned_copy(cfg, Direction::H2d)?,
            ])
        }),
        Cmd::Tcp(c) => single(c, |cfg| Ok(vec![run_tcp_pair(cfg)?])),
        Cmd::Rdma(args) => rdma(args),
        Cmd::TcpRecv { common, listen } => tcp_recv(common, listen),
        Cmd::All {
            common,
            out,
            peers,
            sweep_chunks,
            sweep_slots,
            sweep_connections,
            sweep_iters,
        } => all(
            common,
            out,
            peers.as_deref(),
            sweep_chunks,
            sweep_slots,
            sweep_connections,
            *sweep_iters,
        ),
        Cmd::Small { common, out, sizes } => common
            .config()
            .map_err(Into::into)
            .and_then(|cfg| small::run(&cfg, &parse_list(sizes, true)?, out)),
        Cmd::Report { out, peers } => report(out, peers.as_deref()),
    };
    if let Err(e) = outcome {
        eprintln!("stage_bench: {e}");
        std::process::exit(1);
    }
}
