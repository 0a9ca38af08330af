//! A folder to run a generated script in where every command it may start is a logging stub: PATH holds
//! only the stubs, a command not among them is caught by bash's `command_not_found_handle` (through
//! `BASH_ENV`), and a canary file (any name with `PWNED` in it) that appears while the script ran is
//! found. `set -e` and `set -u` are turned off (the `set` builtin is wrapped), so a failed stub does not
//! stop the script early: every line of it runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Commands that only log (the cluster, waits, and anything that would change this machine).
const LOGGING: &[&str] = &["kubectl", "sleep", "rm", "mpirun", "kill"];
/// Commands that log, then run the real program (text tools a script pipes output through).
const PASS_THROUGH: &[&str] = &[
    "dirname", "grep", "awk", "sed", "head", "tail", "tr", "wc", "sort", "cat", "base64", "cut",
    "jq", "uniq", "seq", "mktemp", "mkdir", "date", "tee", "env",
];

/// One started command: its name and arguments.
pub type Started = Vec<String>;

/// What a run of a script did.
pub struct Ran {
    /// Every stub started, in order.
    pub started: Vec<Started>,
    /// Every command that was not a stub (bash looked it up and found nothing): each is a canary.
    pub not_found: Vec<Started>,
    /// Files with `PWNED` in their name that appeared under the sandbox while the script ran.
    pub canaries: Vec<PathBuf>,
    /// Exit status (None: killed after the time limit).
    pub code: Option<i32>,
    /// What it printed on stderr.
    pub stderr: String,
}

impl Ran {
    /// A description of every canary, empty when there is none.
    pub fn canary_report(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .not_found
            .iter()
            .map(|c| format!("a command outside the plan started: {c:?}"))
            .collect();
        out.extend(
            self.canaries
                .iter()
                .map(|f| format!("canary file created: {}", f.display())),
        );
        out
    }
}

/// The sandbox: `root` holds `bin/` (the stubs), the logs, and whatever folder a script runs in.
pub struct Sandbox {
    pub root: tempfile::TempDir,
    bin: PathBuf,
    bash_env: PathBuf,
}

impl Sandbox {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = "{ printf '%s\\0' \"${0##*/}\" \"$@\"; printf '\\036\\0'; } >\"$RDMAKIT_FUZZ_LOG/${EPOCHREALTIME}.$$\"";
        for name in LOGGING {
            write_exec(&bin.join(name), &format!("#!/bin/bash\n{log}\nexit 0\n"));
        }
        for name in PASS_THROUGH {
            let body = match real(name) {
                Some(path) => format!("#!/bin/bash\n{log}\nexec {} \"$@\"\n", path.display()),
                None => format!("#!/bin/bash\n{log}\nexit 0\n"),
            };
            write_exec(&bin.join(name), &body);
        }
        let bash_env = root.path().join("bash_env");
        std::fs::write(
            &bash_env,
            "command_not_found_handle() {\n  { printf '%s\\0' \"$@\"; printf '\\036\\0'; } >>\"$RDMAKIT_FUZZ_CNF\"\n  return 127\n}\n\
             set() {\n  local a=() x\n  for x in \"$@\"; do\n    case $x in\n      -e | -u | -eu | -ue) continue ;;\n      -euo | -ueo | -eo | -uo) x=-o ;;\n    esac\n    a+=(\"$x\")\n  done\n  builtin set \"${a[@]}\"\n}\n",
        )
        .unwrap();
        Self {
            root,
            bin,
            bash_env,
        }
    }

    /// Runs `bash script` in `cwd` with only the stubs on PATH, for at most `limit`.
    pub fn run(&self, script: &Path, cwd: &Path, limit: Duration) -> Ran {
        let log = self.root.path().join("started.log");
        let cnf = self.root.path().join("not_found.log");
        // One file per started stub (ranks run side by side: one shared file would interleave).
        let _ = std::fs::remove_dir_all(&log);
        std::fs::create_dir_all(&log).unwrap();
        let _ = std::fs::remove_file(&cnf);
        let before = pwned_files(self.root.path());
        let mut child = Command::new("/bin/bash")
            .arg(script)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", &self.bin)
            .env("BASH_ENV", &self.bash_env)
            .env("HOME", self.root.path())
            .env("TMPDIR", self.root.path())
            .env("RDMAKIT_FUZZ_LOG", &log)
            .env("RDMAKIT_FUZZ_CNF", &cnf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let code = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code();
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        let after = pwned_files(self.root.path());
        Ran {
            started: started(&log),
            not_found: records(&cnf),
            canaries: after.difference(&before).cloned().collect(),
            code,
            stderr,
        }
    }
}

fn write_exec(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The real program `name` in the system folders.
fn real(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Every stub's record in `dir`, in the order they started (file names are start times).
fn started(dir: &Path) -> Vec<Started> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().flat_map(|f| records(f)).collect()
}

/// The records of a stub log: NUL-separated fields, each record ended by a lone `\x1e` field.
fn records(path: &Path) -> Vec<Started> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for field in bytes.split(|b| *b == 0) {
        if field == b"\x1e" {
            out.push(std::mem::take(&mut cur));
        } else if !field.is_empty() || !cur.is_empty() {
            cur.push(String::from_utf8_lossy(field).into_owned());
        }
    }
    out
}

/// Every path under `dir` whose name holds `PWNED`.
fn pwned_files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().contains("PWNED") {
                out.insert(p.clone());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    out
}

/// `bash -n` and `shellcheck -S warning` on `scripts`: the problems found, empty when both are clean.
/// `shellcheck` false: bash only.
pub fn lint_scripts(scripts: &[&Path], shellcheck: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for s in scripts {
        let out = Command::new("bash").arg("-n").arg(s).output().unwrap();
        if !out.status.success() {
            problems.push(format!(
                "bash -n {}: {}",
                s.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    if shellcheck {
        let out = Command::new("shellcheck")
            .args(["-s", "bash", "-S", "warning", "-f", "gcc"])
            .args(scripts)
            .output()
            .expect("shellcheck runs (make test-deps installs it)");
        if !out.status.success() {
            problems.push(format!(
                "shellcheck: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    problems
}
