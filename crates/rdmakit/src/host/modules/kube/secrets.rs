//! `kube::merge_registry_secrets` and `kube::apply_secret`: Secrets the run makes for itself (deleted at
//! its end unless keep=true), whose values the redactor learns and plan.sh takes from the environment.

use std::sync::Arc;

use rhai::{Array, Dynamic, Map, Module};

use super::super::super::convert::{check_keys, opt_namespace, opt_str, opt_timeout, str_array};
use super::super::super::{Ctx, runtime_error};
use super::super::{RResult, exec_err};
use super::secret_in;
use crate::exec::MergeSecretsSpec;

/// `merge_registry_secrets`, `apply_secret`.
pub(super) fn register(m: &mut Module, ctx: &Arc<Ctx>) {
    // merge_registry_secrets([pull, push], target[, opts]) -> #{target, registries, dry_run}
    let c = ctx.clone();
    let merge = move |sources: Array, target: &str, opts: Map| -> RResult<Map> {
        check_keys(
            "kube::merge_registry_secrets",
            &opts,
            &["key", "namespace", "timeout"],
        )?;
        let spec = MergeSecretsSpec {
            sources: str_array(&sources, "kube::merge_registry_secrets sources")?,
            target: target.to_owned(),
            key: opt_str(&opts, "key")?.unwrap_or_else(|| "config.json".into()),
            namespace: opt_namespace(&opts)?,
            timeout: opt_timeout(&opts, 60)?,
        };
        c.precheck()?;
        let s = c.exec.merge_registry_secrets(&spec).map_err(exec_err)?;
        for t in &s.sensitive {
            let label = format!("secret/{} (registry credentials)", s.target);
            c.redactor.add(&label, t.expose());
            c.redactor.add_base64(&label, t.expose());
        }
        // The merged credentials are this run's own: deleted at the end (unless keep=true); plan.sh
        // deletes them in its last step.
        c.own_secret(
            &s.target,
            spec.namespace.as_deref(),
            "merged registry credentials",
        );
        let mut r = Map::new();
        r.insert("target".into(), s.target.into());
        r.insert(
            "registries".into(),
            s.registries
                .into_iter()
                .map(Dynamic::from)
                .collect::<Array>()
                .into(),
        );
        r.insert("dry_run".into(), s.dry_run.into());
        Ok(r)
    };
    regp_opts!(m, "merge_registry_secrets",
        "merge_registry_secrets([pull, push, ...], target[, #{key, namespace, timeout}]) -> #{target, \
        registries, dry_run}: merges the `auths` of several `kubernetes.io/dockerconfigjson` Secrets \
        (later ones win per registry) into one Opaque Secret holding `key` (default `config.json`, \
        what BuildKit reads). The merged credentials are redacted everywhere and the Secret is the \
        run's own: deleted at its end unless `keep=true`.",
        merge, sources: Array, target: &str);

    // apply_secret(name, #{key: value or secret parameter, ...}[, #{namespace, timeout}]) -> "Secret/name".
    // The run's own: deleted at its end (unless keep=true), as the merged registry credentials are.
    let c = ctx.clone();
    let apply_secret = move |name: &str, data: Map, opts: Map| -> RResult<String> {
        check_keys("kube::apply_secret", &opts, &["namespace", "timeout"])?;
        let mut spec = crate::exec::SecretSpec {
            name: name.to_owned(),
            data: Default::default(),
            env: Default::default(),
            namespace: opt_namespace(&opts)?,
            timeout: opt_timeout(&opts, 60)?,
        };
        for (k, v) in &data {
            let value = match secret_in(v) {
                Some(s) => {
                    spec.env
                        .insert(k.to_string(), crate::secrets::env_var(&s.key));
                    s.value
                }
                None if v.is_string() => crate::secrets::SecretText::new(v.to_string()),
                None => {
                    return Err(runtime_error(format!(
                        "kube::apply_secret: secret/{name} key {k}: expected a string or a secret parameter, got {}",
                        v.type_name()
                    )));
                }
            };
            spec.data.insert(k.to_string(), value);
        }
        c.precheck()?;
        let r = c.exec.apply_secret(&spec).map_err(exec_err)?;
        c.own_secret(&r.name, r.namespace.as_deref(), "from secret parameters");
        Ok(r.to_string())
    };
    regp_opts!(m, "apply_secret",
        "apply_secret(name, #{key: value or secret parameter, ...}[, #{namespace, timeout}]) -> \
        \"Secret/name\": an Opaque Secret from values the script holds; plan.sh takes secret \
        parameters from their environment variables. The run's own: deleted at its end unless \
        `keep=true`.",
        apply_secret, name: &str, data: Map);
}
