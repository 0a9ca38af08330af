//! The vendored CRD schemas are the ones the control-plane tier's operators ship: KubeRay v1.5.1 and
//! mpi-operator v0.7.0 (the versions seeds 000 and 002 ran). A drift between `schemas/` and the
//! CRDs the cluster serves would make `validate` accept what the API server rejects, or the
//! reverse; this test compares them byte for byte with the files in the Go module cache.

use std::path::{Path, PathBuf};

/// (vendored file, upstream file in the Go module cache, release)
const VENDORED: [(&str, &str, &str); 2] = [
    (
        "ray.io_rayclusters.yaml",
        "github.com/ray-project/kuberay/ray-operator@v1.5.1/config/crd/bases/ray.io_rayclusters.yaml",
        "KubeRay v1.5.1",
    ),
    (
        "kubeflow.org_mpijobs.yaml",
        "github.com/kubeflow/mpi-operator@v0.7.0/manifests/base/kubeflow.org_mpijobs.yaml",
        "mpi-operator v0.7.0",
    ),
];

/// `$GOMODCACHE`, else `$GOPATH/pkg/mod`, else `/root/go/pkg/mod` (where the cluster tier's
/// build puts it).
fn module_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("GOMODCACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(gopath) = std::env::var_os("GOPATH").filter(|d| !d.is_empty()) {
        return Path::new(&gopath).join("pkg/mod");
    }
    PathBuf::from("/root/go/pkg/mod")
}

#[test]
fn vendored_crds_match_the_operator_releases_in_the_go_module_cache() {
    let cache = module_cache();
    for (file, upstream, release) in VENDORED {
        let upstream = cache.join(upstream);
        if !upstream.exists() {
            println!(
                "SKIP vendored_crds_match_the_operator_releases_in_the_go_module_cache: {} absent \
                 (the cluster tier's build downloads {release} into the module cache; the tier's \
                 the_vendored_crds_are_the_ones_the_operators_ship runs this check there, without a skip)",
                upstream.display()
            );
            continue;
        }
        let vendored = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("schemas")
            .join(file);
        let ours = std::fs::read(&vendored).expect("vendored schema readable");
        let theirs = std::fs::read(&upstream).expect("upstream schema readable");
        assert!(
            ours == theirs,
            "schemas/{file} differs from {release} ({}): copy it unchanged with \
             `cp {} {}` and update schemas/README.md",
            upstream.display(),
            upstream.display(),
            vendored.display()
        );
    }
}

#[test]
fn schemas_readme_names_the_vendored_releases() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/README.md"))
            .expect("schemas/README.md readable");
    for (file, _, release) in VENDORED {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| {file} ")))
            .unwrap_or_else(|| panic!("schemas/README.md has no table row for {file}"));
        assert!(
            row.contains(release),
            "row for {file} must name {release}: {row}"
        );
    }
}
