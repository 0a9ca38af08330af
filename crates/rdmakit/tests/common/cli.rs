//! The binary as a user runs it: one command builder with an environment of its own (no kubeconfig,
//! context or profiles of whoever runs the tests), a workflow written into a fresh folder and run from
//! there, and plan.sh run by bash against a fake `kubectl`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;

/// `rdmakit` run from the workspace root, without `$KUBECONFIG`, `$RDMAKIT_CONTEXT`,
/// `$XDG_CONFIG_HOME` or a home folder: what a test needs it passes. The std form, for a process the
/// test spawns and signals.
pub fn rdmakit_process() -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("rdmakit"));
    c.current_dir(super::workspace())
        .env_remove("KUBECONFIG")
        .env_remove("RDMAKIT_CONTEXT")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", "/nonexistent");
    c
}

/// [`rdmakit_process`] as an assert_cmd command, killed after two minutes (a hung binary fails its test
/// instead of stalling the suite).
pub fn rdmakit() -> Command {
    let mut c = Command::from_std(rdmakit_process());
    c.timeout(Duration::from_secs(120));
    c
}

/// `rdmakit run WORKFLOW --dry-run --out OUT`: a built-in's name or a script's path; more arguments
/// may follow.
pub fn dry_run(workflow: impl AsRef<OsStr>, out: &Path) -> Command {
    let mut c = rdmakit();
    c.arg("run")
        .arg(workflow)
        .args(["--dry-run", "--out"])
        .arg(out);
    c
}

/// A workflow script in a fresh temporary folder; its runs write into `out()` in that folder.
pub struct Workflow {
    pub dir: tempfile::TempDir,
    /// The script: `name` under `dir` (a name with a folder in it makes that folder).
    pub path: PathBuf,
}

impl Workflow {
    /// Writes `text` as `name` into a fresh folder.
    pub fn new(name: &str, text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        Self { dir, path }
    }

    /// The out dir of its runs: `out` beside the script's folder.
    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Replaces the script's text.
    pub fn rewrite(&self, text: &str) {
        std::fs::write(&self.path, text).unwrap();
    }

    /// `rdmakit run SCRIPT --dry-run --out OUT`.
    pub fn dry_run(&self) -> Command {
        dry_run(&self.path, &self.out())
    }

    /// `rdmakit run SCRIPT --out OUT`: live, against the cluster the test names.
    pub fn live(&self) -> Command {
        let mut c = rdmakit();
        c.arg("run").arg(&self.path).arg("--out").arg(self.out());
        c
    }
}

/// Writes the shell `script` (with its `#!` line) as an executable `kubectl` into `dir/bin`; returns that
/// folder, for [`run_plan`].
pub fn fake_kubectl(dir: &Path, script: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let kubectl = bin.join("kubectl");
    std::fs::write(&kubectl, script).unwrap();
    std::fs::set_permissions(
        &kubectl,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    bin
}

/// Runs `plan` with bash, `bin` (from [`fake_kubectl`]) first on PATH.
pub fn run_plan(plan: &Path, bin: &Path) -> std::process::Output {
    std::process::Command::new("bash")
        .arg(plan)
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .output()
        .unwrap()
}
