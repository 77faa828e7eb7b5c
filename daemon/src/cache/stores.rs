//! The readers of one cluster's reflector stores, shared by the snapshot loop, and the sync barrier that marks
//! the snapshot `synced` once every store has listed; does I/O (awaits the stores).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::decode::Cached;
use super::health::Signals;
use super::live::{LiveObject, OwnedStores};
use super::owners::OwnerTables;
use crate::policy::TierPolicy;
use crate::trust::BindingView;
use crate::view::{ClaimTemplateView, NamespaceView, NodeView, PodView};

/// Readers of every store the snapshot is folded from.
#[derive(Clone, Debug)]
pub(crate) struct Readers {
    pub(crate) namespaces: Store<Cached<NamespaceView>>,
    pub(crate) nodes: Store<Cached<NodeView>>,
    pub(crate) local_queues: Store<LiveObject>,
    /// The stores only a management cluster's caches have (`None` in worker scope).
    pub(crate) management: Option<ManagementReaders>,
}

/// Readers of the stores behind the webhook's inputs and the policy, watched in management scope only.
#[derive(Clone, Debug)]
pub(crate) struct ManagementReaders {
    pub(crate) policies: Store<TierPolicy>,
    pub(crate) placed_pods: Store<Cached<PodView>>,
    pub(crate) typed_pods: Store<Cached<PodView>>,
    pub(crate) replica_sets: Store<PartialObjectMeta<ReplicaSet>>,
    /// ResourceClaimTemplates (empty where the API server serves no `resource.k8s.io/v1`).
    pub(crate) claim_templates: Store<Cached<ClaimTemplateView>>,
    /// ClusterRoleBindings that bind service accounts: which operators the platform installed (`trust`).
    pub(crate) bindings: Store<Cached<BindingView>>,
    /// The owner-kind tables, filled once discovery has said which kinds are served.
    pub(crate) owners: OwnerTables,
}

/// Marks the snapshot `synced` (and the reconcile dirty) once every store has listed; never, if `shutdown` comes
/// first.
pub(crate) async fn wait_for_sync(
    readers: Readers,
    owned: OwnedStores,
    synced: Arc<AtomicBool>,
    signals: Arc<Signals>,
    shutdown: CancellationToken,
) {
    let Readers { namespaces, nodes, local_queues, management } = readers;
    let mut waits = vec![
        Box::pin(async move { namespaces.wait_until_ready().await.is_ok() })
            as std::pin::Pin<Box<dyn Future<Output = bool> + Send>>,
        Box::pin(async move { nodes.wait_until_ready().await.is_ok() }),
        Box::pin(async move { local_queues.wait_until_ready().await.is_ok() }),
    ];
    if let Some(management) = management {
        let ManagementReaders { policies, placed_pods, typed_pods, replica_sets, claim_templates, bindings, owners } =
            management;
        waits.push(Box::pin(async move { claim_templates.wait_until_ready().await.is_ok() }));
        waits.push(Box::pin(async move { bindings.wait_until_ready().await.is_ok() }));
        waits.push(Box::pin(async move { policies.wait_until_ready().await.is_ok() }));
        waits.push(Box::pin(async move { placed_pods.wait_until_ready().await.is_ok() }));
        waits.push(Box::pin(async move { typed_pods.wait_until_ready().await.is_ok() }));
        waits.push(Box::pin(async move { replica_sets.wait_until_ready().await.is_ok() }));
        waits.push(Box::pin(async move { owners.wait_until_ready().await }));
    }
    for store in owned.into_values() {
        waits.push(Box::pin(async move { store.wait_until_ready().await.is_ok() }));
    }
    tokio::select! {
        () = shutdown.cancelled() => {}
        results = futures::future::join_all(waits) => {
            if results.into_iter().all(|ready| ready) {
                tracing::info!("every cache has synced");
                synced.store(true, Ordering::Release);
                signals.reconcile_dirty.store(true, Ordering::Relaxed);
                signals.changed.notify_one();
            }
        }
    }
}
