//! The tier's one harness: access to the running control-plane tier (tests/cluster/up.sh) through kubectl
//! and the rdmakit binary; test namespaces (any namespace works: the node emulator answers every pod from its
//! spec and its node); node fixture knobs and images in the emulated registry; the cluster changes a test makes
//! and undoes on drop; the assertions every module makes on a run.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use rdmakit_tests::output_text;

pub fn repo() -> PathBuf {
    rdmakit_tests::repo_root().to_path_buf()
}

fn out() -> PathBuf {
    repo().join("target/cluster")
}

/// `path` when it is a file; else a panic that says how to make it.
fn existing(path: PathBuf, how: &str) -> PathBuf {
    assert!(path.is_file(), "{} missing: {how}", path.display());
    path
}

/// Panics with the way to start the tier when it is not up (these tests are `#[ignore]`d otherwise).
pub fn kubeconfig() -> PathBuf {
    existing(
        out().join("kubeconfig"),
        "the control-plane tier is not up: run `make cluster-test`, or tests/cluster/build.sh && tests/cluster/up.sh",
    )
}

pub fn kubectl_path() -> PathBuf {
    out().join("bin/kubectl")
}

fn emu_state() -> PathBuf {
    out().join("emu-state")
}

pub fn rdmakit_path() -> PathBuf {
    existing(
        repo().join("target/debug/rdmakit"),
        "cargo build -p rdmakit",
    )
}

/// A command for the rdmakit binary the workspace build made.
pub fn rdmakit() -> Command {
    Command::new(rdmakit_path())
}

/// How long one command of a tier test may run before the test fails: `RDMAKIT_TIER_DEADLINE_S` seconds,
/// 900 by default (above the workflows' own longest wait). A hang then fails the test that hung, naming the
/// command, and the run goes on with the next test.
pub fn deadline() -> Duration {
    let raw = std::env::var("RDMAKIT_TIER_DEADLINE_S").unwrap_or_default();
    if raw.is_empty() {
        return Duration::from_secs(900);
    }
    match raw.parse::<u64>() {
        Ok(s) if s > 0 => Duration::from_secs(s),
        _ => panic!(
            "RDMAKIT_TIER_DEADLINE_S={raw:?}: want a whole number of seconds above 0, e.g. 900"
        ),
    }
}

/// Collects a pipe in a thread; what came so far stays readable if the process never ends.
fn drain(
    pipe: Option<impl Read + Send + 'static>,
) -> (Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buf);
    let h = std::thread::spawn(move || {
        let Some(mut p) = pipe else { return };
        let mut chunk = [0u8; 8192];
        while let Ok(n) = p.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("pipe buffer")
                .extend_from_slice(&chunk[..n]);
        }
    });
    (buf, h)
}

/// Waits for `child` (stdout and stderr piped) within [`deadline`]. Past it the child gets SIGINT (rdmakit
/// cleans up on Ctrl-C), then SIGKILL 60 s later, and the test panics naming `what` and the stderr so far.
pub fn wait_within(child: Child, what: &str) -> Output {
    wait_for(child, what, deadline())
}

fn wait_for(mut child: Child, what: &str, limit: Duration) -> Output {
    let (out, out_h) = drain(child.stdout.take());
    let (err, err_h) = drain(child.stderr.take());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the child") {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            // rdmakit cleans up on SIGINT within seconds; the grace is 60 s, or the deadline where that is
            // shorter. A command that ignores SIGINT (inherited: a `make test &` from a script starts its
            // jobs with SIGINT ignored) is killed once the grace is over.
            let grace = limit.min(Duration::from_secs(60));
            let t1 = Instant::now();
            while child.try_wait().ok().flatten().is_none() && t1.elapsed() < grace {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = child.kill();
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&err.lock().expect("pipe buffer")).into_owned();
            let tail: String = stderr
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!(
                "{what}: still running after {limit:?}, the per-command deadline (RDMAKIT_TIER_DEADLINE_S): \
                 interrupted and killed; the last of its stderr:\n{tail}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The pipes close when the process and any child holding them end; past that, what came is enough.
    for h in [out_h, err_h] {
        let t1 = Instant::now();
        while !h.is_finished() && t1.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let take = |b: &Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *b.lock().expect("pipe buffer"));
    Output {
        status,
        stdout: take(&out),
        stderr: take(&err),
    }
}

/// `cmd.output()` within [`deadline`]; stdin is closed, as `output()` leaves it (no caller feeds one).
pub fn output_within(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    wait_within(child, &what)
}

/// `.output()` within [`deadline`] for any command a test builds (`rdmakit().args(..).output_within()`).
pub trait OutputWithin {
    /// As [`Command::output`], but past the deadline the test panics naming the command.
    fn output_within(&mut self) -> std::io::Result<Output>;
}

impl OutputWithin for Command {
    fn output_within(&mut self) -> std::io::Result<Output> {
        Ok(output_within(self))
    }
}

/// Runs `cmd`, which must succeed; returns its output.
pub fn output_ok(cmd: &mut Command) -> Output {
    let o = output_within(cmd);
    assert!(o.status.success(), "{cmd:?} failed:\n{}", output_text(&o));
    o
}

/// The `--set` arguments that give the erdma-ray-rdt workflow the registry Secrets every [`Ns`] holds.
pub const ERDMA_SECRETS: &[&str] = &[
    "--set",
    "pull_secret_source=acr-pull",
    "--set",
    "push_secret_source=acr-push",
];

/// kubectl with the tier's kubeconfig; returns the whole output.
pub fn kubectl(args: &[&str]) -> Output {
    kubectl_in(args, None)
}

pub fn kubectl_in(args: &[&str], stdin: Option<&str>) -> Output {
    let mut c = Command::new(kubectl_path());
    c.args(args)
        .env("KUBECONFIG", kubeconfig())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = c.spawn().expect("kubectl runs");
    if let Some(s) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin piped")
            .write_all(s.as_bytes())
            .expect("kubectl stdin");
    }
    wait_within(child, &format!("kubectl {}", args.join(" ")))
}

/// kubectl that must succeed; returns stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    let o = kubectl(args);
    assert!(
        o.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn apply_yaml(yaml: &str) {
    let o = kubectl_in(&["apply", "-f", "-"], Some(yaml));
    assert!(
        o.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn get_json(args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl_ok(&a)).expect("kubectl -o json")
}

/// Fails unless `text` holds every needle, naming the first one missing.
pub fn assert_contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

/// Polls `f` until it returns Some or `limit` passes.
pub fn eventually<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The image [`erdma_pods`] run: in the emulated registry with NCCL 2.30.7, as if a build had pushed it.
pub const RDT_IMAGE: &str = "registry.example.com/rdt:latest";

/// Pods requesting one eRDMA device each, with CAP_IPC_LOCK, on the eRDMA nodes, Running.
pub fn erdma_pods(ns: &str, names: &[&str]) {
    push_image(RDT_IMAGE, Some("2.30.7"));
    erdma_pods_as(ns, names, RDT_IMAGE, true);
}

/// [`erdma_pods`] with another image and with or without `capabilities: {add: [IPC_LOCK]}`.
pub fn erdma_pods_as(ns: &str, names: &[&str], image: &str, ipc_lock: bool) {
    let caps = if ipc_lock {
        "    securityContext: {capabilities: {add: [IPC_LOCK]}}\n"
    } else {
        ""
    };
    for name in names {
        apply_yaml(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: rdma-worker}}\n\
             spec:\n  containers:\n  - name: sidecar\n    image: busybox\n\
             \x20 - name: worker\n    image: {image}\n{caps}    resources:\n\
             \x20     limits: {{nvidia.com/gpu: \"1\", aliyun/erdma: \"1\"}}\n"
        ));
    }
    eventually("the pods Running", Duration::from_secs(60), || {
        let out = kubectl_ok(&[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            "app=rdma-worker",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ]);
        (out.split_whitespace().filter(|p| *p == "Running").count() == names.len()).then_some(())
    });
}

/// The kind of RDMA node a test means its pods to land on. Documentation only: the emulator answers from
/// the node the scheduler chose (its fixture's `emulator.rdmakit.test/rdma-kind`), never from the test.
#[derive(Clone, Copy)]
pub enum Kind {
    Erdma,
    Mlx5,
    Efa,
}

/// Puts an image into the emulated registry, as a build that pushed it would: pods of `image` then carry
/// that NCCL (`None`: no NCCL wheel at all).
pub fn push_image(image: &str, nccl: Option<&str>) {
    push_record(
        image,
        serde_json::json!({"nccl": nccl, "rdmakit_rdt": false, "built_by": "the test harness"}),
    );
}

/// Writes the emulated registry's record of `image` (tests/cluster/emulator/emu/model.py: Pod::image).
fn push_record(image: &str, record: Value) {
    let key: String = image
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = emu_state().join("images");
    std::fs::create_dir_all(&dir).expect("registry dir");
    // Written aside and renamed: the emulator (and run.sh's other lanes) read records while a test writes one.
    let tmp = dir.join(format!(".{key}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, record.to_string()).expect("registry record");
    std::fs::rename(&tmp, dir.join(format!("{key}.json"))).expect("registry record");
}

/// The nccl-tests images the MPIJob profiles name, in the emulated registry as their builders made them: the
/// NCCL they carry, where all_reduce_perf is, their net plugins and their ENV. What a rank can do is decided
/// by its pod and node (tests/cluster/emulator/emu/mpi.py); these are only the images' contents.
pub fn push_nccl_tests_images() {
    static PUSHED: std::sync::Once = std::sync::Once::new();
    PUSHED.call_once(|| {
        push_record(
            "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/nccl-tests:12.2.2-cudnn8-devel-ubuntu22.04-nccl2.19.3-1-85f9143",
            serde_json::json!({"nccl": "2.19.3", "nccl_tests": "/opt/nccl_tests/build",
                "env": {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/usr/local/nvidia/lib64"},
                "built_by": "Alibaba Cloud PAI (name: nccl2.19.3)"}),
        );
        push_record(
            "public.ecr.aws/hpc-cloud/nccl-tests:latest",
            serde_json::json!({"nccl": "2.27.7", "nccl_tests": "/opt/nccl-tests/build",
                "net_plugins": [{"name": "aws-ofi-nccl", "version": "1.16.3"}],
                "env": {"LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/usr/local/cuda/lib64"},
                "built_by": "AWS (aws-ofi-nccl 1.16.3, NCCL 2.27.7)"}),
        );
        push_record(
            "ghcr.io/azure/aks-rdma-infiniband/nccl-tests",
            serde_json::json!({"nccl": "2.27.7", "nccl_tests": "/opt/nccl_tests/build",
                "env": {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"},
                "built_by": "Azure aks-rdma-infiniband (NCCL 2.27.7)"}),
        );
    });
}

/// An image without a shell (distroless) in the emulated registry: `sh -c` in its pods cannot start.
pub fn push_image_without_shell(image: &str) {
    push_record(
        image,
        serde_json::json!({"nccl": null, "shell": false, "built_by": "the test harness"}),
    );
}

/// The nodes of a fixture pool (label `rdmakit.test/pool`), sorted.
pub fn pool_nodes(pool: &str) -> Vec<String> {
    let mut v: Vec<String> = kubectl_ok(&[
        "get",
        "nodes",
        "-l",
        &format!("rdmakit.test/pool={pool}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])
    .split_whitespace()
    .map(str::to_owned)
    .collect();
    v.sort();
    v
}

/// A node fixture field the emulator reads (annotation `emulator.rdmakit.test/<knob>`, see
/// tests/cluster/emulator/emu/model.py), set on some nodes for one test; the old values come back on drop.
/// The knobs: `containerd-memlock` (bytes, or `infinity`), `port-state` (`PORT_DOWN`), `counters` (`frozen`),
/// `rdma-gid` (`none`: NCCL's IB plugin finds no usable device), `ib-gib-s`/`socket-gib-s` (transfer rates).
pub struct NodeKnob {
    restore: Vec<(String, String, Option<String>)>,
}

impl NodeKnob {
    pub fn set(nodes: &[String], knob: &str, value: &str) -> NodeKnob {
        let key = format!("emulator.rdmakit.test/{knob}");
        let mut restore = Vec::new();
        for node in nodes {
            let n = get_json(&["node", node]);
            let old = n["metadata"]["annotations"][&key]
                .as_str()
                .map(str::to_owned);
            kubectl_ok(&[
                "annotate",
                "--overwrite",
                "node",
                node,
                &format!("{key}={value}"),
            ]);
            restore.push((node.clone(), key.clone(), old));
        }
        // The emulator reads a node again after 2 s (emu/model.py's cache).
        std::thread::sleep(Duration::from_millis(2100));
        NodeKnob { restore }
    }

    /// One knob on every node of a fixture pool.
    pub fn on_pool(pool: &str, knob: &str, value: &str) -> NodeKnob {
        NodeKnob::set(&pool_nodes(pool), knob, value)
    }
}

impl Drop for NodeKnob {
    fn drop(&mut self) {
        for (node, key, old) in &self.restore {
            let arg = match old {
                Some(v) => format!("{key}={v}"),
                None => format!("{key}-"),
            };
            let _ = kubectl(&["annotate", "--overwrite", "node", node, &arg]);
        }
        std::thread::sleep(Duration::from_millis(2100));
    }
}

/// Creates namespace `name`, labelled as this process's (what the stale-namespace sweep goes by).
fn create_namespace(name: &str) {
    kubectl_ok(&["create", "namespace", name]);
    kubectl_ok(&[
        "label",
        "namespace",
        name,
        &format!("rdmakit.test/owner={}", std::process::id()),
    ]);
}

/// A namespace with none of [`Ns`]'s setup (no registry Secrets, no BuildKit volume, no launcher log): what a
/// user's own namespace is. Dropping it deletes it.
pub struct BareNs(pub String);

impl BareNs {
    pub fn new(prefix: &str) -> BareNs {
        SWEPT.call_once(sweep_stale_namespaces);
        let name = format!("{prefix}-{}", std::process::id() % 10000);
        create_namespace(&name);
        BareNs(name)
    }
}

impl Drop for BareNs {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// A test namespace: a PersistentVolume pre-bound to BuildKit's cache claim (no disk CSI driver runs here) and
/// docker-registry Secrets for the erdma workflow. Dropping it deletes all of that.
pub struct Ns {
    pub name: String,
    pub out: PathBuf,
}

static SEQ: AtomicUsize = AtomicUsize::new(0);
static SWEPT: std::sync::Once = std::sync::Once::new();

/// Whether `pid` is a live tier test process (this binary's name, `cluster-<hash>`): run.sh runs lanes of the
/// tier side by side, each its own process, and a lane must not sweep another's namespaces.
fn live_tier_process(pid: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    Path::new(&*String::from_utf8_lossy(argv0))
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("cluster-"))
}

/// Namespaces an earlier, killed test process left (its hostNetwork workers would hold the eRDMA nodes' ports):
/// deleted, and waited for, before this process makes its first one. A live tier process's namespaces (another
/// lane of run.sh) are not stale.
fn sweep_stale_namespaces() {
    let me = std::process::id().to_string();
    let list = kubectl_ok(&[
        "get",
        "namespaces",
        "-l",
        "rdmakit.test/owner",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.rdmakit\\.test/owner}{\"\\n\"}{end}",
    ]);
    let stale: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, owner)| *owner != me && !live_tier_process(owner))
        .map(|(name, _)| name)
        .collect();
    if !stale.is_empty() {
        let mut args = vec!["delete", "namespace", "--wait=true", "--timeout=120s"];
        args.extend(stale);
        let _ = kubectl(&args);
    }
}

impl Ns {
    pub fn new(prefix: &str, _kind: Kind) -> Ns {
        SWEPT.call_once(sweep_stale_namespaces);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id() % 10000,
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        create_namespace(&name);
        push_nccl_tests_images();
        for (secret, server, user) in [
            ("acr-pull", "registry.cn-beijing.aliyuncs.com", "puller"),
            ("acr-push", "registry.example.com", "pusher"),
        ] {
            kubectl_ok(&[
                "-n",
                &name,
                "create",
                "secret",
                "docker-registry",
                secret,
                &format!("--docker-server={server}"),
                &format!("--docker-username={user}"),
                "--docker-password=not-a-real-password",
            ]);
        }
        let out = repo().join("target/cluster/runs").join(&name);
        let _ = std::fs::remove_dir_all(&out);
        let ns = Ns { name, out };
        ns.provision_disk();
        ns
    }

    /// What ACK's disk plugin does for BuildKit's cache claim: a fresh PersistentVolume pre-bound to it. A
    /// volume released by an earlier run's deleted claim is replaced (Retain keeps it Released for good).
    pub fn provision_disk(&self) {
        let pv = format!("{}-buildkit-cache", self.name);
        let phase = kubectl(&["get", "pv", &pv, "-o", "jsonpath={.status.phase}"]);
        let phase = String::from_utf8_lossy(&phase.stdout).into_owned();
        if phase == "Bound" || phase == "Available" {
            return;
        }
        let _ = kubectl(&["delete", "pv", &pv, "--ignore-not-found", "--wait=true"]);
        apply_yaml(&format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity: {{storage: 200Gi}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: alicloud-disk-essd\n  persistentVolumeReclaimPolicy: Retain\n  claimRef: {{namespace: {ns}, name: buildkit-cache}}\n  hostPath: {{path: /var/lib/rdmakit-test/{ns}}}\n",
            ns = self.name
        ));
    }

    /// `kubectl -n NS apply --server-side -f FILE`.
    pub fn apply_file(&self, file: &Path) {
        kubectl_ok(&[
            "-n",
            &self.name,
            "apply",
            "--server-side",
            "-f",
            file.to_str().unwrap(),
        ]);
    }

    /// `kubectl -n NS delete -f FILE FLAG`.
    pub fn delete_file(&self, file: &Path, flag: &str) {
        kubectl_ok(&[
            "-n",
            &self.name,
            "delete",
            "-f",
            file.to_str().unwrap(),
            flag,
        ]);
    }

    /// The report.md of the last run into this namespace's out dir.
    pub fn report_md(&self) -> String {
        std::fs::read_to_string(self.out.join("report.md")).expect("report.md")
    }

    /// `rdmakit run WORKFLOW -n NS --out OUT ARGS...` (live, not dry-run).
    pub fn run(&self, workflow: &str, args: &[&str]) -> Run {
        self.run_in(workflow, &self.out, args)
    }

    pub fn run_in(&self, workflow: &str, out: &Path, args: &[&str]) -> Run {
        self.run_as(workflow, out, &kubeconfig(), args)
    }

    /// A run with other credentials (a kubeconfig file of the test's own).
    pub fn run_as(&self, workflow: &str, out: &Path, config: &Path, args: &[&str]) -> Run {
        self.provision_disk();
        let o = rdmakit()
            .args(["run", workflow, "-n", &self.name, "--out"])
            .arg(out)
            .args(args)
            .env("KUBECONFIG", config)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rdmakit runs");
        let o = wait_within(o, &format!("rdmakit run {workflow} -n {}", self.name));
        let report = std::fs::read_to_string(out.join("report.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null);
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            report,
        }
    }

    /// Everything of the run's own left in the namespace (the harness's Secrets and the default
    /// ServiceAccount/ConfigMap are not the run's), plus the cluster-scoped objects rdmakit labels as its own.
    pub fn leftovers(&self) -> Vec<String> {
        let kinds = "pods,deployments,statefulsets,services,persistentvolumeclaims,secrets,configmaps,jobs,rayclusters.ray.io,mpijobs.kubeflow.org,resourceclaims.resource.k8s.io,resourceclaimtemplates.resource.k8s.io";
        // What a deleted owner leaves to the garbage collector (KubeRay's pods and head Service) goes within
        // seconds: poll for up to 90 s (a loaded 2-core machine has taken over 30 s); what is still there then was left behind.
        let t0 = Instant::now();
        loop {
            let left: Vec<String> = kubectl_ok(&["-n", &self.name, "get", kinds, "-o", "name"])
                .lines()
                .filter(|l| {
                    !matches!(
                        *l,
                        "secret/acr-pull" | "secret/acr-push" | "configmap/kube-root-ca.crt"
                    )
                })
                .map(str::to_owned)
                .collect();
            if left.is_empty() || t0.elapsed() > Duration::from_secs(90) {
                return left;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
        let _ = kubectl(&["delete", "pv", &format!("{}-buildkit-cache", self.name)]);
    }
}

/// One `rdmakit run`: exit code, output and the report it wrote.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub report: Value,
}

impl Run {
    pub fn verdict(&self) -> &str {
        self.report["verdict"].as_str().unwrap_or("<no report>")
    }

    /// Names and details of the checks with `status`.
    pub fn checks(&self, status: &str) -> Vec<String> {
        self.report["checks"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter(|c| c["status"] == status)
                    .map(|c| {
                        format!(
                            "{}: {}",
                            c["name"].as_str().unwrap_or(""),
                            c["detail"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn text(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}\nfailed checks: {:#?}",
            self.code,
            self.stdout,
            self.stderr,
            self.checks("fail")
        )
    }

    /// Asserts a PASS with exit 0.
    pub fn assert_pass(&self) {
        assert!(
            self.code == 0 && self.verdict() == "pass",
            "expected PASS:\n{}",
            self.text()
        );
    }

    /// Asserts a FAIL (exit 1) whose failed checks mention every needle.
    pub fn assert_fail_naming(&self, needles: &[&str]) {
        assert!(
            self.code == 1 && self.verdict() == "fail",
            "expected FAIL (exit 1):\n{}",
            self.text()
        );
        let failed = self.checks("fail").join("\n");
        for n in needles {
            assert!(
                failed.contains(n),
                "no failed check names {n:?}:\n{}",
                self.text()
            );
        }
    }
}

/// Patches a node's capacity and allocatable for one test; puts the old values back on drop.
pub struct NodePatch {
    node: String,
    restore: String,
}

impl NodePatch {
    pub fn remove_resource(node: &str, resource: &str) -> NodePatch {
        let esc = resource.replace('/', "~1");
        let n = get_json(&["node", node]);
        let cap = n["status"]["capacity"][resource]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(!cap.is_empty(), "{node} has no {resource} to remove");
        let patch = format!(
            r#"[{{"op":"remove","path":"/status/capacity/{esc}"}},{{"op":"remove","path":"/status/allocatable/{esc}"}}]"#
        );
        kubectl_ok(&[
            "patch",
            "node",
            node,
            "--subresource=status",
            "--type=json",
            "-p",
            &patch,
        ]);
        NodePatch {
            node: node.into(),
            restore: format!(
                r#"[{{"op":"add","path":"/status/capacity/{esc}","value":"{cap}"}},{{"op":"add","path":"/status/allocatable/{esc}","value":"{cap}"}}]"#
            ),
        }
    }
}

impl Drop for NodePatch {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "patch",
            "node",
            &self.node,
            "--subresource=status",
            "--type=json",
            "-p",
            &self.restore,
        ]);
    }
}

/// Applies fault-slice-without-erdma.yaml (one node's ResourceSlice without `alibaba.dra.net/erdma`) and puts
/// DRANET's healthy ResourceSlices back on drop.
pub struct SliceFault;

impl SliceFault {
    pub fn without_erdma_attribute() -> SliceFault {
        let f = repo().join("tests/cluster/fixtures/fault-slice-without-erdma.yaml");
        kubectl_ok(&["apply", "-f", f.to_str().unwrap()]);
        SliceFault
    }
}

impl Drop for SliceFault {
    fn drop(&mut self) {
        let f = repo().join("tests/cluster/fixtures/dranet.yaml");
        let _ = kubectl(&["apply", "-f", f.to_str().unwrap()]);
    }
}

/// Seed 002's DeviceClass (crates/probe/tests/fixtures/deviceclass-erdma.json) in the cluster for one test.
pub struct SeedDeviceClass;

impl SeedDeviceClass {
    pub fn apply() -> SeedDeviceClass {
        apply_yaml(concat!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: erdma.alibaba.dra.net\n",
            "spec:\n  selectors:\n",
            "  - cel:\n      expression: device.driver == \"dra.net\" && device.attributes[\"dra.net\"].rdma == true\n",
            "  - cel:\n      expression: '\"alibaba.dra.net\" in device.attributes && ",
            "device.attributes[\"alibaba.dra.net\"][\"erdma\"] == true'\n",
        ));
        SeedDeviceClass
    }
}

impl Drop for SeedDeviceClass {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "deviceclass",
            "erdma.alibaba.dra.net",
            "--ignore-not-found",
        ]);
    }
}

/// Fails when the namespace still holds objects of a run's own.
pub fn assert_clean(ns: &Ns) {
    let left = ns.leftovers();
    assert!(
        left.is_empty(),
        "the run left objects behind in {}: {left:?}",
        ns.name
    );
}

/// Starts a watch on `kubectl get GET...` in `ns`, then the run (`spawn`), and sends the run SIGINT (Ctrl-C)
/// as soon as the watch sees the first object, at most 180 s later; returns its exit status and stderr.
/// A watch, not a poll: with the node emulator's fast execs a run can create, use and delete a pod between
/// two `kubectl get`s. `what` names the run.
pub fn sigint_once_present(
    spawn: impl FnOnce() -> Child,
    ns: &str,
    get: &[&str],
    what: &str,
) -> (Option<i32>, String) {
    use std::io::BufRead;
    let mut watch = Command::new(kubectl_path())
        .args(["-n", ns, "get"])
        .args(get)
        .args(["--watch", "-o", "name"])
        .env("KUBECONFIG", kubeconfig())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = std::io::BufReader::new(watch.stdout.take().unwrap());
    std::thread::spawn(move || {
        for l in lines.lines().map_while(Result::ok) {
            if !l.trim().is_empty() && tx.send(l).is_err() {
                break;
            }
        }
    });
    // kubectl lists (nothing yet) and then watches: give it time to get there before the run starts.
    std::thread::sleep(Duration::from_millis(1500));
    let mut child = spawn();
    let seen = rx.recv_timeout(Duration::from_secs(180));
    let _ = watch.kill();
    let _ = watch.wait();
    if seen.is_err() {
        let ended = child.try_wait().unwrap().is_some();
        if !ended {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        panic!(
            "{what}: the watch saw no {get:?} in 180 s ({}):\n{}",
            if ended {
                "the run ended"
            } else {
                "the run was killed"
            },
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts `workflow` in `ns`, sends SIGINT once `resource` (what the run applies) exists in the namespace,
/// and checks the run's answer: exit 130, the report says interrupted and lists its cleanup, and the
/// namespace holds nothing of the run's own. Returns report.json for further checks.
pub fn interrupt_once_applied(ns: &Ns, workflow: &str, args: &[&str], resource: &str) -> String {
    let spawn = || {
        rdmakit()
            .args(["run", workflow, "-n", &ns.name, "--out"])
            .arg(&ns.out)
            .args(args)
            .env("KUBECONFIG", kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (code, stderr) = sigint_once_present(spawn, &ns.name, &[resource], workflow);
    assert_eq!(code, Some(130), "{workflow}: {stderr}");
    let report = std::fs::read_to_string(ns.out.join("report.json")).unwrap();
    assert!(report.contains("\"interrupted\""), "{workflow}: {report}");
    assert!(
        report.contains("cleanup: "),
        "{workflow}: the report lists the cleanup: {report}"
    );
    assert_clean(ns);
    report
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    fn spawn(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh runs")
    }

    /// A command that ends in time gives back its status and both streams whole.
    #[test]
    fn a_command_within_the_deadline_gives_its_status_and_output() {
        let o = wait_for(
            spawn("echo out; echo err >&2; exit 3"),
            "sh",
            Duration::from_secs(30),
        );
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
        assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
    }

    /// A command that hangs is interrupted, and the test fails naming it and what it printed, in about the
    /// deadline rather than never.
    #[test]
    fn a_hanging_command_fails_the_test_naming_it() {
        let t0 = Instant::now();
        let r = std::panic::catch_unwind(|| {
            wait_for(
                spawn("echo waiting for the RayCluster >&2; exec sleep 300"),
                "rdmakit run hang-test",
                Duration::from_secs(1),
            )
        });
        let msg = *r
            .expect_err("a hang panics")
            .downcast::<String>()
            .expect("a message");
        assert!(
            msg.contains("rdmakit run hang-test: still running after 1s"),
            "{msg}"
        );
        assert!(msg.contains("RDMAKIT_TIER_DEADLINE_S"), "{msg}");
        assert!(msg.contains("waiting for the RayCluster"), "{msg}");
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    }

    /// Every test tests/cluster/lanes names (run.sh runs the lanes side by side) is a live tier test, named once:
    /// a renamed test would otherwise leave its lane and run alone, and a name in two lanes would run twice,
    /// beside tests of another lane's pools.
    #[test]
    fn every_test_the_lanes_name_is_a_tier_test_named_once() {
        let lanes = std::fs::read_to_string(repo().join("tests/cluster/lanes")).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        let mut wrong = Vec::new();
        for name in lanes
            .lines()
            .map(|l| l.split('#').next().unwrap_or_default().trim())
            .filter(|l| !l.is_empty() && !l.starts_with('['))
        {
            if !seen.insert(name) {
                wrong.push(format!("{name}: named twice"));
            }
            let Some((module, func)) = name.split_once("::") else {
                wrong.push(format!("{name}: not module::test"));
                continue;
            };
            let file = repo().join(format!("tests/tests/cluster/{module}.rs"));
            let src = std::fs::read_to_string(&file).unwrap_or_default();
            let live =
                format!("#[ignore = \"control-plane tier: make cluster-test\"]\nfn {func}()");
            if !src.contains(&live) {
                wrong.push(format!(
                    "{name}: no live tier test {func} in {}",
                    file.display()
                ));
            }
        }
        assert!(seen.len() >= 40, "{} names", seen.len());
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
