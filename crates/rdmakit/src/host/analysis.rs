//! The Rhai glue of the workflow judgements: the `probe::` functions (memlock, the NCCL version against the
//! profile's pins, the counter proof and the `NCCL_IB_DISABLE=1` A/B, host facts from `rdmakit probe
//! --json`, the NCCL transport of a log) call the probe crate's judgements (`probe::judge`,
//! `probe::counters`) with what the profile says, and the `bench::` module (gpu-stage benchmarks on this
//! machine; nccl-tests, RDT and perftest results as tables, judged against a profile's expected rate when
//! given one; ours-beside-the-peer ratio checks) records probe's verdicts in the report. The judgements
//! themselves live in probe: text in, a typed verdict out.

use std::sync::Arc;

use k8s_render::Profile;
use probe::bench::BenchVerdict;
use probe::counters::{self, CounterSpec};
use probe::expect::{Expectation, ExpectationInputs};
use probe::judge::NcclPolicy;
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

/// What `profile` says about NCCL versions, for probe's judgement.
pub fn nccl_policy(profile: &Profile) -> NcclPolicy {
    let n = &profile.nccl;
    NcclPolicy {
        profile: profile.name.clone(),
        fabric: profile.fabric.clone(),
        pip_package: n.pip_package.clone(),
        pin: n.pin.clone(),
        known_bad: n.known_bad.clone(),
        bad_reason: n.bad_reason.clone(),
        known_good: n.known_good.clone(),
    }
}

/// The counter `profile` reads on its devices, for probe's summed delta.
pub fn counter_spec(profile: &Profile) -> CounterSpec {
    let d = &profile.devices;
    CounterSpec {
        name_pattern: d.name_pattern.to_string(),
        tx_counter: d.tx_counter.clone(),
        counter_multiplier: d.counter_multiplier,
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
    regp!(m, "memlock", |text: &str| -> RResult<Dynamic> {
        ser(&probe::judge::memlock(text))
    }, text: &str);
    // nccl_version(text) -> #{version, code} or ()
    reg!(m, "nccl_version", |text: &str| -> Dynamic {
        match probe::judge::find_nccl_version(text) {
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
        ser(&probe::judge::nccl_version(&nccl_policy(&p), text))
    }, text: &str, profile: Dynamic);
    // traffic(before, after, profile, expected_bytes) -> probe's TrafficProof + ok
    let c = ctx.clone();
    regp!(m, "traffic", move |before: Array, after: Array, profile: Dynamic, expected: i64| -> RResult<Dynamic> {
        let p = profile_arg(&c, &profile, "probe::traffic")?;
        let d = counters::summed_delta(&counter_spec(&p), &readings(&before, "probe::traffic before")?, &readings(&after, "probe::traffic after")?)
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
        let rdma = counters::summed_delta(
            &counter_spec(&p),
            &readings(&rb, what)?,
            &readings(&ra, what)?,
        )
        .map_err(|e| runtime_error(format!("{what} (RDMA run): {e}")))?;
        let tcp = counters::summed_delta(
            &counter_spec(&p),
            &readings(&tb, what)?,
            &readings(&ta, what)?,
        )
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
    // nccl_net_plugin(log, profile) -> #{ok, detail}: NCCL ran over the profile's net plugin (its marker
    // lines, the plugin's network, no TCP fallback, no failing plugin finding), or why not.
    let c = ctx.clone();
    regp!(m, "nccl_net_plugin", move |log: &str, profile: Dynamic| -> RResult<Dynamic> {
        let p = profile_arg(&c, &profile, "probe::nccl_net_plugin")?;
        let Some(plugin) = p.net_plugin() else {
            return Err(runtime_error(format!(
                "probe::nccl_net_plugin: profile {} does not use a net plugin (nccl.transport)",
                p.name
            )));
        };
        let facts = probe::judge::NetPluginFacts {
            plugin: plugin.name.clone(),
            library: plugin.library.clone(),
            fabric: p.fabric.clone(),
            marker: p.nccl_log_marker(),
        };
        ser(&probe::judge::nccl_net_plugin_path(log, &facts)
            .map_err(|e| runtime_error(format!("probe::nccl_net_plugin: {e}")))?)
    }, log: &str, profile: Dynamic);
    // tx_during_check(text, fabric) -> the GiB of the NCCL check's "<fabric> tx during check: X GiB" line, or ()
    reg!(m, "tx_during_check", |text: &str,
                                fabric: &str|
     -> Dynamic {
        probe::judge::tx_during_check(text, fabric).map_or(Dynamic::UNIT, Dynamic::from_float)
    });
    // nccl_transport(log) -> #{transport: "IB"|"Socket"|"unknown", evidence, line, gdr}
    regp!(m, "nccl_transport", |log: &str| -> RResult<Dynamic> {
        ser(&probe::judge::nccl_transport(log).map_err(|e| runtime_error(format!("probe::nccl_transport: {e}")))?)
    }, log: &str);
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

    // nccl_tests(text) -> #{ok, rows, avg_busbw_gbps, peak_busbw_gbps, wrong, nccl_version, errors, table, run}
    // (`run`: every parsed row, what probe::nccl_tests returned before the two became this one function)
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
    // rdt(text) -> #{ok, iterations, steady_gib_s, first_gib_s, cross_node, total_bytes, transport, table, run}
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
        let cmp = probe::judge::compare(
            name,
            num(&ours, "bench::compare ours")?,
            num(&peer, "bench::compare peer")?,
            &unit,
            &peer_name,
            min_ratio,
        );
        if opt_bool(&opts, "record")?.unwrap_or(true) {
            let mut r = c.report();
            let status = match (min_ratio, cmp.verdict.passes()) {
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
        "run": run,
    });
    v["ok"] = run.completed().into();
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
        "run": run,
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
    fn the_profiles_nccl_and_counter_fields_reach_probes_judgements() {
        let p = erdma();
        let c = probe::judge::nccl_version(&nccl_policy(&p), "22809\n");
        assert_eq!(c.verdict, probe::Verdict::Fail);
        assert!(c.detail.contains("known bad on eRDMA"), "{}", c.detail);
        assert!(c.fix.unwrap_or_default().contains(
            "nvidia-nccl-cu13==2.30.7 in the image (rdmakit render image --profile aliyun-erdma"
        ));
        let spec = counter_spec(&crate::profiles::load("mellanox-ib").unwrap());
        assert_eq!(spec.counter_multiplier, 4);
        let d = counters::summed_delta(&spec, &[0], &[100]).unwrap();
        assert_eq!(d.tx_bytes, Some(400));
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
