//! Tests of the cache unit: lean decoding, the snapshot fold, the LocalQueue trigger, and whole caches against
//! mocked API servers (tower-test), including two caches of two servers side by side.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::Client;
use kube::core::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::decode::{LAST_APPLIED_ANNOTATION, build_extended_requests, build_pod_view};
use super::fingerprint::build_local_queue_trigger;
use super::*;
use crate::metrics::Metrics;
use crate::view::{NamespaceView, PodView};

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
    assert_eq!(view.labels.get("gpu.nvidia.com/class"), Some("h100"));
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
    (200, json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
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
fn start_test_caches(client: &Client, shutdown: &CancellationToken) -> ClusterCache {
    start_scoped_caches(client, CacheScope::Management, shutdown)
}

/// The caches of `scope` over `client` with a short debounce, for the `default` policy.
fn start_scoped_caches(client: &Client, scope: CacheScope, shutdown: &CancellationToken) -> ClusterCache {
    ClusterCache::start(client, test_settings(scope), Arc::new(Metrics::new()), shutdown)
}

fn test_settings(scope: CacheScope) -> CacheSettings {
    CacheSettings {
        policy_name: "default".to_owned(),
        own_namespace: "tiergate-system".to_owned(),
        debounce: Duration::from_millis(10),
        ledger: None,
        scope,
    }
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
            if tier.is_some_and(|labels| labels.get("tenant.kubenexus.io/tier") == Some("silver")) {
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
    let node: NodeLite = serde_json::from_value(json!({"metadata": {"name": "n", "resourceVersion": "43"}})).unwrap();
    assert_eq!(node.metadata.resource_version.as_deref(), Some("43"));
}

#[test]
fn an_owner_decodes_to_its_identity_only_through_a_metadata_request() {
    use kube::Resource;
    let owner: owners::OwnerMeta = serde_json::from_value(json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "9d0c5f0e-0000-4000-8000-000000000001",
                     "resourceVersion": "44", "labels": {"a": "b"}, "annotations": {"c": "d"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "y", "uid": "z"}],
                     "managedFields": [{"manager": "kubectl", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]}
    }))
    .unwrap();
    let expected = kube::core::ObjectMeta {
        name: Some("train".into()),
        namespace: Some("team-a".into()),
        uid: Some("9d0c5f0e-0000-4000-8000-000000000001".into()),
        resource_version: Some("44".into()),
        ..Default::default()
    };
    assert_eq!(owner.metadata, expected, "labels, annotations, owner references and managedFields are skipped");
    assert!(owners::OwnerMeta::metadata_api(), "listed and watched as PartialObjectMetadata, not whole objects");
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
    assert_eq!(snapshot.namespaces["team-a"].labels.get("tenant.kubenexus.io/tier"), Some("gold"));
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
        claim_templates: vec![],
        bindings: vec![],
        owners: None,
        synced: true,
    };
    let snapshot = build_snapshot(&inputs);
    assert!(snapshot.policy.is_some());
    assert!(snapshot.synced);
    assert_eq!(snapshot.pods.len(), 1, "a pod matched by both watches appears once");
    assert_eq!(snapshot.pods[0].node_name.as_deref(), Some("gpu-1"));
    assert_eq!(snapshot.namespaces["team-a"].labels.get("tenant.kubenexus.io/tier"), Some("gold"));
    assert!(!snapshot.namespaces.contains_key("leaving"), "a terminating namespace gets no queue");
    assert_eq!(snapshot.own_namespace.as_deref(), Some("tiergate-system"));
    assert!(Arc::ptr_eq(&snapshot.namespaces["team-a"], &inputs.namespaces[0]), "shared with the store, not copied");
    assert!(Arc::ptr_eq(&snapshot.nodes["gpu-1"], &inputs.nodes[0]), "shared with the store, not copied");
}

/// The inputs of a snapshot with only `policies` read from the stores.
fn inputs_with_policies(policies: Vec<Arc<TierPolicy>>, synced: bool) -> SnapshotInputs<'static> {
    SnapshotInputs {
        policy_name: "default",
        own_namespace: "tiergate-system",
        policies,
        namespaces: vec![],
        nodes: vec![],
        local_queues: vec![],
        pods: vec![],
        replica_sets: vec![],
        claim_templates: vec![],
        bindings: vec![],
        owners: None,
        synced,
    }
}

#[test]
fn a_store_that_finishes_listing_while_the_stores_are_read_leaves_that_snapshot_unsynced() {
    // The fault, at the exact step: the policy store's first list completes, and the sync barrier marks the caches
    // synced, after the snapshot loop read that store (empty) and before it read the flag.
    let policy = Arc::new(crate::inputs::load_policy(None).unwrap());
    let mut writer: Writer<TierPolicy> = Writer::new(());
    let store = writer.as_reader();
    writer.apply_watcher_event(&watcher::Event::Init);
    let synced = std::sync::atomic::AtomicBool::new(false);
    let (marked, policies) = snapshot::read_after_sync_flag(&synced, || {
        let read = store.state();
        writer.apply_watcher_event(&watcher::Event::InitApply(policy.as_ref().clone()));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        synced.store(true, std::sync::atomic::Ordering::Release);
        read
    });
    let torn = build_snapshot(&inputs_with_policies(policies, marked));
    assert!(
        !torn.synced,
        "a snapshot read before the last store listed is marked synced without the served policy: the webhook would \
         answer from it and the leader would prune the in-server gate"
    );
    // The barrier's notification rebuilds it: now every store had listed before any was read.
    let (marked, policies) = snapshot::read_after_sync_flag(&synced, || store.state());
    let whole = build_snapshot(&inputs_with_policies(policies, marked));
    assert!(whole.synced && whole.policy.is_some());
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

/// A mocked API server whose lists answer from `items` (path -> items) and whose watches are held open until the
/// test pushes events for that path; it records every request path, and answers 503 to everything while down.
struct ScriptedServer {
    client: Client,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
    events: tokio::sync::mpsc::UnboundedSender<(String, Vec<serde_json::Value>)>,
}

impl ScriptedServer {
    fn start(items: BTreeMap<&'static str, Vec<serde_json::Value>>, down: bool) -> Self {
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = paths.clone();
        let (events, mut pushed) = tokio::sync::mpsc::unbounded_channel::<(String, Vec<serde_json::Value>)>();
        tokio::spawn(async move {
            let mut held: Vec<(String, tower_test::mock::SendResponse<http::Response<kube::client::Body>>)> = vec![];
            let mut pending: Vec<(String, Vec<serde_json::Value>)> = vec![];
            let respond = |send: tower_test::mock::SendResponse<_>, status: u16, body: Vec<u8>| {
                send.send_response(
                    http::Response::builder().status(status).body(kube::client::Body::from(body)).unwrap(),
                );
            };
            let stream_events = |events: &[serde_json::Value]| {
                events.iter().map(|event| format!("{event}\n")).collect::<String>().into_bytes()
            };
            loop {
                tokio::select! {
                    request = handle.next_request() => {
                        let Some((request, send)) = request else { return };
                        let path = request.uri().path().to_owned();
                        recorded.lock().unwrap().push(path.clone());
                        if down {
                            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                "reason": "ServiceUnavailable", "code": 503, "message": "down"});
                            respond(send, 503, serde_json::to_vec(&status).unwrap());
                        } else if request.uri().query().unwrap_or_default().contains("watch=true") {
                            match pending.iter().position(|(waiting, _)| *waiting == path) {
                                Some(index) => respond(send, 200, stream_events(&pending.remove(index).1)),
                                None => held.push((path, send)),
                            }
                        } else if is_discovery(&path) {
                            let (code, body) = discovery(&path);
                            respond(send, code, serde_json::to_vec(&body).unwrap());
                        } else {
                            let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "10"},
                                              "items": items.get(path.as_str()).cloned().unwrap_or_default()});
                            respond(send, 200, serde_json::to_vec(&list).unwrap());
                        }
                    }
                    event = pushed.recv() => {
                        let Some((path, events)) = event else { continue };
                        match held.iter().position(|(watching, _)| *watching == path) {
                            Some(index) => respond(held.remove(index).1, 200, stream_events(&events)),
                            None => pending.push((path, events)),
                        }
                    }
                }
            }
        });
        Self { client: Client::new(service, "default"), paths, events }
    }

    fn requested(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }
}

fn namespace_item(name: &str, tier: &str) -> serde_json::Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"name": name, "resourceVersion": "3", "labels": {"tenant.kubenexus.io/tier": tier}}})
}

fn node_item(name: &str, class: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "resourceVersion": "4", "labels": {"gpu.nvidia.com/class": class}},
           "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
}

fn cluster_items(namespace: (&str, &str), node: (&str, &str)) -> BTreeMap<&'static str, Vec<serde_json::Value>> {
    BTreeMap::from([
        ("/api/v1/namespaces", vec![namespace_item(namespace.0, namespace.1)]),
        ("/api/v1/nodes", vec![node_item(node.0, node.1)]),
    ])
}

/// Waits (hang guard only) until `cache`'s snapshot satisfies `done`.
async fn wait_for(cache: &ClusterCache, what: &str, done: impl Fn(&crate::view::Snapshot) -> bool) {
    let mut changes = cache.changes.clone();
    let reached = async {
        while !done(&cache.snapshot.load()) {
            changes.changed().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), reached).await.unwrap_or_else(|_| panic!("never reached: {what}"));
}

#[tokio::test]
async fn two_cluster_caches_side_by_side_each_see_only_their_own_servers_namespaces_and_nodes() {
    let management = ScriptedServer::start(cluster_items(("team-a", "gold"), ("mgmt-gpu", "h100")), false);
    let worker = ScriptedServer::start(cluster_items(("team-w", "silver"), ("worker-gpu", "l4")), false);
    let shutdown = CancellationToken::new();
    let management_cache = start_scoped_caches(&management.client, CacheScope::Management, &shutdown);
    let worker_cache = start_scoped_caches(&worker.client, CacheScope::Worker, &shutdown);
    assert!(management_cache.wait_until_synced().await && worker_cache.wait_until_synced().await);

    let seen = |cache: &ClusterCache| {
        let snapshot = cache.snapshot.load();
        (snapshot.namespaces.keys().cloned().collect::<Vec<_>>(), snapshot.nodes.keys().cloned().collect::<Vec<_>>())
    };
    assert_eq!(seen(&management_cache), (vec!["team-a".to_owned()], vec!["mgmt-gpu".to_owned()]));
    assert_eq!(seen(&worker_cache), (vec!["team-w".to_owned()], vec!["worker-gpu".to_owned()]));
    assert_eq!(worker_cache.snapshot.load().nodes["worker-gpu"].allocatable["nvidia.com/gpu"], 8);
    assert_eq!((management_cache.scope(), worker_cache.scope()), (CacheScope::Management, CacheScope::Worker));
    assert_eq!(management_cache.owned.len(), KueueKind::ALL.len());
    assert_eq!(worker_cache.owned.len(), KueueKind::ALL.len());

    // Stopping one cache leaves the other watching: a relabel on the worker still reaches its snapshot.
    management_cache.shutdown();
    assert!(management_cache.is_shut_down() && !worker_cache.is_shut_down());
    let relabeled = json!({"type": "MODIFIED", "object": {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": "team-w", "resourceVersion": "11", "labels": {"tenant.kubenexus.io/tier": "gold"}}}});
    worker.events.send(("/api/v1/namespaces".to_owned(), vec![relabeled])).unwrap();
    wait_for(&worker_cache, "team-w relabeled on the worker", |snapshot| {
        snapshot
            .namespaces
            .get("team-w")
            .is_some_and(|view| view.labels.get("tenant.kubenexus.io/tier") == Some("gold"))
    })
    .await;
    assert!(!management.requested().iter().any(|path| path.contains("team-w")));
    shutdown.cancel();
}

#[tokio::test]
async fn a_worker_scoped_cache_watches_only_namespaces_nodes_and_kueue_objects() {
    let worker = ScriptedServer::start(cluster_items(("team-w", "silver"), ("worker-gpu", "l4")), false);
    let shutdown = CancellationToken::new();
    let metrics = Arc::new(Metrics::new());
    let cache = ClusterCache::start(&worker.client, test_settings(CacheScope::Worker), metrics.clone(), &shutdown);
    assert!(cache.wait_until_synced().await);

    let mut requested = worker.requested();
    requested.sort();
    requested.dedup();
    let mut expected = vec!["/api/v1/namespaces".to_owned(), "/api/v1/nodes".to_owned()];
    expected.extend(
        KueueKind::ALL
            .into_iter()
            .filter(|kind| !kind.is_optional())
            .map(|kind| format!("/apis/{}/{}/{}", kind.group(), kind.version(), kind.plural())),
    );
    // The discovery requests: whether the optional kinds (MutatingAdmissionPolicy, TierGateParameters,
    // DeviceClass, Karpenter's NodePool) are served; this server answers 404 for every group, so none is watched.
    expected.push("/apis/admissionregistration.k8s.io/v1".to_owned());
    expected.push("/apis/karpenter.sh/v1".to_owned());
    expected.push("/apis/resource.k8s.io/v1".to_owned());
    expected.push("/apis/tiergate.io/v1alpha1".to_owned());
    expected.sort();
    assert_eq!(requested, expected, "no TierPolicy, pod, ReplicaSet, owner-kind or other discovery request");
    let snapshot = cache.snapshot.load();
    assert!(snapshot.policy.is_none());
    assert!(snapshot.pods.is_empty());
    assert!(snapshot.owners.is_none(), "a worker's caches cannot verify owners");
    assert_eq!(cache.health(), CacheHealth { synced: true, failing_watches: vec![], staleness_seconds: 0.0 });
    assert!(*cache.changes.borrow() > 0);
    assert_eq!(metrics.queue_depth.get(), 0, "the management reconciler's gauge is left alone");
    shutdown.cancel();
}

#[tokio::test]
async fn a_cache_over_an_unreachable_server_is_unsynced_and_names_its_failing_watches() {
    let down = ScriptedServer::start(BTreeMap::new(), true);
    let shutdown = CancellationToken::new();
    let cache = start_scoped_caches(&down.client, CacheScope::Worker, &shutdown);
    let failing = async {
        while cache.health().failing_watches.len() < 2 + KueueKind::ALL.len() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), failing).await.expect("the watches never reported failing");
    let health = cache.health();
    assert!(!health.synced && !health.is_reachable());
    assert!(health.failing_watches.contains(&"Namespace") && health.failing_watches.contains(&"ClusterQueue"));
    assert!(!cache.is_synced());
    shutdown.cancel();
}
