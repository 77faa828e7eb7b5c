//! Retiring owned objects that are no longer desired: selected by both ownership labels, deleted in reverse
//! apply order with preconditions; LocalQueues follow the tier-change rule of [`super::migration`]; does I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::core::DynamicObject;

use super::desired::DesiredSet;
use super::kinds::{KueueKind, display_name, is_owned_by};
use super::migration::{QueueOccupancy, RetireAction, build_migration, build_retire_action, build_stop_body};
use super::{Context, ReconcileError, writes};
use crate::policy::QueueMigration;

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
pub(super) async fn retire_orphans(ctx: &Context, desired: &DesiredSet) -> Result<Retired, ReconcileError> {
    let wanted: HashSet<(KueueKind, Option<String>, String)> = desired
        .objects
        .iter()
        .map(|object| (object.kind, object.object.namespace(), object.object.name_any()))
        .collect();
    let replacement: HashMap<String, String> = desired
        .objects
        .iter()
        .filter(|object| object.kind == KueueKind::LocalQueue)
        .filter_map(|object| Some((object.object.namespace()?, object.object.name_any())))
        .collect();
    let mut retired = Retired::default();
    for kind in KueueKind::ALL.into_iter().rev() {
        let Some(store) = ctx.live.get(&kind) else { continue };
        let mut orphans: Vec<Arc<DynamicObject>> = store
            .state()
            .into_iter()
            .filter(|object| is_owned_by(object, &ctx.settings.policy_name))
            .filter(|object| object.metadata.deletion_timestamp.is_none())
            .filter(|object| !wanted.contains(&(kind, object.namespace(), object.name_any())))
            .collect();
        orphans.sort_by_key(|object| (object.namespace(), object.name_any()));
        for orphan in orphans {
            if kind != KueueKind::LocalQueue {
                if writes::delete_object(ctx, kind, &orphan, |_| true).await? {
                    retired.deleted.push(format!("{} {}", kind.name(), display_name(&orphan)));
                }
                continue;
            }
            let to_queue = orphan.namespace().and_then(|namespace| replacement.get(&namespace).cloned());
            match build_retire_action(&QueueOccupancy::of(&orphan)) {
                RetireAction::Delete => {
                    let still_empty =
                        |live: &DynamicObject| build_retire_action(&QueueOccupancy::of(live)) == RetireAction::Delete;
                    if writes::delete_object(ctx, kind, &orphan, still_empty).await? {
                        retired.deleted.push(format!("{} {}", kind.name(), display_name(&orphan)));
                        if let Some(to_queue) = &to_queue {
                            retired.stopped.push(build_migration(&orphan, to_queue, 0));
                        }
                    } else {
                        retired.draining += 1;
                    }
                }
                RetireAction::Stop { remaining } => {
                    writes::apply_object(ctx, kind, &build_stop_body(&orphan)).await?;
                    retired.draining += 1;
                    if let Some(to_queue) = &to_queue {
                        let migration = build_migration(&orphan, to_queue, remaining);
                        retired.stopped.push(migration.clone());
                        retired.migrations.push(migration);
                    }
                }
                RetireAction::Wait { remaining } => {
                    retired.draining += 1;
                    if let Some(to_queue) = &to_queue {
                        retired.migrations.push(build_migration(&orphan, to_queue, remaining));
                    }
                }
            }
        }
    }
    Ok(retired)
}
