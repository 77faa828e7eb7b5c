//! The Karpenter NodePools of the GPU classes with a `karpenter` template (issue 51): the class's labels and
//! taints, a GPU limit of exactly what its tiers' quota can admit, and a disruption budget that never interrupts
//! admitted work; pure.
//!
//! The GPU limit of a class's pool is the sum of the nominal quota of every flavor on the class's nodes (the
//! class's own flavor in tiers that use it as primary or fallback class, the placement-rule flavors of tiers whose
//! primary class it is) and of the cohorts' own pools of the class. Borrowing moves quota between queues of a
//! cohort but never adds to the sum Kueue can admit on a flavor, so the limit already covers what a cohort lends
//! and borrows: a pool at its limit is a tier at its quota.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tiergate_karpenter::{
    Budget, Disruption, NodeClaimTemplate, NodeClaimTemplateSpec, NodeClassReference, NodePool, NodePoolSpec,
    NodeSelectorRequirement, TemplateMetadata, is_template_label_allowed,
};

use super::names::node_pool_name;
use super::quota::{FlavorRole, FlavorShare, format_millis, parse_millis, tier_quota};
use crate::policy::karpenter::{DEFAULT_CONSOLIDATE_AFTER, DEFAULT_EXPIRE_AFTER, DEFAULT_POOL_WEIGHT};
use crate::policy::{GpuClass, KarpenterPoolTemplate, Tier, TierPolicySpec};

/// Karpenter's consolidation policy of a rendered pool: only empty nodes are removed, never one running a job.
pub const CONSOLIDATION_POLICY: &str = "WhenEmpty";
/// The disruption reasons a rendered pool's budget holds at zero nodes: drift would replace a node under an
/// admitted job (a template or node class edit), and under-utilization never applies with
/// [`CONSOLIDATION_POLICY`] but is held too in case the platform edits the policy in place.
pub const HELD_DISRUPTION_REASONS: [&str; 2] = ["Drifted", "Underutilized"];

/// One NodePool per class of `classes` (those built in this cluster) with a `karpenter` template, in their order,
/// sized for the tiers of `tiers` (those that run in this cluster).
pub fn build_node_pools<'a>(
    spec: &TierPolicySpec,
    classes: impl IntoIterator<Item = &'a GpuClass>,
    tiers: &[&Tier],
    labels: &BTreeMap<String, String>,
) -> Vec<NodePool> {
    classes
        .into_iter()
        .filter_map(|class| class.karpenter.as_ref().map(|template| (class, template)))
        .map(|(class, template)| NodePool {
            metadata: ObjectMeta {
                name: Some(node_pool_name(&class.name)),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            spec: build_pool_spec(class, template, class_gpu_limit(spec, tiers, class)),
        })
        .collect()
}

fn build_pool_spec(class: &GpuClass, template: &KarpenterPoolTemplate, gpus: Quantity) -> NodePoolSpec {
    let (labels, restricted): (BTreeMap<String, String>, BTreeMap<String, String>) = class
        .node_labels
        .iter()
        .map(|(key, value)| (key.clone(), value.clone()))
        .partition(|(key, _)| is_template_label_allowed(key));
    let class_requirements = restricted.into_iter().map(|(key, value)| NodeSelectorRequirement {
        key,
        operator: "In".to_owned(),
        values: vec![value],
        min_values: None,
    });
    let platform_requirements = template.requirements.iter().map(|requirement| NodeSelectorRequirement {
        key: requirement.key.clone(),
        operator: requirement.operator.clone(),
        values: requirement.values.clone(),
        min_values: requirement.min_values,
    });
    let mut limits = template.limits.clone();
    limits.insert(class.primary_resource().to_owned(), gpus);
    NodePoolSpec {
        template: NodeClaimTemplate {
            metadata: (!labels.is_empty()).then_some(TemplateMetadata { labels }),
            spec: NodeClaimTemplateSpec {
                node_class_ref: NodeClassReference {
                    group: template.node_class_ref.group.clone(),
                    kind: template.node_class_ref.kind.clone(),
                    name: template.node_class_ref.name.clone(),
                },
                requirements: class_requirements.chain(platform_requirements).collect(),
                taints: class.node_taints.clone(),
                expire_after: Some(template.expire_after.clone().unwrap_or_else(|| DEFAULT_EXPIRE_AFTER.to_owned())),
            },
        },
        disruption: Disruption {
            consolidation_policy: CONSOLIDATION_POLICY.to_owned(),
            consolidate_after: template
                .consolidate_after
                .clone()
                .unwrap_or_else(|| DEFAULT_CONSOLIDATE_AFTER.to_owned()),
            budgets: vec![Budget {
                nodes: "0".to_owned(),
                reasons: HELD_DISRUPTION_REASONS.iter().map(|reason| (*reason).to_owned()).collect(),
            }],
        },
        limits,
        weight: Some(template.weight.unwrap_or(DEFAULT_POOL_WEIGHT)),
    }
}

/// The most GPUs of `class`'s whole-GPU resource Kueue can admit at once onto the class's nodes, for the tiers
/// `tiers` and the cohorts' own pools (see the module comment): the pool's GPU limit.
pub fn class_gpu_limit(spec: &TierPolicySpec, tiers: &[&Tier], class: &GpuClass) -> Quantity {
    let resource = class.primary_resource();
    let mut millis: i128 = 0;
    for tier in tiers {
        for flavor in tier_quota(spec, tier).flavors {
            if flavor_class_name(tier, &flavor) != class.name {
                continue;
            }
            let nominal = flavor.nominal.iter().find(|(name, _)| name == resource).map(|(_, quantity)| quantity);
            millis += nominal.and_then(|quantity| parse_millis(&quantity.0)).unwrap_or(0);
        }
    }
    for cohort in &spec.cohorts {
        let pool = cohort.pools.get(&class.name).and_then(|pool| pool.get(resource));
        millis += pool.and_then(|quota| parse_millis(&quota.nominal.0)).unwrap_or(0);
    }
    Quantity(format_millis(millis, "0"))
}

/// The GPU class whose nodes a flavor of `tier` is on: its own class for the class or a fallback flavor, the tier's
/// primary class for a placement-rule flavor (rules are nodes of the primary class).
pub fn flavor_class_name<'a>(tier: &'a Tier, flavor: &'a FlavorShare) -> &'a str {
    match flavor.role {
        FlavorRole::Class | FlavorRole::Fallback => &flavor.source,
        FlavorRole::Rule => &tier.gpu_class,
    }
}
