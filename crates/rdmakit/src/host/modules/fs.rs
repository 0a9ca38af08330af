//! `fs::` — writes confined to the out dir (recorded as the run's own), reads confined to what
//! [`Ctx::resolve_path`](super::super::Ctx) allows.

use std::path::{Component, Path};
use std::sync::Arc;

use rhai::Module;

use super::super::{Ctx, runtime_error};
use super::RResult;

/// Paths scripts may write: relative, inside the out dir, no `..`.
fn confined(ctx: &Ctx, rel: &str) -> RResult<std::path::PathBuf> {
    let p = Path::new(rel);
    if p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(runtime_error(format!(
            "fs: {rel:?} must be a relative path inside the out dir (no `..`)"
        )));
    }
    Ok(ctx.config.out_dir.join(p))
}

/// The `fs::` module.
pub(crate) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "write",
        "write(rel, text) -> rel: writes a file inside the out dir only (relative, no `..`), recorded \
        as the run's own (the next run in this out dir removes it).",
        move |rel: &str,
                                text: &str|
          -> RResult<String> {
        let p = confined(&c, rel)?;
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| runtime_error(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(&p, text).map_err(|e| runtime_error(format!("{}: {e}", p.display())))?;
        c.wrote(rel)?;
        Ok(rel.to_owned())
    }, rel: &str, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "read",
        "read(path) -> text: reads a file. Reads (fs::read/exists, and the files \
        kube::cp/apply/delete and validate::/lint::bundle open) are confined to the out dir, the \
        workflow's folder, its library and vendor folders, and files named on the command line \
        (`--set KEY=PATH`), symlinks resolved; any other path is an error naming it and what is \
        allowed.",
        move |path: &str| -> RResult<String> {
        let p = c.resolve_path(path, "fs::read")?;
        std::fs::read_to_string(&p).map_err(|e| runtime_error(format!("{}: {e}", p.display())))
    }, path: &str);
    let c = ctx.clone();
    regp!(&mut m, "exists",
        "exists(path) -> bool: whether a file exists, confined as fs::read.",
        move |path: &str| -> RResult<bool> {
        Ok(c.resolve_path(path, "fs::exists")?.exists())
    }, path: &str);
    let c = ctx.clone();
    reg!(&mut m, "out_dir", "The out dir's path.", move || c
        .config
        .out_dir
        .display()
        .to_string(),);
    m
}
