//! Readiness and health of one cluster's caches: per-watch health (last delivery, failing or not), the sync
//! barrier that marks the snapshot `synced` once every store has listed, and the [`CacheHealth`] summary; does I/O
//! (awaits the stores).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::live::OwnedStores;
use super::snapshot::Readers;

/// A point-in-time summary of one cluster's caches, for readiness probes and per-cluster status.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheHealth {
    /// Every store has listed once (the snapshot is `synced`).
    pub synced: bool,
    /// Watches whose last attempt failed (their labels, e.g. `Namespace`, `ClusterQueue`), in start order.
    pub failing_watches: Vec<&'static str>,
    /// Seconds since the worst failing watch last heard from the API server (0 while all are healthy).
    pub staleness_seconds: f64,
}

impl CacheHealth {
    /// Whether the API server answers every watch (no watch is failing).
    pub fn is_reachable(&self) -> bool {
        self.failing_watches.is_empty()
    }
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
pub(crate) struct Signals {
    pub(crate) changed: Notify,
    pub(crate) reconcile_dirty: AtomicBool,
    health: Mutex<Vec<WatchHealth>>,
}

impl Signals {
    pub(crate) fn new() -> Self {
        Self { changed: Notify::new(), reconcile_dirty: AtomicBool::new(false), health: Mutex::default() }
    }

    pub(crate) fn register(&self, label: &'static str) -> usize {
        let Ok(mut health) = self.health.lock() else { return usize::MAX };
        health.push(WatchHealth { label, last_ok: Instant::now(), failing: false });
        health.len() - 1
    }

    pub(crate) fn record(&self, index: usize, ok: bool) {
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
    pub(crate) fn staleness(&self, now: Instant) -> f64 {
        let Ok(health) = self.health.lock() else { return 0.0 };
        health
            .iter()
            .filter(|entry| entry.failing)
            .map(|entry| now.saturating_duration_since(entry.last_ok).as_secs_f64())
            .fold(0.0, f64::max)
    }

    pub(crate) fn failing_watches(&self) -> Vec<&'static str> {
        let Ok(health) = self.health.lock() else { return vec![] };
        health.iter().filter(|entry| entry.failing).map(|entry| entry.label).collect()
    }
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
        let super::snapshot::ManagementReaders { policies, placed_pods, typed_pods, replica_sets, owners } = management;
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
                synced.store(true, Ordering::Relaxed);
                signals.reconcile_dirty.store(true, Ordering::Relaxed);
                signals.changed.notify_one();
            }
        }
    }
}
