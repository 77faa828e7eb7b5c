//! Edits of one PodSpec (and metadata maps) held as raw JSON: selectors, tolerations, affinities and env, each
//! idempotent (applying it to its own output changes nothing); no I/O.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The JSON at a pointer did not have the shape Kubernetes gives it (e.g. `nodeSelector` is not a map).
#[derive(Debug, thiserror::Error)]
#[error("failed to edit {field}: expected a JSON {expected}")]
pub struct ShapeError {
    /// The field, e.g. `nodeSelector`.
    pub field: &'static str,
    /// `object` or `array`.
    pub expected: &'static str,
}

/// Label key whose values name the job types a workload should avoid sharing a node with.
pub use crate::scoring::features::JOB_TYPE_LABEL;
/// Node label the pinning affinity selects on.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The object member `field` of `parent`, created empty when absent or null.
pub fn object_field<'a>(parent: &'a mut Value, field: &'static str) -> Result<&'a mut Map<String, Value>, ShapeError> {
    let Value::Object(map) = parent else {
        return Err(ShapeError { field, expected: "object" });
    };
    let slot = map.entry(field.to_owned()).or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().ok_or(ShapeError { field, expected: "object" })
}

/// The array member `field` of `parent`, created empty when absent or null.
pub fn array_field<'a>(parent: &'a mut Value, field: &'static str) -> Result<&'a mut Vec<Value>, ShapeError> {
    let Value::Object(map) = parent else {
        return Err(ShapeError { field, expected: "object" });
    };
    let slot = map.entry(field.to_owned()).or_insert_with(|| Value::Array(Vec::new()));
    if slot.is_null() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut().ok_or(ShapeError { field, expected: "array" })
}

/// A string map member (`labels`, `annotations`, `nodeSelector`) as owned pairs; absent or malformed is empty.
pub fn string_map(parent: &Value, field: &str) -> BTreeMap<String, String> {
    parent
        .get(field)
        .and_then(Value::as_object)
        .map(|map| map.iter().filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

/// The string value of `key` in the string map member `field` of `parent` (one label or annotation), without
/// building the map.
pub fn string_entry<'v>(parent: &'v Value, field: &str, key: &str) -> Option<&'v str> {
    parent.get(field)?.get(key)?.as_str()
}

/// Sets every pair of `entries` in the string map `field` of `parent` (labels, annotations, nodeSelector); no
/// entries leave `parent` as it is. Owned entries are moved in, borrowed ones copied.
pub fn merge_string_map<K: Into<String>, V: Into<String>>(
    parent: &mut Value,
    field: &'static str,
    entries: impl IntoIterator<Item = (K, V)>,
) -> Result<(), ShapeError> {
    let mut entries = entries.into_iter().peekable();
    if entries.peek().is_none() {
        return Ok(());
    }
    let map = object_field(parent, field)?;
    for (key, value) in entries {
        map.insert(key.into(), Value::String(value.into()));
    }
    Ok(())
}

/// Sets one string entry of the map `field`.
pub fn set_string(parent: &mut Value, field: &'static str, key: &str, value: &str) -> Result<(), ShapeError> {
    object_field(parent, field)?.insert(key.to_owned(), Value::String(value.to_owned()));
    Ok(())
}

/// Appends each toleration not already present (compared as JSON).
pub fn add_tolerations(pod_spec: &mut Value, tolerations: &[Value]) -> Result<(), ShapeError> {
    if tolerations.is_empty() {
        return Ok(());
    }
    let existing = array_field(pod_spec, "tolerations")?;
    for toleration in tolerations {
        if !existing.contains(toleration) {
            existing.push(toleration.clone());
        }
    }
    Ok(())
}

/// Appends `item` to the array `field` of `parent` unless an equal item is there.
pub fn add_list_item(parent: &mut Value, field: &'static str, item: &Value) -> Result<(), ShapeError> {
    let existing = array_field(parent, field)?;
    if !existing.contains(item) {
        existing.push(item.clone());
    }
    Ok(())
}

/// Adds a preferred pod anti-affinity term (weight 100, per node) against pods whose job type is one of
/// `job_types`, unless an identical term is there.
pub fn add_job_type_anti_affinity(pod_spec: &mut Value, job_types: &[String]) -> Result<(), ShapeError> {
    if job_types.is_empty() {
        return Ok(());
    }
    let term = json!({
        "weight": 100,
        "podAffinityTerm": {
            "labelSelector": {"matchExpressions": [{"key": JOB_TYPE_LABEL, "operator": "In", "values": job_types}]},
            "topologyKey": HOSTNAME_LABEL
        }
    });
    let affinity = object_field(pod_spec, "affinity")?;
    let anti = affinity.entry("podAntiAffinity").or_insert_with(|| Value::Object(Map::new()));
    let terms = array_field(anti, "preferredDuringSchedulingIgnoredDuringExecution")?;
    if !terms.contains(&term) {
        terms.push(term);
    }
    Ok(())
}

/// Requires the node named `node`: adds `kubernetes.io/hostname In [node]` to every required node-selector term
/// (terms are ORed, so each one must carry it), or one term with it when there are none.
pub fn require_hostname(pod_spec: &mut Value, node: &str) -> Result<(), ShapeError> {
    let expression = json!({"key": HOSTNAME_LABEL, "operator": "In", "values": [node]});
    let affinity = object_field(pod_spec, "affinity")?;
    let node_affinity = affinity.entry("nodeAffinity").or_insert_with(|| Value::Object(Map::new()));
    let required = object_field(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")?;
    let terms = required.entry("nodeSelectorTerms").or_insert_with(|| Value::Array(Vec::new()));
    if terms.is_null() {
        *terms = Value::Array(Vec::new());
    }
    let terms = terms.as_array_mut().ok_or(ShapeError { field: "nodeSelectorTerms", expected: "array" })?;
    if terms.is_empty() {
        terms.push(json!({"matchExpressions": [expression]}));
        return Ok(());
    }
    for term in terms {
        let expressions = array_field(term, "matchExpressions")?;
        if !expressions.contains(&expression) {
            expressions.push(expression.clone());
        }
    }
    Ok(())
}

/// Sets env `name=value` in every container and init container that does not set `name`; returns the names of
/// containers that already set it to something else (kept as the user wrote them).
pub fn set_env_unless_present(pod_spec: &mut Value, name: &str, value: &str) -> Result<Vec<String>, ShapeError> {
    let mut kept = Vec::new();
    for field in ["containers", "initContainers"] {
        let Some(containers) = pod_spec.get_mut(field) else { continue };
        let Some(containers) = containers.as_array_mut() else {
            return Err(ShapeError { field: "containers", expected: "array" });
        };
        for container in containers {
            let container_name = container.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let env = array_field(container, "env")?;
            match env.iter().find(|entry| entry.get("name").and_then(Value::as_str) == Some(name)) {
                Some(entry) if entry.get("value").and_then(Value::as_str) == Some(value) => {}
                Some(_) => kept.push(container_name),
                None => env.push(json!({"name": name, "value": value})),
            }
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerations_are_added_once() {
        let mut spec = json!({"tolerations": [{"key": "a", "operator": "Exists"}]});
        let toleration =
            json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"});
        add_tolerations(&mut spec, std::slice::from_ref(&toleration)).unwrap();
        add_tolerations(&mut spec, std::slice::from_ref(&toleration)).unwrap();
        assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn hostname_is_required_in_every_existing_term_and_only_once() {
        let mut spec = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                                  {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]}]}}}});
        require_hostname(&mut spec, "node1").unwrap();
        let once = spec.clone();
        require_hostname(&mut spec, "node1").unwrap();
        assert_eq!(spec, once);
        let terms = spec
            .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
            .unwrap()
            .as_array()
            .unwrap();
        assert!(terms.iter().all(|term| {
            term["matchExpressions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|expr| expr["key"] == HOSTNAME_LABEL && expr["values"] == json!(["node1"]))
        }));
    }

    #[test]
    fn user_set_cuda_visible_devices_is_kept_and_reported() {
        let mut spec = json!({"containers": [
            {"name": "a"},
            {"name": "b", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]}
        ]});
        let kept = set_env_unless_present(&mut spec, "CUDA_VISIBLE_DEVICES", "0,1").unwrap();
        assert_eq!(kept, ["b"]);
        assert_eq!(spec["containers"][0]["env"], json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]));
        assert_eq!(spec["containers"][1]["env"], json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]));
    }

    #[test]
    fn anti_affinity_term_is_added_once() {
        let mut spec = json!({});
        add_job_type_anti_affinity(&mut spec, &["train-llama".to_owned()]).unwrap();
        let once = spec.clone();
        add_job_type_anti_affinity(&mut spec, &["train-llama".to_owned()]).unwrap();
        assert_eq!(spec, once);
        assert_eq!(
            spec.pointer("/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/weight"),
            Some(&json!(100))
        );
    }

    #[test]
    fn a_node_selector_that_is_not_a_map_is_a_shape_error() {
        let mut spec = json!({"nodeSelector": "gpu"});
        let entries = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
        assert_eq!(merge_string_map(&mut spec, "nodeSelector", &entries).unwrap_err().field, "nodeSelector");
    }
}
