//! `probe::` — the probe crate's judgements and readers for workflows: text in (a command's output, a
//! log, what `kube::list`/`kube::nodes` returned), a typed verdict or fact out. The judgements take what
//! the profile says through [`crate::bridge`]; they live in probe, this is only the Rhai glue.

use std::sync::Arc;

use probe::counters;
use rhai::{Array, Dynamic, Map, Module};
use serde::Serialize;

use super::super::convert::to_dyn;
use super::super::{Ctx, runtime_error};
use super::profiles::profile_arg;
use super::{RResult, ser};

/// The `probe::` module.
pub(super) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    register_judgements(&mut m, ctx);
    register_cluster_facts(&mut m);
    m
}

/// probe's judgements with what a profile says: memlock, the NCCL version against the profile's pins, the
/// counter proof and the `NCCL_IB_DISABLE=1` A/B, host facts from `rdmakit probe --json`, the NCCL
/// transport, net plugin and device of a log, an active port in `ibv_devinfo` output.
fn register_judgements(m: &mut Module, ctx: &Arc<Ctx>) {
    regp!(m, "memlock",
        "memlock(ulimit -l output) -> #{ok, value, detail, fix}: locked memory is unlimited.",
        |text: &str| -> RResult<Dynamic> {
        ser(&probe::judge::memlock(text))
    }, text: &str);
    reg!(m, "nccl_version",
        "nccl_version(text) -> #{version, code} or (): the NCCL version a text names (`code`: \
        major*10000 + minor*100 + patch).",
        |text: &str| -> Dynamic {
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
    }, text: &str);
    let c = ctx.clone();
    regp!(m, "nccl_check",
        "nccl_check(text, profile) -> #{status, version, code, pin, detail, fix}: the NCCL version \
        against the profile's pin, known good and known bad versions.",
        move |text: &str, profile: Dynamic| -> RResult<Dynamic> {
        let p = profile_arg(&c, &profile, "probe::nccl_check")?;
        ser(&probe::judge::nccl_version(&crate::bridge::nccl_policy(&p), text))
    }, text: &str, profile: Dynamic);
    let c = ctx.clone();
    regp!(m, "traffic",
        "traffic(before, after, profile, expected_bytes) -> probe's TrafficProof + ok: the counter \
        proof (probe::counters) that the RDMA devices sent the bytes; readings are exec results (one \
        integer per line) or integers, summed over pods.",
        move |before: Array, after: Array, profile: Dynamic, expected: i64| -> RResult<Dynamic> {
        let p = profile_arg(&c, &profile, "probe::traffic")?;
        let d = counters::summed_delta(&crate::bridge::counter_spec(&p), &readings(&before, "probe::traffic before")?, &readings(&after, "probe::traffic after")?)
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
            &crate::bridge::counter_spec(&p),
            &readings(&rb, what)?,
            &readings(&ra, what)?,
        )
        .map_err(|e| runtime_error(format!("{what} (RDMA run): {e}")))?;
        let tcp = counters::summed_delta(
            &crate::bridge::counter_spec(&p),
            &readings(&tb, what)?,
            &readings(&ta, what)?,
        )
        .map_err(|e| runtime_error(format!("{what} (TCP run): {e}")))?;
        let cmp = counters::compare_ab(&rdma, &tcp, expected.max(0).unsigned_abs());
        let mut v = serde_json::to_value(&cmp).map_err(|e| runtime_error(e.to_string()))?;
        v["ok"] = (cmp.verdict == probe::Verdict::Ok).into();
        to_dyn(&v)
    };
    regp!(m, "ab",
        "ab(rdma_before, rdma_after, tcp_before, tcp_after, profile, expected_bytes) -> probe's \
        AbComparison + ok: the `NCCL_IB_DISABLE=1` A/B, the RDMA counters moving with RDMA on and \
        not with it off.",
        ab, rb: Array, ra: Array, tb: Array, ta: Array, profile: Dynamic, expected: i64);
    let c = ctx.clone();
    regp!(m, "counter_command",
        "counter_command(profile) -> argv: the `sh -c` command that prints the sum of the profile's \
        devices.tx_counter over the devices under /sys/class/infiniband that devices.name_pattern \
        matches and no glob of devices.exclude does (a front-end NIC's bytes are not counted).",
        move |profile: Dynamic| -> RResult<Array> {
        let p = profile_arg(&c, &profile, "probe::counter_command")?;
        let argv = crate::bridge::counter_spec(&p)
            .read_command()
            .map_err(|e| runtime_error(format!("probe::counter_command: profile {}: {e}", p.name)))?;
        Ok(argv.into_iter().map(Dynamic::from).collect())
    }, profile: Dynamic);
    regp!(m, "facts",
        "facts(json) -> #{verdict, checks, memlock_unlimited, devices, nccl}: the output of `rdmakit \
        probe --json` run in a pod, summarised.",
        |json: &str| -> RResult<Dynamic> {
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
    let c = ctx.clone();
    regp!(m, "nccl_net_plugin",
        "nccl_net_plugin(log, profile) -> #{ok, detail}: NCCL ran over the profile's net plugin (its \
        marker lines, the plugin's network, no TCP fallback, no failing plugin finding); else the \
        cause and fix.",
        move |log: &str, profile: Dynamic| -> RResult<Dynamic> {
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
    reg!(m, "tx_during_check",
        "tx_during_check(text, fabric) -> float or (): the GiB of the NCCL check's \"<fabric> tx \
        during check: X GiB\" line.",
        |text: &str,
                                fabric: &str|
     -> Dynamic {
        probe::judge::tx_during_check(text, fabric).map_or(Dynamic::UNIT, Dynamic::from_float)
    }, text: &str, fabric: &str);
    regp!(m, "nccl_transport",
        "nccl_transport(log) -> #{transport: \"IB\"|\"Socket\"|\"unknown\", evidence, line, gdr}: the \
        transport an NCCL INFO log shows.",
        |log: &str| -> RResult<Dynamic> {
        ser(&probe::judge::nccl_transport(log).map_err(|e| runtime_error(format!("probe::nccl_transport: {e}")))?)
    }, log: &str);
    regp!(m, "nccl_uses_device",
        "nccl_uses_device(log, ib_hca) -> #{ok, verdict, id, subject, summary, fix}: NCCL ran over \
        NET/IB on devices the NCCL_IB_HCA value `ib_hca` selects (`mlx5`, `=mlx5_0,mlx5_1`, \
        `^mlx5_2`; parsed and matched as NCCL does, see ib_hca_select): every `dev:port` of its \
        `NET/IB : Using` lines is inside the value; else why not (a port outside it, named; a \
        fallback to sockets; no transport line) and the fix.",
        |log: &str, hca: &str| -> RResult<Dynamic> {
        check(&probe::judge::nccl_uses_device(log, hca).map_err(|e| runtime_error(format!("probe::nccl_uses_device: {e}")))?)
    }, log: &str, hca: &str);
    regp!(m, "ibv_port_active",
        "ibv_port_active(text, ib_hca) -> #{ok, verdict, id, subject, summary, fix}: `ibv_devinfo` \
        output (every device, queried by exact name) has a port that the NCCL_IB_HCA value `ib_hca` \
        selects (NCCL's matching, ports included) in PORT_ACTIVE; else the selected ports' states \
        (with a fix), or the devices listed when it selects none (fix `()`: the caller knows why a \
        device is missing).",
        |text: &str, hca: &str| -> RResult<Dynamic> {
        check(&probe::judge::ibv_port_active(text, hca))
    }, text: &str, hca: &str);
    regp!(m, "ib_hca_listed",
        "ib_hca_listed(listing, ib_hca) -> #{ok, verdict, id, subject, summary, fix}: the devices of a \
        listing (`ibv_devinfo -l` after its `N HCAs found:` line, else `ls /sys/class/infiniband`'s \
        words) that the NCCL_IB_HCA value selects: ok naming them, fail naming what is listed.",
        |listing: &str, hca: &str| -> RResult<Dynamic> {
        check(&probe::judge::ib_hca_listed(listing, hca))
    }, listing: &str, hca: &str);
    reg!(m, "ib_hca_select",
        "ib_hca_select(names, ib_hca) -> array: the device names NCCL would use under NCCL_IB_HCA=ib_hca, \
        in order, as NCCL parses and matches it: a leading `^` excludes, then `=` makes names exact \
        (else each entry is a prefix: `mlx5` takes mlx5_0 and mlx5_10), comma-separated `dev[:port]` \
        entries (no port: every port; with `^`, a device is dropped only by an entry without a port), \
        nothing trimmed (a space is part of a name), an empty list selects every device.",
        |names: Array, hca: &str| -> Array {
        let names: Vec<String> = names.into_iter().map(|n| n.to_string()).collect();
        probe::nccl_ib_hca::IbHca::parse(hca)
            .select(names.iter().map(String::as_str))
            .into_iter()
            .map(Dynamic::from)
            .collect()
    }, names: Array, hca: &str);
    reg!(m, "device_names",
        "device_names(listing) -> array: the RDMA device names of `ibv_devinfo -l` output (after its \
        `N HCAs found:` line) or of `ls /sys/class/infiniband` (every word).",
        |listing: &str| -> Array {
        probe::nccl_ib_hca::device_names(listing).into_iter().map(Dynamic::from).collect()
    }, listing: &str);
}

/// A probe [`Check`](probe::Check) as scripts get it: its fields, `ok` when there is nothing to fix
/// (`ok` or `info`), and `fix` present (`()` when none) so a script can test it.
fn check(c: &probe::Check) -> RResult<Dynamic> {
    let mut v = serde_json::to_value(c).map_err(|e| runtime_error(e.to_string()))?;
    v["ok"] = c.verdict.passes().into();
    v["fix"] = c.fix.clone().into();
    to_dyn(&v)
}

/// probe's readers of what a cluster and its devices report: `ibv_devinfo`, DRA ResourceSlices against a
/// DeviceClass's selectors, the bytes an all_reduce moves, which nodes fit a worker, VKE's kubelet gate.
fn register_cluster_facts(m: &mut Module) {
    regp!(m, "ibv_devinfo",
        "ibv_devinfo(text) -> map: `ibv_devinfo -v` parsed (devices, ports, states, link layers). \
        nccl-tests and RDT output are parsed by `bench::nccl_tests` / `bench::rdt`.",
        |text: &str| -> RResult<Dynamic> {
        ser(&probe::parse::parse_ibv_devinfo(text)
            .map_err(|e| runtime_error(format!("ibv_devinfo output: {e}")))?)
    }, text: &str);
    regp!(m, "dra_selection",
        "dra_selection(slices, selectors, count) -> #{terms, attributes, driver, unchecked, selected, \
        lacking, able, short}: which devices of `kube::list(\"ResourceSlice\")` a DeviceClass's CEL \
        selectors (the profile's rdma.selectors) select, per node, with each partly matching device \
        and what it lacks; `able`/`short`: the nodes with at least `count` of them, and those \
        without.",
        |slices: Array, selectors: Array, count: i64| -> RResult<Dynamic> {
        dra_selection(&slices, &selectors, count)
    }, slices: Array, selectors: Array, count: i64);
    regp!(m, "all_reduce_min_bytes",
        "all_reduce_min_bytes(log, nodes) -> int: the bytes the nodes' devices must transmit together \
        for the log's all_reduce_perf table (2(N-1) x the sizes x the timed iterations).",
        |log: &str, nodes: i64| -> RResult<i64> {
        let run = probe::parse::parse_nccl_tests(log)
            .map_err(|e| runtime_error(format!("probe::all_reduce_min_bytes: nccl-tests output: {e}")))?;
        Ok(i64::try_from(run.all_reduce_min_bytes(node_count(nodes))).unwrap_or(i64::MAX))
    }, log: &str, nodes: i64);
    regp!(m, "planned_all_reduce_min_bytes",
        "planned_all_reduce_min_bytes(min_size, max_size, nodes) -> int: the same for the sizes an \
        MPIJob asks for (`-b 512M -e 8G -f 2`, nccl-tests' default iterations), before there is a \
        log.",
        |min: &str, max: &str, nodes: i64| -> RResult<i64> {
        let size = |s: &str, what: &str| {
            probe::parse::nccl_tests::parse_size(s).ok_or_else(|| {
                runtime_error(format!("probe::planned_all_reduce_min_bytes: {what} {s:?} is not an nccl-tests size (1024, 4K, 512M, 8G)"))
            })
        };
        let b = probe::parse::nccl_tests::planned_all_reduce_min_bytes(
            size(min, "min_size")?,
            size(max, "max_size")?,
            probe::parse::nccl_tests::DEFAULT_ITERS,
            node_count(nodes),
        );
        Ok(i64::try_from(b).unwrap_or(i64::MAX))
    }, min: &str, max: &str, nodes: i64);
    regp!(m, "worker_fit",
        "worker_fit(nodes, #{gpu_resource, gpus, resources, labels}) -> #{fit, unfit}: which of \
        `kube::nodes()`'s nodes can take a worker asking for that; each GPU/RDMA node that cannot, \
        with why.",
        |nodes: Array, needs: Map| -> RResult<Dynamic> {
        let what = "probe::worker_fit";
        let needs: probe::preflight::WorkerNeeds = rhai::serde::from_dynamic(&needs.into())
            .map_err(|e| runtime_error(format!("{what}: needs must be #{{gpu_resource, gpus, resources, labels}} ({e})")))?;
        let nodes: Vec<probe::preflight::NodeInfo> = nodes.iter().map(|d| node_info(d, what)).collect::<RResult<_>>()?;
        ser(&probe::preflight::worker_fit(&nodes, &needs))
    }, nodes: Array, needs: Map);
    reg!(m, "vke_kubelet_problem",
        "vke_kubelet_problem(version) -> text or (): why VKE's RDMA device plugin cannot run on that \
        kubelet version.",
        |version: Dynamic| -> Dynamic {
        let v = if version.is_unit() {
            None
        } else {
            Some(version.to_string())
        };
        probe::preflight::vke_rdma_kubelet_problem(v.as_deref())
            .map_or(Dynamic::UNIT, Dynamic::from)
    }, version: Dynamic);
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

/// Each of several counter readings ([`reading`]).
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

/// A node as kube::nodes() returns it (`#{name, labels, capacity, ...}`), for probe.
fn node_info(d: &Dynamic, what: &str) -> RResult<probe::preflight::NodeInfo> {
    let m = d.read_lock::<Map>().ok_or_else(|| {
        runtime_error(format!(
            "{what}: each node must be a map from kube::nodes()"
        ))
    })?;
    let text_map = |key: &str| -> std::collections::BTreeMap<String, String> {
        m.get(key)
            .and_then(|v| v.read_lock::<Map>().map(|x| x.clone()))
            .map(|x| {
                x.into_iter()
                    .filter(|(_, v)| !v.is_unit())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(probe::preflight::NodeInfo {
        name: m.get("name").map(|n| n.to_string()).unwrap_or_default(),
        capacity: text_map("capacity"),
        allocatable: text_map("allocatable"),
        labels: text_map("labels"),
        ..Default::default()
    })
}

/// A node count from a script: negative is none, beyond u32 is u32::MAX.
fn node_count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// probe::dra_selection's glue: the slices as `kube::list` returned them, back to JSON for probe's parser.
fn dra_selection(slices: &Array, selectors: &Array, count: i64) -> RResult<Dynamic> {
    let what = "probe::dra_selection";
    let items: Vec<serde_json::Value> = slices
        .iter()
        .map(rhai::serde::from_dynamic)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            runtime_error(format!(
                "{what}: slices must be what kube::list(\"ResourceSlice\") returned ({e})"
            ))
        })?;
    let list = serde_json::json!({ "items": items });
    let devices = probe::preflight::parse_resource_slices(&list.to_string())
        .map_err(|e| runtime_error(format!("{what}: {e}")))?;
    let selectors: Vec<String> = selectors
        .iter()
        .map(|d| {
            d.clone().into_string().map_err(|t| {
                runtime_error(format!(
                    "{what}: selectors must be CEL strings (the profile's rdma.selectors), got {t}"
                ))
            })
        })
        .collect::<RResult<_>>()?;
    let sel = probe::preflight::select_devices(&selectors, &devices);
    let (able, short) = sel.nodes_with(usize::try_from(count.max(0)).unwrap_or(usize::MAX));
    let mut v = serde_json::to_value(&sel).map_err(|e| runtime_error(e.to_string()))?;
    v["able"] = able.into();
    v["short"] = short.into();
    to_dyn(&v)
}
