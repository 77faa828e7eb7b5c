//! The `TierPolicy` custom resource (`tiergate.io/v1alpha1`, cluster-scoped): its types, defaults and the
//! selectors/tolerations every other module derives from a GPU class; no I/O.
//!
//! The checks a policy must pass live in [`crate::validation`]. The cohort tree (issue 28) is in [`cohorts`].

pub mod budget;
pub mod cohorts;
pub mod karpenter;
pub mod quota_windows;
pub mod run_time;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::labels::LabelLookup;

pub use self::budget::{Accounting, AccountingPeriod, Budget, UsageBucket, UsageStatus, UsageTotals, WindowUsage};
pub use self::cohorts::{CohortNode, Reclaim, TierSharing};
pub use self::karpenter::{KarpenterPoolTemplate, NodeClassRef, PoolRequirement};
pub use self::quota_windows::{OnceWindow, QuotaWindow, RecurringWindow, TierQuotaWindowStatus, Weekday, WindowQuota};
pub use self::run_time::{MaxRunTime, RunTimeLimits};

/// Namespace label that names a namespace's tier when the policy does not say otherwise.
pub const DEFAULT_TIER_LABEL: &str = "tiergate.io/tier";
/// Extended resource a GPU class is requested by when the policy does not say otherwise.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// NVIDIA MIG slices (`nvidia.com/mig-1g.5gb`, ...): GPUs of a class whose resource is the default one.
pub const DEFAULT_MIG_RESOURCE_PATTERN: &str = "nvidia.com/mig-*";
/// Namespaces tiergate never acts in, whatever the policy says.
pub const ALWAYS_EXCLUDED_NAMESPACES: &[&str] = &["kube-system"];

/// Declares tenant tiers, GPU classes, placement strategies and priority buckets; tiergate turns it into Kueue
/// ResourceFlavors, ClusterQueues, LocalQueues and WorkloadPriorityClasses and mutates workloads to match.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    group = "tiergate.io",
    version = "v1alpha1",
    kind = "TierPolicy",
    plural = "tierpolicies",
    shortname = "tp",
    status = "TierPolicyStatus",
    printcolumn = r#"{"name":"Tiers","type":"integer","jsonPath":".status.tierCount"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TierPolicySpec {
    /// Namespace label whose value names the namespace's tier (KubeNexus users: `tenant.kubenexus.io/tier`).
    #[serde(default = "default_tier_label")]
    pub tier_label: String,
    /// GPU classes: how nodes of each class are labelled and tainted, and which resource requests them.
    #[schemars(length(min = 1))]
    pub gpu_classes: Vec<GpuClass>,
    /// Tenant tiers, each bound to one GPU class (or an ordered fallback list when asked for).
    #[schemars(length(min = 1))]
    pub tiers: Vec<Tier>,
    /// Named base/weight placement strategies (the semantics of SmartScheduler's and custom-kube-scheduler-webhook's strategies), referenced by tiers or workloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement_strategies: Vec<PlacementStrategy>,
    /// Score buckets: a score >= `minScore` maps to the bucket's WorkloadPriorityClass.
    #[serde(default = "default_priority_buckets")]
    pub priority_buckets: Vec<PriorityBucket>,
    /// Namespaces tiergate never mutates or queues (kube-system and the daemon's own are always excluded).
    /// custom-kube-scheduler-webhook's `BLOCKLISTED_NAMESPACE_LIST` maps here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_namespaces: Vec<String>,
    /// How the webhook treats user choices and its own failures.
    #[serde(default)]
    pub admission: AdmissionSettings,
    /// The optional external scheduler agent (`POST /v1/score`).
    #[serde(default)]
    pub scoring: ScoringSettings,
    /// Worker clusters tiers may dispatch to through Kueue MultiKueue (one MultiKueueCluster each); empty: every
    /// tier runs in this cluster. See docs/guides/fleet.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<WorkerCluster>,
    /// The organisation's cohort tree (one Kueue Cohort each); tiers join it with `cohort`. Empty: a tier's
    /// `cohort` is a flat, implicit Kueue cohort. See docs/guides/tier-hierarchy.md "Cohort tree".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cohorts: Vec<CohortNode>,
    /// How the tenants of a tier with `tenantFairSharing: true` share it: Kueue's admission fair sharing (one
    /// `admissionFairSharing` block in Kueue's Configuration for the whole cluster) and each tenant's weight.
    /// See docs/guides/fair-sharing.md "Fair sharing among a tier's tenants".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_fair_sharing: Option<TenantFairSharing>,
    /// The period tiergate counts each tier's and tenant's resource use over (and tier budgets run over):
    /// `Month` in `UTC` unless set. See docs/guides/gpu-budgets.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounting: Option<Accounting>,
}

/// Kueue's admission fair sharing among the LocalQueues (tenants) of a ClusterQueue (tier): pending workloads are
/// ordered by their LocalQueue's decayed past usage divided by its weight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantFairSharing {
    /// How long until past usage counts half (Kueue `usageHalfLifeTime`, a Go duration such as `168h`); not zero.
    #[serde(default = "default_usage_half_life")]
    pub usage_half_life: String,
    /// How often Kueue samples usage (Kueue `usageSamplingInterval`, a Go duration such as `5m`); not zero.
    #[serde(default = "default_usage_sampling_interval")]
    pub usage_sampling_interval: String,
    /// How much one unit of each resource counts towards usage (Kueue `resourceWeights`: per GPU, per CPU core,
    /// per byte of memory), over tiergate's defaults: every GPU resource of the policy's classes 1, `cpu` 0.01,
    /// `memory` and `ephemeral-storage` 0 (Kueue weighs a resource it is given no weight for 1 per unit).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_weights: BTreeMap<String, f64>,
    /// A namespace label whose value is the tenant's weight (a positive decimal such as `2` or `0.5`). Tenants must
    /// not be able to edit their namespace's labels (docs/admission.md). Weighs before `weights`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_label: Option<String>,
    /// Tenants' weights by namespace labels, the first matching entry winning (list the most specific first);
    /// a namespace matching none, without `weightLabel`, weighs 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<TenantWeight>,
}

/// The weight of the tenants whose namespaces carry `namespaceLabels`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantWeight {
    /// Labels a namespace must all carry (with these values).
    pub namespace_labels: BTreeMap<String, String>,
    /// The weight: a positive decimal (`2`, `0.5`); a tenant of weight 2 gets about twice the admissions of one of
    /// weight 1 while both have work queued.
    pub weight: String,
}

impl Default for TenantFairSharing {
    fn default() -> Self {
        Self {
            usage_half_life: default_usage_half_life(),
            usage_sampling_interval: default_usage_sampling_interval(),
            resource_weights: BTreeMap::new(),
            weight_label: None,
            weights: Vec::new(),
        }
    }
}

fn default_usage_half_life() -> String {
    "168h".to_owned()
}

fn default_usage_sampling_interval() -> String {
    "5m".to_owned()
}

/// A worker cluster, in the shape of a Kueue v0.19.2 MultiKueueCluster: a name and where its kubeconfig is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerCluster {
    /// DNS label, e.g. `us-east`; also the MultiKueueCluster name, referenced by tiers' `dispatch.clusters`.
    pub name: String,
    /// How to reach the worker (MultiKueueCluster `spec.clusterSource`).
    pub cluster_source: ClusterSource,
}

/// MultiKueueCluster `spec.clusterSource`: tiergate supports the kubeconfig form.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSource {
    /// The worker's kubeconfig.
    pub kube_config: KubeConfigSource,
}

/// MultiKueueCluster `spec.clusterSource.kubeConfig`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigSource {
    /// Only `Secret`: a Secret in Kueue's namespace whose `kubeconfig` key holds the worker's kubeconfig (the
    /// tiergate daemon reads the same Secret to reconcile the worker; a `Path` on Kueue's disk it cannot read).
    #[serde(default)]
    pub location_type: KubeConfigLocationType,
    /// The Secret's name (DNS subdomain, at most 256 characters as Kueue allows).
    pub location: String,
}

/// Where a kubeconfig is; Kueue v0.19.2 also knows `Path`, which tiergate refuses (see [`KubeConfigSource`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum KubeConfigLocationType {
    /// A Secret in Kueue's namespace, key `kubeconfig`.
    #[default]
    Secret,
    /// A file on the Kueue controller's disk (refused by validation).
    Path,
}

/// Which workers run a tier's workloads: the tier's ClusterQueue gets a MultiKueue admission check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dispatch {
    /// Names of `spec.clusters` entries, most preferred first (MultiKueueConfig `clusters`: Kueue's Incremental
    /// dispatcher nominates them in this order). The dispatcher itself is Kueue-wide in v0.19.2 (its
    /// Configuration's `multiKueue.dispatcherName`), so the policy does not choose it per tier.
    #[schemars(length(min = 1, max = 20))]
    pub clusters: Vec<String>,
}

/// A class of GPU nodes, e.g. `h100`: the node labels that identify it and the taints its nodes carry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuClass {
    /// DNS label, e.g. `h100`; also the ResourceFlavor name.
    pub name: String,
    /// Labels every node of this class carries, e.g. `gpu.nvidia.com/class: h100`. May be empty only for a class
    /// with `dra`.
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    /// Taints the nodes of this class carry (copied to the ResourceFlavor's `nodeTaints`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_taints: Vec<Taint>,
    /// Tolerations pods need for this class; when empty, one toleration per node taint is derived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// The extended resource that requests a GPU of this class (the whole-GPU resource quotas and the scorer
    /// count). Superseded by `resourceNames`; when that is empty the class's GPUs are this name, plus
    /// `nvidia.com/mig-*` when it is `nvidia.com/gpu`.
    #[serde(default = "default_gpu_resource")]
    pub resource_name: String,
    /// Every extended resource that counts as a GPU of this class: exact names or a prefix ending in `*`
    /// (`nvidia.com/mig-*`). The first exact name is the class's whole-GPU resource. Empty: see `resourceName`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// GPU memory per device in GiB, used by the built-in scorer to judge fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<u32>,
    /// Topology levels of this class's nodes, broadest first (e.g. block, rack, hostname): the class's flavors get
    /// a Kueue Topology of these node labels, and tiers on the class may state a `topology` rule. See
    /// docs/guides/topology.md "Topology".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub topology_levels: Vec<TopologyLevel>,
    /// How the class's devices are found through Dynamic Resource Allocation: tiergate renders one DeviceClass
    /// (`<class>.tiergate.io`) for them and holds a tier's claims to its classes' DeviceClasses. Unset: the class
    /// is reached through its extended resource and node labels only. docs/guides/dra.md "DRA".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dra: Option<DraDevices>,
    /// How the class's nodes come: `Autoscaled` (a cluster-autoscaler node group or Karpenter NodePool that may
    /// be empty until a workload needs it) or `Fixed` (nodes that exist whether or not a workload waits). Unset:
    /// not stated; `tiergate check` then reads it from the node groups it is given. A tier's `provisioning` on an
    /// `Autoscaled` class must use a class that scales up (docs/guides/cluster-autoscaler.md "Autoscaled nodepools").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<NodeCapacity>,
    /// A Karpenter NodePool tiergate renders for this class's nodes: the template holds what only the platform
    /// knows (node class, instance requirements); tiergate adds the class's labels and taints, a GPU limit equal
    /// to what its tiers' quota can ever admit, and a disruption budget that never interrupts admitted work.
    /// Unset: no NodePool is rendered (the platform's own pools are compared by `tiergate check`).
    /// docs/guides/karpenter.md "Karpenter NodePools".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub karpenter: Option<KarpenterPoolTemplate>,
}

/// How a GPU class's nodes come: `Autoscaled` (a node group or NodePool that grows for waiting workloads and may be
/// empty) or `Fixed` (nodes that are there anyway). Unset: not stated, and `tiergate check` judges by the node
/// groups it reads. A tier's ProvisioningRequests of class `check-capacity.autoscaling.x-k8s.io` are refused on
/// an `Autoscaled` class, where they would wait forever while the pool is empty.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum NodeCapacity {
    /// An autoscaled pool (cluster-autoscaler node group, Karpenter NodePool): it grows for a workload that waits
    /// and may be empty.
    Autoscaled,
    /// Nodes that exist whether or not a workload waits for them (reserved or on-premises capacity).
    Fixed,
}

/// The devices of a GPU class as a DRA driver publishes them in ResourceSlices.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DraDevices {
    /// The DRA driver publishing the devices, e.g. `gpu.nvidia.com` (a ResourceSlice's `spec.driver`).
    pub driver: String,
    /// A CEL expression over a device (`device.attributes`, `device.capacity`, `device.driver`) that is true for
    /// this class's devices, e.g. `device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")`.
    /// ANDed with the driver match in the DeviceClass. Unset: every device of the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The driver's own DeviceClasses (installed with it) that reach every device of the driver. A claim in a
    /// tiered namespace that names one is given the tier's class or refused (`admission.draGenericClasses`).
    /// Unset: the class named like the driver (NVIDIA's driver installs `gpu.nvidia.com` and `mig.nvidia.com`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generic_device_classes: Vec<String>,
}

/// A tenant tier: which namespaces belong to it (by the tier label's value), its GPU class and its quota.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tier {
    /// DNS label and the tier label's value, e.g. `gold`; also the ClusterQueue name suffix.
    pub name: String,
    /// The tier's GPU class (one nodepool per tier).
    pub gpu_class: String,
    /// Further GPU classes, in order, tried by Kueue after `gpuClass`. Empty unless a tier really needs it:
    /// a fallback means the autoscaler may grow more than one nodepool for the tier.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_gpu_classes: Vec<String>,
    /// Quota per resource name (the GPU resource is required; `cpu` and `memory` are usual).
    pub quotas: BTreeMap<String, ResourceQuota>,
    /// Times the tier's quota differs from `quotas`: recurring (days and times in a time zone) or once (two
    /// instants). When several are in force, a `once` window wins over a `recurring` one, then the later entry. See
    /// docs/guides/quota-windows.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quota_windows: Vec<QuotaWindow>,
    /// Kueue cohort the tier's ClusterQueue joins (required for borrowing): a `spec.cohorts` entry, or any name
    /// when `spec.cohorts` is empty (a flat cohort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Floor, fair-sharing weight and reclaim policy within the cohort tree (needs `cohort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<TierSharing>,
    /// Kueue preemption settings of the tier's ClusterQueue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<Preemption>,
    /// Name of the LocalQueue created in each of the tier's namespaces (default `tiergate-<tier>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_queue_name: Option<String>,
    /// Placement strategy (by name) whose rules become extra flavors of this tier's ClusterQueue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// WorkloadPriorityClass (a bucket name) used when no score is available (default: the lowest bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_priority_class: Option<String>,
    /// The highest WorkloadPriorityClass (a bucket name) workloads of this tier may carry (default: the top
    /// bucket). Higher scores and user labels are clamped to it (or refused, `spec.admission.priorityAboveCeiling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_class: Option<String>,
    /// How long the tier's workloads may run once Kueue admits them, held on Kueue's
    /// `kueue.x-k8s.io/max-exec-time-seconds` label (Kueue then deactivates them): `default` where a workload sets
    /// none, `ceiling` the most it may ask for. Absent: no limit. See docs/guides/run-time-limits.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_time: Option<MaxRunTime>,
    /// The most the tier may use per accounting period (`spec.accounting`), or in any rolling `window`, per
    /// resource as the time one unit may run (`nvidia.com/gpu: 2000h`). Used up: the tier's ClusterQueue is held
    /// (`stopPolicy: Hold`), admitted work runs on and new work waits until the period turns (or enough use leaves
    /// the window) or the limit is raised. Absent: no budget (use is still counted). See docs/guides/gpu-budgets.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Gate admission on a cluster-autoscaler ProvisioningRequest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<ProvisioningSpec>,
    // Quota shares (issue 19): the tier's quota is a cap its flavors share; see docs/guides/placement.md "Quota".
    /// Whole GPUs (of the primary class's resource) of the tier's quota given to one of its flavors, keyed by GPU
    /// class name (`gpuClass` or a `fallbackGpuClasses` entry) or by rule name of its `placement` strategy. A
    /// fallback class without a share gets 0 (it runs on quota borrowed within the cohort); the rest of the
    /// quota is split over the rules without a share by base and weight (or goes to `gpuClass` when the tier
    /// has no placement). Every other resource follows the GPU shares in proportion. The shares add up to at
    /// most the tier's GPU quota.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quota_shares: BTreeMap<String, u32>,
    /// Run the tier's workloads on worker clusters through Kueue MultiKueue; absent: they run here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<Dispatch>,
    /// Where the pods of the tier's multi-pod GPU workloads must (or should) run together, by a level of its GPU
    /// classes' `topologyLevels`; absent: Kueue places them anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyRule>,
    /// Share the tier fairly among its tenants (namespaces): Kueue admits the pending workload of the tenant with
    /// the least decayed past usage per weight first, instead of by priority and creation time alone. Off by
    /// default (FIFO within a priority): it needs `admissionFairSharing` in Kueue's Configuration, which
    /// `tiergate render --kueue-config` prints (`spec.tenantFairSharing`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tenant_fair_sharing: bool,
}

/// One topology level of a GPU class: a short name people use and the node label that holds it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// DNS label a tier's `topology` rule names, e.g. `rack`.
    pub name: String,
    /// The node label whose value names the node's domain at this level, e.g. `topology.example.com/rack`
    /// (`kubernetes.io/hostname` only as the last level).
    pub node_label: String,
}

/// A tier's placement rule for multi-pod workloads: exactly one of `required` or `preferred`, naming a level.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyRule {
    /// Each pod set must fit in one domain of this level (Kueue `podset-required-topology`), or the workload waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    /// Each pod set should fit in one domain of this level, else Kueue tries broader ones
    /// (`podset-preferred-topology`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<String>,
    /// The rule applies to workloads of at least this many pods (all pod sets together, as Kueue counts them).
    #[serde(default = "default_topology_min_pods")]
    #[schemars(range(min = 2))]
    pub min_pods: u32,
}

/// Quota of one resource in a tier's ClusterQueue.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    /// Kueue `nominalQuota`.
    pub nominal: Quantity,
    /// Kueue `borrowingLimit` (needs a cohort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Quantity>,
    /// Kueue `lendingLimit` (needs a cohort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

/// Kueue ClusterQueue preemption, with Kueue's own enum values.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    /// `Never` | `LowerPriority` | `LowerOrNewerEqualPriority` | `Any`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_within_cohort: Option<String>,
    /// `Never` | `LowerPriority` | `LowerOrNewerEqualPriority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_cluster_queue: Option<String>,
    /// `Never` | `LowerPriority`, with an optional maximum priority threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

/// Kueue `preemption.borrowWithinCohort`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BorrowWithinCohort {
    /// `Never` | `LowerPriority`.
    pub policy: String,
    /// Only workloads at or below this priority may be preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

/// A cluster-autoscaler ProvisioningRequest admission check for a tier.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningSpec {
    /// e.g. `check-capacity.autoscaling.x-k8s.io` or `queued-provisioning.gke.io`.
    pub provisioning_class_name: String,
    /// Passed to the ProvisioningRequest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    /// Resources the check covers (default: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_resources: Vec<String>,
    /// How Kueue retries a workload whose ProvisioningRequest failed or whose booking expired; absent: Kueue's
    /// defaults (3 retries, 60 s doubling up to 1800 s), written out in the ProvisioningRequestConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_strategy: Option<ProvisioningRetry>,
}

/// Kueue's `ProvisioningRequestConfig.spec.retryStrategy`: after a failed ProvisioningRequest the workload is
/// requeued after about `backoffBaseSeconds * 2^(n-1)` (at most `backoffMaxSeconds`), and deactivated
/// (`spec.active: false`) after `backoffLimitCount` retries.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRetry {
    /// Retries before the workload is deactivated; 0 switches retrying off.
    #[serde(default = "default_backoff_limit_count")]
    #[schemars(range(min = 0))]
    pub backoff_limit_count: i32,
    /// The first retry's delay in seconds; each further one doubles it.
    #[serde(default = "default_backoff_base_seconds")]
    #[schemars(range(min = 1))]
    pub backoff_base_seconds: i32,
    /// The longest delay between retries, in seconds.
    #[serde(default = "default_backoff_max_seconds")]
    #[schemars(range(min = 1))]
    pub backoff_max_seconds: i32,
}

impl Default for ProvisioningRetry {
    fn default() -> Self {
        Self {
            backoff_limit_count: default_backoff_limit_count(),
            backoff_base_seconds: default_backoff_base_seconds(),
            backoff_max_seconds: default_backoff_max_seconds(),
        }
    }
}

/// Kueue v0.19.2's default `backoffLimitCount`.
fn default_backoff_limit_count() -> i32 {
    3
}

/// Kueue v0.19.2's default `backoffBaseSeconds`.
fn default_backoff_base_seconds() -> i32 {
    60
}

/// Kueue v0.19.2's default `backoffMaxSeconds`.
fn default_backoff_max_seconds() -> i32 {
    1800
}

/// A named base/weight placement strategy: the first `base` pods go to the first rule, the rest are split by
/// weight across all rules.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStrategy {
    /// DNS label, referenced by `tiergate.io/placement: NAME` or a tier's `placement`.
    pub name: String,
    /// Ordered rules; only the first may carry `base`.
    #[schemars(length(min = 1))]
    pub rules: Vec<PlacementRule>,
}

/// One node type of a placement strategy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRule {
    /// DNS label naming the rule (and its ResourceFlavor suffix), e.g. `ondemand`.
    pub name: String,
    /// Pods placed here before the weights apply (first rule only).
    #[serde(default)]
    pub base: u32,
    /// Relative share of the pods beyond `base`.
    pub weight: u32,
    /// Node labels of this node type.
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations pods need on this node type (e.g. a spot taint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// A score bucket: scores >= `minScore` (and below the next bucket) map to WorkloadPriorityClass `name`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PriorityBucket {
    /// Lowest score (0..=100) in this bucket.
    #[schemars(range(min = 0, max = 100))]
    pub min_score: i32,
    /// WorkloadPriorityClass name.
    pub name: String,
    /// WorkloadPriorityClass value (higher is admitted and kept first).
    pub value: i32,
    /// Shown in the WorkloadPriorityClass description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// What the webhook does with a user's own GPU-class choice outside the tier.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ForeignClassAction {
    /// Deny, naming the tier, the allowed classes and the fix.
    #[default]
    Deny,
    /// Allow and record the override.
    Allow,
}

/// What tiergate does with a pod, or a workload's pod template, in a tiered namespace that names its node in
/// `spec.nodeName`: such a pod skips the scheduler, and with it the GPU classes' taints.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NodeNameAction {
    /// Refuse it at CREATE, in the webhook and in the in-server gate alike: the gate cannot read a node's labels,
    /// so with the webhook down it could not tell a GPU node from a CPU node. Exempt users and groups, and the
    /// kubelets' mirror pods (`system:node:` users), are not refused.
    #[default]
    Deny,
    /// The webhook looks up the node's class (another tier's class is refused, the tier's own confined); with the
    /// webhook down, such a pod that asks for no GPU is stored (docs/admission.md, "Limits and known gaps").
    CheckNodeClass,
}

/// What the webhook does with a `kueue.x-k8s.io/priority-class` label above the tier's ceiling (or naming no
/// priority bucket).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CeilingAction {
    /// Replace it with the tier's ceiling, with a warning.
    #[default]
    Clamp,
    /// Deny, naming the ceiling and the fix.
    Deny,
}

/// What the webhook does with a DRA claim in a tiered namespace that names a DeviceClass tiergate does not know.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DraClaimAction {
    /// Deny: tiergate cannot tell which devices such a DeviceClass reaches, and Kueue cannot charge it without a
    /// `deviceClassMappings` entry.
    #[default]
    Deny,
    /// Admit, the pod confined to the tier's GPU classes by node like any other template that can reach GPU
    /// nodes (weaker: a class known only by DRA has no nodes to confine to).
    Confine,
}

/// What the webhook does with a claim that names a DRA driver's generic DeviceClass (`dra.genericDeviceClasses`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DraGenericClassAction {
    /// Name the tier's DeviceClass of that driver instead (the claim's own selectors still apply, ANDed), with a
    /// warning and the reason in the `tiergate.io/device-class-retargeted` annotation.
    #[default]
    Retarget,
    /// Refuse, naming the tier's DeviceClass to use.
    Deny,
}

/// What the webhook does with GPU pods of a kind neither tiergate nor Kueue knows (a Pod whose controller is such a
/// kind, or such a kind embedded in an AppWrapper): they would otherwise run outside every tier quota.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UnknownKindAction {
    /// Refuse, naming the kind and the fix (default: works whether or not Kueue's pod integration is enabled).
    #[default]
    Deny,
    /// Queue each pod through Kueue's pod integration: the tier's queue label, Kueue's managed label and finalizer
    /// and its `kueue.x-k8s.io/admission` scheduling gate. Needs the `pod` integration enabled in Kueue, or the
    /// pods stay gated forever.
    QueuePods,
}

/// What the webhook answers when tiergate itself fails while deciding.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailureMode {
    /// Admit unchanged with a warning.
    #[default]
    Open,
    /// Deny with the error.
    Closed,
}

/// Webhook behaviour.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSettings {
    /// A GPU-class nodeSelector the user set outside the tier's classes: `Deny` (default) or `Allow`.
    #[serde(default)]
    pub foreign_gpu_class: ForeignClassAction,
    /// GPU pods of a kind neither tiergate nor Kueue knows: `Deny` (default) or `QueuePods`.
    #[serde(default)]
    pub unknown_gpu_kinds: UnknownKindAction,
    /// Namespaces whose workloads may pick any GPU class (KubeNexus "admin override").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admin_namespaces: Vec<String>,
    /// Users who may pick any GPU class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admin_users: Vec<String>,
    /// Groups whose members may pick any GPU class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admin_groups: Vec<String>,
    /// A pod or pod template in a tiered namespace that names its node in `spec.nodeName`: `Deny` (default) or
    /// `CheckNodeClass`.
    #[serde(default)]
    pub pods_naming_nodes: NodeNameAction,
    /// `Open` (default): an internal error admits unchanged with a warning. `Closed`: it denies.
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// A priority-class label above the tier's `maxPriorityClass` (or naming no bucket): `Clamp` (default) or
    /// `Deny`.
    #[serde(default)]
    pub priority_above_ceiling: CeilingAction,
    /// DRA claims naming a DeviceClass tiergate does not know (neither a DRA class's, a driver's generic one nor a
    /// shared one): `Deny` (default) or `Confine` (admitted, the pod confined to the tier's classes by node).
    #[serde(default)]
    pub dra_claims: DraClaimAction,
    /// A claim naming a DRA driver's generic DeviceClass: `Retarget` (default) to the tier's class, or `Deny`.
    #[serde(default)]
    pub dra_generic_classes: DraGenericClassAction,
    /// DeviceClasses of other devices (NICs, FPGAs) that a claim of any tier may name; never a GPU class's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_device_classes: Vec<String>,
    /// On a worker cluster: the users MultiKueue writes as here (the identity of the kubeconfig in the management
    /// cluster's Secret, e.g. `system:serviceaccount:kueue-system:multikueue`). A Job they create carrying Kueue's
    /// `kueue.x-k8s.io/multikueue-origin` label is a copy MultiKueue dispatched and passes unchanged; the label
    /// from anyone else is ignored. Empty: no copy is trusted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub multi_kueue_users: Vec<String>,
    /// The users that write workloads from templates tiergate already checked: the control plane's controllers,
    /// Kueue and the workload operators. Only they may create a workload's children (a CronJob's Jobs, a JobSet's
    /// Jobs) without the tier's queue label, and only their owner references are believed. Name exact users, never
    /// a service account of a namespace a tenant controls or could create. Unset: kube-controller-manager's
    /// identities, and each of Kueue, JobSet, LeaderWorkerSet, AppWrapper and Kubeflow Trainer at its upstream
    /// install namespace only while a ClusterRoleBinding (made no earlier than that namespace) binds its service
    /// account. Pods are checked for GPU reach whoever writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_controllers: Option<Vec<String>>,
}

/// The control plane's controllers, trusted by default wherever tiergate runs: kube-controller-manager (its own
/// identity, and the per-controller service accounts it uses with `--use-service-account-credentials`). A tenant
/// can make neither: the user is the control plane's certificate, and kube-system always exists.
pub const CONTROL_PLANE_CONTROLLERS: &[&str] = &[
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:cronjob-controller",
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
];

impl AdmissionSettings {
    /// The trusted controllers in force: the policy's `trustedControllers`, or the control plane's. The daemon
    /// and the offline commands serve a policy that names none with the installed operators written in
    /// ([`crate::trust::with_trusted_controllers`]).
    pub fn trusted_controllers(&self) -> Vec<&str> {
        match &self.trusted_controllers {
            Some(users) => users.iter().map(String::as_str).collect(),
            None => CONTROL_PLANE_CONTROLLERS.to_vec(),
        }
    }

    /// Whether `user` is a trusted controller.
    pub fn trusts_controller(&self, user: &str) -> bool {
        match &self.trusted_controllers {
            Some(users) => users.iter().any(|trusted| trusted == user),
            None => CONTROL_PLANE_CONTROLLERS.contains(&user),
        }
    }
}

/// The external scheduler agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScoringSettings {
    /// Score GPU jobs at all (with the agent at `url`, or the built-in scorer without one).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Base URL of the agent, e.g. `http://scheduler-agent.ml:8080`; `POST {url}/v1/score`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Per-call timeout in milliseconds (keep well under the webhook's 5 s timeout).
    #[serde(default = "default_scoring_timeout_ms")]
    #[schemars(range(min = 1, max = 4999))]
    pub timeout_ms: u64,
    /// Consecutive failed agent calls that open the circuit breaker (then calls are skipped for the cool-down).
    #[serde(default = "default_breaker_failure_threshold")]
    pub breaker_failure_threshold: u32,
    /// Milliseconds the open breaker skips the agent before one probe call is let through.
    #[serde(default = "default_breaker_cooldown_ms")]
    pub breaker_cooldown_ms: u64,
    /// Milliseconds an agent answer is reused for an identical request (0 turns the cache off).
    #[serde(default = "default_scoring_cache_ttl_ms")]
    pub cache_ttl_ms: u64,
    /// Agent calls in flight at once; a request beyond this is admitted at once with the tier's default priority.
    #[serde(default = "default_scoring_max_concurrent_calls")]
    pub max_concurrent_calls: u32,
}

impl Default for ScoringSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            url: None,
            timeout_ms: default_scoring_timeout_ms(),
            breaker_failure_threshold: default_breaker_failure_threshold(),
            breaker_cooldown_ms: default_breaker_cooldown_ms(),
            cache_ttl_ms: default_scoring_cache_ttl_ms(),
            max_concurrent_calls: default_scoring_max_concurrent_calls(),
        }
    }
}

/// Observed state, written by the daemon.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierPolicyStatus {
    /// `Ready` and `Degraded`, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of tiers in the applied policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_count: Option<i32>,
    /// Owned objects per kind, as last applied.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub object_counts: BTreeMap<String, i32>,
    /// The last error, if the last reconcile failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// LocalQueues being replaced after their namespace changed tier.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_migrations: Vec<QueueMigration>,
    /// Flavors a ClusterQueue keeps, frozen at what its workloads hold, after a policy edit moved its tier off them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavor_migrations: Vec<FlavorMigration>,
    /// Per tier with quota windows: the window in force and when the quota next changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quota_windows: Vec<TierQuotaWindowStatus>,
    /// Resource-seconds counted per tier and tenant namespace, this period and the last, and over the rolling
    /// windows of tier budgets, as of the last checkpoint (written by the leading replica with a field manager of its
    /// own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageStatus>,
}

/// A flavor draining from a ClusterQueue: kept until the workloads admitted on it finish, then removed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorMigration {
    /// The ClusterQueue.
    pub cluster_queue: String,
    /// The flavor the policy no longer gives it.
    pub flavor: String,
    /// What its workloads still hold, per resource.
    pub held: BTreeMap<String, String>,
}

/// A namespace moving tier: the old LocalQueue is stopped and deleted once it holds no workloads.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueMigration {
    /// The namespace.
    pub namespace: String,
    /// The LocalQueue being drained.
    pub from_queue: String,
    /// Its replacement.
    pub to_queue: String,
    /// Workloads still pending or admitted in the old queue.
    pub remaining_workloads: i32,
    /// Pending workloads the daemon could not move to the new queue by relabelling the object Kueue made them
    /// from, each with why and what to do (at most 8, then a count); resubmit them. Empty: every pending
    /// workload was moved (running ones finish in the old queue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_requeued: Vec<String>,
}

/// The DeviceClasses a tier's claims may name, and the in-server gate's
/// `deviceClasses`: each of the tier's classes' (`tier_classes`) and the shared ones.
pub fn allowed_device_classes(policy: &TierPolicySpec, tier_classes: &[&GpuClass]) -> Vec<String> {
    tier_classes
        .iter()
        .filter_map(|class| class.device_class_name())
        .chain(policy.admission.shared_device_classes.iter().cloned())
        .collect()
}

/// Suffix of the DeviceClasses tiergate renders (`h100` -> `h100.tiergate.io`).
pub const DEVICE_CLASS_SUFFIX: &str = ".tiergate.io";

/// The DeviceClass name of the GPU class `class` (whether or not it has `dra`).
pub fn device_class_name(class: &str) -> String {
    format!("{class}{DEVICE_CLASS_SUFFIX}")
}

fn default_true() -> bool {
    true
}
fn default_tier_label() -> String {
    DEFAULT_TIER_LABEL.to_owned()
}
fn default_gpu_resource() -> String {
    DEFAULT_GPU_RESOURCE.to_owned()
}
fn default_topology_min_pods() -> u32 {
    2
}
fn default_scoring_timeout_ms() -> u64 {
    250
}
fn default_breaker_failure_threshold() -> u32 {
    5
}
fn default_breaker_cooldown_ms() -> u64 {
    30_000
}
fn default_scoring_cache_ttl_ms() -> u64 {
    5_000
}
fn default_scoring_max_concurrent_calls() -> u32 {
    32
}

/// The GPU Scheduler webhook's buckets: gpu-ultra >= 90, gpu-high >= 70, gpu-medium >= 50, gpu-default >= 0.
pub fn default_priority_buckets() -> Vec<PriorityBucket> {
    [("gpu-ultra", 90, 900), ("gpu-high", 70, 700), ("gpu-medium", 50, 500), ("gpu-default", 0, 100)]
        .into_iter()
        .map(|(name, min_score, value)| PriorityBucket { min_score, name: name.to_owned(), value, description: None })
        .collect()
}

impl GpuClass {
    /// The DeviceClass tiergate renders for this class's DRA devices, `<class>.tiergate.io` (`None` without
    /// `dra`). Stable: tenants' ResourceClaimTemplates name it.
    pub fn device_class_name(&self) -> Option<String> {
        self.dra.as_ref().map(|_| device_class_name(&self.name))
    }

    /// The driver's generic DeviceClasses a claim may name instead of this class's (empty without `dra`).
    pub fn generic_device_classes(&self) -> Vec<&str> {
        match &self.dra {
            None => Vec::new(),
            Some(dra) if dra.generic_device_classes.is_empty() => vec![dra.driver.as_str()],
            Some(dra) => dra.generic_device_classes.iter().map(String::as_str).collect(),
        }
    }

    /// Whether `labels` (a node's labels or a nodeSelector) carry every node label of this class; never for a
    /// class without labels.
    pub fn is_selected_by(&self, labels: &impl LabelLookup) -> bool {
        !self.node_labels.is_empty()
            && self.node_labels.iter().all(|(key, value)| labels.label(key) == Some(value.as_str()))
    }

    /// The resource names and patterns that count as this class's GPUs (`resourceNames`, else `resourceName`
    /// plus `nvidia.com/mig-*` when it is `nvidia.com/gpu`).
    pub fn resource_patterns(&self) -> Vec<&str> {
        if !self.resource_names.is_empty() {
            return self.resource_names.iter().map(String::as_str).collect();
        }
        let mut patterns = vec![self.resource_name.as_str()];
        if self.resource_name == DEFAULT_GPU_RESOURCE {
            patterns.push(DEFAULT_MIG_RESOURCE_PATTERN);
        }
        patterns
    }

    /// Whether the extended resource `name` counts as a GPU of this class.
    pub fn counts_resource(&self, name: &str) -> bool {
        self.resource_patterns().into_iter().any(|pattern| resource_matches(pattern, name))
    }

    /// The whole-GPU resource: the first exact name of `resourceNames`, else `resourceName`.
    pub fn primary_resource(&self) -> &str {
        self.resource_names.iter().find(|name| !name.ends_with('*')).map_or(self.resource_name.as_str(), String::as_str)
    }

    /// Tolerations pods of this class need: the declared ones, or one per node taint.
    pub fn pod_tolerations(&self) -> Vec<Toleration> {
        if !self.tolerations.is_empty() {
            return self.tolerations.clone();
        }
        self.node_taints
            .iter()
            .map(|taint| Toleration {
                key: Some(taint.key.clone()),
                operator: Some(if taint.value.is_some() { "Equal" } else { "Exists" }.to_owned()),
                value: taint.value.clone(),
                effect: Some(taint.effect.clone()),
                toleration_seconds: None,
            })
            .collect()
    }
}

/// Whether resource `name` matches `pattern`: equal, or starting with the part before a trailing `*`.
pub fn resource_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

impl Tier {
    /// The LocalQueue name in this tier's namespaces.
    pub fn local_queue(&self) -> String {
        self.local_queue_name.clone().unwrap_or_else(|| format!("tiergate-{}", self.name))
    }

    /// Whether the tier's workloads run on worker `cluster`.
    pub fn dispatches_to(&self, cluster: &str) -> bool {
        self.dispatch.as_ref().is_some_and(|dispatch| dispatch.clusters.iter().any(|name| name == cluster))
    }

    /// The tier's GPU classes in Kueue's flavor order: the primary, then the fallbacks.
    pub fn gpu_class_names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.gpu_class.as_str()).chain(self.fallback_gpu_classes.iter().map(String::as_str))
    }

    /// The tier's run-time limits in seconds; `None` without `maxRunTime` (or with one validation refuses).
    pub fn run_time_limits(&self) -> Option<RunTimeLimits> {
        self.max_run_time.as_ref().and_then(MaxRunTime::limits)
    }

    /// Whether the tier's ProvisioningRequest check runs in the management cluster: it has `provisioning` and its
    /// workloads run there (a dispatching tier's check runs on its workers, where its nodes are).
    pub fn provisions_on_management(&self) -> bool {
        self.provisioning.is_some() && self.dispatch.is_none()
    }
}

impl TierPolicySpec {
    /// The GPU class called `name`.
    pub fn gpu_class(&self, name: &str) -> Option<&GpuClass> {
        self.gpu_classes.iter().find(|class| class.name == name)
    }

    /// The tier called `name`.
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|tier| tier.name == name)
    }

    /// The worker cluster called `name`.
    pub fn cluster(&self, name: &str) -> Option<&WorkerCluster> {
        self.clusters.iter().find(|cluster| cluster.name == name)
    }

    /// The tiers that dispatch to worker `cluster`, in tier order.
    pub fn tiers_dispatched_to<'a>(&'a self, cluster: &'a str) -> impl Iterator<Item = &'a Tier> + 'a {
        self.tiers.iter().filter(move |tier| tier.dispatches_to(cluster))
    }

    /// The placement strategy called `name`.
    pub fn placement_strategy(&self, name: &str) -> Option<&PlacementStrategy> {
        self.placement_strategies.iter().find(|strategy| strategy.name == name)
    }

    /// Whether tiergate must leave `namespace` alone (`own_namespace` is the daemon's).
    pub fn is_excluded(&self, namespace: &str, own_namespace: Option<&str>) -> bool {
        ALWAYS_EXCLUDED_NAMESPACES.contains(&namespace)
            || own_namespace == Some(namespace)
            || self.excluded_namespaces.iter().any(|excluded| excluded == namespace)
    }

    /// The tier of a namespace with these labels, if its tier label names a known tier.
    pub fn tier_of(&self, namespace_labels: &impl LabelLookup) -> Option<&Tier> {
        namespace_labels.label(&self.tier_label).and_then(|name| self.tier(name))
    }
}
