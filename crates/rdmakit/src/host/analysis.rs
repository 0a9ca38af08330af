//! Analysis for workflows, built on the probe and gpu-stage crates so that scripts do not re-implement it
//! with string checks: `probe::` judgements (memlock, the NCCL version against the profile's pins, the
//! counter proof and the `NCCL_IB_DISABLE=1` A/B, host facts from `rdmakit probe --json`, the NCCL
//! transport of a log) and the `bench::` module (gpu-stage benchmarks on this machine; nccl-tests, RDT
//! and perftest results as tables, judged against a profile's expected rate when given one;
//! ours-beside-the-peer ratio checks).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_render::Profile;
use probe::bench::BenchVerdict;
use probe::counters::{self, CounterDelta};
use probe::expect::{Expectation, ExpectationInputs};
use probe::facts::nccl::NcclVersion;
use probe::facts::rdma::DeviceKind;
use rhai::{Array, Dynamic, EvalAltResult, Map, Module};
use serde::Serialize;

use super::convert::{check_keys, opt_bool, opt_int, opt_str, to_dyn};
use super::{Ctx, runtime_error};
use crate::report::Status;

type RResult<T> = Result<T, Box<EvalAltResult>>;

fn ser<T: Serialize>(v: &T) -> RResult<Dynamic> {
    let json = serde_json::to_value(v).map_err(|e| runtime_error(e.to_string()))?;
    to_dyn(&json)
}

/// A profile given as a name/path (loaded) or as the map `profiles::load` returned.
fn profile_arg(ctx: &Ctx, d: &Dynamic, what: &str) -> RResult<Profile> {
    if d.is_string() {
        return super::integrations::load_profile(ctx, &d.to_string());
    }
    rhai::serde::from_dynamic::<Profile>(d).map_err(|e| {
        runtime_error(format!(
            "{what}: the profile argument must be a profile name or what profiles::load returned ({e})"
        ))
    })
}

/// The memlock verdict of `ulimit -l` output (KiB or `unlimited`) or `/proc/self/limits` text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemlockCheck {
    /// True when the soft limit is unlimited.
    pub ok: bool,
    /// What was read (`unlimited`, `64 KiB`), or `unreadable`.
    pub value: String,
    /// One line for the report.
    pub detail: String,
    /// The fix when not ok.
    pub fix: Option<String>,
}

/// The containerd drop-in of seed 000, the fix for a limited RLIMIT_MEMLOCK.
pub const MEMLOCK_FIX: &str = "containerd runs with a LimitMEMLOCK below infinity on that node (systemd's default is 64 KiB, and ibv_create_qp then fails with 'Unknown error -12'): mkdir -p /etc/systemd/system/containerd.service.d && printf '[Service]\\nLimitMEMLOCK=infinity\\n' > /etc/systemd/system/containerd.service.d/10-memlock.conf && systemctl daemon-reload && systemctl restart containerd, then recreate the pods";

/// Judges RLIMIT_MEMLOCK from `ulimit -l` (first non-empty line, KiB) or `/proc/self/limits`.
pub fn memlock_check(text: &str) -> MemlockCheck {
    use probe::facts::limits::{LimitValue, parse_limits};
    let value = if let Some(m) = parse_limits(text) {
        Some(m.soft)
    } else {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .and_then(|l| match LimitValue::parse(l)? {
                // `ulimit -l` counts KiB.
                LimitValue::Bytes(kib) => Some(LimitValue::Bytes(kib.saturating_mul(1024))),
                u => Some(u),
            })
    };
    match value {
        Some(LimitValue::Unlimited) => MemlockCheck {
            ok: true,
            value: "unlimited".into(),
            detail: "RLIMIT_MEMLOCK is unlimited".into(),
            fix: None,
        },
        Some(v) => MemlockCheck {
            ok: false,
            value: v.human(),
            detail: format!("RLIMIT_MEMLOCK is {} (RDMA needs unlimited)", v.human()),
            fix: Some(MEMLOCK_FIX.into()),
        },
        None => MemlockCheck {
            ok: false,
            value: "unreadable".into(),
            detail: format!(
                "no memlock value in the output (expected `ulimit -l` output): {:?}",
                text.lines().next().unwrap_or("")
            ),
            fix: Some("run `ulimit -l` in the container; it must print unlimited".into()),
        },
    }
}

/// Finds an NCCL version in command output: `NCCL version 2.28.9+cuda13.0` (an NCCL log), a version code
/// on its own line (`23007`, what `cupy.cuda.nccl.get_version()` prints), or a bare `2.30.7`.
pub fn find_nccl_version(text: &str) -> Option<NcclVersion> {
    if let Some(i) = text.find("NCCL version ") {
        let rest = &text[i + "NCCL version ".len()..];
        if let Some(v) = rest.split_whitespace().next().and_then(NcclVersion::parse) {
            return Some(v);
        }
    }
    for line in text.lines().rev().map(str::trim) {
        if let Some(v) = line.parse::<u32>().ok().and_then(NcclVersion::from_code) {
            return Some(v);
        }
        if let Some(v) = NcclVersion::parse(line) {
            return Some(v);
        }
    }
    None
}

/// The NCCL version judged against a profile's pin and known-bad list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclCheck {
    /// `pass`, `fail` (known bad or not found) or `warn` (neither the pin nor known good).
    pub status: String,
    /// The version found (`2.30.7`), if any.
    pub version: Option<String>,
    /// Its code (`23007`).
    pub code: Option<u32>,
    /// The profile's pin.
    pub pin: Option<String>,
    /// One line for the report.
    pub detail: String,
    /// The fix when not pass.
    pub fix: Option<String>,
}

/// Judges the NCCL version printed in `text` for `profile`.
pub fn nccl_check(text: &str, profile: &Profile) -> NcclCheck {
    let n = &profile.nccl;
    let pin_fix = |pin: &str| {
        format!(
            "install {}=={pin} in the image (rdmakit render image --profile {} writes that Dockerfile) and rebuild it",
            n.pip_package, profile.name
        )
    };
    let Some(v) = find_nccl_version(text) else {
        return NcclCheck {
            status: "fail".into(),
            version: None,
            code: None,
            pin: n.pin.clone(),
            detail: format!(
                "no NCCL version in the output: {:?}",
                text.trim().lines().last().unwrap_or("")
            ),
            fix: Some("check that torch and cupy import in the worker image".into()),
        };
    };
    let vs = v.to_string();
    let code = v.major * 10000 + v.minor * 100 + v.patch;
    let listed = |l: &[String]| l.iter().any(|x| NcclVersion::parse(x) == Some(v));
    let (status, detail, fix) = if listed(&n.known_bad) {
        (
            "fail",
            format!(
                "NCCL {vs} ({code}) is known bad on {}: {}",
                profile.fabric,
                n.bad_reason
                    .as_deref()
                    .unwrap_or("listed in the profile's nccl.known_bad")
            ),
            Some(match &n.pin {
                Some(p) => pin_fix(p),
                None => format!("install a version outside {:?}", n.known_bad),
            }),
        )
    } else if n.pin.as_deref().and_then(NcclVersion::parse) == Some(v) {
        (
            "pass",
            format!("NCCL {vs} ({code}), the profile's pin"),
            None,
        )
    } else if listed(&n.known_good) {
        (
            "pass",
            format!("NCCL {vs} ({code}), known good on {}", profile.fabric),
            None,
        )
    } else if let Some(p) = &n.pin {
        (
            "warn",
            format!(
                "NCCL {vs} ({code}) is neither the pin {p} nor a known-good version on {}",
                profile.fabric
            ),
            Some(pin_fix(p)),
        )
    } else {
        (
            "pass",
            format!("NCCL {vs} ({code}); the profile pins no version"),
            None,
        )
    };
    NcclCheck {
        status: status.into(),
        version: Some(vs),
        code: Some(code),
        pin: n.pin.clone(),
        detail,
        fix,
    }
}

/// Reads one counter reading: an integer, a numeric string, or an exec result whose stdout holds one
/// integer per line (summed: several devices).
fn reading(d: &Dynamic, what: &str) -> RResult<u64> {
    let text = if let Some(m) = d.read_lock::<Map>() {
        if m.get("dry_run").and_then(|x| x.as_bool().ok()) == Some(true) {
            return Err(runtime_error(format!(
                "{what}: a dry-run placeholder has no counter value; guard the call with `if !DRY_RUN`"
            )));
        }
        if let Some(code) = m
            .get("code")
            .and_then(|x| x.as_int().ok())
            .filter(|c| *c != 0)
        {
            let err = m.get("stderr").map(|s| s.to_string()).unwrap_or_default();
            return Err(runtime_error(format!(
                "{what}: reading the counter failed (exit {code}): {}",
                err.trim()
            )));
        }
        m.get("stdout").map(|s| s.to_string()).unwrap_or_default()
    } else if let Ok(i) = d.as_int() {
        return u64::try_from(i)
            .map_err(|_| runtime_error(format!("{what}: a counter cannot be negative ({i})")));
    } else {
        d.to_string()
    };
    let mut sum = 0u64;
    let mut seen = false;
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let v: u64 = l.parse().map_err(|_| {
            runtime_error(format!(
                "{what}: expected one counter value per line, got {l:?}"
            ))
        })?;
        sum = sum.saturating_add(v);
        seen = true;
    }
    if !seen {
        return Err(runtime_error(format!(
            "{what}: the counter output is empty"
        )));
    }
    Ok(sum)
}

fn readings(a: &Array, what: &str) -> RResult<Vec<u64>> {
    a.iter().map(|d| reading(d, what)).collect()
}

/// The summed delta of one counter over several pods, as the probe crate's [`CounterDelta`].
pub fn summed_delta(
    profile: &Profile,
    before: &[u64],
    after: &[u64],
) -> Result<CounterDelta, String> {
    if before.len() != after.len() {
        return Err(format!(
            "{} reading(s) before but {} after: read the same pods both times",
            before.len(),
            after.len()
        ));
    }
    let d = &profile.devices;
    let device = d.name_pattern.clone();
    let kind = DeviceKind::classify(d.name_pattern.trim_end_matches('*'), None, None);
    // `ports/1/hw_counters/hw_tx_bytes_cnt` -> `hw_counters/hw_tx_bytes_cnt`, the probe crate's key.
    let key = d
        .tx_counter
        .strip_prefix("ports/")
        .and_then(|r| r.split_once('/'))
        .map_or(d.tx_counter.as_str(), |(_, rest)| rest)
        .to_owned();
    let mut raw = 0u64;
    let mut reset = Vec::new();
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if a < b {
            reset.push(format!("{key} (pod {i})"));
        } else {
            raw = raw.saturating_add(a - b);
        }
    }
    let bytes = raw.saturating_mul(d.counter_multiplier.max(1));
    Ok(CounterDelta {
        device: format!("{device} on {} pod(s)", before.len()),
        port: 1,
        kind,
        deltas: BTreeMap::from([(key, raw)]),
        reset,
        tx_bytes: Some(bytes),
        rx_bytes: None,
        tx_packets: None,
        rx_packets: None,
    })
}

/// A `rdmakit probe --json` document, summarised for scripts.
#[derive(Debug, Clone, Serialize)]
pub struct FactsSummary {
    /// Worst verdict (`ok`, `info`, `warn`, `fail`).
    pub verdict: String,
    /// Every judged check.
    pub checks: Vec<probe::Check>,
    /// RLIMIT_MEMLOCK unlimited (None when unreadable).
    pub memlock_unlimited: Option<bool>,
    /// RDMA device names.
    pub devices: Vec<String>,
    /// The NCCL Python loads, if found.
    pub nccl: Option<String>,
}

pub(crate) fn add_probe_fns(m: &mut Module, ctx: &Arc<Ctx>) {
    // memlock(text) -> #{ok, value, detail, fix}
    reg!(m, "memlock", |text: &str| -> Dynamic {
        ser(&memlock_check(text)).unwrap_or(Dynamic::UNIT)
    });
    // nccl_version(text) -> #{version, code} or ()
    reg!(m, "nccl_version", |text: &str| -> Dynamic {
        match find_nccl_version(text) {
            None => Dynamic::UNIT,
            Some(v) => {
                let mut r = Map::new();
                r.insert("version".into(), v.to_string().into());
                r.insert(
                    "code".into(),
                    i64::from(v.major * 10000 + v.minor * 100 + v.patch).into(),
                );
                r.into()
            }
        }
    });
    // nccl_check(text, profile) -> #{status, version, code, pin, detail, fix}
    let c = ctx.clone();
    regp!(m, "nccl_check", move |text: &str, profile: Dynamic| -> RResult<Dynamic> {
        let p = profile_arg(&c, &profile, "probe::nccl_check")?;
        ser(&nccl_check(text, &p))
    }, text: &str, profile: Dynamic);
    // traffic(before, after, profile, expected_bytes) -> probe's TrafficProof + ok
    let c = ctx.clone();
    regp!(m, "traffic", move |before: Array, after: Array, profile: Dynamic, expected: i64| -> RResult<Dynamic> {
        let p = profile_arg(&c, &profile, "probe::traffic")?;
        let d = summed_delta(&p, &readings(&before, "probe::traffic before")?, &readings(&after, "probe::traffic after")?)
            .map_err(|e| runtime_error(format!("probe::traffic: {e}")))?;
        let proof = counters::prove(&d, expected.max(0).unsigned_abs(), counters::DEFAULT_MIN_FRACTION);
        let mut v = serde_json::to_value(&proof).map_err(|e| runtime_error(e.to_string()))?;
        v["ok"] = (proof.verdict == probe::Verdict::Ok).into();
        to_dyn(&v)
    }, before: Array, after: Array, profile: Dynamic, expected: i64);
    // ab(rdma_before, rdma_after, tcp_before, tcp_after, profile, expected_bytes) -> probe's AbComparison + ok
    let c = ctx.clone();
    let ab = move |rb: Array,
                   ra: Array,
                   tb: Array,
                   ta: Array,
                   profile: Dynamic,
                   expected: i64|
          -> RResult<Dynamic> {
        let p = profile_arg(&c, &profile, "probe::ab")?;
        let what = "probe::ab";
        let rdma = summed_delta(&p, &readings(&rb, what)?, &readings(&ra, what)?)
            .map_err(|e| runtime_error(format!("{what} (RDMA run): {e}")))?;
        let tcp = summed_delta(&p, &readings(&tb, what)?, &readings(&ta, what)?)
            .map_err(|e| runtime_error(format!("{what} (TCP run): {e}")))?;
        let cmp = counters::compare_ab(&rdma, &tcp, expected.max(0).unsigned_abs());
        let mut v = serde_json::to_value(&cmp).map_err(|e| runtime_error(e.to_string()))?;
        v["ok"] = (cmp.verdict == probe::Verdict::Ok).into();
        to_dyn(&v)
    };
    regp!(m, "ab", ab, rb: Array, ra: Array, tb: Array, ta: Array, profile: Dynamic, expected: i64);
    // facts(json) -> summary of `rdmakit probe --json` run inside a pod
    regp!(m, "facts", |json: &str| -> RResult<Dynamic> {
        let f: probe::HostFacts = serde_json::from_str(json).map_err(|e| {
            runtime_error(format!("probe::facts: not the output of `rdmakit probe --json` ({e})"))
        })?;
        ser(&FactsSummary {
            verdict: f.verdict().as_str().to_owned(),
            checks: f.checks.clone(),
            memlock_unlimited: f.memlock.map(|m| m.is_unlimited()),
            devices: f.rdma_devices.iter().map(|d| d.name.clone()).collect(),
            nccl: f.effective_nccl().map(|n| n.version.to_string()),
        })
    }, json: &str);
    // nccl_transport(log) -> #{transport: "IB"|"Socket"|"unknown", evidence, line, gdr}
    regp!(m, "nccl_transport", |log: &str| -> RResult<Dynamic> {
        ser(&nccl_transport(log).map_err(runtime_error)?)
    }, log: &str);
}

/// Which network NCCL used, from its log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclTransport {
    /// `IB` (RDMA), `Socket` (TCP) or `unknown` (no NCCL_DEBUG=INFO lines).
    pub transport: String,
    /// The deciding log line.
    pub evidence: String,
    /// Its line number (1-based; 0 when none).
    pub line: usize,
    /// GPUDirect RDMA reported on.
    pub gdr: bool,
    /// What to do when NCCL did not use RDMA.
    pub fix: Option<String>,
}

/// Reads the transport NCCL picked out of a log through the doctor's signatures.
pub fn nccl_transport(log: &str) -> Result<NcclTransport, String> {
    let d = probe::doctor::diagnose(log).map_err(|e| format!("doctor: {e}"))?;
    let find = |ids: &[&str]| d.findings.iter().find(|f| ids.contains(&f.id.as_str()));
    let gdr = log.contains("/GDRDMA") || log.contains("GPU Direct RDMA Enabled");
    // The fallback finding exists only when no NET/IB line does; channels over sockets next to NET/IB
    // lines (mixed) still count as IB being in use.
    let socket = |f: &probe::doctor::Finding| {
        NcclTransport {
        transport: "Socket".into(),
        evidence: f.evidence.clone(),
        line: f.line,
        gdr,
        fix: Some(f.fix.clone().unwrap_or_else(|| {
            "NCCL fell back to TCP sockets: check NCCL_IB_HCA, /dev/infiniband in the pod and the RDMA provider in the image".into()
        })),
    }
    };
    if let Some(f) = find(&["nccl-tcp-fallback"]) {
        return Ok(socket(f));
    }
    if let Some(f) = find(&[
        "nccl-net-ib-using",
        "nccl-using-network-ib",
        "nccl-channel-net-ib",
    ]) {
        return Ok(NcclTransport {
            transport: "IB".into(),
            evidence: f.evidence.clone(),
            line: f.line,
            gdr,
            fix: None,
        });
    }
    if let Some(f) = find(&["nccl-channel-net-socket"]) {
        return Ok(socket(f));
    }
    Ok(NcclTransport {
        transport: "unknown".into(),
        evidence: String::new(),
        line: 0,
        gdr,
        fix: Some("no NCCL transport line in the log: run with NCCL_DEBUG=INFO".into()),
    })
}

// ------------------------------------------------------------------------------------------------------
// bench::

fn size_opt(opts: &Map, key: &str, default: &str) -> RResult<usize> {
    let s = opt_str(opts, key)?.unwrap_or_else(|| default.to_owned());
    gpu_stage::parse_size(&s)
        .map_err(|e| runtime_error(format!("bench::stage: option `{key}`: {e}")))
}

/// Runs a gpu-stage benchmark on this machine (`inprocess` also runs its peer, pinned D2H).
fn run_stage(kind: &str, opts: &Map) -> RResult<Vec<gpu_stage::bench::BenchResult>> {
    use gpu_stage::bench::{self, Backend, BenchConfig, Direction};
    let mut cfg = BenchConfig {
        bytes: size_opt(opts, "size", "64MiB")?,
        iterations: opt_int(opts, "iters")?
            .unwrap_or(3)
            .clamp(1, 1000)
            .unsigned_abs() as usize,
        backend: match opt_str(opts, "backend")?.as_deref().unwrap_or("host") {
            "host" => Backend::Host,
            "cuda" => Backend::Cuda,
            other => {
                return Err(runtime_error(format!(
                    "bench::stage: backend {other:?}: expected \"host\" or \"cuda\""
                )));
            }
        },
        ..BenchConfig::default()
    };
    if opts.contains_key("chunk") {
        cfg.ring.chunk_bytes = size_opt(opts, "chunk", "4MiB")?;
    }
    if let Some(s) = opt_int(opts, "slots")? {
        cfg.ring.slots = s.clamp(1, 1024).unsigned_abs() as usize;
    }
    if let Some(c) = opt_int(opts, "connections")? {
        cfg.connections = c.clamp(1, 64).unsigned_abs() as usize;
    }
    let err = |e: gpu_stage::StageError| runtime_error(format!("bench::stage {kind}: {e}"));
    Ok(match kind {
        "inprocess" => vec![
            bench::run_pinned_copy(&cfg, Direction::D2h).map_err(err)?,
            bench::run_inprocess(&cfg).map_err(err)?,
        ],
        "pinned-d2h" => vec![bench::run_pinned_copy(&cfg, Direction::D2h).map_err(err)?],
        "pinned-h2d" => vec![bench::run_pinned_copy(&cfg, Direction::H2d).map_err(err)?],
        "tcp" => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| runtime_error(format!("bench::stage tcp: bind 127.0.0.1: {e}")))?;
            let addr = listener
                .local_addr()
                .map_err(|e| runtime_error(format!("bench::stage tcp: {e}")))?;
            let rcfg = cfg.clone();
            let receiver = std::thread::spawn(move || bench::run_tcp_receiver(&rcfg, &listener));
            let sent = bench::run_tcp_sender(&cfg, addr).map_err(err)?;
            let received = receiver
                .join()
                .map_err(|_| runtime_error("bench::stage tcp: the receiver thread panicked"))?
                .map_err(err)?;
            vec![sent, received]
        }
        other => {
            return Err(runtime_error(format!(
                "bench::stage: unknown benchmark {other:?} (inprocess, pinned-d2h, pinned-h2d, tcp)"
            )));
        }
    })
}

/// Renders rows as a table with a header.
pub fn text_table(headers: &[String], rows: &[Vec<String>]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header(headers.to_vec());
    for r in rows {
        t.add_row(r.clone());
    }
    t.to_string()
}

fn cell(d: &Dynamic) -> String {
    if d.is_float() {
        d.as_float().map(|f| format!("{f:.2}")).unwrap_or_default()
    } else if d.is_unit() {
        "-".into()
    } else {
        d.to_string()
    }
}

fn num(d: &Dynamic, what: &str) -> RResult<f64> {
    if let Ok(f) = d.as_float() {
        Ok(f)
    } else if let Ok(i) = d.as_int() {
        Ok(i as f64)
    } else {
        Err(runtime_error(format!(
            "{what}: expected a number, got {}",
            d.type_name()
        )))
    }
}

/// Ours beside the peer, the ratio, and whether it meets `min_ratio`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// What was compared.
    pub name: String,
    /// Our figure.
    pub ours: f64,
    /// The peer's figure, measured the same way.
    pub peer: f64,
    /// Unit of both.
    pub unit: String,
    /// ours / peer (None when the peer is 0).
    pub ratio: Option<f64>,
    /// The target ratio, if any.
    pub min_ratio: Option<f64>,
    /// True when there is no target or it is met.
    pub ok: bool,
    /// One line: `ours 11.67 GiB/s beside TCP run 1.20 GiB/s: 9.73x (want >= 2x)`.
    pub detail: String,
}

/// Compares our figure with the peer's.
pub fn compare(
    name: &str,
    ours: f64,
    peer: f64,
    unit: &str,
    peer_name: &str,
    min_ratio: Option<f64>,
) -> Comparison {
    let ratio = (peer > 0.0).then(|| ours / peer);
    let ok = match (min_ratio, ratio) {
        (None, _) => true,
        (Some(m), Some(r)) => r >= m,
        (Some(_), None) => ours > 0.0,
    };
    let detail = format!(
        "ours {ours:.2} {unit} beside {peer_name} {peer:.2} {unit}: {}{}",
        ratio.map_or("peer is 0".to_owned(), |r| format!("{r:.2}x")),
        min_ratio.map_or(String::new(), |m| format!(" (want >= {m}x)"))
    );
    Comparison {
        name: name.to_owned(),
        ours,
        peer,
        unit: unit.to_owned(),
        ratio,
        min_ratio,
        ok,
        detail,
    }
}

pub(crate) fn bench_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    // stage(kind[, #{size, iters, backend, chunk, slots, connections}]) -> #{dry_run, results}
    let c = ctx.clone();
    let stage = move |kind: &str, opts: Map| -> RResult<Map> {
        check_keys(
            "bench::stage",
            &opts,
            &["size", "iters", "backend", "chunk", "slots", "connections"],
        )?;
        let mut r = Map::new();
        if c.exec.is_dry_run() {
            // Validate the options now so a typo fails the plan, not the live run.
            size_opt(&opts, "size", "64MiB")?;
            c.exec.note(&format!(
                "local benchmark (not run in dry-run): rdmakit bench {kind} {}",
                bench_flags(&opts)
            ));
            r.insert("dry_run".into(), true.into());
            r.insert("results".into(), Array::new().into());
            return Ok(r);
        }
        let results = run_stage(kind, &opts)?;
        r.insert("dry_run".into(), false.into());
        r.insert("results".into(), ser(&results)?);
        Ok(r)
    };
    let s2 = stage.clone();
    regp!(&mut m, "stage", move |kind: &str| s2(kind, Map::new()), kind: &str);
    regp!(&mut m, "stage", stage, kind: &str, opts: Map);

    // nccl_tests(text) -> #{rows, avg_busbw_gbps, peak_busbw_gbps, wrong, nccl_version, table}
    // nccl_tests(text, #{profile, instance_type, nic_write_gib_s, ok_fraction, name, record}) -> the same
    // plus #{bench, check, expectation_table}, the check and the table recorded (judge_run).
    regp!(&mut m, "nccl_tests", |text: &str| -> RResult<Dynamic> {
        to_dyn(&nccl_tests_json(&parse_nccl_tests(text)?))
    }, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "nccl_tests", move |text: &str, opts: Map| -> RResult<Dynamic> {
        let run = parse_nccl_tests(text)?;
        judge_run(&c, "bench::nccl_tests", &opts, nccl_tests_json(&run), probe::bench::nccl_tests(&run))
    }, text: &str, opts: Map);
    // rdt(text) -> #{ok, iterations, steady_gib_s, first_gib_s, cross_node, total_bytes, transport, table}
    // rdt(text, opts): as nccl_tests(text, opts).
    regp!(&mut m, "rdt", |text: &str| -> RResult<Dynamic> {
        to_dyn(&rdt_json(&parse_rdt(text)?))
    }, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "rdt", move |text: &str, opts: Map| -> RResult<Dynamic> {
        let run = parse_rdt(text)?;
        judge_run(&c, "bench::rdt", &opts, rdt_json(&run), probe::bench::rdt(&run))
    }, text: &str, opts: Map);
    // perftest(text) -> #{test, device, best_avg_gib_s, rows, table}
    // perftest(text, opts): as nccl_tests(text, opts), against one NIC's expectation.
    regp!(&mut m, "perftest", |text: &str| -> RResult<Dynamic> {
        to_dyn(&perftest_json(&parse_perftest(text)?))
    }, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "perftest", move |text: &str, opts: Map| -> RResult<Dynamic> {
        let run = parse_perftest(text)?;
        judge_run(&c, "bench::perftest", &opts, perftest_json(&run), probe::bench::perftest(&run))
    }, text: &str, opts: Map);
    // table(headers, rows) -> text
    regp!(&mut m, "table", |headers: Array, rows: Array| -> RResult<String> {
        let h: Vec<String> = headers.iter().map(cell).collect();
        let mut rs = Vec::new();
        for r in rows {
            let a = r.try_cast::<Array>().ok_or_else(|| runtime_error("bench::table: each row must be an array"))?;
            rs.push(a.iter().map(cell).collect());
        }
        Ok(text_table(&h, &rs))
    }, headers: Array, rows: Array);
    // compare(name, ours, peer[, #{unit, peer_name, min_ratio, record}]) -> #{ratio, ok, detail, ...};
    // records a check (pass/fail with min_ratio, info without) and both figures as measurements.
    let c = ctx.clone();
    let cmp = move |name: &str, ours: Dynamic, peer: Dynamic, opts: Map| -> RResult<Dynamic> {
        check_keys(
            "bench::compare",
            &opts,
            &["unit", "peer_name", "min_ratio", "record"],
        )?;
        let unit = opt_str(&opts, "unit")?.unwrap_or_else(|| "GiB/s".into());
        let peer_name = opt_str(&opts, "peer_name")?.unwrap_or_else(|| "the peer".into());
        let min_ratio = match opts.get("min_ratio") {
            None => None,
            Some(d) if d.is_unit() => None,
            Some(d) => Some(num(d, "bench::compare min_ratio")?),
        };
        if c.exec.is_dry_run() && (ours.is_unit() || peer.is_unit()) {
            c.report().check(
                name,
                Status::Planned,
                &format!("would compare ours with {peer_name}"),
            );
            return Ok(Dynamic::UNIT);
        }
        let cmp = compare(
            name,
            num(&ours, "bench::compare ours")?,
            num(&peer, "bench::compare peer")?,
            &unit,
            &peer_name,
            min_ratio,
        );
        if opt_bool(&opts, "record")?.unwrap_or(true) {
            let mut r = c.report();
            let status = match (min_ratio, cmp.ok) {
                (None, _) => Status::Info,
                (Some(_), true) => Status::Pass,
                (Some(_), false) => Status::Fail,
            };
            r.check(name, status, &cmp.detail);
            if !c.exec.is_dry_run() {
                r.measure(&format!("{name}: ours"), cmp.ours, &unit);
                r.measure(&format!("{name}: {peer_name}"), cmp.peer, &unit);
            }
        }
        ser(&cmp)
    };
    let cmp2 = cmp.clone();
    regp!(&mut m, "compare", move |name: &str, ours: Dynamic, peer: Dynamic| cmp2(name, ours, peer, Map::new()), name: &str, ours: Dynamic, peer: Dynamic);
    regp!(&mut m, "compare", cmp, name: &str, ours: Dynamic, peer: Dynamic, opts: Map);
    m
}

/// The rate a profile's instance type should reach (`probe::expect`), from the profile's facts and, when
/// measured, one NIC's RDMA WRITE bandwidth (GiB/s, `ib_write_bw`). The error names what the profile lacks.
pub fn profile_expectation(
    profile: &Profile,
    instance_type: Option<&str>,
    nic_write_gib_s: Option<f64>,
) -> Result<Expectation, String> {
    let facts = profile
        .expectation_facts(instance_type)
        .map_err(|e| format!("profile {}: {e}", profile.name))?;
    let mut inputs: ExpectationInputs = serde_json::to_value(&facts)
        .and_then(serde_json::from_value)
        .map_err(|e| {
            format!(
                "profile {}: its expectation facts do not fit probe's model inputs ({e})",
                profile.name
            )
        })?;
    if let Some(w) = nic_write_gib_s {
        if !(w.is_finite() && w > 0.0) {
            return Err(format!(
                "nic_write_gib_s {w}: must be a positive rate in GiB/s (ib_write_bw's BW average)"
            ));
        }
        inputs.nic_write_gib_s = Some(w);
    }
    probe::expect::expect(&inputs).map_err(|e| format!("profile {}: {e}", profile.name))
}

/// A bench verdict as scripts see it: `bench` (the verdict with its judgement against the expectation),
/// `check` (what the report records) and `expectation_table` (the model's inputs; `()` without one).
pub fn judged_json(v: &BenchVerdict, e: Option<&Expectation>) -> serde_json::Value {
    serde_json::json!({
        "bench": v,
        "check": v.check(),
        "expectation_table": e.map(probe::report::expectation_table),
    })
}

/// How a probe verdict is recorded in a workflow report: `warn` (below the ok fraction, above the fail
/// one) is informational, with the fraction in the detail.
pub fn report_status(v: probe::Verdict) -> Status {
    match v {
        probe::Verdict::Ok => Status::Pass,
        probe::Verdict::Fail => Status::Fail,
        _ => Status::Info,
    }
}

/// The options of `bench::nccl_tests` / `rdt` / `perftest` (text, opts).
const JUDGE_KEYS: &[&str] = &[
    "profile",
    "instance_type",
    "nic_write_gib_s",
    "ok_fraction",
    "name",
    "record",
];

/// Judges a parsed run for `bench::nccl_tests(text, opts)` and friends: against the expectation of
/// `opts.profile` (a name or `profiles::load`'s map) and `opts.instance_type`, `ok_fraction` of it being
/// ok (default `probe::expect::DEFAULT_OK_FRACTION`); the run on its own without a profile. Unless
/// `record: false`, the report gets the check (named `opts.name`, else the verdict's subject) and the
/// expectation table. Returns `base` with the fields of [`judged_json`] added.
fn judge_run(
    ctx: &Ctx,
    what: &str,
    opts: &Map,
    mut base: serde_json::Value,
    verdict: BenchVerdict,
) -> RResult<Dynamic> {
    check_keys(what, opts, JUDGE_KEYS)?;
    let e = match opts.get("profile") {
        None => None,
        Some(d) if d.is_unit() => None,
        Some(d) => {
            let p = profile_arg(ctx, d, what)?;
            let nic_write = match opts.get("nic_write_gib_s") {
                None => None,
                Some(d) if d.is_unit() => None,
                Some(d) => Some(num(d, &format!("{what} nic_write_gib_s"))?),
            };
            let it = opt_str(opts, "instance_type")?;
            Some(
                profile_expectation(&p, it.as_deref(), nic_write)
                    .map_err(|e| runtime_error(format!("{what}: {e}")))?,
            )
        }
    };
    let ok_fraction = match opts.get("ok_fraction") {
        None => probe::expect::DEFAULT_OK_FRACTION,
        Some(d) => {
            let f = num(d, &format!("{what} ok_fraction"))?;
            if !(f > 0.0 && f <= 1.0) {
                return Err(runtime_error(format!(
                    "{what}: ok_fraction {f} must be in (0, 1] (0.8: ok from 80 % of the expectation)"
                )));
            }
            f
        }
    };
    let v = verdict.against_opt(e.as_ref(), ok_fraction);
    if opt_bool(opts, "record")?.unwrap_or(true) {
        let c = v.check();
        let name = opt_str(opts, "name")?.unwrap_or_else(|| c.subject.clone());
        let detail = match &c.fix {
            Some(f) => format!("{}. Fix: {f}", c.summary),
            None => c.summary.clone(),
        };
        let mut r = ctx.report();
        r.check(&name, report_status(c.verdict), &detail);
        if let Some(e) = &e {
            r.table(
                &format!("{name}: expected rate (model)"),
                &probe::report::expectation_table(e),
            );
        }
        if let Some(m) = v.measured_gib_s
            && !ctx.exec.is_dry_run()
        {
            r.measure(&name, m, "GiB/s");
        }
    }
    if let (Some(b), serde_json::Value::Object(j)) =
        (base.as_object_mut(), judged_json(&v, e.as_ref()))
    {
        b.extend(j);
    }
    to_dyn(&base)
}

fn nccl_tests_json(run: &probe::parse::NcclTestsRun) -> serde_json::Value {
    let mut v = serde_json::json!({
        "rows": run.rows.len(),
        "avg_busbw_gbps": run.avg_busbw_gbps,
        "peak_busbw_gbps": run.peak_busbw_gbps(),
        "wrong": run.total_wrong(),
        "nccl_version": run.nccl_version,
        "errors": run.errors,
        "table": probe::report::nccl_tests_table(run),
    });
    v["ok"] =
        (!run.rows.is_empty() && run.total_wrong().unwrap_or(0) == 0 && run.errors.is_empty())
            .into();
    v
}

fn rdt_json(run: &probe::parse::RdtRun) -> serde_json::Value {
    serde_json::json!({
        "ok": run.ok(),
        "iterations": run.iterations.len(),
        "steady_gib_s": run.steady_state_gib_per_s(),
        "first_gib_s": run.iterations.first().map(|i| i.gib_per_s),
        "cross_node": run.cross_node(),
        "total_bytes": run.total_bytes(),
        "transport": run.final_status.as_ref().map(|(t, _)| t.clone()),
        "table": probe::report::rdt_table(run),
    })
}

fn perftest_json(run: &probe::parse::PerftestRun) -> serde_json::Value {
    serde_json::json!({
        "test": run.test,
        "device": run.device(),
        "best_avg_gib_s": run.best_average_gib_per_s(),
        "rows": run.bw.len() + run.lat.len(),
        "table": probe::report::perftest_table(run),
    })
}

fn parse_nccl_tests(text: &str) -> RResult<probe::parse::NcclTestsRun> {
    probe::parse::parse_nccl_tests(text)
        .map_err(|e| runtime_error(format!("nccl-tests output: {e}")))
}

fn parse_rdt(text: &str) -> RResult<probe::parse::RdtRun> {
    probe::parse::parse_rdt(text).map_err(|e| runtime_error(format!("RDT demo output: {e}")))
}

fn parse_perftest(text: &str) -> RResult<probe::parse::PerftestRun> {
    probe::parse::parse_perftest(text).map_err(|e| runtime_error(format!("perftest output: {e}")))
}

fn bench_flags(opts: &Map) -> String {
    let mut keys: Vec<_> = opts.iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    keys.iter()
        .map(|(k, v)| format!("--{k} {v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erdma() -> Profile {
        crate::profiles::load("aliyun-erdma").unwrap()
    }

    #[test]
    fn memlock_reads_ulimit_and_proc_limits() {
        assert!(memlock_check("unlimited\nhca_id: erdma_0\n").ok);
        let limited = memlock_check("64\n");
        assert!(!limited.ok);
        assert_eq!(limited.value, "64 KiB");
        assert!(limited.fix.unwrap().contains("LimitMEMLOCK=infinity"));
        let proc = "Max locked memory         65536                65536                bytes\n";
        assert_eq!(memlock_check(proc).value, "64 KiB");
        assert_eq!(memlock_check("").value, "unreadable");
    }

    #[test]
    fn nccl_versions_from_cupy_codes_logs_and_text() {
        assert_eq!(find_nccl_version("23007\n").unwrap().to_string(), "2.30.7");
        assert_eq!(
            find_nccl_version("x NCCL INFO NCCL version 2.28.9+cuda13.0\n")
                .unwrap()
                .to_string(),
            "2.28.9"
        );
        assert_eq!(find_nccl_version("2.19.3\n").unwrap().to_string(), "2.19.3");
        assert!(find_nccl_version("ImportError: no module named cupy\n").is_none());
    }

    #[test]
    fn nccl_check_names_the_known_bad_pin_and_the_fix() {
        let p = erdma();
        let bad = nccl_check("22809\n", &p);
        assert_eq!(bad.status, "fail");
        assert!(
            bad.detail.contains("2.28.9") && bad.detail.contains("ncclNetInit"),
            "{}",
            bad.detail
        );
        assert!(bad.fix.unwrap().contains("nvidia-nccl-cu13==2.30.7"));
        assert_eq!(nccl_check("23007\n", &p).status, "pass");
        assert_eq!(nccl_check("22903\n", &p).status, "warn");
        assert_eq!(nccl_check("22907\n", &p).status, "pass"); // 2.29.7 is known good
        assert_eq!(nccl_check("boom\n", &p).status, "fail");
    }

    #[test]
    fn counter_proof_and_ab_through_the_probe_crate() {
        let p = erdma();
        let run = 3 * 512 * 1024 * 1024_u64;
        let d = summed_delta(&p, &[1000, 5000], &[1000 + 1_642_000_000, 5000]).unwrap();
        let proof = counters::prove(&d, run, counters::DEFAULT_MIN_FRACTION);
        assert_eq!(proof.verdict, probe::Verdict::Ok, "{}", proof.summary);
        let flat = summed_delta(&p, &[1000, 5000], &[1000, 5000]).unwrap();
        let proof = counters::prove(&flat, run, counters::DEFAULT_MIN_FRACTION);
        assert_eq!(proof.verdict, probe::Verdict::Fail);
        assert!(
            proof.summary.contains("silent TCP fallback"),
            "{}",
            proof.summary
        );
        let ab = counters::compare_ab(&d, &flat, run);
        assert_eq!(ab.verdict, probe::Verdict::Ok);
        assert!(
            ab.lines[1].contains("TCP-run eRDMA tx delta: 0.000 GiB"),
            "{:?}",
            ab.lines
        );
        assert!(summed_delta(&p, &[1], &[1, 2]).is_err());
    }

    #[test]
    fn transport_from_nccl_logs() {
        let ib =
            "n0:1:1 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n";
        assert_eq!(nccl_transport(ib).unwrap().transport, "IB");
        let sock = "n0:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.5.76<0>\nn0:1:1 [0] NCCL INFO Using network Socket\n";
        let t = nccl_transport(sock).unwrap();
        assert_eq!(t.transport, "Socket");
        assert!(t.fix.is_some());
        assert_eq!(nccl_transport("hello\n").unwrap().transport, "unknown");
    }

    #[test]
    fn comparisons_put_ours_beside_the_peer() {
        let c = compare("RDT", 11.6, 1.2, "GiB/s", "TCP run", Some(2.0));
        assert!(c.ok);
        assert!(
            c.detail
                .contains("ours 11.60 GiB/s beside TCP run 1.20 GiB/s: 9.67x (want >= 2x)"),
            "{}",
            c.detail
        );
        assert!(!compare("x", 1.0, 2.0, "GiB/s", "p", Some(0.95)).ok);
        assert_eq!(compare("x", 1.0, 0.0, "GiB/s", "p", None).ratio, None);
    }

    #[test]
    fn a_profiles_expectation_takes_its_facts_and_a_measured_write() {
        let e = profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), Some(20.4)).unwrap();
        assert_eq!(e.path, probe::expect::Path::Staged);
        assert_eq!(e.inputs.nic_line_gbps, 190.0);
        assert_eq!(e.inputs.nics_per_node, 2);
        assert!(!e.inputs.gpudirect);
        assert_eq!(e.inputs.pcie_gen, 5);
        assert_eq!(e.inputs.nic_write_gib_s, Some(20.4));
        assert_eq!(e.one_nic_gib_s, 20.4);
        // Without a measured write the NIC is its line rate x 0.9.
        let line = profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), None).unwrap();
        assert!((line.one_nic_gib_s - probe::expect::gbps_to_gib_s(190.0) * 0.9).abs() < 1e-9);
        // What the profile cannot give is named.
        let e = profile_expectation(&erdma(), Some("ecs.nope"), None).unwrap_err();
        assert!(e.contains("ecs.nope") && e.contains("aliyun-erdma"), "{e}");
        let dra = crate::profiles::load("aliyun-erdma-dra").unwrap();
        let e = profile_expectation(&dra, None, None).unwrap_err();
        assert!(e.contains("nic_gbps"), "{e}");
        let e =
            profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), Some(-1.0)).unwrap_err();
        assert!(e.contains("nic_write_gib_s -1"), "{e}");
    }

    #[test]
    fn a_judged_run_carries_the_verdict_its_check_and_the_model() {
        let e = profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), Some(20.4)).unwrap();
        // Seed 000's RDT steady state (11.7 GiB/s) against the node: below 80 %, above 40 %.
        let v = probe::bench::rate("rdt-bandwidth", "RDT demo", 11.7).against(&e, 0.8);
        let j = judged_json(&v, Some(&e));
        assert_eq!(j["bench"]["verdict"], "warn", "{j:#}");
        assert_eq!(j["check"]["id"], "rdt-bandwidth");
        assert!(
            j["check"]["summary"]
                .as_str()
                .unwrap()
                .contains("% of one NIC"),
            "{j:#}"
        );
        assert!(
            j["expectation_table"]
                .as_str()
                .unwrap()
                .contains("staged through host memory"),
            "{j:#}"
        );
        assert_eq!(report_status(v.verdict), Status::Info);
        let fast = probe::bench::rate("rdt-bandwidth", "RDT demo", e.gib_s).against(&e, 0.8);
        assert_eq!(report_status(fast.verdict), Status::Pass);
        let slow = probe::bench::rate("rdt-bandwidth", "RDT demo", e.gib_s * 0.1).against(&e, 0.8);
        assert_eq!(report_status(slow.verdict), Status::Fail);
        let alone = judged_json(&probe::bench::rate("rdt-bandwidth", "RDT demo", 1.0), None);
        assert!(
            alone["expectation_table"].is_null() && alone["bench"].get("expectation").is_none()
        );
    }
}
