//! The marks the in-server gate's MutatingAdmissionPolicies leave on what they edit, and how the webhook takes
//! those edits back before it decides; pure.
//!
//! The API server runs MutatingAdmissionPolicies before mutating webhooks. When the webhook answers, it must
//! decide on what the tenant sent, not on the policy's stand-in edits (a class selector the policy added would
//! read as the tenant's own choice and skip the placement strategy; a clamped priority would hide the label the
//! tenant asked for). So each edit leaves a mark saying what it replaced, and the webhook puts the object back as
//! sent ([`undo_gate_edits`]) and decides on that. A tenant can forge a mark, but undoing only ever produces an
//! object the tenant could have sent directly, which the webhook then judges by every rule; and the policies
//! never read a mark (they overwrite or remove any they find). docs/admission.md "The in-server gate".

use serde_json::Value;
use tiergate_workloads::{
    MAX_EXEC_TIME_LABEL, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, TemplateLayout, WorkloadAdapter, set_pointer,
};

use super::classes::toleration_values;
use super::patch::{Lookup, child_pointer};
use crate::policy::GpuClass;

/// Set when the policy set the queue label: the label's value before (empty when there was none).
pub const QUEUE_WAS_MARK: &str = "gate.tiergate.io/queue-was";
/// Set when the policy added the tier's class selector and tolerations: the pod-spec pointers it edited, each
/// followed by a comma (only pointers of [`tiergate_workloads::TemplateLayout::fixed_spec_pointers`] count).
pub const CLASS_ADDED_MARK: &str = "gate.tiergate.io/class-added";
/// Set when the policy clamped the priority-class label to the tier's ceiling: the label's value before.
pub const PRIORITY_WAS_MARK: &str = "gate.tiergate.io/priority-was";
/// Set when the policy set the run-time label (`kueue.x-k8s.io/max-exec-time-seconds`) where it was missing: the
/// metadata pointers it labelled, each followed by a comma (only the kind's run-time places count).
pub const RUN_TIME_ADDED_MARK: &str = "gate.tiergate.io/run-time-added";
/// Every mark, in the order the policies write them.
pub const GATE_MARKS: [&str; 4] = [QUEUE_WAS_MARK, CLASS_ADDED_MARK, PRIORITY_WAS_MARK, RUN_TIME_ADDED_MARK];

/// `object` as it was before the in-server gate's policies edited it, or `None` when it carries no mark.
///
/// `primary` is the class the policies add (the tier's `gpuClass`). The queue label and the priority label get
/// their marked values back (an empty queue mark removes the label); on each marked template, the class's node
/// labels are taken out of `nodeSelector` where they have the class's value, and the class's tolerations out of
/// `tolerations`; the run-time label is removed where the mark names a place of the kind. Every mark is removed. A
/// map or list emptied stays, empty: the request object may be a lean view (`lean_request`) that leaves out fields of
/// the same map, and the difference to it becomes the patch.
pub fn undo_gate_edits(object: &Value, adapter: &WorkloadAdapter, primary: Option<&GpuClass>) -> Option<Value> {
    let annotations = object.lookup("/metadata/annotations").and_then(Value::as_object)?;
    let marks: Vec<(&str, &str)> = GATE_MARKS
        .iter()
        .filter_map(|mark| annotations.get(*mark).map(|value| (*mark, value.as_str().unwrap_or_default())))
        .collect();
    if marks.is_empty() {
        return None;
    }
    let mut undone = object.clone();
    for (mark, value) in marks {
        set_pointer(&mut undone, &child_pointer("/metadata/annotations", mark), None);
        match mark {
            QUEUE_WAS_MARK => {
                let labels = format!("{}/labels", adapter.queue_labels_at);
                let was = (!value.is_empty()).then(|| Value::String(value.to_owned()));
                set_pointer(&mut undone, &child_pointer(&labels, QUEUE_NAME_LABEL), was);
            }
            PRIORITY_WAS_MARK if !value.is_empty() => {
                let label = child_pointer("/metadata/labels", PRIORITY_CLASS_LABEL);
                set_pointer(&mut undone, &label, Some(Value::String(value.to_owned())));
            }
            RUN_TIME_ADDED_MARK => {
                let mut places = adapter.run_time_labels_at();
                if adapter.templates == TemplateLayout::Pod {
                    places.push("/metadata".to_owned());
                }
                for at in value.split(',').filter(|pointer| places.iter().any(|place| place == pointer)) {
                    set_pointer(&mut undone, &child_pointer(&format!("{at}/labels"), MAX_EXEC_TIME_LABEL), None);
                }
            }
            CLASS_ADDED_MARK => {
                let Some(class) = primary else { continue };
                let fixed = adapter.templates.fixed_spec_pointers();
                for spec in value.split(',').filter(|pointer| fixed.iter().any(|fixed| fixed == pointer)) {
                    remove_class(&mut undone, spec, class);
                }
            }
            _ => {}
        }
    }
    Some(undone)
}

/// Takes `class`'s node labels and tolerations out of the pod spec at `spec`.
fn remove_class(object: &mut Value, spec: &str, class: &GpuClass) {
    let selector = format!("{spec}/nodeSelector");
    if let Some(map) = object.lookup_mut(&selector).and_then(Value::as_object_mut) {
        for (key, value) in &class.node_labels {
            if map.get(key).and_then(Value::as_str) == Some(value.as_str()) {
                map.remove(key);
            }
        }
    }
    // The webhook's own conversion (a toleration that cannot be serialized matches nothing here).
    let tolerations = toleration_values(class).unwrap_or_default();
    let list = format!("{spec}/tolerations");
    if let Some(items) = object.lookup_mut(&list).and_then(Value::as_array_mut) {
        items.retain(|item| !tolerations.contains(item));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tiergate_workloads::adapter_for;

    fn policy() -> crate::policy::TierPolicySpec {
        crate::inputs::parse_policy(crate::inputs::SAMPLE_POLICY, "sample").unwrap().spec
    }

    fn job(annotations: Value, selector: Value, tolerations: Value) -> Value {
        json!({"metadata": {"name": "j", "annotations": annotations, "labels": {QUEUE_NAME_LABEL: "tiergate-bronze"}},
               "spec": {"template": {"spec": {"nodeSelector": selector, "tolerations": tolerations,
                        "containers": [{"name": "c"}]}}}})
    }

    #[test]
    fn an_object_without_marks_is_not_undone() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        assert_eq!(undo_gate_edits(&json!({"metadata": {"annotations": {"a": "b"}}}), adapter, None), None);
        assert_eq!(undo_gate_edits(&json!({"metadata": {}}), adapter, None), None);
    }

    #[test]
    fn marked_edits_are_taken_back_and_every_mark_removed() {
        let policy = policy();
        let class = policy.gpu_class("l4").unwrap();
        let tolerations: Vec<Value> =
            class.pod_tolerations().iter().map(|toleration| serde_json::to_value(toleration).unwrap()).collect();
        let mut selector = serde_json::Map::new();
        for (key, value) in &class.node_labels {
            selector.insert(key.clone(), json!(value));
        }
        selector.insert("team".into(), json!("a"));
        let mut all_tolerations = vec![json!({"key": "own", "operator": "Exists"})];
        all_tolerations.extend(tolerations);
        let sent = job(
            json!({QUEUE_WAS_MARK: "", CLASS_ADDED_MARK: "/spec/template/spec,", "keep": "me"}),
            Value::Object(selector),
            Value::Array(all_tolerations),
        );
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        let undone = undo_gate_edits(&sent, adapter, Some(class)).unwrap();
        assert_eq!(undone["metadata"]["annotations"], json!({"keep": "me"}));
        assert_eq!(undone["metadata"]["labels"], json!({}), "{undone}");
        assert_eq!(undone["spec"]["template"]["spec"]["nodeSelector"], json!({"team": "a"}));
        assert_eq!(undone["spec"]["template"]["spec"]["tolerations"], json!([{"key": "own", "operator": "Exists"}]));
    }

    #[test]
    fn the_run_time_label_is_taken_back_only_where_the_mark_names_a_place_of_the_kind() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        let mut sent = job(json!({RUN_TIME_ADDED_MARK: "/metadata,/spec/template/metadata,"}), json!({}), json!([]));
        sent["metadata"]["labels"][MAX_EXEC_TIME_LABEL] = json!("14400");
        sent["spec"]["template"]["metadata"] = json!({"labels": {MAX_EXEC_TIME_LABEL: "60"}});
        let undone = undo_gate_edits(&sent, adapter, None).unwrap();
        assert_eq!(undone["metadata"]["labels"], json!({QUEUE_NAME_LABEL: "tiergate-bronze"}));
        assert_eq!(undone["spec"]["template"]["metadata"]["labels"][MAX_EXEC_TIME_LABEL], "60", "not a place of a Job");
        let lws = adapter_for("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet").unwrap();
        let worker = "/spec/leaderWorkerTemplate/workerTemplate/metadata";
        let sent = json!({"metadata": {"annotations": {RUN_TIME_ADDED_MARK: format!("{worker},")}},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": {"labels": {MAX_EXEC_TIME_LABEL: "14400"}}}}}});
        let undone = undo_gate_edits(&sent, lws, None).unwrap();
        assert_eq!(undone["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"], json!({}));
    }

    #[test]
    fn a_forged_template_pointer_is_ignored_and_a_forged_queue_mark_only_restores_a_label() {
        let policy = policy();
        let class = policy.gpu_class("l4").unwrap();
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        let sent = job(
            json!({CLASS_ADDED_MARK: "/metadata,/spec,", QUEUE_WAS_MARK: "tiergate-gold", PRIORITY_WAS_MARK: "critical"}),
            json!({"gpu.nvidia.com/class": "l4"}),
            json!([]),
        );
        let undone = undo_gate_edits(&sent, adapter, Some(class)).unwrap();
        assert_eq!(undone["metadata"]["annotations"], json!({}));
        assert_eq!(undone["metadata"]["labels"][QUEUE_NAME_LABEL], "tiergate-gold");
        assert_eq!(undone["metadata"]["labels"][PRIORITY_CLASS_LABEL], "critical");
        assert_eq!(undone["spec"]["template"]["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "l4"}));
    }
}
