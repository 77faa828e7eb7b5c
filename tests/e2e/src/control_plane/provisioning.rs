//! The ProvisioningRequest CRD (`autoscaling.x-k8s.io/v1`) the control plane installs before Kueue starts: Kueue
//! runs its provisioning admission-check controller only when the API server serves ProvisioningRequests as it
//! starts, and cluster-autoscaler (`--enable-provisioning-requests`) answers them. A minimal structural schema of our
//! own (spec and status kept as sent) instead of the autoscaler's generated one. Pure.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceSubresourceStatus, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
pub use tiergate::cache::kinds::provisioning_request_resource;

/// An object schema that keeps every field it is given.
fn preserved_object() -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("object".to_owned()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..JSONSchemaProps::default()
    }
}

/// The CRD: namespaced, `v1` served and stored, a status subresource (the autoscaler writes conditions through
/// it), and a structural schema whose `spec` and `status` keep whatever Kueue and the autoscaler write.
pub fn build_provisioning_request_crd() -> CustomResourceDefinition {
    let resource = provisioning_request_resource();
    let kind = resource.kind;
    let schema = JSONSchemaProps {
        type_: Some("object".to_owned()),
        properties: Some(
            [("spec".to_owned(), preserved_object()), ("status".to_owned(), preserved_object())].into_iter().collect(),
        ),
        ..JSONSchemaProps::default()
    };
    CustomResourceDefinition {
        metadata: ObjectMeta { name: Some(format!("{}.{}", resource.plural, resource.group)), ..ObjectMeta::default() },
        spec: CustomResourceDefinitionSpec {
            group: resource.group,
            names: CustomResourceDefinitionNames {
                list_kind: Some(format!("{kind}List")),
                plural: resource.plural,
                singular: Some(kind.to_ascii_lowercase()),
                kind,
                short_names: Some(vec!["provreq".to_owned(), "provreqs".to_owned()]),
                ..CustomResourceDefinitionNames::default()
            },
            scope: "Namespaced".to_owned(),
            versions: vec![CustomResourceDefinitionVersion {
                name: resource.version,
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation { open_api_v3_schema: Some(schema) }),
                // `status: {}`; the type's default is `null`, which the API server reads as no status subresource.
                subresources: Some(CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(serde_json::Value::Object(serde_json::Map::new()))),
                    scale: None,
                }),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provisioning_request_crd_is_namespaced_v1_with_status_and_keeps_spec_and_status() {
        let crd = build_provisioning_request_crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("provisioningrequests.autoscaling.x-k8s.io"));
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert!(version.served && version.storage);
        let status = serde_json::to_value(&version.subresources).unwrap();
        assert_eq!(status, serde_json::json!({"status": {}}));
        let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
        let properties = schema.properties.as_ref().unwrap();
        for field in ["spec", "status"] {
            assert_eq!(properties[field].x_kubernetes_preserve_unknown_fields, Some(true), "{field}");
        }
        assert_eq!(version.name, "v1");
        assert_eq!(crd.spec.names.kind, "ProvisioningRequest");
    }
}
