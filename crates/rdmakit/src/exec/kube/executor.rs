//! The executor itself: [`Executor`] for [`KubeExecutor`], each verb a deadline-bounded, cancellable call
//! built from the pieces beside it (discovery in `api`, retries in `retry`, `wait`, `remote_exec`,
//! `registry`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, LogParams};
use kube::discovery::Scope;
use serde_json::Value;

use super::KubeExecutor;
use super::retry::{is_not_found, map_kube_err};
use crate::error::ExecError;
use crate::exec::{
    Access, CopySpec, ExecOutput, ExecSpec, Executor, FieldSpec, ListSpec, LogSpec, Manifest,
    MergeSecretsSpec, MergeSummary, ObjRef, SecretSpec, WaitSpec, api_version_for_kind, field_at,
};

impl Executor for KubeExecutor {
    fn is_dry_run(&self) -> bool {
        false
    }

    fn begin_step(&self, name: &str) {
        eprintln!("==> {name}");
    }

    fn has_api(&self, api_version: &str, kind: &str, timeout: Duration) -> Result<bool, ExecError> {
        self.block(&format!("discover {api_version} {kind}"), timeout, async {
            match self.resolve(api_version, kind).await {
                Ok(_) => Ok(true),
                Err(ExecError::MissingApi { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn apply(&self, manifest: &Manifest, timeout: Duration) -> Result<Vec<ObjRef>, ExecError> {
        // Validate every object first, so a bad document does not leave the file half-applied.
        for o in &manifest.objects {
            ObjRef::from_object(o, &manifest.display_path)?;
        }
        self.block(
            &format!("apply {}", manifest.display_path),
            timeout,
            async {
                let mut done = Vec::new();
                for o in &manifest.objects {
                    done.push(self.apply_object(o, &manifest.display_path).await?);
                }
                Ok(done)
            },
        )
    }

    fn apply_if_absent(
        &self,
        manifest: &Manifest,
        timeout: Duration,
    ) -> Result<(Vec<ObjRef>, Vec<ObjRef>), ExecError> {
        for o in &manifest.objects {
            ObjRef::from_object(o, &manifest.display_path)?;
        }
        self.block(
            &format!("apply {} (if absent)", manifest.display_path),
            timeout,
            async {
                let (mut applied, mut present) = (Vec::new(), Vec::new());
                for o in &manifest.objects {
                    let r = ObjRef::from_object(o, &manifest.display_path)?;
                    let api = self
                        .dyn_api(&r.api_version, &r.kind, r.namespace.as_deref())
                        .await?;
                    let action = format!("get {r}");
                    if self
                        .retrying(&action, || api.get_opt(&r.name))
                        .await?
                        .is_some()
                    {
                        tracing::info!("{r} is already there: left as it is");
                        present.push(r);
                    } else {
                        applied.push(self.apply_object(o, &manifest.display_path).await?);
                    }
                }
                Ok((applied, present))
            },
        )
    }

    fn denied(&self, needed: &[Access], timeout: Duration) -> Result<Vec<Access>, ExecError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        self.block("check permissions", timeout, async {
            let reviews: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
            let pp = kube::api::PostParams::default();
            let mut denied = Vec::new();
            for a in needed {
                // A kind the cluster does not serve is not a permission question (its action names the CRD).
                let Ok((ar, caps)) = self.resolve(&a.api_version, &a.kind).await else {
                    continue;
                };
                let namespace = match caps.scope {
                    Scope::Cluster => None,
                    Scope::Namespaced => Some(
                        a.namespace
                            .clone()
                            .unwrap_or_else(|| self.namespace.clone()),
                    ),
                };
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some(a.verb.clone()),
                            group: Some(ar.group.clone()),
                            resource: Some(ar.plural.clone()),
                            subresource: a.subresource.clone(),
                            namespace: namespace.clone(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let action = format!("check permission to {a}");
                match self
                    .retrying_raw(&action, || reviews.create(&pp, &review))
                    .await
                {
                    Ok(r) if r.status.as_ref().is_some_and(|s| !s.allowed) => denied.push(Access {
                        namespace,
                        ..a.clone()
                    }),
                    Ok(_) => {}
                    Err(e) => {
                        // No authorization API (or not allowed to ask): the actions will say what fails.
                        tracing::info!("permission pre-check skipped: {e}");
                        return Ok(Vec::new());
                    }
                }
            }
            Ok(denied)
        })
    }

    fn delete(&self, manifest: &Manifest, timeout: Duration) -> Result<Vec<ObjRef>, ExecError> {
        self.block(
            &format!("delete {}", manifest.display_path),
            timeout,
            async {
                let mut done = Vec::new();
                let mut going = Vec::new();
                // Reverse order: dependents before what they depend on.
                for o in manifest.objects.iter().rev() {
                    let r = ObjRef::from_object(o, &manifest.display_path)?;
                    let api = match self
                        .dyn_api(&r.api_version, &r.kind, r.namespace.as_deref())
                        .await
                    {
                        Ok(api) => api,
                        Err(ExecError::MissingApi { .. }) => continue,
                        Err(e) => return Err(e),
                    };
                    match api.delete(&r.name, &DeleteParams::background()).await {
                        Ok(answer) => {
                            // The object came back (finalizers, a grace period): it is still going;
                            // wait below until it is gone. A Status means it already is.
                            if let Some(uid) = answer.left().and_then(|obj| obj.metadata.uid) {
                                going.push((api, r.clone(), uid));
                            }
                            done.push(r);
                        }
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(map_kube_err(&format!("delete {r}"), e)),
                    }
                }
                // A delete is done when the object is gone (or replaced by a new one of the same name), as
                // kube-rs' `conditions::is_deleted` judges through a watch; the caller's deadline bounds it.
                for (api, r, uid) in going {
                    kube::runtime::wait::await_condition(
                        api,
                        &r.name,
                        kube::runtime::wait::conditions::is_deleted(&uid),
                    )
                    .await
                    .map_err(|e| ExecError::Transport {
                        action: format!("wait for {r} to be deleted"),
                        message: e.to_string(),
                    })?;
                }
                Ok(done)
            },
        )
    }

    fn wait(&self, spec: &WaitSpec) -> Result<Value, ExecError> {
        // wait_async enforces the deadline itself (with the last observed state); the outer limit is a backstop.
        self.block(
            &format!("wait for {}", spec.kind),
            spec.timeout + self.poll + Duration::from_secs(5),
            self.wait_async(spec),
        )
    }

    fn exec(&self, spec: &ExecSpec) -> Result<ExecOutput, ExecError> {
        self.block(
            &format!("exec in {}", spec.pod),
            spec.timeout,
            self.exec_async(spec),
        )
    }

    fn exec_many(&self, specs: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        self.run_ranks(specs)
    }

    fn get_field(&self, spec: &FieldSpec) -> Result<String, ExecError> {
        let api_version = api_version_for_kind(&spec.kind)
            .ok_or_else(|| ExecError::Input(format!("get: unknown kind {:?}", spec.kind)))?;
        let action = format!("read {} of {}/{}", spec.path, spec.kind, spec.name);
        self.block(&action, spec.timeout, async {
            let objs = self
                .list_values(
                    api_version,
                    &spec.kind,
                    Some(&spec.name),
                    None,
                    spec.namespace.as_deref(),
                )
                .await?;
            let obj = objs.first().ok_or_else(|| ExecError::Failed {
                action: action.clone(),
                message: format!("{}/{} not found", spec.kind, spec.name),
            })?;
            field_at(obj, &spec.path).ok_or_else(|| ExecError::Failed {
                action: action.clone(),
                message: format!("{}/{} has no {}", spec.kind, spec.name, spec.path),
            })
        })
    }

    fn copy_to(&self, spec: &CopySpec) -> Result<(), ExecError> {
        let data = std::fs::read(&spec.local).map_err(|e| ExecError::io(&spec.local, e))?;
        let expected = data.len();
        let exec = ExecSpec {
            pod: spec.pod.clone(),
            container: spec.container.clone(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\" && wc -c < \"$1\"".into(),
                "rdmakit-cp".into(),
                spec.remote.clone(),
            ],
            stdin: Some(data),
            namespace: spec.namespace.clone(),
            timeout: spec.timeout,
            ..ExecSpec::default()
        };
        let out = self.exec(&exec)?;
        let action = || {
            format!(
                "copy {} to {}:{}",
                spec.local_display, spec.pod, spec.remote
            )
        };
        if out.code != 0 {
            return Err(ExecError::Failed {
                action: action(),
                message: format!("exit code {}: {}", out.code, out.stderr.trim()),
            });
        }
        // What arrived, as the pod counts it: a transfer cut short must not pass.
        let arrived = out.stdout.trim();
        if arrived.parse::<usize>().ok() != Some(expected) {
            return Err(ExecError::Failed {
                action: action(),
                message: format!(
                    "expected {expected} bytes, the pod has {}",
                    if arrived.is_empty() {
                        "no byte count"
                    } else {
                        arrived
                    }
                ),
            });
        }
        Ok(())
    }

    fn logs(&self, spec: &LogSpec) -> Result<String, ExecError> {
        let pods: Api<Pod> = Api::namespaced(
            self.client.clone(),
            spec.namespace.as_deref().unwrap_or(&self.namespace),
        );
        let lp = LogParams {
            container: spec.container.clone(),
            tail_lines: spec.tail,
            ..LogParams::default()
        };
        let action = format!("logs of {}", spec.pod);
        self.block(&action, spec.timeout, async {
            self.retrying(&action, || pods.logs(&spec.pod, &lp)).await
        })
    }

    fn list(&self, spec: &ListSpec) -> Result<Vec<Value>, ExecError> {
        self.block(
            &format!("list {}", spec.kind),
            spec.timeout,
            self.list_values(
                &spec.api_version,
                &spec.kind,
                None,
                spec.selector.as_deref(),
                spec.namespace.as_deref(),
            ),
        )
    }

    fn merge_registry_secrets(&self, spec: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
        self.merge_registry_secrets_live(spec)
    }

    fn apply_secret(&self, spec: &SecretSpec) -> Result<ObjRef, ExecError> {
        self.apply_secret_live(spec)
    }
}
