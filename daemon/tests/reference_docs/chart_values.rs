//! docs/reference/chart-values.md: every value of charts/tiergate/values.yaml with its type, default and the
//! helm-docs `# -- ` comment above it. The YAML is parsed with serde-saphyr for the values; the comments and the
//! order come from the text.

use serde_json::Value;

use super::markdown::{cell, code, generated_line, table};

/// One documented value: a key with a `# -- ` comment, or an undocumented key that is not a non-empty map.
#[derive(Debug)]
pub struct ChartValue {
    /// Dotted path, e.g. `image.repository`.
    pub path: String,
    /// The default in values.yaml.
    pub default: Value,
    /// The `# -- ` comment and its continuation lines (empty: none).
    pub description: String,
}

/// The rows of values.yaml, in file order: a key with a `# -- ` comment is one row (its children are part of its
/// default); a key without one is a row when its value is not a non-empty map, else its children are walked.
pub fn parse_values(text: &str) -> Vec<ChartValue> {
    let values: Value = serde_saphyr::from_str(text).unwrap();
    let mut rows = Vec::new();
    let mut parents: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    let mut skip_below: Option<usize> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(level) = skip_below {
            if indent > level {
                continue;
            }
            skip_below = None;
        }
        if let Some(comment) = trimmed.strip_prefix("# -- ") {
            pending = Some(comment.trim().to_owned());
            continue;
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            if let Some(description) = &mut pending {
                description.push(' ');
                description.push_str(comment.trim());
            }
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else { continue };
        if trimmed.starts_with("- ") {
            continue;
        }
        let key = key.trim().trim_matches('"').to_owned();
        while parents.last().is_some_and(|(level, _)| *level >= indent) {
            parents.pop();
        }
        let path: Vec<&str> = parents.iter().map(|(_, key)| key.as_str()).chain([key.as_str()]).collect();
        let default = path.iter().fold(&values, |value, key| &value[*key]).clone();
        let nested = default.as_object().is_some_and(|map| !map.is_empty());
        if pending.is_some() || !nested {
            rows.push(ChartValue { path: path.join("."), default, description: pending.take().unwrap_or_default() });
            skip_below = Some(indent);
        } else {
            parents.push((indent, key));
        }
    }
    rows
}

pub fn build_values_reference(values: &[ChartValue]) -> String {
    let mut out = generated_line("charts/tiergate/values.yaml and its `# --` comments");
    out.push_str(
        "\n# Chart values reference\n\nEvery value of the `charts/tiergate` Helm chart, in the order of values.yaml; \
         values.schema.json checks their types at install. Set them with `--set path=value` or a values file.\n\n",
    );
    let rows: Vec<Vec<String>> = values
        .iter()
        .map(|value| {
            vec![
                format!("`{}`", value.path),
                type_name(&value.default).to_owned(),
                code(&value.default.to_string()),
                cell(&value.description),
            ]
        })
        .collect();
    out.push_str(&table(&["Value", "Type", "Default", "Description"], &rows));
    out
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}
