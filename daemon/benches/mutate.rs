//! The pure core under criterion: `mutate()` on recorded fixtures and on the same Job grown to 100 KiB and 1 MiB
//! (target: ≤ 40 µs end to end on the 10 KB Job; `parse` alone beside it; end to end is what the server does with
//! a review: parse, decide, fold the patch, encode the answer), `plan::desired` for 1,000 namespaces,
//! strategy parsing, and the flavor-drain step of a reconcile. Allocation counts for the same inputs are in the
//! `allocations` bench.

mod support;

use std::sync::{Arc, OnceLock};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use support::{answer, fixture, many_namespaces, score, sized_reviews};
use tiergate::admission::{AdmissionInputs, build_static_snapshot, fold_deep_edits, mutate, parse_review};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::plan::desired;
use tiergate::policy::GpuClass;
use tiergate::scoring::builtin::builtin_response;
use tiergate::scoring::features::scoring_job;
use tiergate::view::{NodeView, Snapshot, build_class_digest};
use tiergate_compat::strategy::{parse_custom_pod_strategy, parse_schedule_strategy};

fn bench_mutate(c: &mut Criterion) {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").ok().unwrap_or_default();
    let Ok(policy) = load_policy(None) else { return };
    let snapshot = build_static_snapshot(policy, view, None);
    for (name, scored) in [
        ("job-update-bronze-add-label.json", true),
        ("job-create-bronze-gpu-scored.json", true),
        ("pod-create-from-job-1.json", false),
        ("pod-create-bronze-cpu-only.json", false),
    ] {
        let body = fixture(name);
        let Ok(request) = parse_review(&body) else { continue };
        let inputs = AdmissionInputs { score: scored.then(score), ..AdmissionInputs::default() };
        c.bench_function(&format!("mutate/{name}"), |b| b.iter(|| mutate(&request, &snapshot, &inputs)));
        let patch = mutate(&request, &snapshot, &inputs).patch;
        c.bench_function(&format!("fold/{name}"), |b| b.iter(|| fold_deep_edits(&patch, &body)));
        c.bench_function(&format!("parse+mutate+fold+encode/{name}"), |b| b.iter(|| answer(&body, &snapshot, &inputs)));
    }
}

fn bench_sizes(c: &mut Criterion) {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").ok().unwrap_or_default();
    let Ok(policy) = load_policy(None) else { return };
    let snapshot = build_static_snapshot(policy, view, None);
    let inputs = AdmissionInputs { score: Some(score()), ..AdmissionInputs::default() };
    let mut group = c.benchmark_group("decision-by-size");
    for (name, body) in sized_reviews() {
        let Ok(request) = parse_review(&body) else { continue };
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("parse", &name), &body, |b, body| b.iter(|| parse_review(body)));
        group.bench_with_input(BenchmarkId::new("mutate", &name), &request, |b, request| {
            b.iter(|| mutate(request, &snapshot, &inputs))
        });
        group.bench_with_input(BenchmarkId::new("parse+mutate+fold+encode", &name), &body, |b, body| {
            b.iter(|| answer(body, &snapshot, &inputs))
        });
    }
    group.finish();
}

fn bench_translation(c: &mut Criterion) {
    let Ok(policy) = load_policy(None) else { return };
    let view = many_namespaces(&policy, 1_000);
    c.bench_function("plan::desired/1000-namespaces-3-tiers", |b| b.iter(|| desired(&policy, &view)));
}

fn bench_strategies(c: &mut Criterion) {
    let schedule = "base=1,weight=2,nodeSelector=zone:us-west-1a,node-type:ondemand;\
                    weight=1,nodeSelector=zone:us-west-1b,node-type:spot";
    let custom = "lc=od,base=2,weight=1:lc=spot,karpenter.sh/capacity-type=spot,weight=1";
    c.bench_function("strategy/schedule-strategy (seed 003)", |b| b.iter(|| parse_schedule_strategy(schedule)));
    c.bench_function("strategy/custom-pod-strategy (seed 004)", |b| b.iter(|| parse_custom_pod_strategy(custom)));
}

/// The sample cluster's GPU nodes copied to 2,000 (each copy renamed), with the sample policy.
fn snapshot_with_2000_gpu_nodes() -> Option<Snapshot> {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").ok()?;
    let policy = load_policy(None).ok()?;
    let gpu_nodes: Vec<&NodeView> =
        view.nodes.iter().map(AsRef::as_ref).filter(|node| !node.allocatable.is_empty()).collect();
    let nodes = (0..2_000)
        .map(|index| {
            let node = NodeView { name: format!("gpu-node-{index:04}"), ..gpu_nodes[index % gpu_nodes.len()].clone() };
            (node.name.clone(), Arc::new(node))
        })
        .collect();
    let snapshot = build_static_snapshot(policy, view, None);
    Some(Snapshot { nodes, gpu_class_digest_memo: OnceLock::new(), ..snapshot })
}

fn bench_scoring(c: &mut Criterion) {
    let Some(snapshot) = snapshot_with_2000_gpu_nodes() else { return };
    let Some(policy) = snapshot.policy.clone() else { return };
    let Ok(request) = parse_review(&fixture("job-create-bronze-gpu-scored.json")) else { return };
    let classes: Vec<&GpuClass> = policy.spec.gpu_classes.iter().collect();
    c.bench_function("score/builtin answer, 2,000 GPU nodes, digest built", |b| {
        b.iter(|| {
            let job = scoring_job(&request, &snapshot, &policy.spec)?;
            let inventory = &snapshot.gpu_class_digest().inventory;
            Some(builtin_response(&job.request, &policy.spec.gpu_classes, inventory))
        })
    });
    c.bench_function("score/class digest build (once per snapshot), 2,000 GPU nodes", |b| {
        b.iter(|| build_class_digest(&classes, snapshot.nodes.values(), &snapshot.pods))
    });
}

/// `reconcile::drain` over the sample policy's ClusterQueues, each live queue holding quota: in the steady state
/// (every flavor holding quota is one the policy gives) and while each queue drains a retired flavor.
fn bench_drain(c: &mut Criterion) {
    use kube::core::DynamicObject;
    use tiergate::reconcile::desired::desired_cluster_objects;
    use tiergate::reconcile::drain::carry_draining_flavors;
    use tiergate::reconcile::kinds::KueueKind;
    use tiergate::reconcile::live::LiveObject;

    let Ok(policy) = load_policy(None) else { return };
    let Ok(objects) = desired_cluster_objects(&policy) else { return };
    let queues: Vec<&DynamicObject> =
        objects.iter().filter(|object| KueueKind::of(object) == Some(KueueKind::ClusterQueue)).collect();
    let live_queues = |retired: bool| -> Vec<LiveObject> {
        queues
            .iter()
            .filter_map(|queue| {
                let mut value = serde_json::to_value(queue).ok()?;
                let groups = value.pointer_mut("/spec/resourceGroups")?.as_array_mut()?;
                let group = groups.first_mut()?;
                let covered: Vec<serde_json::Value> = group["coveredResources"].as_array()?.clone();
                let first = group["flavors"][0]["name"].as_str()?.to_owned();
                let holder = if retired { "retired".to_owned() } else { first };
                if retired {
                    let resources: Vec<serde_json::Value> =
                        covered.iter().map(|name| serde_json::json!({"name": name, "nominalQuota": "1"})).collect();
                    group["flavors"]
                        .as_array_mut()?
                        .push(serde_json::json!({"name": "retired", "resources": resources}));
                }
                let held: Vec<serde_json::Value> =
                    covered.iter().map(|name| serde_json::json!({"name": name, "total": "1"})).collect();
                value["status"] = serde_json::json!({"flavorsReservation": [{"name": holder, "resources": held}]});
                Some(LiveObject::from_dynamic(KueueKind::ClusterQueue, serde_json::from_value(value).ok()?))
            })
            .collect()
    };
    for (name, retired) in [("steady state", false), ("each queue draining a retired flavor", true)] {
        let live = live_queues(retired);
        let lookup = |kind: KueueKind, name: &str| {
            live.iter().find(|object| object.kind == kind && object.name == name).cloned()
        };
        c.bench_function(&format!("drain/sample policy's {} queues, {name}", queues.len()), |b| {
            b.iter_batched_ref(
                || objects.clone(),
                |objects| carry_draining_flavors(objects, lookup),
                criterion::BatchSize::SmallInput,
            )
        });
    }
}

/// One requeue pass's pure step over a namespace's Workloads (a tenth pending in the retired queue, the rest
/// admitted or elsewhere): which owners to relabel.
fn bench_requeue(c: &mut Criterion) {
    use tiergate::answers::kueue::KueueWorkload;
    use tiergate::reconcile::requeue::find_pending_owners;

    for count in [100_usize, 1000] {
        let workloads: Vec<KueueWorkload> = (0..count)
            .filter_map(|index| {
                let pending = index % 10 == 0;
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("job-{index}"), "namespace": "team", "ownerReferences": [
                        {"apiVersion": "batch/v1", "kind": "Job", "name": format!("j{index}"), "uid": format!("u{index}"),
                            "controller": true}]},
                    "spec": {"queueName": if pending { "tiergate-gold" } else { "tiergate-silver" }},
                    "status": {"conditions": [{"type": "QuotaReserved", "status": if pending { "False" } else { "True" },
                        "reason": "r", "message": "m"}]},
                }))
                .ok()
            })
            .collect();
        c.bench_function(&format!("requeue/find_pending_owners/{count}"), |b| {
            b.iter(|| find_pending_owners(&workloads, "tiergate-gold"))
        });
    }
}

criterion_group!(
    benches,
    bench_mutate,
    bench_sizes,
    bench_translation,
    bench_strategies,
    bench_scoring,
    bench_drain,
    bench_requeue
);
criterion_main!(benches);
