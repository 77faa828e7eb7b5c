//! The cohort tree of a TierPolicy (issue 28): `spec.cohorts[]` and a tier's `sharing` block (floor, weight,
//! reclaim); plain data and the tree walks every other module uses (parents, roots, depth); no I/O.
//!
//! Validation lives in [`crate::validation::cohorts`], the translation to Kueue in [`crate::plan::cohorts`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ResourceQuota, Tier, TierPolicySpec};

/// One node of the organisation's tree: a Kueue `Cohort` (v1beta2) named `name`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CohortNode {
    /// DNS subdomain, e.g. `research`; also the Cohort object's name and what tiers' `cohort` names.
    pub name: String,
    /// The cohort above this one (Cohort `spec.parentName`); absent for the root of a tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Quota the cohort owns itself, shared by every queue below it, keyed by GPU class then resource name
    /// (Cohort `spec.resourceGroups`). Borrowing and lending limits are allowed only on a cohort with a parent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, BTreeMap<String, ResourceQuota>>,
    /// Fair-sharing weight against the cohort's siblings (Cohort `spec.fairSharing.weight`, Kueue default 1);
    /// must be above 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Quantity>,
}

/// How a tier shares its quota within its cohort tree.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierSharing {
    /// Guaranteed floor per resource name: never lent (the ClusterQueue's `lendingLimit` is nominal minus floor,
    /// split over the tier's flavors like the nominal quota). At most the nominal quota.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub floor: BTreeMap<String, Quantity>,
    /// Fair-sharing weight against the other queues of the cohort (ClusterQueue `spec.fairSharing.weight`,
    /// Kueue default 1); must be above 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Quantity>,
    /// Whether the tier takes back quota it lent when its own workloads need it (ClusterQueue
    /// `preemption.reclaimWithinCohort`): `Always` (Kueue `Any`), `LowerPriority`, or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<Reclaim>,
    /// While borrowing, the tier may also preempt other tiers' workloads of this priority bucket (by name) or
    /// lower (`preemption.borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: <bucket value>}`).
    /// Needs `reclaim` other than `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_while_borrowing_up_to: Option<String>,
}

/// When a tier takes back the quota it lent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Reclaim {
    /// Preempt any borrowing workload, whatever its priority (Kueue `Any`).
    Always,
    /// Preempt borrowing workloads of lower priority than the one waiting (Kueue `LowerPriority`).
    LowerPriority,
    /// Never preempt to get lent quota back: it returns when borrowers finish (Kueue `Never`).
    Never,
}

impl Reclaim {
    /// Kueue's `preemption.reclaimWithinCohort` value.
    pub fn kueue_value(self) -> &'static str {
        match self {
            Self::Always => "Any",
            Self::LowerPriority => "LowerPriority",
            Self::Never => "Never",
        }
    }
}

impl TierPolicySpec {
    /// The declared cohort called `name`.
    pub fn cohort(&self, name: &str) -> Option<&CohortNode> {
        self.cohorts.iter().find(|cohort| cohort.name == name)
    }

    /// `name` and its declared ancestors, nearest first; stops at an unknown parent or a repeated name (a cycle),
    /// so it always ends.
    pub fn cohort_chain<'a>(&'a self, name: &'a str) -> Vec<&'a str> {
        let mut chain: Vec<&str> = vec![name];
        let mut current = name;
        while let Some(parent) = self.cohort(current).and_then(|cohort| cohort.parent.as_deref()) {
            if chain.contains(&parent) {
                break;
            }
            chain.push(parent);
            current = parent;
        }
        chain
    }

    /// The root of the tree `name` belongs to (itself for a flat or undeclared cohort).
    pub fn cohort_root<'a>(&'a self, name: &'a str) -> &'a str {
        self.cohort_chain(name).last().copied().unwrap_or(name)
    }

    /// The tiers whose cohort is `name` or lies below it, in tier order.
    pub fn tiers_under<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Tier> + 'a {
        self.tiers
            .iter()
            .filter(move |tier| tier.cohort.as_deref().is_some_and(|cohort| self.cohort_chain(cohort).contains(&name)))
    }
}

impl Tier {
    /// The tier's reclaim policy as Kueue sees it: `sharing.reclaim`, else `preemption.reclaimWithinCohort`,
    /// else Kueue's default `Never`.
    pub fn reclaim_value(&self) -> &str {
        if let Some(reclaim) = self.sharing.as_ref().and_then(|sharing| sharing.reclaim) {
            return reclaim.kueue_value();
        }
        self.preemption.as_ref().and_then(|preemption| preemption.reclaim_within_cohort.as_deref()).unwrap_or("Never")
    }
}
