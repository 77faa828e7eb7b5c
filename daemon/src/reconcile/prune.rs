//! Retiring owned objects that are no longer desired: selected by both ownership labels, deleted in reverse
//! apply order with preconditions; LocalQueues follow the tier-change rule of [`super::migration`]; does I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::kinds::KueueKind;
use super::live::LiveObject;
use super::migration::{QueueOccupancy, RetireAction, build_migration, build_retire_action, build_stop_body};
use super::{Context, ReconcileError, writes};
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

/// Deletes owned objects no longer desired (selected by both ownership labels, in reverse apply order);
/// LocalQueues that still hold workloads are stopped first and deleted once empty.
pub(super) async fn retire_orphans(ctx: &Context, wanted: &Wanted) -> Result<Retired, ReconcileError> {
    let mut retired = Retired::default();
    for kind in KueueKind::ALL.into_iter().rev() {
        let Some(store) = ctx.live.get(&kind) else { continue };
        let mut orphans: Vec<Arc<LiveObject>> = store.state_filter(|object| {
            object.is_owned_by(&ctx.settings.policy_name) && !object.deleting && !wanted.contains(object)
        });
        orphans.sort_by(|left, right| (&left.namespace, &left.name).cmp(&(&right.namespace, &right.name)));
        for orphan in orphans {
            if kind != KueueKind::LocalQueue {
                if writes::delete_object(ctx, &orphan, |_| true).await? {
                    retired.deleted.push(format!("{} {}", kind.name(), orphan.display_name()));
                }
                continue;
            }
            let to_queue = orphan.namespace.as_ref().and_then(|namespace| wanted.local_queues.get(namespace));
            match build_retire_action(&QueueOccupancy::of(&orphan)) {
                RetireAction::Delete => {
                    let still_empty =
                        |live: &LiveObject| build_retire_action(&QueueOccupancy::of(live)) == RetireAction::Delete;
                    if writes::delete_object(ctx, &orphan, still_empty).await? {
                        retired.deleted.push(format!("{} {}", kind.name(), orphan.display_name()));
                        if let Some(to_queue) = to_queue {
                            retired.stopped.push(build_migration(&orphan, to_queue, 0));
                        }
                    } else {
                        retired.draining += 1;
                    }
                }
                RetireAction::Stop { remaining } => {
                    writes::apply_object(ctx, kind, &build_stop_body(&orphan)).await?;
                    retired.draining += 1;
                    if let Some(to_queue) = to_queue {
                        let migration = build_migration(&orphan, to_queue, remaining);
                        retired.stopped.push(migration.clone());
                        retired.migrations.push(migration);
                    }
                }
                RetireAction::Wait { remaining } => {
                    retired.draining += 1;
                    if let Some(to_queue) = to_queue {
                        retired.migrations.push(build_migration(&orphan, to_queue, remaining));
                    }
                }
            }
        }
    }
    Ok(retired)
}
