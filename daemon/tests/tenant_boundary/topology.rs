//! Topology annotations: a tenant cannot forge a level the tier's classes lack, cannot weaken the tier's rule by
//! writing its own (weaker, nonsense or on the wrong metadata), and topology annotations on CPU-only workloads do
//! not matter; every patch is idempotent.
#![cfg(test)]

use crate::tenant::tenant_review;
use serde_json::{Value, json};
use tiergate::admission::Request;
use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::policy::{TierPolicy, TopologyLevel, TopologyRule};

const GOLD: &str = "ml-research";
const REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
const PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";
const UNCONSTRAINED: &str = "kueue.x-k8s.io/podset-unconstrained-topology";
const SLICE: &str = "kueue.x-k8s.io/podset-slice-required-topology";
const SLICE_SIZE: &str = "kueue.x-k8s.io/podset-slice-size";
const RACK: &str = "topology.example.com/rack";

/// The sample policy, every class with block/rack/host levels, gold requiring one rack from 4 pods.
fn policy() -> TierPolicy {
    let mut policy = load_policy(None).unwrap();
    for class in &mut policy.spec.gpu_classes {
        class.topology_levels =
            [("block", "topology.example.com/block"), ("rack", RACK), ("host", "kubernetes.io/hostname")]
                .into_iter()
                .map(|(name, label)| TopologyLevel { name: name.into(), node_label: label.into() })
                .collect();
    }
    let gold = policy.spec.tiers.iter_mut().find(|tier| tier.name == "gold").unwrap();
    gold.topology = Some(TopologyRule { required: Some("rack".into()), preferred: None, min_pods: 4 });
    policy
}

fn decide(request: &Request) -> Decision {
    let snapshot = build_static_snapshot(policy(), parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None);
    mutate(request, &snapshot, &AdmissionInputs::default())
}

fn review(object: &Value) -> Request {
    tenant_review("CREATE", object, None, false, &["tenants"])
}

fn container(gpu: bool) -> Value {
    let resources = if gpu { json!({"limits": {"nvidia.com/gpu": "1"}}) } else { json!({"requests": {"cpu": "1"}}) };
    json!({"name": "main", "image": "img", "resources": resources})
}

fn job(pods: u64, gpu: bool, annotations: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": GOLD},
        "spec": {"parallelism": pods, "completions": pods, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [container(gpu)]}}}})
}

/// Applies the decision's patch, then checks the webhook leaves its own output alone.
fn patched_idempotent(object: &Value) -> Value {
    let decision = decide(&review(object));
    assert!(matches!(decision.verdict, Verdict::Allow), "{:?} {:?}", decision.verdict, decision.reasons);
    let mut after = object.clone();
    json_patch::patch(&mut after, &decision.patch).unwrap();
    let again = decide(&review(&after));
    assert!(again.patch.0.is_empty(), "not idempotent: {:?}", again.patch);
    after
}

fn template_annotation<'a>(object: &'a Value, pointer: &str, key: &str) -> Option<&'a str> {
    object.pointer(pointer)?.get(key)?.as_str()
}

#[test]
fn a_forged_level_on_a_gpu_pod_template_is_denied_with_the_levels_that_exist() {
    for (key, value) in [(REQUIRED, "rack"), (PREFERRED, "../../etc"), (SLICE, ""), (REQUIRED, "kubernetes.io/zone")] {
        let decision = decide(&review(&job(4, true, json!({key: value, SLICE_SIZE: "1"}))));
        let Verdict::Deny { reason, message } = &decision.verdict else {
            panic!("{key}={value:?} was not denied: {:?}", decision.verdict);
        };
        assert_eq!(*reason, "topology_level_unknown");
        assert!(message.contains(&format!("rack ({RACK})")) && message.contains(key), "{message}");
    }
}

#[test]
fn a_forged_level_is_denied_even_below_min_pods_and_in_a_tier_without_a_rule() {
    let decision = decide(&review(&job(1, true, json!({REQUIRED: "made-up.example.com/level"}))));
    assert!(
        matches!(decision.verdict, Verdict::Deny { reason: "topology_level_unknown", .. }),
        "{:?}",
        decision.verdict
    );
}

#[test]
fn an_unconstrained_or_broader_annotation_cannot_escape_the_tiers_rack_rule() {
    for annotations in [
        json!({UNCONSTRAINED: "true"}),
        json!({UNCONSTRAINED: "maybe"}),
        json!({REQUIRED: "topology.example.com/block"}),
        json!({PREFERRED: RACK}),
    ] {
        let decision = decide(&review(&job(4, true, annotations.clone())));
        assert!(
            decision.warnings.iter().any(|warning| warning.contains("weaker")),
            "{annotations}: {:?}",
            decision.warnings
        );
        let after = patched_idempotent(&job(4, true, annotations.clone()));
        let template = "/spec/template/metadata/annotations";
        assert_eq!(template_annotation(&after, template, REQUIRED), Some(RACK), "{annotations}");
        for weaker in [UNCONSTRAINED, PREFERRED] {
            assert_eq!(template_annotation(&after, template, weaker), None, "{annotations}");
        }
    }
}

#[test]
fn a_stricter_own_annotation_is_kept_unchanged() {
    let object = job(8, true, json!({REQUIRED: "kubernetes.io/hostname"}));
    let decision = decide(&review(&object));
    assert!(decision.warnings.is_empty(), "{:?}", decision.warnings);
    let after = patched_idempotent(&object);
    assert_eq!(
        template_annotation(&after, "/spec/template/metadata/annotations", REQUIRED),
        Some("kubernetes.io/hostname")
    );
}

#[test]
fn an_annotation_on_the_objects_own_metadata_does_not_stand_in_for_the_templates() {
    let mut object = job(4, true, json!({}));
    object["metadata"]["annotations"] = json!({REQUIRED: "kubernetes.io/hostname"});
    let after = patched_idempotent(&object);
    assert_eq!(template_annotation(&after, "/spec/template/metadata/annotations", REQUIRED), Some(RACK));
}

#[test]
fn topology_annotations_on_cpu_only_workloads_are_left_alone() {
    for annotations in
        [json!({REQUIRED: "nonsense"}), json!({UNCONSTRAINED: "true"}), json!({SLICE: "x", SLICE_SIZE: "-1"})]
    {
        let decision = decide(&review(&job(8, false, annotations.clone())));
        assert!(matches!(decision.verdict, Verdict::Skip { .. }), "{annotations}: {:?}", decision.verdict);
        assert!(decision.patch.0.is_empty(), "{annotations}: {:?}", decision.patch);
    }
}

#[test]
fn a_forged_slice_size_cannot_split_a_leader_worker_set_group() {
    let lws = |annotations: Value| {
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve", "namespace": GOLD},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4,
                "leaderTemplate": {"spec": {"containers": [container(true)]}},
                "workerTemplate": {"metadata": {"annotations": annotations}, "spec": {"containers": [container(true)]}}}}})
    };
    let workers = "/spec/leaderWorkerTemplate/workerTemplate/metadata/annotations";
    for annotations in [json!({}), json!({SLICE: RACK, SLICE_SIZE: "1"}), json!({SLICE: RACK, SLICE_SIZE: "abc"})] {
        let after = patched_idempotent(&lws(annotations.clone()));
        assert_eq!(template_annotation(&after, workers, SLICE), Some(RACK), "{annotations}");
        assert_eq!(template_annotation(&after, workers, SLICE_SIZE), Some("3"), "{annotations}");
    }
}
