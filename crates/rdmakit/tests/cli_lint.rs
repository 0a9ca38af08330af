//! `rdmakit lint` and `rdmakit validate` as CI runs them: `--format plain|json|sarif`, `--explain RULE`,
//! Dockerfiles (given, in a directory, on stdin), the profile's lint options, and the profile's value
//! defaults as workflow scripts see them through `render::values`.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::path::Path;

use common::cli::rdmakit;
use serde_json::Value;

/// Runs `rdmakit args...`; returns (exit code, stdout, stderr).
fn run(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut c = rdmakit();
    c.args(args);
    if let Some(s) = stdin {
        c.write_stdin(s);
    }
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// Runs a command that must exit `code` and print one JSON document on stdout.
fn json_of(args: &[&str], code: i32) -> Value {
    let (rc, out, err) = run(args, None);
    assert_eq!(rc, code, "{args:?}: stderr {err}\nstdout {out}");
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}):\n{out}"))
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

/// An eRDMA pod without IPC_LOCK: `rdma-missing-ipc-lock` (error) on the container, line 7.
const POD_NO_IPC_LOCK: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  containers:
  - name: c
    image: busybox
    resources:
      limits:
        aliyun/erdma: 1
";

/// A Dockerfile that pins the NCCL that segfaults on eRDMA (line 2).
const DOCKERFILE_BAD_NCCL: &str = "\
FROM rayproject/ray-llm:2.57.0-py312-cu130
RUN pip install nvidia-nccl-cu13==2.28.9
";

/// (ruleId, level, uri, startLine) of every SARIF result.
fn sarif_results(log: &Value) -> Vec<(String, String, String, Option<u64>)> {
    log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let loc = &r["locations"][0]["physicalLocation"];
            (
                r["ruleId"].as_str().unwrap().to_owned(),
                r["level"].as_str().unwrap().to_owned(),
                loc["artifactLocation"]["uri"].as_str().unwrap().to_owned(),
                loc["region"]["startLine"].as_u64(),
            )
        })
        .collect()
}

#[test]
fn lint_format_sarif_is_a_sarif_2_1_0_log_with_rule_ids_and_lines() {
    let dir = tempfile::tempdir().unwrap();
    let pod = write(dir.path(), "pod.yaml", POD_NO_IPC_LOCK);
    let log = json_of(&["lint", "--format", "sarif", &pod], 1);
    assert_eq!(log["version"], "2.1.0");
    assert_eq!(
        log["$schema"],
        "https://json.schemastore.org/sarif-2.1.0.json"
    );
    let driver = &log["runs"][0]["tool"]["driver"];
    assert_eq!(driver["name"], "rdmakit");
    assert_eq!(driver["version"], env!("CARGO_PKG_VERSION"));
    // Every rule is a reportingDescriptor, so ruleIndex is stable across runs.
    let rules = driver["rules"].as_array().unwrap();
    assert_eq!(rules.len(), k8s_render::lint::rules().len());
    let ipc = |r: &(String, String, String, Option<u64>)| r.0 == "rdma-missing-ipc-lock";
    let results = sarif_results(&log);
    let hit = results.iter().find(|r| ipc(r)).unwrap_or_else(|| {
        panic!("no rdma-missing-ipc-lock in {results:?}");
    });
    assert_eq!(
        hit,
        &(
            "rdma-missing-ipc-lock".to_owned(),
            "error".to_owned(),
            pod.clone(),
            Some(7)
        ),
        "{log:#}"
    );
    let index = log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ruleId"] == "rdma-missing-ipc-lock")
        .unwrap()["ruleIndex"]
        .as_u64()
        .unwrap();
    assert_eq!(
        rules[usize::try_from(index).unwrap()]["id"],
        "rdma-missing-ipc-lock"
    );
    // The same findings as --format json, whose alias --json stays.
    let json = json_of(&["lint", "--format", "json", &pod], 1);
    assert_eq!(json, json_of(&["lint", "--json", &pod], 1));
    assert_eq!(
        json.as_array().unwrap().len(),
        results.len(),
        "{json:#}\n{log:#}"
    );
    // --json and --format together are a usage error.
    let (rc, out, err) = run(&["lint", "--json", "--format", "sarif", &pod], None);
    assert_eq!((rc, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("'--json' cannot be used with '--format <FORMAT>'"),
        "{err}"
    );
}

#[test]
fn validate_format_sarif_names_the_violation_class_and_line() {
    let dir = tempfile::tempdir().unwrap();
    // A container without image (line 7): the API server refuses the pod.
    let bad = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n",
    );
    let log = json_of(&["validate", "--format", "sarif", &bad], 1);
    assert_eq!(log["version"], "2.1.0");
    assert_eq!(log["runs"][0]["tool"]["driver"]["name"], "rdmakit");
    let results = sarif_results(&log);
    assert!(
        results.contains(&(
            "validate-missing-required".to_owned(),
            "error".to_owned(),
            bad.clone(),
            Some(7)
        )),
        "{log:#}"
    );
    assert_eq!(
        json_of(&["validate", "--format", "json", &bad], 1),
        json_of(&["validate", "--json", &bad], 1)
    );
    // A valid manifest: a log with no results, exit 0.
    let good = write(
        dir.path(),
        "good.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
    );
    let log = json_of(&["validate", "--strict", "--format", "sarif", &good], 0);
    assert_eq!(log["runs"][0]["results"], serde_json::json!([]));
    let (rc, out, _) = run(&["validate", "--format", "plain", &good], None);
    assert_eq!(
        (rc, out.as_str()),
        (0, "1 document(s), 0 error(s), 0 warning(s)\n")
    );
}

#[test]
fn lint_explain_prints_a_known_rule_and_refuses_an_unknown_one() {
    let (rc, out, err) = run(&["lint", "--explain", "rdma-missing-ipc-lock"], None);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "{}\n",
            k8s_render::lint::explain("rdma-missing-ipc-lock").unwrap()
        )
    );
    assert!(
        out.starts_with("rdma-missing-ipc-lock (error)\n  finds: "),
        "{out}"
    );
    // A Dockerfile rule is explained too.
    let (rc, out, _) = run(&["lint", "--explain", "nccl-known-bad-version"], None);
    assert_eq!(rc, 0);
    assert!(out.starts_with("nccl-known-bad-version (error)\n"), "{out}");
    // A typo: usage error (2), the closest rule and the known rules on stderr, nothing on stdout.
    let (rc, out, err) = run(&["lint", "--explain", "rdma-missing-ipc-lok"], None);
    assert_eq!((rc, out.as_str()), (2, ""));
    assert_eq!(
        err,
        format!(
            "error: {}\n",
            k8s_render::lint::explain("rdma-missing-ipc-lok").unwrap_err()
        )
    );
    assert!(
        err.starts_with(
            "error: unknown lint rule `rdma-missing-ipc-lok` (did you mean rdma-missing-ipc-lock?); rules: "
        ),
        "{err}"
    );
    assert!(err.contains("nccl-gid-index-mismatch"), "{err}");
    // Without --explain, paths are still required; --explain with paths is refused.
    let (rc, _, err) = run(&["lint"], None);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("<PATHS>"), "{err}");
    let (rc, _, err) = run(
        &["lint", "--explain", "rdma-missing-ipc-lock", "x.yaml"],
        None,
    );
    assert_eq!(rc, 2, "{err}");
}

#[test]
fn lint_reads_dockerfiles_given_in_a_directory_and_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let df = write(dir.path(), "Dockerfile", DOCKERFILE_BAD_NCCL);
    let pod = write(dir.path(), "pod.yaml", POD_NO_IPC_LOCK);
    write(
        dir.path(),
        "notes.txt",
        "not a manifest, not a Dockerfile\n",
    );
    let bad_pin = |source: &str| {
        (
            "nccl-known-bad-version".to_owned(),
            "error".to_owned(),
            source.to_owned(),
            Some(2),
        )
    };
    // The file itself.
    let log = json_of(&["lint", "--format", "sarif", &df], 1);
    assert!(sarif_results(&log).contains(&bad_pin(&df)), "{log:#}");
    let findings = json_of(&["lint", "--json", &df], 1);
    let pin = findings
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "nccl-known-bad-version")
        .unwrap();
    assert_eq!(
        (&pin["object"], &pin["path"]),
        (&"Dockerfile".into(), &"RUN".into())
    );
    assert!(
        pin["message"]
            .as_str()
            .unwrap()
            .contains("pins NCCL 2.28.9"),
        "{pin:#}"
    );
    // The directory: the Dockerfile and the YAML, notes.txt skipped (no error about it).
    let dir_arg = dir.path().to_str().unwrap();
    let log = json_of(&["lint", "--format", "sarif", dir_arg], 1);
    let results = sarif_results(&log);
    assert!(results.contains(&bad_pin(&df)), "{results:?}");
    assert!(
        results
            .iter()
            .any(|r| r.0 == "rdma-missing-ipc-lock" && r.2 == pod),
        "{results:?}"
    );
    assert!(results.iter().all(|r| !r.2.ends_with("notes.txt")));
    // stdin: a Dockerfile by its text (first instruction FROM).
    let (rc, out, err) = run(&["lint", "--json", "-"], Some(DOCKERFILE_BAD_NCCL));
    assert_eq!(rc, 1, "{err}");
    let findings: Value = serde_json::from_str(&out).unwrap();
    assert!(
        findings
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "nccl-known-bad-version"
                && f["source"] == "<stdin>"
                && f["line"] == 2),
        "{findings:#}"
    );
    // A directory with neither YAML nor a Dockerfile is an input error.
    let empty = tempfile::tempdir().unwrap();
    write(empty.path(), "notes.txt", "nothing to lint\n");
    let (rc, _, err) = run(&["lint", empty.path().to_str().unwrap()], None);
    assert_eq!(rc, 2);
    assert!(
        err.contains("no .yaml files or Dockerfiles in this directory"),
        "{err}"
    );
}

#[test]
fn a_rendered_bundle_lints_clean_with_its_dockerfile() {
    let out = tempfile::tempdir().unwrap();
    let out_arg = out.path().to_str().unwrap();
    let (rc, _, err) = run(
        &[
            "render",
            "image",
            "raycluster",
            "--profile",
            "aliyun-erdma",
            "--out",
            out_arg,
        ],
        None,
    );
    assert_eq!(rc, 0, "{err}");
    assert!(out.path().join("Dockerfile").is_file());
    let docs = json_of(&["validate", "--json", out_arg], 0);
    assert_eq!(docs, serde_json::json!([]));
    let (rc, stdout, err) = run(&["lint", "--profile", "aliyun-erdma", out_arg], None);
    assert_eq!(rc, 0, "{err}");
    // The RayCluster, and the Dockerfile (its NCCL pin, packages and APT source pass).
    assert_eq!(
        stdout,
        "no RDMA pitfalls in 1 document(s) and 1 Dockerfile(s)\n"
    );
}

#[test]
fn lint_applies_the_profiles_packages_apt_source_and_gid_index() {
    let dir = tempfile::tempdir().unwrap();
    // Installs the two default RDMA packages from Ubuntu's archive, not the eRDMA source.
    let df = write(
        dir.path(),
        "Dockerfile",
        "FROM ubuntu:22.04\nRUN apt-get update && apt-get install -y libibverbs1 ibverbs-providers\n",
    );
    let rules_of = |v: &Value| -> Vec<(String, u64, String)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["rule"].as_str().unwrap().to_owned(),
                    f["line"].as_u64().unwrap(),
                    f["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    // No profile: the defaults are installed and no vendor source is known.
    assert_eq!(
        rules_of(&json_of(&["lint", "--json", &df], 0)),
        Vec::<(String, u64, String)>::new()
    );
    // aliyun-erdma: its four packages and its APT source.
    let with = rules_of(&json_of(
        &["lint", "--json", "--profile", "aliyun-erdma", &df],
        1,
    ));
    assert_eq!(
        with.iter()
            .map(|(r, l, _)| (r.as_str(), *l))
            .collect::<Vec<_>>(),
        [
            ("dockerfile-missing-rdma-userspace", 1),
            ("dockerfile-apt-without-vendor-source", 2)
        ],
        "{with:?}"
    );
    assert!(
        with[0].2.ends_with("missing ibverbs-utils, librdmacm1"),
        "{with:?}"
    );
    // A user profile with NCCL_IB_GID_INDEX 1: a pod that sets 3 is an error.
    let profile =
        std::fs::read_to_string(common::workspace().join("scripts/vendors/aliyun-erdma.rhai"))
            .unwrap()
            .replacen("    nccl: #{\n", "    nccl: #{\n        gid_index: 1,\n", 1);
    assert!(profile.contains("gid_index: 1,"));
    let profile = write(dir.path(), "gid1.rhai", &profile);
    let pod = write(
        dir.path(),
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n    securityContext: {capabilities: {add: [IPC_LOCK]}}\n    env:\n    - name: NCCL_IB_GID_INDEX\n      value: \"3\"\n    resources:\n      limits: {aliyun/erdma: 1}\n",
    );
    let gid = |p: &str, code: i32| -> Vec<(String, u64, String)> {
        rules_of(&json_of(&["lint", "--json", "--profile", p, &pod], code))
            .into_iter()
            .filter(|f| f.0 == "nccl-gid-index-mismatch")
            .collect()
    };
    assert_eq!(
        gid(&profile, 1),
        [(
            "nccl-gid-index-mismatch".to_owned(),
            12,
            "container \"c\" (pod) sets NCCL_IB_GID_INDEX=3, the profile uses 1".to_owned()
        )]
    );
    assert_eq!(gid("aliyun-erdma", 0), []);
}

#[test]
fn render_values_in_scripts_carry_the_profiles_value_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let script = write(
        dir.path(),
        "values.rhai",
        r#"
let v = render::values("aliyun-erdma-dra", #{});
print(`default: gpus_per_worker=${v.gpus_per_worker} slots_per_worker=${v.slots_per_worker}`);
let w = render::values("aliyun-erdma-dra", #{ gpus_per_worker: 1 });
print(`script: gpus_per_worker=${w.gpus_per_worker} slots_per_worker=${w.slots_per_worker}`);
let e = render::values("aliyun-erdma", #{});
print(`aliyun-erdma: gpus_per_worker=${e.gpus_per_worker}`);
"#,
    );
    let out = dir.path().join("out");
    let out_arg = out.to_str().unwrap();
    let lines = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["run", script.as_str(), "--dry-run", "--out", out_arg];
        args.extend_from_slice(extra);
        let (rc, stdout, err) = run(&args, None);
        assert_eq!(rc, 0, "{err}");
        stdout.lines().take(3).map(str::to_owned).collect()
    };
    // Seed 002: 2 GPUs per worker on ecs.gn8is-2x.8xlarge, unless the script or --set says otherwise.
    assert_eq!(
        lines(&[]),
        [
            "default: gpus_per_worker=2 slots_per_worker=2",
            "script: gpus_per_worker=1 slots_per_worker=1",
            "aliyun-erdma: gpus_per_worker=1",
        ]
    );
    assert_eq!(
        lines(&["--set", "gpus_per_worker=4"]),
        [
            "default: gpus_per_worker=4 slots_per_worker=4",
            "script: gpus_per_worker=4 slots_per_worker=4",
            "aliyun-erdma: gpus_per_worker=4",
        ]
    );
}

#[test]
fn lint_and_validate_help_name_the_new_flags() {
    for (cmd, flags) in [
        (
            "lint",
            &[
                "--format <FORMAT>",
                "sarif",
                "--explain <RULE>",
                "Dockerfile",
                "--json",
            ][..],
        ),
        ("validate", &["--format <FORMAT>", "sarif", "--json"][..]),
    ] {
        let (rc, out, err) = run(&[cmd, "--help"], None);
        assert_eq!(rc, 0, "{err}");
        for f in flags {
            assert!(out.contains(f), "{cmd} --help lacks {f}:\n{out}");
        }
    }
}
