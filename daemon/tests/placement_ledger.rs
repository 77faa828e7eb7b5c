//! The ledger over time: rebuilt from the pods after a restart, refilling the short rule after a scale-down,
//! expiring pods that never appeared, reading stale snapshots, and two webhook replicas sharing one cache.
#![cfg(test)]

mod placement_support;

use std::time::{Duration, Instant};

use placement_support::*;
use pretty_assertions::assert_eq;
use tiergate::admission::Request;
use tiergate::placement::split::Split;
use tiergate::placement::{LedgerTimings, PlacementLedger, PlacementOutcome};
use tiergate::view::{PodView, Snapshot};

/// The web-app pods of a burst of `count` (fixture pods reused under fresh request UIDs past the sixth).
fn web_app_pods(count: usize) -> Vec<Request> {
    let recorded = web_app_burst();
    (0..count).map(|index| another(&recorded[index % recorded.len()], &format!("request-{index}"))).collect()
}

fn alpine_pods(count: usize) -> Vec<Request> {
    let recorded = burst("alpine", 10);
    (0..count).map(|index| another(&recorded[index % recorded.len()], &format!("alpine-request-{index}"))).collect()
}

/// Admits `requests` in order against `snapshot`, returning each outcome with the pod the caches would show.
fn admit_all(
    ledger: &PlacementLedger,
    requests: &[Request],
    snapshot: &Snapshot,
    now: Instant,
) -> Vec<(PlacementOutcome, PodView)> {
    requests
        .iter()
        .map(|request| {
            let outcome = ledger.assign_for_at(request, snapshot, now).unwrap();
            let pod = admitted_pod(request, &outcome, &format!("pod-{}", request.uid));
            (outcome, pod)
        })
        .collect()
}

fn pods_of(admitted: &[(PlacementOutcome, PodView)]) -> Vec<PodView> {
    admitted.iter().map(|(_, pod)| pod.clone()).collect()
}

#[test]
fn a_restarted_replica_rebuilds_the_ledger_from_the_pods_and_continues_the_split() {
    let requests = web_app_pods(9);
    let start = Instant::now();
    let before_restart = admit_all(&PlacementLedger::default(), &requests[..6], &Snapshot::default(), start);
    let restarted = PlacementLedger::default();
    let cache = snapshot_with(pods_of(&before_restart));
    let after_restart = admit_all(&restarted, &requests[6..], &cache, start);
    let uninterrupted = admit_all(&PlacementLedger::default(), &requests, &Snapshot::default(), start);
    let rules = |admitted: &[(PlacementOutcome, PodView)]| -> Vec<String> {
        admitted.iter().map(|(outcome, _)| rule_of(outcome)).collect()
    };
    assert_eq!(rules(&after_restart), rules(&uninterrupted)[6..]);
    assert_eq!(restarted.in_flight_len(), 3);
}

#[test]
fn scale_down_then_scale_up_refills_the_rule_that_is_short() {
    let ledger = PlacementLedger::default();
    let start = Instant::now();
    let admitted = admit_all(&ledger, &web_app_pods(6), &Snapshot::default(), start);
    let mut live = pods_of(&admitted);
    ledger.observe_at(&snapshot_with(live.clone()), start + Duration::from_secs(1));
    // The ReplicaSet scales down to 4, deleting two spot pods; later it scales back to 6.
    for _ in 0..2 {
        let spot = live.iter().position(|pod| pod.labels.get("tiergate.io/placement-rule") == Some("spot")).unwrap();
        live.remove(spot);
    }
    let later = start + Duration::from_secs(30);
    let refill: Vec<Request> = (0..2).map(|index| another(&web_app_burst()[0], &format!("refill-{index}"))).collect();
    let refilled = admit_all(&ledger, &refill, &snapshot_with(live), later);
    let rules: Vec<String> = refilled.iter().map(|(outcome, _)| rule_of(outcome)).collect();
    assert_eq!(rules, ["spot", "spot"]);
}

#[test]
fn a_pod_that_never_appears_stops_counting_after_the_ttl() {
    let timings = LedgerTimings { in_flight_ttl: Duration::from_secs(60), observed_grace: Duration::from_secs(5) };
    let ledger = PlacementLedger::default().with_timings(timings);
    let pods = web_app_pods(2);
    let start = Instant::now();
    assert_eq!(rule_of(&ledger.assign_for_at(&pods[0], &Snapshot::default(), start).unwrap()), "ondemand");
    // Denied later by another admission step, the first pod never appears; within the TTL it still counts.
    let soon = ledger.assign_for_at(&pods[1], &Snapshot::default(), start + Duration::from_secs(59)).unwrap();
    assert_eq!(rule_of(&soon), "spot");
    let ledger = PlacementLedger::default().with_timings(timings);
    ledger.assign_for_at(&pods[0], &Snapshot::default(), start).unwrap();
    let late = ledger.assign_for_at(&pods[1], &Snapshot::default(), start + Duration::from_secs(60)).unwrap();
    assert_eq!(rule_of(&late), "ondemand");
    assert_eq!(ledger.in_flight_len(), 1);
}

#[test]
fn a_request_holding_a_stale_snapshot_still_counts_pods_observed_moments_ago() {
    let ledger = PlacementLedger::default();
    let requests = web_app_pods(7);
    let start = Instant::now();
    let admitted = admit_all(&ledger, &requests[..6], &Snapshot::default(), start);
    ledger.observe_at(&snapshot_with(pods_of(&admitted)), start + Duration::from_secs(1));
    let within_grace = start + Duration::from_secs(1) + LedgerTimings::default().observed_grace / 2;
    let stale = ledger.assign_for_at(&requests[6], &Snapshot::default(), within_grace).unwrap();
    let expected_rule = ["ondemand", "spot"][Split::new(1, vec![1, 2]).next_rule(&[3, 3])];
    assert_eq!(rule_of(&stale), expected_rule);
}

#[test]
fn entries_of_observed_pods_are_dropped_after_the_grace() {
    let ledger = PlacementLedger::default();
    let requests = web_app_pods(7);
    let start = Instant::now();
    let admitted = admit_all(&ledger, &requests[..6], &Snapshot::default(), start);
    let cache = snapshot_with(pods_of(&admitted));
    ledger.observe_at(&cache, start + Duration::from_secs(1));
    let grace = LedgerTimings::default().observed_grace;
    ledger.assign_for_at(&requests[6], &cache, start + Duration::from_secs(1) + grace).unwrap();
    assert_eq!(ledger.in_flight_len(), 1);
}

/// Documented worst case for `replicas` webhook replicas that see none of each other's pods yet.
fn multi_replica_bound(replicas: i128, base: i128) -> i128 {
    replicas + (replicas - 1) * base
}

#[test]
fn two_replicas_splitting_a_burst_blind_stay_within_the_documented_bound_then_converge() {
    let (a, b) = (PlacementLedger::default(), PlacementLedger::default());
    let pods = alpine_pods(14);
    let start = Instant::now();
    let mut live = Vec::new();
    // The burst arrives before either replica's cache shows any pod: replicas alternate.
    for (index, request) in pods[..10].iter().enumerate() {
        let ledger = if index % 2 == 0 { &a } else { &b };
        let outcome = ledger.assign_for_at(request, &Snapshot::default(), start).unwrap();
        live.push(admitted_pod(request, &outcome, &format!("alpine-{index}")));
    }
    let rules = ["od4vcpu16gb", "spot4vcpu16gb", "spot8vcpu32gb"];
    let counts = |pods: &[PodView]| -> Vec<u32> {
        rules
            .iter()
            .map(|rule| {
                let held =
                    pods.iter().filter(|pod| pod.labels.get("tiergate.io/placement-rule") == Some(*rule)).count();
                u32::try_from(held).unwrap()
            })
            .collect()
    };
    let split = Split::new(1, vec![0, 1, 1]);
    let within = |held: &[u32], bound: i128| {
        let ideal = split.ideal_scaled(held.iter().map(|count| u64::from(*count)).sum());
        held.iter()
            .zip(ideal)
            .all(|(count, ideal)| (i128::from(*count) * split.scale() - ideal).abs() <= bound * split.scale())
    };
    let blind = counts(&live);
    assert!(within(&blind, multi_replica_bound(2, 1)), "{blind:?}");
    assert_eq!(blind, [2, 4, 4], "two blind replicas each place a base pod");
    // Once the caches show the pods, further pods go to the rules that are short, whichever replica admits them.
    for (index, request) in pods[10..].iter().enumerate() {
        let ledger = if index % 2 == 0 { &a } else { &b };
        let cache = snapshot_with(live.clone());
        ledger.observe_at(&cache, start);
        let outcome = ledger.assign_for_at(request, &cache, start).unwrap();
        assert_ne!(rule_of(&outcome), "od4vcpu16gb");
        live.push(admitted_pod(request, &outcome, &format!("alpine-{}", index + 10)));
    }
    let converged = counts(&live);
    assert_eq!(converged[1..], [6, 6]);
}

#[test]
fn two_replicas_whose_cache_catches_up_between_pods_split_exactly_like_one() {
    let (a, b) = (PlacementLedger::default(), PlacementLedger::default());
    let start = Instant::now();
    let mut live = Vec::new();
    let mut rules = Vec::new();
    for (index, request) in alpine_pods(10).iter().enumerate() {
        let ledger = if index % 2 == 0 { &a } else { &b };
        let outcome = ledger.assign_for_at(request, &snapshot_with(live.clone()), start).unwrap();
        rules.push(rule_of(&outcome));
        live.push(admitted_pod(request, &outcome, &format!("alpine-{index}")));
    }
    let mut counts = std::collections::BTreeMap::new();
    for rule in rules {
        *counts.entry(rule).or_insert(0usize) += 1;
    }
    assert_eq!(counts, expected(&[("od4vcpu16gb", 1), ("spot4vcpu16gb", 4), ("spot8vcpu32gb", 5)]));
}

#[test]
fn pods_of_another_namespace_forging_the_owner_annotation_do_not_count_in_the_split() {
    let requests = web_app_pods(6);
    let start = Instant::now();
    let honest = admit_all(&PlacementLedger::default(), &requests, &Snapshot::default(), start);
    // A tenant of another namespace copies the owner annotation and rule labels of a whole burst onto its pods.
    let forged: Vec<PodView> = pods_of(&honest)
        .into_iter()
        .map(|pod| PodView { namespace: "attacker".to_owned(), ..pod })
        .chain(pods_of(&honest).into_iter().map(|pod| PodView { namespace: "attacker".to_owned(), ..pod }))
        .collect();
    let beside_forgeries = admit_all(&PlacementLedger::default(), &requests, &snapshot_with(forged), start);
    let rules = |admitted: &[(PlacementOutcome, PodView)]| -> Vec<String> {
        admitted.iter().map(|(outcome, _)| rule_of(outcome)).collect()
    };
    assert_eq!(rules(&beside_forgeries), rules(&honest), "the split counts only the owner's own namespace");
    let own = snapshot_with(pods_of(&honest));
    assert_eq!(own.pods_in(&honest[0].1.namespace).count(), 6, "the namespace index finds the owner's pods");
    assert_eq!(own.pods_in("attacker").count(), 0);
}
