//! The cohort tree in Kueue terms (issue 28): one `Cohort` per `spec.cohorts` entry, and what a tier's `sharing`
//! block adds to its ClusterQueue (lending limits from the floor, fair-sharing weight, preemption); pure, no I/O.
//!
//! The floor is applied before the quota split ([`with_floor`]): a tier's lending limit becomes nominal minus
//! floor, and [`super::quota::tier_quota`] splits it over the flavors like the nominal quota, so issue 19's rule
//! (a tier never offers more than its nominal, and its limits follow the same split) still holds. Per cohort,
//! [`cohort_nominal`] adds up the nominal quota below it: its own pools, its tiers' and its child cohorts'.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tiergate_kueue::{
    BorrowWithinCohort, ClusterQueuePreemption, Cohort, CohortSpec, FairSharing, FlavorQuotas, ResourceGroup,
    ResourceQuota as KueueResourceQuota,
};

use super::class_flavor_name;
use super::names::{bounded_name, gpu_class_flavor_name};
use super::quota::{format_millis, parse_millis, tier_quota};
use crate::policy::{CohortNode, Tier, TierPolicySpec};

/// The Cohorts of `spec`, parents before children (then in declaration order). `keep_all` keeps every declared
/// cohort; otherwise only those on the way from a tier of `tiers` to its root (a worker cluster's share).
pub fn build_cohorts(
    spec: &TierPolicySpec,
    labels: &BTreeMap<String, String>,
    tiers: &[&Tier],
    keep_all: bool,
) -> Vec<Cohort> {
    let needed: Vec<&str> =
        tiers.iter().filter_map(|tier| tier.cohort.as_deref()).flat_map(|name| spec.cohort_chain(name)).collect();
    let mut cohorts: Vec<(usize, &CohortNode)> = spec
        .cohorts
        .iter()
        .filter(|cohort| keep_all || needed.contains(&cohort.name.as_str()))
        .map(|cohort| (spec.cohort_chain(&cohort.name).len(), cohort))
        .collect();
    cohorts.sort_by_key(|(depth, _)| *depth);
    cohorts
        .into_iter()
        .map(|(_, cohort)| Cohort {
            metadata: ObjectMeta {
                name: Some(cohort.name.clone()),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            spec: CohortSpec {
                parent_name: cohort.parent.clone(),
                resource_groups: build_pool_groups(spec, cohort),
                fair_sharing: cohort.weight.clone().map(|weight| FairSharing { weight: Some(weight) }),
            },
        })
        .collect()
}

/// A cohort's pools as one resource group: its classes' flavors (name order), each listing every resource any
/// pool names (0 where a pool does not), as Kueue requires every flavor to cover the group's resources.
fn build_pool_groups(spec: &TierPolicySpec, cohort: &CohortNode) -> Vec<ResourceGroup> {
    if cohort.pools.is_empty() {
        return Vec::new();
    }
    let mut covered: Vec<String> = cohort.pools.values().flat_map(|pool| pool.keys().cloned()).collect();
    covered.sort();
    covered.dedup();
    let flavors = cohort
        .pools
        .iter()
        .map(|(class, pool)| FlavorQuotas {
            name: spec.gpu_class(class).map_or_else(|| gpu_class_flavor_name(class, None), class_flavor_name),
            resources: covered
                .iter()
                .map(|resource| match pool.get(resource) {
                    Some(quota) => KueueResourceQuota {
                        name: resource.clone(),
                        nominal_quota: quota.nominal.clone(),
                        borrowing_limit: quota.borrowing_limit.clone(),
                        lending_limit: quota.lending_limit.clone(),
                    },
                    None => KueueResourceQuota {
                        name: resource.clone(),
                        nominal_quota: Quantity("0".into()),
                        borrowing_limit: None,
                        lending_limit: None,
                    },
                })
                .collect(),
        })
        .collect();
    vec![ResourceGroup { covered_resources: covered, flavors }]
}

/// `tier` with its floor turned into lending limits (nominal minus floor, per resource); unchanged without one.
/// A floor that is not below the nominal quota (refused by validation) lends nothing.
pub fn with_floor(tier: &Tier) -> Tier {
    let mut tier = tier.clone();
    let floors = tier.sharing.as_ref().map(|sharing| sharing.floor.clone()).unwrap_or_default();
    for (resource, floor) in floors {
        let Some(quota) = tier.quotas.get_mut(&resource) else { continue };
        let lendable = match (parse_millis(&quota.nominal.0), parse_millis(&floor.0)) {
            (Some(nominal), Some(floor)) => nominal.saturating_sub(floor).max(0),
            _ => 0,
        };
        quota.lending_limit = Some(Quantity(format_millis(lendable, &quota.nominal.0)));
    }
    tier
}

/// The ClusterQueue's `fairSharing`, when the tier sets a weight.
pub fn build_fair_sharing(tier: &Tier) -> Option<FairSharing> {
    let weight = tier.sharing.as_ref()?.weight.clone()?;
    Some(FairSharing { weight: Some(weight) })
}

/// The ClusterQueue's `preemption`: the tier's `preemption` block with `sharing.reclaim` and
/// `sharing.preemptWhileBorrowingUpTo` (a bucket's value as the threshold) written over it.
pub fn build_preemption(spec: &TierPolicySpec, tier: &Tier) -> Option<ClusterQueuePreemption> {
    let mut preemption = tier.preemption.as_ref().map(|preemption| ClusterQueuePreemption {
        reclaim_within_cohort: preemption.reclaim_within_cohort.clone(),
        within_cluster_queue: preemption.within_cluster_queue.clone(),
        borrow_within_cohort: preemption.borrow_within_cohort.as_ref().map(|borrow| BorrowWithinCohort {
            policy: Some(borrow.policy.clone()),
            max_priority_threshold: borrow.max_priority_threshold,
        }),
    });
    let Some(sharing) = &tier.sharing else { return preemption };
    if let Some(reclaim) = sharing.reclaim {
        preemption.get_or_insert_with(ClusterQueuePreemption::default).reclaim_within_cohort =
            Some(reclaim.kueue_value().to_owned());
    }
    if let Some(bucket) = &sharing.preempt_while_borrowing_up_to {
        let threshold = spec.priority_buckets.iter().find(|candidate| &candidate.name == bucket).map(|b| b.value);
        preemption.get_or_insert_with(ClusterQueuePreemption::default).borrow_within_cohort =
            Some(BorrowWithinCohort { policy: Some("LowerPriority".to_owned()), max_priority_threshold: threshold });
    }
    preemption
}

/// Nominal quota per resource at or below cohort `name`, in milli-units: its own pools, the nominal quota of
/// every tier whose cohort is it or a descendant (as its flavors offer it), and so its child cohorts'.
pub fn cohort_nominal(spec: &TierPolicySpec, name: &str) -> BTreeMap<String, i128> {
    let mut total: BTreeMap<String, i128> = BTreeMap::new();
    let below = spec.cohorts.iter().filter(|cohort| spec.cohort_chain(&cohort.name).contains(&name));
    for cohort in below {
        for pool in cohort.pools.values() {
            for (resource, quota) in pool {
                *total.entry(resource.clone()).or_insert(0) += parse_millis(&quota.nominal.0).unwrap_or(0);
            }
        }
    }
    for tier in spec.tiers_under(name) {
        let quota = tier_quota(spec, tier);
        for resource in tier.quotas.keys() {
            *total.entry(resource.clone()).or_insert(0) += quota.total_millis(resource).unwrap_or(0);
        }
    }
    total
}

/// Each cohort's nominal quota per resource as text for people (`tiergate check`): the quota-sum rule per cohort.
pub fn cohort_summary(spec: &TierPolicySpec) -> String {
    let mut text = String::new();
    for cohort in &spec.cohorts {
        let parent = cohort.parent.as_deref().map_or_else(|| "root".to_owned(), |parent| format!("under {parent}"));
        let totals: Vec<String> = cohort_nominal(spec, &cohort.name)
            .into_iter()
            .map(|(resource, millis)| {
                let like = if resource == "memory" { "Gi" } else { "" };
                format!("{resource} {}", format_millis(millis, like))
            })
            .collect();
        text.push_str(&format!("cohort {} ({parent}): {}\n", bounded_name(&cohort.name), totals.join(", ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TierPolicy;

    fn org_tree() -> TierPolicy {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/org-tree/policy.yaml"));
        crate::inputs::parse_policy(&text.unwrap(), "org-tree").unwrap()
    }

    #[test]
    fn cohorts_come_parents_first_with_their_parent_and_weight() {
        let policy = org_tree();
        let tiers: Vec<&Tier> = policy.spec.tiers.iter().collect();
        let cohorts = build_cohorts(&policy.spec, &BTreeMap::new(), &tiers, true);
        let names: Vec<&str> = cohorts.iter().filter_map(|cohort| cohort.metadata.name.as_deref()).collect();
        assert_eq!(names, ["org", "research", "batch"]);
        assert_eq!(cohorts[1].spec.parent_name.as_deref(), Some("org"));
        assert_eq!(cohorts[0].spec.parent_name, None);
        assert!(cohorts[1].spec.fair_sharing.is_some());
    }

    #[test]
    fn a_worker_gets_only_the_cohorts_above_its_tiers() {
        let policy = org_tree();
        let bronze: Vec<&Tier> = policy.spec.tiers.iter().filter(|tier| tier.name == "bronze").collect();
        let cohorts = build_cohorts(&policy.spec, &BTreeMap::new(), &bronze, false);
        let names: Vec<&str> = cohorts.iter().filter_map(|cohort| cohort.metadata.name.as_deref()).collect();
        assert_eq!(names, ["org", "batch"]);
    }

    #[test]
    fn the_floor_becomes_the_lending_limit_nominal_minus_floor() {
        let policy = org_tree();
        let gold = policy.spec.tier("gold").unwrap();
        let floored = with_floor(gold);
        let nominal = parse_millis(&gold.quotas["nvidia.com/gpu"].nominal.0).unwrap();
        let floor = parse_millis(&gold.sharing.as_ref().unwrap().floor["nvidia.com/gpu"].0).unwrap();
        let lending = floored.quotas["nvidia.com/gpu"].lending_limit.as_ref().unwrap();
        assert_eq!(parse_millis(&lending.0), Some(nominal - floor));
        assert!(floor > 0 && floor < nominal);
    }

    #[test]
    fn reclaim_always_is_kueue_any_and_the_borrowing_threshold_is_the_bucket_value() {
        let mut policy = org_tree();
        let tier = policy.spec.tiers.iter_mut().find(|tier| tier.name == "gold").unwrap();
        let sharing = tier.sharing.get_or_insert_with(Default::default);
        sharing.reclaim = Some(crate::policy::Reclaim::Always);
        sharing.preempt_while_borrowing_up_to = Some("gpu-medium".into());
        let tier = policy.spec.tier("gold").unwrap();
        let preemption = build_preemption(&policy.spec, tier).unwrap();
        assert_eq!(preemption.reclaim_within_cohort.as_deref(), Some("Any"));
        let borrow = preemption.borrow_within_cohort.unwrap();
        assert_eq!(borrow.policy.as_deref(), Some("LowerPriority"));
        assert_eq!(borrow.max_priority_threshold, Some(500));
    }

    #[test]
    fn the_summary_gives_each_cohort_its_parent_and_totals() {
        let summary = cohort_summary(&org_tree().spec);
        let line = |cohort: &str| {
            summary.lines().find(|line| line.starts_with(&format!("cohort {cohort} "))).unwrap().to_owned()
        };
        assert_eq!(line("org"), "cohort org (root): cpu 288, memory 1920Gi, nvidia.com/gpu 36");
        assert_eq!(line("research"), "cohort research (under org): cpu 192, memory 1536Gi, nvidia.com/gpu 24");
        assert_eq!(line("batch"), "cohort batch (under org): cpu 96, memory 384Gi, nvidia.com/gpu 12");
    }

    #[test]
    fn a_cohort_s_nominal_is_its_pools_plus_everything_below_it() {
        let policy = org_tree();
        let spec = &policy.spec;
        for cohort in &spec.cohorts {
            let total = cohort_nominal(spec, &cohort.name);
            let own: i128 = cohort
                .pools
                .values()
                .filter_map(|pool| pool.get("nvidia.com/gpu"))
                .filter_map(|q| parse_millis(&q.nominal.0))
                .sum();
            let tiers: i128 = spec
                .tiers
                .iter()
                .filter(|tier| tier.cohort.as_deref() == Some(cohort.name.as_str()))
                .filter_map(|tier| parse_millis(&tier.quotas["nvidia.com/gpu"].nominal.0))
                .sum();
            let children: i128 = spec
                .cohorts
                .iter()
                .filter(|child| child.parent.as_deref() == Some(cohort.name.as_str()))
                .map(|child| cohort_nominal(spec, &child.name).get("nvidia.com/gpu").copied().unwrap_or(0))
                .sum();
            assert_eq!(total.get("nvidia.com/gpu").copied().unwrap_or(0), own + tiers + children, "{}", cohort.name);
        }
        let org = cohort_nominal(spec, "org")["nvidia.com/gpu"];
        let all: i128 =
            spec.tiers.iter().filter_map(|tier| parse_millis(&tier.quotas["nvidia.com/gpu"].nominal.0)).sum();
        assert!(org >= all, "org {org} holds every tier's {all}");
    }
}
