//! RDMA WRITE bandwidth, perftest `ib_write_bw` style, on erdma-verbs.
//!
//! Server: `write_bw [-d DEV] [-x GID_INDEX] [-p PORT]`
//! Client: `write_bw [-d DEV] [-x GID_INDEX] [-p PORT] [-s SIZE] [-n ITERS] [-t TX_DEPTH] [--json] SERVER`
//!
//! Endpoints and the server's buffer are exchanged as JSON over TCP (default port 18516). The client
//! keeps `TX_DEPTH` WRITEs in flight, posting whatever room the send queue has as one chained batch (one
//! doorbell), and measures from the first post to the last completion.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Instant;

use erdma_verbs::{
    Access, CompletionQueue, Context, Endpoint, MemoryRegion, ProtectionDomain, QpBuilder,
    RemoteBuf, SendWr,
};
use serde::{Deserialize, Serialize};

#[derive(Debug)]
struct Opts {
    device: Option<String>,
    gid_index: u32,
    port: u16,
    size: usize,
    iters: usize,
    tx_depth: u32,
    json: bool,
    server: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Hello {
    ep: Endpoint,
    buf: RemoteBuf,
}

#[derive(Serialize, Deserialize, Debug)]
struct Report {
    test: String,
    device: String,
    gid_index: u32,
    mtu: u32,
    bytes: usize,
    iterations: usize,
    tx_depth: u32,
    seconds: f64,
    gbps: f64,
    mib_per_sec: f64,
    msg_rate_mpps: f64,
}

fn usage() -> &'static str {
    "usage: write_bw [-d DEV] [-x GID_INDEX] [-p TCP_PORT] [-s SIZE] [-n ITERS] [-t TX_DEPTH] [--json] [SERVER]"
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        device: None,
        gid_index: 0,
        port: 18516,
        size: 1 << 20,
        iters: 5000,
        tx_depth: 128,
        json: false,
        server: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value; {}", usage()))
        };
        match a.as_str() {
            "-d" | "--ib-dev" => o.device = Some(val("-d")?),
            "-x" | "--gid-index" => {
                o.gid_index = val("-x")?.parse().map_err(|e| format!("-x: {e}"))?
            }
            "-p" | "--port" => o.port = val("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-s" | "--size" => o.size = val("-s")?.parse().map_err(|e| format!("-s: {e}"))?,
            "-n" | "--iters" => o.iters = val("-n")?.parse().map_err(|e| format!("-n: {e}"))?,
            "-t" | "--tx-depth" => {
                o.tx_depth = val("-t")?.parse().map_err(|e| format!("-t: {e}"))?
            }
            "--json" => o.json = true,
            "-h" | "--help" => return Err(usage().into()),
            s if s.starts_with('-') => return Err(format!("unknown option '{s}'; {}", usage())),
            s => o.server = Some(s.to_owned()),
        }
    }
    if o.size == 0 || o.iters == 0 || o.tx_depth == 0 {
        return Err("-s, -n and -t must be greater than 0".into());
    }
    Ok(o)
}

fn send_line<T: Serialize>(s: &mut TcpStream, v: &T) -> Result<(), String> {
    let mut line = serde_json::to_string(v).map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| format!("endpoint exchange: {e}"))
}

fn recv_line<T: for<'de> Deserialize<'de>>(r: &mut BufReader<TcpStream>) -> Result<T, String> {
    let mut line = String::new();
    r.read_line(&mut line)
        .map_err(|e| format!("endpoint exchange: {e}"))?;
    serde_json::from_str(&line).map_err(|e| format!("endpoint exchange: bad message {line:?}: {e}"))
}

fn run(o: Opts) -> Result<(), String> {
    let ctx = match &o.device {
        Some(d) => Context::open(d),
        None => Context::open_first(),
    }
    .map_err(|e| e.to_string())?;
    let pd = ProtectionDomain::new(&ctx).map_err(|e| e.to_string())?;
    let cq = CompletionQueue::new(&ctx, o.tx_depth * 2, None).map_err(|e| e.to_string())?;
    let builder = QpBuilder::new(&cq, &cq)
        .gid_index(o.gid_index)
        .max_send_wr(o.tx_depth)
        .max_recv_wr(1);
    let qp = builder.build(&pd).map_err(|e| e.to_string())?;
    let mr = MemoryRegion::new(&pd, o.size, Access::ALL_RDMA).map_err(|e| e.to_string())?;
    let me = Hello {
        ep: qp.endpoint().map_err(|e| e.to_string())?,
        buf: mr.remote(),
    };

    let mut stream = match &o.server {
        None => {
            let l = TcpListener::bind(("0.0.0.0", o.port))
                .map_err(|e| format!("listen on TCP port {}: {e}", o.port))?;
            if !o.json {
                println!(" Waiting for client on TCP port {} ...", o.port);
            }
            l.accept().map_err(|e| e.to_string())?.0
        }
        Some(host) => TcpStream::connect((host.as_str(), o.port))
            .map_err(|e| format!("connect to {host}:{}: {e}", o.port))?,
    };
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    send_line(&mut stream, &me)?;
    let peer: Hello = recv_line(&mut reader)?;
    let mtu = me.ep.path_mtu(&peer.ep);
    let mut qp = qp.connect(&peer.ep).map_err(|e| e.to_string())?;

    if o.server.is_none() {
        // Server: the client writes into our buffer; wait for its report.
        let report: Report = recv_line(&mut reader)?;
        if o.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
            );
        } else {
            print_report(&report);
        }
        return Ok(());
    }

    if peer.buf.len < o.size as u64 {
        return Err(format!(
            "server buffer is {} bytes, smaller than -s {}",
            peer.buf.len, o.size
        ));
    }
    let src = mr.full();
    let dst = peer
        .buf
        .slice(0..o.size as u64)
        .map_err(|e| e.to_string())?;
    let (mut posted, mut done) = (0usize, 0usize);
    let mut wcs = Vec::with_capacity(o.tx_depth as usize);
    let start = Instant::now();
    while done < o.iters {
        let room = (o.tx_depth as usize - (posted - done)).min(o.iters - posted);
        if room > 0 {
            // Straight from the iterator: no Vec per batch (the QP reuses its own scratch).
            let batch = (0..room).map(|i| SendWr::write(src.clone(), dst).tag((posted + i) as u64));
            qp.post_send_batch(batch).map_err(|e| e.to_string())?;
            posted += room;
        }
        wcs.clear();
        let n = cq
            .poll_into(&mut wcs, o.tx_depth as usize)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            // Nothing finished: give the CPU away for a moment. On soft RDMA (rxe, siw) the "NIC" is kernel
            // work on these same CPUs, and a tight spin only delays it; next to a 1 MiB transfer the cost
            // on hardware is negligible.
            std::thread::yield_now();
        }
        for c in wcs.drain(..) {
            c.into_result().map_err(|e| e.to_string())?;
            done += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes_total = (o.size * o.iters) as f64;
    let report = Report {
        test: "RDMA_Write BW (erdma-verbs)".into(),
        device: ctx.name().to_owned(),
        gid_index: o.gid_index,
        mtu,
        bytes: o.size,
        iterations: o.iters,
        tx_depth: o.tx_depth,
        seconds: secs,
        gbps: bytes_total * 8.0 / secs / 1e9,
        mib_per_sec: bytes_total / secs / (1 << 20) as f64,
        msg_rate_mpps: o.iters as f64 / secs / 1e6,
    };
    send_line(&mut stream, &report)?;
    if o.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(r: &Report) {
    let line = "-".repeat(87);
    println!("{line}");
    println!("                    {}", r.test);
    println!(
        " Device: {}  GID index: {}  MTU: {}  TX depth: {}",
        r.device, r.gid_index, r.mtu, r.tx_depth
    );
    println!("{line}");
    println!(
        " #bytes     #iterations    BW average[MiB/sec]    BW average[Gb/sec]    MsgRate[Mpps]"
    );
    println!(
        " {:<10} {:<14} {:<22.2} {:<21.2} {:.6}",
        r.bytes, r.iterations, r.mib_per_sec, r.gbps, r.msg_rate_mpps
    );
    println!("{line}");
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("write_bw: {e}");
            return ExitCode::from(2);
        }
    };
    match run(o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("write_bw: {e}");
            ExitCode::FAILURE
        }
    }
}
