//! `device-class.yaml` + `resource-claim-template.yaml`: DRA objects of a DRA profile (`resource.k8s.io/v1`).

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClaim, DeviceClass, DeviceClassSpec, DeviceRequest, DeviceSelector,
    ExactDeviceRequest, ResourceClaimSpec, ResourceClaimTemplate, ResourceClaimTemplateSpec,
};

use super::{Ctx, RenderError};
use crate::bundle::Bundle;

pub(crate) const DEVICE_CLASS_FILE: &str = "device-class.yaml";
pub(crate) const CLAIM_TEMPLATE_FILE: &str = "resource-claim-template.yaml";

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    let Some(dra) = ctx.dra() else {
        return Ok(());
    };
    // A DeviceClass is cluster-scoped: no namespace.
    let mut class_meta = ctx.meta(&dra.device_class, &[]);
    class_meta.namespace = None;
    let class = DeviceClass {
        metadata: class_meta,
        spec: DeviceClassSpec {
            selectors: Some(
                dra.selectors
                    .iter()
                    .map(|expr| DeviceSelector {
                        cel: Some(CELDeviceSelector {
                            expression: expr.clone(),
                        }),
                    })
                    .collect(),
            ),
            ..DeviceClassSpec::default()
        },
    };
    let template = ResourceClaimTemplate {
        metadata: ctx.meta(&dra.claim_template, &[]),
        spec: ResourceClaimTemplateSpec {
            metadata: None,
            spec: ResourceClaimSpec {
                devices: Some(DeviceClaim {
                    requests: Some(vec![DeviceRequest {
                        name: dra.request_name.clone(),
                        exactly: Some(ExactDeviceRequest {
                            device_class_name: dra.device_class.clone(),
                            count: Some(i64::from(dra.count)),
                            ..ExactDeviceRequest::default()
                        }),
                        first_available: None,
                    }]),
                    ..DeviceClaim::default()
                }),
            },
        },
    };
    bundle.add_manifests(DEVICE_CLASS_FILE, &[class])?;
    bundle.add_manifests(CLAIM_TEMPLATE_FILE, &[template])?;
    Ok(())
}
