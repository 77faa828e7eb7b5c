//! Property tests of the split and the ledger: for random strategies and random interleavings of creates,
//! deletions and cache syncs, each pod goes where the split says given the true counts, counts stay within the
//! documented bounds, and two blind replicas stay within their documented worst case.
#![cfg(test)]

mod placement_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use placement_support::*;
use proptest::prelude::*;
use tiergate::admission::Request;
use tiergate::placement::split::Split;
use tiergate::placement::{LedgerTimings, PlacementLedger, RULE_LABEL, STRATEGY_ANNOTATION};
use tiergate::view::PodView;

/// A strategy: base on the first rule, weights per rule (at least one non-zero).
#[derive(Clone, Debug)]
struct Plan {
    base: u32,
    weights: Vec<u32>,
}

impl Plan {
    fn canonical(&self) -> String {
        self.weights
            .iter()
            .enumerate()
            .map(|(index, weight)| {
                let base = if index == 0 { format!("base={},", self.base) } else { String::new() };
                format!("{base}weight={weight},nodeSelector=tier:r{index}")
            })
            .collect::<Vec<_>>()
            .join(";")
    }

    fn split(&self) -> Split {
        Split::new(self.base, self.weights.clone())
    }

    fn request(&self, uid: &str) -> Request {
        let annotations = BTreeMap::from([(STRATEGY_ANNOTATION.to_owned(), self.canonical())]);
        another(&with_annotations(burst("web-app", 1).remove(0), &annotations), uid)
    }

    fn counts(&self, pods: &[(PodView, bool)]) -> Vec<u32> {
        let mut counts = vec![0; self.weights.len()];
        for (pod, _) in pods {
            let index: usize = pod.labels.get(RULE_LABEL).unwrap().trim_start_matches('r').parse().unwrap();
            counts[index] += 1;
        }
        counts
    }
}

fn arb_plan() -> impl Strategy<Value = Plan> {
    (0u32..4, proptest::collection::vec(0u32..6, 1..5))
        .prop_filter("one weight above zero", |(_, weights)| weights.iter().any(|weight| *weight > 0))
        .prop_map(|(base, weights)| Plan { base, weights })
}

#[derive(Clone, Debug)]
enum Op {
    Create,
    /// Deletes the n-th pod the cache shows (modulo), as a ReplicaSet scale-down does.
    Delete(usize),
    /// The caches catch up: every live pod is shown.
    Sync,
}

fn arb_ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![5 => Just(Op::Create), 2 => any::<usize>().prop_map(Op::Delete), 2 => Just(Op::Sync)];
    proptest::collection::vec(op, 1..70)
}

/// `count − ideal < 1` and `ideal − count ≤ 1` for every rule (exact, scaled by the weight sum).
fn within_one(split: &Split, counts: &[u32]) -> bool {
    let total = counts.iter().map(|count| u64::from(*count)).sum();
    let scale = split.scale();
    counts.iter().zip(split.ideal_scaled(total)).all(|(count, ideal)| {
        let held = i128::from(*count) * scale;
        held - ideal < scale && ideal - held <= scale
    })
}

fn timings() -> LedgerTimings {
    LedgerTimings { in_flight_ttl: Duration::from_secs(3600), observed_grace: Duration::ZERO }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_pod_goes_where_the_split_says_for_the_true_counts_and_high_water_marks_stay_within_one(
        plan in arb_plan(),
        ops in arb_ops(),
    ) {
        let ledger = PlacementLedger::default().with_timings(timings());
        let split = plan.split();
        let mut now = Instant::now();
        // Live pods, and whether the cache shows them yet.
        let mut live: Vec<(PodView, bool)> = Vec::new();
        let mut high_water = 0;
        for (step, op) in ops.iter().enumerate() {
            now += Duration::from_millis(1);
            let cache = snapshot_with(live.iter().filter(|(_, cached)| *cached).map(|(pod, _)| pod.clone()).collect());
            match op {
                Op::Create => {
                    let truth = plan.counts(&live);
                    let request = plan.request(&format!("request-{step}"));
                    let outcome = ledger.assign_for_at(&request, &cache, now).unwrap();
                    prop_assert_eq!(rule_of(&outcome), format!("r{}", split.next_rule(&truth)));
                    live.push((admitted_pod(&request, &outcome, &format!("pod-{step}")), false));
                    let counts = plan.counts(&live);
                    if live.len() >= high_water {
                        high_water = live.len();
                        prop_assert!(within_one(&split, &counts), "{:?} at {} pods", counts, live.len());
                    }
                }
                Op::Delete(pick) => {
                    let cached: Vec<usize> = (0..live.len()).filter(|index| live[*index].1).collect();
                    if !cached.is_empty() {
                        live.remove(cached[pick % cached.len()]);
                    }
                }
                Op::Sync => {
                    for (_, cached) in &mut live {
                        *cached = true;
                    }
                    let synced = snapshot_with(live.iter().map(|(pod, _)| pod.clone()).collect());
                    ledger.observe_at(&synced, now);
                }
            }
        }
    }

    #[test]
    fn the_next_pod_never_goes_to_a_rule_at_or_above_its_ideal_share(
        plan in arb_plan(),
        counts in proptest::collection::vec(0u32..20, 4),
    ) {
        let split = plan.split();
        let counts = &counts[..plan.weights.len()];
        let chosen = split.next_rule(counts);
        let total: u64 = counts.iter().map(|count| u64::from(*count)).sum::<u64>() + 1;
        let ideal = split.ideal_scaled(total)[chosen];
        prop_assert!(ideal > i128::from(counts[chosen]) * split.scale());
    }

    #[test]
    fn two_blind_replicas_stay_within_replicas_plus_base_of_the_ideal_and_follow_the_split_after_a_sync(
        plan in arb_plan(),
        ops in proptest::collection::vec(prop_oneof![4 => (0usize..2).prop_map(Some), 1 => Just(None)], 1..60),
    ) {
        let replicas = [
            PlacementLedger::default().with_timings(timings()),
            PlacementLedger::default().with_timings(timings()),
        ];
        let split = plan.split();
        let bound = (2 + i128::from(plan.base)) * split.scale();
        let now = Instant::now();
        let mut live: Vec<(PodView, bool)> = Vec::new();
        let mut synced = true;
        // The bound is for one burst served blind from an empty start; a later burst starts from whatever
        // surplus the last one left (never moved), so only the follow-the-split property is checked after it.
        let mut first_burst = true;
        for (step, op) in ops.iter().enumerate() {
            let cache = snapshot_with(live.iter().filter(|(_, cached)| *cached).map(|(pod, _)| pod.clone()).collect());
            match op {
                Some(replica) => {
                    let truth = plan.counts(&live);
                    let request = plan.request(&format!("request-{step}"));
                    let outcome = replicas[*replica].assign_for_at(&request, &cache, now).unwrap();
                    if synced {
                        prop_assert_eq!(rule_of(&outcome), format!("r{}", split.next_rule(&truth)));
                    }
                    synced = false;
                    live.push((admitted_pod(&request, &outcome, &format!("pod-{step}")), false));
                    let counts = plan.counts(&live);
                    let ideal = split.ideal_scaled(live.len() as u64);
                    if first_burst {
                        for (count, ideal) in counts.iter().zip(ideal) {
                            prop_assert!((i128::from(*count) * split.scale() - ideal).abs() <= bound, "{:?}", counts);
                        }
                    }
                }
                None => {
                    for (_, cached) in &mut live {
                        *cached = true;
                    }
                    let all = snapshot_with(live.iter().map(|(pod, _)| pod.clone()).collect());
                    for replica in &replicas {
                        replica.observe_at(&all, now);
                    }
                    first_burst &= live.is_empty();
                    synced = true;
                }
            }
        }
    }
}
