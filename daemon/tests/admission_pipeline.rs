//! The webhook's whole decision path on the recorded fixtures: `decide_review` with a real `PlacementLedger` and
//! the built-in `Scorer` over the sample policy and cluster, the returned JSON patch applied to the request object.
//! Nothing is stubbed: placement, scoring and `mutate` meet here exactly as they do in the server.
#![cfg(test)]

mod placement_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use placement_support::{burst, concurrently, documented_row, edit_metadata, every_fixture, fixture};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tiergate::admission::Request;
use tiergate::admission::{Decision, Verdict, build_static_snapshot, decide_review};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::metrics::Metrics;
use tiergate::placement::PlacementLedger;
use tiergate::scoring::Scorer;
use tiergate::scoring::buckets::bucket_for;
use tiergate::view::Snapshot;

/// The real components the webhook server holds, over the sample policy and cluster view.
struct Pipeline {
    snapshot: Snapshot,
    ledger: PlacementLedger,
    scorer: Scorer,
}

impl Pipeline {
    fn new() -> Self {
        let metrics = Arc::new(Metrics::default());
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        Self {
            snapshot: build_static_snapshot(load_policy(None).unwrap(), view, Some("tiergate-system".into())),
            ledger: PlacementLedger::new(metrics.clone()),
            scorer: Scorer::new(None, metrics),
        }
    }

    fn decide(&self, request: &Request) -> Decision {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(decide_review(request, &self.snapshot, &self.ledger, &self.scorer))
    }

    /// Decides every request at once, one thread each, released together.
    fn decide_concurrently(&self, requests: &[Request]) -> Vec<Decision> {
        concurrently(requests, |request| self.decide(request))
    }
}

/// The request object (as the API server sent it) with the decision's patch applied.
fn patched(request: &Request, decision: &Decision) -> Value {
    let mut object = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
    json_patch::patch(&mut object, &decision.patch).unwrap();
    object
}

/// The same request carrying `object` (the webhook reinvoked on its own output).
fn with_object(request: &Request, object: &Value) -> Request {
    let mut again = request.clone();
    again.object = Some(serde_json::from_value(object.clone()).unwrap());
    again
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

/// The pod template annotations the Deployment's admission left on `deployment`.
fn template_annotations(pipeline: &Pipeline, deployment: &str) -> BTreeMap<String, String> {
    let request = fixture(deployment);
    let object = patched(&request, &pipeline.decide(&request));
    string_map(&object["spec"]["template"]["metadata"]["annotations"])
}

/// The recorded burst as its ReplicaSet creates it after the Deployment went through the webhook: every pod
/// carries the annotations of the admitted Deployment's pod template.
fn admitted_burst(pipeline: &Pipeline, deployment: &str, app: &str, count: usize) -> Vec<Request> {
    let annotations = template_annotations(pipeline, deployment);
    burst(app, count)
        .into_iter()
        .map(|mut pod| {
            let object = pod.object.as_mut().unwrap();
            edit_metadata(object, |meta| {
                meta.annotations.get_or_insert_with(BTreeMap::new).extend(annotations.clone());
            });
            pod
        })
        .collect()
}

/// Pods per placement rule, checking on the way that each pod's nodeSelector is exactly `selector(rule)`.
fn split_of(requests: &[Request], decisions: &[Decision], selector: impl Fn(&str) -> Value) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (request, decision) in requests.iter().zip(decisions) {
        assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
        let pod = patched(request, decision);
        let rule = pod["metadata"]["labels"]["tiergate.io/placement-rule"].as_str().unwrap().to_owned();
        assert_eq!(pod["spec"]["nodeSelector"], selector(&rule), "{rule}");
        assert!(pod["metadata"]["annotations"].get("tiergate.io/tier").is_none(), "no GPU request: no tier changes");
        *counts.entry(rule).or_default() += 1;
    }
    counts
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(rule, count)| ((*rule).to_owned(), *count)).collect()
}

// ---- Owners ----

#[test]
fn smart_scheduler_deployment_gets_the_normalized_strategy_on_its_pod_template() {
    let pipeline = Pipeline::new();
    let request = fixture("deployment-create-smart-scheduler-strategy.json");
    let decision = pipeline.decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow);
    let mut expected = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
    expected["spec"]["template"]["metadata"]["annotations"] = json!({
        "tiergate.io/placement-strategy":
            "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=node-type:spot"
    });
    assert_eq!(patched(&request, &decision), expected);
}

#[test]
fn custom_pod_strategy_deployment_is_admitted_unchanged_because_its_template_already_carries_the_strategy() {
    let pipeline = Pipeline::new();
    let decision = pipeline.decide(&fixture("deployment-create-custom-pod-strategy.json"));
    assert_eq!(decision.verdict, Verdict::Skip { reason: "no_gpu_request" });
    assert!(decision.patch.0.is_empty() && decision.warnings.is_empty(), "{decision:?}");
}

#[test]
fn dropping_the_smart_scheduler_annotation_removes_the_normalized_strategy_from_the_template() {
    let pipeline = Pipeline::new();
    let request = fixture("deployment-create-smart-scheduler-strategy.json");
    let mut admitted = patched(&request, &pipeline.decide(&request));
    admitted["metadata"]["annotations"].as_object_mut().unwrap().remove("smart-scheduler.io/schedule-strategy");
    let update = with_object(&request, &admitted);
    let decision = pipeline.decide(&update);
    assert_eq!(decision.verdict, Verdict::Allow);
    let deployment = patched(&update, &decision);
    assert_eq!(deployment["spec"]["template"]["metadata"]["annotations"], json!({}));
}

// ---- Bursts ----

/// One recorded burst, after its Deployment, admitted concurrently through a fresh pipeline (ten times over):
/// every pod's selector is its rule's (`label: RULE`), its owner is the Deployment, and the split is `expected`.
fn assert_burst_splits(deployment: &str, app: &str, pods: usize, label: &str, expected: &[(&str, usize)]) {
    for _ in 0..10 {
        let pipeline = Pipeline::new();
        let requests = admitted_burst(&pipeline, deployment, app, pods);
        let decisions = pipeline.decide_concurrently(&requests);
        assert_eq!(split_of(&requests, &decisions, |rule| json!({ label: rule })), counts(expected));
        for (request, decision) in requests.iter().zip(&decisions) {
            let annotations = &patched(request, decision)["metadata"]["annotations"];
            assert_eq!(annotations["tiergate.io/placement-owner"], format!("Deployment/ml-team-dev/{app}"));
            assert_eq!(annotations["tiergate.io/placement-request"], json!(request.uid));
        }
    }
}

/// Seed 003's worked example through the whole webhook: 6 replicas -> 3 on-demand, 3 spot.
#[test]
fn web_app_burst_admitted_concurrently_after_its_deployment_splits_three_ondemand_three_spot() {
    let expected = [("ondemand", 3), ("spot", 3)];
    assert_burst_splits("deployment-create-smart-scheduler-strategy.json", "web-app", 6, "node-type", &expected);
}

/// Seed 004's worked example through the whole webhook: 10 replicas -> 1 / 4 / 5.
#[test]
fn alpine_burst_admitted_concurrently_after_its_deployment_splits_one_four_five() {
    let expected = [("od4vcpu16gb", 1), ("spot4vcpu16gb", 4), ("spot8vcpu32gb", 5)];
    assert_burst_splits("deployment-create-custom-pod-strategy.json", "alpine", 10, "nodesize", &expected);
}

#[test]
fn a_dry_run_pod_is_placed_but_recorded_nowhere() {
    let pipeline = Pipeline::new();
    let mut requests =
        admitted_burst(&pipeline, "deployment-create-smart-scheduler-strategy.json", "web-app", 2).into_iter();
    let (mut dry, real) = (requests.next().unwrap(), requests.next().unwrap());
    dry.dry_run = true;
    let dry_pod = patched(&dry, &pipeline.decide(&dry));
    assert_eq!(pipeline.ledger.in_flight_len(), 0);
    let real_pod = patched(&real, &pipeline.decide(&real));
    assert_eq!(pipeline.ledger.in_flight_len(), 1);
    let rule = |pod: &Value| pod["metadata"]["labels"]["tiergate.io/placement-rule"].clone();
    assert_eq!(rule(&real_pod), rule(&dry_pod), "the dry run held no slot, so the real pod gets the same base rule");
}

// ---- GPU workloads ----

#[test]
fn statefulset_pod_ordinal_0_is_pinned_to_node1_with_gpus_0_and_1_on_the_gold_class() {
    let pipeline = Pipeline::new();
    let request = fixture("pod-create-from-statefulset-ordinal-0.json");
    let decision = pipeline.decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(decision.warnings, Vec::<String>::new());
    let pod = patched(&request, &decision);
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node1"]}]}]})
    );
    for container in pod["spec"]["containers"].as_array().unwrap() {
        assert_eq!(container["env"], json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]));
    }
    assert_eq!(pod["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "h100"}));
    assert_eq!(pod["metadata"]["annotations"]["tiergate.io/tier"], "gold");
}

#[test]
fn a_container_with_its_own_cuda_visible_devices_keeps_it_with_exactly_one_warning() {
    let pipeline = Pipeline::new();
    let mut request = fixture("pod-create-from-statefulset-ordinal-0.json");
    let object = request.object.as_mut().unwrap();
    object["spec"]["containers"][0]["env"] = json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]);
    let decision = pipeline.decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow);
    let pod = patched(&request, &decision);
    assert_eq!(pod["spec"]["containers"][0]["env"], json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]));
    let about_cuda: Vec<&String> =
        decision.warnings.iter().filter(|warning| warning.contains("CUDA_VISIBLE_DEVICES")).collect();
    assert_eq!(about_cuda.len(), 1, "{:?}", decision.warnings);
}

#[test]
fn scored_bronze_job_gets_queue_suspend_l4_a_bucket_priority_and_the_score_annotations() {
    let pipeline = Pipeline::new();
    let request = fixture("job-create-bronze-gpu-scored.json");
    let decision = pipeline.decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow);
    let job = patched(&request, &decision);
    let annotations = string_map(&job["metadata"]["annotations"]);
    let score: i64 = annotations["tiergate.io/priority-score"].parse().unwrap();
    assert_eq!(annotations["scheduler.radix.ai/priority-score"], score.to_string());
    assert_eq!(annotations["tiergate.io/score-source"], "builtin");
    assert_eq!(annotations["tiergate.io/decision-timestamp"], annotations["scheduler.radix.ai/decision-timestamp"]);
    let policy = load_policy(None).unwrap();
    let bucket = bucket_for(score, &policy.spec.priority_buckets).unwrap();
    assert_eq!(
        job["metadata"]["labels"],
        json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze", "kueue.x-k8s.io/priority-class": bucket.name,
            "kueue.x-k8s.io/max-exec-time-seconds": "14400"})
    );
    assert_eq!(job["spec"]["suspend"], true);
    let template = &job["spec"]["template"];
    assert_eq!(template["spec"]["nodeSelector"], json!({"gpu.nvidia.com/class": "l4"}));
    assert_eq!(template["metadata"]["labels"], json!({"app.kubernetes.io/job-type": "train-bert"}));
    assert_eq!(
        annotations["tiergate.io/decision"],
        format!("gpu-class: l4; queue: tiergate-bronze; priority: {}; max-exec-time: 14400s", bucket.name)
    );
}

#[test]
fn dry_run_job_gets_the_same_object_and_leaves_the_ledger_empty() {
    let pipeline = Pipeline::new();
    let dry = fixture("job-create-bronze-dryrun.json");
    assert!(dry.dry_run);
    let dry_job = patched(&dry, &pipeline.decide(&dry));
    assert_eq!(pipeline.ledger.in_flight_len(), 0);
    let real = fixture("job-create-bronze-gpu-scored.json");
    let real_job = patched(&real, &pipeline.decide(&real));
    let comparable = |mut job: Value| {
        let metadata = job["metadata"].as_object_mut().unwrap();
        metadata.remove("managedFields");
        let annotations = metadata["annotations"].as_object_mut().unwrap();
        annotations.remove("tiergate.io/decision-timestamp");
        annotations.remove("scheduler.radix.ai/decision-timestamp");
        job
    };
    assert_eq!(comparable(dry_job), comparable(real_job));
}

// ---- Every fixture ----

/// The fixture as it reaches the webhook: burst pods carry their admitted Deployment's template annotations.
fn as_admitted(pipeline: &Pipeline, name: &str) -> Request {
    let deployment = match name {
        burst if burst.starts_with("pod-create-from-replicaset-web-app-") => {
            "deployment-create-smart-scheduler-strategy.json"
        }
        burst if burst.starts_with("pod-create-from-replicaset-alpine-") => {
            "deployment-create-custom-pod-strategy.json"
        }
        _ => return fixture(name),
    };
    let mut request = fixture(name);
    let annotations = template_annotations(pipeline, deployment);
    let object = request.object.as_mut().unwrap();
    edit_metadata(object, |meta| {
        meta.annotations.get_or_insert_with(BTreeMap::new).extend(annotations);
    });
    request
}

#[test]
fn every_fixture_decided_again_on_its_own_output_yields_an_empty_patch() {
    let fixtures = every_fixture();
    assert!(fixtures.len() >= 29, "expected every recorded fixture, found {}", fixtures.len());
    let mut mutated = 0;
    for name in fixtures {
        let pipeline = Pipeline::new();
        let request = as_admitted(&pipeline, &name);
        let first = pipeline.decide(&request);
        if first.verdict != Verdict::Allow {
            continue;
        }
        mutated += 1;
        let again = pipeline.decide(&with_object(&request, &patched(&request, &first)));
        assert_eq!(again.verdict, Verdict::Allow, "{name}");
        assert_eq!(again.patch, json_patch::Patch(Vec::new()), "{name}: the second pass still patches");
    }
    assert!(mutated >= 20, "only {mutated} fixtures were mutated");
}

#[test]
fn every_fixture_decision_matches_the_documented_pipeline_column() {
    for name in every_fixture() {
        let pipeline = Pipeline::new();
        let decision = pipeline.decide(&as_admitted(&pipeline, &name));
        let row = documented_row(&name);
        let pipeline_column = row.split('|').nth(4).unwrap_or_default().trim();
        assert_eq!(pipeline_column, decision.verdict.outcome(), "{name}: {row}");
    }
}

// ---- Owners tiergate reads but does not mutate, and multi-template owners ----

/// A pod template with a seed 004 strategy whose second rule has a weight that is not a number.
fn template_with_bad_strategy() -> Value {
    json!({"metadata": {"annotations": {"UseCustomKubeScheduler": "true",
        "CustomPodScheduleStrategy": "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=two"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

fn assert_denied_quoting_the_strategy(object: Value) {
    let request = tiergate::admission::build_request(object).unwrap();
    let decision = Pipeline::new().decide(&request);
    let Verdict::Deny { reason, message } = &decision.verdict else { panic!("{decision:?}") };
    assert_eq!(*reason, "placement_invalid");
    assert!(message.contains("CustomPodScheduleStrategy") && message.contains("weight=two"), "{message}");
}

#[test]
fn a_jobset_whose_second_replicated_job_carries_a_malformed_strategy_is_denied() {
    let good = json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    assert_denied_quoting_the_strategy(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml-team-dev"},
        "spec": {"replicatedJobs": [
            {"name": "ok", "template": {"spec": {"template": good}}},
            {"name": "bad", "template": {"spec": {"template": template_with_bad_strategy()}}}]}
    }));
}

#[test]
fn a_cronjob_with_a_malformed_strategy_is_denied_although_tiergate_never_mutates_cronjobs() {
    assert_denied_quoting_the_strategy(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "ml-team-dev"},
        "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": template_with_bad_strategy()}}}
    }));
}
