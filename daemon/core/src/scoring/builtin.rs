//! The built-in scorer: a deterministic `/v1/score` answer from the job's GPU memory need and the GPU inventory
//! of the candidate classes; pure, no I/O. Used in the webhook when no agent is configured and served by
//! `tiergate agent`.
//!
//! For each candidate class `c` (in the request's order, unknown names skipped):
//! - `fit(c)`: with a requested GPU memory `m` and the class's `memoryGib` `M`: `m / M` when `m <= M` (1.0 is an
//!   exact fit, so small jobs prefer small cards); the class is not eligible when `m > M`; 0.5 when either is
//!   unknown.
//! - `free(c)`: `(allocatable - in_use) / allocatable` over the class's nodes, clamped to 0..=1; 0 without nodes.
//! - `value(c) = 0.6 * fit(c) + 0.4 * free(c)`.
//!
//! The chosen class is the eligible one with the highest value (ties: earlier candidate, i.e. the tier's primary
//! class), and the score is `round(100 * value)`. No eligible class: score 0 and no choice (the job keeps its
//! tier's flavors). Batch size, tenant and co-located job types are not used; `avoid_co_locate_with` is empty.

use std::sync::Arc;

use crate::policy::GpuClass;
use crate::scoring::wire::{GpuSelector, ScoreRequest, ScoreResponse, ScoreTerms};
use crate::view::{NodeView, PodView, build_class_digest};

/// Weight of memory fit in a class's value.
pub const FIT_WEIGHT: f64 = 0.6;
/// Weight of free capacity in a class's value.
pub const FREE_WEIGHT: f64 = 0.4;
/// Fit used when the job or the class does not state its GPU memory.
pub const UNKNOWN_FIT: f64 = 0.5;

pub use crate::view::{ClassCapacity, Inventory};

/// The inventory of `classes` from the node and pod caches (one pass over the nodes, one over the pods).
pub fn build_inventory<'a>(
    classes: &[&GpuClass],
    nodes: impl IntoIterator<Item = &'a Arc<NodeView>>,
    pods: &[Arc<PodView>],
) -> Inventory {
    build_class_digest(classes, nodes, pods).inventory
}

/// How well `class` fits a job needing `gpu_mem_gib` per GPU: `None` when it does not fit at all.
pub fn memory_fit(gpu_mem_gib: Option<u32>, class: &GpuClass) -> Option<f64> {
    match (gpu_mem_gib, class.memory_gib) {
        (Some(needed), Some(has)) if needed > has => None,
        (Some(needed), Some(has)) if has > 0 => Some(f64::from(needed) / f64::from(has)),
        _ => Some(UNKNOWN_FIT),
    }
}

/// The free share of a class's GPUs.
pub fn free_share(capacity: ClassCapacity) -> f64 {
    if capacity.allocatable <= 0 {
        return 0.0;
    }
    ((capacity.allocatable - capacity.in_use) as f64 / capacity.allocatable as f64).clamp(0.0, 1.0)
}

/// The built-in scorer's answer to a `/v1/score` request (see the module docs for the formula).
pub fn builtin_response(request: &ScoreRequest, classes: &[GpuClass], inventory: &Inventory) -> ScoreResponse {
    let mut best: Option<(&GpuClass, f64)> = None;
    for name in &request.candidate_gpu_types {
        let Some(class) = classes.iter().find(|class| &class.name == name) else { continue };
        let Some(fit) = memory_fit(request.features.gpu_mem_gb, class) else { continue };
        let free = free_share(inventory.get(&class.name).copied().unwrap_or_default());
        let value = FIT_WEIGHT * fit + FREE_WEIGHT * free;
        if best.is_none_or(|(_, best_value)| value > best_value) {
            best = Some((class, value));
        }
    }
    let score = best.map_or(0, |(_, value)| (value * 100.0).round().clamp(0.0, 100.0) as i64);
    ScoreResponse {
        priority_score: score.into(),
        gpu_selector: best.map(|(class, _)| GpuSelector { node_selector: class.node_labels.clone() }),
        avoid_co_locate_with: Some(vec![]),
        terms: Some(ScoreTerms { chosen_gpu: best.map(|(class, _)| class.name.clone()) }),
    }
}

/// A warning when the job needs more GPU memory than every candidate class with a known size offers.
pub fn memory_shortfall_warning(gpu_mem_gib: Option<u32>, tier: &str, candidates: &[&GpuClass]) -> Option<String> {
    let needed = gpu_mem_gib?;
    let sized: Vec<(&str, u32)> =
        candidates.iter().filter_map(|class| class.memory_gib.map(|gib| (class.name.as_str(), gib))).collect();
    if sized.is_empty() || sized.iter().any(|(_, gib)| *gib >= needed) {
        return None;
    }
    let offered: Vec<String> = sized.iter().map(|(name, gib)| format!("{name}: {gib} GiB")).collect();
    Some(format!(
        "the job asks for {needed} GiB of GPU memory per GPU, more than any GPU class of tier {tier} has ({}); it may \
         fail to run there",
        offered.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    use crate::scoring::wire::ScoreFeatures;

    fn classes() -> Vec<GpuClass> {
        load_policy(None).unwrap().spec.gpu_classes
    }

    fn sample_inventory() -> Inventory {
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        build_inventory(&classes().iter().collect::<Vec<_>>(), &view.nodes, &[])
    }

    fn request(gpu_mem_gb: Option<u32>, candidates: &[&str]) -> ScoreRequest {
        ScoreRequest {
            job_type: "train-bert".to_owned(),
            features: ScoreFeatures { gpu_mem_gb, batch_size: Some(16), tenant: None },
            candidate_gpu_types: candidates.iter().map(|name| (*name).to_owned()).collect(),
            colocated_job_types: vec![],
        }
    }

    fn chosen(response: &ScoreResponse) -> Option<&str> {
        response.terms.as_ref().and_then(|terms| terms.chosen_gpu.as_deref())
    }

    #[test]
    fn inventory_sums_allocatable_per_class_from_the_sample_cluster() {
        let inventory = sample_inventory();
        assert_eq!(inventory["h100"], ClassCapacity { allocatable: 8, in_use: 0 });
        assert_eq!(inventory["l4"], ClassCapacity { allocatable: 4, in_use: 0 });
    }

    #[test]
    fn cached_pods_on_a_class_node_use_the_gpus_they_request() {
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let pod = |gpus: Option<i64>| {
            let requests = gpus.map(|gpus| ("nvidia.com/gpu".to_owned(), gpus)).into_iter().collect();
            Arc::new(PodView { node_name: Some("gpu-l4-node-1".to_owned()), requests, ..PodView::default() })
        };
        let inventory = build_inventory(
            &classes().iter().collect::<Vec<_>>(),
            &view.nodes,
            &[pod(Some(2)), pod(Some(1)), pod(None)],
        );
        assert_eq!(inventory["l4"], ClassCapacity { allocatable: 4, in_use: 3 }, "a pod without GPUs uses none");
        assert_eq!(free_share(inventory["l4"]), 0.25);
    }

    #[test]
    fn a_snapshot_digests_every_policy_class_once() {
        use crate::view::Snapshot;
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let pod = Arc::new(PodView {
            node_name: Some("gpu-l4-node-1".to_owned()),
            requests: [("nvidia.com/gpu".to_owned(), 1)].into(),
            ..PodView::default()
        });
        let snapshot = Snapshot {
            policy: Some(Arc::new(load_policy(None).unwrap())),
            nodes: view.nodes.iter().map(|node| (node.name.clone(), node.clone())).collect(),
            pods: vec![pod.clone()],
            ..Snapshot::default()
        };
        let expected = build_inventory(&classes().iter().collect::<Vec<_>>(), &view.nodes, &[pod]);
        assert_eq!(snapshot.gpu_class_digest().inventory, expected);
        assert_eq!(snapshot.gpu_class_digest().inventory["l4"], ClassCapacity { allocatable: 4, in_use: 1 });
        assert!(std::ptr::eq(snapshot.gpu_class_digest(), snapshot.gpu_class_digest()), "computed once, reused");
        let without_policy = Snapshot { policy: None, gpu_class_digest_memo: std::sync::OnceLock::new(), ..snapshot };
        assert!(without_policy.gpu_class_digest().inventory.is_empty(), "no policy, no classes");
    }

    #[test]
    fn a_40_gib_job_scores_by_fit_and_free_share_on_an_80_gib_class() {
        let response = builtin_response(&request(Some(40), &["h100"]), &classes(), &sample_inventory());
        // 0.6 * 40/80 + 0.4 * 8/8 = 0.7
        assert_eq!(response.priority_score.as_i64(), Some(70));
        assert_eq!(chosen(&response), Some("h100"));
        assert_eq!(response.gpu_selector.unwrap().node_selector["gpu.nvidia.com/class"], "h100");
    }

    #[test]
    fn a_class_too_small_for_the_job_is_never_chosen() {
        let response = builtin_response(&request(Some(40), &["l4"]), &classes(), &sample_inventory());
        assert_eq!(response.priority_score.as_i64(), Some(0));
        assert_eq!(chosen(&response), None);
    }

    #[test]
    fn only_candidates_are_chosen_even_when_a_better_class_exists() {
        let response = builtin_response(&request(Some(20), &["l4"]), &classes(), &sample_inventory());
        assert_eq!(chosen(&response), Some("l4"));
        let unknown = builtin_response(&request(Some(20), &["does-not-exist"]), &classes(), &sample_inventory());
        assert_eq!(chosen(&unknown), None);
    }

    #[test]
    fn the_tightest_fit_wins_among_candidates() {
        let response = builtin_response(&request(Some(20), &["h100", "l4"]), &classes(), &sample_inventory());
        assert_eq!(chosen(&response), Some("l4"));
    }

    #[test]
    fn equal_values_keep_the_tiers_primary_class() {
        let response = builtin_response(&request(None, &["a100", "h100"]), &classes(), &sample_inventory());
        assert_eq!(chosen(&response), Some("a100"));
    }

    #[test]
    fn the_same_request_always_gets_the_same_answer() {
        let inventory = sample_inventory();
        let first = builtin_response(&request(Some(24), &["l4", "a100"]), &classes(), &inventory);
        for _ in 0..10 {
            assert_eq!(builtin_response(&request(Some(24), &["l4", "a100"]), &classes(), &inventory), first);
        }
    }

    #[test]
    fn memory_shortfall_is_reported_with_the_tiers_classes() {
        let classes = classes();
        let l4: Vec<&GpuClass> = classes.iter().filter(|class| class.name == "l4").collect();
        let warning = memory_shortfall_warning(Some(40), "bronze", &l4).unwrap();
        assert!(warning.contains("40 GiB") && warning.contains("l4: 24 GiB"), "{warning}");
        assert_eq!(memory_shortfall_warning(Some(24), "bronze", &l4), None);
        assert_eq!(memory_shortfall_warning(None, "bronze", &l4), None);
    }
}
