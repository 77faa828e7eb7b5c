//! A GPU class's Karpenter NodePool template (issue 51): what only the platform knows about its cloud (the node
//! class, instance requirements, weight and node lifetime); plain data.
//!
//! Validation lives in [`crate::validation::karpenter`], the rendered NodePool in [`crate::plan::nodepools`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The parts of a class's Karpenter NodePool tiergate cannot know. tiergate adds the class's node labels and
/// taints, the GPU limit its tiers' quota implies, and a disruption budget that never interrupts admitted work.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KarpenterPoolTemplate {
    /// The cloud provider's node class (`spec.template.spec.nodeClassRef`), e.g.
    /// `{group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}`.
    pub node_class_ref: NodeClassRef,
    /// Requirements on the instances, e.g. instance types or capacity type (Karpenter's
    /// `spec.template.spec.requirements`). Must not name a key of the class's `nodeLabels`: tiergate writes those.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 90))]
    pub requirements: Vec<PoolRequirement>,
    /// The NodePool's `weight` (1-100; default 50): Karpenter tries heavier pools first, so the class's pool
    /// wins over a catch-all GPU pool of lower weight for the pods that fit both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// How long an empty node stays before Karpenter removes it (`consolidateAfter`; default `5m`; `Never`
    /// keeps empty nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<String>,
    /// How long a node lives before Karpenter replaces it (`expireAfter`; default `Never`: an expiry would evict
    /// an admitted job mid-run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    /// Further limits of the pool, e.g. `cpu` or `memory` (the GPU limit is derived from the quota and may not
    /// be set here).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
}

/// A Karpenter node class reference.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClassRef {
    /// API group, e.g. `karpenter.k8s.aws`.
    pub group: String,
    /// Kind, e.g. `EC2NodeClass`.
    pub kind: String,
    /// Name of the node class object.
    pub name: String,
}

/// One requirement on the instances a NodePool may launch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolRequirement {
    /// A node label, e.g. `node.kubernetes.io/instance-type` or `karpenter.sh/capacity-type`.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, `Gte` or `Lte`.
    pub operator: String,
    /// The values (`In`/`NotIn`: at least one; `Gt`/`Lt`/`Gte`/`Lte`: one integer; `Exists`/`DoesNotExist`: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Fewest distinct values Karpenter must keep open when it picks instances (`minValues`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i32>,
}

/// Default NodePool weight of a rendered pool.
pub const DEFAULT_POOL_WEIGHT: i32 = 50;
/// Default `consolidateAfter` of a rendered pool.
pub const DEFAULT_CONSOLIDATE_AFTER: &str = "5m";
/// Default `expireAfter` of a rendered pool.
pub const DEFAULT_EXPIRE_AFTER: &str = "Never";
