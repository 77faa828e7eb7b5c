//! `mutate()` on recorded fixtures: the pure decision and patch, without HTTP (target: ≤ 50 µs on the 10 KB Job).

use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use tiergate::admission::{AdmissionInputs, build_static_snapshot, encode_review, mutate, parse_review};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::scoring::{ScoreOutcome, ScoreSource};

fn fixture(name: &str) -> Vec<u8> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dirs = [root.join("../shared/fixtures/admission"), root.join("../../shared/fixtures/admission")];
    let dir = dirs.into_iter().find(|dir| dir.is_dir()).unwrap_or_default();
    std::fs::read(dir.join(name)).unwrap_or_default()
}

fn bench_mutate(c: &mut Criterion) {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").ok().unwrap_or_default();
    let Ok(policy) = load_policy(None) else { return };
    let snapshot = build_static_snapshot(policy, view, None);
    let score = ScoreOutcome {
        priority_class: "gpu-high".into(),
        score: Some(75),
        chosen_gpu_class: Some("l4".into()),
        avoid_job_types: vec!["train-llama".into()],
        source: ScoreSource::Agent,
        warnings: Vec::new(),
        decided_at_unix: 1_699_123_456,
    };
    for (name, scored) in [
        ("job-update-bronze-add-label.json", true),
        ("job-create-bronze-gpu-scored.json", true),
        ("pod-create-from-job-1.json", false),
        ("pod-create-bronze-cpu-only.json", false),
    ] {
        let body = fixture(name);
        let Ok(request) = parse_review(&body) else { continue };
        let inputs = AdmissionInputs { score: scored.then(|| score.clone()), ..AdmissionInputs::default() };
        c.bench_function(&format!("mutate/{name}"), |b| b.iter(|| mutate(&request, &snapshot, &inputs)));
        c.bench_function(&format!("parse+mutate+encode/{name}"), |b| {
            b.iter(|| {
                let Ok(request) = parse_review(&body) else { return Vec::new() };
                let decision = mutate(&request, &snapshot, &inputs);
                encode_review(&decision.response(&request)).unwrap_or_default()
            })
        });
    }
}

criterion_group!(benches, bench_mutate);
criterion_main!(benches);
