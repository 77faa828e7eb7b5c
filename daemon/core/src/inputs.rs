//! Reading the CLI's input files: a TierPolicy, a cluster view (our list form or a `kubectl get ns,nodes -o yaml`
//! dump), and the embedded sample used when no policy is given. File I/O only at the `load_*` edge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use serde::Deserialize;

use crate::labels::Labels;
use crate::policy::TierPolicy;
use crate::trust::BindingView;
use crate::validation::PolicyError;
use crate::validation::fields::unknown_fields;
use crate::view::{ClusterView, NamespaceView, NodeView};

/// The embedded sample policy (`samples/kubenexus/policy.yaml`).
pub const SAMPLE_POLICY: &str = include_str!("../../../samples/kubenexus/policy.yaml");
/// The embedded sample cluster view (`samples/kubenexus/cluster.yaml`).
pub const SAMPLE_CLUSTER: &str = include_str!("../../../samples/kubenexus/cluster.yaml");

/// An input file could not be read or understood.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be read. The OS error is part of the message, not a `source`, so it is printed once.
    #[error("failed to read {path}: {error}", path = path.display())]
    Read {
        /// File path.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The file is not a TierPolicy.
    #[error("failed to parse {origin} as a TierPolicy (apiVersion tiergate.io/v1alpha1, kind TierPolicy): {message}")]
    ParsePolicy {
        /// File path or `embedded sample`.
        origin: String,
        /// Parser message with the location.
        message: String,
    },
    /// The policy has fields a TierPolicy does not have (a typo would otherwise change nothing, silently).
    #[error("failed to accept {origin} as a TierPolicy: {} unknown field(s){}", errors.len(), list(errors))]
    UnknownPolicyFields {
        /// File path or `embedded sample`.
        origin: String,
        /// Each unknown field with its path and the closest known field.
        errors: Vec<PolicyError>,
    },
    /// The file is not a cluster view.
    #[error("failed to parse {origin} as a cluster view: {message}. {CLUSTER_VIEW_SHAPE}")]
    ParseCluster {
        /// File path or `embedded sample`.
        origin: String,
        /// Parser message with the location.
        message: String,
    },
}

impl InputError {
    /// Fixed reason for metrics and exit messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read_input",
            Self::ParsePolicy { .. } => "parse_policy",
            Self::UnknownPolicyFields { .. } => "unknown_policy_fields",
            Self::ParseCluster { .. } => "parse_cluster",
        }
    }
}

/// What a cluster view looks like, for the messages of files that are not one.
pub const CLUSTER_VIEW_SHAPE: &str = "A cluster view is either a mapping with `namespaces:` (each with `name`, \
                                      `labels`) and `nodes:` (each with `name`, `labels`, `taints`, `allocatable`) \
                                      lists, or a `kubectl get ns,nodes -o yaml` dump (`kind: List` whose `items` are \
                                      Namespaces, Nodes, ResourceClaimTemplates or ClusterRoleBindings); see \
                                      samples/kubenexus/cluster.yaml";

/// Reads a file to a string.
pub fn read_file(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|error| InputError::Read { path: path.to_owned(), error })
}

fn list(errors: &[PolicyError]) -> String {
    errors.iter().map(|error| format!("\n  - {error}")).collect()
}

/// A YAML parser error as a user reads it: the parser's budget and multi-document errors say what to change,
/// not which library call a developer should have used.
pub fn yaml_message(error: &serde_saphyr::Error) -> String {
    use serde_saphyr::budget::BudgetBreach;
    let at = |location: &serde_saphyr::Location| match (location.line(), location.column()) {
        (0, _) => String::new(),
        (line, column) => format!(" (line {line}, column {column})"),
    };
    match error.without_snippet() {
        serde_saphyr::Error::MultipleDocuments { location, .. } => format!(
            "the file holds more than one YAML document{}; keep one document per file (remove the extra `---` documents)",
            at(location)
        ),
        serde_saphyr::Error::Budget { breach, location } => {
            let what = match breach {
                BudgetBreach::Nodes { .. } => "too many YAML nodes",
                BudgetBreach::Depth { .. } => "nesting too deep",
                BudgetBreach::Aliases { .. } | BudgetBreach::AliasAnchorRatio { .. } => "too many aliases",
                BudgetBreach::Anchors { .. } => "too many anchors",
                BudgetBreach::Documents { .. } => "too many documents",
                BudgetBreach::ScalarBytes { .. } | BudgetBreach::InputBytes { .. } => "too much text",
                _ => "past the YAML parser's safety limits",
            };
            format!(
                "the document is larger than a policy or cluster view can be ({what}){}; split it or remove repeated parts",
                at(location)
            )
        }
        _ => error.to_string(),
    }
}

/// Loads a TierPolicy from `path`, or the embedded sample when `None`.
pub fn load_policy(path: Option<&Path>) -> Result<TierPolicy, InputError> {
    match path {
        Some(path) => parse_policy(&read_file(path)?, &path.display().to_string()),
        None => parse_policy(SAMPLE_POLICY, "embedded sample policy"),
    }
}

/// Loads a cluster view from `path`.
pub fn load_cluster_view(path: &Path) -> Result<ClusterView, InputError> {
    parse_cluster_view(&read_file(path)?, &path.display().to_string())
}

/// Parses a TierPolicy document.
pub fn parse_policy(text: &str, origin: &str) -> Result<TierPolicy, InputError> {
    let parse_error = |message: String| InputError::ParsePolicy { origin: origin.to_owned(), message };
    let header: DocumentHeader = serde_saphyr::from_str(text).map_err(|error| parse_error(yaml_message(&error)))?;
    if header.api_version.as_deref() != Some("tiergate.io/v1alpha1") || header.kind.as_deref() != Some("TierPolicy") {
        return Err(parse_error(format!(
            "found apiVersion {:?} kind {:?}; set apiVersion: tiergate.io/v1alpha1 and kind: TierPolicy",
            header.api_version.unwrap_or_default(),
            header.kind.unwrap_or_default()
        )));
    }
    let document: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|error| parse_error(yaml_message(&error)))?;
    let errors = unknown_fields(&document);
    if !errors.is_empty() {
        return Err(InputError::UnknownPolicyFields { origin: origin.to_owned(), errors });
    }
    let policy: TierPolicy = serde_saphyr::from_str(text).map_err(|error| parse_error(yaml_message(&error)))?;
    Ok(policy)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DocumentHeader {
    api_version: Option<String>,
    kind: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ClusterDocument {
    Kubectl(KubectlList),
    Own(ClusterView),
}

#[derive(Deserialize)]
struct KubectlList {
    #[allow(dead_code)]
    kind: String,
    items: Vec<serde_json::Value>,
}

/// Parses a cluster view: our `namespaces:`/`nodes:` form or a kubectl `List` of Namespaces and Nodes.
pub fn parse_cluster_view(text: &str, origin: &str) -> Result<ClusterView, InputError> {
    let parse_error = |message: String| InputError::ParseCluster { origin: origin.to_owned(), message };
    let document: ClusterDocument =
        serde_saphyr::from_str(text).map_err(|error| parse_error(describe_non_view(text, &error)))?;
    let list = match document {
        ClusterDocument::Own(view) => {
            // A Kubernetes object other than a List (a TierPolicy, say) would read as an empty view.
            let header: DocumentHeader =
                serde_saphyr::from_str(text).map_err(|error| parse_error(yaml_message(&error)))?;
            return match header.kind {
                Some(kind) => Err(parse_error(format!("found kind {kind:?}, not a List of Namespaces and Nodes"))),
                None => Ok(view),
            };
        }
        ClusterDocument::Kubectl(list) => list,
    };
    let mut view = ClusterView::default();
    for (index, item) in list.items.into_iter().enumerate() {
        match item.get("kind").and_then(serde_json::Value::as_str) {
            Some("Namespace") => {
                let namespace: Namespace =
                    serde_json::from_value(item).map_err(|error| parse_error(format!("items[{index}]: {error}")))?;
                view.namespaces.push(Arc::new(NamespaceView {
                    name: namespace.metadata.name.unwrap_or_default(),
                    labels: namespace.metadata.labels.map(Labels::from).unwrap_or_default(),
                    terminating: namespace.metadata.deletion_timestamp.is_some(),
                    created: namespace.metadata.creation_timestamp.map(|time| time.0.as_second()),
                }));
            }
            Some("ClusterRoleBinding") => {
                let binding: ClusterRoleBinding =
                    serde_json::from_value(item).map_err(|error| parse_error(format!("items[{index}]: {error}")))?;
                view.bindings.push(binding_view(&binding));
            }
            Some("Node") => {
                let node: Node =
                    serde_json::from_value(item).map_err(|error| parse_error(format!("items[{index}]: {error}")))?;
                view.nodes.push(Arc::new(node_view(node)));
            }
            Some("ResourceClaimTemplate") => {
                view.claim_templates.push(Arc::new(crate::admission::claims::claim_template_view(&item)));
            }
            other => {
                return Err(parse_error(format!(
                    "items[{index}] has kind {other:?}; only Namespace, Node, ResourceClaimTemplate and \
                     ClusterRoleBinding are understood"
                )));
            }
        }
    }
    Ok(view)
}

/// What a document that is no cluster view is instead (`error`: why it did not parse as one).
fn describe_non_view(text: &str, error: &serde_saphyr::Error) -> String {
    let value = match serde_saphyr::from_str::<serde_json::Value>(text) {
        Ok(value) => value,
        Err(syntax) => return format!("it is not YAML: {}", yaml_message(&syntax)),
    };
    let found = |what: &str| format!("found {what}, not a mapping");
    match &value {
        serde_json::Value::Null => "the file is empty".to_owned(),
        serde_json::Value::String(_) => found("text"),
        serde_json::Value::Array(_) => found("a list"),
        serde_json::Value::Bool(_) | serde_json::Value::Number(_) => found("a single value"),
        serde_json::Value::Object(map) if map.get("kind").and_then(serde_json::Value::as_str) == Some("List") => {
            match serde_json::from_value::<KubectlList>(value.clone()) {
                Err(error) => format!("its List does not hold `items`: {error}"),
                Ok(_) => yaml_message(error),
            }
        }
        serde_json::Value::Object(_) => match serde_json::from_value::<ClusterView>(value.clone()) {
            Err(error) => format!("its `namespaces:`/`nodes:` are not as a view has them: {error}"),
            Ok(_) => yaml_message(error),
        },
    }
}

/// A ClusterRoleBinding as trust reads it: its name, when it was made, and the service accounts it binds as user
/// names.
pub fn binding_view(binding: &ClusterRoleBinding) -> BindingView {
    let service_accounts = binding
        .subjects
        .iter()
        .flatten()
        .filter(|subject| subject.kind == "ServiceAccount")
        .filter_map(|subject| Some(format!("system:serviceaccount:{}:{}", subject.namespace.as_deref()?, subject.name)))
        .collect();
    BindingView {
        name: binding.metadata.name.clone().unwrap_or_default(),
        created: binding.metadata.creation_timestamp.as_ref().map(|time| time.0.as_second()),
        service_accounts,
    }
}

/// The parts of a Node the translation and scorer use; allocatable quantities that are not whole numbers are
/// left out (GPUs and other extended resources always are whole).
pub fn node_view(node: Node) -> NodeView {
    let allocatable: BTreeMap<String, i64> = node
        .status
        .and_then(|status| status.allocatable)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(name, quantity)| quantity.0.parse::<i64>().ok().map(|value| (name, value)))
        .collect();
    NodeView {
        name: node.metadata.name.unwrap_or_default(),
        labels: node.metadata.labels.map(Labels::from).unwrap_or_default(),
        taints: node.spec.and_then(|spec| spec.taints).unwrap_or_default(),
        allocatable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_sample_policy_and_cluster_parse() {
        let policy = load_policy(None).unwrap();
        assert_eq!(policy.spec.tier_label, "tenant.kubenexus.io/tier");
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        assert!(view.namespaces.iter().any(|ns| ns.name == "ml-team-dev"));
    }

    #[test]
    fn kubectl_list_dump_is_understood() {
        let dump = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: ml-team-dev, labels: {tenant.kubenexus.io/tier: bronze}}
- apiVersion: v1
  kind: Node
  metadata: {name: n1, labels: {gpu.nvidia.com/class: l4}}
  status: {allocatable: {nvidia.com/gpu: "4", memory: 16Gi}}
"#;
        let view = parse_cluster_view(dump, "dump").unwrap();
        assert_eq!(view.namespaces[0].labels.get("tenant.kubenexus.io/tier"), Some("bronze"));
        assert_eq!(view.nodes[0].allocatable.get("nvidia.com/gpu"), Some(&4));
        assert!(!view.nodes[0].allocatable.contains_key("memory"));
    }

    #[test]
    fn a_file_that_is_no_cluster_view_says_what_it_is_what_a_view_looks_like_and_where_a_sample_is() {
        for (text, found) in [
            ("# tiergate\n\nSome prose.\n", "found text, not a mapping"),
            ("`tiergate render`: prose\n", "it is not YAML: "),
            ("- a\n- b\n", "found a list"),
            ("namespaces: 5\n", "`namespaces:`/`nodes:` are not as a view has them"),
            ("apiVersion: tiergate.io/v1alpha1\nkind: TierPolicy\nspec: {}\n", "found kind \"TierPolicy\""),
        ] {
            let error = parse_cluster_view(text, "junk.yaml").unwrap_err().to_string();
            assert!(error.starts_with("failed to parse junk.yaml as a cluster view: "), "{error}");
            assert!(error.contains(found), "{error}");
            assert!(error.contains("see samples/kubenexus/cluster.yaml") && error.contains("`kind: List`"), "{error}");
            assert!(!error.contains("untagged enum"), "{error}");
        }
    }

    #[test]
    fn a_pod_list_is_refused_with_the_item_named() {
        let dump = "kind: List\nitems:\n- {kind: Pod, metadata: {name: p}}\n";
        let error = parse_cluster_view(dump, "dump").unwrap_err().to_string();
        assert!(error.contains("items[0]") && error.contains("Pod"), "{error}");
    }
}
