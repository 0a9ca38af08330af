//! Untrusted manifests and Dockerfiles: no input makes the loader, validation, the linter or the
//! SARIF serializer panic, and none takes over a second.

use std::time::{Duration, Instant};

use k8s_render::{lint, manifest, sarif, validate};
use proptest::prelude::*;

fn fragments() -> impl Strategy<Value = String> {
    let frag = prop_oneof![
        Just("---".to_string()),
        Just("apiVersion: v1".to_string()),
        Just("apiVersion: ray.io/v1".to_string()),
        Just("apiVersion: kubeflow.org/v2beta1".to_string()),
        Just("kind: Pod".to_string()),
        Just("kind: RayCluster".to_string()),
        Just("kind: MPIJob".to_string()),
        Just("kind: List".to_string()),
        Just("items:".to_string()),
        Just("metadata: {name: a}".to_string()),
        Just("metadata:".to_string()),
        Just("  name: a".to_string()),
        Just("  name: b".to_string()),
        Just("spec:".to_string()),
        Just("  containers:".to_string()),
        Just("  - name: c".to_string()),
        Just("    image: busybox".to_string()),
        Just("    volumeMounts: [{name: shm, mountPath: /dev/shm}]".to_string()),
        Just("    resources: {limits: {aliyun/erdma: 1}, claims: [{name: erdma}]}".to_string()),
        Just(
            "    env: [{name: NCCL_IB_HCA, value: mlx5}, {name: NCCL_SOCKET_IFNAME, value: \"^\"}]"
                .to_string()
        ),
        Just("  volumes: [{name: t, hostPath: {path: /x, type: Dir}}]".to_string()),
        Just(
            "  mpiReplicaSpecs: {worker: {replicas: 2, template: {spec: {containers: []}}}}"
                .to_string()
        ),
        Just(
            "  workerGroupSpecs: [{groupName: g, replicas: 9, minReplicas: 3, maxReplicas: 2}]"
                .to_string()
        ),
        Just("  headGroupSpec: {rayStartParams: {num-gpus: 0}}".to_string()),
        Just("  hostNetwork: yes".to_string()),
        Just("  a: &x [1, *x]".to_string()),
        Just("  <<: {b: 1}".to_string()),
        Just("FROM pytorch/pytorch:2.11.0-cuda12.8".to_string()),
        Just("RUN apt-get install -y libibverbs1 \\".to_string()),
        Just("ENV NCCL_VERSION=2.28.9".to_string()),
        Just("# comment".to_string()),
        Just("    @ray.method(tensor_transport=\"gloo\")".to_string()),
        "\\PC{0,60}",
        "[ :{}\\[\\],&*!|>'\"#-]{0,30}",
    ];
    prop::collection::vec(frag, 0..40).prop_map(|v| v.join("\n"))
}

fn exercise(text: &str) {
    let start = Instant::now();
    let options = lint::LintOptions {
        device_pattern: Some("erdma_*".into()),
        gid_index: Some(1),
        ..Default::default()
    };
    let mut findings = lint::lint_dockerfile("Dockerfile", text, &options);
    findings.extend(lint::lint_text("x.py", text, &options));
    if let Ok(docs) = manifest::parse_str("x.yaml", text) {
        let violations = validate::validate(&docs, &validate::ValidateOptions::default());
        findings.extend(lint::lint(&docs, &options));
        let tool = sarif::Tool::rdmakit("0");
        let _ = sarif::validate_log(&violations, &tool);
        let streamed = manifest::documents("x.yaml", text)
            .filter(Result::is_ok)
            .count();
        assert_eq!(streamed, docs.len());
    }
    let _ = sarif::lint_log(&findings, &sarif::Tool::rdmakit("0"));
    // Debug builds on a shared 2-core machine: a generous bound that still catches blow-ups.
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?} on {text:?}",
        start.elapsed()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn untrusted_text_never_panics(text in fragments()) {
        exercise(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(docs) = manifest::read_from("b.yaml", &bytes[..]) {
            let _ = validate::validate(&docs, &validate::ValidateOptions::default());
        }
        exercise(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn deep_nesting_and_alias_bombs_are_bounded() {
    // A billion-laughs alias chain and a deeply nested flow sequence.
    let mut bomb = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 1..9 {
        let prev = format!("*a{}", i - 1);
        bomb.push_str(&format!("  a{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
    }
    // Expanded, the chain is 10^9 nodes (minutes and gigabytes); bounded, it takes milliseconds. The limit is
    // a hang guard, not a speed target: generous enough that a loaded CI machine still passes.
    const BOUND: Duration = Duration::from_secs(30);
    let start = Instant::now();
    let _ = manifest::parse_str("bomb.yaml", &bomb)
        .map(|d| validate::validate(&d, &Default::default()));
    assert!(
        start.elapsed() < BOUND,
        "alias bomb took {:?}",
        start.elapsed()
    );
    let nested = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: n}}\ndata: {}{}\n",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let start = Instant::now();
    let _ = manifest::parse_str("nested.yaml", &nested)
        .map(|d| validate::validate(&d, &Default::default()));
    assert!(
        start.elapsed() < BOUND,
        "nesting took {:?}",
        start.elapsed()
    );
}
