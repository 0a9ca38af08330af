//! Throughput of reading, validating and linting a large manifest stream.
//!
//! `cargo run --release -p k8s-render --example validate_throughput -- 100000` builds a stream of
//! N documents (Pods, Deployments, RayClusters, MPIJobs in turn), then times `manifest::parse_str`,
//! `validate::validate` and `lint::lint` over it and prints documents per second for each, plus
//! the per-document time at N/10 to show the cost is linear.
//!
//! With `--stream` it instead reads, validates and lints one document at a time
//! (`manifest::documents`, `Validator::validate`) and keeps only the counts: memory then stays at
//! the input text plus one document, whatever N is (measure with `/usr/bin/time -v`).

use std::time::Instant;

use k8s_render::{lint, manifest, validate};

const KINDS: [&str; 4] = [
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p-N}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    env: [{name: NCCL_IB_HCA, value: erdma_0}]\n    resources: {limits: {aliyun/erdma: 1, nvidia.com/gpu: 1}, requests: {aliyun/erdma: 1, nvidia.com/gpu: 1}}\n    securityContext: {capabilities: {add: [IPC_LOCK]}}\n",
    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d-N}\nspec:\n  selector: {matchLabels: {app: d}}\n  template:\n    metadata: {labels: {app: d}}\n    spec:\n      containers:\n      - {name: c, image: busybox}\n",
    "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: r-N}\nspec:\n  headGroupSpec:\n    rayStartParams: {num-gpus: \"0\"}\n    template:\n      spec:\n        containers:\n        - {name: ray-head, image: rayproject/ray:2.57.0}\n  workerGroupSpecs:\n  - groupName: g\n    replicas: 2\n    minReplicas: 2\n    maxReplicas: 2\n    rayStartParams: {}\n    template:\n      spec:\n        containers:\n        - {name: ray-worker, image: rayproject/ray:2.57.0}\n",
    "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: m-N}\nspec:\n  slotsPerWorker: 2\n  mpiReplicaSpecs:\n    Launcher:\n      replicas: 1\n      template:\n        spec:\n          containers:\n          - {name: l, image: nccl-tests}\n    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n          - {name: w, image: nccl-tests}\n",
];

fn stream(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str("---\n");
        s.push_str(&KINDS[i % KINDS.len()].replace("-N}", &format!("-{i}}}")));
    }
    s
}

/// Seconds for parse, validate, lint of `n` documents.
fn run(n: usize) -> Result<[f64; 3], manifest::ManifestError> {
    let text = stream(n);
    let t = Instant::now();
    let docs = manifest::parse_str("stream.yaml", &text)?;
    let parse = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let violations = validate::validate(&docs, &validate::ValidateOptions::default());
    let validate = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let findings = lint::lint(&docs, &lint::LintOptions::default());
    let lint = t.elapsed().as_secs_f64();
    eprintln!(
        "{n} documents: {} violations, {} findings",
        violations.len(),
        findings.len()
    );
    Ok([parse, validate, lint])
}

/// One document at a time; returns (documents, violations, findings, seconds).
fn stream_run(n: usize) -> Result<(usize, usize, usize, f64), manifest::ManifestError> {
    let text = stream(n);
    let validator = validate::Validator::new(validate::ValidateOptions::default());
    let options = lint::LintOptions::default();
    let t = Instant::now();
    let (mut docs, mut violations, mut findings) = (0, 0, 0);
    for doc in manifest::documents("stream.yaml", &text) {
        let doc = doc?;
        violations += validator.validate(&doc).len();
        findings += lint::lint(std::slice::from_ref(&doc), &options).len();
        docs += 1;
    }
    Ok((docs, violations, findings, t.elapsed().as_secs_f64()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map_or(Ok(100_000), |a| a.parse())?;
    if args.iter().any(|a| a == "--stream") {
        let (docs, violations, findings, secs) = stream_run(n)?;
        println!(
            "  stream: {:>9.0} docs/s (read + validate + lint, one document at a time) over {docs} documents; {violations} violations, {findings} findings",
            docs as f64 / secs
        );
        return Ok(());
    }
    // Warm the schema caches (loaded once per process) so they are not charged to the small run.
    run(4)?;
    let small = run((n / 10).max(4))?;
    let big = run(n)?;
    for (i, step) in ["parse", "validate", "lint"].iter().enumerate() {
        println!(
            "{step:>8}: {:>9.0} docs/s over {n} documents; {:.1} µs/doc at N/10, {:.1} µs/doc at N",
            n as f64 / big[i],
            small[i] * 1e6 / (n / 10).max(4) as f64,
            big[i] * 1e6 / n as f64
        );
    }
    Ok(())
}
