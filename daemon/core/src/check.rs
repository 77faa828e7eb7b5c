//! Nodepool matching for `tiergate check`: which Karpenter NodePools or node-group templates can host each tier; pure.
//!
//! A tier's pods carry its GPU class's node labels as nodeSelector (plus a placement rule's, when the tier has
//! a placement strategy) and the class's (and rule's) tolerations. A pool can host them when every selected
//! label is one its nodes will carry and every `NoSchedule`/`NoExecute` taint of the pool is tolerated. Each
//! such target must match exactly one pool, so the autoscaler grows exactly one nodepool per choice.
//!
//! Karpenter tries NodePools by descending `spec.weight` and launches from the first one the pods fit, so when
//! only Karpenter NodePools can host a target and one of them has the strictly highest weight, that one is the
//! target's pool; the lower-weight ones are warned about (Karpenter falls back to them when the pick cannot
//! launch). A NodePool's `spec.limits` below what Kueue can admit onto it is warned about too ([`karpenter::limit_warnings`]).
//! Warnings never fail the check.
//!
//! Inputs, in one YAML file (several documents, or `kind: List` with `items`):
//! - Karpenter `NodePool` (`karpenter.sh/v1`): `spec.template.metadata.labels`, `spec.template.spec.taints`,
//!   `spec.template.spec.requirements` (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`), `spec.weight` and
//!   `spec.limits`. A label the pool neither sets nor constrains does not match: Karpenter cannot guess a custom
//!   label's value.
//!   `startupTaints` are ignored (they are removed once the node is ready).
//! - cluster-autoscaler node-group templates, in tiergate's own small form:
//!   ```yaml
//!   apiVersion: tiergate.io/v1alpha1
//!   kind: NodeGroupTemplate
//!   metadata: {name: gpu-l4}
//!   spec:
//!     labels: {gpu.nvidia.com/class: l4}
//!     taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
//!   ```

pub mod fleet;
mod karpenter;

pub use self::karpenter::build_nodepool_warnings;
use self::karpenter::karpenter_pick;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;
use serde_json::Value;

use crate::plan::{flavor_for_gpu_class, flavor_for_rule};
use crate::policy::{Tier, TierPolicySpec};
use crate::provisioning::{BEST_EFFORT_ATOMIC_CLASS, CHECK_CAPACITY_CLASS};

/// A nodepools file could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Not YAML, or a document of the wrong shape.
    #[error("failed to parse {origin} as NodePools / NodeGroupTemplates: {message}")]
    ParseNodepools {
        /// File path.
        origin: String,
        /// What is wrong, with the document index.
        message: String,
    },
}

impl CheckError {
    /// Fixed reason for exit messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ParseNodepools { .. } => "parse_nodepools",
        }
    }
}

/// Where a pool came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolSource {
    /// A Karpenter `NodePool`.
    Karpenter,
    /// A cluster-autoscaler `NodeGroupTemplate`.
    NodeGroupTemplate,
    /// Live nodes grouped by their node-group label, or by identical labels and taints (`check --kubeconfig`):
    /// whether they are autoscaled is not known.
    LiveNodes,
}

impl PoolSource {
    /// Whether pools of this source grow for waiting workloads and may be empty (Karpenter NodePools,
    /// cluster-autoscaler node groups); unknown for live nodes.
    pub fn is_autoscaled(self) -> bool {
        matches!(self, Self::Karpenter | Self::NodeGroupTemplate)
    }
}

/// A node requirement of a Karpenter NodePool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    pub operator: String,
    /// Values (one integer for `Gt`/`Lt`).
    #[serde(default)]
    pub values: Vec<String>,
}

/// A pool of nodes the autoscaler can grow: the labels, requirements and taints of its nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePool {
    /// Pool name.
    pub name: String,
    /// Karpenter NodePool or node-group template.
    pub source: PoolSource,
    /// Labels every node of the pool carries.
    pub labels: BTreeMap<String, String>,
    /// Karpenter requirements (empty for node-group templates).
    pub requirements: Vec<Requirement>,
    /// Taints every node of the pool carries.
    pub taints: Vec<Taint>,
    /// Karpenter `spec.weight`: Karpenter tries NodePools by descending weight. `None` when unset (Karpenter
    /// orders it as 0), and for node-group templates and live node groups.
    pub weight: Option<i32>,
    /// Karpenter `spec.limits`: the most of each resource the pool's nodes may hold together (resource name ->
    /// quantity). Empty when the NodePool sets none, and for node-group templates and live node groups.
    pub limits: BTreeMap<String, Quantity>,
}

impl NodePool {
    /// `NodePool gpu-l4` or `NodeGroupTemplate gpu-l4`.
    pub fn display_name(&self) -> String {
        let kind = match self.source {
            PoolSource::Karpenter => "NodePool",
            PoolSource::NodeGroupTemplate => "NodeGroupTemplate",
            PoolSource::LiveNodes => "node group",
        };
        format!("{kind} {}", self.name)
    }

    /// The weight Karpenter orders this pool by: `spec.weight`, 0 when unset.
    pub fn effective_weight(&self) -> i32 {
        self.weight.unwrap_or(0)
    }
}

/// Reads every NodePool and NodeGroupTemplate of a (multi-document) YAML text.
pub fn parse_nodepools(text: &str, origin: &str) -> Result<Vec<NodePool>, CheckError> {
    let error = |message: String| CheckError::ParseNodepools { origin: origin.to_owned(), message };
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|parse| error(parse.to_string()))?;
    let mut pools = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        collect_pools(document, &format!("document {index}"), &mut pools).map_err(error)?;
    }
    if pools.is_empty() {
        return Err(error("no NodePool (karpenter.sh/v1) or NodeGroupTemplate (tiergate.io/v1alpha1) found".into()));
    }
    Ok(pools)
}

#[derive(Deserialize)]
struct KarpenterNodePool {
    metadata: NamedMeta,
    spec: KarpenterSpec,
}

#[derive(Deserialize, Default)]
struct NamedMeta {
    name: String,
}

#[derive(Deserialize)]
struct KarpenterSpec {
    template: KarpenterTemplate,
    #[serde(default)]
    weight: Option<i32>,
    #[serde(default)]
    limits: Option<BTreeMap<String, LimitQuantity>>,
}

/// A value of a NodePool's `spec.limits`: a quantity string, or a bare number as YAML writes `nvidia.com/gpu: 8`.
#[derive(Deserialize)]
#[serde(untagged)]
enum LimitQuantity {
    Text(String),
    Number(serde_json::Number),
}

impl LimitQuantity {
    fn into_quantity(self) -> Quantity {
        match self {
            Self::Text(text) => Quantity(text),
            Self::Number(number) => Quantity(number.to_string()),
        }
    }
}

#[derive(Deserialize)]
struct KarpenterTemplate {
    #[serde(default)]
    metadata: TemplateMeta,
    spec: KarpenterTemplateSpec,
}

#[derive(Deserialize, Default)]
struct TemplateMeta {
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct KarpenterTemplateSpec {
    #[serde(default)]
    requirements: Vec<Requirement>,
    #[serde(default)]
    taints: Vec<Taint>,
}

#[derive(Deserialize)]
struct NodeGroupTemplate {
    metadata: NamedMeta,
    spec: NodeGroupTemplateSpec,
}

#[derive(Deserialize)]
struct NodeGroupTemplateSpec {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<Taint>,
}

fn collect_pools(document: Value, at: &str, pools: &mut Vec<NodePool>) -> Result<(), String> {
    if document.is_null() {
        return Ok(());
    }
    let kind = document.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
    match kind.as_str() {
        "List" => {
            let items = document.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
            for (index, item) in items.into_iter().enumerate() {
                collect_pools(item, &format!("{at} items[{index}]"), pools)?;
            }
        }
        "NodePool" => {
            let pool: KarpenterNodePool = serde_json::from_value(document).map_err(|error| format!("{at}: {error}"))?;
            let limits = pool.spec.limits.unwrap_or_default();
            // Karpenter labels every node of a pool with the pool's name: a pod can select the pool by it.
            let mut labels = pool.spec.template.metadata.labels;
            labels.insert(tiergate_karpenter::NODEPOOL_LABEL.to_owned(), pool.metadata.name.clone());
            pools.push(NodePool {
                name: pool.metadata.name,
                source: PoolSource::Karpenter,
                labels,
                requirements: pool.spec.template.spec.requirements,
                taints: pool.spec.template.spec.taints,
                weight: pool.spec.weight,
                limits: limits.into_iter().map(|(resource, limit)| (resource, limit.into_quantity())).collect(),
            });
        }
        "NodeGroupTemplate" => {
            let group: NodeGroupTemplate =
                serde_json::from_value(document).map_err(|error| format!("{at}: {error}"))?;
            pools.push(NodePool {
                name: group.metadata.name,
                source: PoolSource::NodeGroupTemplate,
                labels: group.spec.labels,
                requirements: Vec::new(),
                taints: group.spec.taints,
                weight: None,
                limits: BTreeMap::new(),
            });
        }
        other => {
            return Err(format!("{at} has kind {other:?}; expected NodePool, NodeGroupTemplate or List"));
        }
    }
    Ok(())
}

/// Why a pool cannot host a target, or `None` when it can.
pub fn pool_rejection(
    pool: &NodePool,
    selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
) -> Option<String> {
    for (key, value) in selector {
        if let Some(reason) = label_rejection(pool, key, value) {
            return Some(reason);
        }
    }
    pool.taints
        .iter()
        .filter(|taint| taint.effect != "PreferNoSchedule")
        .find(|taint| !tolerations.iter().any(|toleration| tolerates(toleration, taint)))
        .map(|taint| {
            format!(
                "taint {}{}:{} is not tolerated",
                taint.key,
                taint.value.as_deref().map(|value| format!("={value}")).unwrap_or_default(),
                taint.effect
            )
        })
}

fn label_rejection(pool: &NodePool, key: &str, value: &str) -> Option<String> {
    let requirements: Vec<&Requirement> =
        pool.requirements.iter().filter(|requirement| requirement.key == key).collect();
    match pool.labels.get(key) {
        Some(label) if label != value => return Some(format!("label {key} is {label}, not {value}")),
        None if requirements.is_empty() => return Some(format!("label {key} is neither set nor required")),
        _ => {}
    }
    requirements.into_iter().find(|requirement| !requirement_admits(requirement, value)).map(|requirement| {
        format!("requirement {key} {} {:?} excludes {value}", requirement.operator, requirement.values)
    })
}

fn requirement_admits(requirement: &Requirement, value: &str) -> bool {
    let bound = || requirement.values.first().and_then(|bound| bound.parse::<i64>().ok());
    let number = value.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" => requirement.values.iter().any(|allowed| allowed == value),
        "NotIn" => !requirement.values.iter().any(|excluded| excluded == value),
        "Exists" => true,
        "Gt" => matches!((number, bound()), (Some(number), Some(bound)) if number > bound),
        "Lt" => matches!((number, bound()), (Some(number), Some(bound)) if number < bound),
        _ => false,
    }
}

/// Kubernetes' `Toleration.ToleratesTaint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration.effect.as_deref().is_some_and(|effect| !effect.is_empty() && effect != taint.effect) {
        return false;
    }
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    match toleration.key.as_deref() {
        None | Some("") => operator == "Exists",
        Some(key) if key != taint.key => false,
        Some(_) => {
            operator == "Exists"
                || (operator == "Equal"
                    && toleration.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default())
        }
    }
}

/// One kind of pod a tier produces: a GPU class, and a placement rule when the tier has a strategy.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetReport {
    /// `h100`, or `h100 + spot-mix/spot`.
    pub target: String,
    /// The pod's nodeSelector.
    pub selector: BTreeMap<String, String>,
    /// Pools that can host it; only Karpenter's pick when [`Self::weight_pick`] is set.
    pub matches: Vec<String>,
    /// Pools that cannot, with the reason.
    pub rejections: Vec<(String, String)>,
    /// Set when several Karpenter NodePools can host it and one has the strictly highest weight.
    pub weight_pick: Option<WeightPick>,
    /// The weight several Karpenter NodePools that can host it share at the top (so Karpenter has no order
    /// between them); `None` otherwise.
    pub tied_weight: Option<i32>,
}

/// Karpenter's choice among several NodePools that can host a target: the one of strictly highest weight.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightPick {
    /// The weight of the pick (the target's only entry in `matches`).
    pub weight: i32,
    /// The other NodePools that can host the target, with their lower weights, highest first: Karpenter launches
    /// from them when the pick cannot (its limits reached, no capacity).
    pub lower: Vec<(String, i32)>,
}

/// Every target of one tier.
#[derive(Clone, Debug, PartialEq)]
pub struct TierReport {
    /// Tier name.
    pub tier: String,
    /// Its targets.
    pub targets: Vec<TargetReport>,
}

impl TierReport {
    /// True when every target matches exactly one pool.
    pub fn passed(&self) -> bool {
        !self.targets.is_empty() && self.targets.iter().all(|target| target.matches.len() == 1)
    }
}

/// The result of `tiergate check`.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// One report per tier, in policy order.
    pub tiers: Vec<TierReport>,
    /// Pools no tier can use.
    pub unused_pools: Vec<String>,
    /// How each tier's quota is shared by its flavors ([`crate::plan::quota::quota_summary`]).
    pub quota_summary: String,
    /// What will not fail a create but may leave workloads waiting, with the fix (they do not fail the check).
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// True when every tier passed.
    pub fn passed(&self) -> bool {
        self.tiers.iter().all(TierReport::passed)
    }

    /// The report as text for people.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for tier in &self.tiers {
            let verdict = if tier.passed() { "OK" } else { "FAIL" };
            let _ = writeln!(text, "tier {}: {verdict}", tier.tier);
            for target in &tier.targets {
                let selector: Vec<String> =
                    target.selector.iter().map(|(key, value)| format!("{key}={value}")).collect();
                let found = match (target.matches.as_slice(), &target.weight_pick) {
                    ([], _) => "no pool can host these pods".to_owned(),
                    ([pool], None) => format!("-> {pool}"),
                    ([pool], Some(pick)) => {
                        let lower: Vec<String> =
                            pick.lower.iter().map(|(name, weight)| format!("{name} at {weight}")).collect();
                        format!("-> {pool} (Karpenter's pick by weight: {}, above {})", pick.weight, lower.join(", "))
                    }
                    (pools, _) => {
                        let tie = target
                            .tied_weight
                            .map(|weight| format!(" (all at weight {weight}: Karpenter has no order between them)"))
                            .unwrap_or_default();
                        format!(
                            "{} pools can host these pods, expected exactly one: {}{tie}",
                            pools.len(),
                            pools.join(", ")
                        )
                    }
                };
                let _ = writeln!(text, "  {} [{}]: {found}", target.target, selector.join(","));
                if target.matches.is_empty() {
                    for (pool, reason) in &target.rejections {
                        let _ = writeln!(text, "    {pool}: {reason}");
                    }
                }
            }
        }
        if !self.unused_pools.is_empty() {
            let _ = writeln!(text, "pools no tier uses: {}", self.unused_pools.join(", "));
        }
        for warning in &self.warnings {
            let _ = writeln!(text, "warning: {warning}");
        }
        text.push_str(&self.quota_summary);
        let summary = if self.passed() {
            "every tier matches exactly one pool (or one Karpenter NodePool of highest weight) per GPU class and \
             placement rule"
        } else {
            "some tiers do not match exactly one pool; fix the pools' labels/taints (or Karpenter weights) or the \
             policy's gpuClasses"
        };
        let _ = writeln!(text, "{summary}");
        text
    }
}

/// Matches every tier's targets against the pools.
pub fn build_check_report(spec: &TierPolicySpec, pools: &[NodePool]) -> CheckReport {
    let tiers: Vec<TierReport> = spec
        .tiers
        .iter()
        .map(|tier| TierReport { tier: tier.name.clone(), targets: build_targets(spec, tier, pools) })
        .collect();
    let targets = || tiers.iter().flat_map(|tier| &tier.targets);
    let fallbacks = targets().flat_map(|target| &target.weight_pick).flat_map(|pick| &pick.lower).map(|(name, _)| name);
    let used: Vec<&String> = targets().flat_map(|target| &target.matches).chain(fallbacks).collect();
    let unused_pools = pools.iter().map(NodePool::display_name).filter(|name| !used.contains(&name)).collect();
    let mut warnings = check_capacity_warnings(spec, &tiers, pools);
    let running_here: Vec<&Tier> = spec.tiers.iter().filter(|tier| tier.dispatch.is_none()).collect();
    warnings.extend(build_nodepool_warnings(spec, &tiers, &running_here, pools));
    CheckReport { tiers, unused_pools, quota_summary: crate::plan::quota::quota_summary(spec), warnings }
}

/// A tier whose ProvisioningRequests only check capacity, on pools that grow for waiting workloads (node-group
/// templates, Karpenter NodePools; not live nodes, which may be fixed) while the policy does not say the class's
/// nodes are `Fixed`: on an empty pool its workloads wait forever.
fn check_capacity_warnings(spec: &TierPolicySpec, tiers: &[TierReport], pools: &[NodePool]) -> Vec<String> {
    let autoscaled = |shown: &str| pools.iter().any(|pool| pool.source.is_autoscaled() && pool.display_name() == shown);
    spec.tiers
        .iter()
        .zip(tiers)
        .enumerate()
        .filter(|(_, (tier, _))| crate::provisioning::checks_capacity_of_unstated_pools(spec, tier))
        .filter_map(|(index, (tier, report))| {
            let pools: Vec<&str> = report
                .targets
                .iter()
                .flat_map(|target| &target.matches)
                .map(String::as_str)
                .filter(|shown| autoscaled(shown))
                .collect();
            (!pools.is_empty()).then(|| {
                format!(
                    "tier {}: provisioning class {CHECK_CAPACITY_CLASS} on autoscaled pools ({}) only finds nodes \
                     that exist; while a pool is empty its workloads wait forever. Fix: spec.tiers[{index}].provisioning.\
                     provisioningClassName: {BEST_EFFORT_ATOMIC_CLASS}, or mark the GPU class `capacity: Fixed` if \
                     its nodes are always there",
                    tier.name,
                    pools.join(", ")
                )
            })
        })
        .collect()
}

fn build_targets(spec: &TierPolicySpec, tier: &Tier, pools: &[NodePool]) -> Vec<TargetReport> {
    let strategy = tier.placement.as_deref().and_then(|name| spec.placement_strategy(name));
    let mut targets = Vec::new();
    for class_name in tier.gpu_class_names() {
        let Some(class) = flavor_for_gpu_class(spec, class_name) else { continue };
        match strategy {
            None => targets.push(build_target(class_name.to_owned(), class.node_labels, class.tolerations, pools)),
            Some(strategy) => {
                for rule in &strategy.rules {
                    let rule_flavor = flavor_for_rule(&class, strategy, rule);
                    let label = format!("{class_name} + {}/{}", strategy.name, rule.name);
                    targets.push(build_target(label, rule_flavor.node_labels, rule_flavor.tolerations, pools));
                }
            }
        }
    }
    targets
}

fn build_target(
    target: String,
    selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    pools: &[NodePool],
) -> TargetReport {
    let mut hosts = Vec::new();
    let mut rejections = Vec::new();
    for (index, pool) in pools.iter().enumerate() {
        match pool_rejection(pool, &selector, &tolerations) {
            None => hosts.push(index),
            Some(reason) => rejections.push((pool.display_name(), reason)),
        }
    }
    let shown = |index: &usize| pools.get(*index).map(NodePool::display_name).unwrap_or_default();
    let weight_of = |index: &usize| pools.get(*index).map_or(0, NodePool::effective_weight);
    let all_karpenter =
        hosts.iter().all(|index| pools.get(*index).is_some_and(|pool| pool.source == PoolSource::Karpenter));
    let (matches, weight_pick) = match karpenter_pick(pools, &hosts) {
        Some((chosen, lower)) => {
            let lower = lower.iter().map(|index| (shown(index), weight_of(index))).collect();
            (vec![shown(&chosen)], Some(WeightPick { weight: weight_of(&chosen), lower }))
        }
        None => (hosts.iter().map(shown).collect(), None),
    };
    let tied_weight = (weight_pick.is_none() && hosts.len() > 1 && all_karpenter)
        .then(|| hosts.iter().map(weight_of).max())
        .flatten();
    TargetReport { target, selector, matches, rejections, weight_pick, tied_weight }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;

    const POOLS: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu-h100}
spec:
  template:
    metadata: {labels: {gpu.nvidia.com/class: h100}}
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu-a100}
spec:
  template:
    spec:
      requirements: [{key: gpu.nvidia.com/class, operator: In, values: [a100]}]
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
---
apiVersion: tiergate.io/v1alpha1
kind: NodeGroupTemplate
metadata: {name: ca-l4}
spec:
  labels: {gpu.nvidia.com/class: l4}
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
"#;

    fn toleration(key: &str, operator: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(operator.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.map(Into::into), effect: effect.into(), time_added: None }
    }

    #[test]
    fn each_kubenexus_tier_matches_exactly_its_pool() {
        let spec = load_policy(None).unwrap().spec;
        let pools = parse_nodepools(POOLS, "pools").unwrap();
        let report = build_check_report(&spec, &pools);
        assert!(report.passed(), "{}", report.to_text());
        let bronze = report.tiers.iter().find(|tier| tier.tier == "bronze").unwrap();
        assert_eq!(bronze.targets[0].matches, ["NodeGroupTemplate ca-l4"]);
    }

    #[test]
    fn an_untolerated_taint_rejects_the_pool_with_the_taint_named() {
        let mut spec = load_policy(None).unwrap().spec;
        spec.gpu_classes.iter_mut().for_each(|class| class.node_taints.clear());
        let pools = parse_nodepools(POOLS, "pools").unwrap();
        let report = build_check_report(&spec, &pools);
        assert!(!report.passed());
        assert!(
            report.to_text().contains("taint nvidia.com/gpu=present:NoSchedule is not tolerated"),
            "{}",
            report.to_text()
        );
    }

    #[test]
    fn check_capacity_on_autoscaled_pools_is_warned_unless_the_class_is_fixed() {
        let mut spec = load_policy(None).unwrap().spec;
        let pools = parse_nodepools(POOLS, "pools").unwrap();
        assert!(build_check_report(&spec, &pools).warnings.is_empty(), "the sample has no provisioning");
        let provisioning = crate::policy::ProvisioningSpec {
            provisioning_class_name: CHECK_CAPACITY_CLASS.into(),
            parameters: BTreeMap::new(),
            managed_resources: Vec::new(),
            retry_strategy: None,
        };
        spec.tiers[0].provisioning = Some(provisioning);
        let report = build_check_report(&spec, &pools);
        assert!(report.passed(), "a warning does not fail the check");
        let text = report.to_text();
        assert_eq!(report.warnings.len(), 1, "{text}");
        let tier = &spec.tiers[0].name;
        assert!(text.contains(&format!("warning: tier {tier}: provisioning class {CHECK_CAPACITY_CLASS}")), "{text}");
        assert!(text.contains(BEST_EFFORT_ATOMIC_CLASS) && text.contains("spec.tiers[0].provisioning"), "{text}");

        let live: Vec<NodePool> =
            pools.iter().cloned().map(|pool| NodePool { source: PoolSource::LiveNodes, ..pool }).collect();
        let report = build_check_report(&spec, &live);
        assert!(report.warnings.is_empty(), "live nodes may be fixed capacity: {}", report.to_text());

        let class = spec.tiers[0].gpu_class.clone();
        let class = spec.gpu_classes.iter_mut().find(|candidate| candidate.name == class).unwrap();
        class.capacity = Some(crate::policy::NodeCapacity::Fixed);
        assert!(build_check_report(&spec, &pools).warnings.is_empty(), "the policy says the nodes are there");
    }

    #[test]
    fn two_pools_for_one_class_fail_the_tier() {
        let spec = load_policy(None).unwrap().spec;
        let text = format!("{POOLS}---\n{}", POOLS.split("---").nth(2).unwrap().replace("ca-l4", "ca-l4-b"));
        let report = build_check_report(&spec, &parse_nodepools(&text, "pools").unwrap());
        let bronze = report.tiers.iter().find(|tier| tier.tier == "bronze").unwrap();
        assert!(!bronze.passed());
        assert!(report.to_text().contains("2 pools can host these pods"), "{}", report.to_text());
    }

    #[test]
    fn requirements_follow_karpenter_operators() {
        let requirement = |operator: &str, values: &[&str]| Requirement {
            key: "k".into(),
            operator: operator.into(),
            values: values.iter().map(|value| (*value).to_owned()).collect(),
        };
        assert!(requirement_admits(&requirement("In", &["a", "b"]), "b"));
        assert!(!requirement_admits(&requirement("NotIn", &["a"]), "a"));
        assert!(requirement_admits(&requirement("Exists", &[]), "x"));
        assert!(!requirement_admits(&requirement("DoesNotExist", &[]), "x"));
        assert!(requirement_admits(&requirement("Gt", &["4"]), "8"));
        assert!(!requirement_admits(&requirement("Lt", &["4"]), "8"));
        assert!(!requirement_admits(&requirement("Gt", &["4"]), "many"));
    }

    #[test]
    fn tolerations_follow_kubernetes() {
        let gpu = taint("nvidia.com/gpu", Some("present"), "NoSchedule");
        assert!(tolerates(&toleration("nvidia.com/gpu", "Equal", Some("present"), Some("NoSchedule")), &gpu));
        assert!(tolerates(&toleration("nvidia.com/gpu", "Exists", None, None), &gpu));
        assert!(!tolerates(&toleration("nvidia.com/gpu", "Equal", Some("absent"), None), &gpu));
        assert!(!tolerates(&toleration("nvidia.com/gpu", "Exists", None, Some("NoExecute")), &gpu));
        let everything = Toleration { operator: Some("Exists".into()), ..Toleration::default() };
        assert!(tolerates(&everything, &gpu));
    }

    /// The Karpenter sample's classes as a platform's NodePools of weight 50 (h100 limited to 8 GPUs, l4 to
    /// 12), plus a catch-all GPU NodePool of weight 10 (`samples/karpenter/nodepools.yaml`).
    const PLATFORM_POOLS: &str = include_str!("../../../samples/karpenter/nodepools.yaml");

    fn sample_policy(name: &str) -> TierPolicySpec {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples").join(name).join("policy.yaml");
        load_policy(Some(&path)).unwrap().spec
    }

    fn target<'a>(report: &'a CheckReport, tier: &str, target: &str) -> &'a TargetReport {
        let tier = report.tiers.iter().find(|candidate| candidate.tier == tier).unwrap();
        tier.targets.iter().find(|candidate| candidate.target == target).unwrap()
    }

    fn limit_warnings_of(report: &CheckReport) -> Vec<&String> {
        report.warnings.iter().filter(|warning| warning.contains("Kueue can admit onto it")).collect()
    }

    #[test]
    fn karpenter_weight_and_limits_are_read_and_other_sources_have_none() {
        let pools = parse_nodepools(PLATFORM_POOLS, "pools").unwrap();
        assert_eq!(pools[0].weight, Some(50));
        assert_eq!(pools[0].limits.get("nvidia.com/gpu"), Some(&Quantity("8".into())), "a bare YAML number");
        assert_eq!(pools[0].limits.get("cpu"), Some(&Quantity("1536".into())));
        assert_eq!(pools[1].limits.get("nvidia.com/gpu"), Some(&Quantity("12".into())));
        let ca = parse_nodepools(POOLS, "pools").unwrap().into_iter().find(|pool| pool.name == "ca-l4").unwrap();
        assert_eq!((ca.weight, ca.limits.len(), ca.effective_weight()), (None, 0, 0));
        let error = parse_nodepools(&PLATFORM_POOLS.replace("weight: 10", "weight: heavy"), "p.yaml").unwrap_err();
        assert!(error.to_string().contains("document 2"), "{error}");
    }

    #[test]
    fn a_unique_top_weight_is_karpenters_pick_and_each_lower_nodepool_that_fits_is_warned_about() {
        let spec = sample_policy("karpenter");
        let report = build_check_report(&spec, &parse_nodepools(PLATFORM_POOLS, "pools").unwrap());
        let text = report.to_text();
        assert!(report.passed(), "{text}");
        let gold = target(&report, "gold", "h100");
        assert_eq!(gold.matches, ["NodePool platform-h100"]);
        let pick = WeightPick { weight: 50, lower: vec![("NodePool gpu-any".to_owned(), 10)] };
        assert_eq!(gold.weight_pick.as_ref(), Some(&pick));
        assert!(
            text.contains(
                "  h100 [gpu.nvidia.com/class=h100,karpenter.k8s.aws/instance-family=p5]: -> NodePool platform-h100 \
                 (Karpenter's pick by weight: 50, above NodePool gpu-any at 10)\n"
            ),
            "{text}"
        );
        assert!(report.unused_pools.is_empty(), "the catch-all is used when a pick cannot launch: {text}");
        let weight_warnings: Vec<&String> = report.warnings.iter().filter(|w| w.contains("can also host")).collect();
        assert_eq!(weight_warnings.len(), 4, "gold h100, silver l4 and h100, bronze l4: {text}");
        assert_eq!(
            weight_warnings[0],
            "tier gold, h100: NodePool gpu-any (weight 10) can also host these pods. Karpenter picks NodePool \
             platform-h100 (weight 50) first, but launches from NodePool gpu-any whenever NodePool platform-h100 \
             cannot (its limits reached, no capacity), so the tier's pods may land on nodes of NodePool gpu-any. \
             Fix: give NodePool gpu-any requirements or a taint these pods do not meet, e.g. the requirement \
             {key: gpu.nvidia.com/class, operator: NotIn, values: [h100]}"
        );

        let tainted = PLATFORM_POOLS.replace(
            "        - {key: karpenter.k8s.aws/instance-family, operator: Exists}\n      taints: [",
            "        - {key: karpenter.k8s.aws/instance-family, operator: Exists}\n      taints: [{key: catch-all, \
             effect: NoSchedule}, ",
        );
        let report = build_check_report(&spec, &parse_nodepools(&tainted, "pools").unwrap());
        assert!(report.passed(), "{}", report.to_text());
        assert!(target(&report, "gold", "h100").weight_pick.is_none(), "the fix removes the fallback");
        assert!(!report.to_text().contains("can also host"), "{}", report.to_text());
    }

    #[test]
    fn equal_top_weights_leave_karpenters_choice_open_and_fail() {
        let spec = sample_policy("karpenter");
        for (pools, weight) in [
            (PLATFORM_POOLS.replace("weight: 10", "weight: 50"), 50),
            (PLATFORM_POOLS.replace("  weight: 50\n", "").replace("  weight: 10\n", ""), 0),
        ] {
            let report = build_check_report(&spec, &parse_nodepools(&pools, "pools").unwrap());
            let text = report.to_text();
            assert!(!report.passed(), "{text}");
            let gold = target(&report, "gold", "h100");
            assert_eq!((gold.weight_pick.as_ref(), gold.tied_weight), (None, Some(weight)), "{text}");
            assert!(
                text.contains(&format!(
                    "2 pools can host these pods, expected exactly one: NodePool platform-h100, NodePool gpu-any (all \
                     at weight {weight}: Karpenter has no order between them)"
                )),
                "{text}"
            );
            assert!(!text.contains("can also host"), "{text}");
        }
    }

    #[test]
    fn a_karpenter_weight_does_not_outrank_a_pool_of_another_autoscaler() {
        let spec = sample_policy("karpenter");
        let group = "---\napiVersion: tiergate.io/v1alpha1\nkind: NodeGroupTemplate\nmetadata: {name: ca-h100}\n\
                     spec:\n  labels: {gpu.nvidia.com/class: h100, karpenter.k8s.aws/instance-family: p5}\n  taints: \
                     [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n";
        let pools = parse_nodepools(&format!("{PLATFORM_POOLS}{group}"), "pools").unwrap();
        let report = build_check_report(&spec, &pools);
        let gold = target(&report, "gold", "h100");
        assert!(!report.passed() && gold.weight_pick.is_none() && gold.tied_weight.is_none(), "{}", report.to_text());
        assert_eq!(gold.matches.len(), 3);
    }

    #[test]
    fn a_nodepool_limit_below_the_quota_it_hosts_is_warned_with_the_sum_the_tiers_and_the_fix() {
        let spec = sample_policy("karpenter");
        let report = build_check_report(&spec, &parse_nodepools(PLATFORM_POOLS, "pools").unwrap());
        assert!(report.passed(), "a warning does not fail the check: {}", report.to_text());
        assert_eq!(
            limit_warnings_of(&report),
            ["NodePool platform-h100 limits nvidia.com/gpu to 8, below the 16 Kueue can admit onto it (the nominal \
                 quota of tier gold on the flavors it hosts): Kueue admits workloads Karpenter will never get nodes \
                 for, and they hold quota while their pods stay Pending. Fix: raise the limit to 16 (spec.limits: \
                 {nvidia.com/gpu: \"16\"}), or lower the quota; or use NodePool tiergate-h100, which tiergate renders \
                 from GPU class h100's `karpenter` template with a limit that follows the quota, in place of this one"],
            "l4 holds silver's 8 and bronze's 4, exactly its limit of 12"
        );

        let l4_short = PLATFORM_POOLS.replace("\"12\"", "11");
        let mut without_templates = spec.clone();
        without_templates.gpu_classes.iter_mut().for_each(|class| class.karpenter = None);
        let report = build_check_report(&without_templates, &parse_nodepools(&l4_short, "pools").unwrap());
        let warnings = limit_warnings_of(&report);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[1].starts_with(
                "NodePool platform-l4 limits nvidia.com/gpu to 11, below the 12 Kueue can admit onto it (the nominal \
                 quota of tier silver, tier bronze on the flavors it hosts)"
            ),
            "{}",
            warnings[1]
        );
        assert!(
            warnings[1].ends_with(
                "or give GPU class l4 a `karpenter` template (spec.gpuClasses[1].karpenter) so tiergate renders its \
                 NodePool with a limit that follows the quota"
            ),
            "{}",
            warnings[1]
        );
    }

    #[test]
    fn a_limit_at_or_above_the_quota_or_no_gpu_limit_is_not_warned() {
        let spec = sample_policy("karpenter");
        for h100_limit in ["16", "20", "1k"] {
            let pools = PLATFORM_POOLS.replace("nvidia.com/gpu: 8,", &format!("nvidia.com/gpu: \"{h100_limit}\","));
            let report = build_check_report(&spec, &parse_nodepools(&pools, "pools").unwrap());
            assert!(limit_warnings_of(&report).is_empty(), "{h100_limit}: {:?}", report.warnings);
        }
        let cpu_only = PLATFORM_POOLS.replace("nvidia.com/gpu: 8, ", "");
        let report = build_check_report(&spec, &parse_nodepools(&cpu_only, "pools").unwrap());
        assert!(limit_warnings_of(&report).is_empty(), "{:?}", report.warnings);
    }

    #[test]
    fn a_cohorts_own_pool_of_the_class_counts_on_the_pool_its_flavor_lands_on() {
        let mut spec = sample_policy("karpenter");
        let quota =
            crate::policy::ResourceQuota { nominal: Quantity("8".into()), borrowing_limit: None, lending_limit: None };
        spec.cohorts[0].pools.insert("h100".into(), BTreeMap::from([("nvidia.com/gpu".to_owned(), quota)]));
        let pools = PLATFORM_POOLS.replace("nvidia.com/gpu: 8,", "nvidia.com/gpu: 16,");
        let report = build_check_report(&spec, &parse_nodepools(&pools, "pools").unwrap());
        let warnings = limit_warnings_of(&report);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "NodePool platform-h100 limits nvidia.com/gpu to 16, below the 24 Kueue can admit onto it (the \
                 nominal quota of tier gold, cohort gpu on the flavors it hosts)"
            ),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn each_placement_rule_flavor_counts_on_its_own_rule_nodepool() {
        let spec = sample_policy("spot-mix");
        let pool = |name: &str, node_type: &str, limit: u32, taints: &str| {
            format!(
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  limits: \
                 {{nvidia.com/gpu: {limit}}}\n  template:\n    metadata: {{labels: {{gpu.nvidia.com/class: l4, \
                 node-type: {node_type}}}}}\n    spec:\n      taints: [{{key: nvidia.com/gpu, value: present, \
                 effect: NoSchedule}}{taints}]\n"
            )
        };
        let spot_taint = ", {key: node-type, value: spot, effect: NoSchedule}";
        let text = [pool("l4-ondemand", "ondemand", 5, ""), pool("l4-spot", "spot", 10, spot_taint)].join("---\n");
        let report = build_check_report(&spec, &parse_nodepools(&text, "pools").unwrap());
        assert!(target(&report, "bronze", "l4 + od-spot/spot").matches == ["NodePool l4-spot"]);
        let warnings = limit_warnings_of(&report);
        assert_eq!(warnings.len(), 1, "bronze's 16 GPUs split 6 on-demand, 10 spot: {warnings:?}");
        assert!(
            warnings[0].starts_with("NodePool l4-ondemand limits nvidia.com/gpu to 5, below the 6 Kueue can admit"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn an_unknown_kind_is_refused_with_its_document_named() {
        let error = parse_nodepools("kind: Deployment\nmetadata: {name: x}\n", "pools.yaml").unwrap_err().to_string();
        assert!(error.contains("document 0") && error.contains("Deployment"), "{error}");
    }
}
