//! The usage checkpoint: every interval (and at the instant a spent budget has room again), the leading replica
//! adds what the Workload ledger shows was admitted since the last checkpoint to the served policy's
//! `status.usage`, writes it by server-side apply with a field manager of its own, exports the counters and marks
//! budget holds and releases with Events; does I/O.
//!
//! Standby replicas keep their ledger too (their Workload watch runs), pruned at every checkpoint they see in the
//! policy, so a new leader counts from the last checkpoint with the workloads deleted meanwhile. The reconcile's
//! status writes never send `usage`, and this one sends nothing else: neither removes the other's fields.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::lease::WriteGate;
use crate::cache::workloads::{SharedLedger, now_second};
use crate::metrics::{Metrics, NamespaceResourceLabels, ReasonLabels, TierResourceLabels};
use crate::policy::budget::{
    SpentBudget, budget_counts, describe_window_release, format_unit_hours, next_release, spent_budgets,
};
use crate::policy::{TierPolicy, UsageStatus};
use crate::usage::{CheckpointFrame, UsageAdded, advance_usage, checkpoint_second};
use crate::view::SharedSnapshot;

/// The field manager of `status.usage`: distinct from the reconcile's, so neither apply removes the other's fields.
pub const USAGE_FIELD_MANAGER: &str = "tiergate-usage";

/// How often the checkpoint is written unless `--usage-checkpoint-interval` says otherwise.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// Why a checkpoint was not written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The policy's accounting time zone is unknown (validation says so in the policy's status).
    #[error("failed to find the accounting period: {0}")]
    FindPeriod(#[from] crate::policy::budget::BudgetError),
    /// The status patch failed.
    #[error("failed to write status.usage of TierPolicy {name}: {source}")]
    WriteUsage {
        /// Policy name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
}

impl CheckpointError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::FindPeriod(error) => error.reason(),
            Self::WriteUsage { .. } => "write_usage",
        }
    }
}

/// What the checkpoint loop reads and writes through.
pub struct UsageCheckpoints {
    /// The management client.
    pub client: Client,
    /// The served policy's name.
    pub policy_name: String,
    /// This replica's identity (the Event reporter instance).
    pub identity: String,
    /// How often a checkpoint is taken.
    pub interval: Duration,
    /// The management snapshot (the served policy with its status).
    pub snapshot: SharedSnapshot,
    /// The Workload ledger the cache fills.
    pub ledger: SharedLedger,
    /// Open while this replica leads.
    pub gate: Arc<WriteGate>,
    /// Counters and gauges.
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for UsageCheckpoints {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("UsageCheckpoints")
            .field("policy_name", &self.policy_name)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// The body of the status apply: `status.usage` alone.
pub fn build_usage_body(policy_name: &str, usage: &UsageStatus) -> serde_json::Value {
    json!({
        "apiVersion": TierPolicy::api_version(&()),
        "kind": TierPolicy::kind(&()),
        "metadata": { "name": policy_name },
        "status": { "usage": usage },
    })
}

/// The newer of two checkpoints (by `checkpointTime`).
fn newer<'a>(first: Option<&'a UsageStatus>, second: Option<&'a UsageStatus>) -> Option<&'a UsageStatus> {
    match (first, second) {
        (Some(first), Some(second)) => {
            Some(if checkpoint_second(second) > checkpoint_second(first) { second } else { first })
        }
        (first, second) => first.or(second),
    }
}

/// Runs checkpoints every interval until `shutdown`.
pub async fn run_usage_checkpoints(loop_: UsageCheckpoints, shutdown: CancellationToken) {
    let reporter = Reporter { controller: "tiergate".to_owned(), instance: Some(loop_.identity.clone()) };
    let recorder = Recorder::new(loop_.client.clone(), reporter);
    let mut written: Option<UsageStatus> = None;
    let mut ticks = tokio::time::interval(loop_.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let release = until_release(&loop_, written.as_ref());
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
            () = sleep_for(release) => {}
        }
        match checkpoint(&loop_, &recorder, written.as_ref()).await {
            Ok(Some(usage)) => written = Some(usage),
            Ok(None) => {}
            Err(error) => {
                loop_.metrics.usage_checkpoint_errors.get_or_create(&ReasonLabels { reason: error.reason() }).inc();
                tracing::warn!(%error, reason = error.reason(), "usage checkpoint failed; the next one counts from the last");
            }
        }
    }
}

/// How long until the earliest spent budget has room again (the period's turn, or enough use leaving a window),
/// plus a second, so the checkpoint that lifts the hold is taken then and not up to an interval later; `None` when
/// no budget is spent or that instant has passed (the regular checkpoints go on).
fn until_release(loop_: &UsageCheckpoints, written: Option<&UsageStatus>) -> Option<Duration> {
    let snapshot = loop_.snapshot.load();
    let policy = snapshot.policy.as_ref().filter(|policy| policy.name_any() == loop_.policy_name)?;
    let persisted = policy.status.as_ref().and_then(|status| status.usage.as_ref());
    let release = next_release(&policy.spec, newer(persisted, written)?)?;
    let seconds = u64::try_from(release - now_second()).ok()?;
    Some(Duration::from_secs(seconds + 1))
}

/// Sleeps for `delay`, or forever without one.
async fn sleep_for(delay: Option<Duration>) {
    match delay {
        Some(delay) => tokio::time::sleep(delay).await,
        None => std::future::pending().await,
    }
}

/// One checkpoint: `Ok(Some)` with what it wrote, `Ok(None)` when it wrote nothing (not leading, not synced, no
/// policy, the ledger not listed yet).
pub(super) async fn checkpoint(
    loop_: &UsageCheckpoints,
    recorder: &Recorder,
    written: Option<&UsageStatus>,
) -> Result<Option<UsageStatus>, CheckpointError> {
    let snapshot = loop_.snapshot.load_full();
    let Some(policy) = snapshot.policy.clone().filter(|_| snapshot.synced) else { return Ok(None) };
    if policy.name_any() != loop_.policy_name {
        return Ok(None);
    }
    let persisted = policy.status.as_ref().and_then(|status| status.usage.as_ref());
    let last = newer(persisted, written).cloned();
    let now = now_second();
    let frame = CheckpointFrame::at(&policy.spec, now)?;
    let (usage, added) = {
        let Ok(mut ledger) = loop_.ledger.lock() else { return Ok(None) };
        if !ledger.is_listed() {
            return Ok(None);
        }
        if !loop_.gate.is_open() {
            // A standby: what the leader's checkpoint counted is dropped, the rest kept for when this one leads.
            if let Some(checkpoint) = last.as_ref().and_then(checkpoint_second) {
                ledger.prune(checkpoint);
            }
            return Ok(None);
        }
        advance_usage(last.as_ref(), &ledger, &frame, now)
    };
    if last.as_ref() == Some(&usage) {
        return Ok(None);
    }
    write_usage(loop_, &usage).await?;
    if let (Ok(mut ledger), Some(checkpoint)) = (loop_.ledger.lock(), checkpoint_second(&usage)) {
        ledger.prune(checkpoint);
    }
    export(&loop_.metrics, &policy, &usage, &added);
    let before = spent_budgets(&policy.spec, last.as_ref());
    let after = spent_budgets(&policy.spec, Some(&usage));
    publish_budget_events(loop_, recorder, &policy, &before, &after).await;
    Ok(Some(usage))
}

/// Applies `status.usage` (forced: this manager is its only writer), if this replica still leads.
async fn write_usage(loop_: &UsageCheckpoints, usage: &UsageStatus) -> Result<(), CheckpointError> {
    if !loop_.gate.is_open() {
        return Ok(());
    }
    let api: Api<TierPolicy> = Api::all(loop_.client.clone());
    let body = build_usage_body(&loop_.policy_name, usage);
    loop_.metrics.api_writes.get_or_create(&crate::metrics::KindLabels { kind: "TierPolicy" }).inc();
    loop_.metrics.usage_checkpoints.inc();
    api.patch_status(&loop_.policy_name, &PatchParams::apply(USAGE_FIELD_MANAGER).force(), &Patch::Apply(body))
        .await
        .map(|_| ())
        .map_err(|source| CheckpointError::WriteUsage { name: loop_.policy_name.clone(), source })
}

/// Adds what the checkpoint counted to the counters and sets the budget gauges.
fn export(metrics: &Metrics, policy: &TierPolicy, usage: &UsageStatus, added: &UsageAdded) {
    // Resource-seconds as a float of seconds (milli-units → units).
    let seconds = |millis: i128| millis as f64 / 1000.0;
    for (tier, counts) in &added.tiers {
        for (resource, millis) in counts {
            let labels = TierResourceLabels { tier: tier.clone(), resource: resource.clone() };
            metrics.usage_tier_seconds.get_or_create(&labels).inc_by(seconds(*millis));
        }
    }
    for (namespace, counts) in &added.namespaces {
        for (resource, millis) in counts {
            let labels = NamespaceResourceLabels { namespace: namespace.clone(), resource: resource.clone() };
            metrics.usage_namespace_seconds.get_or_create(&labels).inc_by(seconds(*millis));
        }
    }
    for tier in &policy.spec.tiers {
        let Some(budget) = &tier.budget else { continue };
        // The use the limit applies to: this period's, or the window's at this checkpoint.
        let counts = budget_counts(&policy.spec, tier, usage);
        for (resource, limit) in budget.limits_millis() {
            let labels = TierResourceLabels { tier: tier.name.clone(), resource: resource.to_owned() };
            let used = counts.as_ref().map_or(0, |counts| counts.used(resource));
            metrics.budget_limit_seconds.get_or_create(&labels).set(seconds(limit));
            metrics.budget_used_seconds.get_or_create(&labels).set(seconds(used));
        }
    }
    if let Some(checkpoint) = checkpoint_second(usage) {
        metrics.usage_checkpoint_timestamp_seconds.set(checkpoint);
    }
}

/// One sentence about a spent budget.
pub fn describe_spent(budget: &SpentBudget) -> String {
    let (tier, limit, resource) = (&budget.tier, format_unit_hours(budget.limit), &budget.resource);
    let (used, resets_at) = (format_unit_hours(budget.used), &budget.resets_at);
    match &budget.window {
        Some(window) => format!(
            "tier {tier}'s budget of {limit} {resource} in any {window} is spent ({used} used in the last {window}); \
             its ClusterQueue holds new workloads until {}, or until the budget is raised",
            describe_window_release(window, resets_at)
        ),
        None => format!(
            "tier {tier}'s budget of {limit} {resource} per period is spent ({used} used); its ClusterQueue holds new \
             workloads until {resets_at} or until the budget is raised"
        ),
    }
}

/// One sentence about a budget with room again.
pub fn describe_renewed(budget: &SpentBudget) -> String {
    match &budget.window {
        Some(window) => format!(
            "enough of tier {}'s use has left its {window} window: its budget has room again and its ClusterQueue \
             admits again",
            budget.tier
        ),
        None => format!("tier {}'s budget is renewed: its ClusterQueue admits again", budget.tier),
    }
}

/// An Event on the policy for each tier whose budget this checkpoint found newly spent (`BudgetSpent`) or renewed
/// by the period's turn or by use leaving its window (`BudgetRenewed`); a raised limit is released by the policy
/// edit's reconcile.
async fn publish_budget_events(
    loop_: &UsageCheckpoints,
    recorder: &Recorder,
    policy: &TierPolicy,
    before: &[SpentBudget],
    after: &[SpentBudget],
) {
    let tiers = |spent: &[SpentBudget]| spent.iter().map(|budget| budget.tier.clone()).collect::<BTreeSet<_>>();
    let (was, is) = (tiers(before), tiers(after));
    let mut events = Vec::new();
    for budget in after.iter().filter(|budget| !was.contains(&budget.tier)) {
        events.push((EventType::Warning, "BudgetSpent", describe_spent(budget)));
    }
    for budget in before.iter().filter(|budget| !is.contains(&budget.tier)) {
        events.push((EventType::Normal, "BudgetRenewed", describe_renewed(budget)));
    }
    for (type_, reason, note) in events {
        if !loop_.gate.is_open() {
            return;
        }
        tracing::info!(reason, %note, "budget");
        super::writes::send_policy_event(recorder, policy, type_, reason, note).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::inputs::load_policy;
    use crate::policy::{Budget, TierPolicyStatus, UsageTotals};
    use crate::usage::format_instant;

    /// A checkpoint loop serving the sample policy, whose first tier has used 3600 GPU-seconds of a `limit` budget
    /// in a period that ends `ends_in` seconds from now.
    fn loop_with(limit: &str, ends_in: i64) -> UsageCheckpoints {
        let (service, _handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let mut policy = load_policy(None).unwrap();
        let tier = policy.spec.tiers[0].name.clone();
        let limits = BTreeMap::from([("nvidia.com/gpu".to_owned(), limit.to_owned())]);
        policy.spec.tiers[0].budget = Some(Budget { limits, window: None });
        let now = now_second();
        let totals = UsageTotals {
            current: BTreeMap::from([("nvidia.com/gpu".to_owned(), "3600".to_owned())]),
            previous: BTreeMap::new(),
        };
        let usage = UsageStatus {
            checkpoint_time: format_instant(now),
            period: Default::default(),
            time_zone: "UTC".into(),
            period_start: format_instant(now - 3600),
            period_end: format_instant(now + ends_in),
            previous_period_start: format_instant(now - 7200),
            tiers: BTreeMap::from([(tier, totals)]),
            ..UsageStatus::default()
        };
        policy.status = Some(TierPolicyStatus { usage: Some(usage), ..TierPolicyStatus::default() });
        let snapshot = crate::view::Snapshot { policy: Some(Arc::new(policy)), synced: true, ..Default::default() };
        UsageCheckpoints {
            client: Client::new(service, "default"),
            policy_name: "default".to_owned(),
            identity: "test".to_owned(),
            interval: DEFAULT_CHECKPOINT_INTERVAL,
            snapshot: Arc::new(arc_swap::ArcSwap::from_pointee(snapshot)),
            ledger: Arc::default(),
            gate: super::super::lease::WriteGate::always_open(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    #[tokio::test]
    async fn a_spent_budget_wakes_the_checkpoint_a_second_after_the_period_turns() {
        let spent = loop_with("1h", 30);
        let delay = until_release(&spent, None).expect("a wake-up for the turn");
        assert!((Duration::from_secs(29)..=Duration::from_secs(32)).contains(&delay), "{delay:?}");
        assert_eq!(until_release(&loop_with("2h", 30), None), None, "a budget with room left sets no timer");
        assert_eq!(until_release(&loop_with("1h", -5), None), None, "a turn passed is the regular checkpoint's");
    }

    #[test]
    fn the_usage_body_carries_status_usage_alone() {
        let usage = UsageStatus { checkpoint_time: "2026-12-02T08:00:00Z".into(), ..UsageStatus::default() };
        let body = build_usage_body("tiers", &usage);
        assert_eq!(body["metadata"], json!({"name": "tiers"}));
        let status = body["status"].as_object().unwrap();
        assert_eq!(status.keys().collect::<Vec<_>>(), ["usage"]);
        assert_eq!(status["usage"]["checkpointTime"], "2026-12-02T08:00:00Z");
        assert_ne!(USAGE_FIELD_MANAGER, super::super::kinds::FIELD_MANAGER);
    }

    #[test]
    fn the_newer_checkpoint_wins_whoever_wrote_it() {
        let at = |time: &str| UsageStatus { checkpoint_time: time.into(), ..UsageStatus::default() };
        let (old, new) = (at("2026-12-02T08:00:00Z"), at("2026-12-02T08:01:00Z"));
        assert_eq!(newer(Some(&old), Some(&new)), Some(&new));
        assert_eq!(newer(Some(&new), Some(&old)), Some(&new));
        assert_eq!(newer(None, Some(&old)), Some(&old));
        assert_eq!(newer(None, None), None);
    }

    fn spent(window: Option<&str>) -> SpentBudget {
        SpentBudget {
            tier: "bronze".into(),
            resource: "nvidia.com/gpu".into(),
            used: 97 * 3_600_000,
            limit: 96 * 3_600_000,
            resets_at: "2026-12-20T07:00:00Z".into(),
            window: window.map(str::to_owned),
        }
    }

    #[test]
    fn budget_events_say_when_a_window_has_room_again_not_that_the_period_turns() {
        let windowed = describe_spent(&spent(Some("720h")));
        assert!(windowed.contains("budget of 96h nvidia.com/gpu in any 720h is spent (97h used in the last 720h)"));
        assert!(windowed.contains("until use leaves the 720h window, at 2026-12-20T07:00:00Z if nothing more runs"));
        assert!(!windowed.contains("period"), "{windowed}");
        let calendar = describe_spent(&spent(None));
        assert!(calendar.contains("per period is spent (97h used)") && calendar.contains("until 2026-12-20T07:00:00Z"));
        assert!(
            describe_renewed(&spent(Some("720h"))).contains("enough of tier bronze's use has left its 720h window")
        );
        assert!(describe_renewed(&spent(None)).contains("tier bronze's budget is renewed"));
    }
}
