//! The admission request tiergate decides on: the envelope fields the rules read, and each object held once, as
//! its lean JSON (metadata included, `admission::lean`), for the decision, placement and scoring to borrow; no I/O.

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube_core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube_core::{DynamicObject, GroupVersionKind, Status, TypeMeta};
use serde::Deserialize;
use serde_json::Value;

/// The metadata fields no rule reads nor patches, left out of every object the decision sees: `managedFields`
/// (often most of the object's bytes) and the server-set bookkeeping. Names, labels, annotations, owner
/// references, finalizers and `deletionTimestamp` are read and stay.
pub(crate) const UNREAD_METADATA: [&str; 6] =
    ["managedFields", "uid", "resourceVersion", "generation", "creationTimestamp", "selfLink"];

/// One admission request. `object` and `old_object` are the objects as JSON without what the lean view skips
/// (unread metadata such as `managedFields`, unread `env` entries), read once from the body; every rule borrows
/// them.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The review's apiVersion and kind, echoed in the response.
    pub types: TypeMeta,
    /// The request's UID, echoed in the response.
    pub uid: String,
    /// The object's group, version and kind.
    pub kind: GroupVersionKind,
    /// The subresource, if the request is for one.
    pub sub_resource: Option<String>,
    /// The object's name (empty on a CREATE with `generateName`).
    pub name: String,
    /// The object's namespace (none for a cluster-scoped object).
    pub namespace: Option<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// Who sent it.
    pub user_info: UserInfo,
    /// A dry run: decided, nothing recorded.
    pub dry_run: bool,
    /// The object as it will be stored, lean.
    pub object: Option<Value>,
    /// The object as stored before an UPDATE (or DELETE), lean.
    pub old_object: Option<Value>,
}

impl Request {
    /// An allowing response to this request, without a patch (the start of every answer).
    pub fn allowed(&self) -> AdmissionResponse {
        // kube-core builds a response only from its own request type or as `invalid`, whose fields are all set
        // here.
        let mut response = AdmissionResponse::invalid("");
        response.types = self.types.clone();
        response.uid = self.uid.clone();
        response.allowed = true;
        response.result = Status::default();
        response
    }
}

/// A request built by kube-core (how the test suites build theirs): its objects as JSON without
/// `metadata.managedFields`. The webhook and `tiergate explain` read theirs lean instead (`lean_request`).
impl From<AdmissionRequest<DynamicObject>> for Request {
    fn from(request: AdmissionRequest<DynamicObject>) -> Self {
        Self {
            types: request.types,
            uid: request.uid,
            kind: request.kind,
            sub_resource: request.sub_resource,
            name: request.name,
            namespace: request.namespace,
            operation: request.operation,
            user_info: request.user_info,
            dry_run: request.dry_run,
            object: request.object.as_ref().map(object_json),
            old_object: request.old_object.as_ref().map(object_json),
        }
    }
}

/// `object` as JSON without the unread metadata (`UNREAD_METADATA`). A `DynamicObject` is JSON already (strings,
/// maps and JSON values), so serializing it cannot fail; `null` stands for the impossible failure rather than a
/// panic.
fn object_json(object: &DynamicObject) -> Value {
    let mut json = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(metadata) = json.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.retain(|key, _| !UNREAD_METADATA.contains(&key.as_str()));
    }
    json
}

/// The typed metadata of an object held as JSON (placement and scoring read it typed); the error names what in
/// `metadata` is not Kubernetes' shape.
pub fn metadata_of(object: &Value) -> Result<ObjectMeta, serde_json::Error> {
    match object.get("metadata") {
        Some(metadata) => ObjectMeta::deserialize(metadata),
        None => Ok(ObjectMeta::default()),
    }
}

/// The owner references of an object held as JSON, read alone (the decision needs no other typed metadata).
pub fn owner_references(object: &Value) -> Result<Vec<OwnerReference>, serde_json::Error> {
    match object.get("metadata").and_then(|metadata| metadata.get("ownerReferences")) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(references) => Vec::<OwnerReference>::deserialize(references),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kube_core_request_keeps_its_objects_whole_but_their_managed_fields() {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u", "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"}, "operation": "CREATE",
            "userInfo": {"username": "alice"}, "namespace": "n",
            "object": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j",
                "managedFields": [{"manager": "m"}], "ownerReferences": [{"apiVersion": "v1", "kind": "X",
                "name": "o", "uid": "1", "controller": true}]}, "spec": {"parallelism": 2}}}});
        let review: kube_core::admission::AdmissionReview<DynamicObject> = serde_json::from_value(review).unwrap();
        let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        let request = Request::from(request);
        let object = request.object.as_ref().unwrap();
        assert_eq!(object["spec"], json!({"parallelism": 2}));
        assert_eq!(object["kind"], "Job");
        assert!(UNREAD_METADATA.iter().all(|key| object["metadata"].get(key).is_none()));
        assert_eq!(owner_references(object).unwrap()[0].name, "o");
        assert_eq!(metadata_of(object).unwrap().name.as_deref(), Some("j"));
        assert_eq!((request.allowed().uid.as_str(), request.allowed().allowed), ("u", true));
    }

    #[test]
    fn malformed_owner_references_are_an_error_not_none() {
        let object = json!({"metadata": {"ownerReferences": [{"kind": 3}]}});
        assert!(owner_references(&object).is_err());
        assert!(owner_references(&json!({"metadata": {}})).unwrap().is_empty());
    }
}
