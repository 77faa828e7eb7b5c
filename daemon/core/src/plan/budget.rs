//! Tier budgets in the plan: the ClusterQueue of a tier whose budget `status.usage` shows used up gets Kueue's
//! `stopPolicy: Hold` (admitted workloads run on, new ones wait); pure, no I/O.

use tiergate_kueue::{ClusterQueue, StopPolicy};

use super::names::cluster_queue_name;
use crate::policy::TierPolicy;
use crate::policy::budget::spent_budgets;

/// Holds the ClusterQueues in `queues` of `policy`'s tiers with a spent budget. `Hold`, never `HoldAndDrain`: a
/// spent budget stops new admissions and leaves running work alone.
pub fn hold_spent_budgets(queues: &mut [ClusterQueue], policy: &TierPolicy) {
    let spent = spent_budgets(&policy.spec, policy.status.as_ref().and_then(|status| status.usage.as_ref()));
    for budget in spent {
        let name = cluster_queue_name(&budget.tier);
        for queue in queues.iter_mut().filter(|queue| queue.metadata.name.as_deref() == Some(name.as_str())) {
            queue.spec.stop_policy = Some(StopPolicy::Hold);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::inputs::load_policy;
    use crate::policy::{Budget, TierPolicyStatus, UsageBucket, UsageStatus, UsageTotals, WindowUsage};

    fn policy_with(limit: &str, used_seconds: &str) -> TierPolicy {
        let mut policy = load_policy(None).unwrap();
        let tier = policy.spec.tiers[0].name.clone();
        policy.spec.tiers[0].budget =
            Some(Budget { limits: BTreeMap::from([("nvidia.com/gpu".to_owned(), limit.to_owned())]), window: None });
        let totals = UsageTotals {
            current: BTreeMap::from([("nvidia.com/gpu".to_owned(), used_seconds.to_owned())]),
            previous: BTreeMap::new(),
        };
        policy.status = Some(TierPolicyStatus {
            usage: Some(UsageStatus {
                checkpoint_time: "2026-12-02T08:00:00Z".into(),
                period: Default::default(),
                time_zone: "UTC".into(),
                period_start: "2026-12-01T00:00:00Z".into(),
                period_end: "2027-01-01T00:00:00Z".into(),
                previous_period_start: "2026-11-01T00:00:00Z".into(),
                tiers: BTreeMap::from([(tier, totals)]),
                namespaces: BTreeMap::new(),
                windows: BTreeMap::new(),
            }),
            ..TierPolicyStatus::default()
        });
        policy
    }

    fn stop_policies(policy: &TierPolicy) -> Vec<(String, Option<StopPolicy>)> {
        let queues = crate::plan::desired_cluster_scoped(policy).cluster_queues;
        queues.into_iter().map(|queue| (queue.metadata.name.unwrap_or_default(), queue.spec.stop_policy)).collect()
    }

    #[test]
    fn a_spent_budget_holds_only_its_tiers_cluster_queue() {
        let policy = policy_with("2h", "7200");
        let held = stop_policies(&policy);
        let first = cluster_queue_name(&policy.spec.tiers[0].name);
        for (name, stop) in held {
            let expected = (name == first).then_some(StopPolicy::Hold);
            assert_eq!(stop, expected, "{name}");
        }
    }

    #[test]
    fn a_budget_with_room_left_or_raised_holds_nothing() {
        assert!(stop_policies(&policy_with("2h", "7199.999")).iter().all(|(_, stop)| stop.is_none()));
        assert!(stop_policies(&policy_with("3h", "7200")).iter().all(|(_, stop)| stop.is_none()));
    }

    #[test]
    fn counts_of_another_period_hold_nothing_until_recounted() {
        let mut policy = policy_with("2h", "9000");
        policy.spec.accounting =
            Some(crate::policy::Accounting { period: Some(crate::policy::AccountingPeriod::Day), time_zone: None });
        assert!(stop_policies(&policy).iter().all(|(_, stop)| stop.is_none()));
    }

    /// `policy_with`'s policy, its budget over a 2 h window whose buckets hold 5400 GPU-seconds long ago and
    /// `recent` in the last bucket.
    fn windowed(recent: &str) -> TierPolicy {
        let mut policy = policy_with("2h", "9000");
        let tier = policy.spec.tiers[0].name.clone();
        if let Some(budget) = policy.spec.tiers[0].budget.as_mut() {
            budget.window = Some("2h".into());
        }
        let bucket = |start: &str, used: &str| UsageBucket {
            start: start.into(),
            used: BTreeMap::from([("nvidia.com/gpu".to_owned(), used.to_owned())]),
        };
        let buckets = vec![bucket("2026-12-02T05:00:00Z", "5400"), bucket("2026-12-02T07:57:30Z", recent)];
        if let Some(usage) = policy.status.as_mut().and_then(|status| status.usage.as_mut()) {
            usage.windows = BTreeMap::from([(tier, WindowUsage { window: "2h".into(), bucket_seconds: 150, buckets })]);
        }
        policy
    }

    #[test]
    fn the_next_release_is_the_period_turn_or_when_enough_use_leaves_the_window() {
        use crate::policy::budget::next_release;
        use crate::syntax::parse_instant;
        let usage = |policy: &TierPolicy| policy.status.clone().and_then(|status| status.usage).unwrap();
        let spent = policy_with("2h", "7200");
        assert_eq!(next_release(&spent.spec, &usage(&spent)), parse_instant("2027-01-01T00:00:00Z"));
        let room = policy_with("3h", "7200");
        assert_eq!(next_release(&room.spec, &usage(&room)), None, "nothing spent, nothing to wake for");
        // The last bucket (07:57:30, 150 s) holds the whole limit; it leaves the 2 h window at 10:00.
        let window = windowed("7200");
        assert_eq!(next_release(&window.spec, &usage(&window)), parse_instant("2026-12-02T10:00:00Z"));
    }

    #[test]
    fn a_windowed_budget_holds_by_the_use_in_its_window_not_the_periods() {
        // 9000 GPU-seconds this period, but only the last bucket's use is in the window ending at 08:00.
        assert!(stop_policies(&windowed("3600")).iter().all(|(_, stop)| stop.is_none()), "3600 of 7200");
        let policy = windowed("7200");
        let first = cluster_queue_name(&policy.spec.tiers[0].name);
        let held: Vec<String> =
            stop_policies(&policy).into_iter().filter(|(_, stop)| stop.is_some()).map(|(name, _)| name).collect();
        assert_eq!(held, [first]);
    }
}
