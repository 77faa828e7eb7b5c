//! The controller: watches, server-side apply of the desired objects, pruning, status, leader election; does I/O.
//!
//! One reconcile of the active policy: validate -> discover Kueue -> translate -> apply what differs from the
//! watch cache (kind by kind, a few at a time within a kind; LocalQueues streamed one namespace at a time) ->
//! retire owned objects no longer desired -> status and events. Every write goes
//! through [`writes`], which checks the Lease write gate first. See docs/reconcile.md.

mod controller;
pub mod desired;
pub mod diff;
pub mod discovery;
pub mod drain;
pub mod dropped;
mod error;
mod events;
pub mod fleet;
mod gate_owner;
pub mod lease;
pub mod migration;
pub mod monitor;
mod prune;
mod quota_windows;
pub mod requeue;
pub mod runtime;
pub mod status;
pub mod usage;
pub mod worker;
mod writes;

pub use self::controller::{run_controller, run_while_leading};
pub use self::error::ReconcileError;
/// The Kueue kind table and the cached live objects are the cache unit's (`reconcile/` reads `cache/`, never the
/// reverse); re-exported so `reconcile::kinds` and `reconcile::live` keep resolving.
pub use crate::cache::{OwnedStores, kinds, live};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::BackoffBuilder;
use futures::StreamExt;
use kube::core::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use self::desired::{DesiredSet, build_desired_set, desired_cluster_objects, desired_local_queues, policy_problems};
use self::diff::{applied_hash, build_apply_need, build_apply_need_knowing_dropped};
use self::discovery::discover_kueue;
use self::fleet::health::FleetHealth;
use self::kinds::{KueueKind, display_name};
use self::lease::WriteGate;
use self::live::LiveObject;
use self::status::StatusInput;
use crate::blockers::{BlockedReason, Blockers};
use crate::metrics::{KindLabels, Metrics, ReasonLabels};
use crate::policy::TierPolicy;
use crate::trust::resolve_trusted_controllers;
use crate::view::{NamespaceView, SharedSnapshot, Snapshot};

/// How many applies of one kind are in flight at once. A cold start of 10,000 LocalQueues is otherwise 10,000
/// sequential round trips; 8 cuts that about 8x while staying a small, steady share of the API server's
/// mutating-request budget (kube-apiserver's default `--max-mutating-requests-inflight` is 200, shared with
/// Kueue and every other controller), so API priority and fairness never has to queue tiergate's writes.
const APPLY_CONCURRENCY: usize = 8;

/// How long to wait before re-checking when the caches have not synced yet.
const UNSYNCED_RETRY: Duration = Duration::from_secs(2);
/// Safety-net resync of a converged policy (a steady-state reconcile makes no writes).
const RESYNC: Duration = Duration::from_secs(300);
/// Re-check of draining LocalQueues (their status changes also trigger a reconcile).
const DRAIN_RECHECK: Duration = Duration::from_secs(30);
/// How long one reconcile keeps re-applying LocalQueues while the namespaces keep changing (see
/// [`apply_local_queues_until_still`]): long enough for a relabel of thousands of namespaces sent over seconds,
/// bounded so a steady stream of relabels cannot postpone pruning for ever.
const LOCAL_QUEUE_APPLY_WINDOW: Duration = Duration::from_secs(30);

/// The blockers a reconcile sets from its own failures, and clears once it applies.
const RECONCILE_BLOCKERS: [BlockedReason; 3] =
    [BlockedReason::KueueMissing, BlockedReason::WriteForbidden, BlockedReason::ReconcileFailing];

/// Fixed settings of the reconciler.
#[derive(Clone, Debug)]
pub struct ReconcilerSettings {
    /// The one TierPolicy reconciled (`--policy-name`).
    pub policy_name: String,
    /// This replica's identity, used as the event reporter instance.
    pub identity: String,
    /// Apply the gate's MutatingAdmissionPolicies where the API server serves them (`--mutating-gate`).
    pub mutating_gate: bool,
    /// The MutatingWebhookConfiguration that owns the in-server gate (`--gate-owner`): the gate is applied only
    /// while it exists, owned by it, and pruned when the served policy is gone.
    pub gate_owner: Option<String>,
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
    /// Whether the API server serves MutatingAdmissionPolicy: [`MODE_UNKNOWN`], [`MODE_SERVED`] or
    /// [`MODE_NOT_SERVED`].
    mutating_policies: std::sync::atomic::AtomicU8,
    /// Whether it serves ValidatingAdmissionPolicy and its bindings, in the same terms.
    validating_policies: std::sync::atomic::AtomicU8,
    backoffs: Mutex<HashMap<String, backon::ExponentialBackoff>>,
    fleet: Arc<FleetHealth>,
    blockers: Arc<Blockers>,
    /// Requeue passes and refused moves, so neither repeats on every reconcile.
    requeue_memory: Mutex<requeue::RequeueMemory>,
    /// Fields the API server dropped from applied objects, so their drift is reported once, not re-applied.
    dropped: Mutex<dropped::DroppedFields>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Context").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Context {
    /// A context over the given client, caches, write gate and metrics, with blockers of its own (not exported).
    pub fn new(
        client: Client,
        settings: ReconcilerSettings,
        snapshot: SharedSnapshot,
        live: OwnedStores,
        gate: Arc<WriteGate>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Self::new_with_blockers(client, settings, snapshot, live, gate, (metrics, Blockers::detached()))
    }

    /// [`Self::new`] recording what blocks it in `blockers` (the daemon's one registry).
    pub fn new_with_blockers(
        client: Client,
        settings: ReconcilerSettings,
        snapshot: SharedSnapshot,
        live: OwnedStores,
        gate: Arc<WriteGate>,
        (metrics, blockers): (Arc<Metrics>, Arc<Blockers>),
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
            mutating_policies: std::sync::atomic::AtomicU8::new(MODE_UNKNOWN),
            validating_policies: std::sync::atomic::AtomicU8::new(MODE_UNKNOWN),
            backoffs: Mutex::new(HashMap::new()),
            fleet: Arc::new(FleetHealth::default()),
            blockers,
            requeue_memory: Mutex::new(requeue::RequeueMemory::default()),
            dropped: Mutex::new(dropped::DroppedFields::default()),
        })
    }

    /// Where this context records what blocks it.
    pub fn blockers(&self) -> Arc<Blockers> {
        self.blockers.clone()
    }

    /// The fleet's worker health this context's status writes carry (`WorkerReachable-<cluster>` conditions);
    /// the fleet supervisor fills it.
    pub fn fleet_health(&self) -> Arc<FleetHealth> {
        self.fleet.clone()
    }

    /// Skips Kueue discovery (tests that mock only the object calls): Kueue and ValidatingAdmissionPolicy are taken
    /// as served, MutatingAdmissionPolicy as unknown.
    pub fn assume_kueue_discovered(&self) {
        self.kueue_discovered.store(true, Ordering::Relaxed);
        self.validating_policies.store(MODE_SERVED, Ordering::Relaxed);
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
        // Another instance may serve it: no write (a served policy carries `Served`; `kubectl tiergate status`
        // says when nobody serves one, and the monitor when the served one is missing).
        tracing::debug!(policy = %policy.name_any(), served = %ctx.settings.policy_name, "not the served policy");
        return Ok(Action::await_change());
    }
    if policy.metadata.deletion_timestamp.is_some() {
        tracing::info!(policy = %policy.name_any(), "policy is being deleted; the garbage collector removes its objects");
        return Ok(Action::await_change());
    }
    match reconcile_active(&policy, &ctx).await {
        Ok(action) => {
            ctx.reset_backoff(&policy.name_any());
            Ok(action)
        }
        Err(error) => {
            if let Some(reason) = error.blocker() {
                for other in RECONCILE_BLOCKERS.into_iter().filter(|other| *other != reason) {
                    ctx.blockers.clear(other);
                }
                ctx.blockers.set(reason, error.to_string());
            }
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

async fn reconcile_active(policy: &TierPolicy, ctx: &Context) -> Result<Action, ReconcileError> {
    let problems = policy_problems(policy);
    if !problems.is_empty() {
        return reject_policy(policy, ctx, &problems.join("; ")).await;
    }
    ctx.blockers.clear(BlockedReason::PolicyInvalid);
    // Everything below translates the quotas in force now; the requeue at the end runs again at the next change.
    let (in_force, windows) = quota_windows::build_policy_in_force(policy, k8s_openapi::jiff::Timestamp::now());
    let policy = in_force.as_ref();
    let window_status = windows.to_status();
    if !ctx.kueue_discovered.load(Ordering::Relaxed) {
        discover_kueue(&ctx.client).await?;
        discover_gate_mode(ctx).await;
        ctx.kueue_discovered.store(true, Ordering::Relaxed);
        ctx.blockers.clear(BlockedReason::KueueMissing);
    } else if ctx.validating_policies.load(Ordering::Relaxed) == MODE_UNKNOWN
        || (ctx.settings.mutating_gate && ctx.mutating_policies.load(Ordering::Relaxed) == MODE_UNKNOWN)
    {
        // Asked again until known: an unknown mode keeps whatever mutating half is live (below).
        discover_gate_mode(ctx).await;
    }
    // Discovery comes first so a missing Kueue is reported in the status, not only as caches that never sync.
    let snapshot = ctx.snapshot.load_full();
    if !snapshot.synced {
        tracing::debug!("caches not synced yet; not deciding");
        return Ok(Action::requeue(UNSYNCED_RETRY));
    }
    let mode = ctx.mutating_policies.load(Ordering::Relaxed);
    let mutating_served = ctx.settings.mutating_gate && mode == MODE_SERVED;
    // Discovery failed this time: the mutating half live now is neither applied nor pruned, so a new leader that
    // cannot tell the API server's version never takes away what its predecessor applied.
    let kept_unknown =
        if ctx.settings.mutating_gate && mode == MODE_UNKNOWN { live_mutating_half(ctx) } else { Vec::new() };
    // A policy that names no trusted controllers trusts the operators installed now (`trust`): the gate's parameters
    // say the same as the webhook, which decides from the snapshot's copy.
    let gate_owner = gate_owner::resolve_gate_owner(ctx).await?;
    if let gate_owner::GateOwner::Missing(name) = &gate_owner {
        tracing::warn!(
            registration = %name,
            "the webhook registration that owns the in-server gate (--gate-owner) does not exist: no gate is applied, \
             and one left is pruned (the gate backs up a registered webhook; helm uninstall removes both)"
        );
    }
    let resolved = resolve_trusted_controllers(policy, &snapshot.installed_operators);
    if resolved.is_some() {
        for account in snapshot.installed_operators.bound_before_their_namespace() {
            tracing::warn!(
                %account,
                "an operator's ClusterRoleBinding is older than its namespace, so its account is not trusted (a \
                 tenant could have made the namespace after the binding); if the platform installed it that way, name \
                 it in the TierPolicy's spec.admission.trustedControllers"
            );
        }
    }
    let (cluster_scoped, draining, retiring) = match desired_cluster_objects(resolved.as_ref().unwrap_or(policy)) {
        Ok(mut objects) => {
            // Before Kubernetes 1.36 (or when discovery could not tell) the gate is its validating half only.
            if !mutating_served {
                objects.retain(|object| !KueueKind::of(object).is_some_and(KueueKind::is_mutating_half));
            }
            let gate_not_served = ctx.validating_policies.load(Ordering::Relaxed) == MODE_NOT_SERVED;
            if matches!(gate_owner, gate_owner::GateOwner::Missing(_)) || gate_not_served {
                objects.retain(|object| !KueueKind::of(object).is_some_and(KueueKind::is_gate));
            }
            report_gate_served(ctx, gate_not_served);
            let client = &ctx.client;
            let karpenter = (KueueKind::NodePool, "karpenter.sh/v1 nodepools");
            let missing = BlockedReason::KarpenterMissing;
            keep_if_served(ctx, &mut objects, karpenter, missing, || discovery::discover_node_pools(client)).await;
            let dra = (KueueKind::DeviceClass, "resource.k8s.io/v1 deviceclasses");
            let missing = BlockedReason::DraNotServed;
            keep_if_served(ctx, &mut objects, dra, missing, || discovery::discover_device_classes(client)).await;
            let draining = carry_draining_flavors(ctx, &mut objects, "management");
            let retiring = retiring_queues(ctx, policy, &snapshot, &objects);
            drain::count_retiring_queues(&mut objects, &retiring);
            for retired in &retiring {
                tracing::info!(
                    queue = %retired.queue, successors = %retired.successors.join(","),
                    "counting what a retired ClusterQueue's workloads hold against the queues its namespaces feed now"
                );
            }
            (build_desired_set(policy, objects, gate_owner.reference())?, draining, retiring.len())
        }
        Err(error) => return reject_policy(policy, ctx, &error.to_string()).await,
    };
    let mut shrunk_tiers = crate::plan::quota::shrunk_tiers(&policy.spec, |name| live_cluster_queue(ctx, name));
    // A window that closes shrinks the quota on purpose: its Event says so, not `QuotaReduced`.
    let previous_windows = policy.status.as_ref().map(|status| status.quota_windows.as_slice()).unwrap_or_default();
    let window_changes = quota_windows::changed_tiers(previous_windows, &window_status);
    shrunk_tiers.retain(|tier| !window_changes.contains(&tier.as_str()));
    let mut applied = Applied::default();
    // The in-server gate first: from a fresh install (or a restored cluster) until the API server enforces it, a GPU
    // workload the webhook does not answer for is stored unconstrained, so nothing may delay it (the LocalQueues of
    // thousands of namespaces took seconds ahead of it). It refers to nothing else tiergate applies.
    apply_cluster_scoped(ctx, &cluster_scoped, KueueKind::is_gate, &mut applied).await?;
    let before_queues = |kind: KueueKind| kind < KueueKind::LocalQueue && !kind.is_gate();
    apply_cluster_scoped(ctx, &cluster_scoped, before_queues, &mut applied).await?;
    // The snapshots end with the LocalQueue rounds: one rebuilt meanwhile is the only one alive while pruning.
    let local_queues = apply_local_queues_until_still(ctx, policy, snapshot, &mut applied).await?;
    let after_queues = |kind: KueueKind| kind > KueueKind::LocalQueue && !kind.is_gate();
    apply_cluster_scoped(ctx, &cluster_scoped, after_queues, &mut applied).await?;
    if !applied.failed.is_empty() {
        // What failed may be what the objects to prune are being replaced by: nothing is pruned until all apply.
        events::publish_outcome_events(ctx, policy, &applied.names, &prune::Retired::default()).await;
        events::publish_apply_failures(ctx, policy, &applied.failed).await;
        return Err(applied.into_error());
    }
    let applied = applied.names;
    let wanted = prune::Wanted {
        cluster: cluster_scoped
            .objects
            .iter()
            .map(|object| (object.kind, object.object.name_any()))
            .chain(kept_unknown)
            .collect(),
        local_queues,
    };
    forget_dropped_fields(ctx, &wanted);
    let retired = prune::retire_orphans(ctx, &wanted).await?;
    let object_counts = build_object_counts(&cluster_scoped, wanted.local_queues.len());
    for kind in KueueKind::ALL {
        let count = object_counts.get(kind.name()).copied().unwrap_or(0);
        ctx.metrics.owned_objects.get_or_create(&KindLabels { kind: kind.name() }).set(i64::from(count));
    }
    events::publish_outcome_events(ctx, policy, &applied, &retired).await;
    quota_windows::publish_window_events(ctx, policy, &window_changes, &window_status).await;
    // Cleared before the status is written, so a converged status carries no stale `Blocked` condition.
    for reason in RECONCILE_BLOCKERS {
        ctx.blockers.clear(reason);
    }
    let input = StatusInput::Applied {
        tier_count: i32::try_from(policy.spec.tiers.len()).unwrap_or(i32::MAX),
        object_counts,
        migrations: retired.migrations.clone(),
        flavor_migrations: draining.iter().map(drain::DrainingFlavor::to_migration).collect(),
        shrunk_tiers,
        mutating_policies_served: served(&ctx.mutating_policies),
        validating_policies_served: served(&ctx.validating_policies),
        quota_windows: window_status,
    };
    writes::write_status(ctx, policy, &input).await?;
    let waiting = retired.draining > 0 || !draining.is_empty() || retiring > 0;
    let usual = if waiting { DRAIN_RECHECK } else { RESYNC };
    Ok(Action::requeue(quota_windows::build_requeue(usual, &windows, k8s_openapi::jiff::Timestamp::now())))
}

/// `Context::mutating_policies`: discovery has not answered (yet, or this time).
const MODE_UNKNOWN: u8 = 0;
/// `Context::mutating_policies`: the API server serves MutatingAdmissionPolicy.
const MODE_SERVED: u8 = 1;
/// `Context::mutating_policies`: it does not.
const MODE_NOT_SERVED: u8 = 2;

/// A recorded discovery answer: `Some(served)`, or `None` when unknown.
fn served(mode: &std::sync::atomic::AtomicU8) -> Option<bool> {
    match mode.load(Ordering::Relaxed) {
        MODE_SERVED => Some(true),
        MODE_NOT_SERVED => Some(false),
        _ => None,
    }
}

/// Asks which admission policies the API server serves and records the answers (unknown when discovery failed).
async fn discover_gate_mode(ctx: &Context) {
    let mode = |served: bool| if served { MODE_SERVED } else { MODE_NOT_SERVED };
    let (validating, mutating) = match self::discovery::discover_admission_policies(&ctx.client).await {
        Some(served) => (mode(served.validating), mode(served.mutating)),
        None => (MODE_UNKNOWN, MODE_UNKNOWN),
    };
    ctx.validating_policies.store(validating, Ordering::Relaxed);
    ctx.mutating_policies.store(mutating, Ordering::Relaxed);
}

/// Sets the `gate_not_served` blocker (the policy's Blocked condition, `/readyz`'s body, `tiergate_blocked`, the log)
/// when the API server serves no ValidatingAdmissionPolicy, so the gate is not applied; clears it otherwise. With
/// the validating half served, notes (`mutating_gate_not_served`) when the mutating half is wanted but not served.
fn report_gate_served(ctx: &Context, not_served: bool) {
    if not_served {
        ctx.blockers.set(
            BlockedReason::GateNotServed,
            "admissionregistration.k8s.io/v1 lists no validatingadmissionpolicies or validatingadmissionpolicybindings",
        );
    } else {
        ctx.blockers.clear(BlockedReason::GateNotServed);
    }
    let mutating_not_served = ctx.mutating_policies.load(Ordering::Relaxed) == MODE_NOT_SERVED;
    if ctx.settings.mutating_gate && mutating_not_served && !not_served {
        ctx.blockers.set(
            BlockedReason::MutatingGateNotServed,
            "admissionregistration.k8s.io/v1 lists no mutatingadmissionpolicies",
        );
    } else {
        ctx.blockers.clear(BlockedReason::MutatingGateNotServed);
    }
}

/// The gate's mutating half as live now (owned by the served policy), by kind and name.
fn live_mutating_half(ctx: &Context) -> Vec<(KueueKind, String)> {
    KueueKind::ALL
        .into_iter()
        .filter(|kind| kind.is_mutating_half())
        .filter_map(|kind| ctx.live.get(&kind).map(|store| (kind, store.state())))
        .flat_map(|(kind, objects)| {
            objects
                .into_iter()
                .filter(|object| object.is_owned_by(&ctx.settings.policy_name))
                .map(move |object| (kind, object.name.clone()))
        })
        .collect()
}

/// The namespaces the translation sees, borrowed from the snapshot: all but the daemon's own.
pub fn translation_namespaces(snapshot: &Snapshot) -> impl Iterator<Item = &NamespaceView> {
    let own = snapshot.own_namespace.as_deref();
    snapshot.namespaces.values().map(AsRef::as_ref).filter(move |namespace| Some(namespace.name.as_str()) != own)
}

/// Drops the policy's objects of `kind` from `objects` when the API server does not serve it (`discover` asks,
/// and is asked only when the policy has such objects), naming them in `reason`'s blocker; everything else is still
/// applied. Clears the blocker otherwise. `resource`: the group, version and plural, for the blocker's detail.
async fn keep_if_served<Served: Future<Output = Option<bool>>>(
    ctx: &Context,
    objects: &mut Vec<DynamicObject>,
    (kind, resource): (KueueKind, &str),
    reason: BlockedReason,
    discover: impl FnOnce() -> Served,
) {
    let is_kind = |object: &DynamicObject| KueueKind::of(object) == Some(kind);
    let names: Vec<String> = objects.iter().filter(|object| is_kind(object)).map(ResourceExt::name_any).collect();
    if !names.is_empty() && discover().await == Some(false) {
        objects.retain(|object| !is_kind(object));
        let detail = format!("{}s {} not applied: {resource} is not served", kind.name(), names.join(", "));
        ctx.blockers.set(reason, detail);
    } else {
        ctx.blockers.clear(reason);
    }
}

/// An invalid policy: nothing is applied or pruned (the last applied state stays); status and an Event say why.
async fn reject_policy(policy: &TierPolicy, ctx: &Context, message: &str) -> Result<Action, ReconcileError> {
    tracing::warn!(policy = %policy.name_any(), %message, "invalid TierPolicy; keeping the last applied state");
    ctx.blockers.set(BlockedReason::PolicyInvalid, format!("TierPolicy {}: {message}", policy.name_any()));
    let input = StatusInput::Invalid { message: message.to_owned() };
    if writes::write_status(ctx, policy, &input).await? {
        writes::publish_event(ctx, policy, EventType::Warning, "InvalidPolicy", message.to_owned()).await;
    }
    Ok(Action::await_change())
}

/// [`drain::carry_draining_flavors`] over `ctx`'s caches (those of `cluster`: the management cluster or a fleet
/// worker), logging each flavor kept with what it holds.
fn carry_draining_flavors(
    ctx: &Context,
    objects: &mut Vec<DynamicObject>,
    cluster: &str,
) -> Vec<drain::DrainingFlavor> {
    let draining = drain::carry_draining_flavors(objects, |kind, name| {
        live_named(ctx, kind, name, None).map(|live| live.as_ref().clone())
    });
    for drain in &draining {
        let held: Vec<String> =
            drain.to_migration().held.iter().map(|(resource, quantity)| format!("{resource}={quantity}")).collect();
        tracing::info!(
            %cluster, queue = %drain.queue, flavor = %drain.flavor, held = %held.join(","),
            "keeping a flavor the policy no longer gives this ClusterQueue, frozen at what its workloads hold, until they finish"
        );
    }
    draining
}

/// The owned ClusterQueues `objects` (the policy's) no longer have whose workloads still hold quota, each with the
/// policy's ClusterQueues of the tiers its LocalQueues' namespaces are in now (a renamed tier's new queue).
fn retiring_queues(
    ctx: &Context,
    policy: &TierPolicy,
    snapshot: &Snapshot,
    objects: &[DynamicObject],
) -> Vec<drain::RetiringQueue> {
    let wanted: std::collections::BTreeSet<&str> = objects
        .iter()
        .filter(|object| KueueKind::of(object) == Some(KueueKind::ClusterQueue))
        .filter_map(|object| object.metadata.name.as_deref())
        .collect();
    let Some(queues) = ctx.live.get(&KueueKind::ClusterQueue) else { return Vec::new() };
    let retired: Vec<Arc<LiveObject>> = queues
        .state()
        .into_iter()
        .filter(|queue| !queue.reserved.is_empty() && !wanted.contains(queue.name.as_str()))
        .collect();
    if retired.is_empty() {
        return Vec::new();
    }
    let local_queues = ctx.live.get(&KueueKind::LocalQueue).map(|store| store.state()).unwrap_or_default();
    let policy_name = policy.name_any();
    retired
        .iter()
        .map(|queue| {
            let successors: std::collections::BTreeSet<String> = local_queues
                .iter()
                .filter(|local| {
                    local.is_owned_by(&policy_name) && local.cluster_queue().as_deref() == Some(&queue.name)
                })
                .filter_map(|local| snapshot.namespaces.get(local.namespace.as_deref()?))
                .filter_map(|namespace| policy.spec.tier_of(&namespace.labels))
                .map(|tier| crate::plan::names::cluster_queue_name(&tier.name))
                .filter(|name| wanted.contains(name.as_str()))
                .collect();
            drain::RetiringQueue {
                queue: queue.name.clone(),
                successors: successors.into_iter().collect(),
                held: queue.reserved.clone(),
            }
        })
        .collect()
}

/// The cached live object of `kind` called `name` (in `namespace`, for LocalQueues); cluster-scoped kinds are
/// cached only when owned.
fn live_named(ctx: &Context, kind: KueueKind, name: &str, namespace: Option<&str>) -> Option<Arc<LiveObject>> {
    let store = ctx.live.get(&kind)?;
    let key = ObjectRef::<LiveObject>::new_with(name, kind);
    store.get(&match namespace {
        Some(namespace) => key.within(namespace),
        None => key,
    })
}

/// The cached live ClusterQueue called `name` as JSON (`{"spec": ...}`), if any.
fn live_cluster_queue(ctx: &Context, name: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&live_named(ctx, KueueKind::ClusterQueue, name, None)?.body).ok()
}

/// The cached live object `desired` would replace, if any.
fn live_object(ctx: &Context, kind: KueueKind, desired: &DynamicObject) -> Option<Arc<LiveObject>> {
    live_named(ctx, kind, desired.metadata.name.as_deref()?, desired.metadata.namespace.as_deref())
}

/// Applies the cluster-scoped objects of the kinds `phase` selects that the cache shows as missing, changed or
/// drifted, kind by kind in apply order (every object of a kind is applied before the next kind starts): the
/// kinds before LocalQueues, then (after them) the in-server gate's.
async fn apply_cluster_scoped(
    ctx: &Context,
    desired: &DesiredSet,
    phase: impl Fn(KueueKind) -> bool,
    applied: &mut Applied,
) -> Result<(), ReconcileError> {
    for kind in KueueKind::ALL.into_iter().filter(|kind| phase(*kind)) {
        let objects: Vec<DynamicObject> =
            desired.objects.iter().filter(|object| object.kind == kind).map(|object| object.object.clone()).collect();
        apply_kind(ctx, kind, objects.into_iter().map(Ok), applied, &mut SentBodies::new()).await?;
    }
    Ok(())
}

/// Applies the LocalQueues of `snapshot`'s namespaces, then those of the namespaces that changed meanwhile, for as
/// long as they keep changing (up to [`LOCAL_QUEUE_APPLY_WINDOW`]): a relabel of many namespaces arrives over
/// seconds, and every relabeled namespace gets its new queue before any old queue is pruned. Returns the wanted
/// queues of the last snapshot applied.
async fn apply_local_queues_until_still(
    ctx: &Context,
    policy: &TierPolicy,
    mut snapshot: Arc<Snapshot>,
    applied: &mut Applied,
) -> Result<HashMap<String, String>, ReconcileError> {
    let mut sent = SentBodies::new();
    let started = tokio::time::Instant::now();
    let namespaces: Vec<&NamespaceView> = translation_namespaces(&snapshot).collect();
    let mut wanted = apply_local_queues(ctx, policy, namespaces, applied, &mut sent).await?;
    let mut round = 1_u32;
    loop {
        let latest = ctx.snapshot.load_full();
        if started.elapsed() >= LOCAL_QUEUE_APPLY_WINDOW || !latest.synced {
            return Ok(wanted);
        }
        let changed = changed_namespaces(&snapshot, &latest);
        if changed.is_empty() {
            return Ok(wanted);
        }
        round += 1;
        tracing::debug!(
            round,
            changed = changed.len(),
            "namespaces changed while LocalQueues were applied; applying theirs before pruning"
        );
        // Only the changed namespaces are translated again: each namespace's queue depends on it alone.
        for name in &changed {
            wanted.remove(name);
        }
        let namespaces: Vec<&NamespaceView> =
            translation_namespaces(&latest).filter(|namespace| changed.contains(&namespace.name)).collect();
        wanted.extend(apply_local_queues(ctx, policy, namespaces, applied, &mut sent).await?);
        snapshot = latest;
    }
}

/// The names of the namespaces whose views differ between two snapshots: added, removed or replaced (the caches
/// share an unchanged view between snapshots, so a different pointer is a change).
fn changed_namespaces(before: &Snapshot, after: &Snapshot) -> HashSet<String> {
    let replaced_or_added = after
        .namespaces
        .iter()
        .filter(|(name, view)| before.namespaces.get(name.as_str()).is_none_or(|earlier| !Arc::ptr_eq(earlier, view)));
    let removed = before.namespaces.keys().filter(|name| !after.namespaces.contains_key(name.as_str()));
    replaced_or_added.map(|(name, _)| name.clone()).chain(removed.cloned()).collect()
}

/// What the applies of one reconcile did: the objects written, and those the API server refused on their own.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// `Kind name` of each object written.
    pub(super) names: Vec<String>,
    /// Each object's own refusal ([`ReconcileError::is_one_objects`]).
    pub(super) failed: Vec<ReconcileError>,
}

impl Applied {
    /// The reconcile's error when some objects failed.
    pub(super) fn into_error(self) -> ReconcileError {
        let summary: Vec<String> = self.failed.iter().map(ToString::to_string).collect();
        ReconcileError::Unapplied { count: summary.len(), summary: summary.join("; ") }
    }
}

/// The bodies one reconcile already applied, by object and applied-body hash: a later round of the same reconcile
/// does not apply them again while the watch cache has not caught up with the first.
pub(super) type SentBodies = HashSet<(Option<String>, String, String)>;

fn sent_key(object: &DynamicObject) -> Option<(Option<String>, String, String)> {
    let hash = applied_hash(object)?;
    Some((object.metadata.namespace.clone(), object.name_any(), hash.to_owned()))
}

/// Streams the desired LocalQueues: each is built, compared with the cache, applied if needed and dropped, so
/// only its key is kept (namespace -> queue name, what pruning needs).
async fn apply_local_queues(
    ctx: &Context,
    policy: &TierPolicy,
    namespaces: Vec<&NamespaceView>,
    applied: &mut Applied,
    sent: &mut SentBodies,
) -> Result<HashMap<String, String>, ReconcileError> {
    let mut wanted = HashMap::new();
    let queues = desired_local_queues(policy, namespaces).map(|queue| {
        let queue = queue?.object;
        if let Some(namespace) = &queue.metadata.namespace {
            wanted.insert(namespace.clone(), queue.name_any());
        }
        Ok(queue)
    });
    apply_kind(ctx, KueueKind::LocalQueue, queues, applied, sent).await?;
    Ok(wanted)
}

/// Applies the objects of one kind that need a write and are not in `sent`, up to [`APPLY_CONCURRENCY`] at once;
/// objects are pulled from `desired` only as slots free up, and each applied one is added to `sent`. An object the
/// API server refuses on its own ([`ReconcileError::is_one_objects`]: an immutable field, a webhook's or CRD
/// rule's refusal) goes to `failed` and the others are still applied; any other error stops the kind (in-flight
/// applies are dropped) and is returned. The next reconcile, after the error policy's backoff, starts over from
/// the cache.
async fn apply_kind(
    ctx: &Context,
    kind: KueueKind,
    desired: impl Iterator<Item = Result<DynamicObject, ReconcileError>>,
    applied: &mut Applied,
    sent: &mut SentBodies,
) -> Result<(), ReconcileError> {
    let already_sent: &SentBodies = sent;
    let writes = desired
        .filter_map(|object| match object {
            Ok(object) => {
                if sent_key(&object).is_some_and(|key| already_sent.contains(&key)) {
                    return None;
                }
                let live = live_object(ctx, kind, &object);
                let need = match ctx.dropped.lock() {
                    Ok(dropped) => {
                        let known = dropped.known(&object_key(kind, &object), applied_hash(&object));
                        build_apply_need_knowing_dropped(&object, live.as_deref(), known)
                    }
                    Err(_) => build_apply_need(&object, live.as_deref()),
                };
                need.needs_write().then_some(Ok((object, need)))
            }
            Err(error) => Some(Err(error)),
        })
        .map(|candidate| async move {
            let (object, need) = candidate?;
            tracing::info!(kind = kind.name(), name = %display_name(&object), ?need, "applying");
            let dropped = writes::apply_object(ctx, kind, &object).await?;
            record_dropped_fields(ctx, kind, &object, dropped);
            Ok::<_, ReconcileError>((format!("{} {}", kind.name(), display_name(&object)), sent_key(&object)))
        });
    let mut writes = futures::stream::iter(writes).buffer_unordered(APPLY_CONCURRENCY);
    let mut newly_sent = Vec::new();
    while let Some(result) = writes.next().await {
        match result {
            Ok((name, key)) => {
                applied.names.push(name);
                newly_sent.extend(key);
            }
            Err(error) if error.is_one_objects() => {
                tracing::warn!(kind = kind.name(), %error, "failed to apply one object; applying the others");
                applied.failed.push(error);
            }
            Err(error) => return Err(error),
        }
    }
    drop(writes);
    sent.extend(newly_sent);
    Ok(())
}

/// The key [`dropped::DroppedFields`] knows `object` of `kind` by.
fn object_key(kind: KueueKind, object: &DynamicObject) -> dropped::ObjectKey {
    dropped::ObjectKey { kind, namespace: object.namespace(), name: object.name_any() }
}

/// Records which fields (`dropped`, empty when none) the API server left out of `object` when applying it: warns
/// once per object and body, and keeps the `kueue_field_dropped` blocker naming every such object (updated only when
/// the memory changed, so the usual apply that keeps every field costs a lock and no more).
fn record_dropped_fields(ctx: &Context, kind: KueueKind, object: &DynamicObject, dropped: Vec<String>) {
    let Ok(mut memory) = ctx.dropped.lock() else { return };
    let hash = applied_hash(object).map(str::to_owned);
    let fields = dropped.join(", ");
    match memory.record(object_key(kind, object), hash, dropped) {
        dropped::DroppedChange::Same => return,
        dropped::DroppedChange::Newly => tracing::warn!(
            kind = kind.name(),
            name = %display_name(object),
            %fields,
            "the API server dropped fields tiergate applied (the installed CRD does not know them); the object runs \
             without them and is not re-applied until the policy changes"
        ),
        dropped::DroppedChange::Converged => {}
    }
    ctx.blockers.update(BlockedReason::KueueFieldDropped, memory.describe());
}

/// Forgets dropped fields of objects tiergate no longer applies (`wanted`), updating the blocker.
fn forget_dropped_fields(ctx: &Context, wanted: &prune::Wanted) {
    let Ok(mut memory) = ctx.dropped.lock() else { return };
    if memory.retain(|key| wanted.contains_key(key)) {
        ctx.blockers.update(BlockedReason::KueueFieldDropped, memory.describe());
    }
}

fn build_object_counts(cluster_scoped: &DesiredSet, local_queues: usize) -> BTreeMap<String, i32> {
    let mut counts = BTreeMap::new();
    for object in &cluster_scoped.objects {
        *counts.entry(object.kind.name().to_owned()).or_insert(0) += 1;
    }
    if local_queues > 0 {
        counts.insert(KueueKind::LocalQueue.name().to_owned(), i32::try_from(local_queues).unwrap_or(i32::MAX));
    }
    counts
}

#[cfg(test)]
mod tests;
