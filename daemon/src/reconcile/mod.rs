//! The controller: watches, server-side apply of the desired objects, pruning, status, leader election; does I/O.
//!
//! One reconcile of the active policy: validate -> discover Kueue -> translate -> apply what differs from the
//! watch cache (in kind order) -> retire owned objects no longer desired -> status and events. Every write goes
//! through [`writes`], which checks the Lease write gate first. See docs/reconcile.md.

pub mod desired;
pub mod diff;
pub mod discovery;
pub mod kinds;
pub mod lease;
pub mod migration;
pub mod runtime;
pub mod status;
mod writes;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::BackoffBuilder;
use futures::StreamExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use self::desired::{DesiredError, DesiredSet, build_desired_set, desired_objects, policy_problems};
use self::diff::build_apply_need;
use self::discovery::{DiscoveryError, discover_kueue};
use self::kinds::{KueueKind, display_name, is_owned_by};
use self::lease::WriteGate;
use self::migration::{QueueOccupancy, RetireAction, build_migration, build_retire_action, build_stop_body};
use self::status::StatusInput;
use crate::metrics::{KindLabels, Metrics, ReasonLabels};
use crate::policy::{QueueMigration, TierPolicy};
use crate::view::{SharedSnapshot, Snapshot};

/// Live Kueue objects as the watches show them, per kind (LocalQueues: all of them; other kinds: owned ones).
pub type OwnedStores = BTreeMap<KueueKind, Store<DynamicObject>>;

/// How long to wait before re-checking when the caches have not synced yet.
const UNSYNCED_RETRY: Duration = Duration::from_secs(2);
/// Safety-net resync of a converged policy (a steady-state reconcile makes no writes).
const RESYNC: Duration = Duration::from_secs(300);
/// Re-check of draining LocalQueues (their status changes also trigger a reconcile).
const DRAIN_RECHECK: Duration = Duration::from_secs(30);

/// A reconcile failed; `error_policy` requeues it with capped exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The Lease write gate closed: this replica is not (or no longer) the leader.
    #[error("failed to write {what}: this replica does not hold the leader Lease")]
    WriteWithoutLease {
        /// What was about to be written.
        what: String,
    },
    /// Kueue is missing or too old.
    #[error(transparent)]
    DiscoverKueue(#[from] DiscoveryError),
    /// Server-side apply of an object failed.
    #[error("failed to apply {kind} {name}: {source}")]
    ApplyObject {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Applying kept conflicting after re-reading.
    #[error("failed to apply {kind} {name}: still conflicting after {attempts} re-reads")]
    ApplyConflict {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Attempts made.
        attempts: u32,
    },
    /// Re-reading an object after a conflict failed.
    #[error("failed to read {kind} {name}: {source}")]
    ReadObject {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting an orphan failed.
    #[error("failed to delete {kind} {name}: {source}")]
    DeleteObject {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing the policy's status failed.
    #[error("failed to write the status of TierPolicy {name}: {source}")]
    WriteStatus {
        /// Policy name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// The translation failed.
    #[error(transparent)]
    BuildDesired(#[from] DesiredError),
}

impl ReconcileError {
    /// Fixed reason for metrics, conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::WriteWithoutLease { .. } => "write_without_lease",
            Self::DiscoverKueue(error) => error.reason(),
            Self::ApplyObject { .. } => "apply_object",
            Self::ApplyConflict { .. } => "apply_conflict",
            Self::ReadObject { .. } => "read_object",
            Self::DeleteObject { .. } => "delete_object",
            Self::WriteStatus { .. } => "write_status",
            Self::BuildDesired(error) => error.reason(),
        }
    }
}

/// Fixed settings of the reconciler.
#[derive(Clone, Debug)]
pub struct ReconcilerSettings {
    /// The one TierPolicy reconciled (`--policy-name`).
    pub policy_name: String,
    /// This replica's identity, used as the event reporter instance.
    pub identity: String,
}

/// Everything a reconcile reads and writes through. Cheap to share behind an `Arc`.
pub struct Context {
    client: Client,
    settings: ReconcilerSettings,
    snapshot: SharedSnapshot,
    live: OwnedStores,
    gate: Arc<WriteGate>,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    kueue_discovered: AtomicBool,
    backoffs: Mutex<HashMap<String, backon::ExponentialBackoff>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Context").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Context {
    /// A context over the given client, caches, write gate and metrics.
    pub fn new(
        client: Client,
        settings: ReconcilerSettings,
        snapshot: SharedSnapshot,
        live: OwnedStores,
        gate: Arc<WriteGate>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let reporter = Reporter { controller: "tiergate".to_owned(), instance: Some(settings.identity.clone()) };
        Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            snapshot,
            live,
            gate,
            metrics,
            kueue_discovered: AtomicBool::new(false),
            backoffs: Mutex::new(HashMap::new()),
        })
    }

    /// Skips Kueue discovery (tests that mock only the object calls).
    pub fn assume_kueue_discovered(&self) {
        self.kueue_discovered.store(true, Ordering::Relaxed);
    }

    fn next_backoff(&self, key: &str) -> Duration {
        let Ok(mut backoffs) = self.backoffs.lock() else { return RESYNC };
        let backoff = backoffs.entry(key.to_owned()).or_insert_with(|| {
            backon::ExponentialBuilder::new()
                .with_min_delay(Duration::from_secs(1))
                .with_max_delay(RESYNC)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build()
        });
        backoff.next().unwrap_or(RESYNC)
    }

    fn reset_backoff(&self, key: &str) {
        if let Ok(mut backoffs) = self.backoffs.lock() {
            backoffs.remove(key);
        }
    }
}

/// Reconciles one TierPolicy (the controller calls this; tests call it directly).
pub async fn reconcile(policy: Arc<TierPolicy>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    ctx.metrics.reconciles.inc();
    ctx.metrics.queue_depth.set(0);
    if policy.name_any() != ctx.settings.policy_name {
        let input = StatusInput::NotReconciled { active: ctx.settings.policy_name.clone() };
        writes::write_status(&ctx, &policy, &input).await?;
        return Ok(Action::await_change());
    }
    if policy.metadata.deletion_timestamp.is_some() {
        tracing::info!(policy = %policy.name_any(), "policy is being deleted; the garbage collector removes its objects");
        return Ok(Action::await_change());
    }
    let snapshot = ctx.snapshot.load_full();
    if !snapshot.synced {
        tracing::debug!("caches not synced yet; not deciding");
        return Ok(Action::requeue(UNSYNCED_RETRY));
    }
    match reconcile_active(&policy, &ctx, &snapshot).await {
        Ok(action) => {
            ctx.reset_backoff(&policy.name_any());
            Ok(action)
        }
        Err(error) => {
            if !matches!(error, ReconcileError::WriteWithoutLease { .. }) {
                let input = StatusInput::Failed { reason: error.reason(), message: error.to_string() };
                if let Err(status_error) = writes::write_status(&ctx, &policy, &input).await {
                    tracing::warn!(error = %status_error, "failed to record the reconcile error in the status");
                }
            }
            Err(error)
        }
    }
}

/// Requeues a failed reconcile after a capped exponential backoff (1 s doubling to 5 min, jittered).
pub fn error_policy(policy: Arc<TierPolicy>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.get_or_create(&ReasonLabels { reason: error.reason() }).inc();
    let delay = ctx.next_backoff(&policy.name_any());
    tracing::warn!(policy = %policy.name_any(), reason = error.reason(), %error, ?delay, "reconcile failed");
    Action::requeue(delay)
}

async fn reconcile_active(policy: &TierPolicy, ctx: &Context, snapshot: &Snapshot) -> Result<Action, ReconcileError> {
    let problems = policy_problems(&policy.spec);
    if !problems.is_empty() {
        return reject_policy(policy, ctx, &problems.join("; ")).await;
    }
    if !ctx.kueue_discovered.load(Ordering::Relaxed) {
        discover_kueue(&ctx.client).await?;
        ctx.kueue_discovered.store(true, Ordering::Relaxed);
    }
    let desired = match desired_objects(policy, &build_translation_view(snapshot)) {
        Ok(objects) => build_desired_set(policy, objects)?,
        Err(error) => return reject_policy(policy, ctx, &error.to_string()).await,
    };
    let applied = apply_desired(ctx, &desired).await?;
    let retired = retire_orphans(ctx, &desired).await?;
    let object_counts = build_object_counts(&desired);
    for kind in KueueKind::ALL {
        let count = object_counts.get(kind.name()).copied().unwrap_or(0);
        ctx.metrics.owned_objects.get_or_create(&KindLabels { kind: kind.name() }).set(i64::from(count));
    }
    publish_outcome_events(ctx, policy, &applied, &retired).await;
    let input = StatusInput::Applied {
        tier_count: i32::try_from(policy.spec.tiers.len()).unwrap_or(i32::MAX),
        object_counts,
        migrations: retired.migrations.clone(),
    };
    writes::write_status(ctx, policy, &input).await?;
    Ok(Action::requeue(if retired.draining > 0 { DRAIN_RECHECK } else { RESYNC }))
}

/// The cluster view the translation sees: the snapshot's, without the daemon's own namespace.
pub fn build_translation_view(snapshot: &Snapshot) -> crate::view::ClusterView {
    let mut view = snapshot.cluster_view();
    view.namespaces.retain(|namespace| snapshot.own_namespace.as_deref() != Some(namespace.name.as_str()));
    view
}

/// An invalid policy: nothing is applied or pruned (the last applied state stays); status and an Event say why.
async fn reject_policy(policy: &TierPolicy, ctx: &Context, message: &str) -> Result<Action, ReconcileError> {
    tracing::warn!(policy = %policy.name_any(), %message, "invalid TierPolicy; keeping the last applied state");
    let input = StatusInput::Invalid { message: message.to_owned() };
    if writes::write_status(ctx, policy, &input).await? {
        writes::publish_event(ctx, policy, EventType::Warning, "InvalidPolicy", message.to_owned()).await;
    }
    Ok(Action::await_change())
}

/// Live objects of one kind by (namespace, name).
fn build_live_index(store: Option<&Store<DynamicObject>>) -> HashMap<(Option<String>, String), Arc<DynamicObject>> {
    store
        .map(|store| {
            store.state().into_iter().map(|object| ((object.namespace(), object.name_any()), object)).collect()
        })
        .unwrap_or_default()
}

/// Applies every desired object the cache shows as missing, changed or drifted, in apply order.
async fn apply_desired(ctx: &Context, desired: &DesiredSet) -> Result<Vec<String>, ReconcileError> {
    let mut applied = Vec::new();
    let mut index_kind = None;
    let mut index = HashMap::new();
    for object in &desired.objects {
        if index_kind != Some(object.kind) {
            index = build_live_index(ctx.live.get(&object.kind));
            index_kind = Some(object.kind);
        }
        let key = (object.object.namespace(), object.object.name_any());
        let need = build_apply_need(&object.object, index.get(&key).map(Arc::as_ref));
        if need.needs_write() {
            tracing::info!(kind = object.kind.name(), name = %display_name(&object.object), ?need, "applying");
            writes::apply_object(ctx, object.kind, &object.object).await?;
            applied.push(format!("{} {}", object.kind.name(), display_name(&object.object)));
        }
    }
    Ok(applied)
}

/// What pruning did.
#[derive(Debug, Default)]
struct Retired {
    deleted: Vec<String>,
    stopped: Vec<QueueMigration>,
    migrations: Vec<QueueMigration>,
    draining: usize,
}

/// Deletes owned objects no longer desired (selected by both ownership labels, in reverse apply order);
/// LocalQueues that still hold workloads are stopped first and deleted once empty.
async fn retire_orphans(ctx: &Context, desired: &DesiredSet) -> Result<Retired, ReconcileError> {
    let wanted: std::collections::HashSet<(KueueKind, Option<String>, String)> = desired
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

fn build_object_counts(desired: &DesiredSet) -> BTreeMap<String, i32> {
    let mut counts = BTreeMap::new();
    for object in &desired.objects {
        *counts.entry(object.kind.name().to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Events for what this reconcile changed (none in a steady state).
async fn publish_outcome_events(ctx: &Context, policy: &TierPolicy, applied: &[String], retired: &Retired) {
    if !applied.is_empty() {
        let note = build_list_note(&format!("applied {} objects", applied.len()), applied);
        writes::publish_event(ctx, policy, EventType::Normal, "Applied", note).await;
    }
    if !retired.deleted.is_empty() {
        let note = build_list_note(&format!("pruned {} objects", retired.deleted.len()), &retired.deleted);
        writes::publish_event(ctx, policy, EventType::Normal, "Pruned", note).await;
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

/// Runs the controller until `shutdown`: the policy watch plus a reconcile of every policy whenever `changes`
/// reports a new snapshot (namespaces, nodes, owned Kueue objects).
pub async fn run_controller(ctx: Arc<Context>, changes: watch::Receiver<u64>, shutdown: CancellationToken) {
    let policies: Api<TierPolicy> = Api::all(ctx.client.clone());
    let snapshot_changes = futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        Some(((), changes))
    });
    Controller::new(policies, watcher::Config::default().any_semantic())
        .with_config(controller::Config::default().debounce(Duration::from_millis(200)).concurrency(1))
        .reconcile_all_on(snapshot_changes)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) | Err(controller::Error::ReconcilerFailed(..) | controller::Error::ObjectNotFound(_)) => {}
                Err(error) => tracing::warn!(%error, "the TierPolicy watch failed; retrying with backoff"),
            }
        })
        .await;
}

/// Runs the controller only while `gate` says this replica leads; stops it the moment leadership is lost.
pub async fn run_while_leading(ctx: Arc<Context>, changes: watch::Receiver<u64>, shutdown: CancellationToken) {
    let mut leading = ctx.gate.subscribe();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            leads = async { leading.wait_for(|leading| *leading).await.is_ok() } => if !leads { return },
        }
        tracing::info!("leading: starting the controller");
        let stop = shutdown.child_token();
        let controller = run_controller(ctx.clone(), changes.clone(), stop.clone());
        tokio::pin!(controller);
        tokio::select! {
            () = &mut controller => {}
            lost = async { leading.wait_for(|leading| !*leading).await.is_ok() } => {
                if lost {
                    tracing::warn!("leadership lost: stopping the controller");
                }
                stop.cancel();
                controller.await;
            }
            () = shutdown.cancelled() => {
                controller.await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
