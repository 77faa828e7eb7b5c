//! Whether an object must be (re)applied: compares the desired body with the live object the watch shows, on
//! the fields tiergate manages only, so a steady state (and a restart) makes zero writes; no I/O.

use kube::core::DynamicObject;
use serde_json::Value;

use super::kinds::APPLIED_HASH_LABEL;
use super::live::LiveObject;

/// Why an object is (or is not) applied; logged and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyNeed {
    /// The live object matches: no write.
    UpToDate,
    /// No live object.
    Missing,
    /// The desired body changed since tiergate last applied it (the hash label differs).
    Changed,
    /// Someone changed a field tiergate manages (the live value no longer contains the desired one).
    Drifted,
    /// The live object lacks only fields the API server dropped when this body was applied (an older CRD prunes
    /// them): re-applying cannot converge, so no write; reported once by the reconciler.
    DroppedByServer,
}

impl ApplyNeed {
    /// Whether this needs a write.
    pub fn needs_write(self) -> bool {
        !matches!(self, Self::UpToDate | Self::DroppedByServer)
    }
}

/// The hash of the body `object` was rendered from (`tiergate.io/applied-hash`, set by
/// [`super::desired::build_desired_set`]).
pub fn applied_hash(object: &DynamicObject) -> Option<&str> {
    object.metadata.labels.as_ref()?.get(APPLIED_HASH_LABEL).map(String::as_str)
}

/// Compares `desired` (hash-labelled by [`super::desired::build_desired_set`]) with the cached `live` object.
pub fn build_apply_need(desired: &DynamicObject, live: Option<&LiveObject>) -> ApplyNeed {
    build_apply_need_knowing_dropped(desired, live, &[])
}

/// [`build_apply_need`], knowing that the API server drops the fields at `dropped` (paths as
/// [`build_missing_paths`] names them) from this body: a live object lacking only those is
/// [`ApplyNeed::DroppedByServer`].
pub fn build_apply_need_knowing_dropped(
    desired: &DynamicObject,
    live: Option<&LiveObject>,
    dropped: &[String],
) -> ApplyNeed {
    let Some(live) = live else {
        return ApplyNeed::Missing;
    };
    if applied_hash(desired) != live.label(APPLIED_HASH_LABEL) {
        return ApplyNeed::Changed;
    }
    let labels_contained =
        desired.metadata.labels.iter().flatten().all(|(key, value)| live.label(key) == Some(value.as_str()));
    let annotations_contained =
        desired.metadata.annotations.iter().flatten().all(|(key, value)| live.annotations.get(key) == Some(value));
    let owners_contained = desired.metadata.owner_references.as_ref().is_none_or(|wanted| {
        let have = live.owner_references();
        wanted.iter().all(|owner| have.contains(owner))
    });
    let metadata_contained = labels_contained && annotations_contained && owners_contained;
    if !metadata_contained {
        return ApplyNeed::Drifted;
    }
    let body = live.body_value();
    if is_contained(&desired.data, &body) {
        ApplyNeed::UpToDate
    } else if !dropped.is_empty() && build_missing_paths(&desired.data, &body).iter().all(|path| dropped.contains(path))
    {
        ApplyNeed::DroppedByServer
    } else {
        ApplyNeed::Drifted
    }
}

/// Whether every field of `wanted` is present in `have` with a containing value. Objects may have extra keys
/// (server defaults, other managers' fields); lists must match item for item; `status` is never compared.
pub fn is_contained(wanted: &Value, have: &Value) -> bool {
    match (wanted, have) {
        (Value::Object(wanted), Value::Object(have)) => wanted
            .iter()
            .filter(|(key, _)| key.as_str() != "status")
            .all(|(key, value)| have.get(key).is_some_and(|have| is_contained(value, have))),
        (Value::Array(wanted), Value::Array(have)) => {
            wanted.len() == have.len() && wanted.iter().zip(have).all(|(wanted, have)| is_contained(wanted, have))
        }
        (Value::Number(wanted), Value::Number(have)) => wanted.as_f64() == have.as_f64(),
        _ => wanted == have,
    }
}

/// The paths (`spec.resourceGroups[0].flavors`) of `wanted`'s fields that `have` does not contain, in the terms of
/// [`is_contained`]: a key missing or holding another value is named where it differs, a list of another length by
/// the list's own path. Empty exactly when `is_contained(wanted, have)`. Names what a server-side apply dropped.
pub fn build_missing_paths(wanted: &Value, have: &Value) -> Vec<String> {
    let mut missing = Vec::new();
    collect_missing_paths(wanted, have, "", &mut missing);
    missing
}

fn collect_missing_paths(wanted: &Value, have: &Value, path: &str, missing: &mut Vec<String>) {
    match (wanted, have) {
        (Value::Object(wanted), Value::Object(have)) => {
            for (key, value) in wanted.iter().filter(|(key, _)| key.as_str() != "status") {
                let path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match have.get(key) {
                    Some(have) => collect_missing_paths(value, have, &path, missing),
                    None => missing.push(path),
                }
            }
        }
        (Value::Array(wanted), Value::Array(have)) if wanted.len() == have.len() => {
            for (index, (wanted, have)) in wanted.iter().zip(have).enumerate() {
                collect_missing_paths(wanted, have, &format!("{path}[{index}]"), missing);
            }
        }
        _ if is_contained(wanted, have) => {}
        _ => missing.push(path.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn live(value: Value) -> LiveObject {
        LiveObject::from_dynamic(super::super::kinds::KueueKind::LocalQueue, object(value))
    }

    fn queue(cluster_queue: &str, hash: &str) -> Value {
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "tiergate-gold", "namespace": "team-a",
                         "labels": {"app.kubernetes.io/managed-by": "tiergate", "tiergate.io/applied-hash": hash}},
            "spec": {"clusterQueue": cluster_queue},
        })
    }

    #[test]
    fn live_object_with_server_defaults_and_status_is_up_to_date() {
        let desired = object(queue("tiergate-gold", "h1"));
        let mut live_queue = queue("tiergate-gold", "h1");
        live_queue["spec"]["stopPolicy"] = json!("None");
        live_queue["status"] = json!({"pendingWorkloads": 3});
        live_queue["metadata"]["labels"]["extra"] = json!("kept");
        assert_eq!(build_apply_need(&desired, Some(&live(live_queue))), ApplyNeed::UpToDate);
    }

    #[test]
    fn missing_changed_and_drifted_objects_need_a_write() {
        let desired = object(queue("tiergate-gold", "h1"));
        assert_eq!(build_apply_need(&desired, None), ApplyNeed::Missing);
        assert_eq!(build_apply_need(&desired, Some(&live(queue("tiergate-gold", "h0")))), ApplyNeed::Changed);
        assert_eq!(build_apply_need(&desired, Some(&live(queue("edited-by-hand", "h1")))), ApplyNeed::Drifted);
    }

    #[test]
    fn removed_label_counts_as_drift() {
        let desired = object(queue("tiergate-gold", "h1"));
        let mut live_queue = queue("tiergate-gold", "h1");
        live_queue["metadata"]["labels"] = json!({"tiergate.io/applied-hash": "h1"});
        assert_eq!(build_apply_need(&desired, Some(&live(live_queue))), ApplyNeed::Drifted);
    }

    #[test]
    fn lists_must_match_item_for_item() {
        assert!(is_contained(&json!([{"a": 1}]), &json!([{"a": 1, "b": 2}])));
        assert!(!is_contained(&json!([{"a": 1}]), &json!([{"a": 1}, {"a": 2}])));
        assert!(is_contained(&json!({"value": 100}), &json!({"value": 100.0})));
    }

    #[test]
    fn a_field_the_server_drops_is_no_reason_to_write_but_other_drift_still_is() {
        let mut body = queue("tiergate-gold", "h1");
        body["spec"]["admissionScope"] = json!({"admissionMode": "UsageBasedAdmissionFairSharing"});
        let desired = object(body);
        let pruned = live(queue("tiergate-gold", "h1"));
        let dropped = ["spec.admissionScope".to_owned()];
        assert_eq!(build_apply_need(&desired, Some(&pruned)), ApplyNeed::Drifted);
        let need = build_apply_need_knowing_dropped(&desired, Some(&pruned), &dropped);
        assert_eq!(need, ApplyNeed::DroppedByServer);
        assert!(!need.needs_write());
        let edited = live(queue("edited-by-hand", "h1"));
        assert_eq!(build_apply_need_knowing_dropped(&desired, Some(&edited), &dropped), ApplyNeed::Drifted);
    }

    #[test]
    fn missing_paths_name_what_an_apply_dropped_and_are_empty_exactly_when_contained() {
        let wanted = json!({"spec": {"a": 1, "fairSharing": {"weight": "2"}, "groups": [{"x": 1}, {"y": 2}]},
                            "status": {"ignored": true}});
        let pruned = json!({"spec": {"a": 1, "groups": [{"x": 1}, {}]}});
        assert_eq!(build_missing_paths(&wanted, &pruned), ["spec.fairSharing", "spec.groups[1].y"]);
        let shorter = json!({"spec": {"a": 2, "fairSharing": {"weight": "2"}, "groups": [{"x": 1}]}});
        assert_eq!(build_missing_paths(&wanted, &shorter), ["spec.a", "spec.groups"]);
        let cases = [(&wanted, &pruned), (&wanted, &shorter), (&wanted, &wanted), (&pruned, &wanted)];
        for (wanted, have) in cases {
            assert_eq!(build_missing_paths(wanted, have).is_empty(), is_contained(wanted, have), "{wanted} in {have}");
        }
    }
}
