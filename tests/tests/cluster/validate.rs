//! Differential validation: every rendered bundle of every profile, every manifest fixture in the repository and
//! the broken-manifest corpus go through both the real API server (`kubectl apply --dry-run=server
//! --validate=strict`) and `rdmakit validate --strict`. Accept and reject must agree on every file.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::harness::{Kind, Ns, kubectl, output_ok, output_text, rdmakit, repo};

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
                .args(["render", "all", "--profile", p, "--out"])
                .arg(&dir),
        );
        files.extend(yaml_under(&dir));
    }
    let r = repo();
    for d in ["crates/k8s-render/tests/fixtures", "tests/cluster/fixtures"] {
        files.extend(yaml_under(&r.join(d)));
    }
    files
}

/// (accepted by the API server, its message)
fn server_verdict(ns: &str, file: &Path) -> (bool, String) {
    // Namespaced objects without a namespace land in the test namespace; those that name one (DRANET's
    // kube-system) keep it, as `kubectl apply -f` without -n does.
    let names_a_namespace =
        std::fs::read_to_string(file).is_ok_and(|t| t.contains("\n  namespace: "));
    let mut args = vec!["apply", "--dry-run=server", "--validate=strict"];
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
        .output()
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
    let (mut accepted, mut rejected) = (0, 0);
    for f in &files {
        let (server_ok, server_msg) = server_verdict(&ns.name, f);
        let (ours_ok, ours_msg) = rdmakit_verdict(f);
        if server_ok {
            accepted += 1
        } else {
            rejected += 1
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
        "differential validation: {} files, API server accepted {accepted}, rejected {rejected}",
        files.len()
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

/// The module cache the tier's build filled (`go env GOMODCACHE` in the operators' module).
fn go_module_cache() -> PathBuf {
    let o = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .current_dir(repo().join("tests/cluster/components/operators"))
        .output()
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
