//! Reflector stores for policies, namespaces, nodes, LocalQueues and pods, folded into the shared `Snapshot`; does I/O.
//!
//! Every watch is decoded into the pure core's views before it reaches a store (namespaces, nodes and pods become
//! `NamespaceView`, `NodeView` and `PodView`; managedFields, node images and the like are never materialized), and
//! the snapshot shares the stores' `Arc`s instead of copying them, so 10,000 namespaces and 2,000 nodes are held
//! once. The snapshot is rebuilt (debounced) after changes and `synced` only once every store has listed.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::borrow::Cow;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Container, Namespace, Node, Pod, PodSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::Api;
use kube::core::{DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{Lookup, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::owner_watch::{OwnerTables, discover_owner_kinds, owner_events};
use crate::owners::{OwnerIndex, OwnerRecord, REPLICA_SET, owner_kinds};
use crate::placement::PlacementLedger;
use crate::policy::TierPolicy;
use crate::reconcile::OwnedStores;
use crate::reconcile::kinds::{KueueKind, build_ownership_selector};
use crate::reconcile::live::{LiveObject, build_live_event};
use crate::view::{NamespaceView, NodeView, PodView, SharedSnapshot, Snapshot};

/// Pod label naming the placement rule a pod was given (written by the webhook's placement).
pub const PLACEMENT_RULE_LABEL: &str = "tiergate.io/placement-rule";
/// Pod label naming a job type (seed 000), used for co-location scoring.
pub const JOB_TYPE_LABEL: &str = "app.kubernetes.io/job-type";
/// List page sizes for the kinds whose raw objects are large (a node with its image list is ~30 kB of structs
/// before trimming): smaller pages keep the memory of the initial list low.
const NODE_PAGE_SIZE: u32 = 50;
const POD_PAGE_SIZE: u32 = 100;
/// Annotation kubectl copies whole objects into; never kept in caches.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the caches watch and how often the snapshot may be rebuilt.
#[derive(Clone, Debug)]
pub struct CacheSettings {
    /// The TierPolicy the snapshot carries (`--policy-name`).
    pub policy_name: String,
    /// The daemon's own namespace (`--namespace`).
    pub own_namespace: String,
    /// Quiet time after a change before the snapshot is rebuilt (bursts coalesce).
    pub debounce: Duration,
    /// The webhook's placement ledger, shown every new snapshot so deleted pods free their slots.
    pub ledger: Option<Arc<PlacementLedger>>,
}

/// The running caches: the shared snapshot, the live Kueue stores the reconciler compares against, and a
/// version counter bumped whenever something the reconciler reads changed.
#[derive(Debug)]
pub struct Caches {
    /// The snapshot the webhook and the reconciler read.
    pub snapshot: SharedSnapshot,
    /// Live Kueue objects per kind.
    pub owned: OwnedStores,
    /// Bumped after each snapshot rebuild caused by policy, namespace, node or Kueue changes.
    pub changes: watch::Receiver<u64>,
}

/// Health of one watch: when it last delivered, and since when it has been failing.
#[derive(Debug)]
struct WatchHealth {
    label: &'static str,
    last_ok: Instant,
    failing: bool,
}

/// Signals shared by the watch tasks and the snapshot loop.
#[derive(Debug)]
struct Signals {
    changed: Notify,
    reconcile_dirty: AtomicBool,
    health: Mutex<Vec<WatchHealth>>,
}

impl Signals {
    fn register(&self, label: &'static str) -> usize {
        let Ok(mut health) = self.health.lock() else { return usize::MAX };
        health.push(WatchHealth { label, last_ok: Instant::now(), failing: false });
        health.len() - 1
    }

    fn record(&self, index: usize, ok: bool) {
        if let Ok(mut health) = self.health.lock()
            && let Some(entry) = health.get_mut(index)
        {
            entry.failing = !ok;
            if ok {
                entry.last_ok = Instant::now();
            }
        }
    }

    /// Seconds since the worst failing watch last heard from the API server (0 while all are healthy).
    fn staleness(&self, now: Instant) -> f64 {
        let Ok(health) = self.health.lock() else { return 0.0 };
        health
            .iter()
            .filter(|entry| entry.failing)
            .map(|entry| now.saturating_duration_since(entry.last_ok).as_secs_f64())
            .fold(0.0, f64::max)
    }

    fn failing_watches(&self) -> Vec<&'static str> {
        let Ok(health) = self.health.lock() else { return vec![] };
        health.iter().filter(|entry| entry.failing).map(|entry| entry.label).collect()
    }
}

/// Readers of every store the snapshot is folded from.
#[derive(Clone, Debug)]
struct Readers {
    policies: Store<TierPolicy>,
    namespaces: Store<Cached<NamespaceView>>,
    nodes: Store<Cached<NodeView>>,
    local_queues: Store<LiveObject>,
    placed_pods: Store<Cached<PodView>>,
    typed_pods: Store<Cached<PodView>>,
    replica_sets: Store<PartialObjectMeta<ReplicaSet>>,
    /// The owner-kind tables, filled once discovery has said which kinds are served.
    owners: OwnerTables,
}

/// Starts every watch and the snapshot loop; they stop when `shutdown` is cancelled.
pub fn start_caches(
    client: &Client,
    settings: CacheSettings,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Caches {
    let signals =
        Arc::new(Signals { changed: Notify::new(), reconcile_dirty: AtomicBool::new(false), health: Mutex::default() });
    let spawner = Spawner { signals: signals.clone(), shutdown: shutdown.clone() };
    let config = || watcher::Config::default().any_semantic();

    let policies = spawner.watch(
        "TierPolicy",
        Trigger::Always,
        Writer::default(),
        watcher(Api::all(client.clone()), config()).modify(strip_metadata),
    );
    let namespaces = spawner.watch(
        "Namespace",
        Trigger::Always,
        Writer::default(),
        watcher(Api::<NamespaceLite>::all(client.clone()), config())
            .map_ok(|event| map_watch_event(event, |namespace| Cached::new_view(build_namespace_view(namespace)))),
    );
    let nodes = spawner.watch(
        "Node",
        Trigger::Always,
        Writer::default(),
        watcher(Api::<NodeLite>::all(client.clone()), config().page_size(NODE_PAGE_SIZE))
            .map_ok(|event| map_watch_event(event, |node| Cached::new_view(build_node_view(node)))),
    );
    let placed_pods = spawner.watch(
        "Pod(placement)",
        Trigger::Never,
        Writer::default(),
        watcher(Api::all(client.clone()), config().labels(PLACEMENT_RULE_LABEL).page_size(POD_PAGE_SIZE))
            .map_ok(|event| map_watch_event(event, |pod| Cached::new_view(build_pod_view(pod)))),
    );
    let typed_pods = spawner.watch(
        "Pod(job-type)",
        Trigger::Never,
        Writer::default(),
        watcher(Api::all(client.clone()), config().labels(JOB_TYPE_LABEL).page_size(POD_PAGE_SIZE))
            .map_ok(|event| map_watch_event(event, |pod| Cached::new_view(build_pod_view(pod)))),
    );
    let replica_sets = spawner.watch(
        "ReplicaSet",
        Trigger::Never,
        Writer::default(),
        watcher(Api::<PartialObjectMeta<ReplicaSet>>::all(client.clone()), config()).modify(
            |set: &mut PartialObjectMeta<ReplicaSet>| {
                let owners = set.metadata.owner_references.take();
                strip_to_labels(&mut set.metadata);
                set.metadata.labels = None;
                set.metadata.owner_references = owners;
            },
        ),
    );
    let mut owned = OwnedStores::new();
    for kind in KueueKind::ALL {
        let resource = kind.api_resource();
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let watch_config = if kind == KueueKind::LocalQueue {
            config()
        } else {
            config().labels(&build_ownership_selector(&settings.policy_name))
        };
        let trigger = if kind == KueueKind::LocalQueue {
            Trigger::When(Box::new(build_local_queue_trigger()))
        } else {
            Trigger::Always
        };
        let events = watcher(api, watch_config).map(move |event| event.map(|event| build_live_event(kind, event)));
        let store = spawner.watch(kind.name(), trigger, Writer::new(kind), events);
        owned.insert(kind, store);
    }
    let local_queues =
        owned.get(&KueueKind::LocalQueue).cloned().unwrap_or_else(|| Writer::new(KueueKind::LocalQueue).as_reader());
    let owners = start_owner_watches(client, &spawner, config);
    let readers = Readers { policies, namespaces, nodes, local_queues, placed_pods, typed_pods, replica_sets, owners };

    let snapshot: SharedSnapshot = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
    let (changes_tx, changes) = watch::channel(0_u64);
    let synced = Arc::new(AtomicBool::new(false));
    tokio::spawn(wait_for_sync(readers.clone(), owned.clone(), synced.clone(), signals.clone(), shutdown.clone()));
    tokio::spawn(run_snapshot_loop(SnapshotLoop {
        readers,
        settings,
        synced,
        signals,
        snapshot: snapshot.clone(),
        changes: changes_tx,
        metrics,
        shutdown,
    }));
    Caches { snapshot, owned, changes }
}

/// Discovers the served owner kinds, then starts one metadata-only watch per kind into the owner tables (in the
/// background: discovery waits on the API server).
fn start_owner_watches(
    client: &Client,
    spawner: &Spawner,
    config: impl Fn() -> watcher::Config + Send + 'static,
) -> OwnerTables {
    let tables = OwnerTables::default();
    let (client, spawner, started) = (client.clone(), spawner.clone(), tables.clone());
    tokio::spawn(async move {
        let served = discover_owner_kinds(&client, &owner_kinds(), &spawner.shutdown).await;
        started.expect(served.len());
        for (kind, resource) in served {
            let events = owner_events(client.clone(), kind, &resource, config());
            let mut sink = started.sink();
            spawner.watch_into(kind.kind, Trigger::Never, events, move |event| sink.apply(event));
        }
        spawner.signals.changed.notify_one();
    });
    tables
}

/// A stateful filter over one watch's events.
type EventFilter<K> = Box<dyn FnMut(&watcher::Event<K>) -> bool + Send>;

/// Which watch events re-run the reconcile (every event still rebuilds the snapshot).
enum Trigger<K> {
    /// None (pods, ReplicaSets: the webhook's inputs only).
    Never,
    /// Every change.
    Always,
    /// Events the filter accepts (it also sees the initial list, to remember state).
    When(EventFilter<K>),
}

/// Spawns reflector tasks that record health and signal changes.
#[derive(Clone)]
struct Spawner {
    signals: Arc<Signals>,
    shutdown: CancellationToken,
}

impl Spawner {
    fn watch<K, S>(&self, label: &'static str, trigger: Trigger<K>, mut writer: Writer<K>, stream: S) -> Store<K>
    where
        K: Lookup + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
        S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    {
        let reader = writer.as_reader();
        self.watch_into(label, trigger, stream, move |event| writer.apply_watcher_event(event));
        reader
    }

    /// Runs one watch, handing every event to `sink` (a reflector writer, or the owner table).
    fn watch_into<K, S>(
        &self,
        label: &'static str,
        mut trigger: Trigger<K>,
        stream: S,
        mut sink: impl FnMut(&watcher::Event<K>) + Send + 'static,
    ) where
        K: Send + 'static,
        S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    {
        let signals = self.signals.clone();
        let shutdown = self.shutdown.clone();
        let index = signals.register(label);
        tokio::spawn(async move {
            let events = stream.default_backoff().for_each(|event| {
                if let Ok(event) = &event {
                    sink(event);
                }
                signals.record(index, event.is_ok());
                match &event {
                    Ok(event) => {
                        let changed = matches!(
                            event,
                            watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
                        );
                        let relevant = match &mut trigger {
                            Trigger::Never => false,
                            Trigger::Always => changed,
                            Trigger::When(filter) => filter(event),
                        };
                        if relevant {
                            signals.reconcile_dirty.store(true, Ordering::Relaxed);
                        }
                        if changed {
                            signals.changed.notify_one();
                        }
                    }
                    Err(error) => tracing::warn!(watch = label, %error, "watch failed; retrying with backoff"),
                }
                futures::future::ready(())
            });
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = events => {}
            }
        });
    }
}

/// LocalQueue events that matter to the reconciler: label or spec changes, deletes, and workload counts of
/// stopped (retiring) queues. Workload-count updates of active queues, the busiest stream, are ignored.
fn build_local_queue_trigger() -> impl FnMut(&watcher::Event<LiveObject>) -> bool + Send {
    let mut seen: std::collections::HashMap<(Option<String>, String), u64> = std::collections::HashMap::new();
    move |event| match event {
        watcher::Event::Apply(queue) => {
            let fingerprint = build_local_queue_fingerprint(queue);
            seen.insert((queue.namespace.clone(), queue.name.clone()), fingerprint) != Some(fingerprint)
        }
        watcher::Event::Delete(queue) => {
            seen.remove(&(queue.namespace.clone(), queue.name.clone()));
            true
        }
        watcher::Event::Init => {
            seen.clear();
            false
        }
        watcher::Event::InitApply(queue) => {
            seen.insert((queue.namespace.clone(), queue.name.clone()), build_local_queue_fingerprint(queue));
            false
        }
        watcher::Event::InitDone => true,
    }
}

/// A hash of what the reconciler reads from a LocalQueue (labels, owners, body, deletion, and the workload
/// counts only once the queue is stopped).
pub fn build_local_queue_fingerprint(queue: &LiveObject) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = fnv::FnvHasher::default();
    let stopped = queue.stop_policy().is_some_and(|policy| policy != "None");
    (queue.metadata_text(), &queue.annotations, &queue.body, queue.deleting).hash(&mut hasher);
    stopped.then_some(queue.workloads).hash(&mut hasher);
    hasher.finish()
}

async fn wait_for_sync(
    readers: Readers,
    owned: OwnedStores,
    synced: Arc<AtomicBool>,
    signals: Arc<Signals>,
    shutdown: CancellationToken,
) {
    let Readers { policies, namespaces, nodes, local_queues, placed_pods, typed_pods, replica_sets, owners } = readers;
    let mut waits = vec![
        Box::pin(async move { policies.wait_until_ready().await.is_ok() })
            as std::pin::Pin<Box<dyn Future<Output = bool> + Send>>,
        Box::pin(async move { namespaces.wait_until_ready().await.is_ok() }),
        Box::pin(async move { nodes.wait_until_ready().await.is_ok() }),
        Box::pin(async move { local_queues.wait_until_ready().await.is_ok() }),
        Box::pin(async move { placed_pods.wait_until_ready().await.is_ok() }),
        Box::pin(async move { typed_pods.wait_until_ready().await.is_ok() }),
        Box::pin(async move { replica_sets.wait_until_ready().await.is_ok() }),
        Box::pin(async move { owners.wait_until_ready().await }),
    ];
    for store in owned.into_values() {
        waits.push(Box::pin(async move { store.wait_until_ready().await.is_ok() }));
    }
    tokio::select! {
        () = shutdown.cancelled() => {}
        results = futures::future::join_all(waits) => {
            if results.into_iter().all(|ready| ready) {
                tracing::info!("every cache has synced");
                synced.store(true, Ordering::Relaxed);
                signals.reconcile_dirty.store(true, Ordering::Relaxed);
                signals.changed.notify_one();
            }
        }
    }
}

struct SnapshotLoop {
    readers: Readers,
    settings: CacheSettings,
    synced: Arc<AtomicBool>,
    signals: Arc<Signals>,
    snapshot: SharedSnapshot,
    changes: watch::Sender<u64>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
}

/// Rebuilds the snapshot after changes (debounced), bumps `changes` when the reconciler's inputs changed, and
/// keeps `cache_staleness_seconds` current.
async fn run_snapshot_loop(state: SnapshotLoop) {
    let mut staleness_tick = tokio::time::interval(Duration::from_secs(1));
    let mut version = 0_u64;
    loop {
        tokio::select! {
            () = state.shutdown.cancelled() => return,
            _ = staleness_tick.tick() => {
                let staleness = state.signals.staleness(Instant::now());
                state.metrics.cache_staleness_seconds.set(staleness);
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
        let inputs = SnapshotInputs {
            policy_name: &state.settings.policy_name,
            own_namespace: &state.settings.own_namespace,
            policies: state.readers.policies.state(),
            namespaces: unwrap_cached(state.readers.namespaces.state()),
            nodes: unwrap_cached(state.readers.nodes.state()),
            local_queues: state.readers.local_queues.state(),
            pods: unwrap_cached(state.readers.placed_pods.state())
                .into_iter()
                .chain(unwrap_cached(state.readers.typed_pods.state()))
                .collect(),
            replica_sets: state.readers.replica_sets.state(),
            owners: state.readers.owners.records(),
            synced: state.synced.load(Ordering::Relaxed),
        };
        let snapshot = Arc::new(build_snapshot(&inputs));
        if let Some(ledger) = &state.settings.ledger {
            ledger.observe(&snapshot);
        }
        state.snapshot.store(snapshot);
        if state.signals.reconcile_dirty.swap(false, Ordering::Relaxed) {
            version += 1;
            state.changes.send_replace(version);
            state.metrics.queue_depth.inc();
        }
    }
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
    /// Records of the owner kinds (Jobs, JobSets, Deployments, ...).
    pub owners: Vec<Arc<OwnerRecord>>,
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
    Snapshot {
        owners: Some(Arc::new(build_owner_index(inputs))),
        policy: inputs.policies.iter().find(|policy| policy.name_any() == inputs.policy_name).cloned(),
        namespaces,
        nodes,
        local_queues,
        pods,
        replica_set_owners,
        own_namespace: Some(inputs.own_namespace.to_owned()),
        synced: inputs.synced,
    }
}

/// The owner index: the owner-kind records plus every ReplicaSet (with its controlling Deployment's uid).
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
    OwnerIndex::build(inputs.owners.iter().cloned().chain(replica_sets))
}

/// A watch event with its object converted (kube-runtime's `Event` has no map of its own).
pub fn map_watch_event<A, B>(event: watcher::Event<A>, convert: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(convert(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(convert(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(convert(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A decoded namespace as the core sees it (nothing is copied: the decoded fields move).
pub fn build_namespace_view(namespace: NamespaceLite) -> NamespaceView {
    let ObjectMeta { name, labels, deletion_timestamp, .. } = namespace.metadata;
    NamespaceView {
        name: name.unwrap_or_default(),
        labels: labels.unwrap_or_default(),
        terminating: deletion_timestamp.is_some(),
    }
}

/// A decoded node as the core sees it; allocatable keeps the integer quantities (GPUs and other devices).
pub fn build_node_view(node: NodeLite) -> NodeView {
    let allocatable = node
        .status
        .allocatable
        .into_iter()
        .filter_map(|(name, quantity)| Some((name, quantity.0.parse::<i64>().ok()?)))
        .collect();
    NodeView {
        name: node.metadata.name.unwrap_or_default(),
        labels: node.metadata.labels.unwrap_or_default(),
        taints: node.spec.taints,
        allocatable,
    }
}

/// A pod as the webhook's ledgers and co-location scoring see it; the rest of the pod is dropped on arrival.
fn build_pod_view(pod: Pod) -> PodView {
    let ObjectMeta { name, namespace, uid, labels, annotations, owner_references, .. } = pod.metadata;
    let mut annotations = annotations.unwrap_or_default();
    annotations.remove(LAST_APPLIED_ANNOTATION);
    PodView {
        namespace: namespace.unwrap_or_default(),
        name: name.unwrap_or_default(),
        uid: uid.unwrap_or_default(),
        owner_uid: owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|owner| owner.controller == Some(true))
            .map(|owner| owner.uid),
        requests: pod.spec.as_ref().map(build_extended_requests).unwrap_or_default(),
        node_name: pod.spec.and_then(|spec| spec.node_name),
        labels: labels.unwrap_or_default(),
        annotations,
    }
}

/// Whole-unit extended resources (names with a `/`) a pod spec requests, the way the scheduler counts them: the
/// larger of the containers' sum and any single init container; a container's limit, else its request.
fn build_extended_requests(spec: &PodSpec) -> BTreeMap<String, i64> {
    fn container_requests(container: &Container) -> impl Iterator<Item = (&String, i64)> {
        let resources = container.resources.as_ref();
        let limits = resources.and_then(|resources| resources.limits.as_ref());
        let requests = resources.and_then(|resources| resources.requests.as_ref());
        limits
            .into_iter()
            .flatten()
            .chain(
                requests.into_iter().flatten().filter(move |(name, _)| limits.is_none_or(|l| !l.contains_key(*name))),
            )
            .filter(|(name, _)| name.contains('/'))
            .filter_map(|(name, quantity)| Some((name, quantity.0.parse::<i64>().ok()?)))
    }
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for (name, count) in spec.containers.iter().flat_map(container_requests) {
        *total.entry(name.clone()).or_default() += count;
    }
    for (name, count) in spec.init_containers.iter().flatten().flat_map(container_requests) {
        let entry = total.entry(name.clone()).or_default();
        *entry = (*entry).max(count);
    }
    total
}

/// A core view held in a reflector store. The views are `tiergate_core` types, so the store's `Lookup` is
/// implemented on this wrapper; the inner `Arc` is the one snapshots share.
#[derive(Clone, Debug)]
pub struct Cached<T>(pub Arc<T>);

impl<T> Cached<T> {
    /// A freshly decoded view, ready for a store.
    pub fn new_view(view: T) -> Self {
        Self(Arc::new(view))
    }
}

impl<T> std::ops::Deref for Cached<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The views inside store entries, for a snapshot.
pub fn unwrap_cached<T>(entries: Vec<Arc<Cached<T>>>) -> Vec<Arc<T>> {
    entries.iter().map(|entry| entry.0.clone()).collect()
}

/// Store keys for views: kind and name from the Kubernetes type they were decoded from; no resourceVersion or
/// UID is copied into the key (the store never reads them).
macro_rules! impl_view_lookup {
    ($view:ty, $kube:ty, |$object:ident| $namespace:expr) => {
        impl Lookup for Cached<$view> {
            type DynamicType = ();

            fn kind(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::kind(dyntype)
            }
            fn group(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::group(dyntype)
            }
            fn version(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::version(dyntype)
            }
            fn plural(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::plural(dyntype)
            }
            fn name(&self) -> Option<Cow<'_, str>> {
                Some(Cow::Borrowed(self.0.name.as_str()))
            }
            fn namespace(&self) -> Option<Cow<'_, str>> {
                let $object = &self.0;
                $namespace
            }
            fn resource_version(&self) -> Option<Cow<'_, str>> {
                None
            }
            fn uid(&self) -> Option<Cow<'_, str>> {
                None
            }
        }
    };
}

impl_view_lookup!(NamespaceView, Namespace, |_view| None);
impl_view_lookup!(NodeView, Node, |_view| None);
impl_view_lookup!(PodView, Pod, |pod| Some(Cow::Borrowed(pod.namespace.as_str())));

/// Drops managedFields and kubectl's last-applied copy from any object's metadata.
fn strip_metadata<K: kube::Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// Keeps only identity and labels.
fn strip_to_labels(meta: &mut ObjectMeta) {
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        uid: meta.uid.take(),
        resource_version: meta.resource_version.take(),
        labels: meta.labels.take(),
        ..ObjectMeta::default()
    };
}

/// Object metadata as the caches decode it: name, namespace, labels, deletion time and resourceVersion only, so
/// managedFields, annotations (kubectl's last-applied copy) and the rest are never materialized. The watcher needs
/// the resourceVersion of every event to resume from it: without it each change would fail the watch and re-list.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    resource_version: Option<String>,
}

fn deserialize_lean_meta<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let lean = <LeanMeta as serde::Deserialize>::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: lean.name,
        namespace: lean.namespace,
        labels: lean.labels,
        deletion_timestamp: lean.deletion_timestamp,
        resource_version: lean.resource_version,
        ..ObjectMeta::default()
    })
}

/// A namespace as tiergate reads it (metadata-only watch): name, labels, deletion time, resourceVersion.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct NamespaceLite {
    /// Name, labels, deletion time and resourceVersion only.
    #[serde(default, deserialize_with = "deserialize_lean_meta")]
    pub metadata: ObjectMeta,
}

impl kube::Resource for NamespaceLite {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::plural(dt)
    }
    fn metadata_api() -> bool {
        true
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A node as tiergate reads it: deserialized from the Node API with only labels, taints and allocatable, so a
/// node's images, conditions, annotations and managedFields are never materialized (they dominate its size).
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct NodeLite {
    /// Name and labels only.
    #[serde(default, deserialize_with = "deserialize_lean_meta")]
    pub metadata: ObjectMeta,
    /// `spec.taints` only.
    #[serde(default)]
    pub spec: NodeLiteSpec,
    /// `status.allocatable` only.
    #[serde(default)]
    pub status: NodeLiteStatus,
}

/// The part of `NodeSpec` tiergate reads.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct NodeLiteSpec {
    /// Node taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// The part of `NodeStatus` tiergate reads.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct NodeLiteStatus {
    /// Allocatable resources.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
}

impl kube::Resource for NodeLite {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> NodeLite {
        serde_json::from_value(json!({
            "metadata": {"name": "gpu-1", "labels": {"gpu.nvidia.com/class": "h100"},
                         "annotations": {"big": "x"}, "managedFields": [{"manager": "kubelet"}]},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "memory": "1Ti", "cpu": "7800m"},
                       "images": [{"names": ["a"], "sizeBytes": 1}]},
        }))
        .unwrap()
    }

    #[test]
    fn decoded_node_keeps_only_labels_taints_and_integer_allocatable() {
        let node = node();
        assert!(node.metadata.managed_fields.is_none());
        assert!(node.metadata.annotations.is_none());
        let kept = serde_json::to_value(&node).unwrap();
        assert!(kept["status"].get("images").is_none(), "{kept}");
        assert!(kept["spec"].get("podCIDR").is_none(), "{kept}");
        let view = build_node_view(node);
        assert_eq!(view.labels.get("gpu.nvidia.com/class").map(String::as_str), Some("h100"));
        assert_eq!(view.taints.len(), 1);
        assert_eq!(view.allocatable, BTreeMap::from([("nvidia.com/gpu".to_owned(), 8)]));
    }

    /// Answers every list with `items_for(path)` and holds every watch open (a quiet cluster).
    fn quiet_cluster(items_for: fn(&str) -> Vec<serde_json::Value>) -> Client {
        cluster_with_events(items_for, |_| vec![])
    }

    /// Like [`quiet_cluster`], but the first watch of a path streams `events_for(path)` (then ends, and the
    /// watcher's next watch is held open).
    fn cluster_with_events(
        items_for: fn(&str) -> Vec<serde_json::Value>,
        events_for: fn(&str) -> Vec<serde_json::Value>,
    ) -> Client {
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        tokio::spawn(async move {
            let mut open_watches = Vec::new();
            let mut streamed = BTreeSet::new();
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path().to_owned();
                if request.uri().query().unwrap_or_default().contains("watch=true") {
                    let events = events_for(&path);
                    if events.is_empty() || !streamed.insert(path) {
                        open_watches.push(send);
                        continue;
                    }
                    let lines: Vec<String> = events.iter().map(|event| format!("{event}\n")).collect();
                    send.send_response(
                        http::Response::builder()
                            .status(200)
                            .body(kube::client::Body::from(lines.concat().into_bytes()))
                            .unwrap(),
                    );
                    continue;
                }
                if is_discovery(&path) || path == FORBIDDEN_LIST {
                    let (code, body) = discovery(&path);
                    send.send_response(
                        http::Response::builder()
                            .status(code)
                            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                            .unwrap(),
                    );
                    continue;
                }
                let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "10"},
                                  "items": items_for(request.uri().path())});
                let response = http::Response::builder()
                    .status(200)
                    .body(kube::client::Body::from(serde_json::to_vec(&list).unwrap()))
                    .unwrap();
                send.send_response(response);
            }
        });
        Client::new(service, "default")
    }

    /// `Some` for a discovery path (`/apis/GROUP/VERSION`): the mocked API server serves batch/v1 Jobs and the
    /// apps/v1 kinds, and no JobSet (its CRD is not installed).
    /// The mocked daemon may not list StatefulSets (as if the chart's RBAC lacked them).
    const FORBIDDEN_LIST: &str = "/apis/apps/v1/statefulsets";

    fn is_discovery(path: &str) -> bool {
        path.starts_with("/apis/") && path.split('/').count() == 4
    }

    fn discovery(path: &str) -> (u16, serde_json::Value) {
        let resource = |name: &str, kind: &str| {
            json!({"name": name, "singularName": "", "namespaced": true, "kind": kind,
                   "verbs": ["get", "list", "watch"]})
        };
        let resources = match path {
            "/apis/batch/v1" => vec![resource("jobs", "Job"), resource("cronjobs", "CronJob")],
            "/apis/apps/v1" => vec![
                resource("deployments", "Deployment"),
                resource("statefulsets", "StatefulSet"),
                resource("replicasets", "ReplicaSet"),
            ],
            FORBIDDEN_LIST => {
                return (
                    403,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden",
                           "code": 403, "message": "statefulsets.apps is forbidden"}),
                );
            }
            _ => {
                return (
                    404,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                    "reason": "NotFound", "code": 404, "message": "the server could not find the requested resource"}),
                );
            }
        };
        let group_version = path.trim_start_matches("/apis/");
        (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
        )
    }

    fn one_tiered_namespace(path: &str) -> Vec<serde_json::Value> {
        match path {
            "/api/v1/namespaces" => vec![json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": "team-a", "resourceVersion": "3", "labels": {"tenant.kubenexus.io/tier": "gold"},
                             "managedFields": [{"manager": "kubectl"}]}})],
            _ => vec![],
        }
    }

    /// The caches over `client` with a short debounce, for the `default` policy.
    fn start_test_caches(client: &Client, shutdown: &CancellationToken) -> Caches {
        let settings = CacheSettings {
            policy_name: "default".to_owned(),
            own_namespace: "tiergate-system".to_owned(),
            debounce: Duration::from_millis(10),
            ledger: None,
        };
        start_caches(client, settings, Arc::new(Metrics::new()), shutdown.clone())
    }

    /// The metadata-only watch event the API server sends when team-a is relabeled to silver.
    fn team_a_relabeled(path: &str) -> Vec<serde_json::Value> {
        match path {
            "/api/v1/namespaces" => vec![json!({"type": "MODIFIED", "object": {
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": "team-a", "resourceVersion": "11", "labels": {"tenant.kubenexus.io/tier": "silver"},
                             "managedFields": [{"manager": "kubectl"}]}}})],
            _ => vec![],
        }
    }

    #[tokio::test]
    async fn a_namespace_watch_event_reaches_the_snapshot_without_a_re_list() {
        // Lists always say gold: only the watch event can make the snapshot say silver (a decode that lost the
        // event's resourceVersion failed the watch and re-listed instead).
        let client = cluster_with_events(one_tiered_namespace, team_a_relabeled);
        let shutdown = CancellationToken::new();
        let mut caches = start_test_caches(&client, &shutdown);
        let relabeled = async {
            loop {
                let tier = caches.snapshot.load().namespaces.get("team-a").map(|view| view.labels.clone());
                if tier.is_some_and(|labels| labels["tenant.kubenexus.io/tier"] == "silver") {
                    break;
                }
                caches.changes.changed().await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(60), relabeled).await.expect("the watch event never arrived");
        shutdown.cancel();
    }

    fn one_job_and_a_standalone_replica_set(path: &str) -> Vec<serde_json::Value> {
        let meta = |kind: &str, name: &str, uid: &str| {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": name, "namespace": "team-a", "uid": uid, "resourceVersion": "5",
                                "labels": {"big": "x".repeat(64)}, "annotations": {"kind": kind},
                                "managedFields": [{"manager": "kubectl"}]}})
        };
        match path {
            "/apis/batch/v1/jobs" => vec![meta("Job", "train", "job-uid")],
            "/apis/apps/v1/replicasets" => vec![meta("ReplicaSet", "rs", "rs-uid")],
            _ => one_tiered_namespace(path),
        }
    }

    #[tokio::test]
    async fn owner_index_holds_the_served_owner_kinds_and_skips_kinds_not_served_or_not_listable() {
        // The mocked server serves Jobs and the apps kinds but not JobSets (404 on discovery), and forbids listing
        // StatefulSets (403): the caches must still sync, with the Job and the ReplicaSet in the owner index.
        let client = quiet_cluster(one_job_and_a_standalone_replica_set);
        let shutdown = CancellationToken::new();
        let caches = start_test_caches(&client, &shutdown);
        let synced = async {
            while !caches.snapshot.load().synced
                || caches.snapshot.load().owners.as_ref().is_none_or(|index| index.len() < 2)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), synced).await.expect("the owner index never synced (hang guard)");
        let snapshot = caches.snapshot.load();
        let index = snapshot.owners.as_ref().unwrap();
        let job = index.get("job-uid").unwrap();
        assert_eq!((job.kind.kind, job.namespace.as_str(), job.name.as_str()), ("Job", "team-a", "train"));
        assert_eq!(index.get("rs-uid").unwrap().kind.kind, "ReplicaSet");
        assert_eq!(index.len(), 2, "nothing but the Job and the ReplicaSet");
        shutdown.cancel();
    }

    #[test]
    fn decoded_namespaces_and_nodes_keep_the_resource_version_the_watcher_resumes_from() {
        let namespace: NamespaceLite =
            serde_json::from_value(json!({"metadata": {"name": "a", "resourceVersion": "42"}})).unwrap();
        assert_eq!(namespace.metadata.resource_version.as_deref(), Some("42"));
        let node: NodeLite =
            serde_json::from_value(json!({"metadata": {"name": "n", "resourceVersion": "43"}})).unwrap();
        assert_eq!(node.metadata.resource_version.as_deref(), Some("43"));
    }

    #[tokio::test]
    async fn snapshot_is_synced_only_after_every_store_listed_and_then_signals_the_reconciler() {
        let client = quiet_cluster(one_tiered_namespace);
        let shutdown = CancellationToken::new();
        let mut caches = start_test_caches(&client, &shutdown);
        assert!(!caches.snapshot.load().synced, "nothing has listed yet");
        let synced = async {
            while !caches.snapshot.load().synced {
                caches.changes.changed().await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(60), synced).await.expect("the caches never synced (hang guard)");
        let snapshot = caches.snapshot.load();
        assert_eq!(snapshot.namespaces["team-a"].labels["tenant.kubenexus.io/tier"], "gold");
        assert_eq!(caches.owned.len(), KueueKind::ALL.len());
        assert!(*caches.changes.borrow() > 0);
        shutdown.cancel();
    }

    fn local_queue(stop_policy: &str, pending: i64, team: &str) -> LiveObject {
        let queue: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "a", "labels": {"team": team}},
            "spec": {"clusterQueue": "cq", "stopPolicy": stop_policy},
            "status": {"pendingWorkloads": pending},
        }))
        .unwrap();
        LiveObject::from_dynamic(KueueKind::LocalQueue, queue)
    }

    #[test]
    fn workload_counts_of_active_queues_do_not_retrigger_the_reconcile_but_those_of_stopped_ones_do() {
        let mut trigger = build_local_queue_trigger();
        assert!(!trigger(&watcher::Event::InitApply(local_queue("None", 0, "x"))));
        assert!(trigger(&watcher::Event::InitDone));
        assert!(!trigger(&watcher::Event::Apply(local_queue("None", 5, "x"))), "status-only update of an active queue");
        assert!(trigger(&watcher::Event::Apply(local_queue("None", 5, "y"))), "label change");
        assert!(trigger(&watcher::Event::Apply(local_queue("Hold", 5, "y"))), "stopped");
        assert!(trigger(&watcher::Event::Apply(local_queue("Hold", 4, "y"))), "a stopped queue drains");
        assert!(trigger(&watcher::Event::Delete(local_queue("Hold", 0, "y"))));
    }

    #[test]
    fn snapshot_folds_stores_and_finds_the_named_policy() {
        let policy = Arc::new(crate::inputs::load_policy(None).unwrap());
        let namespace: NamespaceLite = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "labels": {"tenant.kubenexus.io/tier": "gold"}},
        }))
        .unwrap();
        let terminating: NamespaceLite = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "leaving", "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"tenant.kubenexus.io/tier": "gold"}},
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "team-a", "uid": "u1", "labels": {"app.kubernetes.io/job-type": "train"}},
            "spec": {"containers": [], "nodeName": "gpu-1"},
        }))
        .unwrap();
        let pod = Arc::new(build_pod_view(pod));
        let inputs = SnapshotInputs {
            policy_name: "default",
            own_namespace: "tiergate-system",
            policies: vec![policy],
            namespaces: vec![Arc::new(build_namespace_view(namespace)), Arc::new(build_namespace_view(terminating))],
            nodes: vec![Arc::new(build_node_view(node()))],
            local_queues: vec![],
            pods: vec![pod.clone(), pod],
            replica_sets: vec![],
            owners: vec![],
            synced: true,
        };
        let snapshot = build_snapshot(&inputs);
        assert!(snapshot.policy.is_some());
        assert!(snapshot.synced);
        assert_eq!(snapshot.pods.len(), 1, "a pod matched by both watches appears once");
        assert_eq!(snapshot.pods[0].node_name.as_deref(), Some("gpu-1"));
        assert_eq!(snapshot.namespaces["team-a"].labels["tenant.kubenexus.io/tier"], "gold");
        assert!(!snapshot.namespaces.contains_key("leaving"), "a terminating namespace gets no queue");
        assert_eq!(snapshot.own_namespace.as_deref(), Some("tiergate-system"));
        assert!(
            Arc::ptr_eq(&snapshot.namespaces["team-a"], &inputs.namespaces[0]),
            "shared with the store, not copied"
        );
        assert!(Arc::ptr_eq(&snapshot.nodes["gpu-1"], &inputs.nodes[0]), "shared with the store, not copied");
    }

    #[test]
    fn store_keys_views_by_name_and_a_namespace_turning_terminating_replaces_its_live_view() {
        let namespace = |deleting: bool| {
            let mut metadata = json!({"name": "team-a", "uid": "u", "resourceVersion": "9",
                                      "labels": {"tenant.kubenexus.io/tier": "gold"}});
            if deleting {
                metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            Cached::new_view(build_namespace_view(serde_json::from_value(json!({"metadata": metadata})).unwrap()))
        };
        let mut writer = Writer::<Cached<NamespaceView>>::default();
        writer.apply_watcher_event(&watcher::Event::Apply(namespace(false)));
        writer.apply_watcher_event(&watcher::Event::Apply(namespace(true)));
        let state = writer.as_reader().state();
        assert_eq!(state.len(), 1, "one key per name");
        assert!(state[0].terminating);
        writer.apply_watcher_event(&watcher::Event::Delete(namespace(true)));
        assert!(writer.as_reader().state().is_empty());
    }

    #[test]
    fn extended_requests_count_limits_else_requests_and_the_largest_init_container() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}, "requests": {"nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1", "example.com/fpga": "1", "memory": "1Gi"}}},
                {"name": "c"},
            ],
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4", "example.com/nic": "0.5"}}}],
        }))
        .unwrap();
        assert_eq!(
            build_extended_requests(&spec),
            BTreeMap::from([("example.com/fpga".to_owned(), 1), ("nvidia.com/gpu".to_owned(), 4)]),
            "GPU: max(2 + 1, 4); cpu and memory are not extended; fractions are not whole units"
        );
    }

    #[test]
    fn pods_from_two_namespaces_with_one_name_are_two_store_entries_and_keep_only_what_the_webhook_reads() {
        let pod = |namespace: &str| {
            Cached::new_view(build_pod_view(
                serde_json::from_value(json!({
                    "metadata": {"name": "p", "namespace": namespace, "uid": format!("uid-{namespace}"),
                                 "annotations": {LAST_APPLIED_ANNOTATION: "{}", "kept": "yes"},
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": true}]},
                    "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "gpu-1"},
                }))
                .unwrap(),
            ))
        };
        let mut writer = Writer::<Cached<PodView>>::default();
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a")));
        writer.apply_watcher_event(&watcher::Event::Apply(pod("b")));
        let state = writer.as_reader().state();
        assert_eq!(state.len(), 2);
        let view = &state[0];
        assert_eq!(view.owner_uid.as_deref(), Some("rs-1"));
        assert_eq!(view.node_name.as_deref(), Some("gpu-1"));
        assert_eq!(view.annotations, BTreeMap::from([("kept".to_owned(), "yes".to_owned())]));
    }
}
