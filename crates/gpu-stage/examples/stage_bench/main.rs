//! `stage_bench`: the GPU benchmark session behind the crate README's tables
//! (`bench/gpu-stage/run_gpu.sh` runs it), i.e. what `rdmakit bench` does not do: the full run with
//! its sweeps, the small-transfer sweep, the report against the peers, and TCP between two processes
//! that this one starts. One measurement at a time is `rdmakit bench stage` (in-process, TCP or
//! RDMA, one end per node with `--role server|client`) and `rdmakit bench pinned`.
//!
//! ```text
//! stage_bench tcp --size 512MiB --connections 4  # two processes over loopback (a child receives)
//! stage_bench tcp --size 512MiB --connections 8 --checksum  # the same with END/ACK checksums
//! stage_bench all --out DIR [--peers peers.json] # everything, JSON written after every part
//! stage_bench small --out DIR --iters 20         # 4 KiB..64 MiB: ours vs pinned D2H + H2D
//! stage_bench report --out DIR --peers peers.json
//! ```
//! The flags it shares with `rdmakit bench stage` (`--size`, `--chunk`, `--slots`, `--iters`,
//! `--warmup`, `--src`, `--dst`, `--connections`, `--backend`, `--json`) have the same names and
//! meanings. Add `--backend host` to run without a GPU (measures the pipeline logic on RAM only).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::{Parser, Subcommand, ValueEnum};
use gpu_stage::bench::{self, Backend, BenchConfig, BenchResult, Direction};
use gpu_stage::{MIB, RingConfig, StageError, parse_size};
use serde::{Deserialize, Serialize};

mod plot;
mod report;
mod small;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(
    about = "gpu-stage benchmark session: staging pipeline vs pinned copies, naive staging and NCCL"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendArg {
    /// GPUs through the CUDA driver.
    Cuda,
    /// Host memory only (no GPU needed; measures the pipeline and the transport).
    Host,
}

/// What to measure; names, meanings and defaults as in `rdmakit bench stage`.
#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Bytes per transfer (B, KiB, MiB, GiB).
    #[arg(long, default_value = "512MiB")]
    size: String,
    /// Ring chunk size (e.g. 4MiB; never below 1MiB).
    #[arg(long, default_value = "4MiB")]
    chunk: String,
    /// Ring buffers per direction.
    #[arg(long, default_value_t = gpu_stage::DEFAULT_SLOTS)]
    slots: usize,
    /// Timed iterations.
    #[arg(long, default_value_t = 5)]
    iters: usize,
    /// Untimed (but verified) iterations first.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Source GPU ordinal.
    #[arg(long, default_value_t = 0)]
    src: usize,
    /// Destination GPU ordinal.
    #[arg(long, default_value_t = 1)]
    dst: usize,
    /// Parallel TCP connections (tcp).
    #[arg(long, default_value_t = gpu_stage::transport::tcp::DEFAULT_CONNECTIONS)]
    connections: usize,
    /// TCP: per-transfer checksums in END/ACK (both processes), to measure what they cost.
    #[arg(long)]
    checksum: bool,
    /// Backend.
    #[arg(long, value_enum, default_value = "cuda")]
    backend: BackendArg,
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
            tcp_checksum: self.checksum,
            backend: match self.backend {
                BackendArg::Cuda => Backend::Cuda,
                BackendArg::Host => Backend::Host,
            },
            ..BenchConfig::default()
        })
    }
}

/// `stage_bench all`: every figure of the README's tables and the sweeps behind its defaults.
#[derive(clap::Args, Debug)]
struct AllArgs {
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
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Two processes over TCP loopback: this process sends, a child it starts receives.
    Tcp {
        #[command(flatten)]
        common: Common,
        /// Print results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Internal: the receiving child of `tcp`.
    #[command(hide = true)]
    TcpRecv {
        #[command(flatten)]
        common: Common,
        /// Address to listen on (the child prints the one it got as `LISTEN addr`).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Everything, writing JSON after every part; then `report` if --peers is given.
    All(AllArgs),
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
        .args(cfg.tcp_checksum.then_some("--checksum"))
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

/// `stage_bench tcp`: one two-process run, printed as a line or (`--json`) as a JSON array on
/// stdout, as `rdmakit bench stage --json` prints its results.
fn tcp(common: &Common, json: bool) -> AnyResult<()> {
    let results = vec![run_tcp_pair(&common.config()?)?];
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        results.iter().for_each(print_result);
    }
    Ok(())
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

fn all(args: &AllArgs) -> AnyResult<()> {
    let AllArgs {
        common,
        out,
        peers,
        sweep_chunks,
        sweep_slots,
        sweep_connections,
        sweep_iters,
    } = args;
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
    sweep.iterations = *sweep_iters;
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
    report::report(out, peers.as_deref())
}

fn main() {
    let cli = Cli::parse();
    let outcome = match &cli.cmd {
        Cmd::Tcp { common, json } => tcp(common, *json),
        Cmd::TcpRecv { common, listen } => tcp_recv(common, listen),
        Cmd::All(args) => all(args),
        Cmd::Small { common, out, sizes } => common
            .config()
            .map_err(Into::into)
            .and_then(|cfg| small::run(&cfg, &parse_list(sizes, true)?, out)),
        Cmd::Report { out, peers } => report::report(out, peers.as_deref()),
    };
    if let Err(e) = outcome {
        eprintln!("stage_bench: {e}");
        std::process::exit(1);
    }
}
