//! `kubectl tiergate why` and `status` built from recorded objects (daemon/tests/fixtures/live/): one Workload in
//! each Kueue state with the sentence it must end with, a ClusterQueue with usage and the table it gives, the
//! fixtures checked against Kueue v0.19.2's v1beta2 schemas, and the read path against a mocked API server.

#![cfg(test)]

mod crd_schema_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crd_schema_support::strict;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::client::Body;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tiergate::admission::decide_review;
use tiergate::answers::karpenter::{
    KarpenterFacts, KarpenterRead, KarpenterState, NodeClaimRead, PodQuery, build_pod_query, find_karpenter_facts,
    newest_karpenter_event, nominated_node_claims, waiting_pods,
};
use tiergate::answers::kueue::{KueueClusterQueue, KueueLocalQueue, KueueWorkload};
use tiergate::answers::provisioning::{ProvisioningRequestRead, ProvisioningState};
use tiergate::answers::why::{build_live_snapshot, parse_target};
use tiergate::answers::{Hold, StatusInputs, WhyAnswer, WhyInputs, build_status_answer, build_why_answer};
use tiergate::check::{NodePool, PoolSource};
use tiergate::inputs::load_policy;
use tiergate::live::{fetch_status_inputs, fetch_why_inputs};
use tiergate::placement::PlacementLedger;
use tiergate::policy::TierPolicy;
use tiergate::scoring::Scorer;
use tiergate_workloads::WorkloadAdapter;

const TIER_LABEL: &str = "tenant.kubenexus.io/tier";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/live")
}

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture_dir().join(name)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

fn workload(name: &str) -> KueueWorkload {
    serde_json::from_value(fixture(name)).unwrap()
}

fn job_adapter() -> &'static WorkloadAdapter {
    parse_target("job/train-bert").unwrap().0
}

fn policy() -> TierPolicy {
    load_policy(None).unwrap()
}

fn bronze_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(TIER_LABEL.to_owned(), "bronze".to_owned())])
}

/// Builds the answer the way `why` does: the decision re-run on the live snapshot, then the answer.
fn answer_for(
    object: &Value,
    adapter: &'static WorkloadAdapter,
    labels: &BTreeMap<String, String>,
    local_queues: &[String],
    workloads: &[KueueWorkload],
) -> WhyAnswer {
    answer_with_requests(object, adapter, labels, local_queues, workloads, &[])
}

/// [`answer_for`] with the namespace's ProvisioningRequests.
fn answer_with_requests(
    object: &Value,
    adapter: &'static WorkloadAdapter,
    labels: &BTreeMap<String, String>,
    local_queues: &[String],
    workloads: &[KueueWorkload],
    provisioning_requests: &[ProvisioningRequestRead],
) -> WhyAnswer {
    answer_with_policy(&policy(), object, adapter, labels, local_queues, workloads, provisioning_requests, &[])
}

/// [`answer_with_requests`] under `policy`, with the policy's LocalQueues in every namespace.
#[allow(clippy::too_many_arguments)]
fn answer_with_policy(
    policy: &TierPolicy,
    object: &Value,
    adapter: &'static WorkloadAdapter,
    labels: &BTreeMap<String, String>,
    local_queues: &[String],
    workloads: &[KueueWorkload],
    provisioning_requests: &[ProvisioningRequestRead],
    tier_local_queues: &[KueueLocalQueue],
) -> WhyAnswer {
    let karpenter = KarpenterRead::default();
    let inputs = (workloads, provisioning_requests, tier_local_queues, &karpenter);
    answer_with_karpenter(policy, object, adapter, labels, local_queues, inputs)
}

/// [`answer_with_policy`] with what `why` read about the pods waiting for a node.
fn answer_with_karpenter(
    policy: &TierPolicy,
    object: &Value,
    adapter: &'static WorkloadAdapter,
    labels: &BTreeMap<String, String>,
    local_queues: &[String],
    (workloads, provisioning_requests, tier_local_queues, karpenter): (
        &[KueueWorkload],
        &[ProvisioningRequestRead],
        &[KueueLocalQueue],
        &KarpenterRead,
    ),
) -> WhyAnswer {
    let namespace = object["metadata"]["namespace"].as_str().unwrap();
    let snapshot = build_live_snapshot(policy.clone(), namespace, labels, local_queues);
    let request = tiergate::admission::build_request(object.clone()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let decision =
        runtime.block_on(decide_review(&request, &snapshot, &PlacementLedger::default(), &Scorer::default()));
    build_why_answer(&WhyInputs {
        adapter,
        object,
        policy: Some(policy),
        policy_name: "default",
        namespace_labels: labels,
        local_queues,
        decision: Some(&decision),
        workloads,
        provisioning_requests,
        tier_local_queues,
        karpenter,
    })
}

fn bronze_job_answer(workload_file: &str) -> WhyAnswer {
    let queues = ["tiergate-bronze".to_owned()];
    answer_for(&fixture("job-train-bert.yaml"), job_adapter(), &bronze_labels(), &queues, &[workload(workload_file)])
}

// ----- the fixtures are objects Kueue v0.19.2 writes -----

fn v1beta2_schema(crd: &Path) -> Value {
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(crd).unwrap()).unwrap();
    let version = crd["spec"]["versions"].as_array().unwrap().iter().find(|version| version["name"] == "v1beta2");
    version.unwrap()["schema"]["openAPIV3Schema"].clone()
}

/// The structural schema (strict) and the CEL rules of one CRD version, compiled once.
struct SchemaChecker {
    schema: Value,
    structural: jsonschema::Validator,
    cel: kube_cel::Validator,
}

impl SchemaChecker {
    fn new(schema: Value) -> Self {
        let structural = jsonschema::validator_for(&strict(&schema)).unwrap();
        Self { schema, structural, cel: kube_cel::Validator::new() }
    }

    fn errors(&self, object: &Value) -> Vec<String> {
        let mut errors: Vec<String> =
            self.structural.iter_errors(object).map(|error| format!("{}: {error}", error.instance_path())).collect();
        if let Err(cel) = self.cel.validate(&self.schema, object, None) {
            errors.extend(cel.iter().map(ToString::to_string));
        }
        errors
    }
}

#[test]
fn every_recorded_workload_matches_kueues_v1beta2_workload_schema() {
    let checker = SchemaChecker::new(v1beta2_schema(&fixture_dir().join("kueue.x-k8s.io_workloads.yaml")));
    let mut checked = 0;
    for entry in std::fs::read_dir(fixture_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("workload-") {
            continue;
        }
        let errors = checker.errors(&fixture(&name));
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        checked += 1;
    }
    assert_eq!(checked, 6);
    // The check can fail: a wrongly typed field is refused.
    let mut old = fixture("workload-admitted.yaml");
    old["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] = json!("2");
    assert!(!checker.errors(&old).is_empty());
    // ... and so is a Kueue CEL rule: one assignment per pod set once quota is reserved.
    let mut extra = fixture("workload-admitted.yaml");
    let assignment = extra["status"]["admission"]["podSetAssignments"][0].clone();
    extra["status"]["admission"]["podSetAssignments"].as_array_mut().unwrap().push(assignment);
    let errors = checker.errors(&extra);
    assert!(errors.iter().any(|error| error.contains("same number of podSets")), "{errors:#?}");
}

#[test]
fn the_recorded_cluster_queue_matches_kueues_v1beta2_cluster_queue_schema() {
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/kueue/crds/kueue.x-k8s.io_clusterqueues.yaml");
    let errors = SchemaChecker::new(v1beta2_schema(&crd)).errors(&fixture("clusterqueue-bronze.yaml"));
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn the_copied_workload_crd_equals_the_shared_kueue_release_when_it_is_present() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/kueue/crds/kueue.x-k8s.io_workloads.yaml");
    if let Ok(shared) = std::fs::read_to_string(shared) {
        assert_eq!(std::fs::read_to_string(fixture_dir().join("kueue.x-k8s.io_workloads.yaml")).unwrap(), shared);
    }
}

// ----- why: one sentence per Kueue state -----

#[test]
fn a_job_kueue_keeps_off_a_draining_flavor_is_told_the_flavor_drains_after_a_policy_edit() {
    // Kueue v0.19.2's message when the only flavor with room is one tiergate closed (reconcile.md, "Flavor
    // migrations"): the taint is read back from the flavor's nodeTaints.
    let message = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor \
                   l4-1a2b3c4d, 1 more needed; untolerated taint {tiergate.io/draining true NoSchedule <nil>} in \
                   flavor l4";
    let mut pending = fixture("workload-pending-quota.yaml");
    pending["status"]["conditions"][0]["message"] = json!(message);
    let pending: KueueWorkload = serde_json::from_value(pending).unwrap();
    let queues = ["tiergate-bronze".to_owned()];
    let answer = answer_for(&fixture("job-train-bert.yaml"), job_adapter(), &bronze_labels(), &queues, &[pending]);
    assert!(matches!(answer.hold, Hold::PendingQuota { .. }), "{:?}", answer.hold);
    assert!(
        answer.summary.ends_with(
            "Flavor l4 is draining after a policy edit (the TierPolicy's status.flavorMigrations): Kueue admits \
             nothing new on it, and this workload goes to the tier's new flavor as quota frees there."
        ),
        "{}",
        answer.summary
    );
    let plain = bronze_job_answer("workload-pending-quota.yaml");
    assert!(!plain.summary.contains("draining"), "{}", plain.summary);
}

#[test]
fn a_job_held_by_a_spent_rolling_window_is_told_when_use_leaves_the_window() {
    let mut policy = policy();
    let bronze = policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    bronze.budget = Some(serde_json::from_value(json!({"window": "4h", "limits": {"nvidia.com/gpu": "2h"}})).unwrap());
    // 5-minute buckets: 1 GPU-hour in the one of 04:00 and 1.5 in that of 07:00, both in the window at 08:00.
    let status = json!({"usage": {
        "checkpointTime": "2026-12-02T08:00:00Z", "period": "Month", "timeZone": "UTC",
        "periodStart": "2026-12-01T00:00:00Z", "periodEnd": "2027-01-01T00:00:00Z",
        "previousPeriodStart": "2026-11-01T00:00:00Z",
        "windows": {"bronze": {"window": "4h", "bucketSeconds": 300, "buckets": [
            {"start": "2026-12-02T04:00:00Z", "used": {"nvidia.com/gpu": "3600"}},
            {"start": "2026-12-02T07:00:00Z", "used": {"nvidia.com/gpu": "5400"}},
        ]}},
    }});
    policy.status = Some(serde_json::from_value(status).unwrap());
    let queues = ["tiergate-bronze".to_owned()];
    let pending = [workload("workload-pending-quota.yaml")];
    let answer = answer_with_policy(
        &policy,
        &fixture("job-train-bert.yaml"),
        job_adapter(),
        &bronze_labels(),
        &queues,
        &pending,
        &[],
        &[],
    );
    assert!(
        matches!(&answer.hold, Hold::BudgetSpent { window: Some(window), .. } if window == "4h"),
        "{:?}",
        answer.hold
    );
    assert!(
        answer.summary.starts_with(
            "Pending: tier bronze's budget of 2h of nvidia.com/gpu in any 4h is spent (2.5h used in the last 4h), so \
             its ClusterQueue tiergate-bronze admits nothing new (stopPolicy Hold; admitted workloads run on) until \
             use leaves the 4h window, at 2026-12-02T08:05:00Z if nothing more runs; to admit it sooner"
        ),
        "{}",
        answer.summary
    );
}

/// A LocalQueue of bronze in `namespace` with `pending` workloads and `consumed_gpus` of decayed past usage.
fn bronze_local_queue(namespace: &str, weight: &str, pending: i64, consumed_gpus: &str) -> KueueLocalQueue {
    serde_json::from_value(json!({
        "metadata": {"name": "tiergate-bronze", "namespace": namespace},
        "spec": {"clusterQueue": "tiergate-bronze", "fairSharing": {"weight": weight}},
        "status": {"pendingWorkloads": pending, "admittedWorkloads": 0,
            "fairSharing": {"weightedShare": 0, "admissionFairSharingStatus": {
                "consumedResources": {"nvidia.com/gpu": consumed_gpus}, "lastUpdate": "2026-11-27T10:00:00Z"}}}
    }))
    .unwrap()
}

#[test]
fn a_job_waiting_in_a_sharing_tier_names_the_tenants_with_less_past_usage_admitted_before_it() {
    let mut policy = policy();
    let bronze = policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    bronze.tenant_fair_sharing = true;
    let queues = [
        bronze_local_queue("ml-team-dev", "1", 4, "6"),
        bronze_local_queue("team-b", "2", 1, "4"),
        bronze_local_queue("team-c", "1", 0, "0"),
        bronze_local_queue("team-d", "1", 2, "1"),
        bronze_local_queue("team-e", "1", 3, "9"),
    ];
    let answer = answer_with_policy(
        &policy,
        &fixture("job-train-bert.yaml"),
        job_adapter(),
        &bronze_labels(),
        &["tiergate-bronze".to_owned()],
        &[workload("workload-pending-quota.yaml")],
        &[],
        &queues,
    );
    let order = answer.tenant_order.clone().expect("a pending job of a sharing tier has a tenant order");
    // team-c has used nothing but waits for nothing; team-e has used more.
    let ahead: Vec<(&str, Option<f64>)> =
        order.ahead.iter().map(|row| (row.namespace.as_str(), row.usage_per_weight)).collect();
    assert_eq!(ahead, [("team-d", Some(1.0)), ("team-b", Some(2.0))]);
    assert!(
        answer.summary.ends_with(
            "Tier bronze shares its quota by past usage: ml-team-dev has used 6.00 per weight (weight 1); 2 \
             tenant(s) with workloads pending have used less and are admitted first: team-d (1.00, 2 pending), \
             team-b (2.00, 1 pending)."
        ),
        "{}",
        answer.summary
    );
    // A FIFO tier says nothing of tenants.
    let fifo = bronze_job_answer("workload-pending-quota.yaml");
    assert!(fifo.tenant_order.is_none() && !fifo.summary.contains("past usage"), "{}", fifo.summary);
}

#[test]
fn a_job_waiting_for_quota_is_held_by_the_full_tier_with_kueues_own_message() {
    let answer = bronze_job_answer("workload-pending-quota.yaml");
    assert_eq!(
        answer.hold,
        Hold::PendingQuota {
            cluster_queue: Some("tiergate-bronze".to_owned()),
            message: "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in \
                      flavor l4, 2 more needed"
                .to_owned()
        }
    );
    assert_eq!(
        answer.summary,
        "Pending: quota is full in tier bronze (ClusterQueue tiergate-bronze) (Kueue: couldn't assign flavors to pod \
         set main: insufficient unused quota for nvidia.com/gpu in flavor l4, 2 more needed); it is admitted when \
         running workloads in tier bronze finish or the tier's quota is raised in the TierPolicy."
    );
    let table = answer.to_table();
    assert!(table.starts_with("Job ml-team-dev/train-bert\nTier:        bronze (tenant.kubenexus.io/tier=bronze, LocalQueue tiergate-bronze)\n"), "{table}");
    assert!(
        table.contains("Annotations: tiergate.io/tier=bronze tiergate.io/decision=tier=bronze class=l4"),
        "{table}"
    );
    assert!(
        table.contains("Workload:    job-train-bert-5d3a1 (LocalQueue tiergate-bronze, ClusterQueue -)"),
        "{table}"
    );
    assert!(
        table
            .contains("CONDITION       STATUS   REASON    MESSAGE\nQuotaReserved   False    Pending   couldn't assign"),
        "{table}"
    );
    assert!(table.ends_with(&format!("\n\n{}\n", answer.summary)), "{table}");
}

#[test]
fn an_admitted_job_names_its_cluster_queue_tier_and_flavor_and_nothing_holds_it() {
    let answer = bronze_job_answer("workload-admitted.yaml");
    assert_eq!(
        answer.summary,
        "Admitted by Kueue in ClusterQueue tiergate-bronze (tier bronze) on flavor l4: nothing is holding it."
    );
    let workload = answer.workload.as_ref().unwrap();
    assert_eq!(workload.cluster_queue.as_deref(), Some("tiergate-bronze"));
    assert_eq!(workload.pending_message, None);
    assert_eq!(workload.flavors["main"]["nvidia.com/gpu"], "l4");
    let types: Vec<&str> = workload.conditions.iter().map(|condition| condition.type_.as_str()).collect();
    assert_eq!(types, ["QuotaReserved", "Admitted", "PodsReady"]);
    assert_eq!(workload.charged["main"]["nvidia.com/gpu"], "2", "Kueue's resourceUsage");
    let table = answer.to_table();
    assert!(
        table.contains("POD SET   RESOURCE         FLAVOR   CHARGED\nmain      nvidia.com/gpu   l4       2\n"),
        "{table}"
    );
}

#[test]
fn a_preempted_job_says_it_was_evicted_and_waits_for_quota_in_its_tier_again() {
    let answer = bronze_job_answer("workload-evicted.yaml");
    assert!(matches!(&answer.hold, Hold::Evicted { reason, .. } if reason == "Preempted"), "{:?}", answer.hold);
    assert_eq!(
        answer.summary,
        "Evicted by Kueue (Preempted: Preempted to accommodate a workload (UID: 9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a, \
         JobUID: 1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d) due to prioritization in the ClusterQueue); Kueue requeues it \
         and admits it again when there is quota in tier bronze."
    );
}

#[test]
fn a_job_stopped_at_its_run_time_limit_is_told_kueue_will_not_requeue_it_and_how_to_run_it_again() {
    let answer = bronze_job_answer("workload-deactivated-run-time.yaml");
    assert!(matches!(&answer.hold, Hold::Evicted { reason, .. } if reason == "Deactivated"), "{:?}", answer.hold);
    assert_eq!(
        answer.summary,
        "Evicted by Kueue (Deactivated: The workload is deactivated due to exceeding the maximum execution time); it \
         ran for its whole run-time limit (its kueue.x-k8s.io/max-exec-time-seconds label, held to its tier's \
         maxRunTime) and Kueue does not queue it again: re-create it to run it again (asking for no more than the \
         tier's ceiling), or set spec.active back to true on the Workload for one more run of the same length."
    );
}

#[test]
fn a_job_with_reserved_quota_waits_for_its_provisioning_request() {
    let answer = bronze_job_answer("workload-waiting-provisioning.yaml");
    assert_eq!(
        answer.summary,
        "Quota is reserved in tier bronze, but the ProvisioningRequest of admission check tiergate-bronze-provisioning \
         is not provisioned (Pending: Waiting for the ProvisioningRequest \
         ml-team-dev/job-train-bert-5d3a1-tiergate-bronze-provisioning-1 to be provisioned); it is admitted when the \
         cluster autoscaler provisions the nodes."
    );
    assert!(answer.to_table().contains(
        "ADMISSION CHECK                STATE     MESSAGE\ntiergate-bronze-provisioning   Pending   Waiting"
    ));
}

/// The bronze Job's answer while its Workload waits on the ProvisioningRequest `request` (edited by `edit`).
fn provisioning_answer(edit: impl FnOnce(&mut Value)) -> WhyAnswer {
    let mut request = fixture("provisioningrequest-capacity-not-found.yaml");
    edit(&mut request);
    waiting_for(&[serde_json::from_value(request).unwrap()])
}

/// The bronze Job's answer while its Workload waits on its provisioning check, the namespace holding `requests`.
fn waiting_for(requests: &[ProvisioningRequestRead]) -> WhyAnswer {
    let queues = ["tiergate-bronze".to_owned()];
    let workloads = [workload("workload-waiting-provisioning.yaml")];
    let job = fixture("job-train-bert.yaml");
    answer_with_requests(&job, job_adapter(), &bronze_labels(), &queues, &workloads, requests)
}

fn set_condition(request: &mut Value, type_: &str, status: &str, reason: &str, message: &str) {
    let conditions = request["status"]["conditions"].as_array_mut().unwrap();
    conditions.retain(|condition| condition["type"] != type_);
    conditions.push(json!({"type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": "2026-11-24T05:10:00Z"}));
}

#[test]
fn check_capacity_that_finds_nothing_names_the_class_that_grows_the_pool() {
    let answer = provisioning_answer(|_| {});
    let Hold::WaitingForCheck { provisioning: Some(facts), .. } = &answer.hold else { panic!("{:?}", answer.hold) };
    assert_eq!(facts.state, ProvisioningState::CapacityNotFound);
    assert_eq!(facts.request, "job-train-bert-5d3a1-tiergate-bronze-provisioning-1");
    assert_eq!(
        answer.summary,
        "Quota is reserved in tier bronze; ProvisioningRequest job-train-bert-5d3a1-tiergate-bronze-provisioning-1 \
         (class check-capacity.autoscaling.x-k8s.io) found no free capacity (CapacityIsNotFound: Capacity is not \
         found, CA will try to find it later.): check-capacity.autoscaling.x-k8s.io only looks for nodes that exist \
         and never grows a pool, so on an autoscaled pool that is empty it waits forever. Set \
         spec.tiers[2].provisioning.provisioningClassName to best-effort-atomic-scale-up.autoscaling.x-k8s.io (and the \
         GPU class's capacity: Autoscaled), or add nodes."
    );
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["workload"]["provisioningRequest"]["reason"], "CapacityIsNotFound", "{json}");
}

#[test]
fn each_autoscaler_answer_gets_its_own_sentence() {
    let atomic = provisioning_answer(|request| {
        request["spec"]["provisioningClassName"] = json!("best-effort-atomic-scale-up.autoscaling.x-k8s.io");
    });
    assert!(atomic.summary.contains("cannot grow a node group by the whole request at once"), "{}", atomic.summary);
    assert!(atomic.summary.contains("Raise the node group's maximum size"), "{}", atomic.summary);

    let unanswered = provisioning_answer(|request| request["status"] = json!({}));
    assert!(unanswered.summary.contains("has no answer from cluster-autoscaler yet"), "{}", unanswered.summary);
    assert!(unanswered.summary.contains("--enable-provisioning-requests"), "{}", unanswered.summary);

    let failed = provisioning_answer(|request| {
        set_condition(request, "Failed", "True", "CapacityIsNotFound", "CA could not find requested capacity");
    });
    assert!(failed.summary.contains("failed (CapacityIsNotFound: CA could not find requested capacity)"));
    assert!(failed.summary.contains("spec.tiers[2].provisioning.retryStrategy"), "{}", failed.summary);

    let expired = provisioning_answer(|request| {
        set_condition(
            request,
            "BookingExpired",
            "True",
            "CapacityReservationTimeExpired",
            "Capacity reservation time is expired",
        );
    });
    assert!(expired.summary.contains("the booking expired before the pods came"), "{}", expired.summary);

    let provisioned = provisioning_answer(|request| {
        set_condition(request, "Provisioned", "True", "CapacityIsProvisioned", "Capacity is found in the cluster");
    });
    assert!(provisioned.summary.contains("is provisioned"), "{}", provisioned.summary);
}

#[test]
fn an_inactive_provisioning_check_names_the_missing_crd_and_the_restart() {
    let mut waiting = fixture("workload-waiting-provisioning.yaml");
    waiting["status"]["admissionChecks"][0]["message"] = json!("the check is not active");
    let queues = ["tiergate-bronze".to_owned()];
    let workloads = [serde_json::from_value(waiting).unwrap()];
    let answer = answer_for(&fixture("job-train-bert.yaml"), job_adapter(), &bronze_labels(), &queues, &workloads);
    assert!(
        answer.summary.contains("admission check tiergate-bronze-provisioning is not active"),
        "{}",
        answer.summary
    );
    assert!(answer.summary.contains("install the CRD and restart Kueue"), "{}", answer.summary);
}

#[test]
fn only_the_workloads_newest_request_counts() {
    let mut older = fixture("provisioningrequest-capacity-not-found.yaml");
    set_condition(&mut older, "Failed", "True", "CapacityIsNotFound", "gave up");
    let mut newer = fixture("provisioningrequest-capacity-not-found.yaml");
    newer["metadata"]["name"] = json!("job-train-bert-5d3a1-tiergate-bronze-provisioning-2");
    newer["metadata"]["creationTimestamp"] = json!("2026-11-24T05:20:00Z");
    newer["status"] = json!({"conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
        "message": "ProvisioningRequest is accepted by ClusterAutoscaler", "lastTransitionTime": "2026-11-24T05:20:01Z"}]});
    let mut foreign = fixture("provisioningrequest-capacity-not-found.yaml");
    foreign["metadata"]["name"] = json!("other-tiergate-bronze-provisioning-9");
    foreign["metadata"]["creationTimestamp"] = json!("2026-11-24T06:00:00Z");
    foreign["metadata"]["ownerReferences"][0]["uid"] = json!("00000000-0000-4000-8000-000000000000");
    let requests: Vec<ProvisioningRequestRead> =
        [older, newer, foreign].into_iter().map(|request| serde_json::from_value(request).unwrap()).collect();
    let answer = waiting_for(&requests);
    let Hold::WaitingForCheck { provisioning: Some(facts), .. } = &answer.hold else { panic!("{:?}", answer.hold) };
    assert_eq!(
        (facts.request.as_str(), facts.state),
        ("job-train-bert-5d3a1-tiergate-bronze-provisioning-2", ProvisioningState::Accepted)
    );
    assert!(answer.summary.contains("is accepted by cluster-autoscaler"), "{}", answer.summary);
}

#[test]
fn a_job_whose_quota_is_reserved_and_checks_are_ready_is_about_to_be_admitted() {
    let mut reserved = fixture("workload-waiting-provisioning.yaml");
    reserved["status"]["admissionChecks"][0]["state"] = json!("Ready");
    reserved["status"]["conditions"].as_array_mut().unwrap().truncate(1);
    let queues = ["tiergate-bronze".to_owned()];
    let workloads = [serde_json::from_value(reserved).unwrap()];
    let answer = answer_for(&fixture("job-train-bert.yaml"), job_adapter(), &bronze_labels(), &queues, &workloads);
    assert_eq!(answer.hold, Hold::QuotaReserved { cluster_queue: "tiergate-bronze".into() });
    assert_eq!(
        answer.summary,
        "Quota is reserved in ClusterQueue tiergate-bronze (tier bronze) and no admission check holds it: Kueue admits \
         it next, nothing else is needed."
    );
}

#[test]
fn a_job_in_a_namespace_without_a_tier_label_has_no_local_queue_and_the_label_is_the_fix() {
    let mut job = fixture("job-train-bert.yaml");
    job["metadata"]["namespace"] = json!("ml-untiered");
    let no_labels = BTreeMap::new();
    let answer = answer_for(&job, job_adapter(), &no_labels, &[], &[workload("workload-no-localqueue.yaml")]);
    assert_eq!(
        answer.hold,
        Hold::NoTierLabel {
            label: TIER_LABEL.to_owned(),
            tiers: vec!["gold".into(), "silver".into(), "bronze".into()]
        }
    );
    assert_eq!(
        answer.summary,
        "Not queued: namespace ml-untiered has no tenant.kubenexus.io/tier label, so it has no tier and no LocalQueue; \
         a platform engineer must label it with one of the tiers (gold, silver, bronze)."
    );
    // Kueue's own message is still shown.
    assert!(
        answer.to_table().contains("Inadmissible   LocalQueue tiergate-bronze doesn't exist"),
        "{}",
        answer.to_table()
    );
}

#[test]
fn a_tiered_namespace_whose_local_queue_is_missing_points_at_the_daemon() {
    let answer = answer_for(&fixture("job-train-bert.yaml"), job_adapter(), &bronze_labels(), &[], &[]);
    assert_eq!(answer.hold, Hold::NoLocalQueue { tier: "bronze".into(), queue: "tiergate-bronze".into() });
    assert!(!answer.tier.local_queue_exists);
    assert!(answer.to_table().contains("LocalQueue tiergate-bronze (missing)"));
}

#[test]
fn a_pod_of_a_queued_job_is_answered_from_the_jobs_workload() {
    let (adapter, _) = parse_target("pods/train-bert-0-x7k2p").unwrap();
    let queues = ["tiergate-bronze".to_owned()];
    let workloads = [workload("workload-admitted.yaml")];
    let answer = answer_for(&fixture("pod-train-bert-0.yaml"), adapter, &bronze_labels(), &queues, &workloads);
    assert_eq!(answer.kind, "Pod");
    assert_eq!(answer.workload.as_ref().map(|workload| workload.name.as_str()), Some("job-train-bert-5d3a1"));
    assert!(matches!(answer.hold, Hold::Admitted { .. }), "{:?}", answer.hold);
}

#[test]
fn a_workload_of_another_object_is_not_taken_for_this_one() {
    let mut other = workload("workload-admitted.yaml");
    other.metadata.owner_references = None;
    other.metadata.labels = None;
    let queues = ["tiergate-bronze".to_owned()];
    let answer = answer_for(&fixture("job-train-bert.yaml"), job_adapter(), &bronze_labels(), &queues, &[other]);
    assert_eq!(answer.workload, None);
    assert_eq!(answer.hold, Hold::NoWorkload { queue: Some("tiergate-bronze".into()) });
}

#[test]
fn why_reports_the_same_reasons_explain_prints_for_the_live_object() {
    let answer = bronze_job_answer("workload-admitted.yaml");
    let decision = answer.decision.as_ref().unwrap();
    assert!(decision.reasons.iter().any(|reason| reason.contains("bronze")), "{:?}", decision.reasons);
    // explain decides from the same policy and namespace: same reasons, word for word.
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.yaml");
    std::fs::write(&job, serde_json::to_string(&fixture("job-train-bert.yaml")).unwrap()).unwrap();
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(&cluster, "namespaces:\n- {name: ml-team-dev, labels: {tenant.kubenexus.io/tier: bronze}}\n")
        .unwrap();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/kubenexus/policy.yaml");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .args(["explain", "--policy", policy.to_str().unwrap(), "--cluster", cluster.to_str().unwrap()])
        .arg(&job)
        .env_clear()
        .output()
        .unwrap();
    let explained = String::from_utf8_lossy(&output.stdout);
    for reason in &decision.reasons {
        assert!(explained.contains(&format!("  - {reason}\n")), "{reason:?} missing from explain:\n{explained}");
    }
}

#[test]
fn why_as_json_has_the_tier_decision_workload_hold_and_summary() {
    let answer = bronze_job_answer("workload-pending-quota.yaml");
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["tier"]["tier"], "bronze");
    assert_eq!(json["tier"]["localQueueExists"], true);
    assert_eq!(json["annotations"]["tier"], "bronze");
    assert_eq!(json["workload"]["name"], "job-train-bert-5d3a1");
    assert_eq!(json["workload"]["conditions"][0]["type"], "QuotaReserved");
    assert!(json["workload"]["pendingMessage"].as_str().is_some_and(|message| message.contains("2 more needed")));
    assert_eq!(json["hold"]["state"], "pendingQuota");
    assert_eq!(json["hold"]["clusterQueue"], "tiergate-bronze");
    assert_eq!(json["summary"], answer.summary.as_str());
    assert!(json["decision"]["reasons"].as_array().is_some_and(|reasons| !reasons.is_empty()));
}

#[test]
fn why_targets_come_from_the_adapter_table_in_any_case_or_plural_and_a_bad_one_is_named() {
    for (target, kind) in
        [("job/a", "Job"), ("Jobs/a", "Job"), ("jobset/a", "JobSet"), ("deployment.apps/a", "Deployment")]
    {
        assert_eq!(parse_target(target).unwrap().0.kind, kind, "{target}");
    }
    assert_eq!(parse_target("statefulsets/db-0").unwrap().1, "db-0");
    let error = parse_target("daemonset/nightly").unwrap_err().to_string();
    assert!(
        error.contains("daemonset")
            && error.contains("Job, JobSet, Pod, Deployment, StatefulSet")
            && error.contains("RayJob"),
        "{error}"
    );
    assert!(parse_target("train-bert").unwrap_err().to_string().contains("KIND/NAME"));
    assert!(parse_target("deployment.batch/a").is_err());
}

// ----- why: pods waiting for Karpenter (recorded from Karpenter kwok v1.14, fixtures/live/karpenter/) -----

fn karpenter_fixture(name: &str) -> Value {
    fixture(&format!("karpenter/{name}"))
}

fn items<T: serde::de::DeserializeOwned>(name: &str) -> Vec<T> {
    serde_json::from_value(karpenter_fixture(name)["items"].clone()).unwrap()
}

fn node_claim(name: &str) -> NodeClaimRead {
    serde_json::from_value(karpenter_fixture(name)).unwrap()
}

/// Job train-bert as the API server returns it: with the selector it defaults from the Job's UID.
fn live_job() -> Value {
    let mut job = fixture("job-train-bert.yaml");
    let uid = job["metadata"]["uid"].clone();
    job["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    job
}

/// The sample policy whose GPU classes carry Karpenter templates: tiergate renders NodePool tiergate-l4.
fn karpenter_policy() -> TierPolicy {
    load_policy(Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/karpenter/policy.yaml"))).unwrap()
}

/// What `why` read on the recorded plane for Job train-bert: both pods waiting, pod 0 nominated to NodeClaim
/// tiergate-l4-s6lj6 (read as `claim`), pod 1 refused by the full NodePool tiergate-l4.
fn train_bert_read(claim: &str) -> KarpenterRead {
    let mut events: Vec<Event> = items("events-train-bert-0-nominated.yaml");
    events.extend(items::<Event>("events-train-bert-1-limits.yaml"));
    KarpenterRead {
        pods: items("pods-train-bert.yaml"),
        events,
        node_claims: vec![node_claim(claim)],
        gone_node_claims: Vec::new(),
    }
}

/// `read` with pod 0 alone, nominated to NodeClaim `claim` (the recorded event renamed), read as `fixture`.
fn pod_zero_read(claim: &str, fixture: Option<&str>) -> KarpenterRead {
    let mut read = train_bert_read("nodeclaim-launching.yaml");
    read.pods.truncate(1);
    read.events.truncate(1);
    read.events[0].message = Some(format!("Pod should schedule on: nodeclaim/{claim}"));
    read.node_claims = fixture.map(node_claim).into_iter().collect();
    read
}

/// Job train-bert's answer in bronze with Kueue's Workload `workload_file`, under `policy` (the label it reads), with
/// `read`.
fn job_answer_with(policy: &TierPolicy, workload_file: &str, read: &KarpenterRead) -> WhyAnswer {
    let labels = BTreeMap::from([(policy.spec.tier_label.clone(), "bronze".to_owned())]);
    let queues = ["tiergate-bronze".to_owned()];
    let workloads = [workload(workload_file)];
    answer_with_karpenter(policy, &live_job(), job_adapter(), &labels, &queues, (&workloads, &[], &[], read))
}

#[test]
fn an_admitted_job_whose_pod_finds_its_nodepool_at_its_limits_waits_for_karpenter_naming_the_pool() {
    let answer =
        job_answer_with(&karpenter_policy(), "workload-admitted.yaml", &train_bert_read("nodeclaim-launching.yaml"));
    assert!(
        matches!(&answer.hold, Hold::WaitingForKarpenter { cluster_queue, flavors }
        if cluster_queue == "tiergate-bronze" && flavors == &["l4"]),
        "{:?}",
        answer.hold
    );
    assert_eq!(
        answer.summary,
        "Admitted in tier bronze; its pods wait for Karpenter: NodePool tiergate-l4 has reached its limits (all \
         available instance types exceed limits for nodepool (NodePool=tiergate-l4)); a node launches when nodes of \
         the pool are removed or the pool's limits are raised (tiergate renders the limit from the tiers' quota: check \
         `tiergate check --kubeconfig`)."
    );
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["hold"]["state"], "waitingForKarpenter", "{json}");
    assert_eq!(
        json["karpenter"],
        json!({"pod": "train-bert-1-dsb6t", "waitingPods": 2, "state": "nodePoolLimits", "nodePool": "tiergate-l4",
            "reason": "FailedScheduling",
            "message": "all available instance types exceed limits for nodepool (NodePool=tiergate-l4)"})
    );
    assert!(answer.to_table().ends_with(&format!("\n\n{}\n", answer.summary)));
    // A pool tiergate does not render (the sample policy has no Karpenter templates): no word on the tiers' quota.
    let answer = job_answer_with(&policy(), "workload-admitted.yaml", &train_bert_read("nodeclaim-launching.yaml"));
    assert!(
        answer.summary.ends_with("a node launches when nodes of the pool are removed or the pool's limits are raised."),
        "{}",
        answer.summary
    );
}

#[test]
fn each_nodeclaim_condition_karpenter_recorded_gets_its_own_sentence() {
    let policy = karpenter_policy();
    let summary = |read: &KarpenterRead| job_answer_with(&policy, "workload-admitted.yaml", read).summary;
    let head = "Admitted in tier bronze; its pod waits for Karpenter: ";
    assert_eq!(
        summary(&pod_zero_read("tiergate-l4-s6lj6", Some("nodeclaim-launching.yaml"))),
        format!("{head}NodeClaim tiergate-l4-s6lj6 is launching (Launched=Unknown).")
    );
    assert_eq!(
        summary(&pod_zero_read("tiergate-l4-s6lj6", Some("nodeclaim-registering.yaml"))),
        format!(
            "{head}NodeClaim tiergate-l4-s6lj6 launched and its node has not joined the cluster yet (Registered=Unknown: \
             Node not registered with cluster); Karpenter replaces it if the node does not join within 15 minutes."
        )
    );
    assert_eq!(
        summary(&pod_zero_read("tiergate-l4-q8m2v", Some("nodeclaim-launch-failed.yaml"))),
        format!(
            "{head}NodeClaim tiergate-l4-q8m2v failed to launch: LaunchFailed: translating nodeclaim to node, instance \
             type not found (instance-type=g6.xlarge); Karpenter retries, and replaces the NodeClaim after 5 minutes \
             without a launch."
        )
    );
    assert_eq!(
        summary(&pod_zero_read("tiergate-h100-nt7zf", Some("nodeclaim-initializing.yaml"))),
        format!(
            "{head}NodeClaim tiergate-h100-nt7zf has node kwok-tiergate-h100-nt7zf-ringeramber-2-iz6u8swyt8-157530093, \
             which is not ready yet (Initialized=Unknown: Node status is NotReady)."
        )
    );
    let mut gone = pod_zero_read("tiergate-l4-s6lj6", None);
    gone.gone_node_claims = vec!["tiergate-l4-s6lj6".to_owned()];
    assert_eq!(
        summary(&gone),
        format!(
            "{head}NodeClaim tiergate-l4-s6lj6 no longer exists: Karpenter deletes a NodeClaim it cannot launch \
             (InsufficientCapacity) and provisions again."
        )
    );
    let mut deleting = pod_zero_read("tiergate-l4-s6lj6", Some("nodeclaim-registering.yaml"));
    deleting.node_claims[0].metadata.deletion_timestamp = deleting.node_claims[0].metadata.creation_timestamp.clone();
    assert_eq!(
        summary(&deleting),
        format!("{head}NodeClaim tiergate-l4-s6lj6 is being deleted; Karpenter provisions again.")
    );
    let facts = job_answer_with(
        &policy,
        "workload-admitted.yaml",
        &pod_zero_read("tiergate-l4-q8m2v", Some("nodeclaim-launch-failed.yaml")),
    )
    .karpenter
    .unwrap();
    assert_eq!((facts.state, facts.node_pool.as_deref()), (KarpenterState::LaunchFailed, Some("tiergate-l4")));
    assert_eq!((facts.condition.as_str(), facts.reason.as_str()), ("Launched=Unknown", "LaunchFailed"));
}

#[test]
fn the_most_blocked_pod_is_named_and_a_pod_whose_node_is_ready_is_not_held_by_karpenter() {
    let policy = karpenter_policy();
    // Pod 0's NodeClaim failed to launch, pod 1 finds the pool full: the failed launch is named first.
    let mut read = train_bert_read("nodeclaim-launch-failed.yaml");
    read.events[0].message = Some("Pod should schedule on: nodeclaim/tiergate-l4-q8m2v".to_owned());
    let facts = job_answer_with(&policy, "workload-admitted.yaml", &read).karpenter.unwrap();
    assert_eq!(
        (facts.state, facts.pod.as_str(), facts.waiting_pods),
        (KarpenterState::LaunchFailed, "train-bert-0-5cks6", 2)
    );
    // A NodeClaim whose node is Ready holds nothing: kube-scheduler binds the pod next.
    let ready = job_answer_with(
        &policy,
        "workload-admitted.yaml",
        &pod_zero_read("tiergate-h100-nt7zf", Some("nodeclaim-ready.yaml")),
    );
    assert!(matches!(ready.hold, Hold::Admitted { .. }), "{:?}", ready.hold);
    assert_eq!(ready.karpenter, None);
    assert!(ready.summary.ends_with("on flavor l4: nothing is holding it."), "{}", ready.summary);
}

#[test]
fn only_karpenters_events_on_the_waiting_pods_of_an_admitted_workload_count() {
    let policy = karpenter_policy();
    // kube-scheduler's FailedScheduling is not Karpenter's.
    let mut scheduler = pod_zero_read("tiergate-l4-s6lj6", None);
    scheduler.events[0].reason = Some("FailedScheduling".to_owned());
    scheduler.events[0].message = Some("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.".to_owned());
    scheduler.events[0].source = None;
    scheduler.events[0].reporting_component = Some("default-scheduler".to_owned());
    let answer = job_answer_with(&policy, "workload-admitted.yaml", &scheduler);
    assert!(matches!(answer.hold, Hold::Admitted { .. }) && answer.karpenter.is_none(), "{:?}", answer.karpenter);
    // An event of another pod (the recorded one's UID) says nothing about this one.
    let mut other = train_bert_read("nodeclaim-launching.yaml");
    other.pods[1].metadata.uid = Some("0d9a8b7c-6e5f-4a3b-8c2d-1e0f9a8b7c6d".to_owned());
    let facts = job_answer_with(&policy, "workload-admitted.yaml", &other).karpenter.unwrap();
    assert_eq!(facts.state, KarpenterState::Launching);
    // A workload Kueue has not admitted is held by Kueue, whatever Karpenter says.
    let pending = job_answer_with(&policy, "workload-pending-quota.yaml", &train_bert_read("nodeclaim-launching.yaml"));
    assert!(matches!(pending.hold, Hold::PendingQuota { .. }) && pending.karpenter.is_none(), "{:?}", pending.hold);
}

#[test]
fn a_plain_pod_no_nodepool_fits_gets_karpenters_reason_per_pool() {
    let pod = karpenter_fixture("pod-finetune-a100-b.yaml");
    let adapter = parse_target("pod/finetune-a100-b").unwrap().0;
    let read = KarpenterRead {
        pods: vec![serde_json::from_value(pod.clone()).unwrap()],
        events: items("events-finetune-a100-b-no-nodepool.yaml"),
        ..KarpenterRead::default()
    };
    let queues = ["tiergate-bronze".to_owned()];
    let answer = answer_with_karpenter(&policy(), &pod, adapter, &bronze_labels(), &queues, (&[], &[], &[], &read));
    assert_eq!(answer.hold, Hold::NotQueued);
    assert_eq!(
        answer.summary,
        "tiergate does not queue a Pod in Kueue (it sets only the GPU class, placement and priority) and no Kueue \
         Workload owns it, so nothing in Kueue holds it; its pod waits for Karpenter: no NodePool fits (incompatible \
         requirements, key gpu.nvidia.com/class, gpu.nvidia.com/class In [a100] not in gpu.nvidia.com/class In [h100]; \
         incompatible requirements, key gpu.nvidia.com/class, gpu.nvidia.com/class In [a100] not in \
         gpu.nvidia.com/class In [l4]): a NodePool must match the pods' node selector and tolerations and offer an \
         instance type with the resources they request."
    );
}

/// What Karpenter says in the recorded events `events_fixture` about their pod (a recorded pod given its name and
/// UID), when the tier's pools are `tier_pools`.
fn facts_for(events_fixture: &str, tier_pools: &[&str]) -> KarpenterFacts {
    let events: Vec<Event> = items(events_fixture);
    let mut pod: Pod = serde_json::from_value(karpenter_fixture("pod-finetune-a100-b.yaml")).unwrap();
    pod.metadata.name = events[0].involved_object.name.clone();
    pod.metadata.uid = events[0].involved_object.uid.clone();
    let read = KarpenterRead { pods: vec![pod], events, ..KarpenterRead::default() };
    let tier_pools: Vec<String> = tier_pools.iter().map(|pool| (*pool).to_owned()).collect();
    find_karpenter_facts(&read, &tier_pools).unwrap()
}

#[test]
fn a_nodepool_at_its_limits_holds_a_pod_unless_the_tiers_own_pool_is_another() {
    // Karpenter names a pool at its limits only for them (it checks limits before fit): the one that may fit.
    let limits = "all available instance types exceed limits for nodepool (NodePool=tiergate-l4)";
    for events in ["events-finetune-a100-mismatch-and-limits.yaml", "events-notebook-untolerated.yaml"] {
        let facts = facts_for(events, &[]);
        assert_eq!((facts.state, facts.node_pool.as_deref()), (KarpenterState::NodePoolLimits, Some("tiergate-l4")));
        assert_eq!(facts.message, limits);
        assert_eq!(facts_for(events, &["tiergate-l4"]).state, KarpenterState::NodePoolLimits);
        // The tier's pool (rendered by tiergate) is not at its limits: it does not fit either.
        let facts = facts_for(events, &["tiergate-h100"]);
        assert_eq!((facts.state, facts.node_pool), (KarpenterState::NoNodePool, None));
    }
    let facts = facts_for("events-notebook-untolerated.yaml", &["tiergate-h100"]);
    assert!(
        facts.message.starts_with("did not tolerate taint (taint=nvidia.com/gpu=present:NoSchedule); "),
        "{}",
        facts.message
    );
    assert_eq!(facts_for("events-finetune-a100-b-no-nodepool.yaml", &[]).state, KarpenterState::NoNodePool);
}

#[test]
fn a_pods_newest_karpenter_event_counts_once_the_limit_is_raised_it_is_nominated() {
    // Pod 1: at the limit (22:06), at the limit with a second pool added (22:16), nominated once the limit was raised
    // (22:18).
    let mut read = train_bert_read("nodeclaim-launching.yaml");
    read.events.truncate(1);
    read.events.extend(items::<Event>("events-train-bert-1-after-limit-raised.yaml"));
    assert_eq!(
        newest_karpenter_event(&read.pods[1], &read.events).and_then(|event| event.reason.as_deref()),
        Some("Nominated")
    );
    assert_eq!(nominated_node_claims(&read.pods, &read.events), ["tiergate-l4-4h9r5", "tiergate-l4-s6lj6"]);
    // Without the nomination, the 22:16 event counts: the tier's pool at its limit, whichever policy.
    read.events.retain(|event| event.message.as_deref() != Some("Pod should schedule on: nodeclaim/tiergate-l4-4h9r5"));
    for policy in [policy(), karpenter_policy()] {
        let facts = job_answer_with(&policy, "workload-admitted.yaml", &read).karpenter.unwrap();
        assert_eq!((facts.state, facts.pod.as_str()), (KarpenterState::NodePoolLimits, "train-bert-1-dsb6t"));
        assert_eq!(facts.message, "all available instance types exceed limits for nodepool (NodePool=tiergate-l4)");
    }
}

#[test]
fn a_workloads_pods_are_found_by_its_selector_or_its_ownership_and_only_unbound_pending_ones_wait() {
    let job = job_adapter();
    assert_eq!(
        build_pod_query(job, &live_job()),
        Some(PodQuery::Selector("batch.kubernetes.io/controller-uid=7c1e4a52-3b8e-4d0a-9f3c-2a1b5c6d7e80".to_owned()))
    );
    assert_eq!(
        build_pod_query(job, &fixture("job-train-bert.yaml")),
        Some(PodQuery::ControlledBy("7c1e4a52-3b8e-4d0a-9f3c-2a1b5c6d7e80".to_owned()))
    );
    assert_eq!(
        build_pod_query(parse_target("pod/x").unwrap().0, &fixture("pod-train-bert-0.yaml")),
        Some(PodQuery::Itself)
    );
    let deployment = json!({"metadata": {"uid": "u"}, "spec": {"selector": {"matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "canary", "operator": "DoesNotExist"}]}}});
    assert_eq!(
        build_pod_query(parse_target("deployment/web").unwrap().0, &deployment),
        Some(PodQuery::Selector("app=web,tier in (a,b),!canary".to_owned()))
    );
    let mut pods: Vec<Pod> = items("pods-train-bert.yaml");
    assert_eq!(
        waiting_pods(&PodQuery::ControlledBy("7c1e4a52-3b8e-4d0a-9f3c-2a1b5c6d7e80".to_owned()), &pods).len(),
        2
    );
    assert!(waiting_pods(&PodQuery::ControlledBy("another".to_owned()), &pods).is_empty());
    pods[0].spec.as_mut().unwrap().node_name = Some("gpu-a".to_owned());
    pods[1].status.as_mut().unwrap().phase = Some("Running".to_owned());
    assert!(waiting_pods(&PodQuery::Itself, &pods).is_empty());
}

#[test]
fn the_recorded_node_claims_match_karpenters_v1_node_claim_schema() {
    let crd = fixture_dir().join("karpenter/karpenter.sh_nodeclaims.yaml");
    let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(crd).unwrap()).unwrap();
    let version = crd["spec"]["versions"].as_array().unwrap().iter().find(|version| version["name"] == "v1");
    let checker = SchemaChecker::new(version.unwrap()["schema"]["openAPIV3Schema"].clone());
    let mut checked = 0;
    for entry in std::fs::read_dir(fixture_dir().join("karpenter")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("nodeclaim-") {
            let errors = checker.errors(&karpenter_fixture(&name));
            assert!(errors.is_empty(), "{name}: {errors:#?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 5);
    let mut wrong = karpenter_fixture("nodeclaim-launching.yaml");
    wrong["spec"]["requirements"][0]["operator"] = json!("Within");
    assert!(!checker.errors(&wrong).is_empty());
}

// ----- status -----

fn degraded_policy() -> TierPolicy {
    let mut policy = policy();
    policy.status = Some(
        serde_json::from_value(json!({
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ApplyFailed", "message": "1 of 9 objects failed", "lastTransitionTime": "2026-11-24T05:00:00Z"},
                {"type": "Degraded", "status": "True", "reason": "ApplyFailed", "message": "see lastError", "lastTransitionTime": "2026-11-24T05:00:00Z"},
                {"type": "Served", "status": "True", "reason": "PolicyName", "message": "a tiergate instance serves this TierPolicy (its --policy-name)", "lastTransitionTime": "2026-11-24T05:00:00Z"}
            ],
            "lastError": "failed to apply ClusterQueue tiergate-gold: forbidden"
        }))
        .unwrap(),
    );
    policy
}

/// `status` of every tier of `policy` over the ClusterQueues `queues` (no other policy, cohort or pool).
fn status_of(policy: &TierPolicy, queues: &[KueueClusterQueue]) -> tiergate::answers::StatusAnswer {
    let inputs = StatusInputs {
        policy,
        other_policies: &[],
        cluster_queues: queues,
        cohorts: &[],
        pools: &[],
        local_queues: &[],
        tier: None,
    };
    build_status_answer(&inputs).unwrap()
}

#[test]
fn status_shows_each_tiers_usage_against_quota_per_flavor_counts_and_the_policys_last_error() {
    let policy = degraded_policy();
    let queues: Vec<KueueClusterQueue> = vec![serde_json::from_value(fixture("clusterqueue-bronze.yaml")).unwrap()];
    let answer = status_of(&policy, &queues);
    assert_eq!(
        answer.to_table(),
        "\
TIER     CLUSTERQUEUE                COHORT   PENDING   RESERVING   ADMITTED   PROVISIONING   WEIGHTED SHARE
gold     tiergate-gold (missing)     -        0         0           0          -              -
silver   tiergate-silver (missing)   -        0         0           0          -              -
bronze   tiergate-bronze             -        3         7           7          -              -

TIER     FLAVOR   RESOURCE         USED    RESERVED   QUOTA   BORROWED   BORROW LIMIT   LENT   NODEPOOL
bronze   l4       cpu              56      56         128     0          -              0      gpu.nvidia.com/class=l4
bronze   l4       memory           224Gi   224Gi      512Gi   0          -              0      gpu.nvidia.com/class=l4
bronze   l4       nvidia.com/gpu   14      14         16      0          -              0      gpu.nvidia.com/class=l4

TierPolicy default:
  Ready=False (ApplyFailed): 1 of 9 objects failed
  Degraded=True (ApplyFailed): see lastError
  Served=True (PolicyName): a tiergate instance serves this TierPolicy (its --policy-name)
  last error: failed to apply ClusterQueue tiergate-gold: forbidden
"
    );
}

#[test]
fn status_counts_a_provisioning_tiers_workloads_that_wait_for_their_nodes() {
    let mut policy = policy();
    let bronze = policy.spec.tiers.iter_mut().find(|tier| tier.name == "bronze").unwrap();
    bronze.provisioning = Some(
        serde_json::from_value(json!({
            "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
        }))
        .unwrap(),
    );
    let mut queue = fixture("clusterqueue-bronze.yaml");
    queue["status"]["admittedWorkloads"] = json!(5);
    let queues: Vec<KueueClusterQueue> = vec![serde_json::from_value(queue).unwrap()];
    let answer = status_of(&policy, &queues);
    let counts: Vec<(&str, Option<i64>)> =
        answer.tiers.iter().map(|tier| (tier.tier.as_str(), tier.waiting_for_provisioning)).collect();
    assert_eq!(counts, [("gold", None), ("silver", None), ("bronze", Some(2))]);
    let table = answer.to_table();
    assert!(
        table.contains("bronze   tiergate-bronze             -        3         7           5          2  "),
        "{table}"
    );
}

#[test]
fn status_names_the_live_nodepool_a_flavor_lands_on_and_filters_by_tier() {
    let policy = policy();
    let queues: Vec<KueueClusterQueue> = vec![serde_json::from_value(fixture("clusterqueue-bronze.yaml")).unwrap()];
    let pool = |name: &str, class: &str| NodePool {
        name: name.to_owned(),
        source: PoolSource::Karpenter,
        labels: BTreeMap::from([("gpu.nvidia.com/class".to_owned(), class.to_owned())]),
        requirements: Vec::new(),
        taints: Vec::new(),
        weight: None,
        limits: BTreeMap::new(),
    };
    let pools = [pool("gpu-h100", "h100"), pool("gpu-l4", "l4")];
    let inputs = StatusInputs {
        policy: &policy,
        other_policies: &[],
        cluster_queues: &queues,
        cohorts: &[],
        pools: &pools,
        local_queues: &[],
        tier: Some("bronze"),
    };
    let answer = build_status_answer(&inputs).unwrap();
    assert_eq!(answer.tiers.len(), 1);
    assert!(answer.tiers[0].flavors.iter().all(|flavor| flavor.nodepools == ["gpu-l4"]), "{answer:?}");
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["tiers"][0]["flavors"][2]["used"], "14");
    assert_eq!(json["tiers"][0]["pendingWorkloads"], 3);
    let unknown = StatusInputs { tier: Some("platinum"), ..inputs };
    let error = build_status_answer(&unknown).unwrap_err().to_string();
    assert!(error.contains("platinum") && error.contains("gold, silver, bronze"), "{error}");
}

// ----- the read path against a mocked API server -----

#[derive(Clone, Debug)]
struct Call {
    method: String,
    path: String,
    query: String,
}

fn not_found() -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

fn list(kind: &str, items: Vec<Value>) -> (StatusCode, Value) {
    (StatusCode::OK, json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {}, "items": items}))
}

/// A mocked API server answering `responder` and recording every call.
async fn with_mock_api<T, F>(
    responder: impl Fn(&Call) -> (StatusCode, Value) + Send + 'static,
    body: impl FnOnce(kube::Client) -> F,
) -> (T, Vec<Call>)
where
    F: std::future::Future<Output = T>,
{
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let recorded = calls.clone();
    let server = tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let uri = request.uri();
            let call = Call {
                method: request.method().to_string(),
                path: uri.path().to_owned(),
                query: uri.query().unwrap_or_default().to_owned(),
            };
            let (status, reply) = responder(&call);
            recorded.lock().unwrap().push(call);
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap();
            send.send_response(response);
        }
    });
    let result = body(kube::Client::new(service, "default")).await;
    server.await.unwrap();
    let calls = calls.lock().unwrap().clone();
    (result, calls)
}

fn why_server(call: &Call) -> (StatusCode, Value) {
    match call.path.as_str() {
        "/apis/batch/v1/namespaces/ml-team-dev/jobs/train-bert" => (StatusCode::OK, fixture("job-train-bert.yaml")),
        "/apis/tiergate.io/v1alpha1/tierpolicies/default" => (StatusCode::OK, serde_json::to_value(policy()).unwrap()),
        "/api/v1/namespaces/ml-team-dev" => (
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-team-dev", "labels": {TIER_LABEL: "bronze"}}}),
        ),
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml-team-dev/localqueues" => list(
            "LocalQueue",
            vec![
                json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "tiergate-bronze", "namespace": "ml-team-dev"}, "spec": {"clusterQueue": "tiergate-bronze"}}),
            ],
        ),
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml-team-dev/workloads" => {
            list("Workload", vec![fixture("workload-pending-quota.yaml")])
        }
        _ => not_found(),
    }
}

#[tokio::test]
async fn why_reads_the_workload_policy_namespace_queues_and_workloads_with_gets_and_lists_only() {
    let (fetched, calls) = with_mock_api(why_server, |client| async move {
        fetch_why_inputs(&client, job_adapter(), "ml-team-dev", "train-bert", "default").await
    })
    .await;
    let fetched = fetched.unwrap();
    assert!(calls.iter().all(|call| call.method == "GET"), "{calls:?}");
    let paths: Vec<&str> = calls.iter().map(|call| call.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/apis/batch/v1/namespaces/ml-team-dev/jobs/train-bert",
            "/apis/tiergate.io/v1alpha1/tierpolicies/default",
            "/api/v1/namespaces/ml-team-dev",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml-team-dev/localqueues",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml-team-dev/workloads",
        ]
    );
    assert_eq!(fetched.local_queues, ["tiergate-bronze"]);
    assert_eq!(fetched.namespace_labels.get(TIER_LABEL).map(String::as_str), Some("bronze"));
    assert_eq!(fetched.workloads[0].metadata.name.as_deref(), Some("job-train-bert-5d3a1"));
    assert!(fetched.policy.is_some());
}

#[tokio::test]
async fn why_on_a_missing_object_names_it_and_the_namespace_flag() {
    let (fetched, _) = with_mock_api(why_server, |client| async move {
        fetch_why_inputs(&client, job_adapter(), "ml-team-dev", "nope", "default").await
    })
    .await;
    let error = fetched.unwrap_err();
    assert_eq!(error.reason(), "object_not_found");
    assert!(error.to_string().contains("Job ml-team-dev/nope") && error.to_string().contains("-n"), "{error}");
}

#[tokio::test]
async fn status_reads_the_policy_and_its_owned_cluster_queues_with_gets_and_lists_only() {
    let responder = |call: &Call| match call.path.as_str() {
        "/apis/tiergate.io/v1alpha1/tierpolicies" => {
            list("TierPolicy", vec![serde_json::to_value(degraded_policy()).unwrap()])
        }
        "/apis/tiergate.io/v1alpha1/tierpolicies/default" => {
            (StatusCode::OK, serde_json::to_value(degraded_policy()).unwrap())
        }
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues" => list("ClusterQueue", vec![fixture("clusterqueue-bronze.yaml")]),
        _ => not_found(),
    };
    let (fetched, calls) =
        with_mock_api(responder, |client| async move { fetch_status_inputs(&client, Some("default"), false).await })
            .await;
    let fetched = fetched.unwrap();
    assert!(calls.iter().all(|call| call.method == "GET"), "{calls:?}");
    assert_eq!(calls.len(), 3);
    assert_eq!(fetched.cluster_queues[0].status.pending_workloads, Some(3));
    assert!(fetched.other_policies.is_empty());
    let (missing, _) =
        with_mock_api(
            not_found_for_all,
            |client| async move { fetch_status_inputs(&client, Some("default"), false).await },
        )
        .await;
    assert!(missing.unwrap_err().to_string().contains("--policy-name"));
}

/// A TierPolicy named `name`, served (its status has `Served=True`) or not (no status).
fn named_policy(name: &str, served: bool) -> Value {
    let mut policy = serde_json::to_value(if served { degraded_policy() } else { policy() }).unwrap();
    policy["metadata"]["name"] = json!(name);
    if !served {
        policy.as_object_mut().unwrap().remove("status");
    }
    policy
}

#[tokio::test]
async fn status_of_a_policy_no_instance_serves_says_so_and_names_the_one_served() {
    let responder = |call: &Call| match call.path.as_str() {
        "/apis/tiergate.io/v1alpha1/tierpolicies" => {
            list("TierPolicy", vec![named_policy("default", true), named_policy("fleet", false)])
        }
        "/apis/tiergate.io/v1alpha1/tierpolicies/fleet" => (StatusCode::OK, named_policy("fleet", false)),
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues" => list("ClusterQueue", vec![]),
        _ => not_found(),
    };
    let (fetched, _) =
        with_mock_api(responder, |client| async move { fetch_status_inputs(&client, Some("fleet"), false).await })
            .await;
    let fetched = fetched.unwrap();
    let answer = build_status_answer(&StatusInputs {
        policy: &fetched.policy,
        other_policies: &fetched.other_policies,
        cluster_queues: &fetched.cluster_queues,
        cohorts: &fetched.cohorts,
        pools: &[],
        local_queues: &[],
        tier: None,
    })
    .unwrap();
    let note = answer.not_served.clone().unwrap();
    assert!(note.starts_with("no tiergate instance serves policy fleet (this one serves default)"), "{note}");
    assert!(
        answer.to_table().contains("NOT SERVED: no tiergate instance serves policy fleet"),
        "{}",
        answer.to_table()
    );
}

#[tokio::test]
async fn status_without_a_policy_name_reads_the_only_policy_and_a_missing_one_names_those_that_exist() {
    let only = |call: &Call| match call.path.as_str() {
        "/apis/tiergate.io/v1alpha1/tierpolicies" => list("TierPolicy", vec![named_policy("spot-mix", false)]),
        "/apis/tiergate.io/v1alpha1/tierpolicies/spot-mix" => (StatusCode::OK, named_policy("spot-mix", false)),
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues" => list("ClusterQueue", vec![]),
        _ => not_found(),
    };
    let (fetched, _) =
        with_mock_api(only, |client| async move { fetch_status_inputs(&client, None, false).await }).await;
    assert_eq!(fetched.unwrap().policy.metadata.name.as_deref(), Some("spot-mix"));
    let several = |call: &Call| match call.path.as_str() {
        "/apis/tiergate.io/v1alpha1/tierpolicies" => {
            list("TierPolicy", vec![named_policy("fleet", false), named_policy("spot-mix", false)])
        }
        _ => not_found(),
    };
    let (missing, _) =
        with_mock_api(several, |client| async move { fetch_status_inputs(&client, None, false).await }).await;
    let error = missing.unwrap_err().to_string();
    assert!(error.contains("TierPolicy default") && error.contains("fleet, spot-mix"), "{error}");
}

fn not_found_for_all(_: &Call) -> (StatusCode, Value) {
    not_found()
}

/// The API server of the recorded Karpenter plane for Job train-bert, admitted by Kueue: its pods, their Events and
/// NodeClaim tiergate-l4-s6lj6 answered by `node_claim`.
fn karpenter_server(node_claim: fn() -> (StatusCode, Value)) -> impl Fn(&Call) -> (StatusCode, Value) {
    move |call: &Call| match (call.path.as_str(), call.query.as_str()) {
        ("/apis/batch/v1/namespaces/ml-team-dev/jobs/train-bert", _) => (StatusCode::OK, live_job()),
        ("/apis/kueue.x-k8s.io/v1beta2/namespaces/ml-team-dev/workloads", _) => {
            list("Workload", vec![fixture("workload-admitted.yaml")])
        }
        ("/api/v1/namespaces/ml-team-dev/pods", _) => (StatusCode::OK, karpenter_fixture("pods-train-bert.yaml")),
        ("/api/v1/namespaces/ml-team-dev/events", query) if query.ends_with("train-bert-0-5cks6") => {
            (StatusCode::OK, karpenter_fixture("events-train-bert-0-nominated.yaml"))
        }
        ("/api/v1/namespaces/ml-team-dev/events", _) => {
            (StatusCode::OK, karpenter_fixture("events-train-bert-1-limits.yaml"))
        }
        ("/apis/karpenter.sh/v1/nodeclaims/tiergate-l4-s6lj6", _) => node_claim(),
        _ => why_server(call),
    }
}

fn launching_claim() -> (StatusCode, Value) {
    (StatusCode::OK, karpenter_fixture("nodeclaim-launching.yaml"))
}

#[tokio::test]
async fn why_reads_an_admitted_jobs_waiting_pods_their_events_and_nominated_node_claims_with_gets_only() {
    let (fetched, calls) = with_mock_api(karpenter_server(launching_claim), |client| async move {
        fetch_why_inputs(&client, job_adapter(), "ml-team-dev", "train-bert", "default").await
    })
    .await;
    let fetched = fetched.unwrap();
    assert!(calls.iter().all(|call| call.method == "GET"), "{calls:?}");
    let reads: Vec<String> = calls
        .iter()
        .skip(5)
        .map(|call| if call.query.is_empty() { call.path.clone() } else { format!("{}?{}", call.path, call.query) })
        .collect();
    assert_eq!(
        reads,
        [
            "/api/v1/namespaces/ml-team-dev/pods?&labelSelector=batch.kubernetes.io%2Fcontroller-uid%3D7c1e4a52-3b8e-4d0a-9f3c-2a1b5c6d7e80",
            "/api/v1/namespaces/ml-team-dev/events?&fieldSelector=involvedObject.kind%3DPod%2CinvolvedObject.name%3Dtrain-bert-0-5cks6",
            "/api/v1/namespaces/ml-team-dev/events?&fieldSelector=involvedObject.kind%3DPod%2CinvolvedObject.name%3Dtrain-bert-1-dsb6t",
            "/apis/karpenter.sh/v1/nodeclaims/tiergate-l4-s6lj6",
        ]
    );
    assert_eq!((fetched.karpenter.pods.len(), fetched.karpenter.events.len()), (2, 2));
    assert_eq!(fetched.karpenter.node_claims[0].metadata.name.as_deref(), Some("tiergate-l4-s6lj6"));
    assert_eq!(fetched.karpenter_note, None);
    let facts = find_karpenter_facts(&fetched.karpenter, &[]).unwrap();
    assert_eq!((facts.state, facts.pod.as_str()), (KarpenterState::NodePoolLimits, "train-bert-1-dsb6t"));
}

#[tokio::test]
async fn without_karpenter_or_the_right_to_read_it_why_says_nothing_about_it_and_a_refusal_is_noted() {
    let fetch = |node_claim: fn() -> (StatusCode, Value)| async move {
        with_mock_api(karpenter_server(node_claim), |client| async move {
            fetch_why_inputs(&client, job_adapter(), "ml-team-dev", "train-bert", "default").await
        })
        .await
        .0
        .unwrap()
    };
    // karpenter.sh/v1 not served: the API server's bare `404 page not found`, not a Status.
    let unserved = fetch(|| (StatusCode::NOT_FOUND, json!("404 page not found"))).await;
    assert_eq!((unserved.karpenter, unserved.karpenter_note), (KarpenterRead::default(), None));
    // The NodeClaim's own NotFound: Karpenter deleted it.
    let gone = fetch(|| {
        let (status, mut body) = not_found();
        body["details"] = json!({"name": "tiergate-l4-s6lj6", "group": "karpenter.sh", "kind": "nodeclaims"});
        (status, body)
    })
    .await;
    assert_eq!(gone.karpenter.gone_node_claims, ["tiergate-l4-s6lj6"]);
    let forbidden = fetch(|| {
        (StatusCode::FORBIDDEN, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": "nodeclaims.karpenter.sh \"tiergate-l4-s6lj6\" is forbidden: User \"dev\" cannot get resource \"nodeclaims\""}))
    })
    .await;
    assert_eq!(forbidden.karpenter, KarpenterRead::default());
    let note = forbidden.karpenter_note.unwrap();
    assert!(
        note.starts_with("failed to read NodeClaim tiergate-l4-s6lj6 (")
            && note.ends_with("that needs get on nodeclaims.karpenter.sh"),
        "{note}"
    );
    // A pending workload's pods are not read at all (the paths of the first read test).
    let (_, calls) = with_mock_api(why_server, |client| async move {
        fetch_why_inputs(&client, job_adapter(), "ml-team-dev", "train-bert", "default").await
    })
    .await;
    assert!(calls.iter().all(|call| !call.path.ends_with("/pods") && !call.path.ends_with("/events")), "{calls:?}");
}

// ----- RBAC -----

#[test]
fn the_documented_cluster_roles_grant_only_get_and_list() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/tiergate/files/live-rbac.yaml");
    let documents: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    let roles: Vec<&Value> = documents.iter().filter(|document| document["kind"] == "ClusterRole").collect();
    let names: Vec<&str> = roles.iter().filter_map(|role| role["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["tiergate-why", "tiergate-why-cluster", "tiergate-status"]);
    for role in &roles {
        for rule in role["rules"].as_array().unwrap() {
            let verbs: Vec<&str> = rule["verbs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            assert!(!verbs.is_empty() && verbs.iter().all(|verb| matches!(*verb, "get" | "list")), "{rule}");
        }
    }
    // What `why` reads for Karpenter: the namespace's pods and Events (a RoleBinding there suffices), and the
    // cluster-scoped NodeClaims (bound cluster-wide with tiergate-why-cluster).
    let grants = |role: &Value, group: &str, resource: &str, verb: &str| {
        role["rules"].as_array().unwrap().iter().any(|rule| {
            let has = |field: &str, value: &str| rule[field].as_array().unwrap().iter().any(|item| item == value);
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    assert!(grants(roles[0], "", "pods", "list") && grants(roles[0], "", "events", "list"));
    assert!(grants(roles[1], "karpenter.sh", "nodeclaims", "get"));
}
