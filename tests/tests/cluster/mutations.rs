//! Planted mistakes, caught live (issue 24, item 5). Users edit rendered manifests; `rdmakit run --bundle DIR`
//! applies the edited bundle. Each case renders a workflow's bundle (`--dry-run --out`), makes one mistake in
//! one file, and runs the edited bundle live: the run FAILs and its failed checks name the cause and the fix.
//! Where lint already refuses the mistake, the test asserts that (exit 2, the rule named, nothing applied) and
//! then runs it with `--accept-lint`, so the live check is proven on its own. The unedited bundle of every
//! workflow and profile used here PASSes through `--bundle` (`unedited_bundles_pass_on_*`).

use std::path::{Path, PathBuf};

use super::harness::OutputWithin;
use super::harness::{ERDMA_SECRETS, Kind, Ns, Run, assert_clean, rdmakit};
use super::vendors::Nodes;

/// Where a case runs: the workflow, its `--set`s and the nodes it needs.
#[derive(Clone, Copy)]
struct Target {
    workflow: &'static str,
    args: &'static [&'static str],
    kind: Kind,
    /// Nodes a fixture adds for this profile (GKE A4, Azure ND), with the pool label they carry.
    nodes: Option<(&'static str, &'static str)>,
    /// The node pool (`rdmakit.test/pool`) its pods land on: cases on different pools run side by side, cases
    /// on one pool one after another (they compete for its GPUs, devices and host ports).
    pool: &'static str,
}

const ERDMA: Target = Target {
    workflow: "erdma-ray-rdt",
    args: ERDMA_SECRETS,
    kind: Kind::Erdma,
    nodes: None,
    pool: "erdma",
};
const VKE: Target = Target {
    workflow: "vke-ib-pod",
    args: &[],
    kind: Kind::Mlx5,
    nodes: None,
    pool: "vke",
};
const SHARED: Target = Target {
    workflow: "shared-device-raycluster",
    args: &["--set", "cleanup=true"],
    kind: Kind::Mlx5,
    nodes: None,
    pool: "shared",
};
const DRANET: Target = Target {
    workflow: "dranet-nccl-tests",
    args: &[],
    kind: Kind::Erdma,
    nodes: None,
    pool: "dranet",
};
const EFA: Target = Target {
    workflow: "nccl-tests",
    args: &["--set", "profile=aws-efa-eks"],
    kind: Kind::Efa,
    nodes: None,
    pool: "efa",
};
const GKE: Target = Target {
    workflow: "nccl-tests",
    args: &["--set", "profile=gke-rdma-dranet"],
    kind: Kind::Mlx5,
    nodes: Some(("gke-a4-nodes.yaml", "gke")),
    pool: "gke",
};
const AZURE: Target = Target {
    workflow: "nccl-tests",
    args: &["--set", "profile=azure-ib-aks"],
    kind: Kind::Mlx5,
    nodes: Some(("azure-nd-h100-nodes.yaml", "azure")),
    pool: "azure",
};

/// One planted mistake: in `file` of the rendered bundle, every `from` becomes `to`.
struct Mutation {
    name: &'static str,
    on: Target,
    file: &'static str,
    from: &'static str,
    to: &'static str,
    /// The lint rule that refuses the edited bundle, if lint catches it.
    lint: Option<&'static str>,
    /// What the live run's failed checks must name: the cause and the fix.
    names: &'static [&'static str],
}

/// The suite: at least 15 single mistakes across the five workflows and the EFA, GKE and Azure profiles.
const MUTATIONS: &[Mutation] = &[
    Mutation {
        name: "vke: no IPC_LOCK",
        on: VKE,
        file: "rdma-test-pod.yaml",
        from: "- IPC_LOCK\n",
        to: "- NET_BIND_SERVICE\n",
        lint: Some("rdma-missing-ipc-lock"),
        names: &["IPC_LOCK"],
    },
    Mutation {
        name: "vke: no RDMA resource",
        on: VKE,
        file: "rdma-test-pod.yaml",
        from: "        vke.volcengine.com/infiniband-rdma: \"1\"\n",
        to: "        cpu: \"1\"\n",
        lint: Some("rdma-ipc-lock-without-device"),
        names: &["vke.volcengine.com/infiniband-rdma"],
    },
    Mutation {
        name: "vke: no topology mount",
        on: VKE,
        file: "rdma-test-pod.yaml",
        from: "    - mountPath: /var/run/nvidia-topologyd\n      name: nvidia-topology\n      readOnly: true\n",
        to: "",
        lint: None,
        names: &["/var/run/nvidia-topologyd", "nvidia-topology"],
    },
    Mutation {
        name: "vke: no /dev/shm volume",
        on: VKE,
        file: "rdma-test-pod.yaml",
        from: "    - mountPath: /dev/shm\n      name: cache-volume\n",
        to: "",
        lint: None,
        names: &["/dev/shm"],
    },
    Mutation {
        name: "erdma: NCCL_IB_DISABLE=1 in the check pods",
        on: ERDMA,
        file: "erdma-nccl-check-pods.yaml",
        from: "    - name: NCCL_IB_DISABLE\n      value: \"0\"\n",
        to: "    - name: NCCL_IB_DISABLE\n      value: \"1\"\n",
        lint: Some("nccl-ib-disabled"),
        names: &["NCCL all_reduce over eRDMA moved its bytes on the device"],
    },
    Mutation {
        name: "erdma: wrong NCCL_IB_HCA",
        on: ERDMA,
        file: "ray-cluster-erdma.yaml",
        from: "            value: erdma_0\n",
        to: "            value: mlx5_0\n",
        lint: Some("nccl-ib-hca-mismatch"),
        names: &["NET/IB", "erdma_0"],
    },
    Mutation {
        name: "erdma: no hostNetwork on the check pods",
        on: ERDMA,
        file: "erdma-nccl-check-pods.yaml",
        from: "  hostNetwork: true\n",
        to: "  hostNetwork: false\n",
        lint: None,
        names: &["hostNetwork"],
    },
    Mutation {
        name: "erdma: a wrong NCCL pin in the image",
        on: ERDMA,
        file: "Dockerfile",
        from: "nvidia-nccl-cu13==2.30.7",
        to: "nvidia-nccl-cu13==2.28.9",
        lint: None,
        names: &["2.28.9", "2.30.7"],
    },
    Mutation {
        name: "erdma: no eRDMA resource on the workers",
        on: ERDMA,
        file: "ray-cluster-erdma.yaml",
        from: "              aliyun/erdma: \"1\"\n",
        to: "",
        lint: Some("nccl-ib-hca-without-rdma"),
        names: &["erdma_0"],
    },
    Mutation {
        name: "shared device: no IPC_LOCK on the workers",
        on: SHARED,
        file: "ray-cluster-rdma.yaml",
        from: "- IPC_LOCK\n",
        to: "- SYS_NICE\n",
        lint: Some("rdma-missing-ipc-lock"),
        names: &["IPC_LOCK"],
    },
    Mutation {
        name: "dranet: a claim on the wrong DeviceClass",
        on: DRANET,
        file: "resource-claim-template.yaml",
        from: "deviceClassName: erdma.alibaba.dra.net",
        to: "deviceClassName: gpu.nvidia.com",
        lint: None,
        names: &["gpu.nvidia.com"],
    },
    Mutation {
        name: "dranet: -np larger than the slots",
        on: DRANET,
        file: "mpi-job.yaml",
        from: "mpirun -np 4 ",
        to: "mpirun -np 8 ",
        lint: None,
        names: &["slots", "8 ranks"],
    },
    Mutation {
        name: "efa: no EFA devices requested",
        on: EFA,
        file: "mpi-job.yaml",
        from: "                vpc.amazonaws.com/efa: \"32\"\n",
        to: "",
        lint: Some("nccl-plugin-env-without-rdma"),
        names: &["vpc.amazonaws.com/efa"],
    },
    Mutation {
        name: "efa: no GPU limit",
        on: EFA,
        file: "mpi-job.yaml",
        from: "                nvidia.com/gpu: \"8\"\n",
        to: "",
        lint: None,
        names: &["nvidia.com/gpu", "no CUDA-capable device"],
    },
    Mutation {
        name: "efa: NCCL_SOCKET_IFNAME names a missing interface",
        on: EFA,
        file: "mpi-job.yaml",
        from: "-x NCCL_SOCKET_IFNAME='^docker,lo,veth'",
        to: "-x NCCL_SOCKET_IFNAME=ib9",
        lint: None,
        names: &["NCCL_SOCKET_IFNAME", "ib9"],
    },
    Mutation {
        name: "gke: no DRA claim on the workers",
        on: GKE,
        file: "mpi-job.yaml",
        from: "resourceClaimTemplateName: rdma-net-template-gib",
        to: "resourceClaimTemplateName: no-such-template",
        lint: None,
        names: &["no-such-template"],
    },
    Mutation {
        name: "azure: wrong NCCL_IB_HCA",
        on: AZURE,
        file: "mpi-job.yaml",
        from: "-x NCCL_IB_HCA=mlx5 ",
        to: "-x NCCL_IB_HCA=mlx9 ",
        lint: Some("nccl-ib-hca-mismatch"),
        names: &["NCCL_IB_HCA"],
    },
    Mutation {
        name: "azure: no /dev/shm volume",
        on: AZURE,
        file: "mpi-job.yaml",
        from: "            volumeMounts:\n            - mountPath: /dev/shm\n              name: shm\n",
        to: "",
        lint: None,
        names: &["/dev/shm"],
    },
];

/// A namespace (and nodes) for `t`; the fixture nodes are deleted with the returned guard.
fn place(t: Target, prefix: &str) -> (Ns, Option<Nodes>) {
    let nodes = t.nodes.map(|(file, pool)| Nodes::apply(file, pool));
    (Ns::new(prefix, t.kind), nodes)
}

/// The workflow's rendered bundle in `dir` (`rdmakit run W --dry-run --out DIR`, the same `--set`s).
fn render(t: Target, ns: &str, dir: &Path) {
    let o = rdmakit()
        .args(["run", t.workflow, "--dry-run", "-n", ns, "--out"])
        .arg(dir)
        .args(t.args)
        .output_within()
        .unwrap();
    assert!(
        o.status.success(),
        "dry-run of {}: {}",
        t.workflow,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Plants `m` in the bundle under `dir`: every `from` in its file becomes `to` (it must be there).
fn plant(m: &Mutation, dir: &Path) -> Result<(), String> {
    let f = dir.join("bundle").join(m.file);
    let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
    if !text.contains(m.from) {
        return Err(format!(
            "{:?} is not in the rendered {}:\n{text}",
            m.from, m.file
        ));
    }
    std::fs::write(&f, text.replace(m.from, m.to)).unwrap();
    Ok(())
}

/// `rdmakit run W --bundle DIR` live in `ns` (out dir `out`).
fn run_bundle(t: Target, ns: &Ns, dir: &Path, out: &Path, more: &[&str]) -> Run {
    let mut args: Vec<&str> = vec!["--bundle", dir.to_str().unwrap()];
    args.extend(t.args);
    args.extend(more);
    ns.run_in(t.workflow, out, &args)
}

fn scratch(ns: &Ns, what: &str) -> PathBuf {
    let d = ns.out.with_file_name(format!("{}-{what}", ns.name));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs one mutation end to end; `Err` says how the product missed it.
fn check(m: &Mutation) -> Result<(), String> {
    let (ns, _nodes) = place(m.on, "mut");
    let bundle = scratch(&ns, "bundle");
    render(m.on, &ns.name, &bundle);
    plant(m, &bundle)?;
    let out = scratch(&ns, "run");
    if let Some(rule) = m.lint {
        let refused = run_bundle(m.on, &ns, &bundle, &out, &[]);
        if refused.code != 2 || !refused.stderr.contains(rule) {
            return Err(format!(
                "lint did not refuse it with {rule}:\n{}",
                refused.text()
            ));
        }
        if !ns.leftovers().is_empty() {
            return Err(format!(
                "refused by lint, yet applied: {:?}",
                ns.leftovers()
            ));
        }
    }
    let r = run_bundle(
        m.on,
        &ns,
        &bundle,
        &out,
        if m.lint.is_some() {
            &["--accept-lint"]
        } else {
            &[]
        },
    );
    let failed = r.checks("fail").join("\n");
    let result = if r.code != 1 || r.verdict() != "fail" {
        Err(format!("the live run did not FAIL:\n{}", r.text()))
    } else if let Some(n) = m.names.iter().find(|n| !failed.contains(**n)) {
        Err(format!("no failed check names {n:?}:\n{}", r.text()))
    } else {
        Ok(())
    };
    assert_clean(&ns);
    result
}

/// Without a cluster (a plain `cargo test` runs it): each mistake is in the rendered bundle as written
/// here, and the edited bundle's dry-run (`--bundle`, which validates and lints) is refused by exactly the
/// lint rule the case names, or accepted where the case says lint does not catch it.
#[test]
fn every_mutation_plants_and_lint_judges_it_as_declared() {
    let mut wrong = Vec::new();
    for m in MUTATIONS {
        let d = tempfile::tempdir().unwrap();
        let bundle = d.path().join("bundle-out");
        render(m.on, "default", &bundle);
        if let Err(e) = plant(m, &bundle) {
            wrong.push(format!("{}: {e}", m.name));
            continue;
        }
        let o = rdmakit()
            .args(["run", m.on.workflow, "--dry-run", "--bundle"])
            .arg(&bundle)
            .arg("--out")
            .arg(d.path().join("run"))
            .args(m.on.args)
            .output_within()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        let ok = match m.lint {
            Some(rule) => o.status.code() == Some(2) && stderr.contains(rule),
            None => o.status.success(),
        };
        if !ok {
            wrong.push(format!(
                "{} (lint {:?}): exit {:?}\n{stderr}",
                m.name,
                m.lint,
                o.status.code()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// The mistakes the tier does not catch yet, each with why (measured on the node model: the run PASSed, ended
/// as an ERROR, or FAILed without naming the cause). The live test reports each as SKIPPED;
/// taking one off this list is how a fix proves itself.
const PENDING: &[(&str, &str)] = &[];

/// The node pools the suite's cases run on, in the groups tests/cluster/run.sh runs side by side with the
/// other tests of those pools (one lane per group): each group is its own live test below.
const POOL_GROUPS: &[&[&str]] = &[
    &["erdma"],
    // GKE's A4 nodes carry dra.net ResourceSlices, which DRANET's profile sees too.
    &["dranet", "gke"],
    &["vke", "shared", "efa", "azure"],
];

/// Every mutation of the suite whose target runs on `pools` FAILs live naming its cause (after lint refused
/// it, where lint does); the misses are listed together, so one run shows every mistake the product lets
/// through.
fn planted_mistakes_fail_live(pools: &[&str]) {
    assert!(MUTATIONS.len() >= 15);
    for (name, _) in PENDING {
        assert!(
            MUTATIONS.iter().any(|m| m.name == *name),
            "PENDING names no case: {name}"
        );
    }
    // RDMAKIT_MUTATION=TEXT runs only the cases whose name holds TEXT (to work on one).
    let only = std::env::var("RDMAKIT_MUTATION").unwrap_or_default();
    let cases: Vec<&Mutation> = MUTATIONS
        .iter()
        .filter(|m| pools.contains(&m.on.pool))
        .filter(|m| m.name.contains(only.as_str()))
        .filter(|m| match PENDING.iter().find(|(n, _)| *n == m.name) {
            Some((_, why)) => {
                println!("mutation {:?}: SKIPPED (not caught yet: {why})", m.name);
                false
            }
            None => true,
        })
        .collect();
    let missed: Vec<String> = by_pool(
        &cases,
        |m| m.on.pool,
        |m| {
            let t0 = std::time::Instant::now();
            let r = caught(|| check(m));
            println!(
                "mutation {:?}: {} in {:.0?}",
                m.name,
                if r.is_ok() { "caught" } else { "MISSED" },
                t0.elapsed()
            );
            r.err().map(|e| format!("{}: {e}", m.name))
        },
    )
    .into_iter()
    .flatten()
    .collect();
    assert!(
        missed.is_empty(),
        "{} of {} mistakes on {pools:?} not caught:\n{}",
        missed.len(),
        cases.len(),
        missed.join("\n\n")
    );
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn every_planted_mistake_on_the_erdma_pool_fails_live_naming_its_cause() {
    planted_mistakes_fail_live(POOL_GROUPS[0]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn every_planted_mistake_on_the_dra_pools_fails_live_naming_its_cause() {
    planted_mistakes_fail_live(POOL_GROUPS[1]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn every_planted_mistake_on_the_other_pools_fails_live_naming_its_cause() {
    planted_mistakes_fail_live(POOL_GROUPS[2]);
}

/// Without a cluster: the pool groups above hold every pool a case or a target runs on, each once, so the
/// three live tests together run the whole suite.
#[test]
fn the_pool_groups_cover_every_case_once() {
    let grouped: Vec<&str> = POOL_GROUPS.iter().flat_map(|g| g.iter().copied()).collect();
    let mut unique = grouped.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        grouped.len(),
        "a pool in two groups: {grouped:?}"
    );
    for t in TARGETS {
        assert!(
            grouped.contains(&t.pool),
            "{} runs on pool {:?}, in no group of POOL_GROUPS",
            t.workflow,
            t.pool
        );
    }
    for m in MUTATIONS {
        assert!(
            grouped.contains(&m.on.pool),
            "{}: pool {:?}",
            m.name,
            m.on.pool
        );
    }
}

/// `f` over `items`, one thread per node pool (`pool_of`), the items of a pool in order: what the tier's
/// runs spend waiting (pods, the launcher's sleep, the ranks' transfers) overlaps across pools.
fn by_pool<T: Sync, R: Send>(
    items: &[T],
    pool_of: impl Fn(&T) -> &'static str + Sync,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let mut pools: Vec<&'static str> = items.iter().map(&pool_of).collect();
    pools.dedup();
    pools.sort_unstable();
    pools.dedup();
    std::thread::scope(|s| {
        let handles: Vec<_> = pools
            .iter()
            .map(|p| {
                let (f, pool_of) = (&f, &pool_of);
                s.spawn(move || {
                    items
                        .iter()
                        .filter(|i| pool_of(i) == *p)
                        .map(f)
                        .collect::<Vec<R>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a pool's thread"))
            .collect()
    })
}

/// `f`'s result, or its panic's message as the error (one case's failed assertion does not end the others).
fn caught(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panicked".to_owned()))
    })
}

/// Every target the suite edits.
const TARGETS: &[Target] = &[VKE, ERDMA, SHARED, DRANET, EFA, GKE, AZURE];

/// The unedited bundle of every target on `pools` PASSes through `--bundle`: what fails above fails because
/// of the one edit.
fn unedited_bundles_pass_on(pools: &[&str]) {
    let targets: Vec<Target> = TARGETS
        .iter()
        .copied()
        .filter(|t| pools.contains(&t.pool))
        .collect();
    let failed: Vec<String> = by_pool(
        &targets,
        |t| t.pool,
        |t| {
            caught(|| {
                let (ns, _nodes) = place(*t, "mut-ok");
                let bundle = scratch(&ns, "bundle");
                render(*t, &ns.name, &bundle);
                let r = run_bundle(*t, &ns, &bundle, &scratch(&ns, "run"), &[]);
                r.assert_pass();
                assert_clean(&ns);
                Ok(())
            })
            .err()
            .map(|e| format!("{} {:?}: {e}", t.workflow, t.args))
        },
    )
    .into_iter()
    .flatten()
    .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn unedited_bundles_pass_on_the_erdma_pool() {
    unedited_bundles_pass_on(POOL_GROUPS[0]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn unedited_bundles_pass_on_the_dra_pools() {
    unedited_bundles_pass_on(POOL_GROUPS[1]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn unedited_bundles_pass_on_the_other_pools() {
    unedited_bundles_pass_on(POOL_GROUPS[2]);
}
