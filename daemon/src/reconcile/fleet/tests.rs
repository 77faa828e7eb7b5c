//! The fleet supervisor against three stateful fake API servers (the worker engine's fakes): a management
//! cluster serving the kubeconfig Secrets, and two workers. Covered: both workers converge from their Secrets and
//! then write nothing anywhere; a missing or broken Secret is reported on that worker only; a worker removed from
//! the policy is pruned there and stopped; a rotated Secret restarts the worker with a new client.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::*;
use crate::inputs::load_policy;
use crate::policy::TierPolicy;
use crate::reconcile::worker::build_worker_condition;
use crate::reconcile::worker::tests::{FakeCluster, node};
use crate::view::{NamespaceView, Snapshot};

const TIER: &str = "tenant.kubenexus.io/tier";
const SECRETS: &str = "/api/v1/secrets";
const QUEUES: &str = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues";
const EAST: &str = "us-east";
const WEST: &str = "eu-west";

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: worker\n  cluster: {{server: '{server}'}}\nusers:\n- name: \
         tiergate\n  user: {{token: t}}\ncontexts:\n- name: worker\n  context: {{cluster: worker, user: tiergate}}\n\
         current-context: worker\n"
    )
}

fn secret(name: &str, version: &str, kubeconfig: &str) -> Value {
    let encoded = base64::engine::general_purpose::STANDARD.encode(kubeconfig);
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": "kueue-system", "resourceVersion": version},
           "data": {"kubeconfig": encoded}})
}

fn secret_key(cluster: &str) -> String {
    format!("kueue-system/worker-{cluster}-kubeconfig")
}

fn put_secret(management: &FakeCluster, cluster: &str, version: &str, server: &str) {
    let name = format!("worker-{cluster}-kubeconfig");
    management.put(SECRETS, &secret_key(cluster), secret(&name, version, &kubeconfig(server)));
}

fn fleet_policy() -> TierPolicy {
    load_policy(Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/fleet/policy.yaml"))).unwrap()
}

/// The fleet sample without eu-west: gold dispatches to us-east only, silver runs on the management cluster.
fn policy_without_west() -> TierPolicy {
    let mut policy = fleet_policy();
    policy.spec.clusters.retain(|cluster| cluster.name != WEST);
    for tier in &mut policy.spec.tiers {
        if let Some(dispatch) = tier.dispatch.as_mut() {
            dispatch.clusters.retain(|cluster| cluster != WEST);
        }
        if tier.dispatch.as_ref().is_some_and(|dispatch| dispatch.clusters.is_empty()) {
            tier.dispatch = None;
        }
    }
    policy
}

fn management_snapshot(policy: TierPolicy) -> Snapshot {
    let namespaces = [("team-gold", "gold"), ("team-silver", "silver"), ("team-bronze", "bronze")]
        .into_iter()
        .map(|(name, tier)| {
            let labels = BTreeMap::from([(TIER.to_owned(), tier.to_owned())]).into();
            (name.to_owned(), Arc::new(NamespaceView { name: name.to_owned(), labels, ..NamespaceView::default() }))
        })
        .collect();
    Snapshot { policy: Some(Arc::new(policy)), namespaces, synced: true, ..Snapshot::default() }
}

/// A running supervisor over a management fake and workers reached by kubeconfig server URL.
struct Fleet {
    health: Arc<FleetHealth>,
    snapshot: SharedSnapshot,
    trigger: watch::Sender<u64>,
    /// Clients built, per server URL.
    connects: Arc<Mutex<BTreeMap<String, usize>>>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Fleet {
    fn start(management: &FakeCluster, workers: Vec<(&str, &FakeCluster)>) -> Self {
        let clients: BTreeMap<String, Client> =
            workers.into_iter().map(|(server, fake)| (server.to_owned(), fake.client.clone())).collect();
        let connects = Arc::new(Mutex::new(BTreeMap::new()));
        let counted = connects.clone();
        let connect: Connector = Arc::new(move |kubeconfig: kube::config::Kubeconfig| {
            let server = kubeconfig.clusters[0].cluster.as_ref().and_then(|cluster| cluster.server.clone()).unwrap();
            *counted.lock().unwrap().entry(server.clone()).or_insert(0) += 1;
            let client = clients.get(&server).cloned().ok_or_else(|| format!("no route to {server}"));
            Box::pin(async move { client })
        });
        let snapshot: SharedSnapshot = Arc::new(arc_swap::ArcSwap::from_pointee(management_snapshot(fleet_policy())));
        let (trigger, changes) = watch::channel(0_u64);
        let health = Arc::new(FleetHealth::default());
        let settings = FleetSettings {
            policy_name: "fleet".to_owned(),
            identity: "test".to_owned(),
            own_namespace: "tiergate-system".to_owned(),
            kueue_namespace: "kueue-system".to_owned(),
            debounce: Duration::from_millis(10),
            secret_poll: Duration::from_millis(50),
        };
        let inputs = FleetInputs {
            management: management.client.clone(),
            snapshot: snapshot.clone(),
            changes,
            gate: WriteGate::always_open(),
            health: health.clone(),
            connect,
        };
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_fleet(settings, inputs, shutdown.clone()));
        Self { health, snapshot, trigger, connects, shutdown, task }
    }

    fn set_policy(&self, policy: TierPolicy) {
        self.snapshot.store(Arc::new(management_snapshot(policy)));
        self.trigger.send_modify(|version| *version += 1);
    }

    fn connects(&self, server: &str) -> usize {
        self.connects.lock().unwrap().get(server).copied().unwrap_or(0)
    }

    async fn wait_until(&self, what: &str, check: impl Fn(&Self) -> bool) {
        let reached = async {
            while !check(self) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), reached)
            .await
            .unwrap_or_else(|_| panic!("never reached: {what}; fleet health: {:?}", self.health.workers()));
    }

    fn state(&self, cluster: &str) -> Option<WorkerState> {
        self.health.worker(cluster).map(|health| health.state)
    }

    fn converged(&self, cluster: &str) -> bool {
        matches!(self.state(cluster), Some(WorkerState::Converged { draining: 0, .. }))
    }

    /// Triggers two more passes on every named worker (the second starts after the first trigger).
    async fn two_more_passes(&self, clusters: &[&str]) {
        for _ in 0..2 {
            let before: Vec<u64> = clusters.iter().map(|cluster| self.health.passes(cluster)).collect();
            self.trigger.send_modify(|version| *version += 1);
            self.wait_until("another pass on every worker", |fleet| {
                clusters.iter().zip(&before).all(|(cluster, before)| fleet.health.passes(cluster) > *before)
            })
            .await;
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

fn namespace_tier(fake: &FakeCluster, name: &str) -> Option<String> {
    let namespace = fake.object("/api/v1/namespaces", name)?;
    namespace["metadata"]["labels"][TIER].as_str().map(str::to_owned)
}

#[tokio::test]
async fn two_workers_converge_from_their_secrets_and_a_steady_state_writes_nothing_on_any_cluster() {
    let management = FakeCluster::start(vec![], false, false);
    put_secret(&management, EAST, "1", "https://east.example");
    put_secret(&management, WEST, "1", "https://west.example");
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let west = FakeCluster::start(vec![node("west-1", "h100"), node("west-2", "a100")], false, false);
    let fleet = Fleet::start(&management, vec![("https://east.example", &east), ("https://west.example", &west)]);
    fleet.wait_until("both workers converged", |fleet| fleet.converged(EAST) && fleet.converged(WEST)).await;

    assert_eq!(east.count(QUEUES), 1, "us-east serves gold only");
    assert_eq!(west.count(QUEUES), 2, "eu-west serves gold and silver");
    assert_eq!(namespace_tier(&east, "team-gold").as_deref(), Some("gold"));
    assert_eq!(namespace_tier(&east, "team-silver"), None, "silver is not dispatched to us-east");
    assert_eq!(namespace_tier(&west, "team-silver").as_deref(), Some("silver"));
    assert!(east.object("/api/v1/namespaces", "team-bronze").is_none(), "bronze stays on the management cluster");

    let mut quiet = false;
    for _ in 0..50 {
        let before = (east.writes().len(), west.writes().len());
        fleet.two_more_passes(&[EAST, WEST]).await;
        if (east.writes().len(), west.writes().len()) == before {
            quiet = true;
            break;
        }
    }
    assert!(quiet, "the workers never reached a pass without writes: {:?} {:?}", east.writes(), west.writes());
    assert!(management.writes().is_empty(), "the supervisor only reads Secrets: {:?}", management.writes());
    fleet.stop().await;
}

#[tokio::test]
async fn a_missing_or_broken_secret_is_reported_on_that_worker_only_while_the_other_converges() {
    let management = FakeCluster::start(vec![], false, false);
    put_secret(&management, EAST, "1", "https://east.example");
    let broken = secret("worker-eu-west-kubeconfig", "1", "this is not a kubeconfig");
    management.put(SECRETS, &secret_key(WEST), broken);
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let west = FakeCluster::start(vec![node("west-1", "a100")], false, false);
    let fleet = Fleet::start(&management, vec![("https://east.example", &east), ("https://west.example", &west)]);
    let no_credentials = |fleet: &Fleet, text: &str| matches!(fleet.state(WEST), Some(WorkerState::NoCredentials { message }) if message.contains(text));
    fleet
        .wait_until("east converged, west reported", |fleet| {
            fleet.converged(EAST) && no_credentials(fleet, "is not a kubeconfig")
        })
        .await;
    let west_health = fleet.health.worker(WEST).unwrap();
    let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let condition = build_worker_condition(&west_health, Some(1), &[], &time);
    assert_eq!((condition.type_.as_str(), condition.status.as_str()), ("WorkerReachable-eu-west", "False"));
    assert!(condition.message.contains("kueue-system/worker-eu-west-kubeconfig"), "{}", condition.message);
    assert_eq!(condition.reason, "KubeconfigSecret");

    management.remove(SECRETS, &secret_key(WEST));
    fleet.wait_until("west reported missing", |fleet| no_credentials(fleet, "does not exist")).await;
    assert!(west.writes().is_empty() && fleet.connects("https://west.example") == 0, "no client for west yet");
    assert_eq!(east.count(QUEUES), 1, "east is unaffected");

    put_secret(&management, WEST, "2", "https://west.example");
    fleet.wait_until("west converged once its Secret exists", |fleet| fleet.converged(WEST)).await;
    assert_eq!(west.count(QUEUES), 2);
    fleet.stop().await;
}

#[tokio::test]
async fn a_worker_removed_from_the_policy_is_pruned_there_only_and_its_engine_stops() {
    let management = FakeCluster::start(vec![], false, false);
    put_secret(&management, EAST, "1", "https://east.example");
    put_secret(&management, WEST, "1", "https://west.example");
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let west = FakeCluster::start(vec![node("west-1", "a100")], false, false);
    let fleet = Fleet::start(&management, vec![("https://east.example", &east), ("https://west.example", &west)]);
    fleet.wait_until("both workers converged", |fleet| fleet.converged(EAST) && fleet.converged(WEST)).await;
    assert_eq!(west.count(QUEUES), 2);

    fleet.set_policy(policy_without_west());
    fleet.wait_until("west's engine stopped", |fleet| fleet.health.worker(WEST).is_none()).await;
    assert_eq!(west.count(QUEUES), 0, "west's ClusterQueues were pruned before its engine stopped");
    assert_eq!(west.count("/apis/kueue.x-k8s.io/v1beta2/localqueues"), 0);
    assert_eq!(namespace_tier(&west, "team-gold"), None, "the tier label is released, the namespace stays");
    assert!(west.object("/api/v1/namespaces", "team-gold").is_some());
    assert_eq!(east.count(QUEUES), 1, "nothing is pruned on east");
    assert_eq!(namespace_tier(&east, "team-gold").as_deref(), Some("gold"));
    fleet.two_more_passes(&[EAST]).await;
    assert!(fleet.converged(EAST));
    fleet.stop().await;
}

#[tokio::test]
async fn a_rotated_secret_restarts_the_worker_with_a_client_built_from_the_new_kubeconfig() {
    let management = FakeCluster::start(vec![], false, false);
    put_secret(&management, EAST, "1", "https://east.example");
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let moved = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let mut policy = policy_without_west();
    policy.spec.tiers.retain(|tier| tier.dispatch.is_some());
    let fleet = Fleet::start(&management, vec![("https://east.example", &east), ("https://east-2.example", &moved)]);
    fleet.set_policy(policy);
    fleet.wait_until("east converged", |fleet| fleet.converged(EAST)).await;
    assert_eq!((fleet.connects("https://east.example"), east.count(QUEUES)), (1, 1));

    put_secret(&management, EAST, "2", "https://east-2.example");
    fleet
        .wait_until("the new client's server holds the queue", |fleet| {
            fleet.connects("https://east-2.example") == 1 && moved.count(QUEUES) == 1 && fleet.converged(EAST)
        })
        .await;
    assert_eq!(fleet.connects("https://east.example"), 1, "the old kubeconfig is not used again");
    fleet.stop().await;
}

/// Peak resident set size of this process in KiB (`VmHWM`), 0 where /proc is not there.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).unwrap_or(0)
}

/// The issue-17 measurement (docs/performance.md, "Fleet convergence"): `TIERGATE_FLEET_WORKERS` workers (default
/// 10) behind fake API servers that answer at once, 1,000 tenant namespaces (gold, silver, bronze in turn; gold
/// dispatched to every worker, silver to the first half). Prints the time until every worker converged, the
/// writes and the peak RSS; asserts every worker holds its tiers' queues. Run it optimized:
/// `cargo test --release -p tiergate --lib reconcile::fleet::tests::a_fleet -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it optimized, see docs/performance.md"]
async fn a_fleet_of_workers_over_a_thousand_namespaces_converges_and_reports_its_cost() {
    let count: usize = std::env::var("TIERGATE_FLEET_WORKERS").ok().and_then(|value| value.parse().ok()).unwrap_or(10);
    let names: Vec<String> = (0..count).map(|index| format!("w{index}")).collect();
    let mut policy = fleet_policy();
    let template = policy.spec.clusters[0].clone();
    policy.spec.clusters = names
        .iter()
        .map(|name| {
            let mut cluster = template.clone();
            cluster.name = name.clone();
            cluster.cluster_source.kube_config.location = format!("worker-{name}-kubeconfig");
            cluster
        })
        .collect();
    for tier in &mut policy.spec.tiers {
        match (tier.name.as_str(), tier.dispatch.as_mut()) {
            ("gold", Some(dispatch)) => dispatch.clusters = names.clone(),
            ("silver", Some(dispatch)) => dispatch.clusters = names[..count.div_ceil(2)].to_vec(),
            _ => {}
        }
    }
    let namespaces = (0..1000)
        .map(|index| {
            let (name, tier) = (format!("team-{index:04}"), ["gold", "silver", "bronze"][index % 3]);
            let labels = BTreeMap::from([(TIER.to_owned(), tier.to_owned())]).into();
            (name.clone(), Arc::new(NamespaceView { name, labels, ..NamespaceView::default() }))
        })
        .collect();
    let management = FakeCluster::start(vec![], false, false);
    let workers: Vec<FakeCluster> =
        names.iter().map(|_| FakeCluster::start(vec![node("n1", "h100"), node("n2", "a100")], false, false)).collect();
    let servers: Vec<String> = names.iter().map(|name| format!("https://{name}.example")).collect();
    for (name, server) in names.iter().zip(&servers) {
        put_secret(&management, name, "1", server);
    }
    let rss_before = peak_rss_kib();
    let started = std::time::Instant::now();
    let fleet = Fleet::start(&management, servers.iter().map(String::as_str).zip(workers.iter()).collect());
    fleet.snapshot.store(Arc::new(Snapshot {
        policy: Some(Arc::new(policy)),
        namespaces,
        synced: true,
        ..Snapshot::default()
    }));
    fleet.trigger.send_modify(|version| *version += 1);
    fleet.wait_until("every worker converged", |fleet| names.iter().all(|name| fleet.converged(name))).await;
    let elapsed = started.elapsed();
    let writes: usize = workers.iter().map(|worker| worker.writes().len()).sum();
    for (index, worker) in workers.iter().enumerate() {
        let queues = if index < count.div_ceil(2) { 667 } else { 334 };
        assert_eq!(worker.count("/apis/kueue.x-k8s.io/v1beta2/localqueues"), queues, "worker w{index}");
    }
    println!(
        "fleet of {count} workers x 1000 namespaces: converged in {:.0} ms, {writes} writes, peak RSS {} KiB \
         (+{} KiB over the start)",
        elapsed.as_secs_f64() * 1000.0,
        peak_rss_kib(),
        peak_rss_kib().saturating_sub(rss_before)
    );
    fleet.stop().await;
}
