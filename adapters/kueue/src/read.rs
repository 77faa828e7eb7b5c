//! The parts of Kueue's Workload, ClusterQueue and Cohort (`kueue.x-k8s.io/v1beta2`, Kueue v0.19.2) tiergate reads
//! back, including their status, decoded leniently (unknown fields ignored, missing ones empty): for the live
//! answers (`why`, `status`) and the reconciler's requeue of pending workloads; pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// Workload label holding the UID of the job that owns it (Kueue's `constants.JobUIDLabel`).
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

/// Workload condition: quota is reserved in a ClusterQueue.
pub const QUOTA_RESERVED: &str = "QuotaReserved";
/// Workload condition: quota is reserved and every admission check is Ready.
pub const ADMITTED: &str = "Admitted";
/// Workload condition: Kueue took the admission back.
pub const EVICTED: &str = "Evicted";
/// Workload condition: the workload finished.
pub const FINISHED: &str = "Finished";
/// Workload condition: every pod is ready (with `waitForPodsReady`).
pub const PODS_READY: &str = "PodsReady";

/// A Kueue Workload as the answers read it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct KueueWorkload {
    /// Name, namespace, labels and owner references.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec fields read.
    #[serde(default)]
    pub spec: WorkloadSpec,
    /// Kueue's status.
    #[serde(default)]
    pub status: WorkloadStatus,
}

/// `Workload.spec` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// The LocalQueue the workload was submitted to.
    #[serde(default)]
    pub queue_name: Option<String>,
}

/// `Workload.status` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// QuotaReserved, Admitted, Evicted, PodsReady, Finished, ...
    #[serde(default)]
    pub conditions: Vec<KueueCondition>,
    /// Where quota was reserved.
    #[serde(default)]
    pub admission: Option<WorkloadAdmission>,
    /// The state of each admission check (e.g. a ProvisioningRequest).
    #[serde(default)]
    pub admission_checks: Vec<AdmissionCheckState>,
}

/// A status condition (the metav1.Condition fields read).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// Human message.
    #[serde(default)]
    pub message: String,
}

/// `Workload.status.admission`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadAdmission {
    /// ClusterQueue the quota is reserved in.
    #[serde(default)]
    pub cluster_queue: String,
    /// Per pod set: the flavor chosen for each resource.
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
}

/// One pod set's assignment.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct PodSetAssignment {
    /// Pod set name.
    #[serde(default)]
    pub name: String,
    /// Resource name -> ResourceFlavor.
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
    /// Resource name -> the quantity Kueue charged for the pod set (DRA devices appear under the resource Kueue's
    /// `deviceClassMappings` map their DeviceClass to).
    #[serde(default, rename = "resourceUsage")]
    pub resource_usage: BTreeMap<String, serde_json::Value>,
    /// Where Kueue's topology-aware scheduling put the pods (compressed v1beta2 form, see
    /// [`tiergate_kueue::decode_topology_assignment`]).
    #[serde(default, rename = "topologyAssignment")]
    pub topology_assignment: Option<serde_json::Value>,
}

/// `Workload.status.admissionChecks[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionCheckState {
    /// AdmissionCheck name.
    pub name: String,
    /// `Pending`, `Ready`, `Retry` or `Rejected`.
    pub state: String,
    /// The check controller's message.
    #[serde(default)]
    pub message: String,
}

impl KueueWorkload {
    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&KueueCondition> {
        self.status.conditions.iter().find(|condition| condition.type_ == type_)
    }

    /// Whether the condition of type `type_` is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|condition| condition.status == "True")
    }

    /// Whether this Workload belongs to the object with `uid`: it is owned by it, or carries its UID in
    /// Kueue's job-uid label.
    pub fn belongs_to(&self, uid: &str) -> bool {
        let owned = self.metadata.owner_references.iter().flatten().any(|owner| owner.uid == uid);
        let labelled = self
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(JOB_UID_LABEL))
            .is_some_and(|value| value == uid);
        !uid.is_empty() && (owned || labelled)
    }
}

/// A Kueue ClusterQueue as `status` reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct KueueClusterQueue {
    /// Name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The quotas.
    #[serde(default)]
    pub spec: ClusterQueueSpec,
    /// Usage and counts.
    #[serde(default)]
    pub status: ClusterQueueStatus,
}

/// `ClusterQueue.spec` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    /// Cohort (needed to borrow).
    #[serde(default)]
    pub cohort_name: Option<String>,
    /// Resource groups with per-flavor quotas.
    #[serde(default)]
    pub resource_groups: Vec<ResourceGroup>,
}

/// A resource group.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ResourceGroup {
    /// Flavors with quotas.
    #[serde(default)]
    pub flavors: Vec<FlavorQuotas>,
}

/// One flavor's quotas.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct FlavorQuotas {
    /// ResourceFlavor name.
    pub name: String,
    /// Per resource.
    #[serde(default)]
    pub resources: Vec<ResourceQuota>,
}

/// One resource's quota.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    /// Resource name.
    pub name: String,
    /// Nominal quota, as written.
    #[serde(default)]
    pub nominal_quota: Option<serde_json::Value>,
    /// Borrowing limit, as written.
    #[serde(default)]
    pub borrowing_limit: Option<serde_json::Value>,
    /// Lending limit, as written (a tier's floor is nominal minus this).
    #[serde(default)]
    pub lending_limit: Option<serde_json::Value>,
}

/// `ClusterQueue.status` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueStatus {
    /// Admitted workloads' usage per flavor.
    #[serde(default)]
    pub flavors_usage: Vec<FlavorUsage>,
    /// Quota-reserving workloads' usage per flavor.
    #[serde(default)]
    pub flavors_reservation: Vec<FlavorUsage>,
    /// Workloads waiting for quota.
    #[serde(default)]
    pub pending_workloads: Option<i64>,
    /// Workloads holding a quota reservation.
    #[serde(default)]
    pub reserving_workloads: Option<i64>,
    /// Admitted workloads.
    #[serde(default)]
    pub admitted_workloads: Option<i64>,
    /// Active and others.
    #[serde(default)]
    pub conditions: Vec<KueueCondition>,
    /// Kueue's fair-sharing state (present when fair sharing is enabled).
    #[serde(default)]
    pub fair_sharing: Option<FairSharingStatus>,
}

/// A Kueue LocalQueue as `status` reads it: one tenant of a tier.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct KueueLocalQueue {
    /// Name and namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its ClusterQueue and fair-sharing weight.
    #[serde(default)]
    pub spec: LocalQueueSpecRead,
    /// Counts, usage and Kueue's record of past usage.
    #[serde(default)]
    pub status: LocalQueueStatusRead,
}

/// `LocalQueue.spec` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpecRead {
    /// The ClusterQueue it submits to.
    #[serde(default)]
    pub cluster_queue: String,
    /// The tenant's weight in admission fair sharing.
    #[serde(default)]
    pub fair_sharing: Option<WeightRead>,
}

/// A `fairSharing` with a weight.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct WeightRead {
    /// The weight, as written.
    #[serde(default)]
    pub weight: Option<serde_json::Value>,
}

/// `LocalQueue.status` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueStatusRead {
    /// Workloads waiting for quota.
    #[serde(default)]
    pub pending_workloads: Option<i64>,
    /// Admitted workloads.
    #[serde(default)]
    pub admitted_workloads: Option<i64>,
    /// Admitted workloads' usage per flavor.
    #[serde(default)]
    pub flavors_usage: Vec<FlavorUsage>,
    /// Kueue's fair-sharing state of the queue.
    #[serde(default)]
    pub fair_sharing: Option<LocalQueueFairSharing>,
}

/// `LocalQueue.status.fairSharing`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueFairSharing {
    /// Admission fair sharing's record of the queue's past usage.
    #[serde(default)]
    pub admission_fair_sharing_status: Option<AdmissionFairSharingStatus>,
}

/// The decayed past usage Kueue orders a sharing ClusterQueue's tenants by.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionFairSharingStatus {
    /// Per resource, as written.
    #[serde(default)]
    pub consumed_resources: std::collections::BTreeMap<String, serde_json::Value>,
    /// When Kueue last updated it.
    #[serde(default)]
    pub last_update: Option<String>,
}

/// A Kueue Cohort as `status` reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct KueueCohort {
    /// Name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The weighted share.
    #[serde(default)]
    pub status: CohortStatusRead,
}

/// `Cohort.status` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CohortStatusRead {
    /// Kueue's fair-sharing state (present when fair sharing is enabled).
    #[serde(default)]
    pub fair_sharing: Option<FairSharingStatus>,
}

/// `status.fairSharing` of a ClusterQueue or Cohort.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FairSharingStatus {
    /// Usage above nominal over what the tree can lend, per mille, divided by the weight (0: not borrowing).
    #[serde(default)]
    pub weighted_share: Option<i64>,
}

/// One flavor's usage.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct FlavorUsage {
    /// ResourceFlavor name.
    pub name: String,
    /// Per resource.
    #[serde(default)]
    pub resources: Vec<ResourceUsage>,
}

/// One resource's usage.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ResourceUsage {
    /// Resource name.
    pub name: String,
    /// Total in use (int-or-string as written).
    #[serde(default)]
    pub total: Option<serde_json::Value>,
    /// Borrowed from the cohort.
    #[serde(default)]
    pub borrowed: Option<serde_json::Value>,
}

/// A quantity as Kubernetes writes it (`"4"`, `4`, `"16Gi"`), or `""` when absent.
pub fn quantity_text(value: Option<&serde_json::Value>) -> String {
    match value {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(serde_json::Value::Number(number)) => number.to_string(),
        _ => String::new(),
    }
}
