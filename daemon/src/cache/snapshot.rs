//! The snapshot loop of one cluster's caches: folds the stores into the immutable `Snapshot` (sharing the
//! stores' `Arc`s, never copying views), debounced after changes, and bumps the change counter the reconciler
//! waits on; `build_snapshot` is pure, the loop does I/O (timers, tasks).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::CacheSettings;
use super::decode::unwrap_cached;
use super::health::Signals;
use super::live::LiveObject;
use super::stores::Readers;
use crate::metrics::Metrics;
use crate::owners::{OwnerIndex, OwnerRecord, OwnerStore, REPLICA_SET};
use crate::policy::TierPolicy;
use crate::trust::{BindingView, find_installed_operators, with_trusted_controllers};
use crate::view::{
    ClaimTemplateView, NamespaceView, NodeView, PodView, SharedSnapshot, Snapshot, index_claim_templates,
};

pub(crate) struct SnapshotLoop {
    pub(crate) readers: Readers,
    pub(crate) settings: CacheSettings,
    pub(crate) synced: Arc<AtomicBool>,
    pub(crate) signals: Arc<Signals>,
    pub(crate) snapshot: SharedSnapshot,
    pub(crate) changes: watch::Sender<u64>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) shutdown: CancellationToken,
}

/// Rebuilds the snapshot after changes (debounced), bumps `changes` when the reconciler's inputs changed, and (in
/// management scope) keeps `cache_staleness_seconds` and `queue_depth` current.
pub(crate) async fn run_snapshot_loop(state: SnapshotLoop) {
    let mut staleness_tick = tokio::time::interval(Duration::from_secs(1));
    let mut version = 0_u64;
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => return,
            _ = staleness_tick.tick() => {
                let staleness = state.signals.staleness(Instant::now());
                if state.readers.management.is_some() {
                    state.metrics.cache_staleness_seconds.set(staleness);
                }
                if staleness > 0.0 {
                    tracing::debug!(watches = ?state.signals.failing_watches(), staleness, "caches are stale");
                }
                continue;
            }
            () = state.signals.changed.notified() => {}
        }
        tokio::select! {
            () = state.shutdown.cancelled() => return,
            () = tokio::time::sleep(state.settings.debounce) => {}
        }
        let management = state.readers.management.as_ref();
        let (synced, inputs) = read_after_sync_flag(&state.synced, || SnapshotInputs {
            policy_name: &state.settings.policy_name,
            own_namespace: &state.settings.own_namespace,
            policies: management.map(|readers| readers.policies.state()).unwrap_or_default(),
            namespaces: unwrap_cached(state.readers.namespaces.state()),
            nodes: unwrap_cached(state.readers.nodes.state()),
            local_queues: state.readers.local_queues.state(),
            pods: management
                .map(|readers| {
                    unwrap_cached(readers.placed_pods.state())
                        .into_iter()
                        .chain(unwrap_cached(readers.typed_pods.state()))
                        .collect()
                })
                .unwrap_or_default(),
            replica_sets: management.map(|readers| readers.replica_sets.state()).unwrap_or_default(),
            claim_templates: management
                .map(|readers| unwrap_cached(readers.claim_templates.state()))
                .unwrap_or_default(),
            bindings: management.map(|readers| unwrap_cached(readers.bindings.state())).unwrap_or_default(),
            owners: management.map(|readers| readers.owners.store()),
            synced: false,
        });
        let mut snapshot = build_snapshot(&SnapshotInputs { synced, ..inputs });
        if management.is_none() {
            // A worker's caches watch no owner kinds: no owner can be verified from them.
            snapshot.owners = None;
        }
        let snapshot = Arc::new(snapshot);
        if let Some(ledger) = &state.settings.ledger {
            ledger.observe(&snapshot);
        }
        state.snapshot.store(snapshot);
        if state.signals.reconcile_dirty.swap(false, Ordering::Relaxed) {
            version += 1;
            state.changes.send_replace(version);
            // The gauges describe the management cluster's reconciler; a worker reports through its health.
            if management.is_some() {
                state.metrics.queue_depth.inc();
            }
        }
    }
}

/// Reads the stores with `read`, and whether they had all listed: the sync flag is read *before* the stores.
///
/// Read after them, a store that finished its first list while the others were being read would be marked synced
/// with the empty contents read a moment earlier: a snapshot without the served policy or the namespaces, which the
/// webhook would answer from and the leader would prune the in-server gate by. Read before, `true` means every
/// store had listed before any was read (the barrier stores the flag with `Release` after every store is ready).
pub(crate) fn read_after_sync_flag<T>(synced: &AtomicBool, read: impl FnOnce() -> T) -> (bool, T) {
    let listed_before = synced.load(Ordering::Acquire);
    (listed_before, read())
}

/// The store contents a snapshot is folded from.
#[derive(Debug)]
pub struct SnapshotInputs<'a> {
    /// `--policy-name`.
    pub policy_name: &'a str,
    /// `--namespace`.
    pub own_namespace: &'a str,
    /// TierPolicies.
    pub policies: Vec<Arc<TierPolicy>>,
    /// Namespaces.
    pub namespaces: Vec<Arc<NamespaceView>>,
    /// Nodes.
    pub nodes: Vec<Arc<NodeView>>,
    /// LocalQueues.
    pub local_queues: Vec<Arc<LiveObject>>,
    /// Pods with a placement or job-type label (may repeat).
    pub pods: Vec<Arc<PodView>>,
    /// ReplicaSet metadata.
    pub replica_sets: Vec<Arc<PartialObjectMeta<ReplicaSet>>>,
    /// ResourceClaimTemplates.
    pub claim_templates: Vec<Arc<ClaimTemplateView>>,
    /// ClusterRoleBindings that bind service accounts.
    pub bindings: Vec<Arc<BindingView>>,
    /// The live records of the owner kinds (Jobs, JobSets, Deployments, ...), if they are watched.
    pub owners: Option<Arc<OwnerStore>>,
    /// Whether every store has synced.
    pub synced: bool,
}

/// Folds store contents into an immutable snapshot; views are shared with the stores, not copied.
pub fn build_snapshot(inputs: &SnapshotInputs<'_>) -> Snapshot {
    // A terminating namespace accepts no new objects: it is neither queued for nor mutated.
    let namespaces: BTreeMap<String, Arc<NamespaceView>> = inputs
        .namespaces
        .iter()
        .filter(|namespace| !namespace.terminating)
        .map(|namespace| (namespace.name.clone(), namespace.clone()))
        .collect();
    let nodes: BTreeMap<String, Arc<NodeView>> =
        inputs.nodes.iter().map(|node| (node.name.clone(), node.clone())).collect();
    let local_queues: BTreeSet<(String, String)> =
        inputs.local_queues.iter().filter_map(|queue| Some((queue.namespace.clone()?, queue.name.clone()))).collect();
    let mut seen = BTreeSet::new();
    let pods: Vec<Arc<PodView>> = inputs
        .pods
        .iter()
        .filter(|pod| seen.insert((pod.uid.as_str(), pod.namespace.as_str(), pod.name.as_str())))
        .cloned()
        .collect();
    let replica_set_owners = inputs
        .replica_sets
        .iter()
        .filter_map(|set| {
            let owner = set
                .owner_references()
                .iter()
                .find(|owner| owner.kind == "Deployment" && owner.controller == Some(true))?;
            Some((set.metadata.uid.clone()?, (set.metadata.namespace.clone()?, owner.name.clone())))
        })
        .collect();
    let installed_operators = find_installed_operators(inputs.bindings.iter().map(AsRef::as_ref), &namespaces);
    let policy = inputs.policies.iter().find(|policy| policy.name_any() == inputs.policy_name);
    Snapshot {
        owners: Some(Arc::new(build_owner_index(inputs))),
        policy: policy.map(|policy| with_trusted_controllers(policy, &installed_operators)),
        installed_operators,
        namespaces,
        nodes,
        local_queues,
        pods,
        replica_set_owners,
        claim_templates: index_claim_templates(inputs.claim_templates.iter().cloned()),
        own_namespace: Some(inputs.own_namespace.to_owned()),
        synced: inputs.synced,
        gpu_class_digest_memo: std::sync::OnceLock::new(),
        pods_by_namespace_memo: std::sync::OnceLock::new(),
    }
}

/// The owner index: the live owner-kind store plus every ReplicaSet (with its controlling Deployment's uid).
fn build_owner_index(inputs: &SnapshotInputs<'_>) -> OwnerIndex {
    let replica_sets = inputs.replica_sets.iter().filter_map(|set| {
        let controller = set.owner_references().iter().find(|owner| owner.controller == Some(true));
        Some(Arc::new(OwnerRecord {
            kind: REPLICA_SET,
            namespace: set.metadata.namespace.clone()?,
            name: set.metadata.name.clone()?,
            uid: set.metadata.uid.as_deref()?.into(),
            controller_uid: controller.map(|owner| owner.uid.clone()),
        }))
    });
    OwnerIndex::with_store(inputs.owners.clone(), replica_sets)
}
