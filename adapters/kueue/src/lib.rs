//! Typed Kueue `kueue.x-k8s.io/v1beta2` objects tiergate generates, built from Kueue v0.19.2's CRDs; no I/O.
//!
//! Only the fields tiergate sets are modelled; every optional field is skipped when `None`, so a server-side
//! apply never claims (or nulls) a field tiergate does not own. Field names follow the v1beta2 schema, which
//! differs from v1beta1: a ClusterQueue joins a cohort with `cohortName` (not `cohort`) and lists admission
//! checks only through `admissionChecksStrategy` (there is no plain `admissionChecks` list any more).
//!
//! [`read`] holds the other direction: the parts of Kueue's objects tiergate reads back (Workloads, queue status).
//!
//! The allowed values of Kueue's string enums that tiergate passes through from a TierPolicy are listed here
//! (`*_VALUES`), so policy validation and the generated objects agree on one list.

pub mod read;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use serde::{Deserialize, Serialize};

/// Kueue's API group.
pub const GROUP: &str = "kueue.x-k8s.io";
/// The Kueue API version tiergate writes.
pub const API_VERSION: &str = "kueue.x-k8s.io/v1beta2";
/// Label naming the LocalQueue a workload is submitted to.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Label naming the WorkloadPriorityClass of a workload.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Controller name of Kueue's built-in ProvisioningRequest admission check.
pub const PROVISIONING_REQUEST_CONTROLLER: &str = "kueue.x-k8s.io/provisioning-request";
/// Kind of the parameters object of a ProvisioningRequest admission check.
pub const PROVISIONING_REQUEST_CONFIG_KIND: &str = "ProvisioningRequestConfig";
/// Controller name of Kueue's MultiKueue admission check (`kueue.MultiKueueControllerName`).
pub const MULTIKUEUE_CONTROLLER: &str = "kueue.x-k8s.io/multikueue";
/// Kind of the parameters object of a MultiKueue admission check.
pub const MULTIKUEUE_CONFIG_KIND: &str = "MultiKueueConfig";
/// Label MultiKueue puts on every object it copies into a worker (`kueue.MultiKueueOriginLabel`); its value is the
/// manager's `multiKueue.origin` (default `multikueue`).
pub const MULTIKUEUE_ORIGIN_LABEL: &str = "kueue.x-k8s.io/multikueue-origin";
/// Label MultiKueue puts on a Job it copies into a worker, naming the Workload it created there first
/// (`constants.PrebuiltWorkloadLabel`).
pub const PREBUILT_WORKLOAD_LABEL: &str = "kueue.x-k8s.io/prebuilt-workload-name";
/// Most clusters one MultiKueueConfig lists.
pub const MAX_MULTIKUEUE_CONFIG_CLUSTERS: usize = 20;

/// `preemption.reclaimWithinCohort` values.
pub const RECLAIM_WITHIN_COHORT_VALUES: &[&str] = &["Never", "LowerPriority", "Any"];
/// `preemption.withinClusterQueue` values.
pub const WITHIN_CLUSTER_QUEUE_VALUES: &[&str] = &["Never", "LowerPriority", "LowerOrNewerEqualPriority"];
/// `preemption.borrowWithinCohort.policy` values.
pub const BORROW_WITHIN_COHORT_POLICY_VALUES: &[&str] = &["Never", "LowerPriority"];
/// Taint effects a ResourceFlavor accepts in `nodeTaints` and `tolerations`.
pub const TAINT_EFFECT_VALUES: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// Toleration operators a ResourceFlavor accepts.
pub const TOLERATION_OPERATOR_VALUES: &[&str] = &["Equal", "Exists"];
/// Most `nodeLabels`, `nodeTaints` or `tolerations` one ResourceFlavor may carry.
pub const MAX_FLAVOR_ENTRIES: usize = 8;
/// Most covered resources in one resource group, and most flavors in one resource group.
pub const MAX_RESOURCE_GROUP_ENTRIES: usize = 64;
/// Most resource groups of one ClusterQueue or Cohort (tiergate writes one).
pub const MAX_RESOURCE_GROUPS: usize = 16;
/// Most `parameters` of a ProvisioningRequestConfig, and the longest value.
pub const MAX_PROVISIONING_PARAMETERS: usize = 100;
/// Longest value of a ProvisioningRequestConfig parameter.
pub const MAX_PROVISIONING_PARAMETER_LENGTH: usize = 255;

/// Pod-template annotation: every pod of the pod set must run in one domain of this level (a node label).
pub const PODSET_REQUIRED_TOPOLOGY_ANNOTATION: &str = "kueue.x-k8s.io/podset-required-topology";
/// Pod-template annotation: the pod set should run in one domain of this level, else in broader ones.
pub const PODSET_PREFERRED_TOPOLOGY_ANNOTATION: &str = "kueue.x-k8s.io/podset-preferred-topology";
/// Pod-template annotation (`"true"`): the pod set has no topology requirement.
pub const PODSET_UNCONSTRAINED_TOPOLOGY_ANNOTATION: &str = "kueue.x-k8s.io/podset-unconstrained-topology";
/// Pod-template annotation: each slice of `podset-slice-size` pods must run in one domain of this level.
pub const PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: &str = "kueue.x-k8s.io/podset-slice-required-topology";
/// Pod-template annotation: the pods per slice (an integer from 1 to the pod set's count).
pub const PODSET_SLICE_SIZE_ANNOTATION: &str = "kueue.x-k8s.io/podset-slice-size";
/// The topology annotations a pod template may carry (v0.19.2 `apis/kueue/v1beta2/topology_types.go`).
pub const TOPOLOGY_ANNOTATIONS: [&str; 5] = [
    PODSET_REQUIRED_TOPOLOGY_ANNOTATION,
    PODSET_PREFERRED_TOPOLOGY_ANNOTATION,
    PODSET_UNCONSTRAINED_TOPOLOGY_ANNOTATION,
    PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    PODSET_SLICE_SIZE_ANNOTATION,
];
/// Most levels one Topology holds.
pub const MAX_TOPOLOGY_LEVELS: usize = 16;
/// The node label Kueue allows only as a Topology's last level.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// `Topology` spec: the node-label levels of a topology-aware ResourceFlavor, broadest first (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "Topology",
    plural = "topologies",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    /// 1..=16 unique levels; `kubernetes.io/hostname` only last. Immutable unless hostname is last before and after.
    pub levels: Vec<TopologyLevel>,
}

/// One level of a Topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// The node label naming the node's domain at this level.
    pub node_label: String,
}

/// `ResourceFlavor` spec: the nodes a flavor stands for (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ResourceFlavor",
    plural = "resourceflavors",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    /// Labels of the nodes of this flavor; Kueue injects them into admitted pods' nodeSelector (max 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_labels: Option<BTreeMap<String, String>>,
    /// Taints of the nodes of this flavor; a workload must tolerate them to be admitted here (max 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_taints: Option<Vec<Taint>>,
    /// Tolerations Kueue adds to admitted pods (max 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// The Topology of a topology-aware flavor (needs `nodeLabels`; immutable once set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_name: Option<String>,
}

/// `ClusterQueue` spec (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ClusterQueue",
    plural = "clusterqueues",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    /// Cohort this ClusterQueue borrows and lends within (v1beta2 name; v1beta1 called it `cohort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort_name: Option<String>,
    /// Namespaces allowed to submit to this queue; `None` admits no namespace, `{}` admits all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Resource groups: covered resources and, per flavor, one quota per covered resource in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_groups: Vec<ResourceGroup>,
    /// Preemption settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<ClusterQueuePreemption>,
    /// Admission checks (v1beta2 has no plain `admissionChecks` list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission_checks_strategy: Option<AdmissionChecksStrategy>,
    /// `None` (default), `Hold` or `HoldAndDrain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<StopPolicy>,
    /// Fair-sharing weight within the cohort (used when Kueue's fair sharing is enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
    /// Admission fair sharing among the queue's LocalQueues (tenants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission_scope: Option<AdmissionScope>,
}

/// `admissionScope` of a ClusterQueue: how it orders its pending workloads among its LocalQueues.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionScope {
    /// `UsageBasedAdmissionFairSharing` or `NoAdmissionFairSharing`.
    pub admission_mode: String,
}

/// `fairSharing` of a ClusterQueue, Cohort or LocalQueue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FairSharing {
    /// Weight against siblings (Kueue default 1); a share of borrowed quota is divided by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Quantity>,
}

/// `Cohort` spec (cluster-scoped): a node of a cohort tree, with an optional quota pool of its own.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "Cohort",
    plural = "cohorts",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct CohortSpec {
    /// The parent cohort; absent at a tree's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_name: Option<String>,
    /// Quota the cohort owns (at most 16 groups); limits only with a parent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_groups: Vec<ResourceGroup>,
    /// Fair-sharing weight against the parent's other children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
}

/// A ClusterQueue resource group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    /// Resources this group covers, e.g. `[cpu, memory, nvidia.com/gpu]` (1..=64).
    pub covered_resources: Vec<String>,
    /// Flavors in the order Kueue tries them (1..=64).
    pub flavors: Vec<FlavorQuotas>,
}

/// The quotas of one flavor in a resource group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    /// ResourceFlavor name.
    pub name: String,
    /// One entry per covered resource, in `coveredResources` order.
    pub resources: Vec<ResourceQuota>,
}

/// The quota of one resource in one flavor.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    /// Resource name, e.g. `nvidia.com/gpu`.
    pub name: String,
    /// Quota this ClusterQueue owns.
    pub nominal_quota: Quantity,
    /// How much more it may borrow from its cohort (needs `cohortName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Quantity>,
    /// How much of its nominal quota it may lend to its cohort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

/// ClusterQueue `preemption`; the string values are Kueue's enums (see the `*_VALUES` constants).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueuePreemption {
    /// One of [`RECLAIM_WITHIN_COHORT_VALUES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_within_cohort: Option<String>,
    /// One of [`WITHIN_CLUSTER_QUEUE_VALUES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_cluster_queue: Option<String>,
    /// Preemption while borrowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

/// ClusterQueue `preemption.borrowWithinCohort`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BorrowWithinCohort {
    /// One of [`BORROW_WITHIN_COHORT_POLICY_VALUES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Only workloads at or below this priority may be preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

/// ClusterQueue `admissionChecksStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionChecksStrategy {
    /// Admission checks and the flavors they apply to.
    pub admission_checks: Vec<AdmissionCheckStrategyRule>,
}

/// One admission check of a ClusterQueue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckStrategyRule {
    /// AdmissionCheck name.
    pub name: String,
    /// Flavors the check applies to; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_flavors: Vec<String>,
}

/// `stopPolicy` of a ClusterQueue or LocalQueue.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StopPolicy {
    /// Admit workloads (Kueue's default).
    #[default]
    None,
    /// Admit nothing new; admitted workloads run to completion.
    Hold,
    /// Admit nothing new and evict admitted workloads.
    HoldAndDrain,
}

/// `LocalQueue` spec (namespaced): the queue tenants name in `kueue.x-k8s.io/queue-name`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "LocalQueue",
    plural = "localqueues",
    namespaced,
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    /// The ClusterQueue this queue submits to (immutable once created).
    pub cluster_queue: String,
    /// `Hold` or `HoldAndDrain` stops the queue (used while a namespace moves tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<StopPolicy>,
    /// The tenant's weight in its ClusterQueue's admission fair sharing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
}

/// `WorkloadPriorityClass` (cluster-scoped); it has no `spec`, its fields sit at the top level.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "WorkloadPriorityClass",
    plural = "workloadpriorityclasses",
    no_spec,
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPriorityClassFields {
    /// Priority of workloads labelled with this class.
    pub value: i32,
    /// Free text (max 2048 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `AdmissionCheck` spec (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "AdmissionCheck",
    plural = "admissionchecks",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckSpec {
    /// Controller that processes the check, e.g. [`PROVISIONING_REQUEST_CONTROLLER`] (immutable).
    pub controller_name: String,
    /// The check's configuration object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<AdmissionCheckParametersReference>,
}

/// Reference to an AdmissionCheck's configuration object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckParametersReference {
    /// API group of the object, e.g. `kueue.x-k8s.io`.
    pub api_group: String,
    /// Kind of the object, e.g. `ProvisioningRequestConfig`.
    pub kind: String,
    /// Name of the object.
    pub name: String,
}

/// `ProvisioningRequestConfig` spec (cluster-scoped): how Kueue asks cluster-autoscaler for capacity.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ProvisioningRequestConfig",
    plural = "provisioningrequestconfigs",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestConfigSpec {
    /// e.g. `check-capacity.autoscaling.x-k8s.io`.
    pub provisioning_class_name: String,
    /// Passed to each ProvisioningRequest (max 100, values max 255 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<BTreeMap<String, String>>,
    /// Resources the ProvisioningRequest covers; empty means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_resources: Option<Vec<String>>,
    /// How a workload whose ProvisioningRequest failed is retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_strategy: Option<ProvisioningRequestRetryStrategy>,
}

/// `ProvisioningRequestConfig.spec.retryStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestRetryStrategy {
    /// Requeues before the workload is deactivated (0: none).
    pub backoff_limit_count: i32,
    /// The first requeue's delay in seconds (doubled each time).
    pub backoff_base_seconds: i32,
    /// The longest requeue delay in seconds.
    pub backoff_max_seconds: i32,
}

/// `MultiKueueCluster` spec (cluster-scoped): how the manager reaches one worker.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "MultiKueueCluster",
    plural = "multikueueclusters",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct MultiKueueClusterSpec {
    /// Exactly one of `kubeConfig` or `clusterProfileRef` (tiergate writes `kubeConfig`).
    pub cluster_source: MultiKueueClusterSource,
}

/// MultiKueueCluster `spec.clusterSource`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MultiKueueClusterSource {
    /// Where the worker's kubeconfig is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<KubeConfig>,
}

/// MultiKueueCluster `spec.clusterSource.kubeConfig`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfig {
    /// `Secret` (a Secret in Kueue's namespace, key `kubeconfig`) or `Path`.
    pub location_type: String,
    /// The Secret's name (or the path), 1..=256 characters.
    pub location: String,
}

/// `MultiKueueConfig` spec (cluster-scoped): the workers a MultiKueue admission check dispatches to.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "MultiKueueConfig",
    plural = "multikueueconfigs",
    schema = "disabled",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", serde = "::serde", serde_json = "::serde_json")
)]
#[serde(rename_all = "camelCase")]
pub struct MultiKueueConfigSpec {
    /// MultiKueueCluster names, unique, 1..=20, most preferred first (the Incremental dispatcher's order).
    pub clusters: Vec<String>,
}

/// One domain of a Workload's `status.admission.podSetAssignments[].topologyAssignment`: its value at each of the
/// assignment's `levels` and the pods placed there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedDomain {
    /// The domain's value per level (the assignment's `levels`, broadest first).
    pub values: Vec<String>,
    /// Pods Kueue placed in the domain.
    pub pods: u64,
}

/// The domains of a v1beta2 `topologyAssignment` (`levels` and compressed `slices`: per slice `domainCount`, per
/// level a `universal` value or `individual` `prefix` + `roots[i]` + `suffix`, and `podCounts` `universal` or
/// `individual`), with the assignment's levels. Values that are not there decode as empty strings.
pub fn decode_topology_assignment(assignment: &serde_json::Value) -> (Vec<String>, Vec<AssignedDomain>) {
    use serde_json::Value;
    let levels: Vec<String> = assignment
        .get("levels")
        .and_then(Value::as_array)
        .map(|levels| levels.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut domains = Vec::new();
    for slice in assignment.get("slices").and_then(Value::as_array).into_iter().flatten() {
        let count = slice.get("domainCount").and_then(Value::as_u64).unwrap_or(0);
        let per_level: Vec<&Value> = slice
            .get("valuesPerLevel")
            .and_then(Value::as_array)
            .map(|values| values.iter().collect())
            .unwrap_or_default();
        let pods = slice.get("podCounts").unwrap_or(&Value::Null);
        for index in 0..count {
            let position = usize::try_from(index).unwrap_or(usize::MAX);
            let values = per_level
                .iter()
                .map(|level| match level.get("universal").and_then(Value::as_str) {
                    Some(universal) => universal.to_owned(),
                    None => {
                        let individual = level.get("individual").unwrap_or(&Value::Null);
                        let root = individual
                            .get("roots")
                            .and_then(Value::as_array)
                            .and_then(|roots| roots.get(position))
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        format!("{}{root}{}", text(individual, "prefix"), text(individual, "suffix"))
                    }
                })
                .collect();
            let pod_count = match pods.get("universal").and_then(Value::as_u64) {
                Some(universal) => universal,
                None => pods
                    .get("individual")
                    .and_then(Value::as_array)
                    .and_then(|counts| counts.get(position))
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            };
            domains.push(AssignedDomain { values, pods: pod_count });
        }
    }
    (levels, domains)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::Resource;
    use serde_json::json;

    #[test]
    fn cluster_queue_serializes_v1beta2_field_names_and_skips_unset_fields() {
        let queue = ClusterQueue::new(
            "tiergate-gold",
            ClusterQueueSpec { cohort_name: Some("gpu".into()), ..ClusterQueueSpec::default() },
        );
        let value = serde_json::to_value(&queue).unwrap();
        assert_eq!(value["apiVersion"], API_VERSION);
        assert_eq!(value["kind"], "ClusterQueue");
        assert_eq!(value["spec"], json!({"cohortName": "gpu"}));
    }

    #[test]
    fn cohort_serializes_parent_name_and_weight_and_skips_unset_fields() {
        let spec = CohortSpec {
            parent_name: Some("org".into()),
            fair_sharing: Some(FairSharing { weight: Some(Quantity("2".into())) }),
            ..CohortSpec::default()
        };
        let value = serde_json::to_value(Cohort::new("research", spec)).unwrap();
        assert_eq!(value["apiVersion"], API_VERSION);
        assert_eq!(value["kind"], "Cohort");
        assert_eq!(value["spec"], json!({"parentName": "org", "fairSharing": {"weight": "2"}}));
    }

    #[test]
    fn workload_priority_class_has_value_at_top_level() {
        let class =
            WorkloadPriorityClass::new("gpu-high", WorkloadPriorityClassFields { value: 700, description: None });
        let value = serde_json::to_value(&class).unwrap();
        assert_eq!(value["value"], 700);
        assert!(value.get("spec").is_none(), "{value}");
    }

    #[test]
    fn local_queue_is_namespaced_and_others_are_not() {
        use kube_core::{ClusterResourceScope, NamespaceResourceScope};
        fn scope_of<K: Resource>() -> &'static str {
            std::any::type_name::<K::Scope>()
        }
        assert_eq!(scope_of::<LocalQueue>(), std::any::type_name::<NamespaceResourceScope>());
        assert_eq!(scope_of::<ClusterQueue>(), std::any::type_name::<ClusterResourceScope>());
        assert_eq!(scope_of::<WorkloadPriorityClass>(), std::any::type_name::<ClusterResourceScope>());
        assert_eq!(scope_of::<Cohort>(), std::any::type_name::<ClusterResourceScope>());
    }

    #[test]
    fn stop_policy_uses_kueue_spelling() {
        let spec = LocalQueueSpec {
            cluster_queue: "q".into(),
            stop_policy: Some(StopPolicy::HoldAndDrain),
            fair_sharing: None,
        };
        assert_eq!(serde_json::to_value(&spec).unwrap(), json!({"clusterQueue": "q", "stopPolicy": "HoldAndDrain"}));
    }

    #[test]
    fn a_compressed_topology_assignment_decodes_into_its_domains() {
        let assignment = json!({
            "levels": ["kubernetes.io/hostname"],
            "slices": [
                {"domainCount": 2, "valuesPerLevel": [{"individual": {"prefix": "node-", "roots": ["a", "b"]}}],
                 "podCounts": {"individual": [3, 1]}},
                {"domainCount": 1, "valuesPerLevel": [{"universal": "node-c"}], "podCounts": {"universal": 2}},
            ],
        });
        let (levels, domains) = decode_topology_assignment(&assignment);
        assert_eq!(levels, ["kubernetes.io/hostname"]);
        let found: Vec<(String, u64)> =
            domains.into_iter().map(|domain| (domain.values.join("/"), domain.pods)).collect();
        assert_eq!(found, [("node-a".to_owned(), 3), ("node-b".to_owned(), 1), ("node-c".to_owned(), 2)]);
    }
}
