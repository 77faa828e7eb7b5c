//! Inputs shared by the benches: recorded fixtures, the same Job grown to 100 KiB and 1 MiB, a score, and a
//! policy with 1,000 tenant namespaces; reads fixture files. And [`answer`], the server's work on one review.

use std::path::PathBuf;

use serde_json::{Value, json};
use tiergate::admission::{AdmissionInputs, DecisionLabel, encode_review, mutate, parse_review};
use tiergate::policy::TierPolicy;
use tiergate::scoring::{ScoreOutcome, ScoreSource};
use tiergate::view::{ClusterView, NamespaceView, Snapshot};

/// A recorded review from `shared/fixtures/admission` (empty when the directory is missing).
pub fn fixture(name: &str) -> Vec<u8> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dirs = [root.join("../shared/fixtures/admission"), root.join("../../shared/fixtures/admission")];
    let dir = dirs.into_iter().find(|dir| dir.is_dir()).unwrap_or_default();
    std::fs::read(dir.join(name)).unwrap_or_default()
}

/// The scheduler agent's answer the scored fixtures get.
pub fn score() -> ScoreOutcome {
    ScoreOutcome {
        priority_class: "gpu-high".into(),
        score: Some(75),
        chosen_gpu_class: Some("l4".into()),
        avoid_job_types: vec!["train-llama".into()],
        source: ScoreSource::Agent,
        warnings: Vec::new(),
        decided_at_unix: 1_699_123_456,
    }
}

/// `job-create-bronze-gpu-scored.json` (compact JSON, ~2.5 KB) with environment variables of 100 bytes each
/// added to its container until the review body is at least `bytes` long: what a Job with a large inline config
/// looks like. `bytes == 0` returns the compact recorded review unchanged.
pub fn grown_job(bytes: usize) -> Vec<u8> {
    let Ok(mut review) = serde_json::from_slice::<Value>(&fixture("job-create-bronze-gpu-scored.json")) else {
        return Vec::new();
    };
    let base = serde_json::to_vec(&review).unwrap_or_default().len();
    let per_var = json!({"name": "CONFIG_00000", "value": "x".repeat(64)}).to_string().len() + 1;
    let count = bytes.saturating_sub(base).div_ceil(per_var);
    let env: Vec<Value> =
        (0..count).map(|index| json!({"name": format!("CONFIG_{index:05}"), "value": "x".repeat(64)})).collect();
    if let Some(container) = review.pointer_mut("/request/object/spec/template/spec/containers/0")
        && !env.is_empty()
    {
        container["env"] = Value::from(env);
    }
    serde_json::to_vec(&review).unwrap_or_default()
}

/// The decision benches' inputs: (name, review body, scored).
pub fn sized_reviews() -> Vec<(String, Vec<u8>)> {
    let mut reviews = vec![
        ("job-2KB".to_owned(), grown_job(0)),
        ("job-10KB".to_owned(), fixture("job-update-bronze-add-label.json")),
    ];
    for (name, bytes) in [("job-100KB", 100 * 1024), ("job-1MB", 1024 * 1024)] {
        reviews.push((name.to_owned(), grown_job(bytes)));
    }
    reviews
}

/// A policy with the sample's three tiers and a cluster of `count` namespaces spread round-robin over them.
pub fn many_namespaces(policy: &TierPolicy, count: usize) -> ClusterView {
    let tiers: Vec<&str> = policy.spec.tiers.iter().map(|tier| tier.name.as_str()).collect();
    let namespaces = (0..count)
        .map(|index| {
            std::sync::Arc::new(NamespaceView {
                name: format!("tenant-{index:04}"),
                labels: [(policy.spec.tier_label.clone(), tiers[index % tiers.len()].to_owned())].into(),
                ..NamespaceView::default()
            })
        })
        .collect();
    ClusterView { namespaces, ..ClusterView::default() }
}

/// What the webhook server does with one review body (`server::respond` without its I/O): parse, decide, fold a
/// mutating decision's patch against the body, encode the answer.
pub fn answer(body: &[u8], snapshot: &Snapshot, inputs: &AdmissionInputs) -> Vec<u8> {
    let Ok(request) = parse_review(body) else { return Vec::new() };
    let mut decision = mutate(&request, snapshot, inputs);
    if decision.label() == DecisionLabel::Mutated {
        decision.fold_for_api_server(body);
    }
    encode_review(&decision.response(&request)).unwrap_or_default()
}
