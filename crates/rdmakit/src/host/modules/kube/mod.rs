//! `kube::` — every cluster action a workflow takes, through the executor (dry-run or live): apply, delete,
//! waits, exec (with stdin), cp, logs, list/pods/nodes, get_field, exec_many, the registry-credentials merge
//! and Secrets from secret parameters. What comes back is redacted of every secret the run knows.
//!
//! One file per group of verbs: `objects` (apply, delete, has_api, plan notes), `waits`, `exec` (exec,
//! exec_many, cp), `read` (logs, list, pods, nodes, get_field), `secrets`.

mod exec;
mod objects;
mod read;
mod secrets;
mod waits;

use std::sync::Arc;

use rhai::{Dynamic, Module};

use super::super::{Ctx, SecretParam};

/// The `kube::` module.
pub(super) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    objects::register(&mut m, ctx);
    waits::register(&mut m, ctx);
    exec::register(&mut m, ctx);
    read::register(&mut m, ctx);
    secrets::register(&mut m, ctx);
    m
}

/// A secret parameter held in `d`, if it is one.
fn secret_in(d: &Dynamic) -> Option<SecretParam> {
    d.clone().try_cast::<SecretParam>()
}
