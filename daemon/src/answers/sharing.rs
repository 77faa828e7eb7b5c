//! The cohort tree in the answers (issue 28): for `status`, what each tier lends and each cohort's nominal, usage,
//! borrowing, lending and weighted share; for `why`, the sentence naming borrowing or reclaim when they are what
//! holds or preempted a job. Built from the ClusterQueue and Cohort status Kueue writes; pure, no I/O.
//!
//! Kueue records what each ClusterQueue borrows (`flavorsUsage[].resources[].borrowed`) but not whose quota it
//! borrows. What a tier lends is therefore derived per tree, flavor and resource: the tree's borrowed total is
//! served first by the cohorts' own pools, then by the tiers' idle lendable quota (nominal minus own use, within
//! the lending limit) in policy order. A cohort lends what the queues outside it borrow beyond their own quota,
//! up to its idle quota.

use std::collections::BTreeMap;

use serde::Serialize;

use super::kueue::{KueueClusterQueue, KueueCohort, KueueCondition, quantity_text};
use crate::plan::names::cluster_queue_name;
use crate::plan::quota::{format_millis, parse_millis, tier_quota};
use crate::policy::{Tier, TierPolicySpec};

/// One cohort and resource in `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CohortStatus {
    /// Cohort name.
    pub cohort: String,
    /// Its parent, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Resource name.
    pub resource: String,
    /// Nominal quota at or below the cohort: its pools and its queues' quotas.
    pub nominal: String,
    /// Used by the queues below it.
    pub used: String,
    /// Used beyond the subtree's own quota, borrowed from the rest of the tree.
    pub borrowed: String,
    /// The subtree's idle quota used by queues outside it.
    pub lent: String,
    /// Kueue's `status.fairSharing.weightedShare` of the Cohort (absent when fair sharing is off or the Cohort
    /// is missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weighted_share: Option<i64>,
}

/// Key of per-flavor amounts: (flavor, resource).
type FlavorResource = (String, String);

/// Quota and usage of one ClusterQueue, in milli-units, per flavor and resource.
#[derive(Clone, Debug, Default)]
struct QueueAmounts {
    nominal: BTreeMap<FlavorResource, i128>,
    lending_limit: BTreeMap<FlavorResource, i128>,
    used: BTreeMap<FlavorResource, i128>,
    borrowed: BTreeMap<FlavorResource, i128>,
}

fn millis(value: Option<&serde_json::Value>) -> i128 {
    parse_millis(&quantity_text(value)).unwrap_or(0)
}

fn queue_amounts(queue: &KueueClusterQueue) -> QueueAmounts {
    let mut amounts = QueueAmounts::default();
    for flavor in queue.spec.resource_groups.iter().flat_map(|group| group.flavors.iter()) {
        for resource in &flavor.resources {
            let key = (flavor.name.clone(), resource.name.clone());
            amounts.nominal.insert(key.clone(), millis(resource.nominal_quota.as_ref()));
            if let Some(limit) = &resource.lending_limit {
                amounts.lending_limit.insert(key, millis(Some(limit)));
            }
        }
    }
    for flavor in &queue.status.flavors_usage {
        for resource in &flavor.resources {
            let key = (flavor.name.clone(), resource.name.clone());
            amounts.used.insert(key.clone(), millis(resource.total.as_ref()));
            amounts.borrowed.insert(key, millis(resource.borrowed.as_ref()));
        }
    }
    amounts
}

/// The live ClusterQueue of `tier`, by its generated name.
fn queue_of<'a>(tier: &Tier, queues: &'a [KueueClusterQueue]) -> Option<&'a KueueClusterQueue> {
    let name = cluster_queue_name(&tier.name);
    queues.iter().find(|queue| queue.metadata.name.as_deref() == Some(name.as_str()))
}

/// Idle quota a queue offers its cohort now: within its lending limit, minus what it uses of its own.
fn idle_lendable(amounts: &QueueAmounts, key: &FlavorResource) -> i128 {
    let nominal = amounts.nominal.get(key).copied().unwrap_or(0);
    let own_use = amounts.used.get(key).copied().unwrap_or(0) - amounts.borrowed.get(key).copied().unwrap_or(0);
    let lendable = amounts.lending_limit.get(key).copied().unwrap_or(nominal);
    lendable.min(nominal - own_use).max(0)
}

/// What each tier lends now, per (tier, flavor, resource), in milli-units (see the module's derivation).
pub fn lent_by_tier(spec: &TierPolicySpec, queues: &[KueueClusterQueue]) -> BTreeMap<(String, String, String), i128> {
    let mut lent = BTreeMap::new();
    let mut roots: Vec<&str> =
        spec.tiers.iter().filter_map(|tier| tier.cohort.as_deref()).map(|cohort| spec.cohort_root(cohort)).collect();
    roots.sort_unstable();
    roots.dedup();
    for root in roots {
        let members: Vec<(&Tier, QueueAmounts)> = spec
            .tiers_under(root)
            .filter_map(|tier| queue_of(tier, queues).map(|queue| (tier, queue_amounts(queue))))
            .collect();
        let mut borrowed: BTreeMap<FlavorResource, i128> = BTreeMap::new();
        for (_, amounts) in &members {
            for (key, amount) in &amounts.borrowed {
                *borrowed.entry(key.clone()).or_insert(0) += amount;
            }
        }
        for (key, total) in borrowed {
            let mut remaining = total - pool_quota(spec, root, &key);
            for (tier, amounts) in &members {
                if remaining <= 0 {
                    break;
                }
                let share = idle_lendable(amounts, &key).min(remaining);
                if share > 0 {
                    lent.insert((tier.name.clone(), key.0.clone(), key.1.clone()), share);
                    remaining -= share;
                }
            }
        }
    }
    lent
}

/// The pools of every cohort at or below `cohort` for one flavor and resource.
fn pool_quota(spec: &TierPolicySpec, cohort: &str, (flavor, resource): &FlavorResource) -> i128 {
    spec.cohorts
        .iter()
        .filter(|node| spec.cohort_chain(&node.name).contains(&cohort))
        .filter_map(|node| node.pools.get(flavor).and_then(|pool| pool.get(resource)))
        .filter_map(|quota| parse_millis(&quota.nominal.0))
        .sum()
}

/// One row per declared cohort and resource, in declaration order, resources sorted.
pub fn build_cohort_statuses(
    spec: &TierPolicySpec,
    queues: &[KueueClusterQueue],
    cohorts: &[KueueCohort],
) -> Vec<CohortStatus> {
    let mut rows = Vec::new();
    for cohort in &spec.cohorts {
        let root = spec.cohort_root(&cohort.name);
        let inside: Vec<&str> = spec.tiers_under(&cohort.name).map(|tier| tier.name.as_str()).collect();
        let sum = |tiers: &mut dyn Iterator<Item = &Tier>| {
            let mut total = QueueAmounts::default();
            for amounts in tiers.filter_map(|tier| queue_of(tier, queues)).map(queue_amounts) {
                for (key, value) in amounts.nominal {
                    *total.nominal.entry(key).or_insert(0) += value;
                }
                for (key, value) in amounts.used {
                    *total.used.entry(key).or_insert(0) += value;
                }
            }
            total
        };
        let subtree = sum(&mut spec.tiers_under(&cohort.name));
        let outside = sum(&mut spec.tiers_under(root).filter(|tier| !inside.contains(&tier.name.as_str())));
        let mut keys: Vec<FlavorResource> = subtree.nominal.keys().chain(subtree.used.keys()).cloned().collect();
        for node in spec.cohorts.iter().filter(|node| spec.cohort_chain(&node.name).contains(&cohort.name.as_str())) {
            for (class, pool) in &node.pools {
                keys.extend(pool.keys().map(|resource| (class.clone(), resource.clone())));
            }
        }
        keys.sort();
        keys.dedup();
        let mut per_resource: BTreeMap<String, [i128; 4]> = BTreeMap::new();
        for key in keys {
            let nominal = subtree.nominal.get(&key).copied().unwrap_or(0) + pool_quota(spec, &cohort.name, &key);
            let used = subtree.used.get(&key).copied().unwrap_or(0);
            let outside_excess =
                (outside.used.get(&key).copied().unwrap_or(0) - outside.nominal.get(&key).copied().unwrap_or(0)).max(0);
            let row = per_resource.entry(key.1.clone()).or_insert([0; 4]);
            row[0] += nominal;
            row[1] += used;
            row[2] += (used - nominal).max(0);
            row[3] += outside_excess.min((nominal - used).max(0));
        }
        let weighted_share = cohorts
            .iter()
            .find(|live| live.metadata.name.as_deref() == Some(cohort.name.as_str()))
            .and_then(|live| live.status.fair_sharing.as_ref())
            .and_then(|fair| fair.weighted_share);
        for (resource, [nominal, used, borrowed, lent]) in per_resource {
            let text = |value: i128| amount_text(value, if resource == "memory" { "Gi" } else { "" });
            rows.push(CohortStatus {
                cohort: cohort.name.clone(),
                parent: cohort.parent.clone(),
                resource: resource.clone(),
                nominal: text(nominal),
                used: text(used),
                borrowed: text(borrowed),
                lent: text(lent),
                weighted_share,
            });
        }
    }
    rows
}

/// `millis` for the `status` table, as the quota of `like` is written.
pub fn amount_text(millis: i128, like: &str) -> String {
    if millis == 0 { "0".to_owned() } else { format_millis(millis, like) }
}

/// The `why` sentence about the cohort tree, when borrowing or reclaim is what holds or preempted the workload:
/// preempted by a reclaim, by fair sharing or by priority; admitted on a flavor where its tier has no quota of
/// its own (so it runs on borrowed quota and may be reclaimed); or pending at its tier's borrowing limit.
pub fn sharing_note(
    spec: &TierPolicySpec,
    tier: Option<&str>,
    conditions: &[KueueCondition],
    admitted_flavors: &[String],
    pending_message: Option<&str>,
) -> Option<String> {
    let tier = tier.and_then(|name| spec.tier(name));
    let cohort = tier.and_then(|tier| tier.cohort.as_deref()).unwrap_or("its cohort");
    let preempted = conditions.iter().find(|condition| condition.type_ == "Preempted" && condition.status == "True");
    if let Some(preempted) = preempted {
        return Some(match preempted.reason.as_str() {
            "InCohortReclamation" => format!(
                "It was preempted by reclaim: it ran on quota borrowed within cohort {cohort}, and the tier that lent \
                 it took it back for its own jobs (its sharing.reclaim)."
            ),
            "InCohortFairSharing" => format!(
                "It was preempted by fair sharing: its tier held more than its weighted share of what cohort {cohort} \
                 lends, and a tier below its share needed the quota."
            ),
            "InCohortReclaimWhileBorrowing" => format!(
                "It was preempted by a tier of cohort {cohort} that may preempt while borrowing \
                 (sharing.preemptWhileBorrowingUpTo)."
            ),
            "InClusterQueue" => "It was preempted within its own tier by a higher-priority workload.".to_owned(),
            other => format!("It was preempted ({other}: {}).", preempted.message),
        });
    }
    let tier = tier?;
    if !admitted_flavors.is_empty() {
        let quota = tier_quota(spec, tier);
        let borrowed: Vec<&str> = admitted_flavors
            .iter()
            .filter(|flavor| quota.flavors.iter().any(|share| &share.selector.flavor == *flavor && share.gpus == 0))
            .map(String::as_str)
            .collect();
        if !borrowed.is_empty() && tier.cohort.is_some() {
            return Some(format!(
                "It runs on GPUs of flavor {} borrowed within cohort {cohort} (tier {} has no quota of its own there): \
                 the lender may reclaim them, preempting it, when its own jobs need them.",
                borrowed.join(", "),
                tier.name
            ));
        }
    }
    let message = pending_message?.to_ascii_lowercase();
    (tier.cohort.is_some() && message.contains("borrowing limit")).then(|| {
        format!(
            "It waits at tier {}'s borrowing limit: the tier already borrows all its quotas' borrowingLimit allows \
             within cohort {cohort}.",
            tier.name
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::parse_policy;
    use serde_json::json;

    fn org_tree() -> crate::policy::TierPolicy {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/org-tree/policy.yaml"));
        parse_policy(&text.unwrap(), "org-tree").unwrap()
    }

    /// A ClusterQueue of `tier` with `nominal` H100s (lending `lending`), using `used`, `borrowed` of them.
    fn queue(tier: &str, nominal: u32, lending: Option<u32>, used: u32, borrowed: u32) -> KueueClusterQueue {
        let mut resource = json!({"name": "nvidia.com/gpu", "nominalQuota": nominal.to_string()});
        if let Some(lending) = lending {
            resource["lendingLimit"] = json!(lending.to_string());
        }
        serde_json::from_value(json!({
            "metadata": {"name": format!("tiergate-{tier}")},
            "spec": {"cohortName": "x", "resourceGroups": [{"flavors": [{"name": "h100", "resources": [resource]}]}]},
            "status": {"flavorsUsage": [{"name": "h100", "resources": [
                {"name": "nvidia.com/gpu", "total": used.to_string(), "borrowed": borrowed.to_string()}]}],
                "fairSharing": {"weightedShare": 250}},
        }))
        .unwrap()
    }

    #[test]
    fn what_silver_and_bronze_borrow_is_lent_by_gold_within_its_lending_limit() {
        let policy = org_tree();
        let queues =
            [queue("gold", 16, Some(12), 0, 0), queue("silver", 0, None, 5, 5), queue("bronze", 0, None, 3, 3)];
        let lent = lent_by_tier(&policy.spec, &queues);
        assert_eq!(lent.get(&("gold".into(), "h100".into(), "nvidia.com/gpu".into())), Some(&8_000));
        assert_eq!(lent.len(), 1, "{lent:?}");
    }

    #[test]
    fn the_research_cohort_lends_what_batch_borrows_and_org_borrows_nothing() {
        let policy = org_tree();
        let queues =
            [queue("gold", 16, Some(12), 2, 0), queue("silver", 0, None, 5, 5), queue("bronze", 0, None, 3, 3)];
        let cohorts: Vec<KueueCohort> = vec![
            serde_json::from_value(
                json!({"metadata": {"name": "batch"}, "status": {"fairSharing": {"weightedShare": 187}}}),
            )
            .unwrap(),
        ];
        let rows = build_cohort_statuses(&policy.spec, &queues, &cohorts);
        let row =
            |cohort: &str| rows.iter().find(|row| row.cohort == cohort && row.resource == "nvidia.com/gpu").unwrap();
        let research = row("research");
        assert_eq!((research.nominal.as_str(), research.used.as_str()), ("16", "7"));
        assert_eq!((research.borrowed.as_str(), research.lent.as_str()), ("0", "3"));
        let batch = row("batch");
        // batch owns a pool of 4 L4s; its 3 H100s are borrowed from research.
        assert_eq!((batch.nominal.as_str(), batch.used.as_str(), batch.borrowed.as_str()), ("4", "3", "3"));
        assert_eq!(batch.weighted_share, Some(187));
        let org = row("org");
        assert_eq!((org.borrowed.as_str(), org.lent.as_str()), ("0", "0"));
    }

    #[test]
    fn status_shows_what_gold_lends_the_weighted_shares_and_a_row_per_cohort() {
        let policy = org_tree();
        let queues =
            [queue("gold", 16, Some(12), 0, 0), queue("silver", 0, None, 5, 5), queue("bronze", 0, None, 3, 3)];
        let inputs = crate::answers::StatusInputs {
            policy: &policy,
            other_policies: &[],
            cluster_queues: &queues,
            cohorts: &[],
            pools: &[],
            local_queues: &[],
            tier: None,
        };
        let answer = crate::answers::build_status_answer(&inputs).unwrap();
        let gold = &answer.tiers[0];
        assert_eq!(gold.weighted_share, Some(250));
        let gpu = gold.flavors.iter().find(|flavor| flavor.resource == "nvidia.com/gpu").unwrap();
        assert_eq!((gpu.quota.as_str(), gpu.used.as_str(), gpu.lent.as_str()), ("16", "0", "8"));
        let table = answer.to_table();
        assert!(table.contains("COHORT     PARENT   RESOURCE"), "{table}");
        assert!(
            table.lines().any(|line| line.split_whitespace().collect::<Vec<_>>()
                == ["research", "org", "nvidia.com/gpu", "16", "5", "0", "3", "-"]),
            "{table}"
        );
    }

    #[test]
    fn why_names_reclaim_borrowing_and_the_borrowing_limit() {
        let policy = org_tree();
        let preempted = KueueCondition {
            type_: "Preempted".into(),
            status: "True".into(),
            reason: "InCohortReclamation".into(),
            message: "Preempted to accommodate a workload due to reclamation within the cohort".into(),
        };
        let note = sharing_note(&policy.spec, Some("silver"), &[preempted], &[], None).unwrap();
        assert!(note.contains("preempted by reclaim") && note.contains("cohort research"), "{note}");
        let note = sharing_note(&policy.spec, Some("silver"), &[], &["h100".into()], None).unwrap();
        assert!(note.contains("flavor h100 borrowed within cohort research"), "{note}");
        assert_eq!(sharing_note(&policy.spec, Some("silver"), &[], &["a100".into()], None), None);
        let waiting =
            "couldn't assign flavors to pod set main: exceeds the borrowing limit for nvidia.com/gpu in flavor h100";
        let note = sharing_note(&policy.spec, Some("bronze"), &[], &[], Some(waiting)).unwrap();
        assert!(note.contains("borrowing limit") && note.contains("cohort batch"), "{note}");
        assert_eq!(sharing_note(&policy.spec, Some("gold"), &[], &[], Some("insufficient unused quota")), None);
    }
}
