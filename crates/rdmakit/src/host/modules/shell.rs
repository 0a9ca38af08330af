//! `shell::` — local commands, refused unless the run was started with `--allow-shell`.

use std::sync::Arc;

use rhai::{Map, Module};

use super::super::{Ctx, runtime_error};
use super::RResult;

/// The `shell::` module.
pub(crate) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "run",
        "run(cmd) -> #{stdout, stderr, code, dry_run}: a local shell command, refused unless the run \
        was started with `--allow-shell`; planned, not run, in a dry run.",
        move |cmd: &str| -> RResult<Map> {
        if !c.config.allow_shell {
            return Err(runtime_error(format!(
                "shell::run refused: this workflow wants to run `{cmd}` on your machine; re-run with --allow-shell if you trust it"
            )));
        }
        let mut r = Map::new();
        if c.exec.is_dry_run() {
            c.exec
                .note(&format!("local shell (not run in dry-run): {cmd}"));
            r.insert("stdout".into(), "".into());
            r.insert("stderr".into(), "".into());
            r.insert("code".into(), 0_i64.into());
            r.insert("dry_run".into(), true.into());
            return Ok(r);
        }
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .output()
            .map_err(|e| runtime_error(format!("shell::run `{cmd}`: {e}")))?;
        r.insert(
            "stdout".into(),
            String::from_utf8_lossy(&out.stdout).into_owned().into(),
        );
        r.insert(
            "stderr".into(),
            String::from_utf8_lossy(&out.stderr).into_owned().into(),
        );
        r.insert(
            "code".into(),
            i64::from(out.status.code().unwrap_or(-1)).into(),
        );
        r.insert("dry_run".into(), false.into());
        Ok(r)
    }, cmd: &str);
    m
}
