//! Builders for scoring's unit tests: recorded admission requests and a Snapshot of the sample policy and
//! cluster; reads fixture files.

use std::sync::Arc;

use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, AdmissionReview, Operation};

use crate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use crate::view::Snapshot;

/// The request of a recorded AdmissionReview in `shared/fixtures/admission/` (beside the repository, found from
/// the crate upwards so a worktree one level deeper finds it too).
pub fn fixture_request(name: &str) -> AdmissionRequest<DynamicObject> {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.ancestors().map(|dir| dir.join("shared/fixtures/admission")).find(|dir| dir.is_dir()).unwrap();
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let review: AdmissionReview<DynamicObject> = serde_json::from_str(&text).unwrap();
    review.try_into().unwrap()
}

/// The embedded sample policy and sample cluster, synced.
pub fn sample_snapshot() -> Snapshot {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
    Snapshot {
        policy: Some(Arc::new(load_policy(None).unwrap())),
        namespaces: view.namespaces.into_iter().map(|ns| (ns.name.clone(), ns)).collect(),
        nodes: view.nodes.into_iter().map(|node| (node.name.clone(), node)).collect(),
        own_namespace: Some("tiergate-system".to_owned()),
        synced: true,
        ..Snapshot::default()
    }
}

/// The request with these annotations set (added or replaced) on the object.
pub fn with_annotations(
    mut request: AdmissionRequest<DynamicObject>,
    pairs: &[(&str, &str)],
) -> AdmissionRequest<DynamicObject> {
    let object = request.object.as_mut().unwrap();
    let annotations = object.metadata.annotations.get_or_insert_default();
    for (key, value) in pairs {
        annotations.insert((*key).to_owned(), (*value).to_owned());
    }
    request
}

/// The request without the annotation `key`.
pub fn without_annotation(mut request: AdmissionRequest<DynamicObject>, key: &str) -> AdmissionRequest<DynamicObject> {
    if let Some(annotations) = request.object.as_mut().unwrap().metadata.annotations.as_mut() {
        annotations.remove(key);
    }
    request
}

/// The request as another operation.
pub fn with_operation(
    mut request: AdmissionRequest<DynamicObject>,
    operation: Operation,
) -> AdmissionRequest<DynamicObject> {
    request.operation = operation;
    request
}
