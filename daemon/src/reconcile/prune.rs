//! Retiring owned objects that are no longer desired: selected by both ownership labels, deleted in reverse
//! apply order (a few at a time within a kind) with preconditions; LocalQueues follow the tier-change rule of
//! [`super::migration`]; does I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;

use super::kinds::KueueKind;
use super::live::LiveObject;
use super::migration::{QueueOccupancy, RetireAction, build_migration, build_retire_action, build_stop_body};
use super::{APPLY_CONCURRENCY, Context, ReconcileError, writes};
use crate::policy::QueueMigration;

/// What this reconcile wants to exist, by key only (the bodies were applied and dropped one at a time).
#[derive(Debug, Default)]
pub(super) struct Wanted {
    /// Cluster-scoped objects by kind and name.
    pub(super) cluster: HashSet<(KueueKind, String)>,
    /// The one LocalQueue wanted in each namespace, by namespace.
    pub(super) local_queues: HashMap<String, String>,
}

impl Wanted {
    fn contains(&self, object: &LiveObject) -> bool {
        match &object.namespace {
            Some(namespace) if object.kind == KueueKind::LocalQueue => {
                self.local_queues.get(namespace) == Some(&object.name)
            }
            _ => self.cluster.contains(&(object.kind, object.name.clone())),
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
}

/// What retiring one orphan came to.
enum Outcome {
    /// Deleted; for a LocalQueue replaced in its namespace, the migration it completes.
    Deleted { name: String, migration: Option<QueueMigration> },
    /// Kept until it is empty: stopped now (`stopped`) or already stopped, and the migration still in progress.
    Draining { stopped: Option<QueueMigration>, migration: Option<QueueMigration> },
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
                Outcome::Deleted { name, migration } => {
                    retired.deleted.push(name);
                    retired.stopped.extend(migration);
                }
                Outcome::Draining { stopped, migration } => {
                    retired.draining += 1;
                    retired.stopped.extend(stopped);
                    retired.migrations.extend(migration);
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
        return Ok(if deleted { Outcome::Deleted { name, migration: None } } else { Outcome::Kept });
    }
    let to_queue = orphan.namespace.as_ref().and_then(|namespace| wanted.local_queues.get(namespace));
    Ok(match build_retire_action(&QueueOccupancy::of(orphan)) {
        RetireAction::Delete => {
            let still_empty =
                |live: &LiveObject| build_retire_action(&QueueOccupancy::of(live)) == RetireAction::Delete;
            if writes::delete_object(ctx, orphan, still_empty).await? {
                Outcome::Deleted { name, migration: to_queue.map(|to_queue| build_migration(orphan, to_queue, 0)) }
            } else {
                Outcome::Draining { stopped: None, migration: None }
            }
        }
        RetireAction::Stop { remaining } => {
            writes::apply_object(ctx, kind, &build_stop_body(orphan)).await?;
            let migration = to_queue.map(|to_queue| build_migration(orphan, to_queue, remaining));
            Outcome::Draining { stopped: migration.clone(), migration }
        }
        RetireAction::Wait { remaining } => Outcome::Draining {
            stopped: None,
            migration: to_queue.map(|to_queue| build_migration(orphan, to_queue, remaining)),
        },
    })
}
