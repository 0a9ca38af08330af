//! Registry credentials and Secrets: merge the `auths` of several `kubernetes.io/dockerconfigjson`
//! Secrets into one Opaque Secret holding a `config.json` (what BuildKit's client reads), and apply an
//! Opaque Secret from values a script holds. What must be redacted afterwards comes back with the merge.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::KubeExecutor;
use crate::error::ExecError;
use crate::exec::{FIELD_MANAGER, MergeSecretsSpec, MergeSummary, ObjRef, SecretSpec};
use crate::secrets::SecretText;

impl KubeExecutor {
    /// [`Executor::merge_registry_secrets`](crate::exec::Executor::merge_registry_secrets): read each
    /// source Secret, merge, apply the target.
    pub(super) fn merge_registry_secrets_live(
        &self,
        spec: &MergeSecretsSpec,
    ) -> Result<MergeSummary, ExecError> {
        let ns = spec
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
        self.block(&format!("merge registry credentials into secret/{}", spec.target), spec.timeout, async {
            let mut configs = Vec::new();
            for name in &spec.sources {
                let action = format!("read secret/{name}");
                let s = self.retrying(&action, || secrets.get(name)).await?;
                let ty = s.type_.clone().unwrap_or_default();
                if ty != "kubernetes.io/dockerconfigjson" {
                    return Err(ExecError::Input(format!(
                        "secret/{name} has type {ty:?}, expected kubernetes.io/dockerconfigjson (create it with `kubectl create secret docker-registry`)"
                    )));
                }
                let bytes = s
                    .data
                    .as_ref()
                    .and_then(|d| d.get(".dockerconfigjson"))
                    .map(|b| b.0.clone())
                    .ok_or_else(|| ExecError::Input(format!("secret/{name} has no .dockerconfigjson key")))?;
                configs.push((name.clone(), bytes));
            }
            let merged = merge_docker_configs(&configs)?;
            let sensitive = sensitive_in_docker_configs(&configs, &merged);
            let registries: Vec<String> = merged
                .get("auths")
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let body = serde_json::to_vec(&merged).map_err(|e| ExecError::Input(e.to_string()))?;
            let value = opaque_secret(&spec.target, BTreeMap::from([(spec.key.clone(), ByteString(body))]))?;
            let action = format!("apply secret/{}", spec.target);
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            let patch = Patch::Apply(&value);
            self.retrying(&action, || secrets.patch(&spec.target, &pp, &patch)).await?;
            Ok(MergeSummary { target: spec.target.clone(), registries, dry_run: false, sensitive })
        })
    }

    /// [`Executor::apply_secret`](crate::exec::Executor::apply_secret): server-side apply of an Opaque
    /// Secret holding `spec.data`.
    pub(super) fn apply_secret_live(&self, spec: &SecretSpec) -> Result<ObjRef, ExecError> {
        let ns = spec
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
        let action = format!("apply secret/{}", spec.name);
        self.block(&action, spec.timeout, async {
            let data = spec
                .data
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.expose().as_bytes().to_vec())))
                .collect();
            let value = opaque_secret(&spec.name, data)?;
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            let patch = Patch::Apply(&value);
            self.retrying(&action, || secrets.patch(&spec.name, &pp, &patch))
                .await?;
            Ok(ObjRef {
                api_version: "v1".into(),
                kind: "Secret".into(),
                name: spec.name.clone(),
                namespace: Some(ns.clone()),
            })
        })
    }
}

/// An Opaque Secret labelled as rdmakit's, as the JSON a server-side apply sends (with `apiVersion` and
/// `kind`, which the typed `Secret` leaves out).
fn opaque_secret(name: &str, data: BTreeMap<String, ByteString>) -> Result<Value, ExecError> {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "rdmakit".to_owned(),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&secret).map_err(|e| ExecError::Input(e.to_string()))?;
    if let Some(o) = value.as_object_mut() {
        o.insert("apiVersion".into(), "v1".into());
        o.insert("kind".into(), "Secret".into());
    }
    Ok(value)
}

/// Merges the `auths` of several docker config JSON documents; later ones win per registry.
pub fn merge_docker_configs(configs: &[(String, Vec<u8>)]) -> Result<Value, ExecError> {
    let mut auths = serde_json::Map::new();
    for (name, bytes) in configs {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| {
            ExecError::Input(format!("secret/{name}: .dockerconfigjson is not valid JSON ({e}); recreate it with `kubectl create secret docker-registry`"))
        })?;
        let Some(a) = v.get("auths").and_then(Value::as_object) else {
            return Err(ExecError::Input(format!(
                "secret/{name}: .dockerconfigjson has no \"auths\" object"
            )));
        };
        for (k, v) in a {
            auths.insert(k.clone(), v.clone());
        }
    }
    Ok(json!({ "auths": auths }))
}

/// What a run must redact after a merge: each source's config text, every credential field in it
/// (`auth`, `password`, `identitytoken`, `registrytoken`) and the merged text.
fn sensitive_in_docker_configs(configs: &[(String, Vec<u8>)], merged: &Value) -> Vec<SecretText> {
    let mut out: Vec<SecretText> = Vec::new();
    for (_, bytes) in configs {
        out.push(SecretText::new(String::from_utf8_lossy(bytes).into_owned()));
    }
    out.push(SecretText::new(merged.to_string()));
    if let Some(auths) = merged.get("auths").and_then(Value::as_object) {
        for entry in auths.values() {
            for field in ["auth", "password", "identitytoken", "registrytoken"] {
                if let Some(v) = entry.get(field).and_then(Value::as_str) {
                    out.push(SecretText::new(v));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_configs_merge_with_the_later_secret_winning() {
        let a =
            br#"{"auths": {"docker.io": {"auth": "a"}, "reg.example": {"auth": "old"}}}"#.to_vec();
        let b = br#"{"auths": {"reg.example": {"auth": "new"}}}"#.to_vec();
        let m = merge_docker_configs(&[("pull".into(), a), ("push".into(), b)]).unwrap();
        assert_eq!(m["auths"]["docker.io"]["auth"], "a");
        assert_eq!(m["auths"]["reg.example"]["auth"], "new");
        let e = merge_docker_configs(&[("broken".into(), b"{".to_vec())])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("secret/broken: .dockerconfigjson is not valid JSON"),
            "{e}"
        );
        let e = merge_docker_configs(&[("empty".into(), b"{}".to_vec())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("secret/empty: .dockerconfigjson has no \"auths\" object"),
            "{e}"
        );
    }
}
