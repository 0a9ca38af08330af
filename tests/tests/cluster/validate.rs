//! Differential validation: every rendered bundle of every profile, every manifest fixture in the repository,
//! the broken-manifest corpus and generated edge cases go through both the real API server (`kubectl apply
//! --dry-run=server --validate=strict`) and `rdmakit validate --strict`. Accept and reject must agree on
//! every file, except the few in [`SERVER_ACCEPTS_RDMAKIT_REFUSES`], where the API server accepts what the
//! operator then ignores, clamps or cannot create: there the disagreement itself is asserted (the server
//! must accept, rdmakit must refuse), and what the operator does is measured on the real operators.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::harness::OutputWithin;
use super::harness::{Kind, Ns, eventually, kubectl, output_ok, output_text, rdmakit, repo};

/// Corpus files the API server accepts and `rdmakit validate --strict` refuses, with what each side does.
/// [`the_operators_do_what_the_refusals_say`] applies the operator cases for real.
const SERVER_ACCEPTS_RDMAKIT_REFUSES: &[(&str, &str)] = &[
    (
        "duplicate-key.yaml",
        "kubectl keeps the later hostNetwork and the API server accepts; other YAML readers keep the first, so --strict refuses it (a warning without)",
    ),
    (
        "mpijob-lowercase-worker.yaml",
        "the MPIJob CRD's mpiReplicaSpecs is an open map, so the API server accepts `worker`; the MPI Operator v0.7.0 acts only on Launcher and Worker: no worker pod",
    ),
    (
        "ray-replicas-above-max.yaml",
        "the API server accepts replicas 5 > maxReplicas 2; KubeRay v1.5.1 clamps to 2 worker pods; --strict refuses it (a warning without)",
    ),
    (
        "ray-min-above-max.yaml",
        "the API server accepts minReplicas 3 > maxReplicas 1; KubeRay v1.5.1 logs it and runs maxReplicas (1) worker pod",
    ),
    (
        "ray-nodeselector-bad-value.yaml",
        "the API server does not validate a custom resource's embedded pod template, so it accepts `rdma; gpu`; KubeRay's worker pod create is rejected (Invalid value): no worker pod",
    ),
];

/// Edge cases generated here (too large to commit): a ConfigMap and a Secret at the API server's 1 MiB data
/// limit (accepted) and one byte over it (rejected: Too long), a label value of 63 and 64 characters.
fn generated_cases(scratch: &Path) -> Vec<PathBuf> {
    let dir = scratch.join("generated");
    std::fs::create_dir_all(&dir).unwrap();
    let limit = 1024 * 1024;
    let cm = |name: &str, n: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n  a: {}\n",
            "x".repeat(n)
        )
    };
    // 4 base64 characters are 3 bytes: the API server counts the decoded bytes.
    let secret = |name: &str, triples: usize, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\ndata:\n  k: {}{extra}\n",
            "QUJD".repeat(triples)
        )
    };
    let label = |name: &str, n: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{nic: {}}}\n",
            "x".repeat(n)
        )
    };
    let cases = [
        ("configmap-at-1mib.yaml", cm("at-limit", limit)),
        ("configmap-over-1mib.yaml", cm("over-limit", limit + 1)),
        ("secret-at-1mib.yaml", secret("at-limit", limit / 3, "QQ==")),
        (
            "secret-over-1mib.yaml",
            secret("over-limit", limit / 3, "QUI="),
        ),
        ("label-value-63.yaml", label("label-63", 63)),
        ("label-value-64.yaml", label("label-64", 64)),
    ];
    cases
        .into_iter()
        .map(|(file, text)| {
            let p = dir.join(file);
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect()
}

/// Every built-in profile, from `rdmakit profiles --json` (run outside the repository, so only the built-ins
/// are listed): a profile added later is validated without editing this file.
fn builtin_profiles(scratch: &Path) -> Vec<String> {
    std::fs::create_dir_all(scratch).unwrap();
    let o = output_ok(
        rdmakit()
            .args(["profiles", "--json"])
            .current_dir(scratch)
            .env("XDG_CONFIG_HOME", scratch),
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<String> = list
        .iter()
        .filter(|p| p["origin"] == "built-in")
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.len() >= 8, "built-in profiles: {names:?}");
    names
}

fn yaml_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(yaml_under(&p));
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Files a YAML parser refuses are input errors for both sides; they are compared too (both must reject).
fn cases(scratch: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for p in builtin_profiles(scratch) {
        let p = p.as_str();
        let dir = scratch.join(p);
        output_ok(
            rdmakit()
                // nccl_tests_image has no default: an MPIJob without one is refused by both sides.
                .args(["render", "all", "--profile", p])
                .args([
                    "--set",
                    "nccl_tests_image=registry.example.com/nccl-tests:2.19",
                    "--out",
                ])
                .arg(&dir),
        );
        files.extend(yaml_under(&dir));
    }
    let r = repo();
    for d in ["crates/k8s-render/tests/fixtures", "tests/cluster/fixtures"] {
        files.extend(yaml_under(&r.join(d)));
    }
    files.extend(generated_cases(scratch));
    files
}

/// (accepted by the API server, its message)
fn server_verdict(ns: &str, file: &Path) -> (bool, String) {
    // Namespaced objects without a namespace land in the test namespace; those that name one (DRANET's
    // kube-system) keep it, as `kubectl apply -f` without -n does.
    let names_a_namespace =
        std::fs::read_to_string(file).is_ok_and(|t| t.contains("\n  namespace: "));
    // The generated size cases are created, not applied: client-side apply copies the object into its
    // last-applied annotation, whose 256 KiB limit would refuse a 1 MiB ConfigMap before the size rule does.
    let generated = file.components().any(|c| c.as_os_str() == "generated");
    let mut args = if generated {
        vec!["create", "--dry-run=server", "--validate=strict"]
    } else {
        vec!["apply", "--dry-run=server", "--validate=strict"]
    };
    if !names_a_namespace {
        args.extend(["-n", ns]);
    }
    args.extend(["-f", file.to_str().unwrap()]);
    let o = kubectl(&args);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).trim().to_owned(),
    )
}

/// (accepted by rdmakit: exit 0; warnings do not reject), its output
fn rdmakit_verdict(file: &Path) -> (bool, String) {
    let o = rdmakit()
        .args(["validate", "--strict"])
        .arg(file)
        .output_within()
        .unwrap();
    (o.status.success(), output_text(&o).trim().to_owned())
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn rdmakit_validate_strict_agrees_with_the_api_server_on_every_manifest() {
    let ns = Ns::new("validate", Kind::Erdma);
    let scratch = ns.out.join("bundles");
    let files = cases(&scratch);
    assert!(files.len() >= 40, "only {} cases", files.len());
    let mut disagree = Vec::new();
    let (mut accepted, mut rejected, mut measured) = (0, 0, 0);
    for f in &files {
        let (server_ok, server_msg) = server_verdict(&ns.name, f);
        let (ours_ok, ours_msg) = rdmakit_verdict(f);
        if server_ok {
            accepted += 1
        } else {
            rejected += 1
        }
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let in_corpus = f.parent().is_some_and(|d| d.ends_with("fixtures/broken"));
        if let Some((_, why)) = SERVER_ACCEPTS_RDMAKIT_REFUSES
            .iter()
            .find(|(n, _)| in_corpus && *n == name)
        {
            measured += 1;
            if !server_ok || ours_ok {
                disagree.push(format!(
                    "{name}: expected the API server to accept and rdmakit to refuse ({why}); API server: {}, rdmakit: {}",
                    if server_ok { "accepted".to_owned() } else { format!("rejected: {server_msg}") },
                    if ours_ok { "accepted".to_owned() } else { "refused".to_owned() },
                ));
            }
            continue;
        }
        if server_ok != ours_ok {
            disagree.push(format!(
                "{}\n  API server: {}\n  rdmakit:    {}",
                f.strip_prefix(repo()).unwrap_or(f).display(),
                if server_ok {
                    "accepted".to_owned()
                } else {
                    format!("rejected: {server_msg}")
                },
                if ours_ok {
                    "accepted".to_owned()
                } else {
                    format!("rejected: {ours_msg}")
                },
            ));
        }
    }
    println!(
        "differential validation: {} files, API server accepted {accepted}, rejected {rejected}; {measured} known disagreements measured",
        files.len()
    );
    assert_eq!(
        measured,
        SERVER_ACCEPTS_RDMAKIT_REFUSES.len(),
        "every listed disagreement is a corpus file"
    );
    assert!(
        rejected >= 3,
        "the corpus must hold manifests the API server rejects ({rejected})"
    );
    assert!(
        disagree.is_empty(),
        "{} disagreement(s):\n{}",
        disagree.len(),
        disagree.join("\n")
    );
}

/// Pods of the namespace whose labels match `selector`.
fn pod_count(ns: &str, selector: &str) -> usize {
    let o = kubectl(&["get", "pods", "-n", ns, "-l", selector, "-o", "name"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().count()
}

/// The operator cases of [`SERVER_ACCEPTS_RDMAKIT_REFUSES`] applied for real: what KubeRay v1.5.1 and the MPI
/// Operator v0.7.0 do with what the API server accepted is what rdmakit's refusals say.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn the_operators_do_what_the_refusals_say() {
    let ns = Ns::new("validate-ops", Kind::Erdma);
    let corpus = repo().join("crates/k8s-render/tests/fixtures/broken");
    for f in [
        "ray-replicas-above-max.yaml",
        "ray-min-above-max.yaml",
        "ray-nodeselector-bad-value.yaml",
        "mpijob-lowercase-worker.yaml",
    ] {
        let o = kubectl(&[
            "apply",
            "-n",
            &ns.name,
            "-f",
            corpus.join(f).to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "{f}: the API server accepts it: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let limit = Duration::from_secs(90);
    let workers = |cluster: &str| {
        pod_count(
            &ns.name,
            &format!("ray.io/cluster={cluster},ray.io/node-type=worker"),
        )
    };
    let heads = |cluster: &str| {
        pod_count(
            &ns.name,
            &format!("ray.io/cluster={cluster},ray.io/node-type=head"),
        )
    };
    // replicas 5, maxReplicas 2: KubeRay creates 2 workers.
    eventually("KubeRay's workers of `clamped`", limit, || {
        (workers("clamped") == 2).then_some(())
    });
    // minReplicas 3 > maxReplicas 1: KubeRay runs maxReplicas (1).
    eventually("KubeRay's worker of `min-above-max`", limit, || {
        (workers("min-above-max") == 1).then_some(())
    });
    // A bad nodeSelector value in the worker template: the head (no selector) is created, no worker is.
    eventually("KubeRay's head of `bad-selector`", limit, || {
        (heads("bad-selector") == 1).then_some(())
    });
    // The MPI Operator acts on Launcher only: its launcher appears, a `worker` pod never does.
    eventually("the MPI Operator's launcher", limit, || {
        (pod_count(
            &ns.name,
            "training.kubeflow.org/job-name=lowercase-worker,training.kubeflow.org/job-role=launcher",
        ) == 1)
            .then_some(())
    });
    // Reconciles that would add pods have had their chance: the counts hold.
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        workers("clamped"),
        2,
        "KubeRay clamps replicas 5 to maxReplicas 2"
    );
    assert_eq!(workers("min-above-max"), 1);
    assert_eq!(
        workers("bad-selector"),
        0,
        "the worker pod create is rejected"
    );
    assert_eq!(
        pod_count(
            &ns.name,
            "training.kubeflow.org/job-name=lowercase-worker,training.kubeflow.org/job-role=worker"
        ),
        0,
        "the MPI Operator ignores the `worker` key"
    );
    let events = kubectl(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    let events = String::from_utf8_lossy(&events.stdout);
    assert!(
        events.contains("Invalid value") && events.contains("rdma; gpu"),
        "KubeRay's event names the rejected pod create: {events}"
    );
}

/// The module cache the tier's build filled (`go env GOMODCACHE` in the operators' module).
fn go_module_cache() -> PathBuf {
    let o = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .current_dir(repo().join("tests/cluster/components/operators"))
        .output_within()
        .expect("go is on PATH (the tier built its components with it)");
    assert!(
        o.status.success(),
        "go env GOMODCACHE: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

/// k8s-render's vendored CRDs are byte for byte the ones the operators' releases ship, which up.sh installed
/// into this API server. k8s-render's own test of this skips where the module cache is empty (a fresh
/// machine's `cargo test` runs before the tier downloads the modules); here the cache is always there, so
/// a drift fails.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn the_vendored_crds_are_the_ones_the_operators_ship() {
    let cache = go_module_cache();
    let pairs = [
        (
            "ray.io_rayclusters.yaml",
            "github.com/ray-project/kuberay/ray-operator@v1.5.1/config/crd/bases/ray.io_rayclusters.yaml",
            "rayclusters.ray.io",
        ),
        (
            "kubeflow.org_mpijobs.yaml",
            "github.com/kubeflow/mpi-operator@v0.7.0/manifests/base/kubeflow.org_mpijobs.yaml",
            "mpijobs.kubeflow.org",
        ),
    ];
    for (file, upstream, crd) in pairs {
        let ours = std::fs::read(repo().join("crates/k8s-render/schemas").join(file)).unwrap();
        let theirs = std::fs::read(cache.join(upstream))
            .unwrap_or_else(|e| panic!("{upstream} in {}: {e}", cache.display()));
        assert!(
            ours == theirs,
            "crates/k8s-render/schemas/{file} differs from {upstream}: copy the release's file unchanged"
        );
        // And the API server serves that CRD (up.sh applied the same file).
        let o = kubectl(&["get", "crd", crd, "-o", "jsonpath={.spec.versions[*].name}"]);
        assert!(
            o.status.success(),
            "kubectl get crd {crd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
