//! GPU-hour accounting and budgets under attack: a tenant deletes its job a moment after Kueue admits it, names
//! another tier's LocalQueue on its Workload, or runs where its tier's ClusterQueue did not admit it; against a
//! rolling-window budget it also deletes its spent jobs, hoping their use leaves with them. Use is read from the
//! Workload exactly as the daemon's watch decodes it and attributed by the ClusterQueue Kueue admitted it in
//! (`status.admission.clusterQueue`, which only Kueue writes) and its namespace; a spent budget holds the tier's
//! ClusterQueue whatever the tenant's labels say, until the use it counted leaves the window.
//!
//! Every attacker is a tenant of tier bronze (namespace `ml-team-dev`, ClusterQueue `tiergate-bronze`) in the sample
//! policy; gold's ClusterQueue is `tiergate-gold`.
#![cfg(test)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tiergate::cache::workloads::{WorkloadLite, build_workload_observation, record_event};
use tiergate::inputs::load_policy;
use tiergate::plan::desired_cluster_scoped;
use tiergate::policy::budget::spent_budgets;
use tiergate::policy::{Budget, TierPolicy, TierPolicySpec, TierPolicyStatus, UsageStatus};
use tiergate::usage::{CheckpointFrame, WorkloadLedger, advance_usage, parse_instant};
use tiergate_kueue::StopPolicy;

const BRONZE: &str = "ml-team-dev";
const GPU: &str = "nvidia.com/gpu";

fn at(text: &str) -> i64 {
    parse_instant(text).unwrap()
}

/// A Workload of `namespace` as Kueue writes it: admitted at `admitted` in `cluster_queue` with `gpus`, its
/// `spec.queueName` the tenant's choice.
fn workload(uid: &str, namespace: &str, queue_name: &str, cluster_queue: &str, gpus: u32, admitted: &str) -> Value {
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": format!("job-{uid}"), "namespace": namespace, "uid": uid,
            "labels": {"kueue.x-k8s.io/queue-name": queue_name, "tiergate.io/tier": "gold"},
        },
        "spec": {"queueName": queue_name, "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
        "status": {
            "conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": admitted}],
            "admission": {"clusterQueue": cluster_queue, "podSetAssignments": [
                {"name": "main", "resourceUsage": {GPU: gpus.to_string()}},
            ]},
        },
    })
}

fn lite(object: &Value) -> WorkloadLite {
    serde_json::from_value(object.clone()).unwrap()
}

fn listed() -> WorkloadLedger {
    let mut ledger = WorkloadLedger::default();
    record_event(&mut ledger, &kube::runtime::watcher::Event::Init, 0);
    record_event(&mut ledger, &kube::runtime::watcher::Event::InitDone, 0);
    ledger
}

fn count(spec: &TierPolicySpec, ledger: &WorkloadLedger, now: i64) -> UsageStatus {
    let frame = CheckpointFrame::at(spec, now).unwrap();
    advance_usage(None, ledger, &frame, now).0
}

fn gpu_seconds(usage: &UsageStatus, tier: &str) -> Option<String> {
    usage.tiers.get(tier).and_then(|totals| totals.current.get(GPU).cloned())
}

#[test]
fn deleting_a_job_a_second_after_admission_does_not_dodge_the_count() {
    let spec = load_policy(None).unwrap().spec;
    let mut ledger = listed();
    let object = workload("quick", BRONZE, "tiergate-bronze", "tiergate-bronze", 4, "2026-12-02T08:00:00Z");
    let start = at("2026-12-02T08:00:00Z");
    record_event(&mut ledger, &kube::runtime::watcher::Event::Apply(lite(&object)), start);
    record_event(&mut ledger, &kube::runtime::watcher::Event::Delete(lite(&object)), start + 1);
    let usage = count(&spec, &ledger, start + 60);
    assert_eq!(gpu_seconds(&usage, "bronze").as_deref(), Some("4"), "4 GPUs for the second it ran: {usage:?}");
}

#[test]
fn naming_gold_on_the_workload_does_not_move_bronze_use_to_gold() {
    let spec = load_policy(None).unwrap().spec;
    let mut ledger = listed();
    let object = workload("sly", BRONZE, "tiergate-gold", "tiergate-bronze", 1, "2026-12-02T08:00:00Z");
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(build_workload_observation(&lite(&object)).unwrap(), start);
    let usage = count(&spec, &ledger, start + 100);
    assert_eq!(gpu_seconds(&usage, "bronze").as_deref(), Some("100"), "{usage:?}");
    assert_eq!(gpu_seconds(&usage, "gold"), None, "the queue label and the tier label are the tenant's, not Kueue's");
    assert!(usage.namespaces.contains_key(BRONZE));
}

#[test]
fn a_workload_no_tier_queue_admitted_is_never_counted_against_a_tier() {
    let spec = load_policy(None).unwrap().spec;
    let mut ledger = listed();
    let object = workload("own", BRONZE, "my-queue", "tenant-own-queue", 8, "2026-12-02T08:00:00Z");
    let start = at("2026-12-02T08:00:00Z");
    ledger.observe(build_workload_observation(&lite(&object)).unwrap(), start);
    let usage = count(&spec, &ledger, start + 100);
    assert!(usage.tiers.is_empty() && usage.namespaces.is_empty(), "{usage:?}");
}

#[test]
fn a_spent_budget_holds_the_tier_queue_whatever_the_tenant_labels() {
    let mut policy: TierPolicy = load_policy(None).unwrap();
    let bronze = policy.spec.tiers.iter().position(|tier| tier.name == "bronze").unwrap();
    policy.spec.tiers[bronze].budget =
        Some(Budget { limits: BTreeMap::from([(GPU.to_owned(), "1m".to_owned())]), window: None });
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    for uid in ["a", "b"] {
        let object = workload(uid, BRONZE, "tiergate-gold", "tiergate-bronze", 1, "2026-12-02T08:00:00Z");
        ledger.observe(build_workload_observation(&lite(&object)).unwrap(), start);
    }
    let usage = count(&policy.spec, &ledger, start + 30);
    policy.status = Some(TierPolicyStatus { usage: Some(usage), ..TierPolicyStatus::default() });
    let held: Vec<(String, Option<StopPolicy>)> = desired_cluster_scoped(&policy)
        .cluster_queues
        .into_iter()
        .map(|queue| (queue.metadata.name.unwrap_or_default(), queue.spec.stop_policy))
        .filter(|(_, stop)| stop.is_some())
        .collect();
    assert_eq!(held, [("tiergate-bronze".to_owned(), Some(StopPolicy::Hold))], "two GPUs for 30 s spend 1 GPU-minute");
}

/// The stop policies the plan gives the ClusterQueues of `policy`, of those that have one.
fn held_queues(policy: &TierPolicy) -> Vec<(String, Option<StopPolicy>)> {
    desired_cluster_scoped(policy)
        .cluster_queues
        .into_iter()
        .map(|queue| (queue.metadata.name.unwrap_or_default(), queue.spec.stop_policy))
        .filter(|(_, stop)| stop.is_some())
        .collect()
}

/// Checkpoints from `usage` every 2 s until `to`, pruning the ledger as the daemon does.
fn checkpoints(spec: &TierPolicySpec, mut usage: UsageStatus, ledger: &mut WorkloadLedger, to: i64) -> UsageStatus {
    let mut now = parse_instant(&usage.checkpoint_time).unwrap();
    while now < to {
        now = (now + 2).min(to);
        let frame = CheckpointFrame::at(spec, now).unwrap();
        usage = advance_usage(Some(&usage), ledger, &frame, now).0;
        ledger.prune(now);
    }
    usage
}

#[test]
fn deleting_spent_jobs_or_naming_gold_does_not_escape_a_windowed_budget() {
    let mut policy: TierPolicy = load_policy(None).unwrap();
    let bronze = policy.spec.tiers.iter().position(|tier| tier.name == "bronze").unwrap();
    let limits = BTreeMap::from([(GPU.to_owned(), "1m".to_owned())]);
    policy.spec.tiers[bronze].budget = Some(Budget { limits, window: Some("2m".to_owned()) });
    let mut ledger = listed();
    let start = at("2026-12-02T08:00:00Z");
    let first = count(&policy.spec, &ledger, start);
    // Two one-GPU jobs that name gold's queue and carry gold's tier label; Kueue admitted them in bronze.
    let objects: Vec<Value> = ["a", "b"]
        .into_iter()
        .map(|uid| workload(uid, BRONZE, "tiergate-gold", "tiergate-bronze", 1, "2026-12-02T08:00:00Z"))
        .collect();
    for object in &objects {
        record_event(&mut ledger, &kube::runtime::watcher::Event::Apply(lite(object)), start);
    }
    let spent = checkpoints(&policy.spec, first, &mut ledger, start + 40);
    // The tenant deletes both jobs the moment it sees the hold.
    for object in &objects {
        record_event(&mut ledger, &kube::runtime::watcher::Event::Delete(lite(object)), start + 40);
    }
    let after_delete = checkpoints(&policy.spec, spent, &mut ledger, start + 60);
    assert!(ledger.is_empty(), "the deleted workloads were counted, then dropped from the ledger");
    assert!(!after_delete.windows.contains_key("gold"), "gold has no window and no bronze use");
    assert_eq!(gpu_seconds(&after_delete, "gold"), None);
    policy.status = Some(TierPolicyStatus { usage: Some(after_delete.clone()), ..TierPolicyStatus::default() });
    assert_eq!(
        held_queues(&policy),
        [("tiergate-bronze".to_owned(), Some(StopPolicy::Hold))],
        "80 GPU-seconds stay in bronze's 2m window after the jobs are gone"
    );
    let budget = &spent_budgets(&policy.spec, Some(&after_delete))[0];
    assert_eq!((budget.tier.as_str(), budget.used), ("bronze", 80_000));
    // Only time lifts the hold: once the first 12 s of use (2 GPUs, 2 s buckets, 24 GPU-seconds) have left the
    // window, a bucket end plus the window.
    assert_eq!(budget.resets_at, "2026-12-02T08:02:12Z");
    let renewed = checkpoints(&policy.spec, after_delete, &mut ledger, start + 132);
    policy.status = Some(TierPolicyStatus { usage: Some(renewed), ..TierPolicyStatus::default() });
    assert!(held_queues(&policy).is_empty(), "the use left the window");
}
