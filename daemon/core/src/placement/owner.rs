//! Which workload owns a pod (the ledger key, e.g. `Deployment/ns/web-app`), an owner's pod-template metadata, and
//! a StatefulSet pod's ordinal; pure, no I/O. Where each kind keeps its pod templates is `tiergate_workloads`'.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tiergate_workloads::controller_of;

use crate::view::Snapshot;

/// Label the Deployment controller puts on its ReplicaSets' pods; the ReplicaSet is `<deployment>-<hash>`.
const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// Label the StatefulSet controller puts on its pods (Kubernetes 1.28+).
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Labels and annotations of a pod template.
#[derive(Debug, Default)]
pub(crate) struct TemplateMeta {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Reads the labels and annotations of the template whose metadata is at `pointer` (non-string values are
/// skipped; the API server never sends them).
pub(crate) fn template_meta(data: &Value, pointer: &str) -> TemplateMeta {
    let metadata = data.pointer(pointer);
    let strings = |field: &str| -> BTreeMap<String, String> {
        metadata
            .and_then(|meta| meta.get(field))
            .and_then(Value::as_object)
            .map(|object| {
                object.iter().filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned()))).collect()
            })
            .unwrap_or_default()
    };
    TemplateMeta { labels: strings("labels"), annotations: strings("annotations") }
}

/// The ledger key of the workload that owns a pod: a ReplicaSet's pods count under its Deployment (from the
/// snapshot's ReplicaSet owners, else the ReplicaSet name minus `-<pod-template-hash>`); other controllers under
/// themselves; a bare pod under its generateName (or name).
pub(crate) fn pod_owner_key(namespace: &str, meta: &ObjectMeta, snapshot: &Snapshot) -> String {
    let Some(owner) = controller_of(meta) else {
        let name = meta.generate_name.as_deref().filter(|name| !name.is_empty()).or(meta.name.as_deref());
        return format!("Pod/{namespace}/{}", name.unwrap_or_default());
    };
    if owner.kind == "ReplicaSet" {
        if let Some((deployment_namespace, deployment)) = snapshot.replica_set_owners.get(&owner.uid) {
            return format!("Deployment/{deployment_namespace}/{deployment}");
        }
        let hash = meta.labels.as_ref().and_then(|labels| labels.get(POD_TEMPLATE_HASH_LABEL));
        if let Some(deployment) = hash.and_then(|hash| owner.name.strip_suffix(hash.as_str())?.strip_suffix('-')) {
            return format!("Deployment/{namespace}/{deployment}");
        }
    }
    format!("{}/{namespace}/{}", owner.kind, owner.name)
}

/// A StatefulSet pod's ordinal: the `apps.kubernetes.io/pod-index` label, else the pod name's numeric suffix
/// when a StatefulSet controls the pod.
pub(crate) fn ordinal(meta: &ObjectMeta) -> Option<u32> {
    if let Some(index) = meta.labels.as_ref().and_then(|labels| labels.get(POD_INDEX_LABEL)) {
        return index.parse().ok();
    }
    if controller_of(meta).is_some_and(|owner| owner.kind == "StatefulSet") {
        return meta.name.as_deref()?.rsplit_once('-')?.1.parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(owner_kind: &str, owner_name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(format!("{owner_name}-3")),
            labels: Some(labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()),
            owner_references: Some(vec![OwnerReference {
                kind: owner_kind.to_owned(),
                name: owner_name.to_owned(),
                uid: "rs-uid".to_owned(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn replica_set_pod_counts_under_its_deployment_from_the_template_hash() {
        let meta = pod("ReplicaSet", "web-app-79ff48ccfb", &[("pod-template-hash", "79ff48ccfb")]);
        assert_eq!(pod_owner_key("ns", &meta, &Snapshot::default()), "Deployment/ns/web-app");
    }

    #[test]
    fn replica_set_pod_counts_under_the_deployment_the_snapshot_names() {
        let meta = pod("ReplicaSet", "renamed", &[]);
        let snapshot = Snapshot {
            replica_set_owners: [("rs-uid".to_owned(), ("ns".to_owned(), "web".to_owned()))].into(),
            ..Snapshot::default()
        };
        assert_eq!(pod_owner_key("ns", &meta, &snapshot), "Deployment/ns/web");
    }

    #[test]
    fn bare_replica_set_pod_counts_under_the_replica_set() {
        let meta = pod("ReplicaSet", "cache", &[]);
        assert_eq!(pod_owner_key("ns", &meta, &Snapshot::default()), "ReplicaSet/ns/cache");
    }

    #[test]
    fn statefulset_ordinal_comes_from_the_pod_index_label_or_the_name() {
        assert_eq!(ordinal(&pod("StatefulSet", "gpu", &[("apps.kubernetes.io/pod-index", "7")])), Some(7));
        assert_eq!(ordinal(&pod("StatefulSet", "gpu", &[])), Some(3));
        assert_eq!(ordinal(&pod("Job", "gpu", &[])), None);
    }
}
