//! `bench::` — gpu-stage benchmarks on this machine (`bench::stage`), nccl-tests, RDT and perftest results
//! as tables and judged against a profile's expected rate when given one (probe's `ThroughputVerdict`), and
//! ours-beside-the-peer ratio checks; what is judged is recorded in the report.

use std::sync::Arc;

use probe::expect::Expectation;
use probe::throughput::ThroughputVerdict;
use rhai::{Array, Dynamic, Map, Module};

use super::super::convert::{check_keys, opt_bool, opt_int, opt_str, to_dyn};
use super::super::{Ctx, runtime_error};
use super::profiles::profile_arg;
use super::{RResult, ser};
use crate::report::Status;

/// A size option (`64MiB`) of `bench::stage`, or its default.
fn size_opt(opts: &Map, key: &str, default: &str) -> RResult<usize> {
    let s = opt_str(opts, key)?.unwrap_or_else(|| default.to_owned());
    gpu_stage::parse_size(&s)
        .map_err(|e| runtime_error(format!("bench::stage: option `{key}`: {e}")))
}

/// Runs a gpu-stage benchmark on this machine (`inprocess` also runs its peer, pinned D2H).
fn run_stage(kind: &str, opts: &Map) -> RResult<Vec<gpu_stage::bench::BenchResult>> {
    // `gpu_bench`: gpu-stage's benchmarks, not this `bench::` module.
    use gpu_stage::bench::{self as gpu_bench, Backend, BenchConfig, Direction};
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
            gpu_bench::run_pinned_copy(&cfg, Direction::D2h).map_err(err)?,
            gpu_bench::run_inprocess(&cfg).map_err(err)?,
        ],
        "pinned-d2h" => vec![gpu_bench::run_pinned_copy(&cfg, Direction::D2h).map_err(err)?],
        "pinned-h2d" => vec![gpu_bench::run_pinned_copy(&cfg, Direction::H2d).map_err(err)?],
        "tcp" => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| runtime_error(format!("bench::stage tcp: bind 127.0.0.1: {e}")))?;
            let addr = listener
                .local_addr()
                .map_err(|e| runtime_error(format!("bench::stage tcp: {e}")))?;
            let rcfg = cfg.clone();
            let receiver =
                std::thread::spawn(move || gpu_bench::run_tcp_receiver(&rcfg, &listener));
            let sent = gpu_bench::run_tcp_sender(&cfg, addr).map_err(err)?;
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
fn text_table(headers: &[String], rows: &[Vec<String>]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header(headers.to_vec());
    for r in rows {
        t.add_row(r.clone());
    }
    t.to_string()
}

/// A table cell: floats with two decimals, `()` as `-`.
fn cell(d: &Dynamic) -> String {
    if d.is_float() {
        d.as_float().map(|f| format!("{f:.2}")).unwrap_or_default()
    } else if d.is_unit() {
        "-".into()
    } else {
        d.to_string()
    }
}

/// A number from a script: a float or an integer.
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

/// The `bench::` module.
pub(super) fn create_module(ctx: &Arc<Ctx>) -> Module {
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
    regp!(&mut m, "stage",
        "stage(kind[, #{size, iters, backend, chunk, slots, connections}]) -> #{dry_run, results}: \
        runs gpu-stage's `inprocess` (after its peer, a pinned D2H copy), `pinned-d2h`, `pinned-h2d` \
        or `tcp` benchmark on this machine; planned, not run, in a dry run (the options are \
        checked).",
        move |kind: &str| s2(kind, Map::new()), kind: &str);
    regp!(&mut m, "stage",
        "stage(kind[, #{size, iters, backend, chunk, slots, connections}]) -> #{dry_run, results}: \
        runs gpu-stage's `inprocess` (after its peer, a pinned D2H copy), `pinned-d2h`, `pinned-h2d` \
        or `tcp` benchmark on this machine; planned, not run, in a dry run (the options are \
        checked).",
        stage, kind: &str, opts: Map);

    regp!(&mut m, "nccl_tests",
        "nccl_tests(text) -> #{ok, rows, avg_busbw_gbps, peak_busbw_gbps, wrong, nccl_version, \
        errors, table, run}: nccl-tests output parsed (`run`: every parsed row).",
        |text: &str| -> RResult<Dynamic> {
        to_dyn(&nccl_tests_json(&parse_nccl_tests(text)?))
    }, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "nccl_tests",
        "nccl_tests(text, #{profile, instance_type, nic_write_gib_s, ok_fraction, name, record}): as \
        nccl_tests(text), plus `bench` (probe's verdict judged against the profile's expected rate: \
        `expectation.fraction`, `of_one_nic`, `of_node`, the model's inputs), `check` and \
        `expectation_table`. Unless `record: false`, the check is recorded (ok: pass, warn: warn, \
        fail: fail) with the model's table; without `profile` the run is judged on its own.",
        move |text: &str, opts: Map| -> RResult<Dynamic> {
        let run = parse_nccl_tests(text)?;
        judge_run(&c, "bench::nccl_tests", &opts, nccl_tests_json(&run), probe::throughput::nccl_tests(&run))
    }, text: &str, opts: Map);
    regp!(&mut m, "rdt",
        "rdt(text) -> #{ok, iterations, steady_gib_s, first_gib_s, cross_node, total_bytes, \
        transport, table, run}: the RDT demo's output parsed.",
        |text: &str| -> RResult<Dynamic> {
        to_dyn(&rdt_json(&parse_rdt(text)?))
    }, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "rdt",
        "rdt(text, #{profile, instance_type, nic_write_gib_s, ok_fraction, name, record}): as \
        rdt(text), judged and recorded as nccl_tests(text, opts).",
        move |text: &str, opts: Map| -> RResult<Dynamic> {
        let run = parse_rdt(text)?;
        judge_run(&c, "bench::rdt", &opts, rdt_json(&run), probe::throughput::rdt(&run))
    }, text: &str, opts: Map);
    regp!(&mut m, "perftest",
        "perftest(text) -> #{test, device, best_avg_gib_s, rows, table}: perftest (`ib_write_bw`, \
        ...) output parsed.",
        |text: &str| -> RResult<Dynamic> {
        to_dyn(&perftest_json(&parse_perftest(text)?))
    }, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "perftest",
        "perftest(text, #{profile, instance_type, nic_write_gib_s, ok_fraction, name, record}): as \
        perftest(text), judged against one NIC's expectation and recorded as nccl_tests(text, opts).",
        move |text: &str, opts: Map| -> RResult<Dynamic> {
        let run = parse_perftest(text)?;
        judge_run(&c, "bench::perftest", &opts, perftest_json(&run), probe::throughput::perftest(&run))
    }, text: &str, opts: Map);
    regp!(&mut m, "table",
        "table(headers, rows) -> text: rows as a table (floats with two decimals, () as -).",
        |headers: Array, rows: Array| -> RResult<String> {
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
    regp!(&mut m, "compare",
        "compare(name, ours, peer[, #{unit, peer_name, min_ratio, record}]) -> #{ratio, ok, detail, \
        ...}: records ours beside the peer and the ratio: a check that fails below `min_ratio` (info \
        without one), and both figures as measurements (live only).",
        move |name: &str, ours: Dynamic, peer: Dynamic| cmp2(name, ours, peer, Map::new()), name: &str, ours: Dynamic, peer: Dynamic);
    regp!(&mut m, "compare",
        "compare(name, ours, peer[, #{unit, peer_name, min_ratio, record}]) -> #{ratio, ok, detail, \
        ...}: records ours beside the peer and the ratio: a check that fails below `min_ratio` (info \
        without one), and both figures as measurements (live only).",
        cmp, name: &str, ours: Dynamic, peer: Dynamic, opts: Map);
    m
}

/// A bench verdict as scripts see it: `bench` (the verdict with its judgement against the expectation),
/// `check` (what the report records) and `expectation_table` (the model's inputs; `()` without one).
fn judged_json(v: &ThroughputVerdict, e: Option<&Expectation>) -> serde_json::Value {
    serde_json::json!({
        "bench": v,
        "check": v.check(),
        "expectation_table": e.map(probe::report::expectation_table),
    })
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
    verdict: ThroughputVerdict,
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
                crate::bridge::profile_expectation(&p, it.as_deref(), nic_write)
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
        r.check(&name, Status::from(c.verdict), &detail);
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

/// `bench::stage`'s options as the `rdmakit bench` flags a plan shows.
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

    fn erdma() -> k8s_render::Profile {
        crate::profiles::load("aliyun-erdma").unwrap()
    }

    #[test]
    fn a_judged_run_carries_the_verdict_its_check_and_the_model() {
        let e =
            crate::bridge::profile_expectation(&erdma(), Some("ecs.ebmgn9gc.64xlarge"), Some(20.4))
                .unwrap();
        // Seed 000's RDT steady state (11.7 GiB/s) against the node: below 80 %, above 40 %.
        let v = probe::throughput::rate("rdt-bandwidth", "RDT demo", 11.7).against(&e, 0.8);
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
        // Below the ok fraction, above the fail one: a warning, recorded as one (it used to become info).
        assert_eq!(Status::from(v.verdict), Status::Warn);
        let fast = probe::throughput::rate("rdt-bandwidth", "RDT demo", e.gib_s).against(&e, 0.8);
        assert_eq!(Status::from(fast.verdict), Status::Pass);
        let slow =
            probe::throughput::rate("rdt-bandwidth", "RDT demo", e.gib_s * 0.1).against(&e, 0.8);
        assert_eq!(Status::from(slow.verdict), Status::Fail);
        let alone = judged_json(
            &probe::throughput::rate("rdt-bandwidth", "RDT demo", 1.0),
            None,
        );
        assert!(
            alone["expectation_table"].is_null() && alone["bench"].get("expectation").is_none()
        );
    }
}
