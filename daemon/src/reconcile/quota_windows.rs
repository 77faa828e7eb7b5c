//! Quota windows in the reconcile: the policy as in force now, when to reconcile again (the timer that applies the
//! next window at its boundary), and the `QuotaWindowChanged` Events; the decisions are pure, the Events do I/O
//! through [`super::writes`].
//!
//! Which window is in force is decided by the core's [`crate::plan::quota_windows`]. A reconcile translates the
//! policy with the windows in force at its start, and asks the controller to run again at the next change (or the
//! resync, whichever is first), so a window opens and closes within about a second of its boundary without polling.
//! A restarted daemon reconciles at once and so applies the window in force then.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

use super::{Context, writes};
use crate::plan::quota::format_millis;
use crate::plan::quota_windows::{WindowsInForce, admitted_above_quota, build_windows_in_force};
use crate::policy::{TierPolicy, TierPolicySpec, TierQuotaWindowStatus};

/// Added to the wait for a boundary, so the reconcile it triggers runs after the boundary, never just before it.
const AFTER_BOUNDARY: Duration = Duration::from_millis(500);

/// `policy` with the quota windows in force at `now` applied (borrowed unchanged when it has none), and the facts.
pub(super) fn build_policy_in_force(policy: &TierPolicy, now: Timestamp) -> (Cow<'_, TierPolicy>, WindowsInForce) {
    let windows = build_windows_in_force(&policy.spec, now);
    if windows.tiers.is_empty() {
        return (Cow::Borrowed(policy), windows);
    }
    let effective =
        TierPolicy { metadata: policy.metadata.clone(), spec: windows.spec.clone(), status: policy.status.clone() };
    (Cow::Owned(effective), windows)
}

/// How long to wait before the next reconcile: `usual`, or less to run just after the next window change.
pub(super) fn build_requeue(usual: Duration, windows: &WindowsInForce, now: Timestamp) -> Duration {
    let Some(next) = windows.next_change() else { return usual };
    let until = next.duration_since(now);
    let until = Duration::try_from(until).unwrap_or(Duration::ZERO) + AFTER_BOUNDARY;
    usual.min(until)
}

/// The tiers whose window in force differs from what `previous` (the status before this reconcile) shows: a tier
/// with windows that the status did not list yet counts as changed when a window is in force.
pub(super) fn changed_tiers<'a>(previous: &[TierQuotaWindowStatus], now: &'a [TierQuotaWindowStatus]) -> Vec<&'a str> {
    now.iter()
        .filter(|tier| {
            let before = previous.iter().find(|earlier| earlier.tier == tier.tier);
            before.map_or(tier.in_force.is_some(), |before| before.in_force != tier.in_force)
        })
        .map(|tier| tier.tier.as_str())
        .collect()
}

/// The Event note of a tier whose window in force changed: which window (or the base quota), the quota now, the next
/// change, and what Kueue has admitted above it.
pub(super) fn build_change_note(
    spec: &TierPolicySpec,
    window: &TierQuotaWindowStatus,
    reserved: &BTreeMap<String, i128>,
) -> String {
    let Some(tier) = spec.tier(&window.tier) else { return format!("tier {}: quota window changed", window.tier) };
    let quotas: Vec<String> = tier
        .quotas
        .iter()
        .map(|(resource, quota)| {
            let mut text = format!("{resource} {}", quota.nominal.0);
            if let Some(limit) = &quota.borrowing_limit {
                text.push_str(&format!(" (borrowing {})", limit.0));
            }
            if let Some(limit) = &quota.lending_limit {
                text.push_str(&format!(" (lending {})", limit.0));
            }
            text
        })
        .collect();
    let in_force = match &window.in_force {
        Some(name) => format!("quota window {name:?} in force"),
        None => "base quota in force (no window)".to_owned(),
    };
    let mut note = format!("tier {}: {in_force}: {}", tier.name, quotas.join(", "));
    match (&window.next_change, &window.next_in_force) {
        (Some(at), Some(next)) => note.push_str(&format!("; next change at {at}: window {next:?}")),
        (Some(at), None) => note.push_str(&format!("; next change at {at}: base quota")),
        (None, _) => note.push_str("; no change within two weeks"),
    }
    let above = admitted_above_quota(spec, tier, reserved);
    if !above.is_empty() {
        let held: Vec<String> = above
            .iter()
            .map(|(resource, held, nominal)| {
                let like = tier.quotas.get(resource).map_or("", |quota| quota.nominal.0.as_str());
                format!("{resource} {} admitted, {} nominal", format_millis(*held, like), format_millis(*nominal, like))
            })
            .collect();
        note.push_str(&format!(
            "; admitted above the quota now: {}: those workloads keep running (Kueue never evicts for a lower \
             quota), new ones wait until enough finish",
            held.join(", ")
        ));
    }
    note
}

/// One `QuotaWindowChanged` Event per tier of `changed` ([`changed_tiers`]: none in a steady state), for `policy` as
/// in force; Warning when the change left more admitted than the quota now gives.
pub(super) async fn publish_window_events(
    ctx: &Context,
    policy: &TierPolicy,
    changed: &[&str],
    now: &[TierQuotaWindowStatus],
) {
    let spec = &policy.spec;
    for &tier in changed {
        let Some(window) = now.iter().find(|window| window.tier == tier) else { continue };
        let reserved = reserved_by_resource(ctx, tier);
        let above = spec.tier(tier).is_some_and(|tier| !admitted_above_quota(spec, tier, &reserved).is_empty());
        let note = build_change_note(spec, window, &reserved);
        tracing::info!(%tier, %note, "quota window changed");
        let type_ = if above { EventType::Warning } else { EventType::Normal };
        writes::publish_event(ctx, policy, type_, "QuotaWindowChanged", note).await;
    }
}

/// What the tier's live ClusterQueue holds per resource over all its flavors (`status.flavorsReservation`).
fn reserved_by_resource(ctx: &Context, tier: &str) -> BTreeMap<String, i128> {
    let name = crate::plan::names::cluster_queue_name(tier);
    let mut reserved = BTreeMap::new();
    if let Some(queue) = super::live_named(ctx, super::kinds::KueueKind::ClusterQueue, &name, None) {
        for (resource, millis) in queue.reserved.values().flatten() {
            *reserved.entry(resource.clone()).or_default() += millis;
        }
    }
    reserved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::parse_policy;

    const SAMPLE: &str = include_str!("../../../samples/kubenexus/policy.yaml");

    fn policy_with_window(window: &str) -> TierPolicy {
        let marker = "      maxRunTime: {ceiling: 4h}\n";
        let text = SAMPLE.replacen(marker, &format!("{marker}      quotaWindows:\n        - {window}\n"), 1);
        parse_policy(&text, "sample").unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn status(tier: &str, in_force: Option<&str>) -> TierQuotaWindowStatus {
        TierQuotaWindowStatus {
            tier: tier.to_owned(),
            in_force: in_force.map(str::to_owned),
            next_change: None,
            next_in_force: None,
        }
    }

    const BURST: &str = r#"{name: burst, once: {begin: "2026-12-02T10:00:00Z", end: "2026-12-02T10:01:00Z"}, quotas: {nvidia.com/gpu: {nominal: "20"}}}"#;

    #[test]
    fn a_policy_without_windows_is_borrowed_unchanged() {
        let policy = parse_policy(SAMPLE, "sample").unwrap();
        let (effective, windows) = build_policy_in_force(&policy, at("2026-12-02T10:00:30Z"));
        assert!(matches!(effective, Cow::Borrowed(_)));
        assert_eq!(
            build_requeue(Duration::from_secs(300), &windows, at("2026-12-02T10:00:30Z")),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn the_reconcile_runs_again_just_after_the_next_boundary() {
        let policy = policy_with_window(BURST);
        let now = at("2026-12-02T09:59:30Z");
        let (effective, windows) = build_policy_in_force(&policy, now);
        assert_eq!(effective.spec, policy.spec, "no window is in force yet");
        assert_eq!(build_requeue(Duration::from_secs(300), &windows, now), Duration::from_millis(30_500));
        // A boundary further away than the resync: the resync comes first.
        let early = at("2026-12-02T09:00:00Z");
        let (_, windows) = build_policy_in_force(&policy, early);
        assert_eq!(build_requeue(Duration::from_secs(300), &windows, early), Duration::from_secs(300));
    }

    #[test]
    fn inside_the_window_the_policy_in_force_has_its_quota() {
        let policy = policy_with_window(BURST);
        let (effective, windows) = build_policy_in_force(&policy, at("2026-12-02T10:00:30Z"));
        let bronze = effective.spec.tier("bronze").unwrap();
        assert_eq!(bronze.quotas["nvidia.com/gpu"].nominal.0, "20");
        assert_eq!(windows.to_status()[0].in_force.as_deref(), Some("burst"));
        assert_eq!(effective.metadata, policy.metadata);
    }

    #[test]
    fn only_tiers_whose_window_in_force_changed_are_announced() {
        let now = [status("bronze", Some("burst")), status("silver", None)];
        assert_eq!(changed_tiers(&[], &now), ["bronze"]);
        assert_eq!(changed_tiers(&[status("bronze", Some("burst")), status("silver", None)], &now), Vec::<&str>::new());
        assert_eq!(
            changed_tiers(&[status("bronze", None), status("silver", Some("nights"))], &now),
            ["bronze", "silver"]
        );
    }

    #[test]
    fn the_change_note_names_the_window_the_quota_the_next_change_and_admitted_work_above_it() {
        let policy = policy_with_window(BURST);
        let (effective, windows) = build_policy_in_force(&policy, at("2026-12-02T10:01:00Z"));
        let window = &windows.to_status()[0];
        let held = [("nvidia.com/gpu".to_owned(), 18_000)].into();
        let note = build_change_note(&effective.spec, window, &held);
        assert!(note.starts_with("tier bronze: base quota in force (no window): "), "{note}");
        assert!(note.contains("nvidia.com/gpu 16"), "{note}");
        assert!(note.contains("no change within two weeks"), "{note}");
        assert!(note.contains("nvidia.com/gpu 18 admitted, 16 nominal"), "{note}");
        assert!(note.contains("keep running"), "{note}");
        let inside = build_policy_in_force(&policy, at("2026-12-02T10:00:00Z"));
        let note = build_change_note(&inside.0.spec, &inside.1.to_status()[0], &BTreeMap::new());
        assert!(note.contains("quota window \"burst\" in force: ") && note.contains("nvidia.com/gpu 20"), "{note}");
        assert!(note.contains("next change at 2026-12-02T10:01:00Z: base quota"), "{note}");
    }
}
