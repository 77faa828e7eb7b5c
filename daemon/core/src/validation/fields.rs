//! Unknown fields in a TierPolicy document, found by walking it along the CRD's own OpenAPI schema (the schema
//! the API server prunes with), each named by its path with the closest known field; pure, no I/O.
//!
//! Why a schema walk and not `#[serde(deny_unknown_fields)]`: the walk reports every unknown field at once with
//! its path, and the daemon's typed watch keeps decoding objects from a newer CRD version instead of failing the
//! whole stream. In a cluster the API server itself refuses unknown fields under strict field validation
//! (kubectl's default); docs/writing-a-policy.md ("Strictness").

use std::sync::LazyLock;

use kube_core::CustomResourceExt as _;
use serde_json::Value;

use super::PolicyError;
use crate::policy::TierPolicy;

/// The TierPolicy CRD's `openAPIV3Schema`, as JSON.
static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let crd = TierPolicy::crd();
    crd.spec
        .versions
        .first()
        .and_then(|version| version.schema.as_ref())
        .and_then(|schema| schema.open_api_v3_schema.as_ref())
        .and_then(|schema| serde_json::to_value(schema).ok())
        .unwrap_or(Value::Null)
});

/// Top-level fields every Kubernetes object has, outside the CRD's schema.
const OBJECT_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Every field of `document` (a whole TierPolicy object) that the TierPolicy schema does not know.
pub fn unknown_fields(document: &Value) -> Vec<PolicyError> {
    let mut found = Vec::new();
    let Value::Object(fields) = document else { return found };
    for (name, value) in fields {
        if OBJECT_FIELDS.contains(&name.as_str()) {
            continue;
        }
        match SCHEMA.pointer(&format!("/properties/{name}")) {
            Some(schema) => walk(value, schema, name, &mut found),
            None => found.push(unknown(name, name, &SCHEMA)),
        }
    }
    found
}

fn walk(value: &Value, schema: &Value, path: &str, found: &mut Vec<PolicyError>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|schema| schema.is_object());
            for (name, field) in fields {
                match (properties.and_then(|properties| properties.get(name)), additional) {
                    (Some(schema), _) => walk(field, schema, &format!("{path}.{name}"), found),
                    (None, Some(schema)) => walk(field, schema, &format!("{path}[{name:?}]"), found),
                    // A schema without properties (e.g. a quantity, int-or-string) says nothing about fields.
                    (None, None) if properties.is_none() => {}
                    (None, None) => found.push(unknown(&format!("{path}.{name}"), name, schema)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    walk(item, schema, &format!("{path}[{index}]"), found);
                }
            }
        }
        _ => {}
    }
}

fn unknown(path: &str, name: &str, schema: &Value) -> PolicyError {
    let known: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let fix = match closest(name, &known) {
        Some(candidate) => format!("did you mean {candidate}?"),
        None if known.is_empty() => "remove it".to_owned(),
        None => format!("remove it; the fields here are {}", known.join(", ")),
    };
    PolicyError { path: path.to_owned(), problem: "unknown field".to_owned(), fix }
}

/// The known name closest to `name`: same letters ignoring case, or at most a third of its letters apart.
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    let scored = known.iter().map(|candidate| (edit_distance(&lower, &candidate.to_ascii_lowercase()), *candidate));
    scored
        .filter(|(distance, _)| *distance <= (name.len() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over bytes (field names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, left) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, right) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(left != *right);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_is_named_by_path_with_the_field_it_meant() {
        let document = serde_json::json!({
            "apiVersion": "tiergate.io/v1alpha1", "kind": "TierPolicy", "metadata": {"name": "p"},
            "spec": {"admission": {"adminGroup": ["ops"]}, "tiers": [{"name": "gold", "gpuClas": "h100"}]}
        });
        let found: Vec<String> = unknown_fields(&document).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "spec.admission.adminGroup: unknown field; fix: did you mean adminGroups?",
                "spec.tiers[0].gpuClas: unknown field; fix: did you mean gpuClass?",
            ]
        );
    }

    #[test]
    fn map_values_and_known_fields_pass() {
        let document = serde_json::json!({
            "spec": {"tiers": [{"name": "gold", "quotas": {"nvidia.com/gpu": {"nominal": "8"}}}]}
        });
        assert_eq!(unknown_fields(&document), []);
        let document = serde_json::json!({"spec": {"tiers": [{"quotas": {"cpu": {"nominall": "8"}}}]}});
        let found = unknown_fields(&document);
        assert_eq!(found[0].path, "spec.tiers[0].quotas[\"cpu\"].nominall");
    }

    #[test]
    fn distances_are_levenshtein() {
        assert_eq!(edit_distance("admingroup", "admingroups"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("zzz", &["adminGroups"]), None);
    }
}
