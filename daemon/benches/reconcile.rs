//! Reconciler benchmark (prints a table for docs/performance.md): cold-start convergence of 1,000 tenant
//! namespaces (time and API writes, against an in-process mocked API server that answers instantly, so this is
//! tiergate's own cost), one relabel, a steady-state pass, the live heap of each cache with 10,000 namespaces,
//! 2,000 nodes and 10,000 LocalQueues, and the peak heap a steady-state reconcile of 10,000 LocalQueues adds. Run: `cargo test -p tiergate --bench reconcile` (dev profile:
//! timings are upper bounds) or `cargo bench -p tiergate --bench reconcile` (optimized).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http::{Request, Response};
use kube::client::Body;
use kube::core::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tiergate::cache::kinds::KueueKind;
use tiergate::cache::live::{LiveObject, build_live_event};
use tiergate::cache::{
    Cached, NamespaceLite, NodeLite, SnapshotInputs, build_namespace_view, build_node_view, build_snapshot,
    unwrap_cached,
};
use tiergate::metrics::Metrics;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::desired::{build_desired_set, desired_objects};
use tiergate::reconcile::lease::WriteGate;
use tiergate::reconcile::status::{StatusInput, build_status};
use tiergate::reconcile::{Context, OwnedStores, ReconcilerSettings, reconcile};
use tiergate::view::{NamespaceView, NodeView, Snapshot};

/// Counts live heap bytes while a `dhat::Profiler` runs (only around the memory measurement).
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

const TIER_LABEL: &str = "tenant.kubenexus.io/tier";
const TIERS: [&str; 3] = ["gold", "silver", "bronze"];

type Calls = Arc<Mutex<BTreeMap<String, u64>>>;

/// A mocked API server that answers every write like a healthy one and counts writes by `METHOD resource`.
fn start_mock(policy: &TierPolicy) -> (kube::Client, Calls) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let calls: Calls = Arc::default();
    let counted = calls.clone();
    let policy_json = serde_json::to_value(policy).unwrap_or_default();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let resource = parts.uri.path().split('/').rev().nth(1).unwrap_or_default().to_owned();
            let resource =
                if parts.uri.path().ends_with("/status") { "tierpolicies/status".to_owned() } else { resource };
            if let Ok(mut counted) = counted.lock() {
                *counted.entry(format!("{} {resource}", parts.method)).or_insert(0) += 1;
            }
            let reply = if parts.uri.path().ends_with("/status") {
                let mut echoed = policy_json.clone();
                echoed["status"] = body["status"].clone();
                echoed
            } else if parts.method == "DELETE" {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})
            } else {
                body
            };
            let mut response = Response::new(Body::from(serde_json::to_vec(&reply).unwrap_or_default()));
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            send.send_response(response);
        }
    });
    (kube::Client::new(service, "default"), calls)
}

fn snapshot(namespaces: usize, relabeled: Option<usize>) -> Arc<arc_swap::ArcSwap<Snapshot>> {
    let namespaces = (0..namespaces)
        .map(|index| {
            let tier = if Some(index) == relabeled { TIERS[(index + 1) % 3] } else { TIERS[index % 3] };
            let name = format!("tenant-{index:05}");
            let labels = [(TIER_LABEL, tier)].into();
            (name.clone(), Arc::new(NamespaceView { name, labels, ..NamespaceView::default() }))
        })
        .collect();
    Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot { namespaces, synced: true, ..Snapshot::default() }))
}

fn stores(objects: Vec<DynamicObject>) -> OwnedStores {
    let mut writers: BTreeMap<KueueKind, Writer<LiveObject>> =
        KueueKind::ALL.into_iter().map(|kind| (kind, Writer::new(kind))).collect();
    for object in objects {
        if let Some((kind, writer)) = KueueKind::of(&object).and_then(|kind| Some((kind, writers.get_mut(&kind)?))) {
            writer.apply_watcher_event(&build_live_event(kind, watcher::Event::Apply(object)));
        }
    }
    writers.into_iter().map(|(kind, writer)| (kind, writer.as_reader())).collect()
}

/// The cluster and policy status a converged reconcile leaves behind.
fn converged(policy: &TierPolicy, namespaces: usize) -> (Vec<DynamicObject>, TierPolicy) {
    let view = snapshot(namespaces, None).load().cluster_view();
    let set = build_desired_set(policy, desired_objects(policy, &view).unwrap_or_default(), None).unwrap_or_default();
    let mut counts = BTreeMap::new();
    let objects = set
        .objects
        .into_iter()
        .map(|desired| {
            *counts.entry(desired.kind.name().to_owned()).or_insert(0) += 1;
            let mut object = desired.object;
            object.metadata.uid = Some(format!("uid-{}", object.metadata.name.clone().unwrap_or_default()));
            object.metadata.resource_version = Some("1".to_owned());
            object
        })
        .collect();
    let input = StatusInput::Applied {
        tier_count: 3,
        object_counts: counts,
        migrations: vec![],
        flavor_migrations: Vec::new(),
        shrunk_tiers: vec![],
        mutating_policies_served: None,
        validating_policies_served: None,
        quota_windows: Vec::new(),
    };
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let mut policy = policy.clone();
    policy.status = Some(build_status(None, policy.metadata.generation, &input, &now));
    (objects, policy)
}

async fn timed_reconcile(
    policy: &TierPolicy,
    snapshot: Arc<arc_swap::ArcSwap<Snapshot>>,
    live: OwnedStores,
) -> (f64, BTreeMap<String, u64>) {
    let (client, calls) = start_mock(policy);
    let settings = ReconcilerSettings {
        policy_name: "default".to_owned(),
        identity: "bench".to_owned(),
        mutating_gate: false,
        gate_owner: None,
    };
    let ctx = Context::new(client, settings, snapshot, live, WriteGate::always_open(), Arc::new(Metrics::new()));
    ctx.assume_kueue_discovered();
    let started = Instant::now();
    if let Err(error) = reconcile(Arc::new(policy.clone()), ctx).await {
        println!("reconcile failed: {error}");
    }
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    let calls = calls.lock().map(|calls| calls.clone()).unwrap_or_default();
    (elapsed, calls)
}

/// Peak heap (MiB) a reconcile adds on top of its inputs (snapshot, caches, mock), measured with dhat.
async fn reconcile_peak_heap(
    policy: &TierPolicy,
    snapshot: Arc<arc_swap::ArcSwap<Snapshot>>,
    live: OwnedStores,
) -> f64 {
    let (client, _calls) = start_mock(policy);
    let settings = ReconcilerSettings {
        policy_name: "default".to_owned(),
        identity: "bench".to_owned(),
        mutating_gate: false,
        gate_owner: None,
    };
    let ctx = Context::new(client, settings, snapshot, live, WriteGate::always_open(), Arc::new(Metrics::new()));
    ctx.assume_kueue_discovered();
    let profiler = dhat::Profiler::builder().testing().trim_backtraces(Some(1)).build();
    let before = dhat::HeapStats::get().curr_bytes;
    if let Err(error) = reconcile(Arc::new(policy.clone()), ctx).await {
        println!("reconcile failed: {error}");
    }
    let peak = dhat::HeapStats::get().max_bytes;
    drop(profiler);
    peak.saturating_sub(before) as f64 / (1024.0 * 1024.0)
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|pages| pages.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// A namespace as the API server sends it, decoded the way the cache decodes it.
fn raw_namespace(index: usize) -> NamespaceLite {
    serde_json::from_value(json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {
            "name": format!("tenant-{index:05}"), "uid": format!("00000000-0000-0000-0000-{index:012}"),
            "resourceVersion": "123456789", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kubernetes.io/metadata.name": format!("tenant-{index:05}"), TIER_LABEL: TIERS[index % 3],
                       "team": format!("team-{}", index % 97), "cost-center": "cc-1234", "env": "prod"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(400), "owner": "someone@example.com"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}, "f:env": {}}}}}],
        }
    }))
    .unwrap_or_default()
}

/// A node as the API server sends it, decoded the way the cache decodes it (only what tiergate reads).
fn raw_node(index: usize) -> NodeLite {
    let mut labels = serde_json::Map::new();
    for label in 0..30 {
        labels.insert(format!("node.example.com/label-{label}"), json!(format!("value-{label}-{}", index % 7)));
    }
    labels.insert("gpu.nvidia.com/class".to_owned(), json!(["h100", "a100", "l4"][index % 3]));
    let images: Vec<Value> = (0..40)
        .map(|image| json!({"names": [format!("registry.example.com/team/image-{image}@sha256:{}", "a".repeat(64))], "sizeBytes": 123456789}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("gpu-node-{index:04}"), "uid": format!("node-{index}"), "resourceVersion": "1",
                     "labels": labels, "annotations": {"node.alpha.kubernetes.io/ttl": "0", "csi.volume.kubernetes.io/nodeid": "x".repeat(200)},
                     "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]},
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": "aws:///us-east-1a/i-0123456789",
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "191", "memory": "2043Gi", "nvidia.com/gpu": "8", "pods": "110", "ephemeral-storage": "900Gi"},
            "capacity": {"cpu": "192", "memory": "2048Gi", "nvidia.com/gpu": "8", "pods": "110", "ephemeral-storage": "1000Gi"},
            "conditions": (0..6).map(|c| json!({"type": format!("Condition{c}"), "status": "False", "reason": "Fine", "message": "kubelet is fine"})).collect::<Vec<_>>(),
            "images": images,
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1", "osImage": "linux",
                         "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.36.0", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
        }
    }))
    .unwrap_or_default()
}

/// Live heap (MiB) of the trimmed caches and the snapshot, and the peak while filling them.
fn measure_cache_memory(policy: &TierPolicy) -> (f64, f64) {
    let (objects, _) = converged(policy, 10_000);
    let queues_raw: Vec<DynamicObject> =
        objects.into_iter().filter(|object| KueueKind::of(object) == Some(KueueKind::LocalQueue)).collect();
    let profiler = dhat::Profiler::builder().testing().trim_backtraces(Some(1)).build();
    let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
    let mut previous = dhat::HeapStats::get().curr_bytes;
    let mut report = |what: &str, count: usize| {
        let now = dhat::HeapStats::get().curr_bytes;
        let added = now.saturating_sub(previous);
        let each = if count > 1 { format!(" ({} bytes each)", added / count) } else { String::new() };
        println!("  + {what}: {:.1} MiB{each}, {:.1} MiB in all", mib(added), mib(now));
        previous = now;
    };
    let mut namespaces = Writer::<Cached<NamespaceView>>::default();
    for index in 0..10_000 {
        let namespace = Cached::new_view(build_namespace_view(raw_namespace(index)));
        namespaces.apply_watcher_event(&watcher::Event::Apply(namespace));
    }
    report("10,000 namespaces store", 10_000);
    let mut nodes = Writer::<Cached<NodeView>>::default();
    for index in 0..2_000 {
        let node = Cached::new_view(build_node_view(raw_node(index)));
        nodes.apply_watcher_event(&watcher::Event::Apply(node));
    }
    report("2,000 nodes store", 2_000);
    let queue_count = queues_raw.len();
    let mut queues = Writer::<LiveObject>::new(KueueKind::LocalQueue);
    for object in queues_raw {
        queues.apply_watcher_event(&build_live_event(KueueKind::LocalQueue, watcher::Event::Apply(object)));
    }
    report("10,000 LocalQueues store (LiveObject)", queue_count);
    let inputs = SnapshotInputs {
        policy_name: "default",
        own_namespace: "tiergate-system",
        policies: vec![Arc::new(policy.clone())],
        namespaces: unwrap_cached(namespaces.as_reader().state()),
        nodes: unwrap_cached(nodes.as_reader().state()),
        local_queues: queues.as_reader().state(),
        pods: vec![],
        replica_sets: vec![],
        claim_templates: vec![],
        bindings: vec![],
        owners: None,
        synced: true,
    };
    let snapshot = build_snapshot(&inputs);
    drop(inputs);
    report("snapshot", 1);
    let stats = dhat::HeapStats::get();
    std::hint::black_box((&namespaces, &nodes, &queues, &snapshot));
    drop(profiler);
    (mib(stats.curr_bytes), mib(stats.max_bytes))
}

/// Live heap (MiB) of the owner index: `count` owner records in the owner tables (as the metadata-only watch
/// fills them) and the index a snapshot builds over them.
fn measure_owner_index_memory(count: usize) -> f64 {
    let profiler = dhat::Profiler::builder().testing().trim_backtraces(Some(1)).build();
    let before = dhat::HeapStats::get().curr_bytes;
    let kind = tiergate::owners::OwnerKind { group: "batch", version: "v1", kind: "Job" };
    let tables = tiergate::cache::owners::OwnerTables::default();
    let mut sink = tables.sink(kind);
    for index in 0..count {
        let record = tiergate::owners::OwnerRecord {
            kind,
            namespace: format!("team-{:05}", index / 3),
            name: format!("train-job-{index:06}"),
            uid: format!("{index:08}-0000-4000-8000-000000000000").into(),
            controller_uid: None,
        };
        sink.apply(&watcher::Event::Apply(record));
    }
    let index = tiergate::owners::OwnerIndex::with_store(Some(tables.store()), []);
    let live = dhat::HeapStats::get().curr_bytes.saturating_sub(before);
    std::hint::black_box((&tables, &index));
    drop(profiler);
    println!(
        "owner index: {count} owner records (tables + snapshot index): {:.1} MiB live heap ({} bytes each)",
        live as f64 / (1024.0 * 1024.0),
        live / count.max(1)
    );
    live as f64 / (1024.0 * 1024.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut policy = tiergate::inputs::load_policy(None).unwrap_or_else(|error| panic_free_exit(&error.to_string()));
    policy.metadata.uid = Some("policy-uid".to_owned());
    policy.metadata.generation = Some(1);
    let (live, peak) = measure_cache_memory(&policy);
    measure_owner_index_memory(30_000);
    println!(
        "caches with 10,000 namespaces + 2,000 nodes + 10,000 LocalQueues + snapshot: {live:.1} MiB live heap \
         (peak {peak:.1} MiB while filling); process RSS now {:.1} MiB",
        resident_bytes() as f64 / (1024.0 * 1024.0)
    );
    let writes = |calls: &BTreeMap<String, u64>| {
        calls.iter().filter(|(call, _)| !call.starts_with("GET")).map(|(_, n)| n).sum::<u64>()
    };

    let (cold_ms, cold_calls) = timed_reconcile(&policy, snapshot(1_000, None), stores(vec![])).await;
    println!("cold start, 1,000 namespaces: {cold_ms:.1} ms, {} API writes: {cold_calls:?}", writes(&cold_calls));

    let (objects, converged_policy) = converged(&policy, 1_000);
    let (steady_ms, steady_calls) =
        timed_reconcile(&converged_policy, snapshot(1_000, None), stores(objects.clone())).await;
    println!("steady state, 1,000 namespaces: {steady_ms:.1} ms, {} API writes", writes(&steady_calls));

    let (relabel_ms, relabel_calls) =
        timed_reconcile(&converged_policy, snapshot(1_000, Some(7)), stores(objects)).await;
    println!(
        "one relabel, 1,000 namespaces: {relabel_ms:.1} ms, {} API writes: {relabel_calls:?}",
        writes(&relabel_calls)
    );

    let (big_objects, big_policy) = converged(&policy, 10_000);
    let (big_ms, big_calls) = timed_reconcile(&big_policy, snapshot(10_000, None), stores(big_objects.clone())).await;
    println!("steady state, 10,000 namespaces: {big_ms:.1} ms, {} API writes", writes(&big_calls));

    let steady_peak = reconcile_peak_heap(&big_policy, snapshot(10_000, None), stores(big_objects)).await;
    let cold_peak = reconcile_peak_heap(&policy, snapshot(10_000, None), stores(vec![])).await;
    println!(
        "reconcile peak heap over its inputs, 10,000 namespaces: steady state {steady_peak:.1} MiB, \
         cold start {cold_peak:.1} MiB"
    );
}

fn panic_free_exit(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(1)
}
