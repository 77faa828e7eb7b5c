//! Golden tests: every `samples/<name>/policy.yaml` (with its `cluster.yaml`) renders to the committed
//! `samples/<name>/expected.yaml`. After an intended change, regenerate with
//! `TIERGATE_BLESS=1 cargo test -p tiergate --test plan_golden` and review the diff.

#![cfg(test)]

use std::path::{Path, PathBuf};

use tiergate::inputs::{load_cluster_view, load_policy};
use tiergate::plan::desired;
use tiergate::validation::validate_policy;
use tiergate::view::ClusterView;

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples")
}

fn sample_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("policy.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn render(dir: &Path) -> String {
    let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
    validate_policy(&policy).unwrap_or_else(|errors| panic!("{}: {errors}", dir.display()));
    let cluster = dir.join("cluster.yaml");
    let view = if cluster.is_file() { load_cluster_view(&cluster).unwrap() } else { ClusterView::default() };
    desired(&policy, &view).to_yaml_stream().unwrap()
}

#[test]
fn every_sample_policy_renders_to_its_committed_expected_yaml() {
    let bless = std::env::var_os("TIERGATE_BLESS").is_some_and(|value| value == "1");
    let dirs = sample_dirs();
    assert!(dirs.len() >= 2, "expected at least the kubenexus and spot-mix samples, found {dirs:?}");
    for dir in dirs {
        let rendered = render(&dir);
        let expected_path = dir.join("expected.yaml");
        if bless {
            std::fs::write(&expected_path, &rendered).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|error| {
            panic!("{}: {error}; run with TIERGATE_BLESS=1 to create it", expected_path.display())
        });
        pretty_assertions::assert_eq!(
            expected,
            rendered,
            "{} differs; TIERGATE_BLESS=1 regenerates it",
            expected_path.display()
        );
    }
}

#[test]
fn the_golden_stream_parses_back_to_the_same_objects() {
    for dir in sample_dirs() {
        let rendered = render(&dir);
        let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&rendered).unwrap();
        let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
        let cluster = dir.join("cluster.yaml");
        let view = if cluster.is_file() { load_cluster_view(&cluster).unwrap() } else { ClusterView::default() };
        let values = desired(&policy, &view).to_values().unwrap();
        let documents: Vec<&serde_json::Value> = documents.iter().filter(|document| !document.is_null()).collect();
        assert_eq!(documents, values.iter().collect::<Vec<_>>(), "{}", dir.display());
    }
}

#[test]
fn every_sample_cluster_queue_offers_exactly_its_tier_quota_summed_over_its_flavors() {
    use tiergate::plan::quota::parse_millis;
    for dir in sample_dirs() {
        let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
        let desired = desired(&policy, &ClusterView::default());
        for tier in &policy.spec.tiers {
            let queue_name = format!("tiergate-{}", tier.name);
            let queue = desired.cluster_queues.iter().find(|queue| queue.metadata.name.as_deref() == Some(&queue_name));
            let group = &queue.unwrap().spec.resource_groups[0];
            for (resource, quota) in &tier.quotas {
                let offered: i128 = group
                    .flavors
                    .iter()
                    .map(|flavor| {
                        let entry = flavor.resources.iter().find(|entry| &entry.name == resource).unwrap();
                        parse_millis(&entry.nominal_quota.0).unwrap()
                    })
                    .sum();
                let total = parse_millis(&quota.nominal.0).unwrap();
                assert_eq!(offered, total, "{}: tier {} {resource}", dir.display(), tier.name);
            }
        }
    }
}
