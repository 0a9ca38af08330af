//! `params::` — the run's `--set` values typed like the script's defaults, and secret parameters as opaque
//! values.

use std::sync::Arc;

use rhai::{Dynamic, Map, Module};

use super::super::{Ctx, SecretParam, runtime_error};
use super::RResult;

/// The `params::` module.
pub(crate) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "get",
        "get(key, default): the `--set` value of `key` converted to the default's type, else the \
        default; a `--set-secret` key gives the opaque secret.",
        move |key: &str,
                              default: Dynamic|
          -> RResult<Dynamic> {
        c.params_read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned());
        if let Some(v) = c.config.secrets.get(key) {
            return Ok(Dynamic::from(SecretParam { key: key.to_owned(), value: v.clone() }));
        }
        let Some(v) = c.config.params.get(key) else {
            return Ok(default);
        };
        let bad = |what: &str| runtime_error(format!("--set {key}={v}: expected {what}"));
        if default.is_int() {
            v.trim()
                .parse::<i64>()
                .map(Dynamic::from)
                .map_err(|_| bad("an integer"))
        } else if default.is_float() {
            v.trim()
                .parse::<f64>()
                .map(Dynamic::from)
                .map_err(|_| bad("a number"))
        } else if default.is_bool() {
            match v.trim() {
                "true" | "1" | "yes" => Ok(true.into()),
                "false" | "0" | "no" => Ok(false.into()),
                _ => Err(bad("true or false")),
            }
        } else {
            Ok(v.clone().into())
        }
    }, key: &str, default: Dynamic);
    let c = ctx.clone();
    regp!(&mut m, "secret",
        "secret(key) -> Secret: a parameter the workflow declares secret, from `--set-secret` (or \
        `--set`, still kept out of everything the run writes); an opaque value that prints as \
        `<secret KEY>` and only `kube::exec`'s `stdin` and `kube::apply_secret` take. A live run \
        needs a value; a dry run's plan.sh reads it from RDMAKIT_SECRET_KEY.",
        move |key: &str| -> RResult<Dynamic> {
        c.params_read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned());
        let value = match (c.config.secrets.get(key), c.config.params.get(key)) {
            (Some(v), _) => v.clone(),
            (None, Some(v)) => {
                c.redactor.add(key, v);
                crate::secrets::SecretText::new(v.clone())
            }
            (None, None) if c.exec.is_dry_run() => crate::secrets::SecretText::default(),
            (None, None) => {
                return Err(runtime_error(format!(
                    "params::secret({key:?}): no value; pass --set-secret {key} with {} in the environment (or --set-secret {key}=VALUE)",
                    crate::secrets::env_var(key)
                )));
            }
        };
        Ok(Dynamic::from(SecretParam { key: key.to_owned(), value }))
    }, key: &str);
    let c = ctx.clone();
    reg!(
        &mut m,
        "all",
        "all() -> map: every `--set` value (secrets as opaque values).",
        move || -> Map {
            c.params_read
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(c.config.params.keys().cloned());
            c.config
                .params
                .iter()
                .map(|(k, v)| (k.as_str().into(), Dynamic::from(v.clone())))
                .chain(c.config.secrets.iter().map(|(k, v)| {
                    (
                        k.as_str().into(),
                        Dynamic::from(SecretParam {
                            key: k.clone(),
                            value: v.clone(),
                        }),
                    )
                }))
                .collect()
        },
    );
    m
}
