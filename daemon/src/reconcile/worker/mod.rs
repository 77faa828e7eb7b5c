//! The reconcile engine of one worker cluster of a fleet (issue 17): from the worker's own `ClusterCache` (worker
//! scope) and a plan (a pure function of that worker's snapshot), it applies the Kueue objects and tenant
//! namespaces with the same server-side apply, prunes by the ownership labels, and makes zero writes in a steady
//! state. Each worker runs in its own task and reports a [`WorkerHealth`]; an unreachable worker is never written
//! to and never waits on, or is waited on by, another cluster; does I/O.

pub mod health;
mod namespaces;

pub use self::health::{WORKER_REACHABLE, WorkerHealth, WorkerState, build_worker_condition};
pub use self::namespaces::{NamespaceChanges, build_namespace_changes};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::desired::{DesiredError, build_worker_desired_set};
use super::kinds::KueueKind;
use super::lease::WriteGate;
use super::{Context, ReconcileError, ReconcilerSettings, SentBodies, apply_kind, prune};
use crate::cache::ClusterCache;
use crate::metrics::Metrics;
use crate::view::Snapshot;

/// Re-check of a worker that is unreachable, not synced or not led yet (its cache's changes also wake it).
const WAIT_RETRY: Duration = Duration::from_secs(5);
/// Retry of a failed pass.
const FAILED_RETRY: Duration = Duration::from_secs(15);
/// Re-check while LocalQueues drain.
const DRAIN_RECHECK: Duration = Duration::from_secs(30);
/// Safety-net resync of a converged worker (a steady-state pass makes no writes).
const RESYNC: Duration = Duration::from_secs(300);

/// A tenant namespace a worker should hold, with the labels tiergate sets on it (the tier label).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerNamespace {
    /// Namespace name (the same as on the management cluster).
    pub name: String,
    /// Labels tiergate sets (ownership labels are added by the engine).
    pub labels: BTreeMap<String, String>,
}

/// What a worker should hold: the plan's output for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerDesired {
    /// Kueue objects (ResourceFlavors, WorkloadPriorityClasses, ClusterQueues, LocalQueues, ...) with
    /// `apiVersion` and `kind`; the engine stamps the ownership and hash labels.
    pub objects: Vec<DynamicObject>,
    /// Tenant namespaces with their tier label.
    pub namespaces: Vec<WorkerNamespace>,
}

impl WorkerDesired {
    /// Nothing: a worker removed from the policy. A pass then prunes everything the policy owns on it.
    pub fn retired() -> Self {
        Self::default()
    }
}

/// The plan of one worker: its desired objects from its own snapshot (nodes, namespaces). The caller closes over
/// the policy (e.g. the management snapshot) so every pass sees the current one.
pub type WorkerPlan = Arc<dyn Fn(&Snapshot) -> Result<WorkerDesired, DesiredError> + Send + Sync>;

/// One worker: its client, caches and plan.
pub struct Worker {
    cluster: String,
    cache: ClusterCache,
    ctx: Arc<Context>,
    plan: WorkerPlan,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Worker").field("cluster", &self.cluster).finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker named `cluster` reached through `client`, whose caches are `cache` (worker scope, same client);
    /// `gate` is the management replica's Lease gate (only the leader writes), `settings` the policy reconciled.
    pub fn new(
        cluster: String,
        client: Client,
        cache: ClusterCache,
        plan: WorkerPlan,
        settings: ReconcilerSettings,
        gate: Arc<WriteGate>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let ctx = Context::new(client, settings, cache.snapshot.clone(), cache.owned.clone(), gate, metrics);
        Self { cluster, cache, ctx, plan }
    }

    /// The worker's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The worker's caches.
    pub fn cache(&self) -> &ClusterCache {
        &self.cache
    }

    /// Replaces the plan (e.g. when the worker's place in the policy changes; [`WorkerDesired::retired`] when it
    /// leaves the policy).
    pub fn set_plan(&mut self, plan: WorkerPlan) {
        self.plan = plan;
    }
}

/// One pass over `worker`: nothing when this replica does not lead, when the worker is unreachable or its
/// caches have not synced; else apply what differs from its caches, prune and release what is no longer wanted.
pub async fn reconcile_worker(worker: &Worker) -> WorkerHealth {
    let state = reconcile_state(worker).await;
    WorkerHealth { cluster: worker.cluster.clone(), state }
}

async fn reconcile_state(worker: &Worker) -> WorkerState {
    let ctx = &worker.ctx;
    if !ctx.gate.is_open() {
        return WorkerState::NotLeading;
    }
    let health = worker.cache.health();
    // A watch that failed is marked healthy again only by its next event, which a quiet cluster may not send for
    // long after it recovered: ask the API server itself whether it answers.
    if !health.is_reachable() && ctx.client.apiserver_version().await.is_err() {
        return WorkerState::Unreachable { failing_watches: health.failing_watches };
    }
    if !health.synced {
        return WorkerState::NotSynced;
    }
    let snapshot = worker.cache.snapshot.load_full();
    let desired = match (worker.plan)(&snapshot) {
        Ok(desired) => desired,
        Err(error) => return WorkerState::Invalid { message: error.to_string() },
    };
    let mut objects = desired.objects;
    let draining_flavors = super::carry_draining_flavors(ctx, &mut objects, &worker.cluster).len();
    let set = match build_worker_desired_set(&ctx.settings.policy_name, objects) {
        Ok(set) => set,
        Err(error) => return WorkerState::Invalid { message: error.to_string() },
    };
    let changes = build_namespace_changes(&ctx.settings.policy_name, &desired.namespaces, &snapshot.namespaces);
    drop(snapshot);
    match apply_and_prune(ctx, set.objects, changes, draining_flavors).await {
        Ok(state) => state,
        Err(error) => {
            let answered = is_answered(&error);
            tracing::warn!(cluster = %worker.cluster, reason = error.reason(), %error, "worker reconcile failed");
            WorkerState::Failed { reason: error.reason(), message: error.to_string(), answered }
        }
    }
}

async fn apply_and_prune(
    ctx: &Context,
    objects: Vec<super::desired::DesiredObject>,
    changes: NamespaceChanges,
    draining_flavors: usize,
) -> Result<WorkerState, ReconcileError> {
    let mut applied = Vec::new();
    for (name, labels) in &changes.apply {
        namespaces::apply_namespace(ctx, name, labels).await?;
        applied.push(format!("Namespace {name}"));
    }
    let mut wanted = prune::Wanted::default();
    let mut by_kind: BTreeMap<KueueKind, Vec<DynamicObject>> = BTreeMap::new();
    for object in objects {
        match (object.kind, object.object.metadata.namespace.clone()) {
            (KueueKind::LocalQueue, Some(namespace)) => {
                wanted.local_queues.insert(namespace, object.object.name_any());
            }
            (kind, _) => {
                wanted.cluster.insert((kind, object.object.name_any()));
            }
        }
        by_kind.entry(object.kind).or_default().push(object.object);
    }
    let mut outcome = super::Applied { names: applied, failed: Vec::new() };
    for (kind, objects) in by_kind {
        apply_kind(ctx, kind, objects.into_iter().map(Ok), &mut outcome, &mut SentBodies::new()).await?;
    }
    // The rest was applied; the worker reports its first refused object, as before, and prunes nothing.
    if let Some(first) = outcome.failed.into_iter().next() {
        return Err(first);
    }
    let applied = outcome.names;
    let retired = prune::retire_orphans(ctx, &wanted).await?;
    let mut released = retired.deleted;
    for name in &changes.release {
        namespaces::apply_namespace(ctx, name, &BTreeMap::new()).await?;
        released.push(format!("Namespace {name} (tier label released)"));
    }
    Ok(WorkerState::Converged { applied, retired: released, draining: retired.draining, draining_flavors })
}

/// Whether the worker's API server answered the failed call (an HTTP status), as opposed to the connection
/// failing.
fn is_answered(error: &ReconcileError) -> bool {
    match error {
        ReconcileError::ApplyObject { source, .. }
        | ReconcileError::ReadObject { source, .. }
        | ReconcileError::DeleteObject { source, .. } => matches!(source, kube::Error::Api(_)),
        _ => true,
    }
}

/// A worker's engine running in its own task.
#[derive(Debug)]
pub struct RunningWorker {
    /// The worker's name.
    pub cluster: String,
    /// The latest pass's health (starts [`WorkerState::Pending`]).
    pub health: watch::Receiver<WorkerHealth>,
    passes: Arc<AtomicU64>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl RunningWorker {
    /// How many passes have finished, counted before each health report (so a reader woken by the report sees
    /// at least that pass).
    pub fn pass_counter(&self) -> Arc<AtomicU64> {
        self.passes.clone()
    }

    /// Stops this worker's engine and caches (the others keep running) and waits for its task.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Err(error) = self.task.await {
            tracing::warn!(cluster = %self.cluster, %error, "a worker task panicked or was aborted");
        }
    }
}

/// Runs passes over `worker` in its own task: after each change of its caches, of `triggers` (e.g. the
/// management snapshot's change counter: a policy edit), of the leadership, and on a timer; until `shutdown`
/// or [`RunningWorker::stop`].
pub fn start_worker(worker: Worker, triggers: watch::Receiver<u64>, shutdown: &CancellationToken) -> RunningWorker {
    let cluster = worker.cluster.clone();
    let (health_tx, health) = watch::channel(WorkerHealth { cluster: cluster.clone(), state: WorkerState::Pending });
    let stop = shutdown.child_token();
    let passes = Arc::new(AtomicU64::new(0));
    let task = tokio::spawn(run_worker(worker, triggers, health_tx, passes.clone(), stop.clone()));
    RunningWorker { cluster, health, passes, stop, task }
}

async fn run_worker(
    worker: Worker,
    mut triggers: watch::Receiver<u64>,
    health: watch::Sender<WorkerHealth>,
    passes: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    let mut changes = worker.cache.changes.clone();
    let mut leading = worker.ctx.gate.subscribe();
    let mut last_reason = "";
    loop {
        let pass = reconcile_worker(&worker);
        let outcome = tokio::select! {
            () = stop.cancelled() => break,
            outcome = pass => outcome,
        };
        let delay = match &outcome.state {
            WorkerState::Converged { draining, draining_flavors, .. } if *draining + *draining_flavors > 0 => {
                DRAIN_RECHECK
            }
            WorkerState::Converged { .. } | WorkerState::Invalid { .. } => RESYNC,
            WorkerState::Failed { .. } => FAILED_RETRY,
            WorkerState::Pending
            | WorkerState::NotLeading
            | WorkerState::Unreachable { .. }
            | WorkerState::NotSynced
            | WorkerState::NoCredentials { .. } => WAIT_RETRY,
        };
        if std::mem::replace(&mut last_reason, outcome.reason()) != outcome.reason() {
            tracing::info!(cluster = %outcome.cluster, reason = outcome.reason(), "{}", outcome.message());
        }
        passes.fetch_add(1, Ordering::SeqCst);
        health.send_replace(outcome);
        tokio::select! {
            () = stop.cancelled() => break,
            Ok(()) = changes.changed() => {}
            Ok(()) = triggers.changed() => {}
            Ok(()) = leading.changed() => {}
            () = tokio::time::sleep(delay) => {}
        }
    }
    worker.cache.shutdown();
}

#[cfg(test)]
pub(crate) mod tests;
