//! The analysis modules as scripts see them: `bench::` (gpu-stage runs on this machine with the host
//! backend, nccl-tests/RDT tables, ours-beside-the-peer comparisons), `probe::` judgements, and
//! `shell::` with `--allow-shell`. A live-mode executor that refuses every cluster action stands in for
//! a cluster: none of these touch one.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::fixture;
use rdmakit::error::ExecError;
use rdmakit::exec::{
    CopySpec, ExecOutput, ExecSpec, Executor, FieldSpec, ListSpec, LogSpec, Manifest,
    MergeSecretsSpec, MergeSummary, ObjRef, WaitSpec,
};
use rdmakit::host::RunOutcome;
use rdmakit::report::Status;
use serde_json::Value;

const SECRET_B64: &str = "eyJhdXRocyI6eyJyZWciOnsiYXV0aCI6ImMzM2NyZXQifX19";

/// Live mode with no cluster: any cluster action is an error naming it.
#[derive(Debug)]
struct NoCluster;

fn refused<T>(what: &str) -> Result<T, ExecError> {
    Err(ExecError::Refused(format!(
        "no cluster in this test: {what}"
    )))
}

impl Executor for NoCluster {
    fn is_dry_run(&self) -> bool {
        false
    }
    fn has_api(&self, _: &str, _: &str, _: Duration) -> Result<bool, ExecError> {
        refused("has_api")
    }
    fn apply(&self, _: &Manifest, _: Duration) -> Result<Vec<ObjRef>, ExecError> {
        refused("apply")
    }
    fn delete(&self, _: &Manifest, _: Duration) -> Result<Vec<ObjRef>, ExecError> {
        refused("delete")
    }
    fn wait(&self, _: &WaitSpec) -> Result<Value, ExecError> {
        refused("wait")
    }
    fn exec(&self, _: &ExecSpec) -> Result<ExecOutput, ExecError> {
        refused("exec")
    }
    fn exec_many(&self, _: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        refused("exec_many")
    }
    fn get_field(&self, _: &FieldSpec) -> Result<String, ExecError> {
        refused("get_field")
    }
    fn copy_to(&self, _: &CopySpec) -> Result<(), ExecError> {
        refused("copy_to")
    }
    fn logs(&self, _: &LogSpec) -> Result<String, ExecError> {
        refused("logs")
    }
    fn list(&self, s: &ListSpec) -> Result<Vec<Value>, ExecError> {
        // One docker-registry Secret, as the API returns it (base64 values, kubectl's annotation).
        if s.kind == "Secret" {
            return Ok(vec![serde_json::json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                "metadata": {"name": "acr-push", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": SECRET_B64}},
                "data": {".dockerconfigjson": SECRET_B64}
            })]);
        }
        refused("list")
    }
    fn merge_registry_secrets(&self, _: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
        refused("merge_registry_secrets")
    }
}

fn live(script: &str, allow_shell: bool) -> (RunOutcome, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = common::host_config(out.path(), &[]);
    cfg.allow_shell = allow_shell;
    (common::run_t(Arc::new(NoCluster), cfg, script), out)
}

fn ok(r: &RunOutcome) {
    assert!(
        r.error.is_none(),
        "{}",
        r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
    );
}

fn check<'a>(r: &'a RunOutcome, name: &str) -> &'a rdmakit::report::Check {
    r.report
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {:?}", r.report.checks))
}

#[test]
fn bench_stage_runs_gpu_stage_on_this_machine_and_compares_with_the_peer() {
    // The host backend needs no GPU: a real pipeline run over loopback TCP, checksummed.
    let (r, _out) = live(
        r#"
        step("bench");
        let tcp = bench::stage("tcp", #{ size: "4MiB", iters: 2, backend: "host", connections: 2 });
        if tcp.dry_run || tcp.results.len() != 2 { throw `unexpected ${tcp}`; }
        for x in tcp.results { if !x.verified || x.gib_s_best <= 0.0 { throw `bad result ${x}`; } }
        let ip = bench::stage("inprocess", #{ size: "4MiB", iters: 2, backend: "host" });
        // inprocess runs its peer (pinned D2H) first, then the pipeline.
        let peer = ip.results[0];
        let ours = ip.results[1];
        if peer.name != "pinned_d2h" || ours.name != "inprocess" { throw `order ${peer.name} ${ours.name}`; }
        bench::compare("inprocess vs pinned D2H", ours.gib_s_median, peer.gib_s_median, #{ peer_name: "pinned D2H" });
        let c = bench::compare("floor", 2, 1, #{ unit: "GB/s", peer_name: "target", min_ratio: 1.5 });
        if c.ratio != 2.0 || !c.ok { throw `compare ${c}`; }
        bench::compare("too slow", 1.0, 2.0, #{ min_ratio: 0.95 });
        report::table("rows", bench::table(["size", "GiB/s"], [["4 MiB", 1.5], ["8 MiB", ()]]));
        "#,
        false,
    );
    ok(&r);
    let c = check(&r, "inprocess vs pinned D2H");
    assert_eq!(c.status, Status::Info);
    assert!(c.detail.contains("beside pinned D2H"), "{}", c.detail);
    assert_eq!(check(&r, "floor").status, Status::Pass);
    let slow = check(&r, "too slow");
    assert_eq!(slow.status, Status::Fail);
    assert!(
        slow.detail.contains("0.50x (want >= 0.95x)"),
        "{}",
        slow.detail
    );
    let names: Vec<&str> = r
        .report
        .measurements
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert!(
        names.contains(&"floor: ours") && names.contains(&"floor: target"),
        "{names:?}"
    );
    let t = &r.report.tables[0];
    assert_eq!(t.title, "rows");
    assert!(
        t.text.contains("4 MiB") && t.text.contains("1.50") && t.text.contains('-'),
        "{}",
        t.text
    );
    assert!(r.report.to_markdown().contains("rows:\n\n```text\n"));
}

#[test]
fn bench_stage_is_planned_in_dry_run_and_rejects_bad_options() {
    let out = tempfile::tempdir().unwrap();
    let (r, plan) = common::dry_run(
        "b",
        r#"let s = bench::stage("inprocess", #{ size: "512MiB" }); if !s.dry_run { throw "ran"; }"#,
        out.path(),
        &[],
        None,
    );
    ok(&r);
    assert!(
        plan.to_text().contains(
            "local benchmark (not run in dry-run): rdmakit bench inprocess --size 512MiB"
        ),
        "{}",
        plan.to_text()
    );
    let (r, _) = common::dry_run(
        "b",
        r#"bench::stage("inprocess", #{ sise: "1MiB" });"#,
        out.path(),
        &[],
        None,
    );
    assert!(r.error.unwrap().message.contains("unknown option `sise`"));
    let (r, _o) = live(r#"bench::stage("warp", #{ backend: "host" });"#, false);
    let e = r.error.unwrap();
    assert!(
        e.message
            .contains("unknown benchmark \"warp\" (inprocess, pinned-d2h, pinned-h2d, tcp)"),
        "{e}"
    );
    assert!(e.location.starts_with("t.rhai:1:"), "{}", e.location);
}

#[test]
fn bench_parses_nccl_tests_and_rdt_output_into_tables() {
    let nccl = fixture("logs/nccl-tests-erdma.log");
    let rdt = fixture("logs/rdt-demo-ok.log");
    let out = tempfile::tempdir().unwrap();
    let (r, _) = common::dry_run(
        "b",
        &format!(
            r#"
            let n = bench::nccl_tests({nccl:?});
            // -c 0 turns validation off: #wrong is N/A, i.e. ().
            if !n.ok || n.rows != 5 || n.wrong != () {{ throw `nccl ${{n}}`; }}
            if n.peak_busbw_gbps != 9.06 {{ throw `peak ${{n.peak_busbw_gbps}}`; }}
            if !n.table.contains("8589934592") {{ throw n.table; }}
            let d = bench::rdt({rdt:?});
            if !d.ok || d.iterations != 3 || d.cross_node != true || d.transport != "eRDMA" {{ throw `rdt ${{d}}`; }}
            if (d.steady_gib_s - 11.675).abs() > 0.001 {{ throw `steady ${{d.steady_gib_s}}`; }}
            if d.total_bytes != 3 * 536870912 {{ throw `bytes ${{d.total_bytes}}`; }}
            "#
        ),
        out.path(),
        &[],
        None,
    );
    ok(&r);
}

#[test]
fn probe_judgements_for_scripts() {
    let facts_json = {
        let root = common::workspace().join("crates/probe/tests/fixtures/erdma");
        let f = probe::HostFacts::gather(&probe::ProbeOptions::new(&root)).unwrap();
        serde_json::to_string(&f).unwrap()
    };
    let nccl_log = fixture("logs/nccl-tcp-fallback.log");
    let out = tempfile::tempdir().unwrap();
    let (r, _) = common::dry_run(
        "p",
        &format!(
            r#"
            let m = probe::memlock("64\n");
            if m.ok || m.value != "64 KiB" || !m.fix.contains("LimitMEMLOCK=infinity") {{ throw `memlock ${{m}}`; }}
            if !probe::memlock("unlimited").ok {{ throw "unlimited"; }}
            let v = probe::nccl_version("23007\n");
            if v.version != "2.30.7" || v.code != 23007 {{ throw `version ${{v}}`; }}
            if probe::nccl_version("nothing") != () {{ throw "no version"; }}
            let bad = probe::nccl_check("22809", "aliyun-erdma");
            if bad.status != "fail" || !bad.fix.contains("nvidia-nccl-cu13==2.30.7") {{ throw `check ${{bad}}`; }}
            let prof = profiles::load("aliyun-erdma");
            if probe::nccl_check("23007", prof).status != "pass" {{ throw "pin"; }}
            let t = probe::traffic([#{{ stdout: "100\n", code: 0, dry_run: false }}, 5], [#{{ stdout: "1642000100\n", code: 0, dry_run: false }}, 5], prof, 1610612736);
            if !t.ok || t.measured_bytes != 1642000000 {{ throw `traffic ${{t}}`; }}
            let flat = probe::traffic([1, 2], [1, 2], prof, 1610612736);
            if flat.ok || !flat.summary.contains("silent TCP fallback") {{ throw `flat ${{flat}}`; }}
            let ab = probe::ab([0], [1642000000], [0], [0], prof, 1610612736);
            if !ab.ok || ab.lines[1] != "TCP-run eRDMA tx delta: 0.000 GiB" {{ throw `ab ${{ab}}`; }}
            let leaky = probe::ab([0], [1642000000], [0], [900000000], prof, 1610612736);
            if leaky.ok || leaky.fix == () {{ throw `leaky ${{leaky}}`; }}
            let tr = probe::nccl_transport({nccl_log:?});
            if tr.transport != "Socket" || !tr.evidence.contains("NET/Socket") {{ throw `transport ${{tr}}`; }}
            let f = probe::facts({facts_json:?});
            if f.devices != ["erdma_0"] || f.checks.len() == 0 {{ throw `facts ${{f}}`; }}
            "#
        ),
        out.path(),
        &[],
        None,
    );
    ok(&r);
    // Bad input names what was expected.
    for (script, want) in [
        (
            r#"probe::traffic(["x"], ["y"], "aliyun-erdma", 1);"#,
            "expected one counter value per line, got \"x\"",
        ),
        (
            r#"probe::traffic([1], [1, 2], "aliyun-erdma", 1);"#,
            "1 reading(s) before but 2 after",
        ),
        (
            r#"probe::traffic([#{ stdout: "", code: 0, dry_run: true }], [1], "aliyun-erdma", 1);"#,
            "dry-run placeholder has no counter value",
        ),
        (
            r#"probe::facts("{}");"#,
            "not the output of `rdmakit probe --json`",
        ),
        (
            r#"probe::nccl_check("23007", #{ name: 1 });"#,
            "must be a profile name or what profiles::load returned",
        ),
    ] {
        let (r, _) = common::dry_run("p", script, out.path(), &[], None);
        let e = r.error.unwrap_or_else(|| panic!("{script} did not fail"));
        assert!(e.message.contains(want), "{script}: {}", e.message);
    }
}

/// Issue 25: NCCL_IB_HCA as NCCL reads it and the counter devices' exclude list, as scripts call them.
#[test]
fn nccl_ib_hca_and_counter_excludes_for_scripts() {
    let out = tempfile::tempdir().unwrap();
    let (r, _) = common::dry_run(
        "p",
        r#"
        let names = ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_bond_0"];
        let s = probe::ib_hca_select(names, "mlx5_1");
        if s != ["mlx5_1", "mlx5_10"] { throw `prefix ${s}`; }
        s = probe::ib_hca_select(names, "=mlx5_0,mlx5_1");
        if s != ["mlx5_0", "mlx5_1"] { throw `exact ${s}`; }
        s = probe::ib_hca_select(names, "^=mlx5_bond_0");
        if s != ["mlx5_0", "mlx5_1", "mlx5_10"] { throw `exclude ${s}`; }
        let listed = probe::device_names("unlimited\n2 HCAs found:\n\tmlx5_0\n\tmlx5_1\n");
        if listed != ["mlx5_0", "mlx5_1"] { throw `listing ${listed}`; }
        let l = probe::ib_hca_listed("2 HCAs found:\n\tmlx5_0\n\tmlx5_1\n", "erdma");
        if l.ok || !l.summary.contains("(mlx5_0, mlx5_1)") { throw `listed ${l}`; }
        let log = "w0 NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n";
        let u = probe::nccl_uses_device(log, "=mlx5_0,mlx5_1");
        if !u.ok { throw `uses ${u}`; }
        u = probe::nccl_uses_device(log, "^mlx5_1");
        if u.ok || !u.summary.contains("mlx5_1:1, outside") { throw `outside ${u}`; }

        let prof = profiles::load("mellanox-ib");
        let plain = probe::counter_command(prof);
        if plain[2] != "cat /sys/class/infiniband/mlx5_*/ports/1/counters/port_xmit_data | awk '{s+=$1} END {printf \"%.0f\\n\", s}'" { throw `plain ${plain}`; }
        prof.devices.exclude = ["mlx5_bond_*"];
        let cmd = probe::counter_command(prof);
        if !cmd[2].contains("case \"${d##*/}\" in mlx5_bond_*) continue ;; esac") { throw `exclude ${cmd}`; }
        let t = probe::traffic([0], [100], prof, 400);
        if !t.ok || !t.summary.contains("mlx5_* but mlx5_bond_*") { throw `traffic ${t}`; }
        "#,
        out.path(),
        &[],
        None,
    );
    ok(&r);
    let (r, _) = common::dry_run(
        "p",
        r#"let prof = profiles::load("mellanox-ib"); prof.devices.exclude = ["x; id"]; probe::counter_command(prof);"#,
        out.path(),
        &[],
        None,
    );
    let e = r
        .error
        .unwrap_or_else(|| panic!("a bad exclude glob was accepted"));
    assert!(
        e.message
            .contains("exclude `x; id` must be a device-name glob"),
        "{}",
        e.message
    );
}

/// Issue 25 / 24 item 6: the workflows' device checks (scripts/lib/verify.rhai) with the ib_hca values of
/// the mlx5 profiles: a prefix (`mlx5`) and lists pass on a working pod; a device outside the value fails
/// naming it. Before, `ibv_devinfo -d mlx5` was the query and `contains(ib_hca)` the test.
#[test]
fn verify_device_checks_take_nccl_ib_hca_values() {
    let devinfo = "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tEthernet\n\nhca_id:\tmlx5_1\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tEthernet\n";
    let log = "w0 NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n";
    let script = format!(
        r#"
        import "verify" as verify;
        fn res(out) {{ #{{ dry_run: false, stdout: out, stderr: "", code: 0 }} }}
        for hca in ["mlx5", "=mlx5_0,mlx5_1", "^mlx5_2", "=mlx5_2"] {{
            verify::ib_hca_listed(res("unlimited\nmlx5_0\nmlx5_1\n"), `listed ${{hca}}`, hca, 1, "the fix");
            verify::ibv_port_active(res({devinfo:?}), `active ${{hca}}`, hca, "the fix");
            verify::nccl_uses_ib({log:?}, `uses ${{hca}}`, hca);
        }}
        "#
    );
    let out = tempfile::tempdir().unwrap();
    let (r, _) = common::dry_run("p", &script, out.path(), &[], None);
    ok(&r);
    use rdmakit::report::Status;
    for hca in ["mlx5", "=mlx5_0,mlx5_1", "^mlx5_2"] {
        for what in ["listed", "active", "uses"] {
            let c = check(&r, &format!("{what} {hca}"));
            assert_eq!(c.status, Status::Pass, "{what} {hca}: {}", c.detail);
        }
    }
    let c = check(&r, "listed =mlx5_2");
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.detail.contains("(mlx5_0, mlx5_1) — the fix"),
        "{}",
        c.detail
    );
    assert_eq!(check(&r, "active =mlx5_2").status, Status::Fail);
    let c = check(&r, "uses =mlx5_2");
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.detail
            .starts_with("NCCL used mlx5_0:1, mlx5_1:1, outside NCCL_IB_HCA==mlx5_2"),
        "{}",
        c.detail
    );
}

#[test]
fn shell_runs_with_allow_shell_and_reports_the_exit_code() {
    let (r, _out) = live(
        r#"let r = shell::run("echo hello; exit 3"); if r.stdout != "hello\n" || r.code != 3 || r.dry_run { throw `${r}`; }"#,
        true,
    );
    ok(&r);
    let (r, _out) = live(r#"shell::run("echo hello");"#, false);
    let e = r.error.unwrap();
    assert!(e.message.contains("re-run with --allow-shell"), "{e}");
}

#[test]
fn secret_values_never_reach_scripts() {
    let (r, out) = live(
        r#"
        let s = kube::list("Secret");
        print(s);
        report::info("secrets", `${s}`);
        if s[0].metadata.name != "acr-push" || s[0].data[".dockerconfigjson"] != "<redacted>" { throw `${s}`; }
        "#,
        false,
    );
    ok(&r);
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(md.contains("acr-push") && !md.contains(SECRET_B64), "{md}");
    let (r, _out) = live(r#"kube::get_field("Secret", "acr-push", ".data");"#, false);
    let e = r.error.unwrap();
    assert!(e.message.contains("never its values"), "{e}");
}
