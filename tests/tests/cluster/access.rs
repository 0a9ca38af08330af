//! Credentials the way teams get them: a ServiceAccount bound to a namespace Role. rdmakit asks the real API
//! server (SelfSubjectAccessReview) before its first change, so such credentials fail up front, naming the
//! permissions they lack, with nothing created; and a kubeconfig problem is a usage error (exit 2).

use super::harness::OutputWithin;
use super::harness::{
    ERDMA_SECRETS, Kind, Ns, assert_clean, kubeconfig, kubectl, kubectl_ok, rdmakit,
};

/// kubectl that must succeed; its stdout without the trailing newline.
fn stdout_of(args: &[&str]) -> String {
    kubectl_ok(args).trim().to_owned()
}

/// A kubeconfig for `system:serviceaccount:NS:SA`: the tier's server and CA, the account's token.
fn service_account_kubeconfig(ns: &Ns, sa: &str) -> std::path::PathBuf {
    let token = stdout_of(&["-n", &ns.name, "create", "token", sa, "--duration=1h"]);
    let server = stdout_of(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let ca = stdout_of(&[
        "config",
        "view",
        "--minify",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let ca_line = if ca.is_empty() {
        let file = stdout_of(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority}",
        ]);
        format!("certificate-authority: {file}")
    } else {
        format!("certificate-authority-data: {ca}")
    };
    std::fs::create_dir_all(&ns.out).unwrap();
    let path = ns.out.join(format!("{sa}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: tier\n  cluster:\n    server: {server}\n    {ca_line}\n\
             users:\n- name: {sa}\n  user:\n    token: {token}\ncontexts:\n- name: {sa}\n  context:\n    cluster: tier\n    \
             user: {sa}\n    namespace: {}\ncurrent-context: {sa}\n",
            ns.name
        ),
    )
    .unwrap();
    path
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn namespace_scoped_credentials_fail_before_the_first_change_naming_what_they_lack() {
    let ns = Ns::new("access", Kind::Erdma);
    let sa = "team-ml";
    kubectl_ok(&["-n", &ns.name, "create", "serviceaccount", sa]);
    // What a namespace Role usually gives: pods, exec, logs, Secrets, Deployments; no RayClusters. The node
    // listing the workflow does first is granted cluster-wide (read only), so the run gets to its changes.
    kubectl_ok(&[
        "-n",
        &ns.name,
        "create",
        "role",
        "pods-and-secrets",
        "--verb=get,list,watch,create,patch,delete",
        "--resource=pods,pods/exec,pods/log,secrets,deployments.apps,services,persistentvolumeclaims,configmaps",
    ]);
    let subject = format!("--serviceaccount={}:{sa}", ns.name);
    kubectl_ok(&[
        "-n",
        &ns.name,
        "create",
        "rolebinding",
        sa,
        "--role=pods-and-secrets",
        &subject,
    ]);
    let reader = format!("{}-nodes", ns.name);
    kubectl_ok(&[
        "create",
        "clusterrole",
        &reader,
        "--verb=get,list,watch",
        "--resource=nodes",
    ]);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &reader,
        &format!("--clusterrole={reader}"),
        &subject,
    ]);
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = kubectl(&[
                "delete",
                "clusterrolebinding,clusterrole",
                &self.0,
                "--ignore-not-found",
            ]);
        }
    }
    let _cleanup = Cleanup(reader);
    let config = service_account_kubeconfig(&ns, sa);

    let r = ns.run_as("erdma-ray-rdt", &ns.out.join("run"), &config, ERDMA_SECRETS);
    let all = format!("{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.code, 3, "{all}");
    assert!(
        all.contains("permission pre-check") && all.contains("nothing was changed"),
        "{all}"
    );
    // Exactly what the Role lacks: the RayCluster verbs; what it grants is not listed.
    for verb in ["create", "patch", "delete"] {
        let want = format!("{verb} RayCluster (ray.io/v1) in namespace {}", ns.name);
        assert!(all.contains(&want), "{want:?} is not named:\n{all}");
    }
    assert!(
        !all.contains("Deployment") && !all.contains("Secret ("),
        "granted permissions listed:\n{all}"
    );
    assert_clean(&ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn an_unknown_context_is_a_usage_error_listing_the_contexts() {
    let o = rdmakit()
        .args(["run", "vke-ib-pod", "--context", "no-such-context", "--out"])
        .arg(std::env::temp_dir().join("rdmakit-tier-context"))
        .env("KUBECONFIG", kubeconfig())
        .output_within()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let current = stdout_of(&["config", "current-context"]);
    assert!(
        err.contains("no-such-context") && err.contains(&current),
        "{err}"
    );
}
