//! Script errors name file, line and step; the sandbox stops runaway scripts; shell is off by default.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::sync::Arc;

use rdmakit::exec::dry::DryRunExecutor;
use rdmakit::host::{HostConfig, Limits, RunOutcome};

fn run(script: &str) -> RunOutcome {
    run_limited(script, None)
}

/// Runs `script` in dry-run as scripts/workflows/t.rhai under `limits` (the defaults when `None`).
fn run_limited(script: &str, limits: Option<Limits>) -> RunOutcome {
    let out = tempfile::tempdir().unwrap();
    common::dry_run("t", script, out.path(), &[], limits).0
}

#[test]
fn runtime_error_names_file_line_and_step() {
    let o = run("step(\"Deploy\");\nlet x = 1;\nkube::apply(\"does/not/exist.yaml\");\n");
    let e = o.error.expect("fails");
    assert_eq!(e.location, "scripts/workflows/t.rhai:3:7");
    assert!(
        e.message
            .contains("does/not/exist.yaml: no such file or directory"),
        "{}",
        e.message
    );
    assert_eq!(e.step.as_deref(), Some("Deploy"));
    let shown = e.to_string();
    assert!(shown.contains("during step: Deploy"), "{shown}");
}

#[test]
fn syntax_error_has_a_line() {
    let e = run("step(\"a\");\nlet = 5;\n").error.expect("fails");
    assert!(
        e.location.starts_with("scripts/workflows/t.rhai:2"),
        "{}",
        e.location
    );
}

#[test]
fn throw_shows_the_message() {
    let e = run("step(\"Secrets\");\nthrow \"set --set pull_secret_source=...\";")
        .error
        .expect("fails");
    assert!(
        e.message.contains("set --set pull_secret_source"),
        "{}",
        e.message
    );
    assert_eq!(e.location, "scripts/workflows/t.rhai:2:1");
}

#[test]
fn error_inside_an_imported_module_names_the_module_file() {
    let e = run("import \"verify\" as verify;\nstep(\"x\");\nverify::gib(\"lots\");\n")
        .error
        .expect("fails");
    assert!(e.location.contains("verify.rhai"), "{e:?}");
    assert!(
        e.trace
            .iter()
            .any(|t| t.contains("gib") && t.contains("t.rhai:3")),
        "{:?}",
        e.trace
    );
}

#[test]
fn unknown_option_is_rejected() {
    let e = run("kube::wait_pods(\"app=x\", #{ timeout: 5, expectt: 2 });")
        .error
        .expect("fails");
    assert!(
        e.message.contains("unknown option `expectt`"),
        "{}",
        e.message
    );
}

#[test]
fn missing_module_is_an_error() {
    let e = run("import \"nope\" as n;").error.expect("fails");
    assert!(e.message.contains("nope"), "{}", e.message);
}

#[test]
fn infinite_loop_hits_the_operation_limit() {
    let limits = Limits {
        max_operations: 10_000,
        ..Limits::default()
    };
    let e = run_limited("let i = 0; loop { i += 1; }", Some(limits))
        .error
        .expect("stopped");
    assert!(e.limit, "{e:?}");
    assert!(
        e.message.to_lowercase().contains("too many operations"),
        "{}",
        e.message
    );
}

#[test]
fn runaway_recursion_hits_the_call_depth_limit() {
    let e = run("fn f(n) { f(n + 1) }\nf(0);").error.expect("stopped");
    assert!(
        e.limit || e.message.to_lowercase().contains("stack overflow"),
        "{e:?}"
    );
}

#[test]
fn huge_strings_hit_the_size_limit() {
    let limits = Limits {
        max_string_size: 1024,
        ..Limits::default()
    };
    let e = run_limited("let s = \"x\"; loop { s += s; }", Some(limits))
        .error
        .expect("stopped");
    assert!(e.limit, "{e:?}");
}

#[test]
fn shell_is_refused_without_allow_shell() {
    let e = run("shell::run(\"echo hi\");").error.expect("refused");
    assert!(e.message.contains("--allow-shell"), "{}", e.message);
}

#[test]
fn fs_write_is_confined_to_the_out_dir() {
    let e = run("fs::write(\"../escape.txt\", \"x\");")
        .error
        .expect("refused");
    assert!(e.message.contains("inside the out dir"), "{}", e.message);
    let out = tempfile::tempdir().unwrap();
    let (o, _) = common::dry_run(
        "t",
        "fs::write(\"notes/a.txt\", \"hello\");",
        out.path(),
        &[],
        None,
    );
    assert!(o.error.is_none());
    assert_eq!(
        std::fs::read_to_string(out.path().join("notes/a.txt")).unwrap(),
        "hello"
    );
}

#[test]
fn measure_is_refused_in_dry_run() {
    let e = run("report::measure(\"bw\", 1.5, \"GiB/s\");")
        .error
        .expect("refused");
    assert!(e.message.contains("nothing was measured"), "{}", e.message);
}

#[test]
fn params_convert_to_the_default_type() {
    let out = tempfile::tempdir().unwrap();
    let script = "let n = params::get(\"n\", 1); if n != 3 { throw \"n\"; }\nlet b = params::get(\"b\", false); if !b { throw \"b\"; }\nparams::get(\"bad\", 1);";
    let e = common::dry_run(
        "t",
        script,
        out.path(),
        &[("n", "3"), ("b", "true"), ("bad", "x")],
        None,
    )
    .0
    .error
    .expect("bad int");
    assert!(
        e.message.contains("--set bad=x: expected an integer"),
        "{}",
        e.message
    );
    assert_eq!(e.location, "scripts/workflows/t.rhai:3:9");
}

/// The dry-run executor, except that every wait times out (a cluster error).
#[derive(Debug)]
struct WaitsTimeOut(DryRunExecutor);

mod waits_time_out {
    use super::WaitsTimeOut;
    use rdmakit::error::ExecError;
    use rdmakit::exec::*;
    use serde_json::Value;
    use std::time::Duration;

    impl Executor for WaitsTimeOut {
        fn is_dry_run(&self) -> bool {
            false
        }
        fn has_api(&self, a: &str, k: &str, t: Duration) -> Result<bool, ExecError> {
            self.0.has_api(a, k, t)
        }
        fn apply(&self, m: &Manifest, t: Duration) -> Result<Vec<ObjRef>, ExecError> {
            self.0.apply(m, t)
        }
        fn delete(&self, m: &Manifest, t: Duration) -> Result<Vec<ObjRef>, ExecError> {
            self.0.delete(m, t)
        }
        fn wait(&self, s: &WaitSpec) -> Result<Value, ExecError> {
            Err(ExecError::Timeout {
                action: format!("wait {} {:?}", s.kind, s.selector),
                limit: s.timeout,
                hint: String::new(),
            })
        }
        fn exec(&self, s: &ExecSpec) -> Result<ExecOutput, ExecError> {
            self.0.exec(s)
        }
        fn exec_many(&self, s: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
            self.0.exec_many(s)
        }
        fn get_field(&self, s: &FieldSpec) -> Result<String, ExecError> {
            self.0.get_field(s)
        }
        fn copy_to(&self, s: &CopySpec) -> Result<(), ExecError> {
            self.0.copy_to(s)
        }
        fn logs(&self, s: &LogSpec) -> Result<String, ExecError> {
            self.0.logs(s)
        }
        fn list(&self, s: &ListSpec) -> Result<Vec<Value>, ExecError> {
            self.0.list(s)
        }
        fn merge_registry_secrets(&self, s: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
            self.0.merge_registry_secrets(s)
        }
    }
}

/// Runs `script` as `t.rhai` on the dry-run executor, writing into a fresh out dir.
fn run_t_dry(script: &str, cfg: impl FnOnce(&mut HostConfig)) -> RunOutcome {
    let out = tempfile::tempdir().unwrap();
    let mut config = HostConfig::new(out.path());
    cfg(&mut config);
    common::run_t(Arc::new(dry()), config, script)
}

fn dry() -> DryRunExecutor {
    DryRunExecutor::new("t.rhai", None, None)
}

fn run_live(script: &str) -> RunOutcome {
    let out = tempfile::tempdir().unwrap();
    common::run_t(
        Arc::new(WaitsTimeOut(dry())),
        HostConfig::new(out.path()),
        script,
    )
}

#[test]
fn cluster_errors_are_told_apart_by_type_not_by_a_message_prefix() {
    // A cluster failure: flagged, and its message has no marker in it.
    let e = run_live("step(\"Wait\");\nkube::wait_pods(\"app=x\", #{ timeout: 1 });")
        .error
        .expect("times out");
    assert!(e.cluster, "{e:?}");
    assert!(e.message.starts_with("wait Pod"), "{}", e.message);
    assert_eq!(e.location, "t.rhai:2:7");
    // A script's own text that happens to start with "cluster: " is a script error (exit 2).
    let e = run_live("throw \"cluster: this is the script talking\";")
        .error
        .expect("throws");
    assert!(!e.cluster, "{e:?}");
    assert_eq!(e.message, "cluster: this is the script talking");
    // A caught cluster error reads as its message; rethrown, it is still a cluster error.
    let o = run_live(
        "try { kube::wait_pods(\"app=x\", #{ timeout: 1 }); } catch (e) { report::info(\"caught\", `${e}`); }",
    );
    assert!(o.error.is_none(), "{:?}", o.error);
    let c = o.report.checks.iter().find(|c| c.name == "caught").unwrap();
    assert!(c.detail.contains("timed out after 1s"), "{}", c.detail);
    let e = run_live("try { kube::wait_pods(\"app=x\", #{ timeout: 1 }); } catch (e) { throw e; }")
        .error
        .expect("rethrown");
    assert!(e.cluster, "{e:?}");
}

#[test]
fn fs_read_is_confined_to_the_out_dir_the_workflow_folder_and_named_files() {
    let wf = tempfile::tempdir().unwrap();
    std::fs::write(wf.path().join("data.txt"), "from the workflow folder").unwrap();
    let named = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(named.path(), "named on the command line").unwrap();
    let elsewhere = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(elsewhere.path(), "not yours").unwrap();
    let (wf_dir, named_path) = (wf.path().to_owned(), named.path().to_owned());
    let allow = move |c: &mut HostConfig| {
        c.read_dirs = vec![wf_dir.clone()];
        c.read_files = vec![named_path.clone()];
    };

    // Allowed: a file the run wrote, one in the workflow's folder (relative or absolute), a named file.
    let script = format!(
        "fs::write(\"own.txt\", \"own\");\n\
         if fs::read(\"own.txt\") != \"own\" {{ throw \"own\"; }}\n\
         if fs::read(\"data.txt\") != \"from the workflow folder\" {{ throw \"rel\"; }}\n\
         if fs::read({:?}) != \"from the workflow folder\" {{ throw \"abs\"; }}\n\
         if fs::read({:?}) != \"named on the command line\" {{ throw \"named\"; }}\n",
        wf.path().join("data.txt").display().to_string(),
        named.path().display().to_string(),
    );
    let o = run_t_dry(&script, allow.clone());
    assert!(o.error.is_none(), "{:?}", o.error);

    // Refused, naming the path and what is allowed: /etc/passwd, another file, `..` out of the out dir,
    // a symlink in the out dir that points outside, and the other readers (cp, apply, exists).
    let outside = elsewhere.path().display().to_string();
    for (script, path) in [
        (
            "fs::read(\"/etc/passwd\");".to_owned(),
            "/etc/passwd".to_owned(),
        ),
        (format!("fs::read({outside:?});"), outside.clone()),
        (
            "fs::read(\"../../../../../../etc/passwd\");".to_owned(),
            "../../../../../../etc/passwd".to_owned(),
        ),
        (
            format!("kube::cp({outside:?}, \"pod\", \"/tmp/x\");"),
            outside.clone(),
        ),
        (
            "kube::apply(\"/etc/passwd\");".to_owned(),
            "/etc/passwd".to_owned(),
        ),
        (
            "fs::exists(\"/etc/passwd\");".to_owned(),
            "/etc/passwd".to_owned(),
        ),
    ] {
        let e = run_t_dry(&script, allow.clone()).error.expect("refused");
        assert!(
            e.message
                .contains(&format!("{path:?} is outside what a workflow may read")),
            "{script}: {}",
            e.message
        );
        assert!(e.message.contains("the out dir ("), "{}", e.message);
        assert!(
            e.message.contains(&wf.path().display().to_string()),
            "{}",
            e.message
        );
        assert!(e.message.contains("--set KEY=PATH"), "{}", e.message);
        assert!(!e.cluster);
    }
    let out = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/etc/passwd", out.path().join("link")).unwrap();
    let e = common::run_t(
        Arc::new(dry()),
        HostConfig::new(out.path()),
        "fs::read(\"link\");",
    )
    .error
    .expect("refused");
    assert!(e.message.contains("\"link\" is outside"), "{}", e.message);
}

#[test]
fn apply_if_absent_in_plan_sh_applies_and_deletes_only_what_the_plan_created() {
    let out = tempfile::tempdir().unwrap();
    let (o, plan) = common::dry_run(
        "t",
        "fs::write(\"dc.yaml\", \"apiVersion: resource.k8s.io/v1\\nkind: DeviceClass\\nmetadata: {name: erdma}\\n\");\n\
         kube::apply(\"dc.yaml\", #{ if_absent: true });\nkube::delete(\"dc.yaml\");\n",
        out.path(),
        &[],
        None,
    );
    assert!(o.error.is_none(), "{:?}", o.error);
    let sh = plan.to_shell();
    assert!(
        sh.contains("if kubectl get -f dc.yaml >/dev/null 2>&1; then\n  echo 'dc.yaml: already in the cluster, left as it is (not this run'\\''s)'\nelse\n  kubectl apply --server-side --force-conflicts --field-manager=rdmakit -f dc.yaml\n  RDMAKIT_OWN_DC_YAML=1\nfi"),
        "{sh}"
    );
    // The workflow's delete and the failure trap both delete it only when the plan applied it.
    let conditional = "if [ -n \"${RDMAKIT_OWN_DC_YAML:-}\" ]; then kubectl delete --ignore-not-found -f dc.yaml; fi";
    assert_eq!(sh.matches(conditional).count(), 2, "{sh}");
    assert!(
        !sh.contains("  kubectl delete --ignore-not-found -f dc.yaml || true"),
        "{sh}"
    );
}

#[test]
fn a_failed_mpijob_ends_the_plans_wait_at_once() {
    let out = tempfile::tempdir().unwrap();
    let (o, plan) = common::dry_run(
        "t",
        "kube::wait_mpijob(\"nccl\", #{ timeout: 3600 });\n",
        out.path(),
        &[],
        None,
    );
    assert!(o.error.is_none(), "{:?}", o.error);
    let sh = plan.to_shell();
    std::fs::write(out.path().join("plan.sh"), &sh).unwrap();
    // A kubectl that reports the MPIJob's conditions as `said`.
    let run = |said: &str| {
        let bin = common::cli::fake_kubectl(out.path(), &format!("#!/bin/bash\necho '{said}'\n"));
        let started = std::time::Instant::now();
        let r = common::cli::run_plan(&out.path().join("plan.sh"), &bin);
        (r, started.elapsed())
    };
    // The API server says the MPIJob Failed: the plan stops within one poll, not after 3600 s.
    let (r, took) = run("Created Running Failed");
    assert_eq!(r.status.code(), Some(1), "{sh}");
    assert!(String::from_utf8_lossy(&r.stderr).contains("mpijob/nccl Failed"));
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    // Succeeded passes.
    let (r, _) = run("Created Running Succeeded");
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
}
