//! The run-time limit (`maxRunTime`) under attack: a tenant omits Kueue's `kueue.x-k8s.io/max-exec-time-seconds`,
//! sets it huge or to garbage, raises or removes it on UPDATE, puts it on a pod owned by a Job or on a kind Kueue
//! does not read it from, or forges the gate's mark. With the webhook up the patch holds it to the tier; with the
//! webhook down the in-server gate (both halves, offline as kube-apiserver runs them) refuses or sets it.
//!
//! Every attacker is a tenant of tier bronze (namespace `ml-team-dev`, GPU class l4, queue `tiergate-bronze`, run-time
//! ceiling 4h = 14400 s in the sample policy; gold has no limit).
#![cfg(test)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tiergate::admission::gate_marks::RUN_TIME_ADDED_MARK;
use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::view::Snapshot;

use crate::gate_support::{CompiledGate, GateOutcome, gate_of, run_mutating, with_big_stack};
use crate::tenant::{denial, tenant_review, tenant_review_body};

const BRONZE: &str = "ml-team-dev";
const GOLD: &str = "ml-research";
const CLASS: &str = "gpu.nvidia.com/class";
const QUEUE: &str = "kueue.x-k8s.io/queue-name";
const RUN_TIME: &str = "kueue.x-k8s.io/max-exec-time-seconds";
const CEILING: &str = "14400";
/// What the gate's validating half says about the label.
const GATE_MESSAGE: &str = "must carry the label kueue.x-k8s.io/max-exec-time-seconds where Kueue reads it";

fn request_of(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let body: Value = serde_json::from_str(&tenant_review_body(operation, object, old, false, &[])).unwrap();
    body["request"].clone()
}

fn namespace_labels(namespace: &str) -> BTreeMap<String, String> {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
    view.namespaces.iter().find(|ns| ns.name == namespace).map(|ns| ns.labels.to_btree_map()).unwrap_or_default()
}

fn snapshot() -> Snapshot {
    build_static_snapshot(
        load_policy(None).unwrap(),
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    )
}

fn namespace_of(object: &Value) -> String {
    object["metadata"]["namespace"].as_str().unwrap_or(BRONZE).to_owned()
}

/// The webhook's decision on `object` (and `old` for an UPDATE).
fn webhook(object: &Value, old: Option<&Value>) -> Decision {
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    mutate(&tenant_review(operation, object, old, false, &[]), &snapshot(), &AdmissionInputs::default())
}

/// The object the webhook stores (its patch applied), failing the test on any verdict but Allow.
fn stored_by_webhook(object: &Value, old: Option<&Value>) -> (Value, Decision) {
    let decision = webhook(object, old);
    assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    let mut stored = object.clone();
    json_patch::patch(&mut stored, &decision.patch).unwrap();
    (stored, decision)
}

/// The validating half alone (no MutatingAdmissionPolicy served: Kubernetes before 1.36), the webhook down.
fn validate_only(object: &Value, old: Option<&Value>) -> GateOutcome {
    validate_each(vec![(object.clone(), old.cloned())]).remove(0)
}

/// [`validate_only`] on each `(object, old)`, the gate compiled once.
fn validate_each(cases: Vec<(Value, Option<Value>)>) -> Vec<GateOutcome> {
    with_big_stack(move || {
        let gate = CompiledGate::new(gate_of(&load_policy(None).unwrap()));
        cases
            .iter()
            .map(|(object, old)| {
                let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
                gate.run(&request_of(operation, object, old.as_ref()), &namespace_labels(&namespace_of(object)))
            })
            .collect()
    })
}

/// Both halves on a CREATE, the webhook down: the object as stored, or the refusal's messages.
fn both_halves(object: &Value) -> Result<Value, String> {
    let request = request_of("CREATE", object, None);
    let labels = namespace_labels(&namespace_of(object));
    let object = object.clone();
    with_big_stack(move || {
        let gate = gate_of(&load_policy(None).unwrap());
        let mutated = run_mutating(&gate, &request, &labels).unwrap_or(object);
        let mut after = request;
        after["object"] = mutated.clone();
        match CompiledGate::new(gate).run(&after, &labels) {
            GateOutcome::Denied(messages) => Err(messages.join("\n")),
            _ => Ok(mutated),
        }
    })
}

/// The mutating half's output on a CREATE, then the webhook on it (the API server runs the policies first).
fn policies_then_webhook(object: &Value) -> Value {
    let request = request_of("CREATE", object, None);
    let labels = namespace_labels(&namespace_of(object));
    let policy = load_policy(None).unwrap();
    let mutated = with_big_stack(move || run_mutating(&gate_of(&policy), &request, &labels)).unwrap();
    stored_by_webhook(&mutated, None).0
}

fn gpu_spec() -> Value {
    json!({"restartPolicy": "Never", "nodeSelector": {CLASS: "l4"}, "containers": [
        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]})
}

/// A bronze GPU Job as the webhook would leave it but for the run-time label: queued, suspended, on l4.
fn job(run_time: Option<&str>) -> Value {
    let mut labels = json!({QUEUE: "tiergate-bronze"});
    if let Some(value) = run_time {
        labels[RUN_TIME] = json!(value);
    }
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": BRONZE, "labels": labels},
        "spec": {"suspend": true, "template": {"spec": gpu_spec()}}})
}

fn label_of(object: &Value) -> Option<&str> {
    object["metadata"]["labels"][RUN_TIME].as_str()
}

fn warned(decision: &Decision, part: &str) -> bool {
    decision.warnings.iter().any(|warning| warning.contains(RUN_TIME) && warning.contains(part))
}

#[test]
fn omitting_the_label_gets_bronzes_ceiling_from_the_webhook_and_from_the_mutating_half() {
    let (stored, decision) = stored_by_webhook(&job(None), None);
    assert_eq!(label_of(&stored), Some(CEILING));
    assert!(decision.warnings.is_empty(), "a label set where none was is no clamp: {:?}", decision.warnings);
    assert!(
        stored["metadata"]["annotations"]["tiergate.io/decision"].as_str().unwrap().ends_with("max-exec-time: 14400s")
    );
    let message = denial(&validate_only(&job(None), None));
    assert!(message.contains(GATE_MESSAGE) && message.contains("is it running?"), "{message}");
    let down = both_halves(&job(None)).unwrap();
    assert_eq!(label_of(&down), Some(CEILING));
    assert_eq!(down["metadata"]["annotations"][RUN_TIME_ADDED_MARK], "/metadata,");
    let mut up = policies_then_webhook(&job(None));
    assert_eq!(label_of(&up), Some(CEILING));
    assert_eq!(up["metadata"]["annotations"].get(RUN_TIME_ADDED_MARK), None, "the webhook takes the mark back");
    up["metadata"]["annotations"].as_object_mut().unwrap().clear();
    let mut alone = stored;
    alone["metadata"]["annotations"].as_object_mut().unwrap().clear();
    assert_eq!(up, alone, "the webhook after the policies stores what it stores alone");
}

#[test]
fn a_huge_label_is_lowered_to_the_ceiling_by_the_webhook_and_refused_with_it_down() {
    let huge = ["14401", "86400", "2147483647"];
    for value in huge {
        let (stored, decision) = stored_by_webhook(&job(Some(value)), None);
        assert_eq!(label_of(&stored), Some(CEILING), "{value}");
        assert!(warned(&decision, "above tier bronze's ceiling 4h"), "{value}: {:?}", decision.warnings);
    }
    let outcomes = validate_each(huge.iter().map(|value| (job(Some(value)), None)).collect());
    for (value, outcome) in huge.iter().zip(&outcomes) {
        assert!(denial(outcome).contains(GATE_MESSAGE), "{value}");
    }
    let refused = both_halves(&job(Some("86400"))).unwrap_err();
    assert!(refused.contains(GATE_MESSAGE), "the mutating half never lowers a tenant's value: {refused}");
}

#[test]
fn a_label_kueue_cannot_use_is_replaced_by_the_ceiling_and_refused_with_the_webhook_down() {
    // `99999999999` passes Kueue's own webhook (`Atoi`) but is no int32, so Kueue would enforce no limit at all.
    let garbage = ["abc", "4h", "0", "-60", "+60", "0060", "1e4", "99999999999", ""];
    for value in garbage {
        let (stored, decision) = stored_by_webhook(&job(Some(value)), None);
        assert_eq!(label_of(&stored), Some(CEILING), "{value:?}");
        assert!(warned(&decision, "not a whole number of seconds"), "{value:?}: {:?}", decision.warnings);
    }
    let outcomes = validate_each(garbage.iter().map(|value| (job(Some(value)), None)).collect());
    for (value, outcome) in garbage.iter().zip(&outcomes) {
        assert!(denial(outcome).contains(GATE_MESSAGE), "{value:?}");
    }
    assert!(both_halves(&job(Some("abc"))).is_err());
}

#[test]
fn a_job_asking_for_less_keeps_its_own_limit_in_both_gates() {
    let less = ["1", "600", CEILING];
    for value in less {
        let (stored, decision) = stored_by_webhook(&job(Some(value)), None);
        assert_eq!(label_of(&stored), Some(value));
        assert!(decision.warnings.is_empty(), "{:?}", decision.warnings);
    }
    let outcomes = validate_each(less.iter().map(|value| (job(Some(value)), None)).collect());
    assert!(outcomes.iter().all(|outcome| *outcome == GateOutcome::Admitted), "{outcomes:?}");
    assert_eq!(label_of(&both_halves(&job(Some("600"))).unwrap()), Some("600"));
}

fn running(object: Value) -> Value {
    let mut object = object;
    object["spec"]["suspend"] = json!(false);
    object
}

#[test]
fn raising_the_label_on_update_is_held_to_the_ceiling_or_undone_while_the_job_runs() {
    // Suspended before and after: Kueue lets it change, so tiergate holds it like a CREATE.
    let (stored, decision) = stored_by_webhook(&job(Some("86400")), Some(&job(Some("600"))));
    assert_eq!(label_of(&stored), Some(CEILING));
    assert!(warned(&decision, "above tier bronze's ceiling"), "{:?}", decision.warnings);
    assert!(denial(&validate_only(&job(Some("86400")), Some(&job(Some("600"))))).contains(GATE_MESSAGE));
    // Running: Kueue refuses any change, so the old value is put back (which Kueue accepts as no change).
    let (stored, decision) = stored_by_webhook(&running(job(Some("86400"))), Some(&running(job(Some("600")))));
    assert_eq!(label_of(&stored), Some("600"));
    assert!(warned(&decision, "was undone"), "{:?}", decision.warnings);
    let refused = validate_only(&running(job(Some("86400"))), Some(&running(job(Some("600")))));
    assert!(denial(&refused).contains(GATE_MESSAGE));
    // Unsuspending in the same update is no way around it.
    let (stored, _) = stored_by_webhook(&running(job(Some("86400"))), Some(&job(Some("600"))));
    assert_eq!(label_of(&stored), Some("600"));
}

#[test]
fn removing_the_label_on_update_gets_the_old_value_back_and_is_refused_with_the_webhook_down() {
    for (new, old) in [(job(None), job(Some("600"))), (running(job(None)), running(job(Some("600"))))] {
        let (stored, decision) = stored_by_webhook(&new, Some(&old));
        assert_eq!(label_of(&stored), Some("600"), "{:?}", decision.reasons);
        assert!(!decision.warnings.is_empty());
        assert!(denial(&validate_only(&new, Some(&old))).contains(GATE_MESSAGE));
    }
    // An old value above today's ceiling is not restored on a suspended Job: the ceiling is.
    let (stored, _) = stored_by_webhook(&job(None), Some(&job(Some("86400"))));
    assert_eq!(label_of(&stored), Some(CEILING));
}

#[test]
fn an_update_that_leaves_the_label_as_it_was_passes_both_gates_untouched() {
    // A Job created before bronze had a limit keeps running without one; its other updates are not refused.
    let mut relabelled = running(job(None));
    relabelled["metadata"]["labels"]["team"] = json!("a");
    let (stored, _) = stored_by_webhook(&relabelled, Some(&running(job(None))));
    assert_eq!(label_of(&stored), None);
    assert_eq!(validate_only(&relabelled, Some(&running(job(None)))), GateOutcome::Admitted);
    let mut kept = running(job(Some("86400")));
    kept["metadata"]["labels"]["team"] = json!("a");
    assert_eq!(label_of(&stored_by_webhook(&kept, Some(&running(job(Some("86400"))))).0), Some("86400"));
    assert_eq!(validate_only(&kept, Some(&running(job(Some("86400"))))), GateOutcome::Admitted);
}

/// A bronze GPU Pod (on l4) with `labels`, owned by `owner` when given.
fn pod(labels: Value, owner: Option<Value>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": BRONZE, "labels": labels}, "spec": gpu_spec()});
    pod["spec"]["tolerations"] =
        json!([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]);
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([owner]);
    }
    pod
}

fn job_owner() -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "1", "controller": true})
}

#[test]
fn a_huge_label_on_a_pod_owned_by_a_job_is_its_jobs_business_and_held_once_the_pod_is_queued_itself() {
    // Kueue reads a Job's pods' limit from the Job: a label on the pod changes nothing, and neither gate touches it.
    let owned = pod(json!({RUN_TIME: "86400"}), Some(job_owner()));
    let (stored, _) = stored_by_webhook(&owned, None);
    assert_eq!(label_of(&stored), Some("86400"));
    assert_eq!(validate_only(&owned, None), GateOutcome::Admitted);
    // Labelled with a queue, Kueue's pod integration would queue the pod by its own labels (its owner is a claim
    // the webhook cannot verify offline): held like a workload, whoever claims to own it.
    let queued = pod(json!({QUEUE: "tiergate-bronze", RUN_TIME: "86400"}), Some(job_owner()));
    let (stored, decision) = stored_by_webhook(&queued, None);
    assert_eq!(label_of(&stored), Some(CEILING), "{:?}", decision.reasons);
    assert!(denial(&validate_only(&queued, None)).contains(GATE_MESSAGE));
    // A bare pod queued by its own label gets the ceiling where it has none, in both gates.
    let bare = pod(json!({QUEUE: "tiergate-bronze"}), None);
    assert_eq!(label_of(&stored_by_webhook(&bare, None).0), Some(CEILING));
    assert!(denial(&validate_only(&bare, None)).contains(GATE_MESSAGE));
    assert_eq!(label_of(&both_halves(&bare).unwrap()), Some(CEILING));
}

fn cron_job(own: Value, template: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": BRONZE, "labels": own},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"metadata": {"labels": template},
            "spec": {"suspend": true, "template": {"spec": gpu_spec()}}}}})
}

#[test]
fn a_label_on_a_kind_kueue_does_not_read_it_from_never_stands_for_the_one_it_reads() {
    // A CronJob's own labels never reach its Jobs: the job template's label is the one held.
    let cron = cron_job(json!({RUN_TIME: "86400"}), json!({QUEUE: "tiergate-bronze"}));
    let (stored, _) = stored_by_webhook(&cron, None);
    assert_eq!(stored["spec"]["jobTemplate"]["metadata"]["labels"][RUN_TIME], CEILING);
    assert_eq!(stored["metadata"]["labels"][RUN_TIME], "86400", "meaningless there, and left as sent");
    assert!(denial(&validate_only(&cron, None)).contains(GATE_MESSAGE));
    let down = both_halves(&cron).unwrap();
    assert_eq!(down["spec"]["jobTemplate"]["metadata"]["labels"][RUN_TIME], CEILING);
    // Its UPDATE is judged as a CREATE: the Jobs it makes next get the tier's limit.
    let raised = cron_job(json!({}), json!({QUEUE: "tiergate-bronze", RUN_TIME: "86400"}));
    let old = cron_job(json!({}), json!({QUEUE: "tiergate-bronze", RUN_TIME: "86400"}));
    let (stored, _) = stored_by_webhook(&raised, Some(&old));
    assert_eq!(stored["spec"]["jobTemplate"]["metadata"]["labels"][RUN_TIME], CEILING);
    assert!(denial(&validate_only(&raised, Some(&old))).contains(GATE_MESSAGE));
    // A Deployment is not queued by tiergate: its label is left alone (its pods, if queued, are held).
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": BRONZE, "labels": {RUN_TIME: "86400"}},
        "spec": {"selector": {}, "template": {"spec": gpu_spec()}}});
    assert_eq!(label_of(&stored_by_webhook(&deployment, None).0), Some("86400"));
}

fn leader_worker_set(object_label: &str, worker_label: Option<&str>) -> Value {
    let mut worker = json!({"spec": gpu_spec()});
    if let Some(value) = worker_label {
        worker["metadata"] = json!({"labels": {RUN_TIME: value}});
    }
    json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": BRONZE,
            "labels": {QUEUE: "tiergate-bronze", RUN_TIME: object_label}},
        "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": worker}}})
}

#[test]
fn a_leaderworkerset_cannot_hide_a_huge_limit_in_the_pod_template_kueue_reads() {
    let object = leader_worker_set("600", Some("86400"));
    let (stored, _) = stored_by_webhook(&object, None);
    let worker = &stored["spec"]["leaderWorkerTemplate"]["workerTemplate"];
    assert_eq!(worker["metadata"]["labels"][RUN_TIME], "600", "the pods get the object's value");
    assert_eq!(stored["spec"]["leaderWorkerTemplate"].get("leaderTemplate"), None, "no template is made up");
    assert!(denial(&validate_only(&object, None)).contains(GATE_MESSAGE));
    let unlabelled = leader_worker_set("600", None);
    let down = both_halves(&unlabelled).unwrap();
    assert_eq!(down["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"][RUN_TIME], CEILING);
    assert_eq!(down["metadata"]["labels"][RUN_TIME], "600");
}

#[test]
fn a_forged_run_time_mark_only_takes_back_a_label_the_tenant_could_have_left_out() {
    // The mark tells the webhook the policy set the label: it removes it and decides again, so a huge value the
    // tenant marked as the policy's comes out at the ceiling, never kept.
    let mut forged = job(Some("86400"));
    forged["metadata"]["annotations"] = json!({RUN_TIME_ADDED_MARK: "/metadata,"});
    let (stored, _) = stored_by_webhook(&forged, None);
    assert_eq!(label_of(&stored), Some(CEILING));
    assert_eq!(stored["metadata"]["annotations"].get(RUN_TIME_ADDED_MARK), None);
    // With the webhook down the policy removes the forged mark, and the huge label is refused.
    let refused = both_halves(&forged).unwrap_err();
    assert!(refused.contains(GATE_MESSAGE), "{refused}");
}

#[test]
fn a_tier_without_a_limit_is_left_exactly_as_before() {
    let mut gold = job(Some("99999999999"));
    gold["metadata"]["namespace"] = json!(GOLD);
    gold["metadata"]["labels"][QUEUE] = json!("tiergate-gold");
    gold["spec"]["template"]["spec"]["nodeSelector"] = json!({CLASS: "h100"});
    let (stored, decision) = stored_by_webhook(&gold, None);
    assert_eq!(label_of(&stored), Some("99999999999"));
    assert!(!decision.reasons.iter().any(|reason| reason.contains("run-time")), "{:?}", decision.reasons);
    assert_eq!(validate_only(&gold, None), GateOutcome::Admitted);
    let mut bare = gold.clone();
    bare["metadata"]["labels"].as_object_mut().unwrap().remove(RUN_TIME);
    assert_eq!(label_of(&stored_by_webhook(&bare, None).0), None);
    let summary = stored_by_webhook(&bare, None).0["metadata"]["annotations"]["tiergate.io/decision"].clone();
    assert!(!summary.as_str().unwrap().contains("max-exec-time"), "{summary}");
}

#[test]
fn an_admin_keeps_the_limit_it_asks_for() {
    let mut policy = load_policy(None).unwrap();
    policy.spec.admission.admin_users = vec!["mallory".to_owned()];
    let snapshot = build_static_snapshot(
        policy,
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    );
    let decision =
        mutate(&tenant_review("CREATE", &job(Some("86400")), None, false, &[]), &snapshot, &AdmissionInputs::default());
    let mut stored = job(Some("86400"));
    json_patch::patch(&mut stored, &decision.patch).unwrap();
    assert_eq!(label_of(&stored), Some("86400"));
}

#[test]
fn a_job_with_no_labels_at_all_gets_queue_and_limit_from_the_mutating_half() {
    // The mutating half creates the labels map for the queue label; the limit must join it, not replace it.
    let mut bare = job(None);
    bare["metadata"].as_object_mut().unwrap().remove("labels");
    bare["spec"].as_object_mut().unwrap().remove("suspend");
    let stored = both_halves(&bare).unwrap();
    assert_eq!(stored["metadata"]["labels"][QUEUE], "tiergate-bronze", "{stored:#}");
    assert_eq!(label_of(&stored), Some(CEILING), "{stored:#}");
}
