//! Every recorded AdmissionReview in `shared/fixtures/admission/` through `mutate()` with the sample KubeNexus
//! policy and cluster view: the decision, and the object after applying the returned JSON patch to the request.
#![cfg(test)]

mod placement_support;

use placement_support::documented_row;
use pretty_assertions::assert_eq;
use support::*;

/// Fixture loading and input builders (a `cfg(test)` module so the test lints apply).
#[cfg(test)]
mod support {
    pub use std::collections::BTreeMap;

    pub use k8s_openapi::api::core::v1::Toleration;
    pub use serde_json::{Value, json};
    pub use tiergate::admission::Request;
    pub use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, mutate, parse_review};
    pub use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    pub use tiergate::placement::{GpuPinning, PlacementAssignment, PlacementError, PlacementOutcome};
    pub use tiergate::policy::{ForeignClassAction, TierPolicy};
    pub use tiergate::scoring::{ScoreOutcome, ScoreSource};
    pub use tiergate::view::Snapshot;

    pub const GPU_TOLERATION: &str =
        r#"{"key":"nvidia.com/gpu","operator":"Equal","value":"present","effect":"NoSchedule"}"#;

    pub use crate::placement_support::{every_fixture, fixtures_dir};

    /// The raw review and its parsed request.
    pub struct Fixture {
        pub raw: Value,
        pub request: Request,
    }

    impl Fixture {
        pub fn load(name: &str) -> Self {
            let text = std::fs::read(fixtures_dir().join(name)).unwrap();
            let request = parse_review(&text).unwrap_or_else(|(_, error)| panic!("{name}: {error}"));
            Self { raw: serde_json::from_slice(&text).unwrap(), request }
        }

        /// The same review carrying `object`.
        pub fn with_object(&self, object: &Value) -> Self {
            let mut raw = self.raw.clone();
            raw["request"]["object"] = object.clone();
            Self::from_raw(raw)
        }

        pub fn from_raw(raw: Value) -> Self {
            let request =
                parse_review(&serde_json::to_vec(&raw).unwrap()).unwrap_or_else(|(_, error)| panic!("{error}"));
            Self { raw, request }
        }

        pub fn object(&self) -> &Value {
            &self.raw["request"]["object"]
        }

        /// The request object (as the API server sent it) with the decision's patch applied.
        pub fn patched(&self, decision: &Decision) -> Value {
            let mut object = self.object().clone();
            json_patch::patch(&mut object, &decision.patch).unwrap();
            object
        }
    }

    pub fn sample_policy() -> TierPolicy {
        load_policy(None).unwrap()
    }

    pub fn snapshot_with(policy: TierPolicy) -> Snapshot {
        build_static_snapshot(
            policy,
            parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
            Some("tiergate-system".into()),
        )
    }

    pub fn snapshot() -> Snapshot {
        snapshot_with(sample_policy())
    }

    pub fn decide(fixture: &Fixture, inputs: &AdmissionInputs) -> Decision {
        mutate(&fixture.request, &snapshot(), inputs)
    }

    pub fn gpu_toleration() -> Value {
        serde_json::from_str(GPU_TOLERATION).unwrap()
    }

    pub fn score(chosen: Option<&str>, avoid: &[&str]) -> ScoreOutcome {
        ScoreOutcome {
            priority_class: "gpu-high".into(),
            score: Some(75),
            chosen_gpu_class: chosen.map(str::to_owned),
            avoid_job_types: avoid.iter().map(|job_type| job_type.to_string()).collect(),
            source: ScoreSource::Agent,
            warnings: Vec::new(),
            decided_at_unix: 1_699_123_456,
        }
    }

    pub fn scored(score: ScoreOutcome) -> AdmissionInputs {
        AdmissionInputs { score: Some(score), ..AdmissionInputs::default() }
    }

    pub fn placed(placement: PlacementOutcome) -> AdmissionInputs {
        AdmissionInputs { placement: Ok(placement), ..AdmissionInputs::default() }
    }

    pub fn assignment(
        owner: &str,
        rule: &str,
        selector: (&str, &str),
        tolerations: Vec<Toleration>,
    ) -> PlacementOutcome {
        PlacementOutcome {
            assignment: Some(PlacementAssignment {
                rule: rule.into(),
                owner: owner.into(),
                node_selector: BTreeMap::from([(selector.0.to_owned(), selector.1.to_owned())]),
                tolerations,
            }),
            metadata_labels: BTreeMap::from([("tiergate.io/placement-rule".to_owned(), rule.to_owned())]),
            ..PlacementOutcome::default()
        }
    }

    pub fn assert_skipped(decision: &Decision, reason: &str) {
        assert_eq!(decision.verdict, Verdict::Skip { reason: leak(reason) }, "{:?}", decision.reasons);
        assert!(decision.patch.0.is_empty());
    }

    pub fn leak(reason: &str) -> &'static str {
        Box::leak(reason.to_owned().into_boxed_str())
    }

    pub fn annotations(object: &Value) -> &Value {
        &object["metadata"]["annotations"]
    }
}

// ---- Jobs ----

#[test]
fn scored_bronze_job_is_queued_suspended_on_l4_with_the_score_applied() {
    let fixture = Fixture::load("job-create-bronze-gpu-scored.json");
    let decision = decide(&fixture, &scored(score(Some("l4"), &["train-llama"])));
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(decision.warnings, Vec::<String>::new());
    let job = fixture.patched(&decision);
    let mut expected = fixture.object().clone();
    expected["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze",
        "kueue.x-k8s.io/priority-class": "gpu-high", "kueue.x-k8s.io/max-exec-time-seconds": "14400"});
    let expected_annotations = expected["metadata"]["annotations"].as_object_mut().unwrap();
    for (key, value) in [
        ("tiergate.io/tier", "bronze"),
        ("tiergate.io/decision", "gpu-class: l4; queue: tiergate-bronze; priority: gpu-high; max-exec-time: 14400s"),
        ("tiergate.io/priority-score", "75"),
        ("tiergate.io/chosen-gpu", "l4"),
        ("tiergate.io/decision-timestamp", "1699123456"),
        ("tiergate.io/score-source", "agent"),
        ("scheduler.radix.ai/priority-score", "75"),
        ("scheduler.radix.ai/chosen-gpu", "l4"),
        ("scheduler.radix.ai/decision-timestamp", "1699123456"),
    ] {
        expected_annotations.insert(key.into(), value.into());
    }
    expected["spec"]["suspend"] = json!(true);
    expected["spec"]["template"]["metadata"]["labels"] = json!({"app.kubernetes.io/job-type": "train-bert"});
    let pod_spec = &mut expected["spec"]["template"]["spec"];
    pod_spec["nodeSelector"] = json!({"gpu.nvidia.com/class": "l4"});
    pod_spec["tolerations"] = json!([gpu_toleration()]);
    pod_spec["affinity"] = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {
            "labelSelector": {"matchExpressions": [
                {"key": "app.kubernetes.io/job-type", "operator": "In", "values": ["train-llama"]}]},
            "topologyKey": "kubernetes.io/hostname"}}]}});
    assert_eq!(job, expected);
}

#[test]
fn bronze_job_without_a_score_gets_queue_and_l4_but_no_priority_label() {
    let fixture = Fixture::load("job-create-bronze-gpu-scored.json");
    let job = fixture.patched(&decide(&fixture, &AdmissionInputs::default()));
    assert_eq!(
        job["metadata"]["labels"],
        json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze", "kueue.x-k8s.io/max-exec-time-seconds": "14400"})
    );
    assert_eq!(job["spec"]["template"]["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "l4"}));
    assert_eq!(
        annotations(&job)["tiergate.io/decision"],
        "gpu-class: l4; queue: tiergate-bronze; max-exec-time: 14400s"
    );
    assert!(annotations(&job).get("tiergate.io/priority-score").is_none());
    assert!(job["spec"]["template"]["metadata"].get("labels").is_none(), "unscored: no job-type label");
}

#[test]
fn scorer_choice_outside_the_tier_is_ignored_with_a_warning() {
    let fixture = Fixture::load("job-create-bronze-gpu-scored.json");
    let decision = decide(&fixture, &scored(score(Some("h100"), &[])));
    let job = fixture.patched(&decision);
    assert_eq!(job["spec"]["template"]["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "l4"}));
    assert!(annotations(&job).get("tiergate.io/chosen-gpu").is_none());
    assert!(annotations(&job).get("scheduler.radix.ai/chosen-gpu").is_none());
    assert!(decision.warnings.iter().any(|warning| warning.contains("h100") && warning.contains("bronze")));
}

#[test]
fn dry_run_job_gets_exactly_the_same_answer() {
    let real = Fixture::load("job-create-bronze-gpu-scored.json");
    let dry = Fixture::load("job-create-bronze-dryrun.json");
    assert!(dry.request.dry_run);
    let inputs = || scored(score(Some("l4"), &["train-llama"]));
    let (real_decision, dry_decision) = (decide(&real, &inputs()), decide(&dry, &inputs()));
    assert_eq!(dry_decision.verdict, Verdict::Allow);
    assert_eq!(dry_decision.patch, real_decision.patch);
    let without_managed_fields = |mut object: Value| {
        object["metadata"].as_object_mut().unwrap().remove("managedFields");
        object
    };
    assert_eq!(
        without_managed_fields(dry.patched(&dry_decision)),
        without_managed_fields(real.patched(&real_decision))
    );
}

#[test]
fn gold_job_already_suspended_is_queued_on_h100_and_suspend_is_left_alone() {
    let fixture = Fixture::load("job-create-gold-8gpu-suspended.json");
    let decision = decide(&fixture, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(!decision.patch.0.iter().any(|operation| operation.path().as_str() == "/spec/suspend"));
    let job = fixture.patched(&decision);
    assert_eq!(job["spec"]["suspend"], true);
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-gold");
    assert_eq!(job["spec"]["template"]["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "h100"}));
    assert_eq!(job["spec"]["template"]["spec"]["tolerations"], json!([gpu_toleration()]));
    assert_eq!(annotations(&job)["tiergate.io/tier"], "gold");
}

#[test]
fn job_update_only_annotates_and_never_touches_template_suspend_or_queue() {
    let fixture = Fixture::load("job-update-bronze-add-label.json");
    let decision = decide(&fixture, &scored(score(Some("l4"), &["train-llama"])));
    assert_eq!(decision.verdict, Verdict::Allow);
    let job = fixture.patched(&decision);
    let original = fixture.object();
    assert_eq!(job["spec"], original["spec"]);
    assert_eq!(job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name"), None);
    for operation in &decision.patch.0 {
        let path = operation.path().to_string();
        assert!(
            path.starts_with("/metadata/annotations")
                || path.starts_with("/metadata/labels/kueue.x-k8s.io~1priority-class"),
            "{path}"
        );
    }
    assert_eq!(annotations(&job)["tiergate.io/tier"], "bronze");
    // The template tiergate edited and put back is read as sent: the summary and the reasons describe the final
    // object (no GPU class written, nothing queued), not the undone edits.
    assert_eq!(annotations(&job)["tiergate.io/decision"], "gpu-class: unset (tier allows l4); priority: gpu-high");
    assert!(decision.reasons.iter().any(|reason| reason.starts_with("UPDATE: left /spec/template")), "{decision:?}");
    assert!(!decision.reasons.iter().any(|reason| reason.contains("GPU class")), "{:?}", decision.reasons);
    assert!(decision.reasons.iter().any(|reason| reason.starts_with("not queued")), "{:?}", decision.reasons);
    let sent = fixture.request.object.as_ref().unwrap();
    let lean_final = decision.final_object(sent).unwrap();
    assert_eq!(lean_final["spec"], sent["spec"], "the final lean object keeps the template as sent");
    assert_eq!(lean_final["metadata"]["annotations"], job["metadata"]["annotations"]);
}

// ---- Pods ----

#[test]
fn cpu_only_pod_in_bronze_is_skipped() {
    let fixture = Fixture::load("pod-create-bronze-cpu-only.json");
    assert_skipped(&decide(&fixture, &AdmissionInputs::default()), "no_gpu_request");
}

#[test]
fn kube_system_pod_is_skipped() {
    let fixture = Fixture::load("pod-create-kube-system.json");
    assert_skipped(&decide(&fixture, &AdmissionInputs::default()), "namespace_excluded");
}

#[test]
fn bronze_pod_selecting_a100_is_denied_naming_tier_classes_and_fix() {
    let fixture = Fixture::load("pod-create-bronze-user-override-a100.json");
    let decision = decide(&fixture, &AdmissionInputs::default());
    let Verdict::Deny { reason, message } = &decision.verdict else { panic!("{decision:?}") };
    assert_eq!(*reason, "foreign_gpu_class");
    for needle in ["tier bronze", "[l4]", "GPU class a100", "Fix:", "adminNamespaces"] {
        assert!(message.contains(needle), "{needle:?} missing from {message}");
    }
    assert!(decision.patch.0.is_empty());
}

#[test]
fn bronze_pod_selecting_a100_is_kept_for_an_admin_group_with_its_tolerations() {
    let fixture = Fixture::load("pod-create-bronze-user-override-a100.json");
    let mut policy = sample_policy();
    policy.spec.admission.admin_groups = vec!["system:masters".into()];
    let decision = mutate(&fixture.request, &snapshot_with(policy), &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(decision.warnings.iter().any(|warning| warning.contains("system:masters")), "{:?}", decision.warnings);
    let pod = fixture.patched(&decision);
    assert_eq!(pod["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "a100"}));
    let tolerations = pod["spec"]["tolerations"].as_array().unwrap();
    assert_eq!(tolerations.len(), 3);
    assert_eq!(tolerations[2], gpu_toleration());
}

#[test]
fn foreign_class_is_allowed_for_everyone_when_the_policy_says_allow() {
    let fixture = Fixture::load("pod-create-bronze-user-override-a100.json");
    let mut policy = sample_policy();
    policy.spec.admission.foreign_gpu_class = ForeignClassAction::Allow;
    let decision = mutate(&fixture.request, &snapshot_with(policy), &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(fixture.patched(&decision)["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "a100"}));
}

#[test]
fn pods_created_by_the_bronze_job_get_the_l4_selector_and_toleration_without_a_queue() {
    for name in ["pod-create-from-job-1.json", "pod-create-from-job-2.json"] {
        let fixture = Fixture::load(name);
        let decision = decide(&fixture, &AdmissionInputs::default());
        assert_eq!(decision.verdict, Verdict::Allow, "{name}");
        let pod = fixture.patched(&decision);
        let mut expected = fixture.object().clone();
        expected["spec"]["nodeSelector"] = json!({"gpu.nvidia.com/class": "l4"});
        expected["spec"]["tolerations"].as_array_mut().unwrap().push(gpu_toleration());
        expected["metadata"]["annotations"] =
            json!({"tiergate.io/tier": "bronze", "tiergate.io/decision": "gpu-class: l4"});
        assert_eq!(pod, expected, "{name}");
    }
}

/// Seed 003's worked example: 6 replicas -> 1 base on-demand, then 1:2 on-demand:spot.
#[test]
fn web_app_burst_pods_get_exactly_the_rule_placement_assigned_and_nothing_else() {
    let rules = ["ondemand", "ondemand", "spot", "spot", "ondemand", "spot"];
    for (index, rule) in rules.iter().enumerate() {
        let name = format!("pod-create-from-replicaset-web-app-{}.json", index + 1);
        let fixture = Fixture::load(&name);
        let spot = Toleration { key: Some("spot".into()), operator: Some("Exists".into()), ..Toleration::default() };
        let tolerations = if *rule == "spot" { vec![spot] } else { Vec::new() };
        let decision = decide(
            &fixture,
            &placed(assignment("Deployment/ml-team-dev/web-app", rule, ("node-type", rule), tolerations.clone())),
        );
        assert_eq!(decision.verdict, Verdict::Allow, "{name}");
        let pod = fixture.patched(&decision);
        let mut expected = fixture.object().clone();
        expected["spec"]["nodeSelector"] = json!({"node-type": rule});
        for toleration in &tolerations {
            expected["spec"]["tolerations"].as_array_mut().unwrap().push(serde_json::to_value(toleration).unwrap());
        }
        expected["metadata"]["labels"]["tiergate.io/placement-rule"] = json!(rule);
        assert_eq!(pod, expected, "{name}");
    }
}

/// Seed 004's worked example: 10 replicas -> 1 od4vcpu16gb, then spot4vcpu16gb and spot8vcpu32gb evenly.
#[test]
fn alpine_burst_pods_get_exactly_the_rule_placement_assigned_and_nothing_else() {
    for index in 1..=10 {
        let name = format!("pod-create-from-replicaset-alpine-{index}.json");
        let fixture = Fixture::load(&name);
        let size = match index {
            1 => "od4vcpu16gb",
            even if even % 2 == 0 => "spot4vcpu16gb",
            _ => "spot8vcpu32gb",
        };
        let decision = decide(
            &fixture,
            &placed(assignment("Deployment/ml-team-dev/alpine", size, ("nodesize", size), Vec::new())),
        );
        assert_eq!(decision.verdict, Verdict::Allow, "{name}");
        let pod = fixture.patched(&decision);
        let mut expected = fixture.object().clone();
        expected["spec"]["nodeSelector"] = json!({"nodesize": size});
        expected["metadata"]["labels"]["tiergate.io/placement-rule"] = json!(size);
        assert_eq!(pod, expected, "{name}");
    }
}

#[test]
fn burst_pods_without_a_placement_are_skipped() {
    for name in every_fixture().iter().filter(|name| name.starts_with("pod-create-from-replicaset-")) {
        assert_skipped(&decide(&Fixture::load(name), &AdmissionInputs::default()), "no_gpu_request");
    }
}

#[test]
fn statefulset_ordinal_0_is_pinned_and_gets_the_gold_h100_class() {
    let fixture = Fixture::load("pod-create-from-statefulset-ordinal-0.json");
    let pinning = GpuPinning { node: "node1".into(), cuda_visible_devices: "0,1".into() };
    let decision =
        decide(&fixture, &placed(PlacementOutcome { pinning: Some(pinning), ..PlacementOutcome::default() }));
    assert_eq!(decision.verdict, Verdict::Allow);
    let pod = fixture.patched(&decision);
    let mut expected = fixture.object().clone();
    let spec = &mut expected["spec"];
    spec["nodeSelector"] = json!({"gpu.nvidia.com/class": "h100"});
    spec["tolerations"].as_array_mut().unwrap().push(gpu_toleration());
    spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node1"]}]}]}}});
    spec["containers"][0]["env"] = json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]);
    let annotations = expected["metadata"]["annotations"].as_object_mut().unwrap();
    annotations.insert("tiergate.io/tier".into(), "gold".into());
    annotations.insert("tiergate.io/decision".into(), "gpu-class: h100".into());
    assert_eq!(pod, expected);
}

// ---- Owners ----

#[test]
fn gold_statefulset_template_gets_h100_but_no_queue() {
    let fixture = Fixture::load("statefulset-create-gpu-scheduling-map.json");
    let decision = decide(&fixture, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow);
    let sts = fixture.patched(&decision);
    let mut expected = fixture.object().clone();
    expected["spec"]["template"]["spec"]["nodeSelector"] = json!({"gpu.nvidia.com/class": "h100"});
    expected["spec"]["template"]["spec"]["tolerations"] = json!([gpu_toleration()]);
    expected["metadata"]["annotations"] =
        json!({"tiergate.io/tier": "gold", "tiergate.io/decision": "gpu-class: h100"});
    assert_eq!(sts, expected);
}

#[test]
fn malformed_placement_on_the_statefulset_denies_with_its_message() {
    let fixture = Fixture::load("statefulset-create-gpu-scheduling-map.json");
    let error = PlacementError {
        annotation: "gpu-scheduling-map".into(),
        message: "line 2 \"1=node2\" has no GPU list".into(),
    };
    let decision = decide(&fixture, &AdmissionInputs { score: None, placement: Err(error) });
    let Verdict::Deny { reason, message } = &decision.verdict else { panic!("{decision:?}") };
    assert_eq!(*reason, "placement_invalid");
    assert!(message.contains("gpu-scheduling-map") && message.contains("1=node2"), "{message}");
}

#[test]
fn deployments_without_gpu_requests_are_skipped() {
    for name in ["deployment-create-custom-pod-strategy.json", "deployment-create-smart-scheduler-strategy.json"] {
        assert_skipped(&decide(&Fixture::load(name), &AdmissionInputs::default()), "no_gpu_request");
    }
}

#[test]
fn deployment_template_annotations_from_placement_are_merged() {
    let fixture = Fixture::load("deployment-create-smart-scheduler-strategy.json");
    let annotations = BTreeMap::from([("tiergate.io/placement".to_owned(), "web-app".to_owned())]);
    let placement = PlacementOutcome { template_annotations: annotations, ..PlacementOutcome::default() };
    let decision = decide(&fixture, &placed(placement));
    assert_eq!(decision.verdict, Verdict::Allow);
    let deployment = fixture.patched(&decision);
    let mut expected = fixture.object().clone();
    expected["spec"]["template"]["metadata"]["annotations"] = json!({"tiergate.io/placement": "web-app"});
    assert_eq!(deployment, expected);
}

// ---- Properties over every fixture ----

/// The inputs each fixture is decided with in these tests.
fn inputs_for(name: &str) -> AdmissionInputs {
    if name.starts_with("job-create-bronze") || name.starts_with("job-update") {
        return scored(score(Some("l4"), &["train-llama"]));
    }
    if name.starts_with("pod-create-from-statefulset") {
        let pinning = GpuPinning { node: "node1".into(), cuda_visible_devices: "0,1".into() };
        return placed(PlacementOutcome { pinning: Some(pinning), ..PlacementOutcome::default() });
    }
    if name.starts_with("pod-create-from-replicaset-") {
        return placed(assignment("Deployment/ml-team-dev/x", "spot", ("node-type", "spot"), Vec::new()));
    }
    AdmissionInputs::default()
}

#[test]
fn every_fixture_mutated_again_from_its_own_output_yields_an_empty_patch() {
    let fixtures = every_fixture();
    assert!(fixtures.len() >= 29, "expected every recorded fixture, found {}", fixtures.len());
    for name in fixtures {
        let fixture = Fixture::load(&name);
        let first = decide(&fixture, &inputs_for(&name));
        if first.verdict != Verdict::Allow {
            continue;
        }
        let again = fixture.with_object(&fixture.patched(&first));
        let second = decide(&again, &inputs_for(&name));
        assert_eq!(second.verdict, Verdict::Allow, "{name}");
        assert_eq!(second.patch, json_patch::Patch(Vec::new()), "{name}: second pass still patches");
    }
}

#[test]
fn every_fixture_decision_matches_the_documented_table() {
    for name in every_fixture() {
        let outcome = decide(&Fixture::load(&name), &inputs_for(&name)).verdict.outcome();
        let row = documented_row(&name);
        assert!(row.contains(&format!("| {outcome} |")), "{name}: decided {outcome}, documented {row}");
    }
}

// ---- The patch as sent (issue 52) ----

/// The server folds deep edits into one `replace` per member (`admission::fold`): for every recorded review,
/// scored or not, the folded patch stores exactly what the patch as built stores.
#[test]
fn the_folded_patch_of_every_recorded_review_stores_the_same_object() {
    let mut folded_jobs = 0;
    for name in every_fixture() {
        let fixture = Fixture::load(&name);
        for inputs in [AdmissionInputs::default(), scored(score(Some("l4"), &["train-llama"]))] {
            let decision = decide(&fixture, &inputs);
            let body = serde_json::to_vec(&fixture.raw).unwrap();
            let Some(folded) = tiergate::admission::fold_deep_edits(&decision.patch, &body) else { continue };
            let folded = serde_json::from_slice(&folded).unwrap();
            assert_eq!(
                fixture.patched(&Decision { patch: folded, ..decision.clone() }),
                fixture.patched(&decision),
                "{name}"
            );
            folded_jobs += usize::from(name.starts_with("job-"));
        }
    }
    assert!(folded_jobs > 0, "no recorded Job had its pod template edits folded");
}
