//! Runtime wiring of the reconciling half of the daemon: caches, leader election and the controller under the
//! Lease, started together and stopped by one token; used by `tiergate run` and the end-to-end tests; does I/O.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fleet::{FleetInputs, FleetSettings, SECRET_POLL, build_kubeconfig_connector, run_fleet};
use super::lease::{LeaseConfig, WriteGate, run_lease};
use super::{Context, ReconcilerSettings, run_while_leading};
use crate::cache::{CacheScope, CacheSettings, ClusterCache};
use crate::metrics::Metrics;
use crate::placement::PlacementLedger;
use crate::view::SharedSnapshot;

/// What the reconciler needs to know.
#[derive(Clone, Debug)]
pub struct ReconcilerOptions {
    /// The TierPolicy reconciled (`--policy-name`).
    pub policy_name: String,
    /// The daemon's namespace, where the Lease lives (`--namespace`).
    pub namespace: String,
    /// The leader Lease (`--lease-name`).
    pub lease_name: String,
    /// This replica's identity (see [`build_identity`]).
    pub identity: String,
    /// Quiet time before the snapshot is rebuilt after a change.
    pub debounce: Duration,
    /// The webhook's placement ledger, kept in step with the pod cache.
    pub ledger: Option<Arc<PlacementLedger>>,
    /// Kueue's namespace, where the fleet's kubeconfig Secrets are (`--kueue-namespace`).
    pub kueue_namespace: String,
}

/// The running caches, Lease loop and controller.
#[derive(Debug)]
pub struct RunningReconciler {
    /// The snapshot every cache feeds (the webhook reads it too).
    pub snapshot: SharedSnapshot,
    /// Open while this replica holds the Lease.
    pub gate: Arc<WriteGate>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningReconciler {
    /// Waits for the Lease loop (which releases the Lease) and the controller to finish after cancellation.
    pub async fn stopped(self) {
        for task in self.tasks {
            if let Err(error) = task.await {
                tracing::warn!(%error, "a reconciler task panicked or was aborted");
            }
        }
    }
}

/// A replica identity unique across restarts: the pod name (or host name) plus a per-process suffix.
pub fn build_identity() -> String {
    let host =
        std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).unwrap_or_else(|_| "tiergate".to_owned());
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.subsec_nanos());
    format!("{host}_{:08x}", nanos ^ std::process::id())
}

/// Starts caches, leader election and the controller; everything stops when `shutdown` is cancelled.
pub fn start_reconciler(
    client: &Client,
    options: ReconcilerOptions,
    metrics: Arc<Metrics>,
    shutdown: &CancellationToken,
) -> RunningReconciler {
    let caches = ClusterCache::start(
        client,
        CacheSettings {
            policy_name: options.policy_name.clone(),
            own_namespace: options.namespace.clone(),
            debounce: options.debounce,
            ledger: options.ledger.clone(),
            scope: CacheScope::Management,
        },
        metrics.clone(),
        shutdown,
    );
    let gate = WriteGate::new();
    let lease = LeaseConfig::new(options.lease_name.clone(), options.namespace.clone(), options.identity.clone());
    let lease_task = tokio::spawn(run_lease(client.clone(), lease, gate.clone(), metrics.clone(), shutdown.clone()));
    let fleet_settings = FleetSettings {
        policy_name: options.policy_name.clone(),
        identity: options.identity.clone(),
        own_namespace: options.namespace.clone(),
        kueue_namespace: options.kueue_namespace.clone(),
        debounce: options.debounce,
        secret_poll: SECRET_POLL,
    };
    let ctx = Context::new(
        client.clone(),
        ReconcilerSettings { policy_name: options.policy_name, identity: options.identity },
        caches.snapshot.clone(),
        caches.owned,
        gate.clone(),
        metrics,
    );
    let fleet = FleetInputs {
        management: client.clone(),
        snapshot: caches.snapshot.clone(),
        changes: caches.changes.clone(),
        gate: gate.clone(),
        health: ctx.fleet_health(),
        connect: build_kubeconfig_connector(),
    };
    let triggers = merge_triggers(caches.changes, ctx.fleet_health().subscribe(), shutdown.clone());
    let fleet_task = tokio::spawn(run_fleet(fleet_settings, fleet, shutdown.clone()));
    let controller_task = tokio::spawn(run_while_leading(ctx, triggers, shutdown.clone()));
    RunningReconciler { snapshot: caches.snapshot, gate, tasks: vec![controller_task, fleet_task, lease_task] }
}

/// One counter bumped whenever the management snapshot or a worker's condition changes: the policy is
/// reconciled (and its status, with the `WorkerReachable-<cluster>` conditions, rewritten if it differs) on both.
fn merge_triggers(
    mut snapshot: watch::Receiver<u64>,
    mut workers: watch::Receiver<u64>,
    shutdown: CancellationToken,
) -> watch::Receiver<u64> {
    let (merged, triggers) = watch::channel(0_u64);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                Ok(()) = snapshot.changed() => {}
                Ok(()) = workers.changed() => {}
                else => return,
            }
            merged.send_modify(|version| *version = version.wrapping_add(1));
        }
    });
    triggers
}
