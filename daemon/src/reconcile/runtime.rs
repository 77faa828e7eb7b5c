//! Runtime wiring of the reconciling half of the daemon: caches, leader election, the controller under the Lease,
//! and the blocker monitor and log, started together and stopped by one token; used by `tiergate run` and the
//! end-to-end tests; does I/O.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fleet::{FleetInputs, FleetSettings, SECRET_POLL, build_kubeconfig_connector, run_fleet};
use super::lease::{LeaseConfig, WriteGate, run_lease};
use super::monitor::{CertificateFile, MonitorInputs, run_blocker_monitor};
use super::usage::{UsageCheckpoints, run_usage_checkpoints};
use super::{Context, ReconcilerSettings, run_while_leading};
use crate::blockers::Blockers;
use crate::blockers::log::run_blocker_log;
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
    /// Kueue's namespace, where the fleet's kubeconfig Secrets and Kueue's Configuration are (`--kueue-namespace`).
    pub kueue_namespace: String,
    /// Create `namespace` when the Lease cannot be created because it is missing (`--create-lease-namespace`).
    pub create_lease_namespace: bool,
    /// Apply the gate's MutatingAdmissionPolicies where served (`--mutating-gate`).
    pub mutating_gate: bool,
    /// Why `policy_name` was chosen when `--policy-name` was not given (said with a missing policy).
    pub policy_choice: Option<String>,
    /// The webhook's serving certificate file, watched for a missing or expired certificate.
    pub certificate: Option<CertificateFile>,
    /// The MutatingWebhookConfiguration that owns the in-server gate (`--gate-owner`).
    pub gate_owner: Option<String>,
    /// How often the leader checkpoints the usage counts (`--usage-checkpoint-interval`).
    pub usage_checkpoint_interval: Duration,
}

/// The running caches, Lease loop and controller.
#[derive(Debug)]
pub struct RunningReconciler {
    /// The snapshot every cache feeds (the webhook reads it too).
    pub snapshot: SharedSnapshot,
    /// Open while this replica holds the Lease.
    pub gate: Arc<WriteGate>,
    /// Why this replica is not doing its job, if anything keeps it from it.
    pub blockers: Arc<Blockers>,
    /// Cancelled to give up leadership while the caches and the webhook keep serving.
    leadership: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningReconciler {
    /// Gives the Lease up now (the gate closes, the Lease is released) while the caches, and with them the webhook,
    /// keep serving: on SIGTERM the next replica takes over within its retry period instead of waiting out this
    /// one's drain (issue 48 measured 13.3 s when the Lease was released only after the drain).
    pub fn step_down(&self) {
        self.leadership.cancel();
    }

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
    let blockers = Blockers::new(&metrics);
    let gate = WriteGate::new();
    let lease = LeaseConfig::new(options.lease_name.clone(), options.namespace.clone(), options.identity.clone())
        .serving(options.policy_name.clone())
        .creating_namespace(options.create_lease_namespace);
    let leadership = shutdown.child_token();
    let lease_task = tokio::spawn(run_lease(
        client.clone(),
        lease,
        gate.clone(),
        (metrics.clone(), blockers.clone()),
        leadership.clone(),
    ));
    let fleet_settings = FleetSettings {
        policy_name: options.policy_name.clone(),
        identity: options.identity.clone(),
        own_namespace: options.namespace.clone(),
        kueue_namespace: options.kueue_namespace.clone(),
        debounce: options.debounce,
        secret_poll: SECRET_POLL,
    };
    let usage_task = caches.usage_ledger.clone().map(|ledger| {
        let checkpoints = UsageCheckpoints {
            client: client.clone(),
            policy_name: options.policy_name.clone(),
            identity: options.identity.clone(),
            interval: options.usage_checkpoint_interval,
            snapshot: caches.snapshot.clone(),
            ledger,
            gate: gate.clone(),
            metrics: metrics.clone(),
        };
        tokio::spawn(run_usage_checkpoints(checkpoints, shutdown.clone()))
    });
    let ctx = Context::new_with_blockers(
        client.clone(),
        ReconcilerSettings {
            policy_name: options.policy_name.clone(),
            identity: options.identity,
            mutating_gate: options.mutating_gate,
            gate_owner: options.gate_owner,
        },
        caches.snapshot.clone(),
        caches.owned.clone(),
        gate.clone(),
        (metrics, blockers.clone()),
    );
    let fleet = FleetInputs {
        management: client.clone(),
        snapshot: caches.snapshot.clone(),
        changes: caches.changes.clone(),
        gate: gate.clone(),
        health: ctx.fleet_health(),
        connect: build_kubeconfig_connector(),
    };
    let triggers = merge_triggers(
        [caches.changes.clone(), ctx.fleet_health().subscribe(), blockers.subscribe()],
        shutdown.clone(),
    );
    let snapshot = caches.snapshot.clone();
    let monitor = MonitorInputs {
        blockers: blockers.clone(),
        cache: Arc::new(caches),
        client: client.clone(),
        kueue_namespace: options.kueue_namespace,
        fleet: ctx.fleet_health(),
        policy_name: options.policy_name,
        policy_choice: options.policy_choice,
        certificate: options.certificate,
        kueue_last_read: std::sync::Mutex::new(None),
    };
    let monitor_task = tokio::spawn(run_blocker_monitor(monitor, shutdown.clone()));
    let log_task = tokio::spawn(run_blocker_log(blockers.clone(), shutdown.clone()));
    let fleet_task = tokio::spawn(run_fleet(fleet_settings, fleet, shutdown.clone()));
    let controller_task = tokio::spawn(run_while_leading(ctx, triggers, shutdown.clone()));
    RunningReconciler {
        snapshot,
        gate,
        blockers,
        leadership,
        tasks: [controller_task, fleet_task, lease_task, monitor_task, log_task]
            .into_iter()
            .chain(usage_task)
            .collect(),
    }
}

/// One counter bumped whenever the management snapshot, a worker's condition or the set of blockers changes:
/// the policy is reconciled (and its status, with the `WorkerReachable-<cluster>` and `Blocked` conditions,
/// rewritten if it differs) on each.
fn merge_triggers(
    [mut snapshot, mut workers, mut blockers]: [watch::Receiver<u64>; 3],
    shutdown: CancellationToken,
) -> watch::Receiver<u64> {
    let (merged, triggers) = watch::channel(0_u64);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                Ok(()) = snapshot.changed() => {}
                Ok(()) = workers.changed() => {}
                Ok(()) = blockers.changed() => {}
                else => return,
            }
            merged.send_modify(|version| *version = version.wrapping_add(1));
        }
    });
    triggers
}
