//! Two worker clusters behind two stateful fake API servers (tower-test): real worker-scope `ClusterCache`s
//! watch them, the engine writes to them, and the fakes stream the writes back to the caches as watch events.
//! Covered: a down worker, a recovering one, a zero-write steady state on both, a removed worker, a hung worker.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower_test::mock::SendResponse;

use super::*;
use crate::cache::{CacheScope, CacheSettings};

const TIER: &str = "tenant.kubenexus.io/tier";
const KUEUE: &str = "/apis/kueue.x-k8s.io/v1beta2";

/// What the fake holds and saw.
#[derive(Debug, Default)]
pub(crate) struct FakeState {
    /// Objects by collection (list path) and key (`name` or `namespace/name`).
    objects: BTreeMap<String, BTreeMap<String, Value>>,
    /// Label keys tiergate applied per namespace (server-side apply removes the ones it leaves out next time).
    applied_labels: BTreeMap<String, BTreeSet<String>>,
    /// Every request as `METHOD path`.
    calls: Vec<String>,
    version: u64,
}

/// Answers every open watch 503 (the server went down).
struct DropWatches;

/// A fake API server serving lists and watches from its state and applying server-side applies and deletes.
pub(crate) struct FakeCluster {
    pub(crate) client: Client,
    state: Arc<Mutex<FakeState>>,
    /// While set, every request is answered 503 (read per request, so a change applies to the next request).
    down: Arc<std::sync::atomic::AtomicBool>,
    control: mpsc::UnboundedSender<DropWatches>,
}

/// The collection and key a request path names: `(list path, Some(key))` for one object.
fn locate(path: &str) -> (String, Option<String>) {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "v1", plural] => (format!("/api/v1/{plural}"), None),
        ["api", "v1", plural, name] => (format!("/api/v1/{plural}"), Some((*name).to_owned())),
        ["api", "v1", "namespaces", namespace, plural, name] => {
            (format!("/api/v1/{plural}"), Some(format!("{namespace}/{name}")))
        }
        ["apis", "kueue.x-k8s.io", "v1beta2", plural] => (format!("{KUEUE}/{plural}"), None),
        ["apis", "kueue.x-k8s.io", "v1beta2", plural, name] => (format!("{KUEUE}/{plural}"), Some((*name).to_owned())),
        ["apis", "kueue.x-k8s.io", "v1beta2", "namespaces", namespace, plural, name] => {
            (format!("{KUEUE}/{plural}"), Some(format!("{namespace}/{name}")))
        }
        _ => (path.to_owned(), None),
    }
}

fn reply(send: SendResponse<Response<Body>>, status: u16, body: &Value) {
    send.send_response(Response::builder().status(status).body(Body::from(serde_json::to_vec(body).unwrap())).unwrap());
}

fn unavailable() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "ServiceUnavailable", "code": 503,
           "message": "the worker is down"})
}

impl FakeCluster {
    /// A fake holding `objects` (collection path -> objects), down from the start if `down`; with `hang_writes`
    /// it never answers a write.
    pub(crate) fn start(objects: Vec<(&str, Value)>, down: bool, hang_writes: bool) -> Self {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let state = Arc::new(Mutex::new(FakeState::default()));
        {
            let mut state = state.lock().unwrap();
            for (collection, object) in objects {
                let name = object["metadata"]["name"].as_str().unwrap().to_owned();
                let key = match object["metadata"]["namespace"].as_str() {
                    Some(namespace) => format!("{namespace}/{name}"),
                    None => name,
                };
                state.objects.entry(collection.to_owned()).or_default().insert(key, object);
            }
        }
        let (control, mut controls) = mpsc::unbounded_channel();
        let shared = state.clone();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(down));
        let is_down = down.clone();
        tokio::spawn(async move {
            let mut watches: Vec<(String, SendResponse<Response<Body>>)> = vec![];
            let mut pending: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            let mut hung = vec![];
            loop {
                tokio::select! {
                    control = controls.recv() => if control.is_some() {
                        for (_, send) in watches.drain(..) {
                            reply(send, 503, &unavailable());
                        }
                    },
                    request = handle.next_request() => {
                        let Some((request, send)) = request else { return };
                        let (parts, body) = request.into_parts();
                        let bytes = body.collect_bytes().await.unwrap_or_default();
                        let path = parts.uri.path().to_owned();
                        let query = parts.uri.query().unwrap_or_default().to_owned();
                        shared.lock().unwrap().calls.push(format!("{} {path}", parts.method));
                        if is_down.load(std::sync::atomic::Ordering::SeqCst) {
                            reply(send, 503, &unavailable());
                            continue;
                        }
                        if path == "/version" {
                            let version = json!({"major": "1", "minor": "36", "gitVersion": "v1.36.0", "gitCommit": "x",
                                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
                                "compiler": "gc", "platform": "linux/amd64"});
                            reply(send, 200, &version);
                            continue;
                        }
                        let (collection, key) = locate(&path);
                        match (parts.method.as_str(), key) {
                            ("GET", None) if query.contains("watch=true") => watches.push((collection, send)),
                            ("GET", None) => {
                                let state = shared.lock().unwrap();
                                let items: Vec<Value> =
                                    state.objects.get(&collection).map(|objects| objects.values().cloned().collect()).unwrap_or_default();
                                let list = json!({"apiVersion": "v1", "kind": "List",
                                                  "metadata": {"resourceVersion": state.version.to_string()}, "items": items});
                                reply(send, 200, &list);
                            }
                            ("GET", Some(key)) => match shared.lock().unwrap().objects.get(&collection).and_then(|objects| objects.get(&key)).cloned() {
                                Some(object) => reply(send, 200, &object),
                                None => reply(send, 404, &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                                "reason": "NotFound", "code": 404, "message": "not found"})),
                            },
                            (_, Some(_)) if hang_writes && parts.method != "GET" => hung.push(send),
                            ("PATCH", Some(key)) => {
                                let body: Value = serde_json::from_slice(&bytes).unwrap();
                                let stored = shared.lock().unwrap().apply(&collection, &key, body);
                                pending.entry(collection.clone()).or_default().push(json!({"type": "MODIFIED", "object": stored.clone()}));
                                reply(send, 200, &stored);
                            }
                            ("DELETE", Some(key)) => {
                                let removed = shared.lock().unwrap().objects.entry(collection.clone()).or_default().remove(&key);
                                if let Some(removed) = removed {
                                    pending.entry(collection.clone()).or_default().push(json!({"type": "DELETED", "object": removed}));
                                }
                                reply(send, 200, &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}));
                            }
                            _ => reply(send, 404, &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                         "reason": "NotFound", "code": 404, "message": "not found"})),
                        }
                    }
                }
                // Streams the writes to the caches: a held watch of the collection answers with its events.
                for (collection, events) in std::mem::take(&mut pending) {
                    match watches.iter().position(|(watching, _)| *watching == collection) {
                        Some(index) => {
                            let (_, send) = watches.remove(index);
                            let lines: String = events.iter().map(|event| format!("{event}\n")).collect();
                            send.send_response(
                                Response::builder().status(200).body(Body::from(lines.into_bytes())).unwrap(),
                            );
                        }
                        None => pending.insert(collection, events).map_or((), |_| ()),
                    }
                }
            }
        });
        Self { client: Client::new(service, "default"), state, down, control }
    }

    pub(crate) fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::SeqCst);
        if down {
            self.control.send(DropWatches).unwrap();
        }
    }

    /// Writes received (`METHOD path`), reads excluded.
    pub(crate) fn writes(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.iter().filter(|call| !call.starts_with("GET ")).cloned().collect()
    }

    pub(crate) fn object(&self, collection: &str, key: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(collection).and_then(|objects| objects.get(key)).cloned()
    }

    /// Stores `object` in `collection` under `key` as another client would (no watch event is sent).
    pub(crate) fn put(&self, collection: &str, key: &str, object: Value) {
        self.state.lock().unwrap().objects.entry(collection.to_owned()).or_default().insert(key.to_owned(), object);
    }

    /// Removes `key` from `collection` as another client would.
    pub(crate) fn remove(&self, collection: &str, key: &str) {
        self.state.lock().unwrap().objects.entry(collection.to_owned()).or_default().remove(key);
    }

    pub(crate) fn count(&self, collection: &str) -> usize {
        self.state.lock().unwrap().objects.get(collection).map_or(0, BTreeMap::len)
    }
}

impl FakeState {
    /// A server-side apply by tiergate: the body replaces what tiergate applied before (for namespaces: the label
    /// keys it applied last time and leaves out now are removed, other labels stay).
    fn apply(&mut self, collection: &str, key: &str, mut body: Value) -> Value {
        self.version += 1;
        let existing = self.objects.get(collection).and_then(|objects| objects.get(key)).cloned();
        if collection == "/api/v1/namespaces" {
            let previous = self.applied_labels.remove(key).unwrap_or_default();
            let mut labels = existing
                .as_ref()
                .and_then(|existing| existing["metadata"]["labels"].as_object().cloned())
                .unwrap_or_default();
            labels.retain(|label, _| !previous.contains(label));
            let applied = body["metadata"]["labels"].as_object().cloned().unwrap_or_default();
            self.applied_labels.insert(key.to_owned(), applied.keys().cloned().collect());
            labels.extend(applied);
            body["metadata"]["labels"] = Value::Object(labels);
        }
        if collection.ends_with("/localqueues") {
            body["spec"]["stopPolicy"] = json!("None");
            body["status"] = json!({"pendingWorkloads": 0, "admittedWorkloads": 0});
        }
        let uid = existing.as_ref().and_then(|existing| existing["metadata"]["uid"].as_str().map(str::to_owned));
        body["metadata"]["uid"] = json!(uid.unwrap_or_else(|| format!("uid-{key}")));
        body["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.objects.entry(collection.to_owned()).or_default().insert(key.to_owned(), body.clone());
        body
    }
}

pub(crate) fn node(name: &str, class: &str) -> (&'static str, Value) {
    (
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1", "labels": {"gpu.nvidia.com/class": class}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}}}),
    )
}

fn kueue(kind: &str, name: &str, namespace: Option<&str>, rest: Value) -> DynamicObject {
    let mut object = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name}});
    if let Some(namespace) = namespace {
        object["metadata"]["namespace"] = json!(namespace);
    }
    object.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
    serde_json::from_value(object).unwrap()
}

/// The gold tier on a worker, from the worker's own nodes: one flavor per GPU class its nodes have, the gold
/// ClusterQueue over them, a priority class, and team-a with its LocalQueue.
fn gold_plan() -> WorkerPlan {
    Arc::new(|snapshot: &Snapshot| {
        let classes: BTreeSet<String> = snapshot
            .nodes
            .values()
            .filter_map(|node| node.labels.get("gpu.nvidia.com/class").map(str::to_owned))
            .collect();
        let mut objects: Vec<DynamicObject> = classes
            .iter()
            .map(|class| {
                kueue("ResourceFlavor", class, None, json!({"spec": {"nodeLabels": {"gpu.nvidia.com/class": class}}}))
            })
            .collect();
        let flavors: Vec<Value> = classes
            .iter()
            .map(|class| json!({"name": class, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}))
            .collect();
        objects.push(kueue("WorkloadPriorityClass", "tiergate-gold", None, json!({"value": 1000})));
        objects.push(kueue(
            "ClusterQueue",
            "tiergate-gold",
            None,
            json!({"spec": {
            "namespaceSelector": {"matchLabels": {TIER: "gold"}},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}]}}),
        ));
        objects.push(kueue(
            "LocalQueue",
            "tiergate-gold",
            Some("team-a"),
            json!({"spec": {"clusterQueue": "tiergate-gold"}}),
        ));
        let namespaces = vec![WorkerNamespace {
            name: "team-a".to_owned(),
            labels: BTreeMap::from([(TIER.to_owned(), "gold".to_owned())]),
        }];
        Ok(WorkerDesired { objects, namespaces })
    })
}

fn retired_plan() -> WorkerPlan {
    Arc::new(|_: &Snapshot| Ok(WorkerDesired::retired()))
}

/// A worker over `fake` with its own worker-scope caches.
fn worker(
    name: &str,
    fake: &FakeCluster,
    plan: WorkerPlan,
    gate: Arc<WriteGate>,
    shutdown: &CancellationToken,
) -> Worker {
    let settings = CacheSettings {
        policy_name: "default".to_owned(),
        own_namespace: "tiergate-system".to_owned(),
        debounce: Duration::from_millis(10),
        ledger: None,
        scope: CacheScope::Worker,
    };
    let metrics = Arc::new(Metrics::new());
    let cache = ClusterCache::start(&fake.client, settings, metrics.clone(), shutdown);
    let reconciler = ReconcilerSettings {
        policy_name: "default".to_owned(),
        identity: "test".to_owned(),
        mutating_gate: false,
        gate_owner: None,
    };
    Worker::new(name.to_owned(), fake.client.clone(), cache, plan, reconciler, gate, metrics)
}

/// Waits (hang guard only) until `check` holds for `worker`'s caches.
async fn wait_until(worker: &Worker, what: &str, check: impl Fn(&ClusterCache) -> bool) {
    let reached = async {
        while !check(worker.cache()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), reached).await.unwrap_or_else(|_| panic!("never reached: {what}"));
}

/// Waits until the worker's caches show everything `gold_plan` applies (the writes streamed back): team-a's tier
/// label and one object of each applied kind.
async fn wait_until_cached(worker: &Worker) {
    wait_until(worker, "the applied objects in the caches", |cache| {
        let snapshot = cache.snapshot.load();
        let team_a = snapshot
            .namespaces
            .get("team-a")
            .is_some_and(|view| view.labels.get(TIER).is_some_and(|tier| tier == "gold"));
        let kinds = [
            KueueKind::ResourceFlavor,
            KueueKind::WorkloadPriorityClass,
            KueueKind::ClusterQueue,
            KueueKind::LocalQueue,
        ];
        team_a && kinds.iter().all(|kind| cache.owned.get(kind).is_some_and(|store| store.state().len() == 1))
    })
    .await;
}

fn converged(health: &WorkerHealth) -> (&Vec<String>, &Vec<String>) {
    match &health.state {
        WorkerState::Converged { applied, retired, .. } => (applied, retired),
        other => panic!("{} did not converge: {other:?}", health.cluster),
    }
}

#[tokio::test]
async fn two_workers_converge_from_their_own_nodes_and_a_second_pass_writes_nothing_on_either() {
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let west = FakeCluster::start(vec![node("west-1", "l4")], false, false);
    let shutdown = CancellationToken::new();
    let gate = WriteGate::always_open();
    let east_worker = worker("gpu-east", &east, gold_plan(), gate.clone(), &shutdown);
    let west_worker = worker("gpu-west", &west, gold_plan(), gate, &shutdown);
    assert!(east_worker.cache().wait_until_synced().await && west_worker.cache().wait_until_synced().await);

    let (east_health, west_health) = tokio::join!(reconcile_worker(&east_worker), reconcile_worker(&west_worker));
    let (east_applied, _) = converged(&east_health);
    assert_eq!(
        east_applied.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "Namespace team-a",
            "ResourceFlavor h100",
            "WorkloadPriorityClass tiergate-gold",
            "ClusterQueue tiergate-gold",
            "LocalQueue team-a/tiergate-gold",
        ])
    );
    assert!(
        converged(&west_health).0.contains(&"ResourceFlavor l4".to_owned()),
        "west's flavor comes from west's nodes"
    );
    assert!(east.object(&format!("{KUEUE}/resourceflavors"), "l4").is_none(), "nothing of west's lands on east");
    let queue = east.object(&format!("{KUEUE}/clusterqueues"), "tiergate-gold").unwrap();
    assert_eq!(queue["metadata"]["labels"]["tiergate.io/policy"], "default");
    assert!(queue["metadata"].get("ownerReferences").is_none(), "no owner reference to a uid the worker lacks");
    let namespace = east.object("/api/v1/namespaces", "team-a").unwrap();
    assert_eq!(namespace["metadata"]["labels"][TIER], "gold");
    // Namespace first (the LocalQueue lives in it), then the kinds in apply order.
    let east_writes = east.writes();
    assert_eq!(east_writes.first().map(String::as_str), Some("PATCH /api/v1/namespaces/team-a"));
    assert!(east_writes.last().unwrap().contains("/namespaces/team-a/localqueues/tiergate-gold"), "{east_writes:?}");

    wait_until_cached(&east_worker).await;
    wait_until_cached(&west_worker).await;
    let (east_writes, west_writes) = (east.writes().len(), west.writes().len());
    let (east_again, west_again) = tokio::join!(reconcile_worker(&east_worker), reconcile_worker(&west_worker));
    assert_eq!(converged(&east_again), (&vec![], &vec![]));
    assert_eq!(converged(&west_again), (&vec![], &vec![]));
    assert_eq!((east.writes().len(), west.writes().len()), (east_writes, west_writes), "steady state: zero writes");
    shutdown.cancel();
}

#[tokio::test]
async fn a_down_worker_is_reported_unreachable_and_written_nothing_while_the_other_converges() {
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let west = FakeCluster::start(vec![node("west-1", "l4")], true, false);
    let shutdown = CancellationToken::new();
    let gate = WriteGate::always_open();
    let east_worker = worker("gpu-east", &east, gold_plan(), gate.clone(), &shutdown);
    let west_worker = worker("gpu-west", &west, gold_plan(), gate, &shutdown);
    assert!(east_worker.cache().wait_until_synced().await);
    wait_until(&west_worker, "west's watches failing", |cache| !cache.health().is_reachable()).await;

    let (east_health, west_health) = tokio::join!(reconcile_worker(&east_worker), reconcile_worker(&west_worker));
    assert!(!converged(&east_health).0.is_empty());
    assert!(
        matches!(&west_health.state, WorkerState::Unreachable { failing_watches } if failing_watches.contains(&"Namespace"))
    );
    assert_eq!(west_health.reachable(), Some(false));
    assert_eq!(
        build_worker_condition(
            &west_health,
            None,
            &[],
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        )
        .status,
        "False"
    );
    assert!(west.writes().is_empty(), "nothing is sent to a down worker: {:?}", west.writes());
    shutdown.cancel();
}

#[tokio::test]
async fn a_recovering_worker_converges_once_its_api_server_answers_again() {
    let west = FakeCluster::start(vec![node("west-1", "l4")], true, false);
    let shutdown = CancellationToken::new();
    let west_worker = worker("gpu-west", &west, gold_plan(), WriteGate::always_open(), &shutdown);
    wait_until(&west_worker, "west's watches failing", |cache| !cache.health().is_reachable()).await;
    assert!(matches!(reconcile_worker(&west_worker).await.state, WorkerState::Unreachable { .. }));

    west.set_down(false);
    wait_until(&west_worker, "west synced and reachable", |cache| {
        cache.health().synced && cache.health().is_reachable()
    })
    .await;
    let health = reconcile_worker(&west_worker).await;
    assert!(converged(&health).0.contains(&"ClusterQueue tiergate-gold".to_owned()));
    assert!(west.object(&format!("{KUEUE}/clusterqueues"), "tiergate-gold").is_some());
    shutdown.cancel();
}

#[tokio::test]
async fn a_worker_removed_from_the_policy_is_pruned_only_there_and_only_while_reachable() {
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let west = FakeCluster::start(vec![node("west-1", "l4")], false, false);
    let shutdown = CancellationToken::new();
    let gate = WriteGate::always_open();
    let east_worker = worker("gpu-east", &east, gold_plan(), gate.clone(), &shutdown);
    let mut west_worker = worker("gpu-west", &west, gold_plan(), gate, &shutdown);
    assert!(east_worker.cache().wait_until_synced().await && west_worker.cache().wait_until_synced().await);
    converged(&reconcile_worker(&east_worker).await);
    converged(&reconcile_worker(&west_worker).await);
    wait_until_cached(&east_worker).await;
    wait_until_cached(&west_worker).await;
    let east_writes = east.writes().len();

    // West leaves the policy while it is down: nothing is pruned.
    west_worker.set_plan(retired_plan());
    west.set_down(true);
    wait_until(&west_worker, "west's watches failing", |cache| !cache.health().is_reachable()).await;
    let west_writes = west.writes().len();
    assert!(matches!(reconcile_worker(&west_worker).await.state, WorkerState::Unreachable { .. }));
    assert_eq!(west.writes().len(), west_writes);
    assert_eq!(west.count(&format!("{KUEUE}/clusterqueues")), 1);

    // Reachable again: west's objects are pruned there, its namespace stays without tiergate's labels.
    // Its watches stay marked failing until their next event; the pass asks the API server instead.
    west.set_down(false);
    let health = reconcile_worker(&west_worker).await;
    let (applied, retired) = converged(&health);
    assert!(applied.is_empty());
    assert_eq!(
        retired.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "LocalQueue team-a/tiergate-gold",
            "ClusterQueue tiergate-gold",
            "WorkloadPriorityClass tiergate-gold",
            "ResourceFlavor l4",
            "Namespace team-a (tier label released)",
        ])
    );
    for plural in ["localqueues", "clusterqueues", "workloadpriorityclasses", "resourceflavors"] {
        assert_eq!(west.count(&format!("{KUEUE}/{plural}")), 0, "{plural} left on west");
    }
    let namespace = west.object("/api/v1/namespaces", "team-a").unwrap();
    assert!(namespace["metadata"]["labels"].as_object().unwrap().is_empty(), "{namespace}");

    // East is untouched: a pass there still writes nothing.
    converged(&reconcile_worker(&east_worker).await);
    assert_eq!(east.writes().len(), east_writes);
    assert_eq!(east.count(&format!("{KUEUE}/clusterqueues")), 1);
    shutdown.cancel();
}

#[tokio::test]
async fn a_worker_whose_api_server_hangs_never_blocks_another_workers_engine() {
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let west = FakeCluster::start(vec![node("west-1", "l4")], false, true);
    let shutdown = CancellationToken::new();
    let gate = WriteGate::always_open();
    let (_trigger, triggers) = watch::channel(0_u64);
    let west_engine =
        start_worker(worker("gpu-west", &west, gold_plan(), gate.clone(), &shutdown), triggers.clone(), &shutdown);
    let mut east_engine = start_worker(worker("gpu-east", &east, gold_plan(), gate, &shutdown), triggers, &shutdown);

    let east_converged = async {
        while !matches!(east_engine.health.borrow().state, WorkerState::Converged { .. }) {
            east_engine.health.changed().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), east_converged).await.expect("east never converged (hang guard)");
    let stuck = async {
        while west.writes().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), stuck).await.expect("west never got a write (hang guard)");
    let west_state = west_engine.health.borrow().state.clone();
    assert!(
        matches!(west_state, WorkerState::Pending | WorkerState::NotSynced),
        "west's pass is stuck in its write, so it never reported an outcome after it: {west_state:?}"
    );
    west_engine.stop().await;
    east_engine.stop().await;
    shutdown.cancel();
}

#[tokio::test]
async fn a_replica_without_the_lease_reads_and_writes_nothing_on_a_worker() {
    let east = FakeCluster::start(vec![node("east-1", "h100")], false, false);
    let shutdown = CancellationToken::new();
    let east_worker = worker("gpu-east", &east, gold_plan(), WriteGate::new(), &shutdown);
    assert!(east_worker.cache().wait_until_synced().await);
    let health = reconcile_worker(&east_worker).await;
    assert_eq!(health.state, WorkerState::NotLeading);
    assert!(east.writes().is_empty());
    shutdown.cancel();
}
