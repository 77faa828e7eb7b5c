//! Kueue API discovery: tiergate needs `kueue.x-k8s.io/v1beta2` (Kueue >= v0.15) with every kind it writes; and
//! which admission policies the API server serves, which decides whether the in-server gate can be applied and in
//! which mode. The assessments are pure ([`build_kueue_support`], [`serves_validating_policies`],
//! [`serves_mutating_policies`]); [`discover_kueue`] and [`discover_admission_policies`] ask the API server.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList};
use kube::Client;

use super::kinds::{KUEUE_GROUP, KUEUE_VERSION, KueueKind, MIN_KUEUE_RELEASE, RESOURCE_GROUP, RESOURCE_VERSION};

/// Kueue is missing or too old; the reconcile retries with backoff and the daemon keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The API server's group list could not be read.
    #[error("failed to list the API server's groups: {0}")]
    ListApiGroups(#[source] kube::Error),
    /// The `kueue.x-k8s.io/v1beta2` resource list could not be read.
    #[error("failed to list the resources of kueue.x-k8s.io/v1beta2: {0}")]
    ListKueueResources(#[source] kube::Error),
    /// No Kueue CRDs at all.
    #[error(
        "failed to find Kueue: the API group kueue.x-k8s.io is not served; install Kueue {MIN_KUEUE_RELEASE} or newer (tiergate is built against v0.19.2)"
    )]
    KueueNotInstalled,
    /// Only older Kueue versions are served.
    #[error(
        "failed to find kueue.x-k8s.io/v1beta2: the cluster serves only {served}; upgrade Kueue to {MIN_KUEUE_RELEASE} or newer"
    )]
    KueueTooOld {
        /// The versions served, comma separated.
        served: String,
    },
    /// v1beta2 is served but without some kinds tiergate writes.
    #[error(
        "failed to find Kueue kinds {missing} in kueue.x-k8s.io/v1beta2; reinstall Kueue's CRDs ({MIN_KUEUE_RELEASE} or newer)"
    )]
    KueueKindsMissing {
        /// Missing kinds, comma separated.
        missing: String,
    },
}

impl DiscoveryError {
    /// Fixed reason for metrics, conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ListApiGroups(_) => "list_api_groups",
            Self::ListKueueResources(_) => "list_kueue_resources",
            Self::KueueNotInstalled => "kueue_not_installed",
            Self::KueueTooOld { .. } => "kueue_too_old",
            Self::KueueKindsMissing { .. } => "kueue_kinds_missing",
        }
    }
}

/// Whether the served groups (and, when v1beta2 is served, its resources) support tiergate.
pub fn build_kueue_support(groups: &APIGroupList, resources: Option<&APIResourceList>) -> Result<(), DiscoveryError> {
    let Some(group) = groups.groups.iter().find(|group| group.name == KUEUE_GROUP) else {
        return Err(DiscoveryError::KueueNotInstalled);
    };
    if !group.versions.iter().any(|version| version.version == KUEUE_VERSION) {
        let served: Vec<&str> = group.versions.iter().map(|version| version.version.as_str()).collect();
        return Err(DiscoveryError::KueueTooOld { served: served.join(", ") });
    }
    let Some(resources) = resources else { return Ok(()) };
    let missing: Vec<&str> = KueueKind::ALL
        .into_iter()
        .filter(|kind| kind.is_kueue())
        .filter(|kind| !resources.resources.iter().any(|resource| resource.name == kind.plural()))
        .map(KueueKind::name)
        .collect();
    if missing.is_empty() { Ok(()) } else { Err(DiscoveryError::KueueKindsMissing { missing: missing.join(", ") }) }
}

/// The group version of the in-server gate's admission policies.
const ADMISSION_GROUP_VERSION: &str = "admissionregistration.k8s.io/v1";

/// Whether `resources` (of `admissionregistration.k8s.io/v1`) include MutatingAdmissionPolicy (GA in 1.36).
pub fn serves_mutating_policies(resources: &APIResourceList) -> bool {
    resources.resources.iter().any(|resource| resource.name == "mutatingadmissionpolicies")
}

/// Whether `resources` (of `admissionregistration.k8s.io/v1`) include ValidatingAdmissionPolicy and its bindings
/// (GA in 1.30): the gate's validating half, which holds the boundary while the webhook does not answer.
pub fn serves_validating_policies(resources: &APIResourceList) -> bool {
    let served = |name: &str| resources.resources.iter().any(|resource| resource.name == name);
    served("validatingadmissionpolicies") && served("validatingadmissionpolicybindings")
}

/// Which halves of the in-server gate the API server can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionPolicies {
    /// ValidatingAdmissionPolicy and its bindings.
    pub validating: bool,
    /// MutatingAdmissionPolicy and its bindings.
    pub mutating: bool,
}

/// Asks the API server which admission policies it serves; `None` when discovery failed (logged; the caller keeps
/// what is live rather than deciding on an unknown).
pub async fn discover_admission_policies(client: &Client) -> Option<AdmissionPolicies> {
    match client.list_api_group_resources(ADMISSION_GROUP_VERSION).await {
        Ok(resources) => Some(AdmissionPolicies {
            validating: serves_validating_policies(&resources),
            mutating: serves_mutating_policies(&resources),
        }),
        Err(error) => {
            tracing::warn!(%error, "failed to list {ADMISSION_GROUP_VERSION}; the in-server gate's mode is unknown");
            None
        }
    }
}

/// Asks the API server whether it serves Karpenter's v1 NodePool; `None` when discovery failed otherwise than with
/// a 404 (logged; the NodePools are then applied and any failure reported as a write's).
pub async fn discover_node_pools(client: &Client) -> Option<bool> {
    let group_version = format!("{}/{}", tiergate_karpenter::GROUP, tiergate_karpenter::VERSION);
    discover_resource(client, &group_version, "nodepools").await
}

/// Asks the API server whether it serves DRA's `resource.k8s.io/v1` DeviceClass (Kubernetes 1.34+), in the terms
/// of [`discover_node_pools`].
pub async fn discover_device_classes(client: &Client) -> Option<bool> {
    let group_version = format!("{RESOURCE_GROUP}/{RESOURCE_VERSION}");
    discover_resource(client, &group_version, "deviceclasses").await
}

/// Whether `group_version` lists `plural`: `Some(false)` when it does not or the group version is not served (404),
/// `None` when discovery failed otherwise (logged; the caller applies as if served and reports any failed write).
async fn discover_resource(client: &Client, group_version: &str, plural: &str) -> Option<bool> {
    match crate::cache::lists_resource(client, group_version, plural).await {
        Ok(served) => Some(served),
        Err(error) => {
            tracing::warn!(%error, "failed to list {group_version}; applying the policy's {plural} as if served");
            None
        }
    }
}

/// Asks the API server whether Kueue v1beta2 and every kind tiergate writes are served.
pub async fn discover_kueue(client: &Client) -> Result<(), DiscoveryError> {
    let groups = client.list_api_groups().await.map_err(DiscoveryError::ListApiGroups)?;
    build_kueue_support(&groups, None)?;
    let resources = client
        .list_api_group_resources(&format!("{KUEUE_GROUP}/{KUEUE_VERSION}"))
        .await
        .map_err(DiscoveryError::ListKueueResources)?;
    build_kueue_support(&groups, Some(&resources))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn groups(versions: &[&str]) -> APIGroupList {
        let versions: Vec<_> = versions
            .iter()
            .map(|version| json!({"groupVersion": format!("kueue.x-k8s.io/{version}"), "version": version}))
            .collect();
        serde_json::from_value(json!({"groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
            {"name": "kueue.x-k8s.io", "versions": versions},
        ]}))
        .unwrap()
    }

    #[test]
    fn mutating_admission_policies_are_served_only_when_discovery_lists_them() {
        let list = |names: &[&str]| -> APIResourceList {
            let resources: Vec<_> = names
                .iter()
                .map(|name| json!({"name": name, "singularName": "", "namespaced": false, "kind": "X", "verbs": []}))
                .collect();
            serde_json::from_value(json!({"groupVersion": "admissionregistration.k8s.io/v1", "resources": resources}))
                .unwrap()
        };
        let before_1_36 = list(&["validatingadmissionpolicies", "validatingadmissionpolicybindings"]);
        assert!(!serves_mutating_policies(&before_1_36));
        assert!(serves_mutating_policies(&list(&["validatingadmissionpolicies", "mutatingadmissionpolicies"])));
        assert!(serves_validating_policies(&before_1_36));
        assert!(!serves_validating_policies(&list(&["validatingwebhookconfigurations"])), "before 1.30");
        assert!(!serves_validating_policies(&list(&["validatingadmissionpolicies"])), "no bindings, no gate");
    }

    #[test]
    fn v1beta1_only_names_the_minimum_kueue_release() {
        let error = build_kueue_support(&groups(&["v1beta1"]), None).unwrap_err();
        assert_eq!(error.reason(), "kueue_too_old");
        assert!(error.to_string().contains("v0.15"), "{error}");
        assert!(error.to_string().contains("v1beta1"), "{error}");
    }

    #[test]
    fn missing_group_means_kueue_is_not_installed() {
        let none: APIGroupList = serde_json::from_value(json!({"groups": []})).unwrap();
        assert_eq!(build_kueue_support(&none, None).unwrap_err().reason(), "kueue_not_installed");
    }

    #[test]
    fn v1beta2_without_a_kind_names_the_missing_kind() {
        let resources: APIResourceList = serde_json::from_value(json!({
            "groupVersion": "kueue.x-k8s.io/v1beta2",
            "resources": [{"name": "clusterqueues", "singularName": "", "namespaced": false, "kind": "ClusterQueue", "verbs": []}],
        }))
        .unwrap();
        let error = build_kueue_support(&groups(&["v1beta1", "v1beta2"]), Some(&resources)).unwrap_err();
        assert!(error.to_string().contains("LocalQueue"), "{error}");
        assert!(build_kueue_support(&groups(&["v1beta1", "v1beta2"]), None).is_ok());
    }
}
