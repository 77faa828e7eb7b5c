//! Typed Karpenter `karpenter.sh/v1` NodePools as tiergate renders them for a GPU class (issue 51); no I/O.
//!
//! Only the fields tiergate sets are modelled, every optional one skipped when `None`, so a server-side apply
//! never claims a field tiergate does not own. Field names and limits follow Karpenter's v1 NodePool CRD
//! (`daemon/tests/fixtures/karpenter/karpenter.sh_nodepools.yaml`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_derive::CustomResource;
use serde::{Deserialize, Serialize};

/// Karpenter's API group.
pub const GROUP: &str = "karpenter.sh";
/// The NodePool API version tiergate writes (Karpenter >= v1.0).
pub const VERSION: &str = "v1";
/// The node label Karpenter puts on every node of a NodePool, naming it.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// The operators of a NodePool requirement (`spec.template.spec.requirements[].operator`).
pub const REQUIREMENT_OPERATOR_VALUES: [&str; 8] = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"];
/// The reasons a disruption budget can name.
pub const DISRUPTION_REASON_VALUES: [&str; 3] = ["Underutilized", "Empty", "Drifted"];
/// Most requirements a NodePool template holds (the CRD's `maxItems`).
pub const MAX_REQUIREMENTS: usize = 100;
/// Lowest and highest NodePool `weight`.
pub const WEIGHT_RANGE: std::ops::RangeInclusive<i32> = 1..=100;
/// Label domains Karpenter keeps for itself and the cloud providers (its `RestrictedLabelDomains`, and the
/// providers' `karpenter.k8s.aws`, `karpenter.azure.com`, `karpenter.kwok.sh`, ...: every `karpenter.*` domain): a
/// NodePool template may not carry their labels, so a class label of these domains becomes a requirement, whose
/// single `In` value Karpenter sets on the node (or the instance type carries).
pub const RESTRICTED_LABEL_DOMAINS: [&str; 3] = ["karpenter.sh", "kubernetes.io", "k8s.io"];
/// Sub-domains of the restricted ones that templates may use (Karpenter's `LabelDomainExceptions`).
pub const ALLOWED_RESTRICTED_DOMAINS: [&str; 3] =
    ["kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"];

/// A `NodePool` (`karpenter.sh/v1`, cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// The nodes the pool launches.
    pub template: NodeClaimTemplate,
    /// When Karpenter may take the pool's nodes away.
    pub disruption: Disruption,
    /// The most the pool's nodes may hold together, per resource (capacity, not requests).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
    /// Priority among the NodePools a pod fits (higher first, 1-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// `spec.template`: the labels and spec of each node (NodeClaim) the pool launches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// The nodes' labels (other than those of restricted domains, which go in `requirements`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The nodes' class, requirements, taints and lifetime.
    pub spec: NodeClaimTemplateSpec,
}

/// `spec.template.metadata`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels every node of the pool carries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// `spec.template.spec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// The cloud provider's node class (EC2NodeClass, AKSNodeClass, KWOKNodeClass, ...).
    pub node_class_ref: NodeClassReference,
    /// What the launched instances must satisfy.
    pub requirements: Vec<NodeSelectorRequirement>,
    /// Taints every node of the pool carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// How long a node lives before Karpenter replaces it (`Never`, or a duration such as `720h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
}

/// `spec.template.spec.nodeClassRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// The node class's API group, e.g. `karpenter.k8s.aws`.
    pub group: String,
    /// The node class's kind, e.g. `EC2NodeClass`.
    pub kind: String,
    /// The node class's name.
    pub name: String,
}

/// One requirement of `spec.template.spec.requirements`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// The node label the requirement is on.
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: String,
    /// The values (one integer for Gt, Lt, Gte and Lte, none for Exists and DoesNotExist).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Fewest distinct values the launch decision must keep open (flexibility for spot capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i32>,
}

/// `spec.disruption`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// `WhenEmpty` (only nodes without workload pods) or `WhenEmptyOrUnderutilized`.
    pub consolidation_policy: String,
    /// How long a node must be consolidatable before Karpenter acts (`Never`, or a duration).
    pub consolidate_after: String,
    /// How many of the pool's nodes may be disrupted at once, per reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<Budget>,
}

/// One disruption budget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// How many nodes (a count or a percentage) may be disrupted at once.
    pub nodes: String,
    /// The reasons the budget applies to (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// Whether Karpenter accepts `key` in a NodePool template's `labels` (false for the restricted domains, see
/// [`RESTRICTED_LABEL_DOMAINS`]).
pub fn is_template_label_allowed(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else { return true };
    let within = |parent: &str| domain == parent || domain.ends_with(&format!(".{parent}"));
    if ALLOWED_RESTRICTED_DOMAINS.iter().any(|allowed| within(allowed)) {
        return true;
    }
    !(domain.starts_with("karpenter.") || RESTRICTED_LABEL_DOMAINS.iter().any(|restricted| within(restricted)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_of_restricted_domains_are_refused_in_templates() {
        assert!(is_template_label_allowed("gpu.example.com/class"));
        assert!(is_template_label_allowed("plain"));
        assert!(is_template_label_allowed("node.kubernetes.io/instance-type"));
        assert!(!is_template_label_allowed("karpenter.sh/capacity-type"));
        assert!(!is_template_label_allowed("topology.kubernetes.io/zone"));
        assert!(!is_template_label_allowed("kubernetes.io/arch"));
        assert!(!is_template_label_allowed("karpenter.k8s.aws/instance-family"));
        assert!(!is_template_label_allowed("karpenter.kwok.sh/instance-family"));
    }
}
