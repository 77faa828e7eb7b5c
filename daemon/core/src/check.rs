//! Nodepool matching for `tiergate check`: which Karpenter NodePools or node-group templates can host each tier; pure.
//!
//! A tier's pods carry its GPU class's node labels as nodeSelector (plus a placement rule's, when the tier has
//! a placement strategy) and the class's (and rule's) tolerations. A pool can host them when every selected
//! label is one its nodes will carry and every `NoSchedule`/`NoExecute` taint of the pool is tolerated. Each
//! such target must match exactly one pool, so the autoscaler grows exactly one nodepool per choice.
//!
//! Inputs, in one YAML file (several documents, or `kind: List` with `items`):
//! - Karpenter `NodePool` (`karpenter.sh/v1`): `spec.template.metadata.labels`, `spec.template.spec.taints`
//!   and `spec.template.spec.requirements` (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`). A label the
//!   pool neither sets nor constrains does not match: Karpenter cannot guess a custom label's value.
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

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Taint, Toleration};
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
            pools.push(NodePool {
                name: pool.metadata.name,
                source: PoolSource::Karpenter,
                labels: pool.spec.template.metadata.labels,
                requirements: pool.spec.template.spec.requirements,
                taints: pool.spec.template.spec.taints,
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
    /// Pools that can host it.
    pub matches: Vec<String>,
    /// Pools that cannot, with the reason.
    pub rejections: Vec<(String, String)>,
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
                let found = match target.matches.len() {
                    0 => "no pool can host these pods".to_owned(),
                    1 => format!("-> {}", target.matches[0]),
                    count => format!(
                        "{count} pools can host these pods, expected exactly one: {}",
                        target.matches.join(", ")
                    ),
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
            "every tier matches exactly one pool per GPU class and placement rule"
        } else {
            "some tiers do not match exactly one pool; fix the pools' labels/taints or the policy's gpuClasses"
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
    let used: Vec<&String> = tiers.iter().flat_map(|tier| &tier.targets).flat_map(|target| &target.matches).collect();
    let unused_pools = pools.iter().map(NodePool::display_name).filter(|name| !used.contains(&name)).collect();
    let warnings = check_capacity_warnings(spec, &tiers, pools);
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
    let mut matches = Vec::new();
    let mut rejections = Vec::new();
    for pool in pools {
        match pool_rejection(pool, &selector, &tolerations) {
            None => matches.push(pool.display_name()),
            Some(reason) => rejections.push((pool.display_name(), reason)),
        }
    }
    TargetReport { target, selector, matches, rejections }
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

    #[test]
    fn an_unknown_kind_is_refused_with_its_document_named() {
        let error = parse_nodepools("kind: Deployment\nmetadata: {name: x}\n", "pools.yaml").unwrap_err().to_string();
        assert!(error.contains("document 0") && error.contains("Deployment"), "{error}");
    }
}
