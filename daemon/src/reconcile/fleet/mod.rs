//! The fleet supervisor of `tiergate run` (issue 17): while this replica holds the Lease, one worker engine per
//! `spec.clusters[]` entry, each over a client built from the worker's kubeconfig Secret (read from Kueue's
//! namespace, where MultiKueue reads it) and its own worker-scope caches, planned from the current management
//! snapshot. It restarts a worker whose Secret rotated, reports one whose Secret is missing or wrong, and lets a
//! worker that left the policy run until a pass has pruned everything there; does I/O.

pub mod health;
pub mod kubeconfig;
pub mod plan;

pub use self::health::{FleetHealth, merge_worker_conditions};
pub use self::kubeconfig::{Connector, KubeconfigError, build_kubeconfig_connector};
pub use self::plan::build_worker_plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::kubeconfig::read_kubeconfig;
use super::ReconcilerSettings;
use super::lease::WriteGate;
use super::worker::{RunningWorker, Worker, WorkerDesired, WorkerHealth, WorkerPlan, WorkerState, start_worker};
use crate::cache::{CacheScope, CacheSettings, ClusterCache};
use crate::metrics::Metrics;
use crate::policy::WorkerCluster;
use crate::view::SharedSnapshot;

/// How often the kubeconfig Secrets are re-read to notice a rotation (and a fixed Secret).
pub const SECRET_POLL: Duration = Duration::from_secs(30);

/// Fixed settings of the fleet supervisor.
#[derive(Clone, Debug)]
pub struct FleetSettings {
    /// The TierPolicy reconciled (`--policy-name`): selects the owned objects on every worker.
    pub policy_name: String,
    /// This replica's identity.
    pub identity: String,
    /// The daemon's namespace (`--namespace`).
    pub own_namespace: String,
    /// Where the kubeconfig Secrets are (`--kueue-namespace`).
    pub kueue_namespace: String,
    /// Quiet time before a worker's snapshot is rebuilt after a change.
    pub debounce: Duration,
    /// How often the Secrets are re-read ([`SECRET_POLL`]).
    pub secret_poll: Duration,
}

/// What the supervisor reads from the management side and shares with it.
#[derive(Clone)]
pub struct FleetInputs {
    /// The management cluster's client (reads the kubeconfig Secrets, nothing else).
    pub management: Client,
    /// The management snapshot (the policy and the tenant namespaces).
    pub snapshot: SharedSnapshot,
    /// Bumped on every management snapshot change (wakes the supervisor and every worker engine).
    pub changes: watch::Receiver<u64>,
    /// The Lease gate: workers run only while this replica leads.
    pub gate: Arc<WriteGate>,
    /// Every worker's health, read by the status writer.
    pub health: Arc<FleetHealth>,
    /// Builds a worker's client from its kubeconfig.
    pub connect: Connector,
}

impl std::fmt::Debug for FleetInputs {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("FleetInputs").finish_non_exhaustive()
    }
}

/// One worker the supervisor knows.
struct Entry {
    /// The Secret its client came from.
    secret: String,
    /// The Secret's resourceVersion its engine uses (`None`: no engine, the Secret was unusable).
    version: Option<String>,
    /// The client its engine uses (kept to prune the worker after it leaves the policy).
    client: Option<Client>,
    engine: Option<Engine>,
    /// It left the policy: its engine runs the retired plan until a pass has nothing left.
    retiring: bool,
}

struct Engine {
    running: RunningWorker,
    forwarder: JoinHandle<()>,
}

impl Engine {
    async fn stop(self) {
        self.forwarder.abort();
        self.running.stop().await;
    }
}

/// Runs the fleet until `shutdown`: starts, restarts and stops worker engines as the policy, the Lease and the
/// kubeconfig Secrets change.
pub async fn run_fleet(settings: FleetSettings, inputs: FleetInputs, shutdown: CancellationToken) {
    let (wake_tx, mut wake) = mpsc::unbounded_channel();
    let mut supervisor =
        Supervisor { settings, inputs, entries: BTreeMap::new(), wake: wake_tx, stop: shutdown.child_token() };
    let mut changes = supervisor.inputs.changes.clone();
    let mut leading = supervisor.inputs.gate.subscribe();
    let mut poll = tokio::time::interval(supervisor.settings.secret_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut read_secrets = true;
    loop {
        if *leading.borrow_and_update() {
            // A management API server that does not answer a Secret read must not hold up the shutdown.
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = supervisor.sync(std::mem::take(&mut read_secrets)) => {}
            }
        } else {
            supervisor.stop_all().await;
        }
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            Ok(()) = leading.changed() => read_secrets = true,
            Ok(()) = changes.changed() => {}
            Some(()) = wake.recv() => {}
            _ = poll.tick() => read_secrets = true,
        }
    }
    supervisor.stop_all().await;
}

struct Supervisor {
    settings: FleetSettings,
    inputs: FleetInputs,
    entries: BTreeMap<String, Entry>,
    wake: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
}

impl Supervisor {
    /// One round: retire workers that left the policy, finish retired ones that converged, and (re)start the
    /// policy's workers whose Secret is new, rotated or (with `read_secrets`) due for a re-read.
    async fn sync(&mut self, read_secrets: bool) {
        let snapshot = self.inputs.snapshot.load_full();
        if !snapshot.synced {
            return;
        }
        let wanted: BTreeMap<String, WorkerCluster> = snapshot
            .policy
            .iter()
            .flat_map(|policy| policy.spec.clusters.iter())
            .map(|cluster| (cluster.name.clone(), cluster.clone()))
            .collect();
        drop(snapshot);
        self.retire_departed(&wanted).await;
        self.finish_retired().await;
        for (name, cluster) in &wanted {
            self.sync_worker(name, cluster, read_secrets).await;
        }
    }

    async fn retire_departed(&mut self, wanted: &BTreeMap<String, WorkerCluster>) {
        let departed: Vec<String> = self
            .entries
            .iter()
            .filter(|(name, entry)| !entry.retiring && !wanted.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect();
        for name in departed {
            let Some(mut entry) = self.entries.remove(&name) else { continue };
            if let Some(engine) = entry.engine.take() {
                engine.stop().await;
            }
            match entry.client.clone() {
                Some(client) => {
                    tracing::info!(cluster = %name, "worker left the policy: pruning tiergate's objects there");
                    let plan: WorkerPlan = Arc::new(|_: &crate::view::Snapshot| Ok(WorkerDesired::retired()));
                    entry.engine = Some(self.start_engine(&name, client, plan));
                    entry.retiring = true;
                    self.entries.insert(name, entry);
                }
                None => self.inputs.health.remove(&name),
            }
        }
    }

    /// Stops the retiring engines whose last pass converged with nothing left to prune or drain.
    async fn finish_retired(&mut self) {
        let done: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.retiring)
            .filter(|(_, entry)| {
                entry.engine.as_ref().is_some_and(|engine| {
                    matches!(engine.running.health.borrow().state, WorkerState::Converged { draining: 0, .. })
                })
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in done {
            if let Some(engine) = self.entries.remove(&name).and_then(|entry| entry.engine) {
                engine.stop().await;
            }
            self.inputs.health.remove(&name);
            tracing::info!(cluster = %name, "worker left the policy and holds nothing of it any more: stopped");
        }
    }

    async fn sync_worker(&mut self, name: &str, cluster: &WorkerCluster, read_secret: bool) {
        let secret = &cluster.cluster_source.kube_config.location;
        if let Some(entry) = self.entries.get(name) {
            if entry.retiring {
                // Back in the policy before the retirement finished: start over with its real plan.
                if let Some(engine) = self.entries.remove(name).and_then(|entry| entry.engine) {
                    engine.stop().await;
                }
            } else if !read_secret && entry.secret == *secret {
                return;
            }
        }
        let fetched = read_kubeconfig(&self.inputs.management, &self.settings.kueue_namespace, cluster).await;
        let kubeconfig = match fetched {
            Ok(fetched) => {
                let current = self.entries.get(name).and_then(|entry| entry.version.as_deref());
                if current == Some(fetched.version.as_str())
                    && self.entries.get(name).is_some_and(|e| e.secret == *secret)
                {
                    return;
                }
                fetched
            }
            Err(error)
                if error.is_transient() && self.entries.get(name).is_some_and(|entry| entry.engine.is_some()) =>
            {
                tracing::warn!(cluster = %name, reason = error.reason(), %error, "keeping the worker's engine");
                return;
            }
            Err(error) => return self.report(name, secret, error.to_string()).await,
        };
        let connected =
            (self.inputs.connect)(kubeconfig.kubeconfig).await.map_err(|problem| KubeconfigError::Connect {
                cluster: name.to_owned(),
                namespace: self.settings.kueue_namespace.clone(),
                name: secret.clone(),
                problem,
            });
        let client = match connected {
            Ok(client) => client,
            Err(error) => return self.report(name, secret, error.to_string()).await,
        };
        if let Some(engine) = self.entries.remove(name).and_then(|entry| entry.engine) {
            tracing::info!(cluster = %name, "kubeconfig Secret changed: restarting the worker with a new client");
            engine.stop().await;
        }
        let plan = build_worker_plan(self.inputs.snapshot.clone(), name.to_owned());
        let engine = self.start_engine(name, client.clone(), plan);
        let entry = Entry {
            secret: secret.clone(),
            version: Some(kubeconfig.version),
            client: Some(client),
            engine: Some(engine),
            retiring: false,
        };
        self.entries.insert(name.to_owned(), entry);
    }

    /// The worker has no usable kubeconfig: its engine (if any) stops, its condition says why.
    async fn report(&mut self, name: &str, secret: &str, message: String) {
        tracing::warn!(cluster = %name, %message, "worker not reconciled");
        let previous = self.entries.remove(name);
        let client = previous.as_ref().and_then(|entry| entry.client.clone());
        if let Some(engine) = previous.and_then(|entry| entry.engine) {
            engine.stop().await;
        }
        let entry = Entry { secret: secret.to_owned(), version: None, client, engine: None, retiring: false };
        self.entries.insert(name.to_owned(), entry);
        let health = WorkerHealth { cluster: name.to_owned(), state: WorkerState::NoCredentials { message } };
        self.inputs.health.set(health, 0);
    }

    fn start_engine(&self, name: &str, client: Client, plan: WorkerPlan) -> Engine {
        let metrics = Arc::new(Metrics::new());
        let cache = ClusterCache::start(
            &client,
            CacheSettings {
                policy_name: self.settings.policy_name.clone(),
                own_namespace: self.settings.own_namespace.clone(),
                debounce: self.settings.debounce,
                ledger: None,
                scope: CacheScope::Worker,
            },
            metrics.clone(),
            &self.stop,
        );
        let settings = ReconcilerSettings {
            policy_name: self.settings.policy_name.clone(),
            identity: self.settings.identity.clone(),
            mutating_gate: false,
            gate_owner: None,
        };
        let worker = Worker::new(name.to_owned(), client, cache, plan, settings, self.inputs.gate.clone(), metrics);
        let running = start_worker(worker, self.inputs.changes.clone(), &self.stop);
        let forwarder = tokio::spawn(forward_health(
            running.health.clone(),
            running.pass_counter(),
            self.inputs.health.clone(),
            self.wake.clone(),
        ));
        Engine { running, forwarder }
    }

    async fn stop_all(&mut self) {
        for (_, entry) in std::mem::take(&mut self.entries) {
            if let Some(engine) = entry.engine {
                engine.stop().await;
            }
        }
        self.inputs.health.clear();
    }
}

/// Copies every health report of one engine into the fleet's health, and wakes the supervisor.
async fn forward_health(
    mut reports: watch::Receiver<WorkerHealth>,
    passes: Arc<AtomicU64>,
    fleet: Arc<FleetHealth>,
    wake: mpsc::UnboundedSender<()>,
) {
    while reports.changed().await.is_ok() {
        let health = reports.borrow_and_update().clone();
        fleet.set(health, passes.load(Ordering::SeqCst));
        if wake.send(()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
