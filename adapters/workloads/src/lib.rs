//! Workload-kind adapters: where each kind keeps its pod template(s), how it is suspended, whether tiergate queues
//! it in Kueue and which fields it never patches on UPDATE; pure functions over `serde_json::Value`, no I/O.
//!
//! Every kind is one [`WorkloadAdapter`] row in [`ADAPTERS`]; adding a kind is adding one row. The functions work
//! on the raw JSON object so no field tiergate does not know about is ever lost.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

/// Label Kueue reads the LocalQueue name from.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Label Kueue reads the WorkloadPriorityClass from.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";

/// Where one pod template lives inside an object, as JSON pointers (RFC 6901).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodTemplatePointers {
    /// The template's `metadata` (for a Pod, the Pod's own metadata).
    pub metadata: String,
    /// The `PodSpec`.
    pub spec: String,
}

/// How a kind nests its pod templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateLayout {
    /// The object is itself a Pod: `/metadata` and `/spec`.
    Pod,
    /// One template at a fixed pointer (the template object holding `metadata` and `spec`).
    Single(&'static str),
    /// One template per element of an array, at `item` below each element (JobSet `replicatedJobs`).
    PerItem {
        /// Pointer to the array.
        list: &'static str,
        /// Pointer to the template object inside each element.
        item: &'static str,
    },
}

/// How tiergate hands a kind to Kueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queueing {
    /// Kueue manages the kind through `kueue.x-k8s.io/queue-name` on the object and gates it with `suspend`:
    /// tiergate sets the tier's LocalQueue when absent and `suspend: true` on CREATE (Job, JobSet).
    SuspendedWithQueueLabel {
        /// Pointer to the boolean `suspend` field.
        suspend: &'static str,
    },
    /// tiergate does not queue the kind itself: it only sets GPU class, placement and annotations. Kueue may
    /// still manage it when the user labels it (Deployment/StatefulSet/plain Pod integrations need Kueue's pod
    /// integration and its scheduling gate, which tiergate does not add), and pods owned by a queued kind are
    /// accounted through their owner.
    NotQueued,
}

/// One workload kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadAdapter {
    /// API group (`""` for core).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Where the pod templates are.
    pub templates: TemplateLayout,
    /// How Kueue gets the workload.
    pub queueing: Queueing,
    /// Pointers tiergate never changes on UPDATE: fields Kubernetes makes immutable after creation, and fields
    /// whose change would disturb a running workload (suspending a running Job, moving it between queues).
    pub immutable_on_update: &'static [&'static str],
}

/// Every kind tiergate mutates.
pub static ADAPTERS: &[WorkloadAdapter] = &[
    WorkloadAdapter {
        group: "batch",
        version: "v1",
        kind: "Job",
        templates: TemplateLayout::Single("/spec/template"),
        queueing: Queueing::SuspendedWithQueueLabel { suspend: "/spec/suspend" },
        // The pod template is immutable once created (Kubernetes only lets a suspended, never-started Job change
        // scheduling directives, and that is Kueue's to do); Kueue forbids moving a running Job between queues.
        immutable_on_update: &["/spec/template", "/spec/suspend", "/metadata/labels/kueue.x-k8s.io~1queue-name"],
    },
    WorkloadAdapter {
        group: "jobset.x-k8s.io",
        version: "v1alpha2",
        kind: "JobSet",
        templates: TemplateLayout::PerItem { list: "/spec/replicatedJobs", item: "/template/spec/template" },
        queueing: Queueing::SuspendedWithQueueLabel { suspend: "/spec/suspend" },
        immutable_on_update: &["/spec/replicatedJobs", "/spec/suspend", "/metadata/labels/kueue.x-k8s.io~1queue-name"],
    },
    WorkloadAdapter {
        group: "",
        version: "v1",
        kind: "Pod",
        templates: TemplateLayout::Pod,
        queueing: Queueing::NotQueued,
        // A Pod's spec is immutable apart from image, activeDeadlineSeconds, added tolerations and removed
        // scheduling gates; tiergate changes none of it after creation.
        immutable_on_update: &["/spec"],
    },
    WorkloadAdapter {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        templates: TemplateLayout::Single("/spec/template"),
        queueing: Queueing::NotQueued,
        immutable_on_update: &[],
    },
    WorkloadAdapter {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        templates: TemplateLayout::Single("/spec/template"),
        queueing: Queueing::NotQueued,
        immutable_on_update: &[],
    },
];

/// A kind whose pod template tiergate reads but never mutates (no row in [`ADAPTERS`]): placement validates the
/// strategies on it at its admission. A ReplicaSet's template belongs to its Deployment (the Deployment controller
/// would see a foreign template and roll out again); a CronJob stamps out Jobs, which tiergate admits itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateOwner {
    /// API group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Where the pod templates are.
    pub templates: TemplateLayout,
}

/// Kinds with pod templates that tiergate only reads.
pub static READ_ONLY_TEMPLATE_OWNERS: &[TemplateOwner] = &[
    TemplateOwner { group: "apps", kind: "ReplicaSet", templates: TemplateLayout::Single("/spec/template") },
    TemplateOwner {
        group: "batch",
        kind: "CronJob",
        templates: TemplateLayout::Single("/spec/jobTemplate/spec/template"),
    },
];

/// The adapter for a group/version/kind, if tiergate handles it.
pub fn adapter_for(group: &str, version: &str, kind: &str) -> Option<&'static WorkloadAdapter> {
    ADAPTERS.iter().find(|adapter| adapter.group == group && adapter.version == version && adapter.kind == kind)
}

/// Where a kind keeps its pod templates, for every kind tiergate knows: the rows of [`ADAPTERS`] (any version)
/// and [`READ_ONLY_TEMPLATE_OWNERS`].
pub fn template_layout(group: &str, kind: &str) -> Option<TemplateLayout> {
    let adapter = ADAPTERS.iter().find(|adapter| adapter.group == group && adapter.kind == kind);
    adapter.map(|adapter| adapter.templates).or_else(|| {
        READ_ONLY_TEMPLATE_OWNERS
            .iter()
            .find(|owner| owner.group == group && owner.kind == kind)
            .map(|owner| owner.templates)
    })
}

/// The controlling owner reference of an object (`controller: true`), if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_deref().unwrap_or_default().iter().find(|owner| owner.controller == Some(true))
}

impl TemplateLayout {
    /// The pod templates present in `object`, in document order.
    pub fn pod_templates(self, object: &Value) -> Vec<PodTemplatePointers> {
        match self {
            TemplateLayout::Pod => {
                vec![PodTemplatePointers { metadata: "/metadata".to_owned(), spec: "/spec".to_owned() }]
            }
            TemplateLayout::Single(template) => match object.pointer(template) {
                Some(Value::Object(_)) => vec![template_pointers(template)],
                _ => Vec::new(),
            },
            TemplateLayout::PerItem { list, item } => {
                let count = object.pointer(list).and_then(Value::as_array).map_or(0, Vec::len);
                (0..count)
                    .map(|index| format!("{list}/{index}{item}"))
                    .filter(|template| object.pointer(template).is_some_and(Value::is_object))
                    .map(|template| template_pointers(&template))
                    .collect()
            }
        }
    }

    /// The pod specs present in `object`, in document order.
    pub fn pod_specs(self, object: &Value) -> Vec<&Value> {
        self.pod_templates(object).iter().filter_map(|template| object.pointer(&template.spec)).collect()
    }

    /// Whether any pod spec of `object` requests or limits one of `resources` (see [`requests_any`]).
    pub fn requests_any(self, object: &Value, resources: &[&str]) -> bool {
        self.pod_specs(object).into_iter().any(|spec| requests_any(spec, resources))
    }
}

impl WorkloadAdapter {
    /// The pod templates present in `object`, in document order.
    pub fn pod_templates(&self, object: &Value) -> Vec<PodTemplatePointers> {
        self.templates.pod_templates(object)
    }

    /// Whether tiergate queues this kind in Kueue itself (queue label and `suspend`).
    pub fn is_queued(&self) -> bool {
        matches!(self.queueing, Queueing::SuspendedWithQueueLabel { .. })
    }

    /// Whether `object` is suspended (false for kinds without `suspend`).
    pub fn is_suspended(&self, object: &Value) -> bool {
        match self.queueing {
            Queueing::SuspendedWithQueueLabel { suspend } => {
                object.pointer(suspend).and_then(Value::as_bool).unwrap_or(false)
            }
            Queueing::NotQueued => false,
        }
    }
}

fn template_pointers(template: &str) -> PodTemplatePointers {
    PodTemplatePointers { metadata: format!("{template}/metadata"), spec: format!("{template}/spec") }
}

/// Whether any container or init container of `pod_spec` requests or limits one of `resources` with a non-zero
/// quantity.
pub fn requests_any(pod_spec: &Value, resources: &[&str]) -> bool {
    ["containers", "initContainers"]
        .iter()
        .filter_map(|field| pod_spec.get(field).and_then(Value::as_array))
        .flatten()
        .filter_map(|container| container.get("resources"))
        .flat_map(|resources_field| ["requests", "limits"].map(|kind| resources_field.get(kind)))
        .flatten()
        .filter_map(Value::as_object)
        .flatten()
        .any(|(name, quantity)| resources.contains(&name.as_str()) && !is_zero_quantity(quantity))
}

/// A quantity whose number is zero (`0`, `00`, `0.0`, `0m`); also anything that is not a quantity, which the API
/// server would have rejected.
fn is_zero_quantity(quantity: &Value) -> bool {
    match quantity {
        Value::String(text) => {
            let number = text.trim().trim_start_matches('+');
            let digits: Vec<char> = number.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            digits.iter().all(|c| matches!(c, '0' | '.'))
        }
        Value::Number(number) => number.as_f64() == Some(0.0),
        _ => true,
    }
}

/// Splits an RFC 6901 pointer into unescaped tokens.
pub fn pointer_tokens(pointer: &str) -> Vec<String> {
    pointer.split('/').skip(1).map(|token| token.replace("~1", "/").replace("~0", "~")).collect()
}

/// Sets (`Some`) or removes (`None`) the value at `pointer`, creating intermediate objects when setting.
/// Returns false when a non-object sits on the path (nothing is changed then).
pub fn set_pointer(root: &mut Value, pointer: &str, value: Option<Value>) -> bool {
    let tokens = pointer_tokens(pointer);
    let Some((last, parents)) = tokens.split_last() else {
        if let Some(value) = value {
            *root = value;
        }
        return true;
    };
    let mut current = root;
    for token in parents {
        current = match current {
            Value::Object(map) => {
                if value.is_none() && !map.contains_key(token) {
                    return true;
                }
                map.entry(token.clone()).or_insert_with(|| Value::Object(serde_json::Map::new()))
            }
            Value::Array(items) => match token.parse::<usize>().ok().and_then(|index| items.get_mut(index)) {
                Some(item) => item,
                None => return value.is_none(),
            },
            Value::Null if value.is_some() => {
                *current = Value::Object(serde_json::Map::new());
                match current {
                    Value::Object(map) => map.entry(token.clone()).or_insert_with(|| Value::Null),
                    _ => return false,
                }
            }
            _ => return value.is_none(),
        };
    }
    match (current, value) {
        (Value::Object(map), Some(value)) => {
            map.insert(last.clone(), value);
            true
        }
        (Value::Object(map), None) => {
            map.remove(last);
            true
        }
        (current @ Value::Null, Some(value)) => {
            let mut map = serde_json::Map::new();
            map.insert(last.clone(), value);
            *current = Value::Object(map);
            true
        }
        (_, None) => true,
        (_, Some(_)) => false,
    }
}

/// Copies the value at each pointer from `original` into `mutated` (removing it when `original` lacks it), so a
/// mutation leaves those fields exactly as they were.
pub fn restore_pointers(original: &Value, mutated: &mut Value, pointers: &[&str]) -> bool {
    pointers.iter().all(|pointer| set_pointer(mutated, pointer, original.pointer(pointer).cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(limits: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}}})
    }

    #[test]
    fn every_adapter_is_found_by_its_group_version_kind() {
        for adapter in ADAPTERS {
            assert_eq!(adapter_for(adapter.group, adapter.version, adapter.kind), Some(adapter));
        }
        assert_eq!(adapter_for("batch", "v1", "CronJob"), None);
    }

    #[test]
    fn job_template_pointers_reach_its_pod_spec() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        let object = job(json!({"nvidia.com/gpu": "1"}));
        let templates = adapter.pod_templates(&object);
        assert_eq!(templates.len(), 1);
        assert!(object.pointer(&templates[0].spec).unwrap().get("containers").is_some());
        assert_eq!(templates[0].metadata, "/spec/template/metadata");
    }

    #[test]
    fn jobset_has_one_template_per_replicated_job() {
        let adapter = adapter_for("jobset.x-k8s.io", "v1alpha2", "JobSet").unwrap();
        let object = json!({"spec": {"replicatedJobs": [
            {"name": "a", "template": {"spec": {"template": {"spec": {"containers": []}}}}},
            {"name": "b", "template": {"spec": {"template": {"spec": {"containers": []}}}}}
        ]}});
        let specs: Vec<String> = adapter.pod_templates(&object).into_iter().map(|t| t.spec).collect();
        assert_eq!(
            specs,
            [
                "/spec/replicatedJobs/0/template/spec/template/spec",
                "/spec/replicatedJobs/1/template/spec/template/spec"
            ]
        );
    }

    #[test]
    fn gpu_limits_and_init_container_requests_count_but_zero_does_not() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        let gpu = &["nvidia.com/gpu"];
        let with_limit = job(json!({"nvidia.com/gpu": "1"}));
        let spec = with_limit.pointer(&adapter.pod_templates(&with_limit)[0].spec).unwrap();
        assert!(requests_any(spec, gpu));
        assert!(!requests_any(job(json!({"nvidia.com/gpu": "0"})).pointer("/spec/template/spec").unwrap(), gpu));
        let init = json!({"containers": [{"name": "c"}],
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": 2}}}]});
        assert!(requests_any(&init, gpu));
        assert!(!requests_any(&init, &["amd.com/gpu"]));
    }

    #[test]
    fn zero_in_any_spelling_is_no_request_and_a_fraction_is_one() {
        let spec = |quantity: &str| json!({"containers": [{"resources": {"limits": {"nvidia.com/gpu": quantity}}}]});
        for zero in ["0", "00", "0.0", "0m", "+0", " 0 "] {
            assert!(!requests_any(&spec(zero), &["nvidia.com/gpu"]), "{zero}");
        }
        for some in ["1", "500m", "0.5", "10"] {
            assert!(requests_any(&spec(some), &["nvidia.com/gpu"]), "{some}");
        }
    }

    #[test]
    fn template_layout_knows_the_adapters_and_the_read_only_owners() {
        assert_eq!(template_layout("batch", "Job"), Some(TemplateLayout::Single("/spec/template")));
        assert_eq!(template_layout("apps", "ReplicaSet"), Some(TemplateLayout::Single("/spec/template")));
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}}}});
        let layout = template_layout("batch", "CronJob").unwrap();
        assert_eq!(layout.pod_specs(&cron).len(), 1);
        assert!(layout.requests_any(&cron, &["nvidia.com/gpu"]));
        assert_eq!(template_layout("apps", "DaemonSet"), None);
        assert_eq!(template_layout("", "Job"), None);
    }

    #[test]
    fn controller_of_finds_only_the_controlling_owner() {
        let owner = |name: &str, controller: Option<bool>| OwnerReference {
            name: name.to_owned(),
            controller,
            ..OwnerReference::default()
        };
        let meta = ObjectMeta {
            owner_references: Some(vec![owner("a", None), owner("b", Some(false)), owner("c", Some(true))]),
            ..ObjectMeta::default()
        };
        assert_eq!(controller_of(&meta).map(|owner| owner.name.as_str()), Some("c"));
        assert_eq!(controller_of(&ObjectMeta::default()), None);
    }

    #[test]
    fn set_pointer_escapes_label_keys_and_creates_parents() {
        let mut object = json!({"metadata": {}});
        assert!(set_pointer(&mut object, "/metadata/labels/kueue.x-k8s.io~1queue-name", Some(json!("q"))));
        assert_eq!(object, json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}}));
        assert!(set_pointer(&mut object, "/metadata/labels/kueue.x-k8s.io~1queue-name", None));
        assert_eq!(object, json!({"metadata": {"labels": {}}}));
    }

    #[test]
    fn restore_pointers_undoes_changes_to_immutable_fields_only() {
        let original = job(json!({"nvidia.com/gpu": "1"}));
        let mut mutated = original.clone();
        set_pointer(&mut mutated, "/spec/template/spec/nodeSelector", Some(json!({"a": "b"})));
        set_pointer(&mut mutated, "/spec/suspend", Some(json!(true)));
        set_pointer(&mut mutated, "/metadata/annotations", Some(json!({"x": "y"})));
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        assert!(restore_pointers(&original, &mut mutated, adapter.immutable_on_update));
        assert_eq!(mutated.pointer("/spec/template"), original.pointer("/spec/template"));
        assert_eq!(mutated.pointer("/spec/suspend"), None);
        assert_eq!(mutated.pointer("/metadata/annotations/x"), Some(&json!("y")));
    }

    #[test]
    fn suspended_is_read_from_the_kinds_suspend_field() {
        let adapter = adapter_for("batch", "v1", "Job").unwrap();
        assert!(adapter.is_suspended(&json!({"spec": {"suspend": true}})));
        assert!(!adapter.is_suspended(&json!({"spec": {}})));
        assert!(!adapter_for("", "v1", "Pod").unwrap().is_suspended(&json!({"spec": {"suspend": true}})));
    }
}
