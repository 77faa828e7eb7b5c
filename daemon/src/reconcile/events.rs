//! The Events a reconcile publishes for what it changed (`Applied`, `Pruned`, `QueueMigrated`) and each object it
//! could not apply (`ApplyFailed`); none in a steady state; does I/O through [`super::writes`].

use kube::runtime::events::EventType;

use super::prune::Retired;
use super::{Context, writes};
use crate::policy::{QueueMigration, TierPolicy};

/// Up to this many namespaces moved in one reconcile get a `QueueMigrated` Event each; more (a relabel of many
/// namespaces at once) get one Event that names the first few and counts the rest, instead of one write each.
const MIGRATION_EVENTS: usize = 8;

/// One Warning Event per object the API server refused (`ApplyFailed`), naming it and the error, so each failing
/// object is seen on the policy; the reconcile then retries them with backoff.
pub(super) async fn publish_apply_failures(ctx: &Context, policy: &TierPolicy, failed: &[super::ReconcileError]) {
    for error in failed {
        writes::publish_event(ctx, policy, EventType::Warning, "ApplyFailed", error.to_string()).await;
    }
}

/// Events for what this reconcile changed (none in a steady state).
pub(super) async fn publish_outcome_events(ctx: &Context, policy: &TierPolicy, applied: &[String], retired: &Retired) {
    if !retired.requeued.is_empty() {
        let summary = format!(
            "moved {} pending workloads of namespaces that changed tier to their new LocalQueue",
            retired.requeued.len()
        );
        let note = build_list_note(&summary, &retired.requeued);
        writes::publish_event(ctx, policy, EventType::Normal, "WorkloadsRequeued", note).await;
    }
    if !applied.is_empty() {
        let note = build_list_note(&format!("applied {} objects", applied.len()), applied);
        writes::publish_event(ctx, policy, EventType::Normal, "Applied", note).await;
    }
    if !retired.deleted.is_empty() {
        let note = build_list_note(&format!("pruned {} objects", retired.deleted.len()), &retired.deleted);
        writes::publish_event(ctx, policy, EventType::Normal, "Pruned", note).await;
    }
    if retired.stopped.len() > MIGRATION_EVENTS {
        let moves: Vec<String> = retired.stopped.iter().map(build_move).collect();
        let summary = format!("{} namespaces moved to another tier's LocalQueue", moves.len());
        let note = build_list_note(&summary, &moves);
        writes::publish_event(ctx, policy, EventType::Normal, "QueueMigrated", note).await;
        return;
    }
    for migration in &retired.stopped {
        let note = if migration.remaining_workloads == 0 {
            format!(
                "namespace {} moved to LocalQueue {}; deleted the empty LocalQueue {}",
                migration.namespace, migration.to_queue, migration.from_queue
            )
        } else {
            format!(
                "namespace {} moved to LocalQueue {}; stopped LocalQueue {} (stopPolicy Hold), deleted once its {} workloads are gone",
                migration.namespace, migration.to_queue, migration.from_queue, migration.remaining_workloads
            )
        };
        writes::publish_event(ctx, policy, EventType::Normal, "QueueMigrated", note).await;
    }
}

/// One namespace's move in a summary note: `team-a tiergate-gold -> tiergate-silver (3 workloads draining)`.
fn build_move(migration: &QueueMigration) -> String {
    let QueueMigration { namespace, from_queue, to_queue, remaining_workloads, .. } = migration;
    if *remaining_workloads == 0 {
        format!("{namespace} {from_queue} -> {to_queue}")
    } else {
        format!("{namespace} {from_queue} -> {to_queue} ({remaining_workloads} workloads draining)")
    }
}

/// `summary: a, b, c (+N more)`, kept well under the 1 kB event note limit.
fn build_list_note(summary: &str, items: &[String]) -> String {
    const SHOWN: usize = 8;
    let shown: Vec<&str> = items.iter().take(SHOWN).map(String::as_str).collect();
    let more = items.len().saturating_sub(SHOWN);
    if more > 0 {
        format!("{summary}: {} (+{more} more)", shown.join(", "))
    } else {
        format!("{summary}: {}", shown.join(", "))
    }
}
