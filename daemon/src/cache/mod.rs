//! One cluster's caches, one [`ClusterCache`] per API server: reflector stores of namespaces, nodes and the
//! tiergate-owned Kueue objects (plus, in management scope, TierPolicies, pods, ReplicaSets and the owner index),
//! folded into the shared `Snapshot`; does I/O.
//!
//! Every watch is decoded into the pure core's views before it reaches a store (namespaces, nodes and pods become
//! `NamespaceView`, `NodeView` and `PodView`; managedFields, node images and the like are never materialized), and
//! the snapshot shares the stores' `Arc`s instead of copying them, so 10,000 namespaces and 2,000 nodes are held
//! once. The snapshot is rebuilt (debounced) after changes and `synced` only once every store has listed.
//! `reconcile/` reads these caches; nothing here imports `reconcile/`.

pub mod decode;
pub mod fingerprint;
pub mod health;
pub mod kinds;
pub mod live;
pub mod owners;
pub mod snapshot;
mod stores;
mod wiring;
pub mod workloads;

pub use self::decode::map_watch_event;
pub use self::decode::{
    Cached, NamespaceLite, NodeLite, NodeLiteSpec, NodeLiteStatus, build_namespace_view, build_node_view, unwrap_cached,
};
pub use self::fingerprint::build_local_queue_fingerprint;
pub use self::health::{CacheHealth, WatchFailure, is_not_served};
pub use self::live::{LiveObject, OwnedStores, WorkloadCounts, build_live_event};
pub use self::snapshot::{SnapshotInputs, build_snapshot};

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Client;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::decode::build_pod_view;
use self::fingerprint::build_local_queue_trigger;
use self::health::Signals;
use self::kinds::{KueueKind, build_ownership_selector, claim_template_resource};
use self::owners::start_owner_watches;
use self::snapshot::{SnapshotLoop, run_snapshot_loop};
use self::stores::{ManagementReaders, Readers, wait_for_sync};
use self::wiring::{Spawner, Trigger, strip_metadata, strip_to_labels};
use crate::inputs::binding_view;
use crate::metrics::Metrics;
use crate::placement::PlacementLedger;
use crate::policy::TierPolicy;
use crate::view::{SharedSnapshot, Snapshot};

/// Pod label naming the placement rule a pod was given (written by the webhook's placement).
pub use crate::placement::RULE_LABEL as PLACEMENT_RULE_LABEL;
/// Pod label naming a job type (seed 000), used for co-location scoring.
pub use crate::scoring::features::JOB_TYPE_LABEL;
/// List page sizes for the kinds whose raw objects are large (a node with its image list is ~30 kB of structs
/// before trimming): smaller pages keep the memory of the initial list low.
const NODE_PAGE_SIZE: u32 = 50;
const POD_PAGE_SIZE: u32 = 100;

/// Which stores a cluster's caches hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheScope {
    /// The cluster tiergate runs in: TierPolicies, namespaces, nodes, pods, ReplicaSets, the owner index and the
    /// Kueue objects (everything the webhook and the reconciler read).
    #[default]
    Management,
    /// A worker cluster of a fleet: namespaces, nodes and the Kueue objects (tiergate-owned ones, plus every
    /// LocalQueue) only; its snapshot has no policy, no pods and no owner index.
    Worker,
}

/// What the caches watch and how often the snapshot may be rebuilt.
#[derive(Clone, Debug)]
pub struct CacheSettings {
    /// The TierPolicy the snapshot carries (`--policy-name`); also selects the owned Kueue objects watched.
    pub policy_name: String,
    /// The daemon's own namespace (`--namespace`).
    pub own_namespace: String,
    /// Quiet time after a change before the snapshot is rebuilt (bursts coalesce).
    pub debounce: Duration,
    /// The webhook's placement ledger, shown every new snapshot so deleted pods free their slots.
    pub ledger: Option<Arc<PlacementLedger>>,
    /// Which stores to hold.
    pub scope: CacheScope,
}

/// The running caches of one API server: the shared snapshot, the live Kueue stores the reconciler compares
/// against, and a version counter bumped whenever something the reconciler reads changed. Several can run in one
/// process (one per cluster of a fleet); each stops with its own [`ClusterCache::shutdown`] or its parent token.
#[derive(Debug)]
pub struct ClusterCache {
    /// The snapshot the webhook and the reconciler read.
    pub snapshot: SharedSnapshot,
    /// Live Kueue objects per kind.
    pub owned: OwnedStores,
    /// Bumped after each snapshot rebuild caused by policy, namespace, node or Kueue changes.
    pub changes: watch::Receiver<u64>,
    /// Management scope: the admission intervals of every Kueue Workload, for GPU-hour accounting (`usage/`).
    pub usage_ledger: Option<workloads::SharedLedger>,
    scope: CacheScope,
    signals: Arc<Signals>,
    policies: Option<Store<TierPolicy>>,
    shutdown: CancellationToken,
}

impl ClusterCache {
    /// Starts every watch of `settings.scope` over `client`, and the snapshot loop; they stop when this cache is
    /// shut down or `parent` is cancelled.
    pub fn start(client: &Client, settings: CacheSettings, metrics: Arc<Metrics>, parent: &CancellationToken) -> Self {
        let shutdown = parent.child_token();
        let signals = Arc::new(Signals::new());
        let spawner = Spawner { signals: signals.clone(), shutdown: shutdown.clone() };
        let scope = settings.scope;
        let owned = start_kueue_watches(client, &spawner, &settings.policy_name);
        let local_queues = owned
            .get(&KueueKind::LocalQueue)
            .cloned()
            .unwrap_or_else(|| Writer::new(KueueKind::LocalQueue).as_reader());
        let readers = Readers {
            namespaces: spawner.watch(
                "Namespace",
                Trigger::Always,
                Writer::default(),
                watcher(Api::<NamespaceLite>::all(client.clone()), watch_config()).map_ok(|event| {
                    map_watch_event(event, |namespace| Cached::new_view(build_namespace_view(namespace)))
                }),
            ),
            nodes: spawner.watch(
                "Node",
                Trigger::Always,
                Writer::default(),
                watcher(Api::<NodeLite>::all(client.clone()), watch_config().page_size(NODE_PAGE_SIZE))
                    .map_ok(|event| map_watch_event(event, |node| Cached::new_view(build_node_view(node)))),
            ),
            local_queues,
            management: (scope == CacheScope::Management).then(|| start_management_watches(client, &spawner)),
        };
        let usage_ledger = (scope == CacheScope::Management).then(|| {
            let ledger = workloads::SharedLedger::default();
            workloads::start_workload_watch(client, &spawner, ledger.clone());
            ledger
        });

        let policies = readers.management.as_ref().map(|management| management.policies.clone());
        let snapshot: SharedSnapshot = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
        let (changes_tx, changes) = watch::channel(0_u64);
        let synced = Arc::new(AtomicBool::new(false));
        tokio::spawn(wait_for_sync(readers.clone(), owned.clone(), synced.clone(), signals.clone(), shutdown.clone()));
        tokio::spawn(run_snapshot_loop(SnapshotLoop {
            readers,
            settings,
            synced,
            signals: signals.clone(),
            snapshot: snapshot.clone(),
            changes: changes_tx,
            metrics,
            shutdown: shutdown.clone(),
        }));
        Self { snapshot, owned, changes, usage_ledger, scope, signals, policies, shutdown }
    }

    /// Which stores this cache holds.
    pub fn scope(&self) -> CacheScope {
        self.scope
    }

    /// Whether every store has listed once (the snapshot the reconciler and the webhook may decide from).
    pub fn is_synced(&self) -> bool {
        self.snapshot.load().synced
    }

    /// Waits until [`Self::is_synced`]; false if the cache stopped first.
    pub async fn wait_until_synced(&self) -> bool {
        let mut changes = self.changes.clone();
        while !self.is_synced() {
            if changes.changed().await.is_err() {
                return false;
            }
        }
        true
    }

    /// Whether the sync, and which watches are failing now and for how long.
    pub fn health(&self) -> CacheHealth {
        CacheHealth {
            synced: self.is_synced(),
            failing_watches: self.signals.failing_watches(),
            staleness_seconds: self.signals.staleness(Instant::now()),
        }
    }

    /// The failing watches now, with why each fails (403, 404 or anything else).
    pub fn watch_failures(&self) -> Vec<(&'static str, WatchFailure)> {
        self.signals.watch_failures()
    }

    /// The names of every TierPolicy in the cache, sorted (empty in worker scope).
    pub fn policy_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .policies
            .as_ref()
            .map(|store| store.state().iter().map(|policy| kube::ResourceExt::name_any(policy.as_ref())).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Stops this cache's watches and snapshot loop (other caches keep running).
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Whether [`Self::shutdown`] (or the parent token) has stopped this cache.
    pub fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}

/// Every watch lists in pages (`limit`, the watcher's 500 unless a watch sets its own), with the default
/// most-recent semantics. Not `resourceVersion=0`: the API server serves those lists from its cache whole,
/// ignoring `limit`, and one 30 MB body of 2,000 nodes or 50,000 Jobs was decoded at once; the allocator kept the
/// pages it touched resident long after (issue 31, docs/performance.md).
fn watch_config() -> watcher::Config {
    watcher::Config::default()
}

/// One watch per Kueue kind: the objects `policy_name` owns, and every LocalQueue (a tenant's own queue must be
/// seen before tiergate's is applied next to it).
fn start_kueue_watches(client: &Client, spawner: &Spawner, policy_name: &str) -> OwnedStores {
    let mut owned = OwnedStores::new();
    for kind in KueueKind::ALL {
        let resource = kind.api_resource();
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let (config, trigger) = if kind == KueueKind::LocalQueue {
            (watch_config(), Trigger::When(Box::new(build_local_queue_trigger())))
        } else {
            (watch_config().labels(&build_ownership_selector(policy_name)), Trigger::Always)
        };
        let events = if kind.is_optional() {
            watch_if_served(client.clone(), resource, watcher(api, config)).left_stream()
        } else {
            watcher(api, config).right_stream()
        };
        let events = events.map(move |event| event.map(|event| build_live_event(kind, event)));
        owned.insert(kind, spawner.watch(kind.name(), trigger, Writer::new(kind), events));
    }
    owned
}

/// `events` when discovery lists `resource`; otherwise one empty list (the store is synced and stays empty:
/// nothing of the kind exists to own, prune or judge by). A group the API server does not serve at all (404) is not
/// served; any other discovery error counts as served, so the watch itself then reports what is wrong.
fn watch_if_served<S>(client: Client, resource: ApiResource, events: S) -> impl Stream<Item = S::Item> + Send
where
    S: Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send,
{
    let chosen = async move {
        let served = match lists_resource(&client, &resource.api_version, &resource.plural).await {
            Ok(served) => served,
            Err(error) => {
                tracing::warn!(kind = resource.kind, %error, "discovery failed; watching the kind as if served");
                true
            }
        };
        if served {
            events.left_stream()
        } else {
            tracing::info!(kind = resource.kind, "the API server does not serve this kind; tiergate goes without it");
            let empty = [Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)];
            futures::stream::iter(empty).chain(futures::stream::pending()).right_stream()
        }
    };
    futures::stream::once(chosen).flatten()
}

/// Whether discovery of `group_version` lists `plural`: `Ok(false)` also when the API server does not serve the group
/// version at all ([`is_not_served`]); any other failure is the error, for the caller to decide on and log.
pub async fn lists_resource(client: &Client, group_version: &str, plural: &str) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|listed| listed.name == plural)),
        Err(kube::Error::Api(status)) if is_not_served(&status) => Ok(false),
        Err(error) => Err(error),
    }
}

/// The management cluster's extra watches: TierPolicies, labelled pods, ReplicaSets, ClusterRoleBindings and the
/// owner kinds.
fn start_management_watches(client: &Client, spawner: &Spawner) -> ManagementReaders {
    let policies = spawner.watch(
        "TierPolicy",
        Trigger::Always,
        Writer::default(),
        watcher(Api::all(client.clone()), watch_config()).modify(strip_metadata),
    );
    let placed_pods = spawner.watch(
        "Pod(placement)",
        Trigger::Never,
        Writer::default(),
        watcher(Api::all(client.clone()), watch_config().labels(PLACEMENT_RULE_LABEL).page_size(POD_PAGE_SIZE))
            .map_ok(|event| map_watch_event(event, |pod| Cached::new_view(build_pod_view(pod)))),
    );
    let typed_pods = spawner.watch(
        "Pod(job-type)",
        Trigger::Never,
        Writer::default(),
        watcher(Api::all(client.clone()), watch_config().labels(JOB_TYPE_LABEL).page_size(POD_PAGE_SIZE))
            .map_ok(|event| map_watch_event(event, |pod| Cached::new_view(build_pod_view(pod)))),
    );
    let replica_sets = spawner.watch(
        "ReplicaSet",
        Trigger::Never,
        Writer::default(),
        watcher(Api::<PartialObjectMeta<ReplicaSet>>::all(client.clone()), watch_config()).modify(
            |set: &mut PartialObjectMeta<ReplicaSet>| {
                let owners = set.metadata.owner_references.take();
                strip_to_labels(&mut set.metadata);
                set.metadata.labels = None;
                set.metadata.owner_references = owners;
            },
        ),
    );
    let claim_templates = spawner.watch(
        "ResourceClaimTemplate",
        Trigger::Never,
        Writer::default(),
        watch_if_served(
            client.clone(),
            claim_template_resource(),
            watcher(Api::<DynamicObject>::all_with(client.clone(), &claim_template_resource()), watch_config()),
        )
        .map_ok(|event| {
            map_watch_event(event, |template| {
                let value = serde_json::to_value(&template).unwrap_or_default();
                Cached::new_view(tiergate_core::admission::claims::claim_template_view(&value))
            })
        }),
    );
    // Every ClusterRoleBinding change may trust or distrust an operator: the gate's parameters follow.
    let bindings = spawner.watch(
        "ClusterRoleBinding",
        Trigger::Always,
        Writer::default(),
        watcher(Api::<ClusterRoleBinding>::all(client.clone()), watch_config())
            .map_ok(|event| map_watch_event(event, |binding| Cached::new_view(binding_view(&binding)))),
    );
    let owners = start_owner_watches(client, spawner, watch_config);
    ManagementReaders { policies, placed_pods, typed_pods, replica_sets, claim_templates, bindings, owners }
}

#[cfg(test)]
mod tests;
