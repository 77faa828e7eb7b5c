//! docs/reference/policy.md: every TierPolicy field, walked from the OpenAPI schema of `TierPolicy::crd()` (the
//! CRD `tiergate crd` prints and the chart ships).

use kube::CustomResourceExt;
use serde_json::Value;
use tiergate::policy::TierPolicy;

use super::markdown::{cell, code, generated_line, table};

/// One field: its path, type, default, whether it is required, and its description.
struct Field {
    path: String,
    kind: String,
    default: String,
    required: bool,
    description: String,
}

pub fn build_policy_reference() -> String {
    let crd = serde_json::to_value(TierPolicy::crd()).unwrap();
    let spec = &crd["spec"];
    let version = &spec["versions"][0];
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut out = generated_line("the TierPolicy CustomResourceDefinition (`tiergate crd`)");
    out.push_str("\n# TierPolicy reference\n\n");
    out.push_str(&format!(
        "`apiVersion: {}/{}`, `kind: {}`; {}-scoped, short name {}. Every field of the CRD's schema, as the API server \
         validates it: a path's `[]` is any item of a list, `<key>` any key of a map. Required means required within its \
         parent. Defaults are filled in by the API server.\n",
        spec["group"].as_str().unwrap(),
        version["name"].as_str().unwrap(),
        spec["names"]["kind"].as_str().unwrap(),
        spec["scope"].as_str().unwrap().to_lowercase(),
        spec["names"]["shortNames"].as_array().unwrap().iter().map(|name| format!("`{}`", name.as_str().unwrap())).collect::<Vec<_>>().join(", "),
    ));
    let required = string_set(schema);
    for (section, title) in [("spec", "what the platform team writes"), ("status", "written by tiergate")] {
        let node = &schema["properties"][section];
        let mut fields = Vec::new();
        walk(node, section, required.contains(&section.to_owned()), &mut fields);
        out.push_str(&format!("\n## `{section}`: {title}\n\n"));
        let rows: Vec<Vec<String>> = fields
            .iter()
            .map(|field| {
                vec![
                    code(&field.path),
                    cell(&field.kind),
                    code(&field.default),
                    if field.required { "yes".to_owned() } else { String::new() },
                    cell(&field.description),
                ]
            })
            .collect();
        out.push_str(&table(&["Field", "Type", "Default", "Required", "Description"], &rows));
    }
    out
}

/// The `required` list of an object schema.
fn string_set(node: &Value) -> Vec<String> {
    node["required"].as_array().into_iter().flatten().filter_map(|name| name.as_str().map(str::to_owned)).collect()
}

/// Appends `node` at `path` and every field below it.
fn walk(node: &Value, path: &str, required: bool, fields: &mut Vec<Field>) {
    fields.push(Field {
        path: path.to_owned(),
        kind: describe_type(node),
        default: node.get("default").map(Value::to_string).unwrap_or_default(),
        required,
        description: first_paragraph(node["description"].as_str().unwrap_or_default()),
    });
    let required_children = string_set(node);
    if let Some(properties) = node["properties"].as_object() {
        for (name, child) in properties {
            walk(child, &format!("{path}.{name}"), required_children.contains(name), fields);
        }
    }
    let items = &node["items"];
    if items.get("properties").is_some() || items.get("additionalProperties").is_some_and(Value::is_object) {
        for (name, child) in items["properties"].as_object().into_iter().flatten() {
            walk(child, &format!("{path}[].{name}"), string_set(items).contains(name), fields);
        }
        if let Some(values) = items.get("additionalProperties").filter(|values| values.is_object()) {
            walk_map_values(values, &format!("{path}[]"), fields);
        }
    }
    if let Some(values) = node.get("additionalProperties").filter(|values| values.is_object()) {
        walk_map_values(values, path, fields);
    }
}

/// The values of a map at `path`, as `path.<key>`, when they are more than a scalar the map's type names.
fn walk_map_values(values: &Value, path: &str, fields: &mut Vec<Field>) {
    if values.get("properties").is_some() || values.get("additionalProperties").is_some_and(Value::is_object) {
        walk(values, &format!("{path}.<key>"), false, fields);
    }
}

/// The description's first paragraph (the Kubernetes types' descriptions go on for pages).
fn first_paragraph(description: &str) -> String {
    description.split("\n\n").next().unwrap_or_default().trim().to_owned()
}

/// A field's type in words, with its format, enum and bounds.
fn describe_type(node: &Value) -> String {
    let mut kind = if node.get("x-kubernetes-int-or-string").is_some_and(|flag| flag == true) {
        "integer or string".to_owned()
    } else {
        match node["type"].as_str().unwrap_or("any") {
            "array" => format!("list of {}", describe_type(&node["items"])),
            "object" => match node.get("additionalProperties").filter(|values| values.is_object()) {
                Some(values) if values.get("properties").is_none() => {
                    format!("map of string to {}", describe_type(values))
                }
                Some(_) => "map of string to object".to_owned(),
                None => "object".to_owned(),
            },
            other => other.to_owned(),
        }
    };
    if let Some(format) = node["format"].as_str() {
        kind.push_str(&format!(" ({format})"));
    }
    if let Some(values) = node["enum"].as_array() {
        let values: Vec<String> =
            values.iter().map(|value| format!("`{}`", value.as_str().unwrap_or_default())).collect();
        kind.push_str(&format!(": {}", values.join(", ")));
    }
    for (key, word) in [("minimum", "min"), ("maximum", "max"), ("minItems", "min items"), ("maxItems", "max items")] {
        if let Some(bound) = node.get(key) {
            kind.push_str(&format!(", {word} {bound}"));
        }
    }
    kind
}
