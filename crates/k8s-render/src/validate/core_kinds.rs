//! The core Kubernetes kinds (Pod, Deployment, Service, DRA objects, ...): their JSON schemas from the
//! k8s-openapi types, the typed decode that has the final word, and the kinds every cluster serves
//! that rdmakit carries no schema for.

use std::sync::OnceLock;

use k8s_openapi::schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub(super) type DecodeFn = fn(&Value) -> Result<Value, String>;

pub(super) struct CoreKind {
    pub(super) api_version: &'static str,
    pub(super) kind: &'static str,
    pub(super) schema: Value,
    pub(super) decode: DecodeFn,
}

pub(super) struct CoreSchemas {
    pub(super) defs: Map<String, Value>,
    pub(super) kinds: Vec<CoreKind>,
}

/// Decodes from the borrowed tree (no copy of the document) and serialises back.
fn decode_as<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, String> {
    let typed = T::deserialize(v).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

fn core_kind<T>(generator: &mut SchemaGenerator) -> CoreKind
where
    T: JsonSchema + DeserializeOwned + Serialize + k8s_openapi::Resource,
{
    CoreKind {
        api_version: T::API_VERSION,
        kind: T::KIND,
        schema: generator.subschema_for::<T>().to_value(),
        decode: decode_as::<T>,
    }
}

/// JSON schemas of the k8s-openapi types, generated once per process.
pub(super) fn core_schemas() -> &'static CoreSchemas {
    static CORE: OnceLock<CoreSchemas> = OnceLock::new();
    CORE.get_or_init(|| {
        use k8s_openapi::api::resource::v1 as dra;
        use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
        let mut g = SchemaSettings::draft2020_12().into_generator();
        let kinds = vec![
            core_kind::<core::Pod>(&mut g),
            core_kind::<core::Service>(&mut g),
            core_kind::<core::PersistentVolumeClaim>(&mut g),
            core_kind::<core::Secret>(&mut g),
            core_kind::<core::ConfigMap>(&mut g),
            core_kind::<core::ServiceAccount>(&mut g),
            core_kind::<core::Namespace>(&mut g),
            core_kind::<apps::Deployment>(&mut g),
            core_kind::<apps::StatefulSet>(&mut g),
            core_kind::<apps::DaemonSet>(&mut g),
            core_kind::<batch::Job>(&mut g),
            core_kind::<dra::DeviceClass>(&mut g),
            core_kind::<dra::ResourceClaimTemplate>(&mut g),
            core_kind::<dra::ResourceClaim>(&mut g),
            core_kind::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(&mut g),
        ];
        let _ = g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
        CoreSchemas {
            defs: g.take_definitions(true),
            kinds,
        }
    })
}

/// Built-in Kubernetes kinds with no schema embedded here (cluster infrastructure rather than what rdmakit
/// renders): `Some(group name)` for those, `None` for anything else.
pub(super) fn core_kind_without_schema(api_version: &str, kind: &str) -> Option<&'static str> {
    Some(match (api_version, kind) {
        ("v1", "Node" | "PersistentVolume" | "Endpoints" | "LimitRange" | "ResourceQuota") => {
            "core"
        }
        ("storage.k8s.io/v1", "StorageClass" | "CSIDriver" | "VolumeAttachment") => {
            "storage.k8s.io"
        }
        ("resource.k8s.io/v1", "ResourceSlice") => "resource.k8s.io",
        (
            "rbac.authorization.k8s.io/v1",
            "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding",
        ) => "rbac.authorization.k8s.io",
        ("scheduling.k8s.io/v1", "PriorityClass") => "scheduling.k8s.io",
        ("policy/v1", "PodDisruptionBudget") => "policy",
        _ => return None,
    })
}
