//! Builders for scoring's unit tests: recorded admission requests and a Snapshot of the sample policy and
//! cluster; reads fixture files.

use std::sync::Arc;

use kube_core::admission::Operation;
use serde_json::Value;

use crate::admission::lean_request;
use crate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use crate::request::Request;
use crate::view::Snapshot;

/// The request of a recorded AdmissionReview in `shared/fixtures/admission/` (beside the repository, found from
/// the crate upwards so a worktree one level deeper finds it too).
pub fn fixture_request(name: &str) -> Request {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.ancestors().map(|dir| dir.join("shared/fixtures/admission")).find(|dir| dir.is_dir()).unwrap();
    let body = std::fs::read(dir.join(name)).unwrap();
    lean_request(&body, "admission.k8s.io/v1").unwrap()
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
pub fn with_annotations(mut request: Request, pairs: &[(&str, &str)]) -> Request {
    let metadata = request.object.as_mut().unwrap()["metadata"].as_object_mut().unwrap();
    let annotations = metadata.entry("annotations").or_insert_with(|| Value::Object(serde_json::Map::new()));
    for (key, value) in pairs {
        annotations[*key] = Value::String((*value).to_owned());
    }
    request
}

/// The request without the annotation `key`.
pub fn without_annotation(mut request: Request, key: &str) -> Request {
    if let Some(annotations) = request.object.as_mut().unwrap()["metadata"]["annotations"].as_object_mut() {
        annotations.remove(key);
    }
    request
}

/// The request as another operation.
pub fn with_operation(mut request: Request, operation: Operation) -> Request {
    request.operation = operation;
    request
}
