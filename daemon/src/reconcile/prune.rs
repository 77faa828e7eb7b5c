//! Retiring owned objects that are no longer desired: selected by both ownership labels, deleted in reverse
//! apply order (a few at a time within a kind) with preconditions; LocalQueues follow the tier-change rule of
//! [`super::migration`], and their pending workloads are moved to the namespace's new queue ([`super::requeue`]);
//! does I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;

use super::kinds::KueueKind;
use super::live::LiveObject;
use super::migration::{QueueOccupancy, RetireAction, build_migration, build_retire_action, build_stop_body};
use super::requeue::{MAX_NOT_REQUEUED, find_pending_owners};
use super::writes::MoveOutcome;
use super::{APPLY_CONCURRENCY, Context, ReconcileError, writes};
use crate::policy::QueueMigration;
use tiergate_kueue::read::KueueWorkload;

/// What this reconcile wants to exist, by key only (the bodies were applied and dropped one at a time).
#[derive(Debug, Default)]
pub(super) struct Wanted {
    /// Cluster-scoped objects by kind and name.
    pub(super) cluster: HashSet<(KueueKind, String)>,
    /// The one LocalQueue wanted in each namespace, by namespace.
    pub(super) local_queues: HashMap<String, String>,
}

impl Wanted {
    /// Whether the object `key` names is still wanted.
    pub(super) fn contains_key(&self, key: &super::dropped::ObjectKey) -> bool {
        self.wants(key.kind, key.namespace.as_deref(), &key.name)
    }

    fn contains(&self, object: &LiveObject) -> bool {
        self.wants(object.kind, object.namespace.as_deref(), &object.name)
    }

    /// The LocalQueue wanted in `namespace`, or a wanted cluster-scoped object of `kind`.
    fn wants(&self, kind: KueueKind, namespace: Option<&str>, name: &str) -> bool {
        match namespace {
            Some(namespace) if kind == KueueKind::LocalQueue => {
                self.local_queues.get(namespace).is_some_and(|wanted| wanted == name)
            }
            _ => self.cluster.contains(&(kind, name.to_owned())),
        }
    }
}

/// What pruning did.
#[derive(Debug, Default)]
pub(super) struct Retired {
    pub(super) deleted: Vec<String>,
    pub(super) stopped: Vec<QueueMigration>,
    pub(super) migrations: Vec<QueueMigration>,
    pub(super) draining: usize,
    /// Owners of pending workloads moved to their namespace's new LocalQueue (`Job ns/name`).
    pub(super) requeued: Vec<String>,
}

/// What retiring one orphan came to.
enum Outcome {
    /// Deleted; for a LocalQueue replaced in its namespace, the migration it completes and the owners moved.
    Deleted { name: String, migration: Option<QueueMigration>, requeued: Vec<String> },
    /// Kept until it is empty: stopped now (`stopped`) or already stopped, and the migration still in progress.
    Draining { stopped: Option<QueueMigration>, migration: Option<QueueMigration>, requeued: Vec<String> },
    /// Not a LocalQueue, and not deleted: the re-read showed another object by its name.
    Kept,
}

/// Deletes owned objects no longer desired (selected by both ownership labels), kind by kind in reverse apply
/// order, up to [`APPLY_CONCURRENCY`] of one kind at once; LocalQueues that still hold workloads are stopped first
/// and deleted once empty.
pub(super) async fn retire_orphans(ctx: &Context, wanted: &Wanted) -> Result<Retired, ReconcileError> {
    let mut retired = Retired::default();
    for kind in KueueKind::ALL.into_iter().rev() {
        let Some(store) = ctx.live.get(&kind) else { continue };
        let mut orphans: Vec<Arc<LiveObject>> = store.state_filter(|object| {
            object.is_owned_by(&ctx.settings.policy_name) && !object.deleting && !wanted.contains(object)
        });
        orphans.sort_by(|left, right| (&left.namespace, &left.name).cmp(&(&right.namespace, &right.name)));
        let mut outcomes = futures::stream::iter(orphans.into_iter().map(|orphan| retire_one(ctx, wanted, orphan)))
            .buffered(APPLY_CONCURRENCY);
        while let Some(outcome) = outcomes.next().await {
            match outcome? {
                Outcome::Deleted { name, migration, requeued } => {
                    retired.deleted.push(name);
                    retired.stopped.extend(migration);
                    retired.requeued.extend(requeued);
                }
                Outcome::Draining { stopped, migration, requeued } => {
                    retired.draining += 1;
                    retired.stopped.extend(stopped);
                    retired.migrations.extend(migration);
                    retired.requeued.extend(requeued);
                }
                Outcome::Kept => {}
            }
        }
    }
    Ok(retired)
}

/// Retires one orphan: anything but a LocalQueue is deleted; a LocalQueue follows [`build_retire_action`].
async fn retire_one(ctx: &Context, wanted: &Wanted, orphan: Arc<LiveObject>) -> Result<Outcome, ReconcileError> {
    let orphan = orphan.as_ref();
    let kind = orphan.kind;
    let name = format!("{} {}", kind.name(), orphan.display_name());
    if kind != KueueKind::LocalQueue {
        let deleted = writes::delete_object(ctx, orphan, |_| true).await?;
        return Ok(if deleted {
            Outcome::Deleted { name, migration: None, requeued: Vec::new() }
        } else {
            Outcome::Kept
        });
    }
    let to_queue = orphan.namespace.as_ref().and_then(|namespace| wanted.local_queues.get(namespace));
    // Pending workloads move first, before a stopped queue (whose status Kueue no longer counts them in) goes.
    let (requeued, not_requeued) = match to_queue {
        Some(to_queue) => requeue_if_due(ctx, orphan, to_queue).await?,
        None => (Vec::new(), Vec::new()),
    };
    let migration = |remaining: i32| {
        to_queue.map(|to_queue| QueueMigration {
            not_requeued: not_requeued.clone(),
            ..build_migration(orphan, to_queue, remaining)
        })
    };
    Ok(match build_retire_action(&QueueOccupancy::of(orphan)) {
        RetireAction::Delete => {
            let still_empty =
                |live: &LiveObject| build_retire_action(&QueueOccupancy::of(live)) == RetireAction::Delete;
            if writes::delete_object(ctx, orphan, still_empty).await? {
                Outcome::Deleted { name, migration: migration(0), requeued }
            } else {
                Outcome::Draining { stopped: None, migration: None, requeued }
            }
        }
        RetireAction::Stop { remaining } => {
            writes::apply_object(ctx, kind, &build_stop_body(orphan)).await?;
            let migration = migration(remaining);
            Outcome::Draining { stopped: migration.clone(), migration, requeued }
        }
        RetireAction::Wait { remaining } => {
            Outcome::Draining { stopped: None, migration: migration(remaining), requeued }
        }
    })
}

/// [`requeue_pending`] when it is due for `queue`: while Kueue counts pending workloads in it (a queue not yet
/// stopped), the first time its namespace has a new queue, and every [`super::requeue::REQUEUE_RECHECK`] after that (a stopped
/// queue's status counts no pending workloads, so only a list finds them). Otherwise what the last pass reported.
async fn requeue_if_due(
    ctx: &Context,
    queue: &LiveObject,
    to_queue: &str,
) -> Result<(Vec<String>, Vec<String>), ReconcileError> {
    let key = (queue.namespace.clone().unwrap_or_default(), queue.name.clone(), to_queue.to_owned());
    let now = Instant::now();
    let recent = ctx.requeue_memory.lock().ok().and_then(|memory| memory.recent_pass(&key, now));
    if queue.workloads.pending == 0
        && let Some(not_requeued) = recent
    {
        return Ok((Vec::new(), not_requeued));
    }
    let (moved, not_requeued) = requeue_pending(ctx, queue, to_queue).await?;
    if let Ok(mut memory) = ctx.requeue_memory.lock() {
        memory.record_pass(key, not_requeued.clone(), now);
    }
    Ok((moved, not_requeued))
}

/// Moves the workloads pending in the retired `queue` to `to_queue` by relabelling the objects Kueue made them
/// from: the owners moved, and the `notRequeued` entries for the rest (capped, then counted).
async fn requeue_pending(
    ctx: &Context,
    queue: &LiveObject,
    to_queue: &str,
) -> Result<(Vec<String>, Vec<String>), ReconcileError> {
    let namespace = queue.namespace.as_deref().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &crate::cache::kinds::workload_resource());
    let mut unreadable = Vec::new();
    let workloads: Vec<KueueWorkload> = match api.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|item| {
                let name = item.metadata.name.clone().unwrap_or_default();
                let decoded = serde_json::to_value(item).and_then(serde_json::from_value);
                decoded.map_err(|error| unreadable.push(format!("Workload {name}: unreadable ({error})"))).ok()
            })
            .collect(),
        Err(error) => {
            tracing::warn!(
                namespace, queue = %queue.name, %error,
                "failed to list the Workloads pending in a retired LocalQueue; retrying on the next reconcile"
            );
            return Ok((Vec::new(), vec![format!("failed to list Workloads: {error}; retried on the next reconcile")]));
        }
    };
    let (owners, not_moved) = find_pending_owners(&workloads, &queue.name);
    let mut not_requeued: Vec<String> = not_moved.iter().map(|not_moved| not_moved.entry()).collect();
    not_requeued.extend(unreadable);
    let mut moved = Vec::new();
    for owner in owners {
        let shown = owner.display(namespace);
        let refusal = ctx.requeue_memory.lock().ok().and_then(|mut memory| memory.refusal(&owner.uid, Instant::now()));
        if let Some(message) = refusal {
            not_requeued.push(format!("{shown}: {message}"));
            continue;
        }
        match writes::move_to_queue(ctx, namespace, &owner, (&queue.name, to_queue)).await? {
            MoveOutcome::Moved => {
                tracing::info!(
                    owner = %shown, from = %queue.name, to = %to_queue,
                    "moved a pending workload of a namespace that changed tier to its new LocalQueue"
                );
                moved.push(shown);
            }
            MoveOutcome::Changed => {}
            MoveOutcome::Unanswered(error) => {
                tracing::warn!(
                    owner = %shown, %error,
                    "failed to send the move of a pending workload to its new LocalQueue; retrying on the next reconcile"
                );
                not_requeued.push(format!("{shown}: failed to send the move ({error}); retried on the next reconcile"));
            }
            MoveOutcome::Refused(message) => {
                tracing::warn!(
                    owner = %shown, from = %queue.name, to = %to_queue, %message,
                    "moving a pending workload to its namespace's new LocalQueue was refused; it stays held until resubmitted"
                );
                let message = format!("refused: {message}; resubmit it in queue {to_queue}");
                if let Ok(mut memory) = ctx.requeue_memory.lock() {
                    memory.refuse(&owner.uid, message.clone(), Instant::now());
                }
                not_requeued.push(format!("{shown}: {message}"));
            }
        }
    }
    if not_requeued.len() > MAX_NOT_REQUEUED {
        let more = not_requeued.len() - MAX_NOT_REQUEUED;
        not_requeued.truncate(MAX_NOT_REQUEUED);
        not_requeued.push(format!("and {more} more"));
    }
    Ok((moved, not_requeued))
}
