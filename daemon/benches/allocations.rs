//! Heap allocations per call of the pure core (the inputs of the `mutate` bench), counted by dhat's heap profiler
//! in testing mode. A separate binary so the counting allocator never slows the criterion timings.
//! Run: `cargo bench -p tiergate --bench allocations`.

mod support;

use support::{answer, fixture, many_namespaces, score, sized_reviews};
use tiergate::admission::{AdmissionInputs, build_static_snapshot, mutate, parse_review};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::plan::desired;
use tiergate_compat::strategy::{parse_custom_pod_strategy, parse_schedule_strategy};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Runs `call` `runs` times and prints the mean allocations and bytes allocated per call.
fn count<T>(name: &str, runs: u64, mut call: impl FnMut() -> T) {
    drop(call()); // warm-up: lazily built statics are not per-request costs
    let before = dhat::HeapStats::get();
    for _ in 0..runs {
        drop(std::hint::black_box(call()));
    }
    let after = dhat::HeapStats::get();
    let blocks = (after.total_blocks - before.total_blocks) / runs;
    let bytes = (after.total_bytes - before.total_bytes) / runs;
    println!("| {name} | {blocks} | {bytes} |");
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").ok().unwrap_or_default();
    let Ok(policy) = load_policy(None) else { return };
    let snapshot = build_static_snapshot(policy.clone(), view, None);
    let inputs = AdmissionInputs { score: Some(score()), ..AdmissionInputs::default() };
    println!("| call | allocations per call | bytes allocated per call |\n|---|---|---|");
    let mut reviews = sized_reviews();
    reviews.push(("pod-create-from-job-1".to_owned(), fixture("pod-create-from-job-1.json")));
    for (name, body) in &reviews {
        let Ok(request) = parse_review(body) else { continue };
        let runs = if body.len() > 500_000 { 5 } else { 50 };
        count(&format!("mutate, {name} ({} B)", body.len()), runs, || mutate(&request, &snapshot, &inputs));
        count(&format!("parse+mutate+fold+encode, {name}"), runs, || answer(body, &snapshot, &inputs));
    }
    let namespaces = many_namespaces(&policy, 1_000);
    count("plan::desired, 1,000 namespaces, 3 tiers", 5, || desired(&policy, &namespaces));
    count("parse_schedule_strategy (2 rules)", 100, || {
        parse_schedule_strategy("base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=node-type:spot")
    });
    count("parse_custom_pod_strategy (2 rules)", 100, || {
        parse_custom_pod_strategy("lc=od,base=2,weight=1:lc=spot,karpenter.sh/capacity-type=spot,weight=1")
    });
}
