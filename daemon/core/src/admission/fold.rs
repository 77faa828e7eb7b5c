//! The patch as kube-apiserver applies it cheapest: the edits deep inside one top-level member of the object (a
//! Job's `/spec/template/spec/nodeSelector`) folded into one `replace` of that member, built from the request's
//! full object with the same operations applied; pure, no I/O.
//!
//! kube-apiserver applies a webhook's patch with evanphx/json-patch v4: each object on an edited path is parsed,
//! and on the way out every parsed level is marshalled and compacted again by its parent, so an edit four levels
//! down passes over a Job's pod template about eight times, where one `replace /spec` passes over it three times
//! (the patch, the object, the result). On a 2-core API server that was 0.4 ms of CPU per GPU Job (issue 52,
//! docs/performance.md). The object the API server stores is the same either way: `fold_deep_edits` returns
//! `None` (keep the patch as built) whenever it cannot prove that, and the tests apply both patches to every
//! recorded review.

use std::collections::HashMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation, ReplaceOperation};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Pointer depth from which an edit is folded: `/spec/template/spec/nodeSelector` (4) and `/spec/suspend` beside
/// it are, a Pod's `/spec/nodeSelector` (2) alone is not: folding it saves nothing.
const FOLD_FROM_DEPTH: usize = 3;

/// The member holding the object's identity and the API server's bookkeeping (`managedFields`): never folded.
const METADATA: &str = "metadata";

/// The request's object inside a review body, borrowed as raw JSON (the lean view prunes parts of it).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    request: Option<Inner<'a>>,
}

#[derive(Deserialize)]
struct Inner<'a> {
    #[serde(borrow)]
    object: Option<&'a RawValue>,
}

/// `request.object` of a review body as sent, or `None` (no object, or a body the lean view read member by
/// member because a member repeats: then nothing is folded).
pub fn review_object(body: &[u8]) -> Option<&RawValue> {
    serde_json::from_slice::<Envelope<'_>>(body).ok()?.request?.object
}

/// `patch` with the edits of each top-level member (but `metadata`) that reach [`FOLD_FROM_DEPTH`] folded into
/// one `replace` of that member, in the place of its first edit; `None` when nothing is folded or any step fails.
pub fn fold_deep_edits(patch: &Patch, object: &RawValue) -> Option<Patch> {
    let members = members_to_fold(patch)?;
    let raw_members: HashMap<&str, &RawValue> = serde_json::from_str(object.get()).ok()?;
    let mut folded: HashMap<&str, Value> = HashMap::with_capacity(members.len());
    for member in &members {
        let value: Value = serde_json::from_str(raw_members.get(member.as_str())?.get()).ok()?;
        let mut document = Value::Object([(member.clone(), value)].into_iter().collect());
        let edits: Vec<PatchOperation> =
            patch.0.iter().filter(|operation| first_token(operation).as_deref() == Some(member)).cloned().collect();
        json_patch::patch(&mut document, &edits).ok()?;
        folded.insert(member.as_str(), document.get_mut(member.as_str())?.take());
    }
    let mut operations = Vec::with_capacity(patch.0.len());
    for operation in &patch.0 {
        let Some(member) = first_token(operation).filter(|member| members.contains(member)) else {
            operations.push(operation.clone());
            continue;
        };
        if let Some(value) = folded.remove(member.as_str()) {
            let path = PointerBuf::from_tokens([member.as_str()]);
            operations.push(PatchOperation::Replace(ReplaceOperation { path, value }));
        }
    }
    Some(Patch(operations))
}

/// The members worth folding: every edit under them is an add, replace or remove below the member itself, and
/// one reaches [`FOLD_FROM_DEPTH`]. `None` when there is none.
fn members_to_fold(patch: &Patch) -> Option<Vec<String>> {
    let mut deep: Vec<String> = Vec::new();
    let mut unfoldable: Vec<String> = Vec::new();
    for operation in &patch.0 {
        let member = first_token(operation)?;
        let depth = operation.path().tokens().count();
        let simple =
            matches!(operation, PatchOperation::Add(_) | PatchOperation::Replace(_) | PatchOperation::Remove(_));
        if member == METADATA || depth < 2 || !simple {
            unfoldable.push(member);
        } else if depth >= FOLD_FROM_DEPTH && !deep.contains(&member) {
            deep.push(member);
        }
    }
    deep.retain(|member| !unfoldable.contains(member));
    (!deep.is_empty()).then_some(deep)
}

/// The top-level member an operation edits (unescaped), `None` for the whole document.
fn first_token(operation: &PatchOperation) -> Option<String> {
    operation.path().tokens().next().map(|token| token.decoded().into_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patch(operations: Value) -> Patch {
        serde_json::from_value(operations).unwrap()
    }

    fn raw(object: &Value) -> Box<RawValue> {
        RawValue::from_string(object.to_string()).unwrap()
    }

    fn applied(object: &Value, patch: &Patch) -> Value {
        let mut object = object.clone();
        json_patch::patch(&mut object, patch).unwrap();
        object
    }

    fn job() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "labels": {"app": "a/b~c"}},
            "spec": {"suspend": false, "backoffLimit": 6, "completions": 1.5e3,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "main", "env": [{"name": "A", "value": "1"}],
                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
        })
    }

    fn confining() -> Patch {
        patch(json!([
            {"op": "add", "path": "/metadata/annotations", "value": {"tiergate.io/tier": "bronze"}},
            {"op": "replace", "path": "/spec/suspend", "value": true},
            {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"gpu.nvidia.com/class": "l4"}},
            {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "B", "value": "2"}},
            {"op": "remove", "path": "/spec/backoffLimit"},
            {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "tiergate-bronze"}
        ]))
    }

    #[test]
    fn deep_edits_of_spec_become_one_replace_with_the_same_result() {
        let folded = fold_deep_edits(&confining(), &raw(&job())).unwrap();
        let paths: Vec<String> = folded.0.iter().map(|operation| operation.path().to_string()).collect();
        assert_eq!(paths, ["/metadata/annotations", "/spec", "/metadata/labels/kueue.x-k8s.io~1queue-name"]);
        assert_eq!(applied(&job(), &folded), applied(&job(), &confining()));
    }

    #[test]
    fn a_tenants_odd_member_content_comes_back_as_the_same_values() {
        // What a tenant controls inside the folded member: escaped keys, unicode, floats and integers at the
        // edges of what the API server encodes (a CRD keeps numbers as int64 or float64).
        let mut odd = job();
        odd["spec"]["template"]["metadata"] = json!({"annotations": {"a/b~c": "é\u{2028}\"", "": "empty"}});
        odd["spec"]["x"] = json!({"big": 9_223_372_036_854_775_807_i64, "neg": -9_223_372_036_854_775_808_i64,
                                  "float": 1.2345678901234567e19, "tiny": 5e-324, "zero": -0.0, "list": [[], {}]});
        let raw_odd = RawValue::from_string(serde_json::to_string(&odd).unwrap()).unwrap();
        let folded = fold_deep_edits(&confining(), &raw_odd).unwrap();
        assert_eq!(applied(&odd, &folded), applied(&odd, &confining()));
    }

    #[test]
    fn shallow_edits_and_metadata_are_left_as_built() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let shallow = patch(json!([
            {"op": "add", "path": "/spec/nodeSelector", "value": {"gpu.nvidia.com/class": "l4"}},
            {"op": "add", "path": "/metadata/annotations/x", "value": "y"}
        ]));
        assert!(fold_deep_edits(&shallow, &raw(&pod)).is_none());
        let metadata_only = patch(json!([{"op": "add", "path": "/metadata/labels/a~1b", "value": "c"}]));
        assert!(fold_deep_edits(&metadata_only, &raw(&job())).is_none());
    }

    #[test]
    fn a_member_edited_as_a_whole_or_missing_is_not_folded() {
        let whole = patch(json!([
            {"op": "add", "path": "/spec", "value": {}},
            {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {}}
        ]));
        assert!(fold_deep_edits(&whole, &raw(&job())).is_none());
        let missing = patch(json!([{"op": "add", "path": "/status/a/b", "value": 1}]));
        assert!(fold_deep_edits(&missing, &raw(&job())).is_none());
    }

    #[test]
    fn an_edit_that_does_not_apply_keeps_the_patch_as_built() {
        let broken = patch(json!([{"op": "replace", "path": "/spec/template/nope/x", "value": 1}]));
        assert!(fold_deep_edits(&broken, &raw(&job())).is_none());
    }

    #[test]
    fn the_object_is_read_from_the_review_body_as_sent() {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "request": {"uid": "u", "object": job()}})
        .to_string();
        let object: Value = serde_json::from_str(review_object(body.as_bytes()).unwrap().get()).unwrap();
        assert_eq!(object, job());
        assert!(review_object(br#"{"request": {"uid": "u"}}"#).is_none());
        assert!(review_object(br#"{"request": {"object": 1, "object": 2}}"#).is_none());
    }
}
