//! The kinds tiergate owns: the Kueue kinds (kueue.x-k8s.io/v1beta2) and the in-server gate's admission policies
//! (admissionregistration.k8s.io/v1), their API resources, scope, apply order and the ownership labels that select
//! them for pruning; no I/O.

use std::collections::BTreeMap;

use kube::core::{ApiResource, DynamicObject, GroupVersionKind, ResourceExt};

/// Kueue's API group.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";
/// The Kueue API version tiergate writes (Kueue >= v0.15).
pub const KUEUE_VERSION: &str = "v1beta2";
/// The API group of the in-server gate's policies.
pub const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";
/// The version of the in-server gate's policies (ValidatingAdmissionPolicy is GA since Kubernetes 1.30).
pub const ADMISSION_VERSION: &str = "v1";
/// The group of tiergate's own kinds.
pub const TIERGATE_GROUP: &str = "tiergate.io";
/// The version of tiergate's own kinds.
pub const TIERGATE_VERSION: &str = "v1alpha1";
/// The oldest Kueue release that serves `kueue.x-k8s.io/v1beta2`.
pub const MIN_KUEUE_RELEASE: &str = "v0.15";
/// The API group of DRA's DeviceClass.
pub const RESOURCE_GROUP: &str = "resource.k8s.io";
/// The version of DeviceClass tiergate writes (GA since Kubernetes 1.34).
pub const RESOURCE_VERSION: &str = "v1";
/// Karpenter's API group (NodePools of GPU classes with a `karpenter` template).
pub const KARPENTER_GROUP: &str = tiergate_karpenter::GROUP;
/// The NodePool version tiergate writes.
pub const KARPENTER_VERSION: &str = tiergate_karpenter::VERSION;
/// The single server-side-apply field manager of every tiergate write.
pub const FIELD_MANAGER: &str = "tiergate";
/// Label marking an object as written by tiergate.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on tiergate's objects.
pub const MANAGED_BY_VALUE: &str = "tiergate";
/// Label naming the TierPolicy an object belongs to.
pub const POLICY_LABEL: &str = "tiergate.io/policy";
/// Label holding a stable hash of the body tiergate last applied (zero-write steady state). A label, not an
/// annotation, so cached objects need no annotation map at all (memory with 10,000 LocalQueues).
pub const APPLIED_HASH_LABEL: &str = "tiergate.io/applied-hash";

/// A Kueue kind tiergate creates, in apply order (dependencies first). The in-server gate's policies come last:
/// nothing refers to them, and each takes the API server seconds to compile, so tenants' LocalQueues are not kept
/// waiting behind them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KueueKind {
    /// `Topology`, one per distinct topology level list of the GPU classes (cluster-scoped).
    Topology,
    /// DRA's `DeviceClass`, one per GPU class with `dra` (`resource.k8s.io/v1`, cluster-scoped).
    DeviceClass,
    /// `ResourceFlavor`, one per GPU class or placement rule (cluster-scoped).
    ResourceFlavor,
    /// Karpenter's `NodePool`, one per GPU class with a `karpenter` template (`karpenter.sh/v1`, cluster-scoped).
    NodePool,
    /// `WorkloadPriorityClass`, one per priority bucket (cluster-scoped).
    WorkloadPriorityClass,
    /// `ProvisioningRequestConfig`, one per tier with provisioning (cluster-scoped).
    ProvisioningRequestConfig,
    /// `MultiKueueCluster`, one per worker cluster of the policy (cluster-scoped).
    MultiKueueCluster,
    /// `MultiKueueConfig`, one per distinct worker list of the dispatching tiers (cluster-scoped).
    MultiKueueConfig,
    /// `AdmissionCheck`, one per tier with provisioning or dispatch (cluster-scoped).
    AdmissionCheck,
    /// `Cohort`, one per `spec.cohorts` entry, parents first (cluster-scoped).
    Cohort,
    /// `ClusterQueue`, one per tier (cluster-scoped).
    ClusterQueue,
    /// `LocalQueue`, one per tiered namespace (namespaced).
    LocalQueue,
    /// tiergate's `TierGateParameters`, the in-server gate's parameters, one per tier (cluster-scoped).
    TierGateParameters,
    /// `ValidatingAdmissionPolicy` of the in-server gate (cluster-scoped).
    ValidatingAdmissionPolicy,
    /// `ValidatingAdmissionPolicyBinding` of the in-server gate, one per tier (cluster-scoped).
    ValidatingAdmissionPolicyBinding,
    /// `MutatingAdmissionPolicy` of the in-server gate, one per tier where served (cluster-scoped).
    MutatingAdmissionPolicy,
    /// `MutatingAdmissionPolicyBinding` of the in-server gate, one per tier where served (cluster-scoped).
    MutatingAdmissionPolicyBinding,
}

impl KueueKind {
    /// Every kind, in apply order; prune runs in the reverse order.
    pub const ALL: [Self; 17] = [
        Self::Topology,
        Self::DeviceClass,
        Self::ResourceFlavor,
        Self::NodePool,
        Self::WorkloadPriorityClass,
        Self::ProvisioningRequestConfig,
        Self::MultiKueueCluster,
        Self::MultiKueueConfig,
        Self::AdmissionCheck,
        Self::Cohort,
        Self::ClusterQueue,
        Self::LocalQueue,
        Self::TierGateParameters,
        Self::ValidatingAdmissionPolicy,
        Self::ValidatingAdmissionPolicyBinding,
        Self::MutatingAdmissionPolicy,
        Self::MutatingAdmissionPolicyBinding,
    ];

    /// The kind's name, e.g. `ClusterQueue`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Topology => "Topology",
            Self::DeviceClass => "DeviceClass",
            Self::ResourceFlavor => "ResourceFlavor",
            Self::NodePool => "NodePool",
            Self::WorkloadPriorityClass => "WorkloadPriorityClass",
            Self::ProvisioningRequestConfig => "ProvisioningRequestConfig",
            Self::MultiKueueCluster => "MultiKueueCluster",
            Self::MultiKueueConfig => "MultiKueueConfig",
            Self::AdmissionCheck => "AdmissionCheck",
            Self::Cohort => "Cohort",
            Self::ClusterQueue => "ClusterQueue",
            Self::TierGateParameters => "TierGateParameters",
            Self::ValidatingAdmissionPolicy => "ValidatingAdmissionPolicy",
            Self::ValidatingAdmissionPolicyBinding => "ValidatingAdmissionPolicyBinding",
            Self::MutatingAdmissionPolicy => "MutatingAdmissionPolicy",
            Self::MutatingAdmissionPolicyBinding => "MutatingAdmissionPolicyBinding",
            Self::LocalQueue => "LocalQueue",
        }
    }

    /// The lower-case plural used in API paths and RBAC rules.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Topology => "topologies",
            Self::DeviceClass => "deviceclasses",
            Self::ResourceFlavor => "resourceflavors",
            Self::NodePool => "nodepools",
            Self::WorkloadPriorityClass => "workloadpriorityclasses",
            Self::ProvisioningRequestConfig => "provisioningrequestconfigs",
            Self::MultiKueueCluster => "multikueueclusters",
            Self::MultiKueueConfig => "multikueueconfigs",
            Self::AdmissionCheck => "admissionchecks",
            Self::Cohort => "cohorts",
            Self::ClusterQueue => "clusterqueues",
            Self::TierGateParameters => "tiergateparameters",
            Self::ValidatingAdmissionPolicy => "validatingadmissionpolicies",
            Self::ValidatingAdmissionPolicyBinding => "validatingadmissionpolicybindings",
            Self::MutatingAdmissionPolicy => "mutatingadmissionpolicies",
            Self::MutatingAdmissionPolicyBinding => "mutatingadmissionpolicybindings",
            Self::LocalQueue => "localqueues",
        }
    }

    /// Whether the kind is Kueue's (the rest are DRA's DeviceClass, Karpenter's NodePool and the in-server
    /// gate's).
    pub fn is_kueue(self) -> bool {
        !matches!(
            self,
            Self::DeviceClass
                | Self::NodePool
                | Self::TierGateParameters
                | Self::ValidatingAdmissionPolicy
                | Self::ValidatingAdmissionPolicyBinding
                | Self::MutatingAdmissionPolicy
                | Self::MutatingAdmissionPolicyBinding
        )
    }

    /// Whether the API server may not serve the kind: MutatingAdmissionPolicy (GA in Kubernetes 1.36), the
    /// gate's TierGateParameters (a CRD a worker cluster of a fleet does not have), DeviceClass (GA in 1.34) and
    /// Karpenter's NodePool (served only where Karpenter is installed). Its watch asks discovery first and stays
    /// empty where it is not served.
    pub fn is_optional(self) -> bool {
        matches!(
            self,
            Self::NodePool
                | Self::MutatingAdmissionPolicy
                | Self::MutatingAdmissionPolicyBinding
                | Self::TierGateParameters
                | Self::DeviceClass
        )
    }

    /// Whether the kind is part of the in-server gate (its parameters, policies and bindings): owned by the webhook
    /// registration under `--gate-owner`.
    pub fn is_gate(self) -> bool {
        matches!(
            self,
            Self::TierGateParameters
                | Self::ValidatingAdmissionPolicy
                | Self::ValidatingAdmissionPolicyBinding
                | Self::MutatingAdmissionPolicy
                | Self::MutatingAdmissionPolicyBinding
        )
    }

    /// Whether the kind is the gate's mutating half (applied only where the API server serves it).
    pub fn is_mutating_half(self) -> bool {
        matches!(self, Self::MutatingAdmissionPolicy | Self::MutatingAdmissionPolicyBinding)
    }

    /// The kind's API group.
    pub fn group(self) -> &'static str {
        match self {
            Self::TierGateParameters => TIERGATE_GROUP,
            Self::DeviceClass => RESOURCE_GROUP,
            Self::NodePool => KARPENTER_GROUP,
            _ if self.is_kueue() => KUEUE_GROUP,
            _ => ADMISSION_GROUP,
        }
    }

    /// The API version tiergate writes the kind at.
    pub fn version(self) -> &'static str {
        match self {
            Self::TierGateParameters => TIERGATE_VERSION,
            Self::DeviceClass => RESOURCE_VERSION,
            Self::NodePool => KARPENTER_VERSION,
            _ if self.is_kueue() => KUEUE_VERSION,
            _ => ADMISSION_VERSION,
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(self, Self::LocalQueue)
    }

    /// The kind whose `kind` field is `kind`, if tiergate owns it.
    pub fn from_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|candidate| candidate.name() == kind)
    }

    /// The kind of a dynamic object, from its `kind` field.
    pub fn of(object: &DynamicObject) -> Option<Self> {
        object.types.as_ref().and_then(|types| Self::from_kind(&types.kind))
    }

    /// The API resource (`kueue.x-k8s.io/v1beta2`, or `admissionregistration.k8s.io/v1` for the gate).
    pub fn api_resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group(), self.version(), self.name()),
            self.plural(),
        )
    }
}

/// DRA's ResourceClaimTemplates (`resource.k8s.io/v1`), which tiergate reads (never owns): the webhook judges a
/// pod's claims by them, `why` lists them.
pub fn claim_template_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::resource::v1::ResourceClaimTemplate>(&())
}

/// The API resource of a workload kind's adapter row (plural: lower-case kind + `s`, true of every row).
pub fn adapter_resource(adapter: &tiergate_workloads::WorkloadAdapter) -> ApiResource {
    let gvk = GroupVersionKind::gvk(adapter.group, adapter.version, adapter.kind);
    ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", adapter.kind.to_lowercase()))
}

/// Kueue's Workload resource (`kueue.x-k8s.io/v1beta2`), which tiergate reads (never owns): `why` and the requeue
/// of pending workloads list them.
pub fn workload_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(KUEUE_GROUP, KUEUE_VERSION, "Workload"), "workloads")
}

/// cluster-autoscaler's ProvisioningRequests (`autoscaling.x-k8s.io/v1`), which Kueue makes and tiergate reads
/// (never owns): `why` names the autoscaler's answer.
pub fn provisioning_request_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1", "ProvisioningRequest"),
        "provisioningrequests",
    )
}

/// The labels every object of policy `policy_name` carries; they alone select objects for pruning.
pub fn build_ownership_labels(policy_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (POLICY_LABEL.to_owned(), policy_name.to_owned()),
    ])
}

/// The label selector matching every object of policy `policy_name` (for watches and lists).
pub fn build_ownership_selector(policy_name: &str) -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{POLICY_LABEL}={policy_name}")
}

/// Whether `object` carries both ownership labels for `policy_name`.
pub fn is_owned_by(object: &DynamicObject, policy_name: &str) -> bool {
    let labels = object.labels();
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(POLICY_LABEL).map(String::as_str) == Some(policy_name)
}

/// `namespace/name` or `name`: how objects are named in logs, events and status.
pub fn display_name(object: &DynamicObject) -> String {
    match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_order_puts_topologies_first_and_the_gate_after_local_queues() {
        assert_eq!(KueueKind::ALL.first(), Some(&KueueKind::Topology));
        assert_eq!(KueueKind::ALL.get(1), Some(&KueueKind::DeviceClass));
        assert_eq!(KueueKind::ALL.get(2), Some(&KueueKind::ResourceFlavor));
        let queues = KueueKind::ALL.iter().position(|kind| *kind == KueueKind::LocalQueue).unwrap();
        assert!(KueueKind::ALL[queues + 1..].iter().all(|kind| !kind.is_kueue()), "only the gate after LocalQueues");
        assert!(
            KueueKind::ALL[..queues]
                .iter()
                .all(|kind| kind.is_kueue() || matches!(kind, KueueKind::DeviceClass | KueueKind::NodePool))
        );
        let mut sorted = KueueKind::ALL;
        sorted.sort();
        assert_eq!(sorted, KueueKind::ALL, "Ord must follow apply order");
    }

    #[test]
    fn api_resources_use_kueue_v1beta2() {
        let resource = KueueKind::ClusterQueue.api_resource();
        assert_eq!(resource.api_version, "kueue.x-k8s.io/v1beta2");
        assert_eq!(resource.plural, "clusterqueues");
        assert_eq!(KueueKind::from_kind("LocalQueue"), Some(KueueKind::LocalQueue));
        assert_eq!(KueueKind::from_kind("Workload"), None);
        let gate = KueueKind::ValidatingAdmissionPolicyBinding.api_resource();
        assert_eq!(gate.api_version, "admissionregistration.k8s.io/v1");
        assert_eq!(gate.plural, "validatingadmissionpolicybindings");
    }

    #[test]
    fn ownership_needs_both_labels() {
        let mut object = DynamicObject::new("gold", &KueueKind::ClusterQueue.api_resource());
        object.metadata.labels = Some(BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())]));
        assert!(!is_owned_by(&object, "default"));
        object.metadata.labels = Some(build_ownership_labels("default"));
        assert!(is_owned_by(&object, "default"));
        assert!(!is_owned_by(&object, "other"));
    }
}
