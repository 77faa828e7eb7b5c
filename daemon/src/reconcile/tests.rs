//! Mocked-API-server tests of the reconciler (tower-test, as kube-rs controller-rs does): which calls it makes,
//! in which order, and that a steady state makes none.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::core::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::desired::{build_desired_set, desired_objects};
use super::kinds::KueueKind;
use super::lease::WriteGate;
use super::status::{StatusInput, build_status};
use super::*;
use crate::inputs::load_policy;
use crate::view::NamespaceView;

mod status_owners;

/// One request the reconciler sent.
#[derive(Clone, Debug)]
struct Call {
    method: String,
    path: String,
    query: String,
    body: Value,
}

impl Call {
    fn is_write(&self) -> bool {
        self.method != "GET"
    }

    fn summary(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

type Responder = Box<dyn FnMut(&Call) -> (StatusCode, Value) + Send>;

/// A mocked API server answering with `responder` and recording every call.
struct MockApi {
    calls: Arc<Mutex<Vec<Call>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MockApi {
    fn start(mut responder: Responder) -> (kube::Client, Self) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = calls.clone();
        let task = tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap();
                let call = Call {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_owned(),
                    query: parts.uri.query().unwrap_or_default().to_owned(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                let (status, reply) = responder(&call);
                recorded.lock().unwrap().push(call);
                let response = Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap();
                send.send_response(response);
            }
        });
        (kube::Client::new(service, "default"), Self { calls, task })
    }

    /// The calls made, once the client (inside the context) is gone.
    async fn finish(self, ctx: Arc<Context>) -> Vec<Call> {
        drop(ctx);
        self.task.await.unwrap();
        Arc::try_unwrap(self.calls).unwrap().into_inner().unwrap()
    }
}

/// Answers like a well-behaved API server: applies and status patches echo, deletes succeed, events are created.
fn echo_server(policy: TierPolicy) -> impl FnMut(&Call) -> (StatusCode, Value) + Send {
    move |call| match call.method.as_str() {
        "PATCH" if call.path.ends_with("/status") => {
            let mut echoed = serde_json::to_value(&policy).unwrap();
            echoed["status"] = call.body["status"].clone();
            (StatusCode::OK, echoed)
        }
        "PATCH" | "POST" => (StatusCode::OK, call.body.clone()),
        "DELETE" => (StatusCode::OK, json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})),
        _ => not_found(),
    }
}

/// The API server's answer to a failed request: `status` with a `Status` body carrying `reason` and `message`.
fn failure(status: StatusCode, reason: &str, message: &str) -> (StatusCode, Value) {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
        "code": status.as_u16(), "message": message});
    (status, body)
}

fn not_found() -> (StatusCode, Value) {
    failure(StatusCode::NOT_FOUND, "NotFound", "not found")
}

fn conflict() -> (StatusCode, Value) {
    failure(StatusCode::CONFLICT, "Conflict", "the object has been modified")
}

const TIER_LABEL: &str = "tenant.kubenexus.io/tier";

fn sample_policy() -> TierPolicy {
    let mut policy = load_policy(None).unwrap();
    policy.metadata.uid = Some("policy-uid".to_owned());
    policy.metadata.generation = Some(1);
    policy
}

fn snapshot_with(namespaces: &[(&str, &str)]) -> SharedSnapshot {
    let namespaces = namespaces
        .iter()
        .map(|(name, tier)| {
            let labels = BTreeMap::from([(TIER_LABEL.to_owned(), (*tier).to_owned())]).into();
            (
                (*name).to_owned(),
                Arc::new(NamespaceView { name: (*name).to_owned(), labels, ..NamespaceView::default() }),
            )
        })
        .collect();
    Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot { namespaces, synced: true, ..Snapshot::default() }))
}

/// Stores as the watches would fill them with `objects`.
fn stores_with(objects: Vec<DynamicObject>) -> OwnedStores {
    let mut writers: BTreeMap<KueueKind, Writer<LiveObject>> =
        KueueKind::ALL.into_iter().map(|kind| (kind, Writer::new(kind))).collect();
    for writer in writers.values_mut() {
        writer.apply_watcher_event(&watcher::Event::Init);
    }
    for object in objects {
        let kind = KueueKind::of(&object).unwrap();
        let event = super::live::build_live_event(kind, watcher::Event::InitApply(object));
        writers.get_mut(&kind).unwrap().apply_watcher_event(&event);
    }
    writers
        .into_iter()
        .map(|(kind, mut writer)| {
            writer.apply_watcher_event(&watcher::Event::InitDone);
            (kind, writer.as_reader())
        })
        .collect()
}

/// What the API server returns for an applied object: our body plus identity, defaults and status.
fn as_live(mut object: DynamicObject) -> DynamicObject {
    let name = object.metadata.name.clone().unwrap();
    object.metadata.uid = Some(format!("uid-{name}"));
    object.metadata.resource_version = Some("42".to_owned());
    if KueueKind::of(&object) == Some(KueueKind::LocalQueue) {
        object.data["spec"]["stopPolicy"] = json!("None");
        object.data["status"] = json!({"pendingWorkloads": 0, "admittedWorkloads": 0});
    }
    object
}

/// What the reconciler applies for `policy` over `snapshot` where discovery cannot tell whether
/// MutatingAdmissionPolicy is served (as in these mocked API servers): everything but the gate's mutating half.
fn applied_objects(policy: &TierPolicy, snapshot: &SharedSnapshot) -> Vec<DynamicObject> {
    let mut objects = desired_objects(policy, &snapshot.load().cluster_view()).unwrap();
    objects.retain(|object| !KueueKind::of(object).is_some_and(KueueKind::is_mutating_half));
    objects
}

/// The objects a converged cluster holds for `policy` over `snapshot`.
fn converged_objects(policy: &TierPolicy, snapshot: &SharedSnapshot) -> Vec<DynamicObject> {
    let objects = applied_objects(policy, snapshot);
    build_desired_set(policy, objects, None)
        .unwrap()
        .objects
        .into_iter()
        .map(|desired| as_live(desired.object))
        .collect()
}

/// `policy` with the status a converged reconcile leaves on it.
fn with_converged_status(mut policy: TierPolicy, snapshot: &SharedSnapshot) -> TierPolicy {
    let objects = applied_objects(&policy, snapshot);
    let set = build_desired_set(&policy, objects, None).unwrap();
    let mut object_counts = BTreeMap::new();
    for object in &set.objects {
        *object_counts.entry(object.kind.name().to_owned()).or_insert(0) += 1;
    }
    let input = StatusInput::Applied {
        tier_count: 3,
        object_counts,
        migrations: vec![],
        flavor_migrations: Vec::new(),
        shrunk_tiers: vec![],
        mutating_policies_served: None,
        validating_policies_served: None,
        quota_windows: Vec::new(),
    };
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    policy.status = Some(build_status(None, policy.metadata.generation, &input, &now));
    policy
}

fn context(client: kube::Client, snapshot: SharedSnapshot, live: OwnedStores, gate: Arc<WriteGate>) -> Arc<Context> {
    let settings = ReconcilerSettings {
        policy_name: "default".to_owned(),
        identity: "test".to_owned(),
        mutating_gate: false,
        gate_owner: None,
    };
    Context::new(client, settings, snapshot, live, gate, Arc::new(Metrics::new()))
}

fn kind_of_path(path: &str) -> Option<KueueKind> {
    KueueKind::ALL.into_iter().find(|kind| path.contains(&format!("/{}", kind.plural())))
}

fn contains_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().any(contains_null),
        Value::Object(map) => map.values().any(contains_null),
        _ => false,
    }
}

#[tokio::test]
async fn cold_start_applies_every_object_in_kind_order_then_status_then_an_applied_event() {
    let policy = sample_policy();
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "bronze")]);
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, stores_with(vec![]), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let applies: Vec<&Call> = calls.iter().filter(|call| kind_of_path(&call.path).is_some()).collect();
    assert!(
        applies.iter().all(|call| call.method == "PATCH"),
        "{:?}",
        calls.iter().map(Call::summary).collect::<Vec<_>>()
    );
    assert!(
        applies.iter().all(|call| call.query.contains("fieldManager=tiergate") && call.query.contains("force=true"))
    );
    assert!(applies.iter().all(|call| !contains_null(&call.body)), "apply bodies must not carry nulls");
    let kinds: Vec<KueueKind> = applies.iter().filter_map(|call| kind_of_path(&call.path)).collect();
    let mut sorted = kinds.clone();
    // The gate first, then the rest in kind order: flavors first, LocalQueues last.
    sorted.sort_by_key(|kind| (!kind.is_gate(), *kind));
    assert_eq!(kinds, sorted, "objects must be applied gate first, then flavors first, LocalQueues last");
    assert_eq!(kinds.iter().filter(|kind| **kind == KueueKind::LocalQueue).count(), 2);
    assert!(
        applies
            .iter()
            .any(|call| call.path == "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/tiergate-gold")
    );

    let after: Vec<String> = calls[applies.len()..].iter().map(Call::summary).collect();
    assert_eq!(
        after,
        vec![
            "POST /apis/events.k8s.io/v1/namespaces/default/events".to_owned(),
            "PATCH /apis/tiergate.io/v1alpha1/tierpolicies/default/status".to_owned(),
        ]
    );
    let event = &calls[applies.len()];
    assert_eq!(event.body["reason"], "Applied");
    let status = &calls[applies.len() + 1].body["status"];
    assert_eq!(status["objectCounts"]["LocalQueue"], 2);
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["status"], "True");
}

#[tokio::test]
async fn cold_start_applies_the_gate_first_then_each_local_queue_once_after_every_kueue_object() {
    let policy = sample_policy();
    let names: Vec<String> = (0..40).map(|index| format!("team-{index:02}")).collect();
    let tiered: Vec<(&str, &str)> = names
        .iter()
        .enumerate()
        .map(|(index, name)| (name.as_str(), ["gold", "silver", "bronze"][index % 3]))
        .collect();
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot_with(&tiered), stores_with(vec![]), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let kinds: Vec<KueueKind> = calls.iter().filter_map(|call| kind_of_path(&call.path)).collect();
    let first_kueue = kinds.iter().position(|kind| !kind.is_gate()).unwrap();
    assert!(first_kueue > 0, "the gate is applied: {kinds:?}");
    assert!(
        kinds[..first_kueue].iter().all(|kind| kind.is_gate()),
        "the in-server gate comes first: until the API server enforces it, a workload the webhook does not answer \
         for is stored unconstrained"
    );
    let first_queue = kinds.iter().position(|kind| *kind == KueueKind::LocalQueue).unwrap();
    assert!(kinds[first_kueue..first_queue].iter().all(|kind| kind.is_kueue()), "the Kueue objects they refer to");
    let last_queue = kinds.iter().rposition(|kind| *kind == KueueKind::LocalQueue).unwrap();
    assert!(kinds[first_queue..=last_queue].iter().all(|kind| *kind == KueueKind::LocalQueue), "in one run");
    assert!(kinds[last_queue + 1..].is_empty(), "nothing after them: {kinds:?}");
    let mut queue_paths: Vec<&str> = calls
        .iter()
        .filter(|call| kind_of_path(&call.path) == Some(KueueKind::LocalQueue))
        .map(|call| call.path.as_str())
        .collect();
    queue_paths.sort_unstable();
    let mut expected: Vec<String> = tiered
        .iter()
        .map(|(name, tier)| format!("/apis/kueue.x-k8s.io/v1beta2/namespaces/{name}/localqueues/tiergate-{tier}"))
        .collect();
    expected.sort_unstable();
    assert_eq!(queue_paths, expected, "every LocalQueue is applied exactly once, in any order within its kind");
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    assert_eq!(status["objectCounts"]["LocalQueue"], 40);
}

/// One reconcile of the sample policy over three tiered namespaces and `live`, against an API server that answers
/// `refusal` to the PATCH of the path ending in `refused` and echoes everything else; the error and every call.
async fn reconcile_with_refused_patch(
    live: Vec<DynamicObject>,
    refused: &'static str,
    refusal: (StatusCode, Value),
) -> (ReconcileError, Vec<Call>) {
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "silver"), ("team-c", "bronze")]);
    let policy = sample_policy();
    let mut echo = echo_server(policy.clone());
    let responder = move |call: &Call| {
        if call.method == "PATCH" && call.path.ends_with(refused) {
            return refusal.clone();
        }
        echo(call)
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let ctx = context(client, snapshot, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();
    let error = reconcile(Arc::new(policy), ctx.clone()).await.unwrap_err();
    (error, api.finish(ctx).await)
}

#[tokio::test]
async fn failed_local_queue_apply_stops_the_reconcile_before_pruning_and_reports_it() {
    let mut live = vec![owned(KueueKind::LocalQueue, Some("gone"), "tiergate-gold", Some("default"))];
    live.push(owned(KueueKind::ClusterQueue, None, "tiergate-platinum", Some("default")));
    let etcd_down = failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", "etcd is down");
    let (error, calls) =
        reconcile_with_refused_patch(live, "/namespaces/team-b/localqueues/tiergate-silver", etcd_down).await;

    assert_eq!(error.reason(), "apply_object");
    assert!(error.to_string().contains("team-b/tiergate-silver"), "{error}");
    assert!(!calls.iter().any(|call| call.method == "DELETE"), "nothing is pruned after a failed apply");
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    assert_eq!(status["conditions"][0]["status"], "False");
}

#[tokio::test]
async fn an_object_the_api_server_refuses_does_not_stop_the_rest_of_the_policy_and_is_reported_by_name() {
    let live = vec![owned(KueueKind::ClusterQueue, None, "tiergate-platinum", Some("default"))];
    let refused = "Kueue's CRD rule refuses it: topologyName is immutable when topologyName is set";
    let invalid = failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", refused);
    let (error, calls) = reconcile_with_refused_patch(live, "/resourceflavors/h100", invalid).await;

    assert_eq!(error.reason(), "unapplied_objects");
    assert_eq!(error.blocker(), Some(BlockedReason::ReconcileFailing));
    let message = error.to_string();
    assert!(message.starts_with("failed to apply 1 object(s); every other object"), "{message}");
    assert!(message.contains("ResourceFlavor h100") && message.contains("topologyName is immutable"), "{message}");
    let applied = |suffix: &str| calls.iter().any(|call| call.method == "PATCH" && call.path.ends_with(suffix));
    for suffix in [
        "/resourceflavors/l4",
        "/clusterqueues/tiergate-gold",
        "/clusterqueues/tiergate-bronze",
        "/namespaces/team-a/localqueues/tiergate-gold",
        "/namespaces/team-c/localqueues/tiergate-bronze",
        "/validatingadmissionpolicybindings/tiergate-gate-bronze",
    ] {
        assert!(applied(suffix), "{suffix} is applied although h100 was refused");
    }
    assert!(!calls.iter().any(|call| call.method == "DELETE"), "nothing is pruned while an object fails");
    let event = calls
        .iter()
        .find(|call| call.method == "POST" && call.path.contains("/events") && call.body["reason"] == "ApplyFailed")
        .expect("an ApplyFailed Event");
    let note = event.body["note"].as_str().or(event.body["message"].as_str()).unwrap_or_default();
    assert!(note.contains("ResourceFlavor h100"), "{}", event.body);
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    assert!(status["lastError"].as_str().unwrap_or_default().contains("ResourceFlavor h100"), "{status}");
}

#[tokio::test]
async fn steady_state_makes_no_calls_at_all() {
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "silver")]);
    let policy = with_converged_status(sample_policy(), &snapshot);
    let live = stores_with(converged_objects(&policy, &snapshot));
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, live, WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap();
    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    assert!(
        calls.is_empty(),
        "steady state must not call the API: {:?}",
        calls.iter().map(Call::summary).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn restart_over_an_unchanged_cluster_only_reads_discovery() {
    let snapshot = snapshot_with(&[("team-a", "gold")]);
    let policy = with_converged_status(sample_policy(), &snapshot);
    let live = stores_with(converged_objects(&policy, &snapshot));
    let resources: Vec<Value> = KueueKind::ALL
        .into_iter()
        .map(|kind| json!({"name": kind.plural(), "singularName": "", "namespaced": kind.namespaced(), "kind": kind.name(), "verbs": ["get"]}))
        .collect();
    let responder = move |call: &Call| match call.path.as_str() {
        "/apis" => (
            StatusCode::OK,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{"name": "kueue.x-k8s.io", "versions": [
                {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"},
                {"groupVersion": "kueue.x-k8s.io/v1beta1", "version": "v1beta1"}]}]}),
        ),
        "/apis/kueue.x-k8s.io/v1beta2" => (
            StatusCode::OK,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kueue.x-k8s.io/v1beta2", "resources": resources}),
        ),
        _ => not_found(),
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let ctx = context(client, snapshot, live, WriteGate::always_open());

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let summaries: Vec<String> = calls.iter().map(Call::summary).collect();
    // The third read asks which admission policies are served (not found here: unknown, so the live gate is kept).
    assert_eq!(
        summaries,
        vec![
            "GET /apis".to_owned(),
            "GET /apis/kueue.x-k8s.io/v1beta2".to_owned(),
            "GET /apis/admissionregistration.k8s.io/v1".to_owned()
        ]
    );
    assert!(!calls.iter().any(Call::is_write));
}

#[tokio::test]
async fn a_live_cluster_queue_offering_more_than_the_policy_names_its_tier_in_the_quota_reduced_condition() {
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "bronze")]);
    let policy = with_converged_status(sample_policy(), &snapshot);
    let mut live = converged_objects(&policy, &snapshot);
    // The bronze queue as an older tiergate applied it: a second flavor with the tier's full quota again.
    let bronze = live.iter_mut().find(|object| object.metadata.name.as_deref() == Some("tiergate-bronze")).unwrap();
    let flavors = bronze.data["spec"]["resourceGroups"][0]["flavors"].as_array_mut().unwrap();
    let mut copy = flavors[0].clone();
    copy["name"] = json!("od-spot-ondemand");
    flavors.push(copy);
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let applied: Vec<&str> =
        calls.iter().filter(|call| kind_of_path(&call.path).is_some()).map(|c| c.path.as_str()).collect();
    assert_eq!(applied, ["/apis/kueue.x-k8s.io/v1beta2/clusterqueues/tiergate-bronze"]);
    let status = calls.iter().find(|call| call.path.ends_with("/status")).unwrap();
    let conditions = status.body["status"]["conditions"].as_array().unwrap();
    let quota = conditions.iter().find(|condition| condition["type"] == "QuotaReduced").unwrap();
    assert_eq!(quota["status"], "True");
    assert_eq!(quota["reason"], "EffectiveQuotaShrank");
    assert!(quota["message"].as_str().unwrap().contains("tiers bronze now offer less"), "{quota}");
}

fn owned(kind: KueueKind, namespace: Option<&str>, name: &str, policy_label: Option<&str>) -> DynamicObject {
    let mut labels = json!({});
    if let Some(policy) = policy_label {
        labels = json!({"app.kubernetes.io/managed-by": "tiergate", "tiergate.io/policy": policy});
    }
    let spec = if kind == KueueKind::LocalQueue { json!({"clusterQueue": "tiergate-gold"}) } else { json!({}) };
    let mut metadata = json!({"name": name, "labels": labels, "uid": format!("uid-{name}"), "resourceVersion": "7"});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind.name(), "metadata": metadata, "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn prune_deletes_only_objects_carrying_both_ownership_labels_local_queues_first() {
    let snapshot = snapshot_with(&[("team-a", "gold")]);
    let policy = with_converged_status(sample_policy(), &snapshot);
    let mut live = converged_objects(&policy, &snapshot);
    live.push(owned(KueueKind::ClusterQueue, None, "tiergate-platinum", Some("default")));
    live.push(owned(KueueKind::ClusterQueue, None, "tiergate-other", Some("other-policy")));
    live.push(owned(KueueKind::ClusterQueue, None, "tiergate-unlabelled", None));
    live.push(owned(KueueKind::LocalQueue, Some("gone"), "tiergate-gold", Some("default")));
    live.push(owned(KueueKind::LocalQueue, Some("users"), "their-queue", None));
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let deletes: Vec<&Call> = calls.iter().filter(|call| call.method == "DELETE").collect();
    let paths: Vec<&str> = deletes.iter().map(|call| call.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/gone/localqueues/tiergate-gold",
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/tiergate-platinum",
        ]
    );
    assert_eq!(deletes[1].body["preconditions"], json!({"uid": "uid-tiergate-platinum", "resourceVersion": "7"}));
    assert!(calls.iter().all(|call| call.method != "PATCH" || call.path.ends_with("/status")), "nothing re-applied");
    let pruned = calls.iter().find(|call| call.method == "POST").unwrap();
    assert_eq!(pruned.body["reason"], "Pruned");
}

/// team-a, converged in gold, relabelled silver: the policy with its converged status, the live objects with
/// gold's LocalQueue edited by `edit_queue` (its stop policy, its counts), and the snapshot after the relabel.
fn team_a_gold_to_silver(edit_queue: impl Fn(&mut Value)) -> (TierPolicy, Vec<DynamicObject>, SharedSnapshot) {
    let before = snapshot_with(&[("team-a", "gold")]);
    let policy = with_converged_status(sample_policy(), &before);
    let mut live = converged_objects(&policy, &before);
    for object in &mut live {
        if KueueKind::of(object) == Some(KueueKind::LocalQueue) {
            edit_queue(&mut object.data);
        }
    }
    (policy, live, snapshot_with(&[("team-a", "silver")]))
}

#[tokio::test]
async fn tier_change_creates_the_new_queue_and_stops_the_occupied_old_one() {
    let (policy, live, after) = team_a_gold_to_silver(|queue| {
        queue["status"] = json!({"pendingWorkloads": 1, "admittedWorkloads": 2, "reservingWorkloads": 2});
    });
    let mut echo = echo_server(policy.clone());
    let (client, api) = MockApi::start(Box::new(move |call: &Call| match (call.method.as_str(), call.path.as_str()) {
        ("GET", TEAM_A_WORKLOADS) => (StatusCode::OK, workload_list(&[pending_workload("train", "uid-train")])),
        ("PATCH", "/apis/batch/v1/namespaces/team-a/jobs/train") => (
            StatusCode::OK,
            json!({
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "team-a"}}),
        ),
        _ => echo(call),
    }));
    let ctx = context(client, after, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let summaries: Vec<String> = calls.iter().map(Call::summary).collect();
    let create = summaries.iter().position(|call| call.ends_with("/namespaces/team-a/localqueues/tiergate-silver"));
    let stop = summaries.iter().position(|call| call.ends_with("/namespaces/team-a/localqueues/tiergate-gold"));
    assert!(create.unwrap() < stop.unwrap(), "{summaries:?}");
    let stop_body = &calls[stop.unwrap()].body;
    assert_eq!(calls[stop.unwrap()].method, "PATCH");
    assert_eq!(stop_body["spec"], json!({"clusterQueue": "tiergate-gold", "stopPolicy": "Hold"}));
    assert!(!calls.iter().any(|call| call.method == "DELETE"), "an occupied queue is not deleted");
    let migrated = calls.iter().find(|call| call.method == "POST" && call.body["reason"] == "QueueMigrated");
    assert!(migrated.is_some(), "{summaries:?}");
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    assert_eq!(
        status["queueMigrations"],
        json!([{"namespace": "team-a", "fromQueue": "tiergate-gold", "toQueue": "tiergate-silver", "remainingWorkloads": 3}])
    );
    // The Job pending in the old queue is relabelled to the new one, testing its uid and old label first.
    let moved = calls.iter().find(|call| call.summary() == "PATCH /apis/batch/v1/namespaces/team-a/jobs/train");
    assert_eq!(
        moved.map(|call| call.body.clone()),
        Some(json!([
            {"op": "test", "path": "/metadata/uid", "value": "uid-train"},
            {"op": "test", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "tiergate-gold"},
            {"op": "replace", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "tiergate-silver"},
        ])),
        "{summaries:?}"
    );
    let requeued = calls.iter().find(|call| call.method == "POST" && call.body["reason"] == "WorkloadsRequeued");
    assert!(requeued.is_some_and(|event| event.body["note"].as_str().unwrap().contains("Job team-a/train")));
}

const TEAM_A_WORKLOADS: &str = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads";

/// A Workload of Job `job` (uid `uid`) waiting in team-a's retired gold queue.
fn pending_workload(job: &str, uid: &str) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": format!("job-{job}"), "namespace": "team-a", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid, "controller": true}]},
        "spec": {"queueName": "tiergate-gold"},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "held"}]}})
}

fn workload_list(items: &[Value]) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "metadata": {}, "items": items})
}

/// One reconcile moving team-a from gold to silver while Job `train` waits in gold's stopped queue and its
/// relabel is answered 422 (as the API server answers a failed JSON Patch test); the Job listed by name carries
/// `label_now`. The status's `notRequeued`.
async fn requeue_answered_422(label_now: &str) -> Value {
    let (policy, live, after) = team_a_gold_to_silver(|queue| {
        queue["spec"]["stopPolicy"] = json!("Hold");
        queue["status"] = json!({"admittedWorkloads": 1, "reservingWorkloads": 1});
    });
    let mut echo = echo_server(policy.clone());
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "team-a",
        "uid": "uid-train", "labels": {"kueue.x-k8s.io/queue-name": label_now}}});
    let (client, api) = MockApi::start(Box::new(move |call: &Call| match (call.method.as_str(), call.path.as_str()) {
        ("GET", TEAM_A_WORKLOADS) => (StatusCode::OK, workload_list(&[pending_workload("train", "uid-train")])),
        ("PATCH", "/apis/batch/v1/namespaces/team-a/jobs/train") => failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "the server rejected our request due to an error in our request",
        ),
        ("GET", "/apis/batch/v1/namespaces/team-a/jobs") if call.query.contains("metadata.name%3Dtrain") => {
            (StatusCode::OK, json!({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {}, "items": [job]}))
        }
        _ => echo(call),
    }));
    let ctx = context(client, after, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();
    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    status["queueMigrations"][0]["notRequeued"].clone()
}

#[tokio::test]
async fn a_tenants_relabel_racing_the_requeue_is_left_alone_and_a_real_refusal_is_reported() {
    assert_eq!(requeue_answered_422("team-own-queue").await, Value::Null, "changed in between: nothing to report");
    let refused = requeue_answered_422("tiergate-gold").await;
    let entry = refused[0].as_str().unwrap_or_default();
    assert!(entry.starts_with("Job team-a/train: refused: the server rejected our request"), "{refused}");
}

#[tokio::test]
async fn a_refused_requeue_is_reported_in_the_status_and_not_retried_on_every_reconcile() {
    let (policy, live, after) = team_a_gold_to_silver(|queue| {
        queue["spec"]["stopPolicy"] = json!("Hold");
        queue["status"] = json!({"pendingWorkloads": 1});
    });
    let mut echo = echo_server(policy.clone());
    let (client, api) = MockApi::start(Box::new(move |call: &Call| match (call.method.as_str(), call.path.as_str()) {
        ("GET", TEAM_A_WORKLOADS) => (StatusCode::OK, workload_list(&[pending_workload("train", "uid-train")])),
        ("PATCH", "/apis/batch/v1/namespaces/team-a/jobs/train") => {
            failure(StatusCode::FORBIDDEN, "Forbidden", "jobs.batch \"train\" is forbidden: no patch")
        }
        _ => echo(call),
    }));
    let ctx = context(client, after, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap();
    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let patches = calls.iter().filter(|call| call.summary() == "PATCH /apis/batch/v1/namespaces/team-a/jobs/train");
    assert_eq!(patches.count(), 1, "a refused move waits before it is tried again");
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    let entry = status["queueMigrations"][0]["notRequeued"][0].as_str().unwrap();
    assert!(
        entry.starts_with("Job team-a/train: refused: jobs.batch \"train\" is forbidden: no patch (403)"),
        "{entry}"
    );
    assert!(entry.ends_with("resubmit it in queue tiergate-silver"), "{entry}");
}

#[tokio::test]
async fn drained_old_queue_is_deleted_with_preconditions() {
    let (policy, live, after) = team_a_gold_to_silver(|queue| {
        queue["spec"]["stopPolicy"] = json!("Hold");
    });
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, after, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let delete = calls.iter().find(|call| call.method == "DELETE").unwrap();
    assert_eq!(delete.path, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/tiergate-gold");
    assert_eq!(delete.body["preconditions"]["resourceVersion"], "42");
}

#[tokio::test]
async fn apply_conflict_rereads_the_object_and_retries() {
    let policy = sample_policy();
    let snapshot = snapshot_with(&[]);
    let target = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/h100";
    let mut echo = echo_server(policy.clone());
    let mut conflicted = false;
    let responder = move |call: &Call| {
        if call.method == "PATCH" && call.path == target && !conflicted {
            conflicted = true;
            return conflict();
        }
        echo(call)
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let ctx = context(client, snapshot, stores_with(vec![]), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let on_target: Vec<&str> =
        calls.iter().filter(|call| call.path == target).map(|call| call.method.as_str()).collect();
    assert_eq!(on_target, vec!["PATCH", "GET", "PATCH"]);
}

#[tokio::test]
async fn cluster_serving_only_v1beta1_fails_naming_kueue_v0_15_and_writes_nothing_else() {
    let policy = sample_policy();
    let mut echo = echo_server(policy.clone());
    let responder = move |call: &Call| {
        if call.path == "/apis" {
            return (
                StatusCode::OK,
                json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{"name": "kueue.x-k8s.io", "versions": [
                    {"groupVersion": "kueue.x-k8s.io/v1beta1", "version": "v1beta1"}]}]}),
            );
        }
        echo(call)
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let ctx = context(client, snapshot_with(&[("team-a", "gold")]), stores_with(vec![]), WriteGate::always_open());

    let error = reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap_err();
    assert_eq!(error.reason(), "kueue_too_old");
    assert!(error.to_string().contains("v0.15"), "{error}");
    let action = error_policy(Arc::new(policy), &error, ctx.clone());
    assert_ne!(action, Action::await_change(), "a missing Kueue is retried");
    let calls = api.finish(ctx).await;

    assert!(calls.iter().all(|call| kind_of_path(&call.path).is_none()), "no Kueue object is written");
    let status = calls.iter().find(|call| call.path.ends_with("/status")).unwrap();
    assert_eq!(status.body["status"]["conditions"][0]["reason"], "KueueTooOld");
}

#[tokio::test]
async fn invalid_policy_keeps_the_applied_objects_and_says_why() {
    let snapshot = snapshot_with(&[("team-a", "gold")]);
    let valid = with_converged_status(sample_policy(), &snapshot);
    let live = stores_with(converged_objects(&valid, &snapshot));
    let mut invalid = valid.clone();
    invalid.spec.tiers[0].gpu_class = "b200".to_owned();
    invalid.metadata.generation = Some(2);
    let (client, api) = MockApi::start(Box::new(echo_server(invalid.clone())));
    let ctx = context(client, snapshot, live, WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(invalid), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let summaries: Vec<String> = calls.iter().map(Call::summary).collect();
    assert_eq!(
        summaries,
        vec![
            "PATCH /apis/tiergate.io/v1alpha1/tierpolicies/default/status".to_owned(),
            "POST /apis/events.k8s.io/v1/namespaces/default/events".to_owned(),
        ]
    );
    let status = &calls[0].body["status"];
    assert_eq!(status["conditions"][0]["reason"], "InvalidPolicy");
    assert!(status["lastError"].as_str().unwrap().contains("spec.tiers[0].gpuClass"));
    assert_eq!(status["objectCounts"]["LocalQueue"], 1, "the last applied counts stay");
    assert_eq!(calls[1].body["reason"], "InvalidPolicy");
}

#[tokio::test]
async fn replica_without_the_lease_sends_nothing() {
    let policy = sample_policy();
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot_with(&[("team-a", "gold")]), stores_with(vec![]), WriteGate::new());
    ctx.assume_kueue_discovered();

    let error = reconcile(Arc::new(policy), ctx.clone()).await.unwrap_err();
    assert_eq!(error.reason(), "write_without_lease");
    let calls = api.finish(ctx).await;
    assert!(calls.is_empty(), "{:?}", calls.iter().map(Call::summary).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_policy_this_instance_does_not_serve_gets_no_write_from_it() {
    let mut other = sample_policy();
    other.metadata.name = Some("second".to_owned());
    let (client, api) = MockApi::start(Box::new(echo_server(other.clone())));
    let ctx = context(client, snapshot_with(&[("team-a", "gold")]), stores_with(vec![]), WriteGate::always_open());

    assert_eq!(reconcile(Arc::new(other), ctx.clone()).await.unwrap(), Action::await_change());
    let calls = api.finish(ctx).await;

    assert!(
        calls.is_empty(),
        "another instance may serve it: {:?}",
        calls.iter().map(Call::summary).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn an_invalid_policy_blocks_loudly_and_its_status_carries_the_blocked_condition() {
    let mut policy = sample_policy();
    policy.spec.tiers[0].gpu_class = "no-such-class".to_owned();
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot_with(&[("team-a", "gold")]), stores_with(vec![]), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let active = ctx.blockers().active();
    let calls = api.finish(ctx).await;

    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0].reason, crate::blockers::BlockedReason::PolicyInvalid);
    assert!(active[0].detail.contains("no-such-class"), "{}", active[0].detail);
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    let conditions = status["conditions"].as_array().unwrap();
    let blocked = conditions.iter().find(|condition| condition["type"] == "Blocked").unwrap();
    assert_eq!((blocked["status"].as_str(), blocked["reason"].as_str()), (Some("True"), Some("PolicyInvalid")));
    assert!(conditions.iter().any(|condition| condition["type"] == "Served" && condition["status"] == "True"));
}

#[tokio::test]
async fn a_missing_webhook_certificate_stays_out_of_the_policy_status_so_a_restart_writes_nothing() {
    let snapshot = snapshot_with(&[("team-a", "gold")]);
    let policy = with_converged_status(sample_policy(), &snapshot);
    let live = stores_with(converged_objects(&policy, &snapshot));
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, live, WriteGate::always_open());
    ctx.assume_kueue_discovered();
    ctx.blockers().set(crate::blockers::BlockedReason::CertificateMissing, "failed to read /tls/tls.crt");

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;
    assert!(calls.is_empty(), "{:?}", calls.iter().map(Call::summary).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_write_rbac_forbids_blocks_as_write_forbidden_and_a_later_success_clears_it() {
    let policy = sample_policy();
    let snapshot = snapshot_with(&[("team-a", "gold")]);
    let forbidden = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let switch = forbidden.clone();
    let mut echo = echo_server(policy.clone());
    let responder = move |call: &Call| {
        if switch.load(std::sync::atomic::Ordering::Relaxed) && kind_of_path(&call.path).is_some() {
            return failure(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "resourceflavors.kueue.x-k8s.io is forbidden: User cannot patch resource",
            );
        }
        echo(call)
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let ctx = context(client, snapshot, stores_with(vec![]), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    let error = reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap_err();
    assert_eq!(error.blocker(), Some(crate::blockers::BlockedReason::WriteForbidden));
    let active = ctx.blockers().active();
    assert_eq!(active[0].reason, crate::blockers::BlockedReason::WriteForbidden);
    assert!(active[0].detail.contains("forbidden"), "{}", active[0].detail);
    forbidden.store(false, std::sync::atomic::Ordering::Relaxed);
    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    assert!(ctx.blockers().active().is_empty());
    let calls = api.finish(ctx).await;
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    let blocked = status["conditions"].as_array().unwrap().iter().find(|condition| condition["type"] == "Blocked");
    assert_eq!(blocked.unwrap()["reason"], "WriteForbidden", "the failed reconcile's status says why");
}

#[test]
fn the_daemons_own_namespace_is_never_translated() {
    let snapshot = snapshot_with(&[("team-a", "gold"), ("tiergate-system", "gold")]);
    let mut with_own = (**snapshot.load()).clone();
    with_own.own_namespace = Some("tiergate-system".to_owned());
    let borrowed: Vec<&str> = translation_namespaces(&with_own).map(|namespace| namespace.name.as_str()).collect();
    assert_eq!(borrowed, vec!["team-a"], "the reconciler's borrowed namespaces leave the daemon's own out");
}

#[tokio::test]
async fn unsynced_caches_are_never_decided_from() {
    let policy = sample_policy();
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let unsynced = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
    let ctx = context(client, unsynced, stores_with(vec![]), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    let action = reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(UNSYNCED_RETRY));
    assert!(api.finish(ctx).await.is_empty());
}

#[tokio::test]
async fn policy_being_deleted_is_left_to_the_garbage_collector() {
    let mut policy = sample_policy();
    policy.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot_with(&[("team-a", "gold")]), stores_with(vec![]), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    let action = reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert!(api.finish(ctx).await.is_empty(), "nothing is re-created for a terminating policy");
}

#[tokio::test]
async fn missing_kueue_is_reported_in_the_status_even_before_the_caches_sync() {
    let policy = sample_policy();
    let mut echo = echo_server(policy.clone());
    let responder = move |call: &Call| {
        if call.path == "/apis" {
            return (StatusCode::OK, json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}));
        }
        echo(call)
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let unsynced = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
    let ctx = context(client, unsynced, stores_with(vec![]), WriteGate::always_open());

    let error = reconcile(Arc::new(policy), ctx.clone()).await.unwrap_err();
    assert_eq!(error.reason(), "kueue_not_installed");
    let calls = api.finish(ctx).await;
    let status = calls.iter().find(|call| call.path.ends_with("/status")).unwrap();
    assert_eq!(status.body["status"]["conditions"][0]["reason"], "KueueNotInstalled");
    assert!(status.body["status"]["lastError"].as_str().unwrap().contains("install Kueue v0.15"));
    let conditions = status.body["status"]["conditions"].as_array().unwrap();
    let blocked = conditions.iter().find(|condition| condition["type"] == "Blocked").unwrap();
    assert_eq!(blocked["reason"], "KueueMissing");
}

#[tokio::test]
async fn a_workers_condition_is_written_into_the_policy_status_once_and_an_unchanged_fleet_writes_nothing() {
    use crate::reconcile::worker::{WorkerHealth, WorkerState};
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "silver")]);
    let policy = with_converged_status(sample_policy(), &snapshot);
    let live = stores_with(converged_objects(&policy, &snapshot));
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, live, WriteGate::always_open());
    ctx.assume_kueue_discovered();
    let down = WorkerHealth {
        cluster: "us-east".to_owned(),
        state: WorkerState::Unreachable { failing_watches: vec!["Namespace"] },
    };
    ctx.fleet_health().set(down.clone(), 1);

    reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap();
    // The policy as that write left it (same outcome, so the same conditions): nothing more is written.
    let mut written = policy.clone();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    if let Some(status) = written.status.as_mut() {
        let previous = status.conditions.clone();
        fleet::merge_worker_conditions(status, &[down], &previous, policy.metadata.generation, &now);
    }
    reconcile(Arc::new(written), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let summaries: Vec<String> = calls.iter().map(Call::summary).collect();
    assert_eq!(summaries, vec!["PATCH /apis/tiergate.io/v1alpha1/tierpolicies/default/status".to_owned()]);
    let conditions = calls[0].body["status"]["conditions"].as_array().unwrap();
    let worker = conditions.iter().find(|condition| condition["type"] == "WorkerReachable-us-east").unwrap();
    assert_eq!((worker["status"].as_str(), worker["reason"].as_str()), (Some("False"), Some("Unreachable")));
    assert!(conditions.iter().any(|condition| condition["type"] == "Ready" && condition["status"] == "True"));
}

/// An echo server that, when team-a's `tiergate-silver` queue is first applied, replaces the snapshot in `shared`
/// with `change(current)`: namespaces changing while a reconcile applies LocalQueues.
fn changing_snapshot_when_team_a_moves(
    policy: &TierPolicy,
    shared: SharedSnapshot,
    change: impl FnOnce(&Snapshot) -> Arc<Snapshot> + Send + 'static,
) -> Responder {
    let mut echo = echo_server(policy.clone());
    let mut change = Some(change);
    Box::new(move |call: &Call| {
        if call.method == "PATCH"
            && call.path.ends_with("/namespaces/team-a/localqueues/tiergate-silver")
            && let Some(change) = change.take()
        {
            shared.store(change(&shared.load()));
        }
        echo(call)
    })
}

/// The paths of the DELETE calls, sorted (deletes of one kind run concurrently).
fn sorted_delete_paths(calls: &[Call]) -> Vec<&str> {
    let mut deleted: Vec<&str> = calls.iter().filter(|call| call.method == "DELETE").map(|c| c.path.as_str()).collect();
    deleted.sort_unstable();
    deleted
}

#[tokio::test]
async fn namespaces_relabeled_while_queues_are_applied_get_their_queues_before_any_prune() {
    let before = snapshot_with(&[("team-a", "gold"), ("team-b", "gold")]);
    let policy = with_converged_status(sample_policy(), &before);
    let live = converged_objects(&policy, &before);
    let first = snapshot_with(&[("team-a", "silver"), ("team-b", "gold")]);
    // team-b is relabeled while team-a's new queue is being applied: the same reconcile applies team-b's new
    // queue too, before it prunes either old one.
    let responder = changing_snapshot_when_team_a_moves(&policy, first.clone(), |_| {
        snapshot_with(&[("team-a", "silver"), ("team-b", "silver")]).load_full()
    });
    let (client, api) = MockApi::start(responder);
    let ctx = context(client, first, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let summaries: Vec<String> = calls.iter().map(Call::summary).collect();
    let position = |method: &str, suffix: &str| {
        summaries.iter().position(|call| call.starts_with(method) && call.ends_with(suffix)).unwrap_or_else(|| {
            panic!("no {method} …{suffix} in {summaries:#?}");
        })
    };
    let new_b = position("PATCH", "/namespaces/team-b/localqueues/tiergate-silver");
    let first_delete = summaries.iter().position(|call| call.starts_with("DELETE")).unwrap();
    assert!(new_b < first_delete, "{summaries:#?}");
    position("DELETE", "/namespaces/team-a/localqueues/tiergate-gold");
    position("DELETE", "/namespaces/team-b/localqueues/tiergate-gold");
    let applies_of_a = summaries.iter().filter(|call| call.ends_with("/team-a/localqueues/tiergate-silver")).count();
    assert_eq!(applies_of_a, 1, "a queue applied in the first round is not applied again: {summaries:#?}");
}

#[tokio::test]
async fn a_relabel_of_many_namespaces_is_one_migration_event_and_every_old_queue_is_pruned() {
    let names: Vec<String> = (0..20).map(|index| format!("team-{index:02}")).collect();
    let gold: Vec<(&str, &str)> = names.iter().map(|name| (name.as_str(), "gold")).collect();
    let silver: Vec<(&str, &str)> = names.iter().map(|name| (name.as_str(), "silver")).collect();
    let before = snapshot_with(&gold);
    let policy = with_converged_status(sample_policy(), &before);
    let live = converged_objects(&policy, &before);
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot_with(&silver), stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let deleted = sorted_delete_paths(&calls);
    let expected: Vec<String> = names
        .iter()
        .map(|name| format!("/apis/kueue.x-k8s.io/v1beta2/namespaces/{name}/localqueues/tiergate-gold"))
        .collect();
    assert_eq!(deleted, expected.iter().map(String::as_str).collect::<Vec<_>>());
    let migrated: Vec<&Call> =
        calls.iter().filter(|call| call.method == "POST" && call.body["reason"] == "QueueMigrated").collect();
    assert_eq!(migrated.len(), 1, "one summary Event, not one per namespace");
    let note = migrated[0].body["note"].as_str().unwrap();
    assert!(
        note.starts_with("20 namespaces moved to another tier's LocalQueue: team-00 tiergate-gold -> tiergate-silver"),
        "{note}"
    );
    assert!(note.ends_with("(+12 more)"), "{note}");
}

#[tokio::test]
async fn a_namespace_untiered_between_rounds_loses_its_queue_and_unchanged_ones_keep_theirs() {
    let before = snapshot_with(&[("team-a", "gold"), ("team-b", "gold"), ("team-c", "gold")]);
    let policy = with_converged_status(sample_policy(), &before);
    let live = converged_objects(&policy, &before);
    let first = snapshot_with(&[("team-a", "silver"), ("team-b", "gold"), ("team-c", "gold")]);
    // While team-a's new queue is applied, team-b loses its tier label; team-c keeps its very view.
    let responder = changing_snapshot_when_team_a_moves(&policy, first.clone(), |current| {
        let mut next = current.clone();
        next.namespaces.insert(
            "team-b".to_owned(),
            Arc::new(NamespaceView { name: "team-b".to_owned(), ..NamespaceView::default() }),
        );
        Arc::new(next)
    });
    let (client, api) = MockApi::start(responder);
    let ctx = context(client, first, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let deleted = sorted_delete_paths(&calls);
    assert_eq!(
        deleted,
        [
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/tiergate-gold",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-b/localqueues/tiergate-gold",
        ],
        "team-c's queue is still wanted"
    );
}

/// A leader under `--gate-owner` whose snapshot says synced but holds no served policy, over a cluster that holds
/// the gate: what the gate pruner sends when the API server answers `policy_lookup` for the policy.
async fn gate_prune_calls(policy_lookup: (StatusCode, Value)) -> (Result<usize, ReconcileError>, Vec<Call>) {
    let policy = sample_policy();
    let tiered = snapshot_with(&[("team-b", "bronze")]);
    let gate: Vec<DynamicObject> = converged_objects(&policy, &tiered)
        .into_iter()
        .filter(|object| KueueKind::of(object).is_some_and(KueueKind::is_gate))
        .collect();
    assert!(!gate.is_empty(), "the sample has a gate");
    // The cache's view a moment after a restart: synced, and the served policy not (yet) in it.
    let snapshot = snapshot_with(&[("team-b", "bronze")]);
    assert!(snapshot.load().policy.is_none());
    let mut lookup = Some(policy_lookup);
    let responder = move |call: &Call| match call.method.as_str() {
        "GET" if call.path.ends_with("/tierpolicies/default") => lookup.take().unwrap_or_else(not_found),
        "DELETE" => (StatusCode::OK, json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})),
        _ => not_found(),
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let settings = ReconcilerSettings {
        policy_name: "default".to_owned(),
        identity: "test".to_owned(),
        mutating_gate: false,
        gate_owner: Some("00-tiergate".to_owned()),
    };
    let ctx =
        Context::new(client, settings, snapshot, stores_with(gate), WriteGate::always_open(), Arc::new(Metrics::new()));
    let pruned = gate_owner::prune_gate_without_policy(&ctx).await;
    (pruned, api.finish(ctx).await)
}

#[tokio::test]
async fn a_cache_without_the_served_policy_never_prunes_the_gate_while_the_api_server_has_the_policy() {
    let policy = serde_json::to_value(sample_policy()).unwrap();
    let (pruned, calls) = gate_prune_calls((StatusCode::OK, policy)).await;
    let pruned = pruned.unwrap();
    let deletes: Vec<String> = calls.iter().filter(|call| call.is_write()).map(Call::summary).collect();
    assert_eq!((pruned, deletes), (0, Vec::<String>::new()), "the gate must stay while its policy exists");
    assert_eq!(calls.len(), 1, "one read confirms: {:?}", calls.iter().map(Call::summary).collect::<Vec<_>>());
}

#[tokio::test]
async fn the_gate_of_a_policy_the_api_server_confirms_gone_is_pruned_whole() {
    let (pruned, calls) = gate_prune_calls(not_found()).await;
    let pruned = pruned.unwrap();
    let deleted: Vec<KueueKind> =
        calls.iter().filter(|call| call.method == "DELETE").filter_map(|call| kind_of_path(&call.path)).collect();
    assert!(pruned > 0 && deleted.len() == pruned, "{pruned} pruned, deletes {deleted:?}");
    assert!(deleted.contains(&KueueKind::ValidatingAdmissionPolicy), "{deleted:?}");
    assert!(deleted.iter().all(|kind| kind.is_gate()), "{deleted:?}");
}

#[tokio::test]
async fn a_failed_read_of_the_served_policy_prunes_nothing_and_says_why() {
    let unavailable = failure(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "etcd is slow");
    let (pruned, calls) = gate_prune_calls(unavailable).await;
    let error = pruned.unwrap_err();
    assert_eq!(error.reason(), "read_served_policy");
    assert!(error.to_string().contains("the gate stays"), "{error}");
    assert!(calls.iter().all(|call| !call.is_write()), "{:?}", calls.iter().map(Call::summary).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_server_without_validating_admission_policies_gets_no_gate_and_the_policy_says_degraded_and_why() {
    let policy = sample_policy();
    let snapshot = snapshot_with(&[("team-b", "bronze")]);
    let resources: Vec<Value> = KueueKind::ALL
        .into_iter()
        .map(|kind| json!({"name": kind.plural(), "singularName": "", "namespaced": kind.namespaced(), "kind": kind.name(), "verbs": ["get"]}))
        .collect();
    let mut echo = echo_server(policy.clone());
    let responder = move |call: &Call| match call.path.as_str() {
        "/apis" => (
            StatusCode::OK,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{"name": "kueue.x-k8s.io", "versions": [
                {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}]}]}),
        ),
        "/apis/kueue.x-k8s.io/v1beta2" => (
            StatusCode::OK,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kueue.x-k8s.io/v1beta2", "resources": resources}),
        ),
        // Before Kubernetes 1.30: webhooks only.
        "/apis/admissionregistration.k8s.io/v1" => (
            StatusCode::OK,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "admissionregistration.k8s.io/v1",
                   "resources": [
                       {"name": "mutatingwebhookconfigurations", "singularName": "", "namespaced": false,
                        "kind": "MutatingWebhookConfiguration", "verbs": ["get"]},
                       {"name": "validatingwebhookconfigurations", "singularName": "", "namespaced": false,
                        "kind": "ValidatingWebhookConfiguration", "verbs": ["get"]}]}),
        ),
        _ => echo(call),
    };
    let (client, api) = MockApi::start(Box::new(responder));
    let ctx = context(client, snapshot, stores_with(vec![]), WriteGate::always_open());

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let blockers = ctx.blockers().active();
    let calls = api.finish(ctx).await;

    let applied: Vec<KueueKind> =
        calls.iter().filter(|call| call.method == "PATCH").filter_map(|call| kind_of_path(&call.path)).collect();
    assert!(applied.contains(&KueueKind::ClusterQueue), "the rest is applied: {applied:?}");
    assert!(!applied.iter().any(|kind| kind.is_gate()), "no gate object is applied where none is served: {applied:?}");
    let status = calls.iter().find(|call| call.path.ends_with("/status")).expect("a status write");
    let conditions = status.body["status"]["conditions"].as_array().unwrap();
    let condition = |type_: &str| conditions.iter().find(|condition| condition["type"] == type_).unwrap();
    assert_eq!(condition("Degraded")["status"], "True");
    assert_eq!(condition("Degraded")["reason"], "InServerGateNotServed");
    assert!(condition("Degraded")["message"].as_str().unwrap().contains("stored without their tier's queue"));
    assert_eq!(
        (condition("InServerGate")["status"].as_str(), condition("Ready")["status"].as_str()),
        (Some("False"), Some("True"))
    );
    assert!(blockers.iter().any(|blocker| blocker.reason == BlockedReason::GateNotServed), "{blockers:?}");
}

#[tokio::test]
async fn an_unanswered_discovery_keeps_the_live_mutating_half_and_asks_again() {
    let policy = sample_policy();
    let snapshot = snapshot_with(&[("team-b", "bronze")]);
    // What a leader with --mutating-gate left on Kubernetes 1.36: every object, both halves of the gate.
    let everything = desired_objects(&policy, &snapshot.load().cluster_view()).unwrap();
    let live: Vec<DynamicObject> = build_desired_set(&policy, everything, None)
        .unwrap()
        .objects
        .into_iter()
        .map(|desired| as_live(desired.object))
        .collect();
    assert!(live.iter().any(|object| KueueKind::of(object).is_some_and(KueueKind::is_mutating_half)));
    // The new leader's discovery of admissionregistration.k8s.io/v1 is not answered (404 here): the mode is unknown.
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let settings = ReconcilerSettings {
        policy_name: "default".to_owned(),
        identity: "test".to_owned(),
        mutating_gate: true,
        gate_owner: None,
    };
    let ctx =
        Context::new(client, settings, snapshot, stores_with(live), WriteGate::always_open(), Arc::new(Metrics::new()));
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let asked = calls.iter().any(|call| call.method == "GET" && call.path == "/apis/admissionregistration.k8s.io/v1");
    assert!(asked, "an unknown mode is asked again: {:?}", calls.iter().map(Call::summary).collect::<Vec<_>>());
    let weakened: Vec<String> = calls
        .iter()
        .filter(|call| call.method == "DELETE" && kind_of_path(&call.path).is_some_and(KueueKind::is_gate))
        .map(Call::summary)
        .collect();
    assert!(weakened.is_empty(), "a leader that cannot tell the mode never prunes the gate: {weakened:?}");
}

#[tokio::test]
async fn a_field_the_installed_kueue_crd_prunes_is_reported_once_and_not_reapplied_on_every_reconcile() {
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "silver")]);
    let policy = with_converged_status(sample_policy(), &snapshot);
    let mut objects = converged_objects(&policy, &snapshot);
    let gold = objects.iter_mut().find(|object| object.name_any() == "tiergate-gold").unwrap();
    let spec = gold.data["spec"].as_object_mut().unwrap();
    let field = spec.keys().find(|key| !["resourceGroups", "cohortName"].contains(&key.as_str())).unwrap().clone();
    spec.remove(&field);
    let path = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/tiergate-gold";
    let mut echo = echo_server(policy.clone());
    let pruning = move |call: &Call| {
        let (status, mut body) = echo(call);
        if call.method == "PATCH" && call.path == path {
            body["spec"].as_object_mut().unwrap().remove(&field);
        }
        (status, body)
    };
    let (client, api) = MockApi::start(Box::new(pruning));
    let ctx = context(client, snapshot, stores_with(objects), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap();
    let blockers = ctx.blockers();
    let detail = blockers.active().into_iter().find(|blocker| blocker.reason == BlockedReason::KueueFieldDropped);
    let detail = detail.expect("the dropped field is reported").detail;
    assert!(detail.starts_with("ClusterQueue tiergate-gold: spec."), "{detail}");
    reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap();
    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let patches = calls.iter().filter(|call| call.method == "PATCH" && call.path == path).count();
    assert_eq!(
        patches,
        1,
        "applied once, then known to lose the field: {:?}",
        calls.iter().map(Call::summary).collect::<Vec<_>>()
    );
    assert!(blockers.is_active(BlockedReason::KueueFieldDropped));
}

/// Reconciles the DRA sample once where `resource.k8s.io/v1` lists `served` resources (`None`: the group is not
/// served at all, a 404); returns the DeviceClass writes and the `dra_not_served` detail.
async fn reconcile_dra_sample(served: Option<&'static [&'static str]>) -> (usize, Option<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/dra/policy.yaml");
    let mut policy = load_policy(Some(&path)).unwrap();
    policy.metadata.name = Some("default".to_owned());
    policy.metadata.uid = Some("policy-uid".to_owned());
    let mut echo = echo_server(policy.clone());
    let discovery = move |call: &Call| match served {
        Some(names) if call.method == "GET" && call.path == "/apis/resource.k8s.io/v1" => {
            let resources: Vec<Value> = names
                .iter()
                .map(|name| json!({"name": name, "singularName": "", "namespaced": false, "kind": "X", "verbs": []}))
                .collect();
            (
                StatusCode::OK,
                json!({"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1", "resources": resources}),
            )
        }
        _ => echo(call),
    };
    let (client, api) = MockApi::start(Box::new(discovery));
    let ctx = context(client, snapshot_with(&[]), stores_with(Vec::new()), WriteGate::always_open());
    ctx.assume_kueue_discovered();
    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let blockers = ctx.blockers();
    let detail = blockers.active().into_iter().find(|blocker| blocker.reason == BlockedReason::DraNotServed);
    let calls = api.finish(ctx).await;
    let writes = calls.iter().filter(|call| call.method == "PATCH" && call.path.contains("/deviceclasses/")).count();
    (writes, detail.map(|blocker| blocker.detail))
}

#[tokio::test]
async fn dra_classes_where_resource_k8s_io_v1_is_not_served_get_no_device_class_and_say_so() {
    let (writes, detail) = reconcile_dra_sample(None).await;
    assert_eq!(writes, 0, "no DeviceClass is applied where the API server does not serve them");
    let detail = detail.expect("dra_not_served names the classes");
    assert!(detail.contains("h100.tiergate.io") && detail.contains("resource.k8s.io/v1 deviceclasses"), "{detail}");
    let (writes, detail) = reconcile_dra_sample(Some(&["resourceclaims"])).await;
    assert_eq!((writes, detail.is_some()), (0, true), "served group, no deviceclasses");
    let (writes, detail) = reconcile_dra_sample(Some(&["deviceclasses", "resourceclaims"])).await;
    assert_eq!((writes, detail), (2, None), "served: both DeviceClasses applied, nothing reported");
}

/// The sample policy with bronze's one-off quota window `burst` of 20 GPUs, from `begin` to `end`.
fn with_burst_window(
    mut policy: TierPolicy,
    begin: k8s_openapi::jiff::Timestamp,
    end: k8s_openapi::jiff::Timestamp,
) -> TierPolicy {
    let bronze = policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    bronze.quota_windows = vec![
        serde_json::from_value(json!({
            "name": "burst",
            "once": {"begin": begin.to_string(), "end": end.to_string()},
            "quotas": {"nvidia.com/gpu": {"nominal": "20"}},
        }))
        .unwrap(),
    ];
    policy
}

fn bronze_gpu_nominal(queue: &Value) -> &Value {
    let resources = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"].as_array().unwrap();
    &resources.iter().find(|resource| resource["name"] == "nvidia.com/gpu").unwrap()["nominalQuota"]
}

#[tokio::test]
async fn a_window_opening_applies_its_quota_to_the_tiers_queue_only_and_records_it_with_an_event() {
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "bronze")]);
    let converged = with_converged_status(sample_policy(), &snapshot);
    let live = converged_objects(&converged, &snapshot);
    let now = k8s_openapi::jiff::Timestamp::now();
    let hour = k8s_openapi::jiff::SignedDuration::from_hours(1);
    let policy = with_burst_window(converged, now.checked_sub(hour).unwrap(), now.checked_add(hour).unwrap());
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let applied: Vec<&Call> = calls.iter().filter(|call| kind_of_path(&call.path).is_some()).collect();
    let paths: Vec<&str> = applied.iter().map(|call| call.path.as_str()).collect();
    assert_eq!(paths, ["/apis/kueue.x-k8s.io/v1beta2/clusterqueues/tiergate-bronze"]);
    assert_eq!(bronze_gpu_nominal(&applied[0].body), &json!("20"));
    let event = calls.iter().find(|call| call.body["reason"] == "QuotaWindowChanged").unwrap();
    assert_eq!(event.body["type"], "Normal");
    let note = event.body["note"].as_str().unwrap();
    assert!(note.starts_with("tier bronze: quota window \"burst\" in force: "), "{note}");
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    assert_eq!(status["quotaWindows"][0]["tier"], "bronze");
    assert_eq!(status["quotaWindows"][0]["inForce"], "burst");
    assert_eq!(status["quotaWindows"][0]["nextChange"], json!(now.checked_add(hour).unwrap().to_string()));
    assert!(status["quotaWindows"][0].get("nextInForce").is_none(), "{status}");
}

#[tokio::test]
async fn a_window_closing_below_what_is_admitted_warns_and_is_not_reported_as_a_reduced_quota() {
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "bronze")]);
    let now = k8s_openapi::jiff::Timestamp::now();
    let hour = k8s_openapi::jiff::SignedDuration::from_hours(1);
    let begin = now.checked_sub(hour).unwrap();
    // The cluster as the open window left it: bronze at 20 GPUs, 18 of them admitted.
    let open = with_burst_window(sample_policy(), begin, now.checked_add(hour).unwrap());
    let (in_force, _) = quota_windows::build_policy_in_force(&open, now);
    let mut live = converged_objects(&in_force, &snapshot);
    let bronze = live.iter_mut().find(|object| object.metadata.name.as_deref() == Some("tiergate-bronze")).unwrap();
    bronze.data["status"] = json!({"flavorsReservation": [{"name": "l4", "resources": [
        {"name": "nvidia.com/gpu", "total": "18", "borrowed": "0"}]}]});
    // The window has closed since: its end is a minute ago, and the status still names it.
    let mut policy = with_burst_window(sample_policy(), begin, now.checked_sub(hour / 60).unwrap());
    policy.status = with_converged_status(sample_policy(), &snapshot).status;
    if let Some(status) = policy.status.as_mut() {
        status.quota_windows = vec![crate::policy::TierQuotaWindowStatus {
            tier: "bronze".to_owned(),
            in_force: Some("burst".to_owned()),
            next_change: Some(now.to_string()),
            next_in_force: None,
        }];
    }
    let (client, api) = MockApi::start(Box::new(echo_server(policy.clone())));
    let ctx = context(client, snapshot, stores_with(live), WriteGate::always_open());
    ctx.assume_kueue_discovered();

    reconcile(Arc::new(policy), ctx.clone()).await.unwrap();
    let calls = api.finish(ctx).await;

    let applied: Vec<&Call> = calls.iter().filter(|call| kind_of_path(&call.path).is_some()).collect();
    assert_eq!(applied.len(), 1, "{:?}", calls.iter().map(Call::summary).collect::<Vec<_>>());
    assert_eq!(bronze_gpu_nominal(&applied[0].body), &json!("16"));
    let event = calls.iter().find(|call| call.body["reason"] == "QuotaWindowChanged").unwrap();
    assert_eq!(event.body["type"], "Warning");
    let note = event.body["note"].as_str().unwrap();
    assert!(note.contains("base quota in force") && note.contains("nvidia.com/gpu 18 admitted, 16 nominal"), "{note}");
    let status = &calls.iter().find(|call| call.path.ends_with("/status")).unwrap().body["status"];
    assert!(status["quotaWindows"][0].get("inForce").is_none(), "{status}");
    let conditions = status["conditions"].as_array().unwrap();
    let quota = conditions.iter().find(|condition| condition["type"] == "QuotaReduced").unwrap();
    assert_eq!(quota["status"], "False", "a closing window is not a reduced policy: {quota}");
}
