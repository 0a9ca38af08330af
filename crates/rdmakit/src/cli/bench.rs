//! `rdmakit bench`: gpu-stage's staging benchmarks from the command line.
//!
//! `stage` moves one buffer GPU → pinned ring → transport → pinned ring → GPU and verifies it;
//! `pinned` measures the copy engine alone (the peer every staged figure is held against).
//! Two-process transports (TCP, RDMA) run both ends here with `--role both`, or one end per
//! machine with `--role server` / `--role client`, so a user can measure between two nodes.
//! With `--profile`, each staged figure is judged as a fraction of the rate the profile's instance
//! type should reach (`probe::expect`), with the model's inputs printed beside it.

use std::net::TcpListener;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use clap::{Args, Subcommand, ValueEnum};
// `gpu_bench`: gpu-stage's benchmarks, apart from probe's `bench` judgements of their results.
use gpu_stage::bench::{self as gpu_bench, Backend, BenchConfig, BenchResult, Direction};
use gpu_stage::transport::rdma::{ConnectMode, RdmaConfig};
use probe::expect::{Expectation, ExpectationInputs};
use probe::report::Report;
use probe::throughput::ThroughputVerdict;

use super::{CmdResult, Failure, code};

const AFTER_HELP: &str = "\
Examples:
  rdmakit bench stage --size 512MiB                                  # GPU0 -> host -> GPU1, beside pinned D2H
  rdmakit bench stage --transport tcp --backend host --size 64MiB --json
  rdmakit bench stage --transport rdma --device rxe0 --backend host --size 64MiB
  # two nodes: start the server, then the client on the other node
  rdmakit bench stage --transport rdma --role server --device erdma_0 --listen 0.0.0.0:18515
  rdmakit bench stage --transport rdma --role client --device erdma_0 --connect 10.0.0.7:18515 \\
    --profile aliyun-erdma --instance-type ecs.ebmgn9gc.64xlarge    # judged against the expected rate
  rdmakit bench pinned --direction both

Exit codes: 0 every result verified (and, with --profile, none below 40 % of the expectation),
1 a result did not verify or fell below 40 % of the expectation, 2 a run could not start or failed";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchCmd,
}

#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// A staged GPU -> host -> transport -> host -> GPU transfer, data verified every iteration.
    Stage(Box<StageArgs>),
    /// One pinned copy of the whole size: the copy engine alone (the staged path's ceiling).
    Pinned(PinnedArgs),
}

/// How the chunks cross from the sending ring to the receiving ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// Both GPUs in this process share one ring (no network).
    Inprocess,
    /// Parallel TCP connections between two processes.
    Tcp,
    /// RDMA WRITE_WITH_IMM into the peer's registered ring (verbs devices via --device).
    Rdma,
}

/// Which end(s) of a two-process transport this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Both ends on this machine, over loopback (the receiver in a second thread).
    Both,
    /// The receiving end: listens on --listen and receives into GPU --dst.
    Server,
    /// The sending end: connects to --connect and sends from GPU --src.
    Client,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// GPUs through the CUDA driver.
    Cuda,
    /// Host memory only (no GPU needed; measures the pipeline and the transport).
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConnectArg {
    /// rdma_cm when the device needs it (iWARP, eRDMA's default mode), else manual.
    Auto,
    /// Endpoints exchanged over the TCP side channel (RoCE/IB).
    Manual,
    /// librdmacm.
    RdmaCm,
}

#[derive(Debug, Args)]
pub struct Common {
    /// Bytes per transfer (B, KiB, MiB, GiB).
    #[arg(long, default_value = "512MiB")]
    pub size: String,
    /// Timed iterations.
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// Untimed (but verified) iterations first.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Backend.
    #[arg(long, value_enum, default_value = "cuda")]
    pub backend: BackendArg,
    /// Source GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub src: usize,
    /// Destination GPU ordinal.
    #[arg(long, default_value_t = 1)]
    pub dst: usize,
    /// Print results as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StageArgs {
    #[command(flatten)]
    pub common: Common,
    /// Transport between the two rings.
    #[arg(long, value_enum, default_value = "inprocess")]
    pub transport: TransportArg,
    /// Which end(s) to run (tcp and rdma).
    #[arg(long, value_enum, default_value = "both")]
    pub role: Role,
    /// Server: address to listen on for the peer (control and side channel).
    #[arg(long, default_value = "0.0.0.0:18515")]
    pub listen: String,
    /// Client: the server's address.
    #[arg(long)]
    pub connect: Option<String>,
    /// Ring chunk size (e.g. 4MiB; never below 1MiB).
    #[arg(long)]
    pub chunk: Option<String>,
    /// Ring buffers per direction.
    #[arg(long)]
    pub slots: Option<usize>,
    /// Parallel TCP connections (tcp).
    #[arg(long)]
    pub connections: Option<usize>,
    /// RDMA device to use; repeat to stripe over several NICs (rdma).
    #[arg(long = "device", value_name = "NAME")]
    pub devices: Vec<String>,
    /// Queue pairs to the peer in total, striped over the devices (rdma).
    #[arg(long)]
    pub qps: Option<usize>,
    /// GID index for manual connection (rdma; 1 is RoCE v2 IPv4 on rxe and usually eRDMA).
    #[arg(long)]
    pub gid_index: Option<u32>,
    /// How the queue pairs connect (rdma).
    #[arg(long = "connect-mode", value_enum, default_value = "auto")]
    pub connect_mode: ConnectArg,
    /// Server with rdma_cm: the IP address to listen on per --device, in the same order (default:
    /// the IPv4 address in each device's GID at --gid-index).
    #[arg(long = "cm-addr", value_name = "IP")]
    pub cm_addrs: Vec<std::net::IpAddr>,
    /// Bound on every wait for the peer, in seconds (rdma).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Vendor profile (name or .rhai path) whose instance type gives the expected rate: each staged
    /// figure (the median) is judged as a fraction of it (ok from 80 %, fail below 40 %). Without
    /// it, no expectation.
    #[arg(long)]
    pub profile: Option<String>,
    /// Instance type in the profile's `instance_types` table (default: its `values.instance_type`).
    #[arg(long, requires = "profile")]
    pub instance_type: Option<String>,
    /// Measured RDMA WRITE bandwidth of one NIC in GiB/s (`ib_write_bw`), used by the expectation
    /// instead of line rate x 0.9.
    #[arg(long, value_name = "GIB_S", requires = "profile")]
    pub nic_write: Option<f64>,
}

#[derive(Debug, Args)]
pub struct PinnedArgs {
    #[command(flatten)]
    pub common: Common,
    /// Copy direction.
    #[arg(long, value_enum, default_value = "both")]
    pub direction: DirectionArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DirectionArg {
    D2h,
    H2d,
    Both,
}

fn config(c: &Common) -> Result<BenchConfig, Failure> {
    Ok(BenchConfig {
        bytes: gpu_stage::parse_size(&c.size).map_err(Failure::input)?,
        iterations: c.iters.max(1),
        warmup: c.warmup,
        src_device: c.src,
        dst_device: c.dst,
        backend: match c.backend {
            BackendArg::Cuda => Backend::Cuda,
            BackendArg::Host => Backend::Host,
        },
        ..BenchConfig::default()
    })
}

/// A benchmark that failed to run (bad settings, no device, a peer that vanished) is an input
/// error; one that ran but did not verify is a finding.
fn ran(r: Result<BenchResult, gpu_stage::StageError>) -> Result<BenchResult, Failure> {
    r.map_err(|e| Failure::input(anyhow!("{e}")))
}

fn rdma_config(a: &StageArgs) -> Result<RdmaConfig, Failure> {
    if a.devices.is_empty() {
        return Err(Failure::input(anyhow!(
            "--transport rdma needs --device NAME (e.g. --device erdma_0, or rxe0 for soft-RoCE; \
             `rdmakit probe` lists this host's devices)"
        )));
    }
    let mut r = RdmaConfig::new(a.devices.iter().cloned());
    if let Some(q) = a.qps {
        r.qps = q;
    }
    if let Some(g) = a.gid_index {
        r.gid_index = g;
    }
    if let Some(t) = a.timeout {
        r.timeout = Duration::from_secs(t);
    }
    r.connect = match a.connect_mode {
        ConnectArg::Auto => ConnectMode::Auto,
        ConnectArg::Manual => ConnectMode::Manual,
        ConnectArg::RdmaCm => ConnectMode::RdmaCm,
    };
    r.cm_addrs = a.cm_addrs.clone();
    r.validate().map_err(Failure::input)?;
    Ok(r)
}

fn listen(addr: &str) -> Result<TcpListener, Failure> {
    TcpListener::bind(addr)
        .with_context(|| format!("cannot listen on {addr} (--listen): is the port in use?"))
        .map_err(Failure::input)
}

fn stage(a: &StageArgs) -> Result<Vec<BenchResult>, Failure> {
    let mut cfg = config(&a.common)?;
    if let Some(c) = &a.chunk {
        cfg.ring.chunk_bytes = gpu_stage::parse_size(c).map_err(Failure::input)?;
    }
    if let Some(s) = a.slots {
        cfg.ring.slots = s;
    }
    if let Some(c) = a.connections {
        cfg.connections = c;
    }
    if a.transport == TransportArg::Inprocess {
        if a.role != Role::Both {
            return Err(Failure::input(anyhow!(
                "--role server/client needs a two-process transport: add --transport tcp or \
                 --transport rdma"
            )));
        }
        // The copy engine alone, measured in the same run, is the figure to hold ours against.
        return Ok(vec![
            ran(gpu_bench::run_pinned_copy(&cfg, Direction::D2h))?,
            ran(gpu_bench::run_inprocess(&cfg))?,
        ]);
    }
    let rdma = match a.transport {
        TransportArg::Rdma => Some(rdma_config(a)?),
        _ => None,
    };
    let receive = |cfg: &BenchConfig, l: &TcpListener| match &rdma {
        Some(r) => gpu_bench::run_rdma_receiver(cfg, r, l),
        None => gpu_bench::run_tcp_receiver(cfg, l),
    };
    let send = |cfg: &BenchConfig, addr: &str| match &rdma {
        Some(r) => gpu_bench::run_rdma_sender(cfg, r, addr),
        None => gpu_bench::run_tcp_sender(cfg, addr),
    };
    match a.role {
        Role::Server => {
            let l = listen(&a.listen)?;
            let transport = a
                .transport
                .to_possible_value()
                .map(|v| v.get_name().to_owned())
                .unwrap_or_default();
            eprintln!(
                "rdmakit bench: waiting for a client on {} ({transport})",
                a.listen
            );
            Ok(vec![ran(receive(&cfg, &l))?])
        }
        Role::Client => {
            let addr = a.connect.as_deref().ok_or_else(|| {
                Failure::input(anyhow!(
                    "--role client needs --connect HOST:PORT (the server's --listen address)"
                ))
            })?;
            Ok(vec![ran(send(&cfg, addr))?])
        }
        Role::Both => {
            let l = listen("127.0.0.1:0")?;
            let addr = l
                .local_addr()
                .context("local address of the loopback listener")
                .map_err(Failure::input)?
                .to_string();
            let (sent, received) = std::thread::scope(|s| {
                let receiver = s.spawn(|| receive(&cfg, &l));
                let sent = send(&cfg, &addr);
                if sent.is_err() {
                    // The receiver may still sit in accept(): hand it connections that close at
                    // once so it fails too instead of waiting forever.
                    while !receiver.is_finished() {
                        drop(std::net::TcpStream::connect(&addr));
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                (sent, receiver.join())
            });
            let received =
                received.map_err(|_| Failure::input(anyhow!("the receiving thread panicked")))?;
            // Report the root cause. A receiver that fails first tells the sender why (its error
            // carries the receiver's message); a sender that fails first only makes the receiver
            // see its connection close. So the sender's error is the one to show.
            match (sent, received) {
                (Ok(s), Ok(r)) => Ok(vec![s, r]),
                (Err(e), _) | (Ok(_), Err(e)) => Err(Failure::input(anyhow!("{e}"))),
            }
        }
    }
}

fn pinned(a: &PinnedArgs) -> Result<Vec<BenchResult>, Failure> {
    let cfg = config(&a.common)?;
    let dirs: &[Direction] = match a.direction {
        DirectionArg::D2h => &[Direction::D2h],
        DirectionArg::H2d => &[Direction::H2d],
        DirectionArg::Both => &[Direction::D2h, Direction::H2d],
    };
    dirs.iter()
        .map(|d| ran(gpu_bench::run_pinned_copy(&cfg, *d)))
        .collect()
}

/// The model's inputs for `--profile`/`--instance-type`/`--nic-write`; `None` without a profile.
/// Checked before anything runs: a profile that cannot give an expectation is an input error.
fn expectation_inputs(a: &StageArgs) -> Result<Option<ExpectationInputs>, Failure> {
    let Some(name) = &a.profile else {
        return Ok(None);
    };
    let p = rdmakit::profiles::load(name).map_err(|e| Failure::input(anyhow!("{e}")))?;
    let mut inputs = rdmakit::bridge::expectation_inputs(&p, a.instance_type.as_deref())
        .map_err(|e| Failure::input(anyhow!("--profile {name}: {e}")))?;
    if let Some(w) = a.nic_write {
        if !rdmakit::bridge::is_nic_write_rate(w) {
            return Err(Failure::input(anyhow!(
                "--nic-write {w}: must be a positive rate in GiB/s (ib_write_bw's BW average, GB/s x 0.931)"
            )));
        }
        inputs.nic_write_gib_s = Some(w);
    }
    probe::expect::expect(&inputs).map_err(|e| Failure::input(anyhow!("--profile {name}: {e}")))?;
    Ok(Some(inputs))
}

/// Whether a result is a pinned copy measured as the peer, not a staged transfer.
fn is_peer(r: &BenchResult) -> bool {
    r.name.starts_with("pinned_")
}

/// Each staged result's median as a `gpu-stage` rate, against the expectation when there is one. A
/// pinned D2H copy measured in the same run becomes the model's host-copy rate (it overrides the PCIe
/// estimate).
fn judge(
    results: &[BenchResult],
    inputs: Option<ExpectationInputs>,
) -> Result<(Vec<ThroughputVerdict>, Option<Expectation>), Failure> {
    let e = match inputs {
        Some(mut i) => {
            if let Some(d2h) = results.iter().find(|r| r.name == "pinned_d2h") {
                i.host_copy_gib_s = Some(d2h.gib_s_best);
            }
            Some(probe::expect::expect(&i).map_err(|e| Failure::input(anyhow!("{e}")))?)
        }
        None => None,
    };
    let verdicts = results
        .iter()
        .filter(|r| !is_peer(r))
        .map(|r| {
            let label = format!(
                "{} {}, {} backend, median of {}",
                r.name,
                probe::units::human_bytes(r.bytes),
                format!("{:?}", r.backend).to_lowercase(),
                r.seconds.len()
            );
            probe::throughput::rate("gpu-stage", label, r.gib_s_median).against_opt(e.as_ref(), 0.8)
        })
        .collect();
    Ok((verdicts, e))
}

pub fn bench(a: BenchArgs) -> CmdResult {
    let (results, json, judged) = match &a.what {
        BenchCmd::Stage(s) => {
            let inputs = expectation_inputs(s)?;
            let results = stage(s)?;
            let judged = match inputs {
                Some(i) => Some(judge(&results, Some(i))?),
                None => None,
            };
            (results, s.common.json, judged)
        }
        BenchCmd::Pinned(p) => (pinned(p)?, p.common.json, None),
    };
    let report = judged
        .as_ref()
        .map(|(v, _)| Report::from_throughput("rdmakit bench stage", v));
    if json {
        // Without --profile the results alone (an array); with it, the results and the report.
        let v = match &report {
            None => serde_json::to_value(&results),
            Some(r) => serde_json::to_value(r)
                .map(|r| serde_json::json!({ "results": results, "report": r })),
        }
        .map_err(Failure::input)?;
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(Failure::input)?
        );
    } else {
        println!("{}", render(&results));
        match (&report, &judged) {
            (Some(r), Some((_, Some(e)))) => {
                println!("{}", r.render_table());
                println!("{}", probe::report::expectation_table(e));
            }
            _ if matches!(a.what, BenchCmd::Stage(_)) => println!(
                "no expectation: pass --profile (and --instance-type) to judge the figures against the rate the \
                 profile's instance type should reach"
            ),
            _ => {}
        }
    }
    let below = report
        .as_ref()
        .is_some_and(|r| r.verdict == probe::Verdict::Fail);
    Ok(if results.iter().all(|r| r.verified) && !below {
        code::OK
    } else {
        code::FINDINGS
    })
}

fn render(results: &[BenchResult]) -> comfy_table::Table {
    let mut t = super::io::table(&[
        "benchmark",
        "backend",
        "bytes",
        "chunk x slots",
        "best GiB/s",
        "median GiB/s",
        "verified",
        "devices",
    ]);
    for r in results {
        let geometry = match (r.chunk_bytes, r.slots) {
            (Some(c), Some(s)) => format!("{} MiB x {s}", c >> 20),
            _ => "-".into(),
        };
        t.add_row(vec![
            r.name.clone(),
            format!("{:?}", r.backend).to_lowercase(),
            r.bytes.to_string(),
            geometry,
            format!("{:.2}", r.gib_s_best),
            format!("{:.2}", r.gib_s_median),
            r.verified.to_string(),
            r.devices.join(" -> "),
        ]);
    }
    t
}
