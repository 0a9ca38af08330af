//! The API calls every verb shares: discovery of a kind's resource (cached, retried), an
//! `Api<DynamicObject>` for it in the right scope, server-side apply of one object, get/list as JSON.

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;

use super::KubeExecutor;
use super::retry::map_kube_err;
use crate::error::ExecError;
use crate::exec::{FIELD_MANAGER, ObjRef, missing_api_fix};

impl KubeExecutor {
    /// Finds the API resource for `apiVersion`/`kind` through discovery (cached).
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, ApiCapabilities), ExecError> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(hit) = self
            .discovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(hit.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let action = format!("discover {api_version} {kind}");
        // Discovery is retried like every other call: a 503 from an aggregated API is not "not served".
        let found = self
            .retrying_raw(&action, || kube::discovery::pinned_kind(&self.client, &gvk))
            .await
            .map_err(|e| match e {
                kube::Error::Discovery(_) => missing(api_version, kind),
                kube::Error::Api(s) if s.code == 404 => missing(api_version, kind),
                other => map_kube_err(&action, other),
            })?;
        self.discovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, found.clone());
        Ok(found)
    }

    /// The dynamic API for `kind`: cluster-wide for a cluster-scoped kind, else in `ns` (default: the
    /// executor's namespace).
    pub(super) async fn dyn_api(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
    ) -> Result<Api<DynamicObject>, ExecError> {
        let (ar, caps) = self.resolve(api_version, kind).await?;
        Ok(match caps.scope {
            Scope::Cluster => Api::all_with(self.client.clone(), &ar),
            Scope::Namespaced => {
                Api::namespaced_with(self.client.clone(), ns.unwrap_or(&self.namespace), &ar)
            }
        })
    }

    /// Server-side apply of one object.
    pub async fn apply_object(&self, obj: &Value, source: &str) -> Result<ObjRef, ExecError> {
        let r = ObjRef::from_object(obj, source)?;
        let api = self
            .dyn_api(&r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        let action = format!("apply {} {r} (from {source})", r.api_version);
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(obj);
        self.retrying(&action, || api.patch(&r.name, &pp, &patch))
            .await?;
        tracing::info!("applied {r}");
        Ok(r)
    }

    /// One object by name (none when it is not there) or every object a selector matches, as JSON.
    pub(super) async fn list_values(
        &self,
        api_version: &str,
        kind: &str,
        name: Option<&str>,
        selector: Option<&str>,
        ns: Option<&str>,
    ) -> Result<Vec<Value>, ExecError> {
        let api = self.dyn_api(api_version, kind, ns).await?;
        if let Some(n) = name {
            // 404 is "not there (yet)"; transient errors are retried like every other call.
            let action = format!("get {kind}/{n}");
            return match self.retrying(&action, || api.get_opt(n)).await? {
                Some(o) => Ok(vec![
                    serde_json::to_value(o).map_err(|e| ExecError::Input(e.to_string()))?,
                ]),
                None => Ok(vec![]),
            };
        }
        // Pages of LIST_PAGE: a list of thousands of nodes or pods is several bounded responses, not one
        // the API server must build (and we must hold as text) whole.
        let mut lp = ListParams::default().limit(LIST_PAGE);
        if let Some(s) = selector {
            lp = lp.labels(s);
        }
        let action = format!("list {kind}");
        let mut out = Vec::new();
        loop {
            let page = self.retrying(&action, || api.list(&lp)).await?;
            for o in page.items {
                out.push(serde_json::to_value(o).map_err(|e| ExecError::Input(e.to_string()))?);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = lp.continue_token(&token),
                None => return Ok(out),
            }
        }
    }
}

/// Objects per page of a list.
pub const LIST_PAGE: u32 = 500;

/// The error for a kind the cluster does not serve, with how to get it.
pub(super) fn missing(api_version: &str, kind: &str) -> ExecError {
    ExecError::MissingApi {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        fix: missing_api_fix(kind),
    }
}
