//! Fuzz: no `--set` value and no string field of a profile can change the structure of what rdmakit
//! generates (issue 25). Arbitrary and hostile strings (the seed [`corpus`]) go into every `--set` key
//! and every string of a vendor profile; then
//!
//! - the MPIJob launcher's `bash -c` script runs in a [`sandbox`] of logging stubs: it must start
//!   exactly `sleep` and `mpirun`, with the values as whole arguments, and no canary;
//! - the Dockerfile keeps the instruction sequence of the same render with plain values, every line is a
//!   comment, an instruction or a `RUN` continuation, and its `RUN` commands parse as bash;
//! - the `.py` programs parse and keep their top-level shape;
//! - plan.sh of every shipped workflow (and the issue's own title workflow), from an in-process dry-run,
//!   passes `bash -n` and `shellcheck`, and runs under bash with only logging stubs on PATH: no command
//!   outside them starts, no canary file appears, and nothing is applied when the dry-run failed a check.
//!
//! `make test` runs a bounded number of cases; `make fuzz` runs it for minutes
//! (`RDMAKIT_FUZZ_CASES`, `RDMAKIT_FUZZ_SECONDS`: crates/rdmakit/tests/fuzz_injection/FUZZING.md).
#![allow(clippy::unwrap_used)] // a failure is a test failure

#[path = "../common/mod.rs"]
mod common;
mod corpus;
mod profile_rhai;
mod sandbox;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_render::{Profile, System, Values};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

use sandbox::Sandbox;

/// The built-in profiles (each workflow's default among them).
const PROFILES: &[&str] = &[
    "mellanox-ib",
    "aliyun-erdma",
    "aliyun-erdma-dra",
    "aws-efa-eks",
    "azure-ib-aks",
    "gke-rdma-dranet",
    "rdma-shared-device",
    "volcengine-ib",
];

/// The shipped workflows with their default profile, and the issue's reproduction (a `--set` value in a
/// step title).
const WORKFLOWS: &[(&str, &str)] = &[
    ("erdma-ray-rdt", "aliyun-erdma"),
    ("dranet-nccl-tests", "aliyun-erdma-dra"),
    ("nccl-tests", "mellanox-ib"),
    ("shared-device-raycluster", "rdma-shared-device"),
    ("vke-ib-pod", "volcengine-ib"),
    ("title", "mellanox-ib"),
];

/// The issue's reproduction, plus a note and a summary that carry the value.
const TITLE_WORKFLOW: &str = "let t = params::get(\"target\", \"a\");\nstep(`Deploy to ${t}`);\nreport::planned(`reach ${t}`, `would reach ${t}`);\nstep(\"Done\");\n";

/// A value: a seed, a seed inside arbitrary text, arbitrary Unicode, or a run of shell metacharacters.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(corpus::SEEDS).prop_map(str::to_owned),
        3 => ("[a-z0-9./:_-]{0,12}", proptest::sample::select(corpus::SEEDS), "\\PC{0,4}")
            .prop_map(|(a, b, c)| format!("{a}{b}{c}")),
        2 => any::<String>(),
        2 => proptest::collection::vec(
                proptest::sample::select(&[
                    "$", "(", ")", "`", "'", "\"", "\\", ";", "&", "|", "<", ">", "\n", "\r", "#",
                    " ", "*", "{", "}", "touch PWNED", "canary", "\u{2028}", "@@", "\"\"\"",
                ][..]),
                0..12,
            )
            .prop_map(|v| v.concat()),
    ]
}

/// One case: a profile (or workflow), `--set` pairs and profile-string mutations.
#[derive(Debug, Clone)]
struct Case {
    which: usize,
    sets: Vec<(usize, String)>,
    fields: Vec<(usize, String)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<usize>(),
        proptest::collection::vec((any::<usize>(), hostile()), 0..4),
        proptest::collection::vec((any::<usize>(), hostile()), 0..3),
    )
        .prop_map(|(which, sets, fields)| Case {
            which,
            sets,
            fields,
        })
}

/// `slice[n % len]`: a random choice that stays valid whatever the slice's length.
fn pick<T>(n: usize, slice: &[T]) -> &T {
    &slice[n % slice.len()]
}

/// Cases to run (`RDMAKIT_FUZZ_CASES`, else `default`).
fn cases(default: u32) -> u32 {
    std::env::var("RDMAKIT_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The time after which the remaining cases are skipped (`RDMAKIT_FUZZ_SECONDS`; none: no limit).
fn deadline() -> Option<Instant> {
    let s: u64 = std::env::var("RDMAKIT_FUZZ_SECONDS").ok()?.parse().ok()?;
    Some(Instant::now() + Duration::from_secs(s))
}

/// shellcheck on every `n`th case (`RDMAKIT_FUZZ_SHELLCHECK_EVERY`, else `default`): it costs most.
fn shellcheck_every(default: usize) -> usize {
    std::env::var("RDMAKIT_FUZZ_SHELLCHECK_EVERY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
        .max(1)
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    })
}

/// The profile `name` with each of `fields` (index into its strings, value) replaced; the names of the
/// fields that changed. `None` when the result is no longer a profile (a key renamed in a struct).
fn mutated(name: &str, fields: &[(usize, String)]) -> (Value, Vec<String>) {
    let base = rdmakit::profiles::load_builtin(name).unwrap();
    let mut json = serde_json::to_value(&base).unwrap();
    let mut changed = Vec::new();
    for (at, with) in fields {
        let leaves = profile_rhai::leaves(&json);
        let leaf = pick(*at, &leaves).clone();
        profile_rhai::replace(&mut json, &leaf, with);
        changed.push(profile_rhai::describe(&leaf));
    }
    (json, changed)
}

/// `values` with `sets` (an index into [`Values::KEYS`], a value) applied where the key accepts it; the
/// pairs accepted.
fn values_with(sets: &[(usize, String)]) -> (Values, Vec<(&'static str, String)>) {
    let mut v = Values::default();
    let mut accepted = Vec::new();
    for (at, s) in sets {
        let key = pick(*at, Values::KEYS).name;
        if v.set(key, s).is_ok() {
            accepted.push((key, s.clone()));
        }
    }
    (v, accepted)
}

/// The launcher script of a rendered MPIJob bundle.
fn launcher(bundle: &k8s_render::Bundle) -> String {
    let (_, _, doc) = bundle
        .documents()
        .find(|(_, _, d)| d["kind"] == "MPIJob")
        .expect("an MPIJob");
    doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"][0]
        .as_str()
        .expect("the launcher's script")
        .to_owned()
}

/// A Dockerfile's shape: for each line `#`, blank, an instruction keyword, or `&&` (a `RUN`
/// continuation). A line that is none of them fails. The `RUN` commands are collected for bash.
fn dockerfile_shape(text: &str, runs: &mut String) -> Result<Vec<String>, String> {
    let mut shape = Vec::new();
    let mut continued = false;
    for line in text.split('\n') {
        let kind = if continued {
            if !line.starts_with(" && ") {
                return Err(format!(
                    "a continuation line that is no ` && ` step: {line:?}"
                ));
            }
            runs.push_str(line);
            "&&".to_owned()
        } else if line.is_empty() {
            String::new()
        } else if line.starts_with('#') {
            "#".to_owned()
        } else {
            let kw = line.split(' ').next().unwrap_or_default();
            if !["FROM", "RUN", "USER", "ENV", "COPY"].contains(&kw) {
                return Err(format!("a line that is no instruction: {line:?}"));
            }
            if kw == "RUN" {
                runs.push('\n');
                runs.push_str(&line[4..]);
            }
            kw.to_owned()
        };
        continued = line.ends_with(" \\") && (kind == "RUN" || kind == "&&");
        if continued {
            runs.pop();
        }
        shape.push(kind);
    }
    Ok(shape)
}

/// The top-level statement kinds of each Python program (one python3 for all).
fn python_shapes(dir: &Path, files: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg("import ast, sys\nfor f in sys.argv[1:]:\n    print([type(n).__name__ for n in ast.parse(open(f, encoding='utf-8').read()).body])")
        .args(files.iter().map(|f| dir.join(f)))
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Renders `system`; `None` when it does not apply or a value is refused (refusing is right).
fn render(system: System, profile: &Profile, values: &Values) -> Option<k8s_render::Bundle> {
    k8s_render::render(system, profile, values).ok()
}

/// Benign stand-ins for `case`'s strings: the same keys and fields, plain values (a blank value stays
/// as it is: blank means "the default" to several keys, which changes what is rendered).
fn benign(case: &Case) -> Case {
    let plain = |v: &[(usize, String)]| {
        v.iter()
            .map(|(i, s)| {
                let plain = if s.trim().is_empty() {
                    s.clone()
                } else {
                    "fuzz0".to_owned()
                };
                (*i, plain)
            })
            .collect::<Vec<_>>()
    };
    Case {
        which: case.which,
        sets: plain(&case.sets),
        fields: plain(&case.fields),
    }
}

/// The render half of a case; the problems found (empty: the case passed).
fn check_renders(case: &Case, sb: &Sandbox, shellcheck: bool) -> Vec<String> {
    let name = pick(case.which, PROFILES);
    let (json, changed) = mutated(name, &case.fields);
    let Ok(profile) = serde_json::from_value::<Profile>(json) else {
        return Vec::new();
    };
    let (values, accepted) = values_with(&case.sets);
    let base_case = benign(case);
    let base_profile = serde_json::from_value::<Profile>(mutated(name, &base_case.fields).0).ok();
    // The base sets only what the case's own `set` accepted: a value refused at the boundary is not
    // rendered, so its benign stand-in must not be either; a stand-in its key's grammar refuses keeps the
    // accepted value (a count, a version), which the grammar already vouches for.
    let base_sets: Vec<(usize, String)> = case
        .sets
        .iter()
        .zip(&base_case.sets)
        .filter(|((at, s), _)| {
            Values::default()
                .set(pick(*at, Values::KEYS).name, s)
                .is_ok()
        })
        .map(|((at, s), (_, b))| {
            let ok = Values::default()
                .set(pick(*at, Values::KEYS).name, b)
                .is_ok();
            (*at, if ok { b.clone() } else { s.clone() })
        })
        .collect();
    let base_values = values_with(&base_sets).0;
    let mut problems = Vec::new();
    let dir = sb.root.path().join("render");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    if let Some(b) = render(System::MpiJob, &profile, &values) {
        let script = launcher(&b);
        let path = dir.join("launcher.sh");
        std::fs::write(&path, &script).unwrap();
        problems.extend(sandbox::lint_scripts(&[&path], shellcheck));
        let ran = sb.run(&path, &dir, Duration::from_secs(10));
        problems.extend(ran.canary_report());
        let names: Vec<&str> = ran.started.iter().map(|c| c[0].as_str()).collect();
        if names != ["sleep", "mpirun"] {
            problems.push(format!(
                "the launcher started {names:?}, not sleep then mpirun: {script}"
            ));
        } else {
            // The values as rendered (after `set`'s own trimming), each one whole argument.
            let argv = &ran.started[1][1..];
            let strip = |v: &str| v.replace('\0', "");
            let debug = strip(&values.nccl_debug);
            let perf = strip(&values.all_reduce_perf);
            let keys: Vec<&str> = accepted.iter().map(|(k, _)| *k).collect();
            if keys.contains(&"nccl_debug")
                && !debug.is_empty()
                && !argv.contains(&format!("NCCL_DEBUG={debug}"))
            {
                problems.push(format!(
                    "nccl_debug {debug:?} is not one mpirun argument: {argv:?}"
                ));
            }
            if keys.contains(&"all_reduce_perf") && !argv.contains(&perf) {
                problems.push(format!(
                    "all_reduce_perf {perf:?} is not one mpirun argument: {argv:?}"
                ));
            }
        }
    }

    if let Some(b) = render(System::Image, &profile, &values) {
        let text = &b.get("Dockerfile").unwrap().contents;
        let mut runs = String::new();
        match dockerfile_shape(text, &mut runs) {
            Err(e) => problems.push(format!("Dockerfile: {e}\n{text}")),
            Ok(shape) => {
                let base = base_profile
                    .as_ref()
                    .and_then(|p| render(System::Image, p, &base_values))
                    .and_then(|b| {
                        dockerfile_shape(&b.get("Dockerfile")?.contents, &mut String::new()).ok()
                    });
                let keywords = |s: &[String]| -> Vec<String> {
                    s.iter()
                        .filter(|k| !k.is_empty() && *k != "#")
                        .cloned()
                        .collect()
                };
                if let Some(base) = base
                    && keywords(&base) != keywords(&shape)
                {
                    problems.push(format!(
                        "Dockerfile instructions changed with the values: {:?} instead of {:?}\n{text}",
                        keywords(&shape),
                        keywords(&base)
                    ));
                }
                let runs_path = dir.join("dockerfile-run.sh");
                std::fs::write(&runs_path, &runs).unwrap();
                problems.extend(sandbox::lint_scripts(&[&runs_path], false));
            }
        }
    }

    let mut programs: Vec<(&str, String)> = Vec::new();
    let mut base_programs: Vec<(&str, String)> = Vec::new();
    for (system, file) in [
        (System::RdtDemo, "rdt_nccl_demo.py"),
        (System::NcclCheck, "nccl_allreduce_check.py"),
    ] {
        let base = base_profile
            .as_ref()
            .and_then(|p| render(system, p, &base_values))
            .and_then(|b| Some(b.get(file)?.contents.clone()));
        if let Some(text) =
            render(system, &profile, &values).and_then(|b| Some(b.get(file)?.contents.clone()))
        {
            programs.push((file, text));
            if let Some(base) = base {
                base_programs.push((file, base));
            }
        }
    }
    if !programs.is_empty() {
        let shapes = |list: &[(&str, String)], sub: &str| {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).unwrap();
            for (f, t) in list {
                std::fs::write(d.join(f), t).unwrap();
            }
            let files: Vec<&str> = list.iter().map(|(f, _)| *f).collect();
            python_shapes(&d, &files)
        };
        match shapes(&programs, "py") {
            Err(e) => problems.push(format!("a rendered program does not parse: {e}")),
            Ok(got) if base_programs.len() == programs.len() => {
                if let Ok(want) = shapes(&base_programs, "py-base")
                    && got != want
                {
                    problems.push(format!(
                        "a program's statements changed with the values:\n{got}\ninstead of\n{want}"
                    ));
                }
            }
            Ok(_) => {}
        }
    }
    if !problems.is_empty() {
        problems.insert(
            0,
            format!("profile {name}, fields {changed:?}, --set {accepted:?}"),
        );
    }
    problems
}

/// The plan half of a case: a dry-run, then plan.sh checked and run in the sandbox.
fn check_plan(case: &Case, sb: &Sandbox, shellcheck: bool) -> Vec<String> {
    let (workflow, profile) = *pick(case.which, WORKFLOWS);
    let root = sb.root.path().join("plan");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let mut params: Vec<(String, String)> = case
        .sets
        .iter()
        .map(|(i, v)| {
            let key = if workflow == "title" && i % 2 == 0 {
                "target"
            } else {
                pick(*i, Values::KEYS).name
            };
            (key.to_owned(), v.clone())
        })
        .collect();
    let mut changed = Vec::new();
    if !case.fields.is_empty() {
        let (json, c) = mutated(profile, &case.fields);
        changed = c;
        let path = root.join("profile.rhai");
        std::fs::write(&path, profile_rhai::to_rhai(&json)).unwrap();
        params.push(("profile".to_owned(), path.to_string_lossy().into_owned()));
    }
    let src = if workflow == "title" {
        TITLE_WORKFLOW
    } else {
        rdmakit::workflows::builtin(workflow).unwrap()
    };
    let out = root.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let pairs: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (outcome, plan) = common::dry_run(workflow, src, &out, &pairs, None);
    let plan = plan.refusing_failed(&outcome.report);
    let sh = out.join("plan.sh");
    std::fs::write(&sh, plan.to_shell()).unwrap();
    let mut problems = sandbox::lint_scripts(&[&sh], shellcheck);
    let ran = sb.run(&sh, &out, Duration::from_secs(60));
    problems.extend(ran.canary_report());
    if ran.code.is_none() {
        problems.push("plan.sh did not finish in 60 s".to_owned());
    }
    let applied = ran
        .started
        .iter()
        .any(|c| c[0] == "kubectl" && c.iter().any(|a| a == "apply"));
    if !plan.failed.is_empty() && applied {
        problems.push(format!(
            "the dry-run failed {:?}, yet plan.sh applied",
            plan.failed
        ));
    }
    if !problems.is_empty() {
        problems.insert(
            0,
            format!(
                "workflow {workflow}, profile fields {changed:?}, --set {params:?}, exit {:?}, stderr {}",
                ran.code, ran.stderr
            ),
        );
    }
    problems
}

/// Runs `check` on `n` cases, in batches (each with a fresh random seed) until `n` or the deadline;
/// returns how many ran.
fn fuzz(n: u32, every: usize, check: fn(&Case, &Sandbox, bool) -> Vec<String>) -> usize {
    let sb = Sandbox::new();
    let ran = AtomicUsize::new(0);
    let until = deadline();
    let started = Instant::now();
    loop {
        let done = ran.load(Ordering::Relaxed);
        let batch = (n as usize).saturating_sub(done).min(64);
        if batch == 0 || until.is_some_and(|d| Instant::now() > d) {
            break;
        }
        let result = runner(batch as u32).run(&case(), |c| {
            let i = ran.fetch_add(1, Ordering::Relaxed);
            let problems = check(&c, &sb, i.is_multiple_of(every));
            if problems.is_empty() {
                Ok(())
            } else {
                Err(TestCaseError::fail(problems.join("\n")))
            }
        });
        if let Err(e) = result {
            panic!("after {} case(s): {e}", ran.load(Ordering::Relaxed));
        }
    }
    let count = ran.load(Ordering::Relaxed);
    eprintln!(
        "fuzz: {count} case(s) in {:.0} s, no canary, no structural change",
        started.elapsed().as_secs_f64()
    );
    count
}

#[test]
fn rendered_scripts_hold_every_value() {
    let n = fuzz(cases(64), shellcheck_every(8), check_renders);
    assert!(n > 0);
}

#[test]
fn plan_sh_starts_only_what_it_means_to() {
    let n = fuzz(cases(16), shellcheck_every(4), check_plan);
    assert!(n > 0);
}

/// Every seed, in the keys issue 25 names (a step title, the launcher's values, the image reference),
/// without randomness.
#[test]
fn the_seed_corpus_changes_no_structure() {
    let sb = Sandbox::new();
    let keys = [
        "nccl_debug",
        "all_reduce_perf",
        "registry",
        "image",
        "base_image",
        "nccl_version",
    ];
    let mut problems = Vec::new();
    for (n, seed) in corpus::SEEDS.iter().enumerate() {
        let key_at = |k: &str| Values::KEYS.iter().position(|key| key.name == k).unwrap();
        let render_case = Case {
            which: 0,
            sets: keys
                .iter()
                .map(|k| (key_at(k), (*seed).to_owned()))
                .collect(),
            fields: Vec::new(),
        };
        problems.extend(check_renders(&render_case, &sb, n.is_multiple_of(16)));
        let plan_case = Case {
            which: WORKFLOWS.len() - 1,
            sets: vec![(0, (*seed).to_owned())],
            fields: Vec::new(),
        };
        problems.extend(check_plan(&plan_case, &sb, n.is_multiple_of(16)));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The harness itself: an unmutated profile loads back from its Rhai form, and the sandbox catches a
/// command outside its stubs and a canary file.
#[test]
fn the_harness_catches_a_canary() {
    let json =
        serde_json::to_value(rdmakit::profiles::load_builtin("aws-efa-eks").unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.rhai");
    std::fs::write(&path, profile_rhai::to_rhai(&json)).unwrap();
    let back = rdmakit::profiles::load_file(&path).unwrap();
    assert_eq!(serde_json::to_value(back).unwrap(), json);

    let sb = Sandbox::new();
    let script = sb.root.path().join("s.sh");
    std::fs::write(&script, "set -euo pipefail\nkubectl get pods\ncanary now\n/usr/bin/touch PWNED\nfalse\nkubectl apply -f x\n").unwrap();
    let ran = sb.run(&script, sb.root.path(), Duration::from_secs(10));
    assert_eq!(ran.started.len(), 2, "{:?}", ran.started);
    assert_eq!(ran.started[1], ["kubectl", "apply", "-f", "x"]);
    assert_eq!(ran.not_found, [["canary", "now"]]);
    assert_eq!(ran.canaries.len(), 1);
}
