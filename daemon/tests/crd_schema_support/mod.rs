//! Shared by the schema tests (Kueue objects, patched workloads of every kind, Kueue fixtures): a CRD's OpenAPI
//! schema made strict the way strict field validation is; no I/O.

use serde_json::Value;

/// Adds `additionalProperties: false` to every object schema that lists properties (except `metadata`, which the
/// API server validates itself), as `kubectl apply`'s strict field validation refuses unknown fields.
pub fn strict(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> =
                map.iter().map(|(key, value)| (key.clone(), strict(value))).collect();
            if let Some(Value::Object(properties)) = map.get("properties") {
                let properties: serde_json::Map<String, Value> = properties
                    .iter()
                    .map(|(name, value)| (name.clone(), if name == "metadata" { value.clone() } else { strict(value) }))
                    .collect();
                out.insert("properties".into(), Value::Object(properties));
                if !map.contains_key("additionalProperties")
                    && !map.contains_key("x-kubernetes-preserve-unknown-fields")
                {
                    out.insert("additionalProperties".into(), Value::Bool(false));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strict).collect()),
        other => other.clone(),
    }
}
