//! The binary as a user runs it.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use common::cli::{Workflow, dry_run, fake_kubectl, rdmakit, run_plan};
use predicates::prelude::*;

/// Runs `plan` with bash, a fake `kubectl` (the bash `body`) in `dir` first on PATH.
fn run_plan_with_fake_kubectl(
    dir: &std::path::Path,
    plan: &std::path::Path,
    body: &str,
) -> std::process::Output {
    run_plan(plan, &fake_kubectl(dir, &format!("#!/bin/bash\n{body}")))
}

#[test]
fn help_lists_commands_examples_and_exit_codes() {
    rdmakit().arg("--help").assert().success().stdout(
        predicate::str::contains("run")
            .and(predicate::str::contains("doctor"))
            .and(predicate::str::contains("Exit codes")),
    );
    rdmakit()
        .args(["run", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("erdma-ray-rdt"));
}

#[test]
fn demo_invocation_writes_bundle_plan_and_report() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("erdma-ray-rdt");
    dry_run("scripts/workflows/erdma-ray-rdt.rhai", &dir)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "Plan for erdma-ray-rdt.rhai (dry-run",
        ))
        .stdout(predicate::str::contains(
            "kubectl apply --server-side --force-conflicts --field-manager=rdmakit -f bundle/ray-cluster-erdma.yaml",
        ))
        .stderr(predicate::str::contains("verdict: PLANNED"));
    for f in [
        "plan.sh",
        "plan.json",
        "report.md",
        "report.json",
        "bundle/ray-cluster-erdma.yaml",
        "bundle/Dockerfile",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
}

#[test]
fn builtin_workflow_by_name() {
    let out = tempfile::tempdir().unwrap();
    dry_run("vke-ib-pod", out.path()).assert().success();
    assert!(out.path().join("bundle/rdma-test-pod.yaml").is_file());
}

#[test]
fn a_run_in_a_reused_out_dir_owns_only_what_it_writes() {
    let out = tempfile::tempdir().unwrap();
    let x = out.path().join("x");
    dry_run("erdma-ray-rdt", &x).assert().success();
    assert!(x.join("bundle/ray-cluster-erdma.yaml").is_file());
    // The user's own files beside rdmakit's, one of them a manifest the vke workflow's lint would FAIL
    // (a Ray head without num-gpus "0"), and an edit to a file the first run wrote.
    std::fs::write(x.join("bundle/notes.txt"), "mine").unwrap();
    std::fs::write(
        x.join("bundle/mine.yaml"),
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: mine}\nspec:\n  headGroupSpec:\n    rayStartParams: {}\n    template: {spec: {containers: [{name: ray-head, image: x}]}}\n",
    )
    .unwrap();
    std::fs::write(x.join("bundle/Dockerfile"), "FROM mine\n").unwrap();

    dry_run("vke-ib-pod", &x)
        .assert()
        .success()
        .stderr(predicate::str::contains("verdict: PLANNED"));
    // The first run's files are gone, the second's are there, the user's are untouched.
    for gone in [
        "bundle/ray-cluster-erdma.yaml",
        "bundle/buildkitd.yaml",
        "bundle/rdt_nccl_demo.py",
    ] {
        assert!(!x.join(gone).exists(), "{gone} left over");
    }
    assert!(x.join("bundle/rdma-test-pod.yaml").is_file());
    assert_eq!(
        std::fs::read_to_string(x.join("bundle/notes.txt")).unwrap(),
        "mine"
    );
    assert!(x.join("bundle/mine.yaml").is_file());
    assert_eq!(
        std::fs::read_to_string(x.join("bundle/Dockerfile")).unwrap(),
        "FROM mine\n"
    );
    let report = std::fs::read_to_string(x.join("report.json")).unwrap();
    assert!(!report.contains("mine.yaml"), "{report}");
    assert!(!report.contains("ray-cluster-erdma"), "{report}");
    let plan = std::fs::read_to_string(x.join("plan.sh")).unwrap();
    assert!(!plan.contains("mine.yaml"), "{plan}");
    // The list of what this run wrote.
    let list = std::fs::read_to_string(x.join(".rdmakit-files")).unwrap();
    for f in [
        "bundle/rdma-test-pod.yaml",
        "plan.sh",
        "plan.json",
        "report.md",
        "report.json",
    ] {
        assert!(list.contains(&format!(" {f}\n")), "{f}: {list}");
    }
    assert!(!list.contains("mine"), "{list}");
}

#[test]
fn a_dry_run_stopped_by_a_script_error_writes_a_plan_that_refuses_to_run() {
    let wf = Workflow::new(
        "half.rhai",
        "step(\"Deploy\");\nfs::write(\"pod.yaml\", \"apiVersion: v1\\nkind: Pod\\nmetadata: {name: p}\\n\");\nkube::apply(\"pod.yaml\");\nstep(\"Verify\");\nthrow \"the check broke\";\nstep(\"Cleanup\");\nkube::delete(\"pod.yaml\");\n",
    );
    let out = wf.out();
    let o = wf.dry_run().arg("--json").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["complete"], false, "{plan}");
    let error = plan["error"].as_str().unwrap();
    assert!(error.contains("half.rhai:5:1: the check broke"), "{error}");
    assert!(error.contains("during step: Verify"), "{error}");
    let on_disk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
    assert_eq!(on_disk["complete"], false);

    // plan.sh says so and exits before anything runs: a kubectl on PATH is never called.
    let sh = std::fs::read_to_string(out.join("plan.sh")).unwrap();
    assert!(sh.contains("# INCOMPLETE PLAN"), "{sh}");
    let called = wf.dir.path().join("kubectl-called");
    let r = run_plan_with_fake_kubectl(
        wf.dir.path(),
        &out.join("plan.sh"),
        &format!("touch {}\n", called.display()),
    );
    assert_eq!(r.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("plan.sh is incomplete"), "{stderr}");
    assert!(stderr.contains("the check broke"), "{stderr}");
    assert!(!called.exists(), "plan.sh ran kubectl");

    // The human plan says it too.
    wf.dry_run()
        .assert()
        .code(2)
        .stdout(predicate::str::contains("INCOMPLETE: stopped at an error"));
}

#[test]
fn a_workflow_reads_its_folder_and_the_files_named_on_the_command_line_only() {
    // The script in its own folder, the input and the out dir outside it.
    let wf = Workflow::new(
        "wf/r.rhai",
        "let a = fs::read(\"beside.txt\");\nlet b = fs::read(params::get(\"input\", \"/etc/passwd\"));\nreport::info(\"read\", a + \" \" + b);\n",
    );
    std::fs::write(wf.dir.path().join("wf/beside.txt"), "beside").unwrap();
    let input = wf.dir.path().join("input.txt");
    std::fs::write(&input, "input").unwrap();
    wf.dry_run()
        .arg("--set")
        .arg(format!("input={}", input.display()))
        .assert()
        .success();
    let report = std::fs::read_to_string(wf.out().join("report.md")).unwrap();
    assert!(report.contains("beside input"), "{report}");
    wf.dry_run()
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "fs::read: \"/etc/passwd\" is outside what a workflow may read",
        ));
}

#[test]
fn a_built_in_workflow_error_cites_the_built_in_text_not_a_local_path() {
    // Run from a folder whose scripts/workflows/ holds other text: the error must not point there.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("scripts/workflows")).unwrap();
    std::fs::write(
        dir.path().join("scripts/workflows/vke-ib-pod.rhai"),
        "// mine\n",
    )
    .unwrap();
    let o = rdmakit()
        .current_dir(dir.path())
        .args([
            "run",
            "vke-ib-pod",
            "--dry-run",
            "--out",
            "out",
            "--set",
            "profile=nope",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let at = stderr.find("<built-in>/vke-ib-pod.rhai:").expect(&stderr);
    let pos: Vec<&str> = stderr[at + "<built-in>/vke-ib-pod.rhai:".len()..]
        .split(':')
        .take(2)
        .collect();
    assert!(
        pos.iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())),
        "{stderr}"
    );
    assert!(stderr.contains("unknown profile `nope`"), "{stderr}");
    assert!(!stderr.contains("scripts/workflows"), "{stderr}");
}

#[test]
fn plan_sh_waits_for_each_parallel_rank_and_stops_the_others_when_one_fails() {
    let wf = Workflow::new(
        "ranks.rhai",
        "step(\"Ranks\");\nkube::exec_many([#{ pod: \"w-0\", command: [\"hang\"] }, #{ pod: \"w-1\", command: [\"crash\"] }]);\nstep(\"After\");\nkube::exec(\"w-0\", [\"after\"]);\n",
    );
    wf.dry_run().assert().success();
    // A kubectl whose `exec ... crash` fails at once and `exec ... hang` never ends.
    let log = wf.dir.path().join("kubectl.log");
    let started = std::time::Instant::now();
    let r = run_plan_with_fake_kubectl(
        wf.dir.path(),
        &wf.out().join("plan.sh"),
        &format!(
            "echo \"$*\" >> {log}\ncase \"$*\" in\n  *crash*) exit 3 ;;\n  *hang*) exec sleep 30 ;;\nesac\n",
            log = log.display()
        ),
    );
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(3), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the hung rank was waited for"
    );
    assert!(
        stderr.contains("a rank failed (exit 3): stopped the others"),
        "{stderr}"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        !calls.contains("after"),
        "the plan went on after a failed rank: {calls}"
    );
}

#[test]
fn namespaces_are_validated_and_every_kubectl_flag_stays_one_word() {
    // -n that is not a namespace name is a usage error before anything runs.
    let wf = Workflow::new("ns.rhai", "kube::logs(\"p\", #{ namespace: \"a;b\" });\n");
    dry_run("vke-ib-pod", wf.dir.path())
        .args(["-n", "ns $(id)"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "\"ns $(id)\": not a namespace name",
        ));
    // A script's namespace option too.
    wf.dry_run()
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"a;b\" is not a namespace name"));
    // A context with spaces and flags in its name, and an action's own namespace: quoted, one word each.
    wf.rewrite(
        "kube::wait_pods(\"k8s-app=dranet\", #{ namespace: \"kube-system\" });\nkube::list(\"Node\");\n",
    );
    wf.dry_run()
        .args(["--context", "prod -n evil", "-n", "ray"])
        .assert()
        .success();
    let sh = std::fs::read_to_string(wf.out().join("plan.sh")).unwrap();
    assert!(
        sh.contains("kubectl --context 'prod -n evil' -n kube-system wait --for=condition=Ready"),
        "{sh}"
    );
    assert!(
        sh.contains("kubectl --context 'prod -n evil' get nodes"),
        "{sh}"
    );
}

#[test]
fn a_script_error_is_printed_once() {
    let wf = Workflow::new("e.rhai", "step(\"One\");\nthrow \"the one error\";\n");
    let o = wf.dry_run().output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr.matches("the one error").count(), 1, "{stderr}");
    assert!(stderr.contains("error: "), "{stderr}");
    assert!(stderr.contains("e.rhai:2:1: the one error"), "{stderr}");
    // No terminal: no colour codes.
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

#[test]
fn unknown_workflow_is_an_input_error() {
    rdmakit()
        .args(["run", "nope.rhai", "--dry-run"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a built-in workflow"));
}

#[test]
fn script_error_exits_2_with_file_and_line() {
    let wf = Workflow::new(
        "broken.rhai",
        "step(\"One\");\nkube::apply(\"missing.yaml\");\n",
    );
    wf.dry_run().assert().code(2).stderr(
        predicate::str::contains("broken.rhai:2:7")
            .and(predicate::str::contains("during step: One")),
    );
}

#[test]
fn malformed_set_is_a_usage_error() {
    rdmakit()
        .args(["run", "erdma-ray-rdt", "--dry-run", "--set", "novalue"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("key=value"));
}

#[test]
fn unknown_set_key_is_a_usage_error_naming_the_nearest_key() {
    // A workflow that computes its keys is judged by what it read.
    let wf = Workflow::new("dyn.rhai", "let k = \"al\" + \"pha\"; params::get(k, 1);\n");
    let dir = &wf.dir;
    // A typo of a render value, dry-run and live alike (checked before connecting: no kubeconfig needed).
    for mode in [
        &["--dry-run"][..],
        &["--kubeconfig", "/nonexistent/kubeconfig"][..],
    ] {
        rdmakit()
            .args(["run", "erdma-ray-rdt", "--set", "worker_replica=3", "--out"])
            .arg(dir.path())
            .args(mode)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "\"worker_replica\" (did you mean \"worker_replicas\"?)",
            ));
    }
    // A typo of a workflow parameter, read only in a branch (`skip_build`) or by the host (`keep`).
    dry_run("erdma-ray-rdt", dir.path())
        .args(["--set", "skip_biuld=true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("did you mean \"skip_build\""));
    // Known keys: a render value, parameters read in branches and in the workflow text, `keep`.
    dry_run("erdma-ray-rdt", dir.path())
        .args([
            "--set",
            "worker_replicas=2",
            "--set",
            "push_secret_source=p",
            "--set",
            "keep=true",
        ])
        .assert()
        .success();
    dry_run(&wf.path, dir.path())
        .args(["--set", "alpha=2"])
        .assert()
        .success();
    dry_run(&wf.path, dir.path())
        .args(["--set", "alpah=2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"alpah\""));
}

#[test]
fn live_run_with_a_kubeconfig_without_contexts_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    rdmakit()
        .args(["run", "vke-ib-pod", "--out"])
        .arg(dir.path().join("out"))
        .arg("--kubeconfig")
        .arg(&kc)
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("sets no current-context; pass --context NAME")
                .and(predicate::str::contains(kc.to_str().unwrap()))
                .and(predicate::str::contains("cannot reach").not()),
        );
}

#[test]
fn profiles_lists_the_builtins() {
    rdmakit().arg("profiles").assert().success().stdout(
        predicate::str::contains("aliyun-erdma").and(predicate::str::contains("volcengine-ib")),
    );
    rdmakit().args(["profiles", "nope"]).assert().code(2);
}

#[test]
fn profiles_lists_user_profiles_marked_with_where_they_come_from() {
    let ws = common::workspace();
    let erdma = std::fs::read_to_string(ws.join("scripts/vendors/aliyun-erdma.rhai")).unwrap();
    let named = |n: &str| erdma.replacen("name: \"aliyun-erdma\"", &format!("name: \"{n}\""), 1);
    let wd = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(wd.path().join("scripts/vendors")).unwrap();
    std::fs::write(
        wd.path().join("scripts/vendors/local.rhai"),
        named("local-erdma"),
    )
    .unwrap();
    let xdg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(xdg.path().join("rdmakit/profiles")).unwrap();
    std::fs::write(
        xdg.path().join("rdmakit/profiles/mine.rhai"),
        named("xdg-erdma"),
    )
    .unwrap();
    let given = wd.path().join("given.rhai");
    std::fs::write(&given, named("given-erdma")).unwrap();
    let run = |json: bool| {
        let mut c = rdmakit();
        c.current_dir(wd.path())
            .env("XDG_CONFIG_HOME", xdg.path())
            .args(["profiles", "--path"])
            .arg(&given);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    let o = run(true);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows: Vec<(String, String, String)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or("-").to_owned();
            (s("name"), s("origin"), s("path"))
        })
        .collect();
    let row = |n: &str, o: &str, p: &str| (n.to_owned(), o.to_owned(), p.to_owned());
    assert_eq!(rows[0], row("aliyun-erdma", "built-in", "-"), "{rows:#?}");
    let mine = xdg.path().join("rdmakit/profiles/mine.rhai");
    assert_eq!(
        rows[rows.len() - 3..],
        [
            row("local-erdma", "working-dir", "./scripts/vendors/local.rhai"),
            row("given-erdma", "given", &given.display().to_string()),
            row("xdg-erdma", "user-config", &mine.display().to_string()),
        ],
        "{rows:#?}"
    );
    assert_eq!(
        rows.iter().filter(|r| r.1 == "built-in").count(),
        8,
        "{rows:#?}"
    );

    // The table says where each one comes from and shows the path to pass as --profile.
    let o = run(false);
    assert_eq!(o.status.code(), Some(0));
    let table = String::from_utf8_lossy(&o.stdout);
    for want in [
        "built-in",
        "./scripts/vendors",
        "user config",
        "--path",
        "xdg-erdma (",
    ] {
        assert!(table.contains(want), "`{want}` not in:\n{table}");
    }

    // A user profile that does not load is listed, named with its line on stderr, and exit 2.
    std::fs::write(xdg.path().join("rdmakit/profiles/broken.rhai"), "#{ name: ").unwrap();
    let o = run(false);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("broken.rhai:1"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("does not load"));
}

#[test]
fn doctor_reads_stdin_and_reports_findings_with_exit_1() {
    // (case, log on stdin, exit code, what stdout names)
    for (case, log, code, names) in [
        (
            "a finding",
            "worker-0:41:88 [0] misc/ibvwrap.cc:130 NCCL WARN Call to ibv_create_qp failed with error Unknown error -12\n",
            1,
            "LimitMEMLOCK",
        ),
        ("nothing found", "all good\n", 0, ""),
        // Only positive findings (RDMA in use): reported, exit 0.
        (
            "only positive findings",
            "worker-1:55:90 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n",
            0,
            "erdma_0",
        ),
    ] {
        let o = rdmakit()
            .args(["doctor", "-"])
            .write_stdin(log)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(code),
            "{case}: {stdout}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(stdout.contains(names), "{case}: {names:?} not in {stdout}");
    }
}

#[test]
fn render_then_lint_and_validate_the_bundle() {
    let out = tempfile::tempdir().unwrap();
    rdmakit()
        .args([
            "render",
            "raycluster",
            "--profile",
            "aliyun-erdma",
            "--set",
            "worker_replicas=2",
            "--out",
        ])
        .arg(out.path())
        .assert()
        .success();
    let rc = out.path().join("ray-cluster-erdma.yaml");
    assert!(rc.is_file());
    rdmakit()
        .args(["validate", "--strict"])
        .arg(&rc)
        .assert()
        .success();
    rdmakit()
        .args(["lint", "--profile", "aliyun-erdma", "--nodes", "2"])
        .arg(&rc)
        .assert()
        .success();
    // Two hostNetwork workers (replicas 2, maxReplicas 2) on one RDMA node cannot both schedule: the
    // replicas rule fires on both fields, it is an error, and an error finding is exit 1.
    let o = rdmakit()
        .args([
            "lint",
            "--profile",
            "aliyun-erdma",
            "--nodes",
            "1",
            "--json",
        ])
        .arg(&rc)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "lint --nodes 1: stderr {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let findings: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut hits: Vec<(String, String, String)> = findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (s("rule"), s("severity"), s("path"))
        })
        .collect();
    hits.sort();
    let rule = "host-network-replicas-exceed-nodes";
    assert_eq!(
        hits,
        [
            (rule, "error", "spec.workerGroupSpecs[0].maxReplicas"),
            (rule, "error", "spec.workerGroupSpecs[0].replicas"),
        ]
        .map(|(r, s, p)| (r.to_owned(), s.to_owned(), p.to_owned())),
        "lint --nodes 1 findings: {findings:#}"
    );
    assert!(
        findings[0]["message"]
            .as_str()
            .unwrap()
            .contains("only 1 RDMA node(s) exist"),
        "{findings:#}"
    );
}

fn json_stdout(args: &[&str], stdin: Option<&str>, codes: &[i32]) -> serde_json::Value {
    let mut c = rdmakit();
    c.args(args);
    if let Some(s) = stdin {
        c.write_stdin(s);
    }
    let o = c.output().unwrap();
    let code = o.status.code().unwrap_or(-1);
    assert!(
        codes.contains(&code),
        "{args:?}: exit {code}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

#[test]
fn data_commands_print_only_json_on_stdout_with_json() {
    let all = json_stdout(&["profiles", "--json"], None, &[0]);
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "volcengine-ib")
    );
    let one = json_stdout(&["profiles", "aliyun-erdma", "--json"], None, &[0]);
    assert_eq!(one["nccl"]["pin"], "2.30.7");
    assert_eq!(one["nccl"]["known_bad"][1], "2.28.9");
    let d = json_stdout(
        &["doctor", "-", "--json"],
        Some(
            "x [0] misc/ibvwrap.cc:130 NCCL WARN Call to ibv_create_qp failed with error Unknown error -12\n",
        ),
        &[1],
    );
    assert_eq!(d["findings"][0]["id"], "memlock-create-qp-enomem");
    // The workflow's own print (its verdict line) goes to stderr, so stdout stays one JSON document.
    let out = tempfile::tempdir().unwrap();
    let out_arg = out.path().to_str().unwrap().to_owned();
    let plan = json_stdout(
        &[
            "run",
            "vke-ib-pod",
            "--dry-run",
            "--json",
            "--out",
            &out_arg,
        ],
        None,
        &[0],
    );
    assert_eq!(plan["workflow"], "vke-ib-pod.rhai");
    assert!(plan["items"].as_array().unwrap().len() > 5);
    // probe judges this machine: findings (exit 1) are fine here, the output must be JSON.
    let facts = json_stdout(&["probe", "--json"], None, &[0, 1]);
    assert!(facts["checks"].is_array());
}

#[test]
fn every_subcommand_help_has_examples() {
    for cmd in [
        "run", "render", "validate", "lint", "probe", "doctor", "profiles", "bench",
    ] {
        rdmakit().args([cmd, "--help"]).assert().success().stdout(
            predicate::str::contains("Examples:").and(predicate::str::contains("rdmakit ")),
        );
    }
}
