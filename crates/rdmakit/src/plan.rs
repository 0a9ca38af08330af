//! The plan a dry-run records: numbered actions grouped by workflow step, printable for a human and
//! convertible into `plan.sh`, an equivalent kubectl script for a user without rdmakit.
//!
//! Output is byte-stable (no timestamps, no absolute paths) so plans can be snapshot-tested.

use k8s_render::quote::shell::{comment, escape_text, word};
use serde::Serialize;

use crate::report::{RunReport, Status};

/// One recorded action.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PlanEntry {
    /// 1-based action number.
    pub index: usize,
    /// One line: what rdmakit would do.
    pub summary: String,
    /// Extra lines (the objects in a manifest, the command run).
    pub detail: Vec<String>,
    /// Equivalent shell lines for plan.sh (may be empty for pure bookkeeping).
    pub shell: Vec<String>,
    /// What plan.sh's failure trap runs to undo this action, when it is not a plain `kubectl apply -f`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undo: Vec<String>,
}

/// A plan item: a step header, a note or an action.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PlanItem {
    /// A workflow step begins.
    Step {
        /// 1-based step number.
        number: usize,
        /// Step title.
        title: String,
    },
    /// A note for the reader.
    Note {
        /// Text.
        text: String,
    },
    /// An action.
    Action(PlanEntry),
}

/// A recorded plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Workflow file name, as shown in headers.
    pub workflow: String,
    /// Items in order.
    pub items: Vec<PlanItem>,
    /// `kubectl` plus the global flags (`--context`, `-n`) every command carries.
    pub kubectl: String,
    /// False when the dry-run stopped before the workflow's end (a script error, Ctrl-C): the plan holds
    /// only what came before, and plan.sh refuses to run.
    pub complete: bool,
    /// Why the plan is incomplete (file:line:col, message, step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The checks the dry-run itself failed (a lint error in the bundle): plan.sh names them and stops
    /// before it applies anything.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    #[serde(skip)]
    context: Option<String>,
    steps: usize,
    actions: usize,
}

impl Default for Plan {
    fn default() -> Self {
        Self::new("", None, None)
    }
}

impl Plan {
    /// An empty plan. `context` and `namespace` become flags on every kubectl line.
    pub fn new(workflow: &str, context: Option<&str>, namespace: Option<&str>) -> Self {
        let mut plan = Self {
            workflow: workflow.to_owned(),
            items: Vec::new(),
            kubectl: String::new(),
            complete: true,
            error: None,
            failed: Vec::new(),
            context: context.map(str::to_owned),
            steps: 0,
            actions: 0,
        };
        plan.kubectl = plan.kubectl_in(namespace);
        plan
    }

    /// `kubectl` with the run's `--context` and the namespace `namespace` (none: cluster-scoped, or the
    /// kubeconfig's). Every value is quoted for bash, so a namespace such as `ns $(id)` stays one word.
    pub fn kubectl_in(&self, namespace: Option<&str>) -> String {
        let mut kubectl = String::from("kubectl");
        if let Some(c) = &self.context {
            kubectl.push_str(" --context ");
            kubectl.push_str(&shell_quote(c));
        }
        if let Some(n) = namespace {
            kubectl.push_str(" -n ");
            kubectl.push_str(&shell_quote(n));
        }
        kubectl
    }

    /// Starts a new step.
    pub fn begin_step(&mut self, title: &str) {
        self.steps += 1;
        self.items.push(PlanItem::Step {
            number: self.steps,
            title: title.to_owned(),
        });
    }

    /// Adds a note.
    pub fn note(&mut self, text: &str) {
        self.items.push(PlanItem::Note {
            text: text.to_owned(),
        });
    }

    /// Records an action; returns its number.
    pub fn action(&mut self, summary: String, detail: Vec<String>, shell: Vec<String>) -> usize {
        self.action_with_undo(summary, detail, shell, Vec::new())
    }

    /// Records an action with the lines that undo it in plan.sh's failure trap.
    pub fn action_with_undo(
        &mut self,
        summary: String,
        detail: Vec<String>,
        shell: Vec<String>,
        undo: Vec<String>,
    ) -> usize {
        self.actions += 1;
        self.items.push(PlanItem::Action(PlanEntry {
            index: self.actions,
            summary,
            detail,
            shell,
            undo,
        }));
        self.actions
    }

    /// Marks the plan incomplete: the dry-run stopped at `error` and recorded nothing after it.
    pub fn stop(&mut self, error: &str) {
        self.complete = false;
        self.error = Some(error.to_owned());
    }

    /// The plan, refusing to run when `report` has a failed check: what the dry-run already knows is
    /// wrong (a lint error in the bundle) must not be applied by plan.sh.
    pub fn refusing_failed(mut self, report: &RunReport) -> Self {
        self.failed = report
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| format!("[{}] {}: {}", c.step, c.name, c.detail))
            .collect();
        self
    }

    /// Number of recorded actions.
    pub fn action_count(&self) -> usize {
        self.actions
    }

    /// The human-readable plan.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "Plan for {} (dry-run: nothing was sent to a cluster; {} actions{})\n",
            self.workflow,
            self.actions,
            if self.complete {
                ""
            } else {
                "; INCOMPLETE: stopped at an error"
            }
        );
        if !self.failed.is_empty() {
            out.push_str(&format!(
                "\n== FAILED: {} check(s) failed in the dry-run; plan.sh names them and stops before any kubectl apply\n",
                self.failed.len()
            ));
            for f in &self.failed {
                out.push_str(&format!("   FAIL {}\n", escape_text(f)));
            }
        }
        for item in &self.items {
            match item {
                PlanItem::Step { number, title } => {
                    out.push_str(&format!("\n== Step {number}: {}\n", escape_text(title)));
                }
                PlanItem::Note { text } => {
                    for line in text.lines() {
                        out.push_str(&format!("   note: {}\n", escape_text(line)));
                    }
                }
                PlanItem::Action(e) => {
                    out.push_str(&format!("  [{}] {}\n", e.index, escape_text(&e.summary)));
                    for d in &e.detail {
                        // A detail may span lines (a command's script): each is shown, escaped.
                        let shown: Vec<String> = d.split('\n').map(escape_text).collect();
                        out.push_str(&format!("        {}\n", shown.join("\n")));
                    }
                    for s in &e.shell {
                        for line in s.lines() {
                            out.push_str(&format!("      $ {line}\n"));
                        }
                    }
                }
            }
        }
        if let Some(e) = &self.error {
            out.push_str(
                "\n== INCOMPLETE: the dry-run stopped here; nothing after this point was planned\n",
            );
            for line in e.lines() {
                out.push_str(&format!("   error: {line}\n"));
            }
        }
        out
    }

    /// The equivalent bash script. Paths are relative to the out dir, which the script `cd`s into.
    ///
    /// Text (titles, notes, summaries) goes into comments through [`comment`], which escapes a newline, so
    /// it can never become a command; every value in a command is a [`shell_quote`]d word.
    pub fn to_shell(&self) -> String {
        let mut out = String::new();
        out.push_str("#!/usr/bin/env bash\n");
        if !self.complete {
            // A file-wide directive must come before the first command. The steps that would read a
            // variable an earlier step set may be the missing ones; the script exits before either runs.
            out.push_str(
                "# Incomplete: a variable only the missing steps read would look unused.\n",
            );
            out.push_str("# shellcheck disable=SC2034\n");
        }
        out.push_str(&comment(&format!(
            "Equivalent kubectl commands for {}, generated by `rdmakit run --dry-run`.",
            self.workflow
        )));
        out.push('\n');
        out.push_str("# Run from anywhere: file paths are relative to this script's directory (the out dir).\n");
        out.push_str(
            "# Checks that rdmakit evaluates (verdicts, counter deltas) appear as comments.\n",
        );
        if self.needs_wait_n() {
            out.push_str(BASH_FOR_WAIT_N);
        }
        out.push_str("set -euo pipefail\n");
        if !self.complete {
            out.push_str(&self.refusal());
        }
        if !self.failed.is_empty() {
            out.push_str(&self.failed_refusal());
        }
        out.push_str("cd \"$(dirname \"$0\")\"\n");
        out.push_str(&self.cleanup_trap());
        for item in &self.items {
            match item {
                PlanItem::Step { number, title } => {
                    out.push('\n');
                    out.push_str(&comment(&format!("--- Step {number}: {title}")));
                    out.push('\n');
                    out.push_str(&format!(
                        "echo {}\n",
                        shell_quote(&format!("== Step {number}: {title}"))
                    ));
                }
                PlanItem::Note { text } => {
                    for line in text.lines() {
                        out.push_str(&comment(line));
                        out.push('\n');
                    }
                }
                PlanItem::Action(e) => {
                    if e.shell.is_empty() {
                        out.push_str(&comment(&format!(
                            "[{}] {} (no kubectl equivalent)",
                            e.index, e.summary
                        )));
                        out.push('\n');
                    }
                    for s in &e.shell {
                        out.push_str(s);
                        out.push('\n');
                    }
                }
            }
        }
        out
    }
}

/// The top of a plan.sh that waits for side-by-side ranks with `wait -n` (bash 4.3+): an older bash (macOS
/// ships 3.2) or another shell stops before anything runs, naming what it needs, instead of failing at the
/// first `wait -n` with the ranks already started.
pub const BASH_FOR_WAIT_N: &str = "# The ranks this plan runs side by side are awaited with `wait -n`: bash 4.3 or later.\n\
case \"${BASH_VERSION:-}\" in\n  \"\" | [0-3].* | 4.[0-2].*)\n    \
echo \"plan.sh needs bash 4.3 or later (wait -n); this is ${BASH_VERSION:-not bash}: run it as 'bash plan.sh' with a newer bash (macOS: brew install bash)\" >&2\n    \
exit 2 ;;\nesac\n";

impl Plan {
    /// True when an action's shell waits with `wait -n` (exec_many's ranks).
    fn needs_wait_n(&self) -> bool {
        self.items.iter().any(
            |i| matches!(i, PlanItem::Action(e) if e.shell.iter().any(|s| s.contains("wait -n"))),
        )
    }

    /// The top of an incomplete plan.sh: say why and exit before anything runs. What follows is the part
    /// of the plan recorded before the error, kept for reading.
    fn refusal(&self) -> String {
        let mut out = String::from(
            "# INCOMPLETE PLAN: `rdmakit run --dry-run` stopped at an error, so the steps after it (the\n\
             # cleanup among them) are missing. This script refuses to run; fix the workflow and run the\n\
             # dry-run again. The part recorded before the error follows, for reading only.\n",
        );
        out.push_str(
            "echo 'plan.sh is incomplete: the dry-run that wrote it stopped at an error:' >&2\n",
        );
        for line in self.error.as_deref().unwrap_or("unknown error").lines() {
            out.push_str(&format!("echo {} >&2\n", shell_quote(&format!("  {line}"))));
        }
        out.push_str("echo 'fix the workflow, run rdmakit run --dry-run again, then run the new plan.sh' >&2\n");
        out.push_str("exit 2\n");
        out
    }

    /// The top of a plan.sh whose dry-run failed a check: name each and exit 1 before anything is applied.
    fn failed_refusal(&self) -> String {
        let mut out = format!(
            "# FAILED CHECKS: the dry-run failed {} check(s), so this script stops before it applies anything.\n",
            self.failed.len()
        );
        out.push_str(&format!(
            "echo {} >&2\n",
            shell_quote(&format!(
                "plan.sh refuses to run: the dry-run failed {} check(s):",
                self.failed.len()
            ))
        ));
        for f in &self.failed {
            for line in f.lines() {
                out.push_str(&format!(
                    "echo {} >&2\n",
                    shell_quote(&format!("  FAIL {line}"))
                ));
            }
        }
        out.push_str("echo 'fix them (rdmakit lint shows each), run rdmakit run --dry-run again, then run the new plan.sh' >&2\n");
        out.push_str("exit 1\n");
        out
    }

    /// A `trap` that deletes, when the script fails, what it applied (newest first) and the objects the run
    /// makes for itself (the merged registry Secret), as rdmakit's live run does; empty when nothing is applied.
    fn cleanup_trap(&self) -> String {
        let apply = format!(" {} -f ", crate::exec::KUBECTL_APPLY);
        let mut deletes: Vec<String> = Vec::new();
        for item in &self.items {
            let PlanItem::Action(e) = item else { continue };
            if !e.undo.is_empty() {
                deletes.extend(e.undo.iter().cloned());
                continue;
            }
            for line in e.shell.iter().flat_map(|s| s.lines()) {
                if let Some((k, file)) = line.split_once(apply.as_str()) {
                    // `-f -` applies what a pipeline made (the merged Secret): deleted by name below.
                    if file.trim() != "-" {
                        deletes.push(format!("{k} delete --ignore-not-found -f {file}"));
                    }
                } else if line.contains(" delete --ignore-not-found ") && !line.contains(" -f ") {
                    deletes.push(line.to_owned());
                }
            }
        }
        if deletes.is_empty() {
            return String::new();
        }
        deletes.reverse();
        deletes.dedup();
        let mut out = String::from(
            "# On a failure, delete what this script applied (newest first), as rdmakit's live run does.\nrdmakit_cleanup() {\n",
        );
        for d in deletes {
            out.push_str(&format!("  {d} || true\n"));
        }
        out.push_str("}\n");
        out.push_str("rdmakit_on_exit() {\n  local rc=$?\n  if [ \"$rc\" -ne 0 ]; then\n    echo \"plan.sh failed (exit $rc): deleting what it applied\" >&2\n    rdmakit_cleanup\n  fi\n}\ntrap rdmakit_on_exit EXIT\n");
        out
    }
}

/// Quotes a word for bash ([`k8s_render::quote::shell::word`]). `${VAR}` / `${ARR[0]}` placeholders, a
/// variable plan.sh set itself, stay expandable (double quotes).
pub fn shell_quote(s: &str) -> String {
    if is_placeholder(s) {
        return format!("\"{s}\"");
    }
    word(s)
}

/// True for `${NAME}` or `${NAME[3]}`: a shell variable set earlier in plan.sh.
pub fn is_placeholder(s: &str) -> bool {
    let Some(inner) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) else {
        return false;
    };
    let (name, index) = match inner.split_once('[') {
        Some((n, rest)) => (n, rest.strip_suffix(']')),
        None => (inner, Some("0")),
    };
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && index.is_some_and(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()))
}

/// A shell variable name: `prefix` then `text` upper-cased, every other character `_`
/// (`RDMAKIT_OWN_` + `bundle/device-class.yaml` = `RDMAKIT_OWN_BUNDLE_DEVICE_CLASS_YAML`).
pub fn shell_var(prefix: &str, text: &str) -> String {
    let name: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{prefix}{name}")
}

/// Joins argv into one shell line.
pub fn shell_join<S: AsRef<str>>(args: &[S]) -> String {
    args.iter()
        .map(|a| shell_quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("abc-1.2"), "abc-1.2");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("${WORKERS[0]}"), "\"${WORKERS[0]}\"");
        assert_eq!(shell_quote("${HEAD}"), "\"${HEAD}\"");
        assert_eq!(shell_quote("${x; rm}"), "'${x; rm}'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn plan_text_and_shell() {
        let mut p = Plan::new("w.rhai", Some("prod"), Some("ml"));
        p.begin_step("Deploy");
        p.note("hello");
        let n = p.action(
            "apply x".into(),
            vec!["Pod/a".into()],
            vec!["kubectl apply -f x".into()],
        );
        assert_eq!(n, 1);
        let text = p.to_text();
        assert!(text.contains("== Step 1: Deploy"));
        assert!(text.contains("  [1] apply x"));
        let sh = p.to_shell();
        assert!(sh.starts_with("#!/usr/bin/env bash\n"));
        assert!(sh.contains("# hello\n"));
        assert_eq!(p.kubectl, "kubectl --context prod -n ml");
        assert!(p.complete);
    }

    #[test]
    fn titles_notes_and_summaries_cannot_leave_their_comment() {
        let mut p = Plan::new("w\nid.rhai", None, None);
        p.begin_step("Deploy to a\ntouch PWNED");
        p.note("line one\nline two\rtouch PWNED\u{2028}x");
        p.action("apply a\ntouch PWNED".into(), vec![], vec![]);
        let sh = p.to_shell();
        assert!(
            sh.contains("# Equivalent kubectl commands for w\\nid.rhai,"),
            "{sh}"
        );
        assert!(
            sh.contains("\n# --- Step 1: Deploy to a\\ntouch PWNED\n"),
            "{sh}"
        );
        assert!(
            sh.contains("echo '== Step 1: Deploy to a\ntouch PWNED'\n"),
            "{sh}"
        );
        assert!(
            sh.contains("# line one\n# line two\\rtouch PWNED\\u{2028}x\n"),
            "{sh}"
        );
        assert!(
            sh.contains("# [1] apply a\\ntouch PWNED (no kubectl equivalent)\n"),
            "{sh}"
        );
        // The payload is never a line of its own (only inside the echo's quotes, as text).
        assert!(!sh.lines().any(|l| l.trim() == "touch PWNED"), "{sh}");
        let text = p.to_text();
        assert!(
            text.contains("== Step 1: Deploy to a\\ntouch PWNED\n"),
            "{text}"
        );
    }

    #[test]
    fn a_failed_check_stops_plan_sh_before_it_applies() {
        let mut p = Plan::new("w.rhai", None, None);
        p.begin_step("Lint");
        p.action(
            "apply x".into(),
            vec![],
            vec![format!("kubectl {} -f x.yaml", crate::exec::KUBECTL_APPLY)],
        );
        let mut report = RunReport::new("w.rhai", true);
        report.begin_step("Lint");
        report.check(
            "bundle lint: rdma-ipc-lock (error)",
            Status::Fail,
            "pod p: no IPC_LOCK\n$(id)",
        );
        report.check("bundle lint: x (warning)", Status::Warn, "fine");
        let p = p.refusing_failed(&report);
        assert_eq!(p.failed.len(), 1);
        let sh = p.to_shell();
        let exit = sh.find("exit 1\n").expect("exits");
        assert!(exit < sh.find("kubectl apply").unwrap(), "{sh}");
        assert!(
            sh.contains("echo '  FAIL [Lint] bundle lint: rdma-ipc-lock (error): pod p: no IPC_LOCK' >&2\necho '  FAIL $(id)' >&2\n"),
            "{sh}"
        );
        let text = p.to_text();
        assert!(text.contains("== FAILED: 1 check(s) failed in the dry-run; plan.sh names them and stops before any kubectl apply"), "{text}");
        assert!(
            text.contains(
                "   FAIL [Lint] bundle lint: rdma-ipc-lock (error): pod p: no IPC_LOCK\\n$(id)\n"
            ),
            "{text}"
        );
        // A plan without failed checks has no gate.
        let clean =
            Plan::new("w.rhai", None, None).refusing_failed(&RunReport::new("w.rhai", true));
        assert!(!clean.to_shell().contains("exit 1"));
    }

    /// Found by the injection fuzz target: a dry-run stopped after a step that set a variable and before the
    /// step that reads it; shellcheck then reported SC2034 on a script that exits before either runs.
    #[test]
    fn an_incomplete_plan_whose_reader_is_missing_is_shellcheck_clean() {
        let mut p = Plan::new("w.rhai", None, None);
        p.begin_step("Deploy");
        p.action(
            "list".into(),
            vec![],
            vec!["pods=$(kubectl get pods -o name)".into()],
        );
        p.stop("w.rhai:9:1: refused");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("plan.sh");
        std::fs::write(&f, p.to_shell()).unwrap();
        match std::process::Command::new("shellcheck")
            .args(["-S", "warning"])
            .arg(&f)
            .output()
        {
            Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout)),
            Err(_) => {
                assert!(
                    std::env::var_os("RDMAKIT_NO_SKIP").is_none(),
                    "shellcheck is not installed and RDMAKIT_NO_SKIP is set: apt-get install shellcheck"
                );
                eprintln!("SKIPPED: shellcheck is not installed");
            }
        }
    }

    #[test]
    fn an_incomplete_plan_refuses_to_run() {
        let mut p = Plan::new("w.rhai", None, None);
        p.begin_step("Deploy");
        p.action(
            "apply x".into(),
            vec![],
            vec![format!("kubectl {} -f x.yaml", crate::exec::KUBECTL_APPLY)],
        );
        p.stop("w.rhai:3:7: it's broken\n  during step: Deploy");
        let sh = p.to_shell();
        let exit = sh.find("exit 2\n").expect("exits");
        assert!(exit < sh.find("kubectl apply").unwrap(), "{sh}");
        assert!(
            sh.contains("echo '  w.rhai:3:7: it'\\''s broken' >&2\n"),
            "{sh}"
        );
        assert!(p.to_text().contains("INCOMPLETE"));
        // shellcheck's file-wide disable comes before the first command, and only an incomplete plan has it.
        let shebang_end = sh.find('\n').unwrap();
        assert!(
            sh[shebang_end..]
                .find("# shellcheck disable=SC2034\n")
                .unwrap()
                < sh.find("set -e").unwrap()
        );
        assert!(
            !Plan::new("w.rhai", None, None)
                .to_shell()
                .contains("shellcheck disable")
        );
        let js = serde_json::to_value(&p).unwrap();
        assert_eq!(js["complete"], false);
        assert!(js["error"].as_str().unwrap().contains("w.rhai:3:7"));
    }
}
