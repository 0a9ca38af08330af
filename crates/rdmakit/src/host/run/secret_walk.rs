//! The secret walk: every Secret value a run could show is learnt by its redactor before it can be shown.
//! A pod's Secrets (mounted, in the environment, image pulls) once an exec runs in it, a listed Secret's
//! data; and a listed Secret reaches the script with its values replaced.

use std::time::Duration;

use super::Ctx;
use crate::exec::FieldSpec;

impl Ctx {
    /// The Secrets a pod mounts, reads into its environment or pulls images with: an exec in it could print
    /// their values (`cat` a mounted file), so they are redacted from its output. Read once per pod, live
    /// only; what cannot be read (no permission, a server without it) is left to the other layers.
    pub(crate) fn remember_pod_secrets(&self, pod: &str, namespace: Option<&str>) {
        if self.exec.is_dry_run() {
            return;
        }
        let key = (pod.to_owned(), namespace.map(str::to_owned));
        if !self
            .pods_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key)
        {
            return;
        }
        // One field of an object as JSON, or nothing (not there, not allowed).
        let json_field = |kind: &str, name: &str, path: &str| {
            let spec = FieldSpec {
                kind: kind.into(),
                name: name.to_owned(),
                path: path.into(),
                namespace: namespace.map(str::to_owned),
                capture_var: None,
                timeout: Duration::from_secs(30),
            };
            self.exec
                .get_field(&spec)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        };
        let Some(pod_spec) = json_field("Pod", pod, ".spec") else {
            return;
        };
        let names = secret_names(&pod_spec);
        if names.is_empty() {
            return;
        }
        // Each by name (`get`, not `list`: the least a namespace-scoped credential needs).
        for name in names {
            if let Some(data) = json_field("Secret", &name, ".data") {
                self.remember_secret(
                    &serde_json::json!({ "metadata": { "name": name }, "data": data }),
                );
            }
        }
    }

    /// A listed Secret's values: what an exec that reads its mounted files would print, redacted from then on.
    pub(crate) fn remember_secret(&self, obj: &serde_json::Value) {
        let name = obj
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("secret");
        for (field, b64) in [("data", true), ("stringData", false)] {
            if let Some(m) = obj.get(field).and_then(serde_json::Value::as_object) {
                for (k, v) in m {
                    let (Some(v), label) = (v.as_str(), format!("secret/{name} {k}")) else {
                        continue;
                    };
                    if b64 {
                        self.redactor.add_base64(&label, v);
                    } else {
                        self.redactor.add(&label, v);
                    }
                }
            }
        }
    }
}

/// Names of the Secrets a pod spec refers to: secret and projected volumes, `envFrom`, `env` secret keys,
/// `imagePullSecrets`.
fn secret_names(spec: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let items = |v: &serde_json::Value, p: &str| -> Vec<serde_json::Value> {
        v.pointer(p)
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut out = std::collections::BTreeSet::new();
    let mut add = |v: Option<&serde_json::Value>| {
        if let Some(n) = v.and_then(serde_json::Value::as_str) {
            out.insert(n.to_owned());
        }
    };
    for v in items(spec, "/volumes") {
        add(v.pointer("/secret/secretName"));
        for src in items(&v, "/projected/sources") {
            add(src.pointer("/secret/name"));
        }
    }
    let containers = items(spec, "/containers");
    for c in containers.iter().chain(&items(spec, "/initContainers")) {
        for e in items(c, "/envFrom") {
            add(e.pointer("/secretRef/name"));
        }
        for e in items(c, "/env") {
            add(e.pointer("/valueFrom/secretKeyRef/name"));
        }
    }
    for s in items(spec, "/imagePullSecrets") {
        add(s.get("name"));
    }
    out
}

/// Secret values never reach scripts (they could print them): keys stay, values become `<redacted>`.
pub(crate) fn redact_secret(obj: &mut serde_json::Value) {
    for field in ["data", "stringData"] {
        if let Some(m) = obj
            .get_mut(field)
            .and_then(serde_json::Value::as_object_mut)
        {
            for v in m.values_mut() {
                *v = "<redacted>".into();
            }
        }
    }
    // The last-applied annotation of a kubectl-created Secret holds the values too.
    if let Some(a) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(serde_json::Value::as_object_mut)
    {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}
