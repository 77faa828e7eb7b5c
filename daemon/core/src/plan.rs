//! The translation: policy + cluster view -> the desired Kueue objects, deterministic and pure.
//!
//! [`desired`] expects a policy that passed [`crate::validation::validate_policy`]; it never fails, and copies
//! what it is given (an invalid policy yields objects the API server refuses, never silently altered ones).
//! Object names are explained in [`names`]; every object carries [`MANAGED_BY_LABEL`] and [`POLICY_LABEL`] so
//! the daemon prunes exactly what it owns.

pub mod budget;
pub mod cohorts;
pub mod dra;
pub mod fleet;
pub mod gate;
pub mod names;
pub mod nodepools;
pub mod quota;
pub mod quota_windows;
pub mod tenants;
pub mod topology;

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Taint, Toleration};
use k8s_openapi::api::resource::v1::DeviceClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde_json::Value;
use tiergate_kueue::{
    AdmissionCheck, AdmissionCheckParametersReference, AdmissionCheckSpec, AdmissionCheckStrategyRule,
    AdmissionChecksStrategy, ClusterQueue, ClusterQueueSpec, Cohort, FlavorQuotas, LocalQueue, LocalQueueSpec,
    MultiKueueCluster, MultiKueueConfig, ProvisioningRequestConfig, ProvisioningRequestConfigSpec,
    ProvisioningRequestRetryStrategy, ResourceFlavor, ResourceFlavorSpec, ResourceGroup, ResourceQuota, Topology,
    WorkloadPriorityClass, WorkloadPriorityClassFields,
};

use self::names::{
    bounded_name, class_rule_flavor_name, cluster_queue_name, gpu_class_flavor_name, multikueue_check_name,
    provisioning_name,
};
use self::quota::{FlavorRole, FlavorSource, tier_quota};
use crate::policy::{GpuClass, PlacementRule, PlacementStrategy, ProvisioningRetry, Tier, TierPolicy, TierPolicySpec};
use crate::trust;
use crate::view::{ClusterView, NamespaceView};

/// Label every generated object carries.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "tiergate";
/// Label naming the TierPolicy an object was generated from.
pub const POLICY_LABEL: &str = "tiergate.io/policy";

/// Kinds tiergate generates, in apply order (prune in reverse). Namespaces only on worker clusters.
pub const OWNED_KINDS: [&str; 18] = [
    "Namespace",
    "Topology",
    "DeviceClass",
    "ResourceFlavor",
    "NodePool",
    "WorkloadPriorityClass",
    "ProvisioningRequestConfig",
    "MultiKueueCluster",
    "MultiKueueConfig",
    "AdmissionCheck",
    "Cohort",
    "ClusterQueue",
    "TierGateParameters",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "LocalQueue",
];

/// The label selector matching every object generated from the policy called `policy_name`.
pub fn owned_label_selector(policy_name: &str) -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{POLICY_LABEL}={}", bounded_name(policy_name))
}

/// The Kueue objects a policy implies, one typed list per kind, each in a deterministic order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    /// Worker clusters only: the tenant namespaces of the tiers dispatched there, with their tier label, sorted.
    pub namespaces: Vec<Namespace>,
    /// One per distinct topology level list of the GPU classes the flavors are built for (first-use order).
    pub topologies: Vec<Topology>,
    /// One per GPU class with `dra` (declaration order; [`dra`]).
    pub device_classes: Vec<DeviceClass>,
    /// One per GPU class (declaration order), then one per rule of each tier's placement strategy on the tier's
    /// class (tier order, each once).
    pub resource_flavors: Vec<ResourceFlavor>,
    /// One Karpenter NodePool per GPU class with a `karpenter` template (declaration order; [`nodepools`]).
    pub node_pools: Vec<tiergate_karpenter::NodePool>,
    /// One per priority bucket (declaration order).
    pub workload_priority_classes: Vec<WorkloadPriorityClass>,
    /// One per tier with `provisioning` that runs in this cluster (tier order).
    pub provisioning_request_configs: Vec<ProvisioningRequestConfig>,
    /// Management cluster only: one per `spec.clusters` entry (declaration order).
    pub multi_kueue_clusters: Vec<MultiKueueCluster>,
    /// Management cluster only: one per distinct ordered worker list of the dispatching tiers (first-use order).
    pub multi_kueue_configs: Vec<MultiKueueConfig>,
    /// Per tier (tier order): its MultiKueue check when it dispatches (management cluster), else its
    /// ProvisioningRequest check when it has `provisioning` and runs in this cluster.
    pub admission_checks: Vec<AdmissionCheck>,
    /// One per `spec.cohorts` entry, parents first (worker clusters: those above their tiers; [`cohorts`]).
    pub cohorts: Vec<Cohort>,
    /// One per tier (tier order).
    pub cluster_queues: Vec<ClusterQueue>,
    /// Management cluster only: the in-server gate's parameter objects, one per tier (tier order; [`gate`]).
    pub gate_parameters: Vec<gate::params::TierGateParameters>,
    /// Management cluster only: the in-server gate's one validating policy ([`gate`]).
    pub admission_policies: Vec<ValidatingAdmissionPolicy>,
    /// Management cluster only: one binding per tier, to the tier's namespaces and parameters (tier order).
    pub admission_policy_bindings: Vec<ValidatingAdmissionPolicyBinding>,
    /// Management cluster only: the gate's one MutatingAdmissionPolicy; the daemon applies it only where the API
    /// server serves the kind.
    pub mutating_policies: Vec<MutatingAdmissionPolicy>,
    /// Management cluster only: their bindings (tier order).
    pub mutating_policy_bindings: Vec<MutatingAdmissionPolicyBinding>,
    /// One per namespace of each tier, sorted by namespace.
    pub local_queues: Vec<LocalQueue>,
    /// Things in the cluster view the translation could not use (e.g. a tier label naming no tier).
    pub notes: Vec<String>,
}

/// One generated object, borrowed from [`Desired`].
#[derive(Clone, Copy, Debug)]
pub enum DesiredObject<'a> {
    /// A Namespace (worker clusters).
    Namespace(&'a Namespace),
    /// A Topology.
    Topology(&'a Topology),
    /// A DeviceClass of a DRA GPU class.
    DeviceClass(&'a DeviceClass),
    /// A ResourceFlavor.
    ResourceFlavor(&'a ResourceFlavor),
    /// A Karpenter NodePool of a GPU class.
    NodePool(&'a tiergate_karpenter::NodePool),
    /// A WorkloadPriorityClass.
    WorkloadPriorityClass(&'a WorkloadPriorityClass),
    /// A ProvisioningRequestConfig.
    ProvisioningRequestConfig(&'a ProvisioningRequestConfig),
    /// A MultiKueueCluster.
    MultiKueueCluster(&'a MultiKueueCluster),
    /// A MultiKueueConfig.
    MultiKueueConfig(&'a MultiKueueConfig),
    /// An AdmissionCheck.
    AdmissionCheck(&'a AdmissionCheck),
    /// A Cohort.
    Cohort(&'a Cohort),
    /// A ClusterQueue.
    ClusterQueue(&'a ClusterQueue),
    /// A parameter object of the in-server gate.
    TierGateParameters(&'a gate::params::TierGateParameters),
    /// A ValidatingAdmissionPolicy of the in-server gate.
    ValidatingAdmissionPolicy(&'a ValidatingAdmissionPolicy),
    /// Its binding.
    ValidatingAdmissionPolicyBinding(&'a ValidatingAdmissionPolicyBinding),
    /// A MutatingAdmissionPolicy of the in-server gate.
    MutatingAdmissionPolicy(&'a MutatingAdmissionPolicy),
    /// Its binding.
    MutatingAdmissionPolicyBinding(&'a MutatingAdmissionPolicyBinding),
    /// A LocalQueue.
    LocalQueue(&'a LocalQueue),
}

/// A generated object could not be serialized (never expected: the types are plain data).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// JSON serialization failed.
    #[error("failed to serialize {kind} {name}: {source}")]
    SerializeObject {
        /// Object kind.
        kind: &'static str,
        /// Object name.
        name: String,
        /// Cause.
        source: serde_json::Error,
    },
    /// YAML serialization failed.
    #[error("failed to write {kind} {name} as YAML: {message}")]
    WriteYaml {
        /// Object kind.
        kind: &'static str,
        /// Object name.
        name: String,
        /// Serializer message.
        message: String,
    },
}

impl PlanError {
    /// Fixed reason for metrics and exit messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SerializeObject { .. } => "serialize_object",
            Self::WriteYaml { .. } => "write_yaml",
        }
    }
}

impl DesiredObject<'_> {
    /// The object's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Namespace(_) => "Namespace",
            Self::Topology(_) => "Topology",
            Self::DeviceClass(_) => "DeviceClass",
            Self::ResourceFlavor(_) => "ResourceFlavor",
            Self::NodePool(_) => "NodePool",
            Self::WorkloadPriorityClass(_) => "WorkloadPriorityClass",
            Self::ProvisioningRequestConfig(_) => "ProvisioningRequestConfig",
            Self::MultiKueueCluster(_) => "MultiKueueCluster",
            Self::MultiKueueConfig(_) => "MultiKueueConfig",
            Self::AdmissionCheck(_) => "AdmissionCheck",
            Self::Cohort(_) => "Cohort",
            Self::ClusterQueue(_) => "ClusterQueue",
            Self::TierGateParameters(_) => "TierGateParameters",
            Self::ValidatingAdmissionPolicy(_) => "ValidatingAdmissionPolicy",
            Self::ValidatingAdmissionPolicyBinding(_) => "ValidatingAdmissionPolicyBinding",
            Self::MutatingAdmissionPolicy(_) => "MutatingAdmissionPolicy",
            Self::MutatingAdmissionPolicyBinding(_) => "MutatingAdmissionPolicyBinding",
            Self::LocalQueue(_) => "LocalQueue",
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::Namespace(object) => &object.metadata,
            Self::Topology(object) => &object.metadata,
            Self::DeviceClass(object) => &object.metadata,
            Self::ResourceFlavor(object) => &object.metadata,
            Self::NodePool(object) => &object.metadata,
            Self::WorkloadPriorityClass(object) => &object.metadata,
            Self::ProvisioningRequestConfig(object) => &object.metadata,
            Self::MultiKueueCluster(object) => &object.metadata,
            Self::MultiKueueConfig(object) => &object.metadata,
            Self::AdmissionCheck(object) => &object.metadata,
            Self::Cohort(object) => &object.metadata,
            Self::ClusterQueue(object) => &object.metadata,
            Self::TierGateParameters(object) => &object.metadata,
            Self::ValidatingAdmissionPolicy(object) => &object.metadata,
            Self::ValidatingAdmissionPolicyBinding(object) => &object.metadata,
            Self::MutatingAdmissionPolicy(object) => &object.metadata,
            Self::MutatingAdmissionPolicyBinding(object) => &object.metadata,
            Self::LocalQueue(object) => &object.metadata,
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    /// The object's namespace (`None` for cluster-scoped kinds).
    pub fn namespace(&self) -> Option<&str> {
        self.metadata().namespace.as_deref()
    }

    /// The object as JSON, with `apiVersion` and `kind`.
    pub fn to_value(&self) -> Result<Value, PlanError> {
        let result = match self {
            Self::Namespace(object) => serde_json::to_value(object),
            Self::Topology(object) => serde_json::to_value(object),
            Self::DeviceClass(object) => serde_json::to_value(object),
            Self::ResourceFlavor(object) => serde_json::to_value(object),
            Self::NodePool(object) => serde_json::to_value(object),
            Self::WorkloadPriorityClass(object) => serde_json::to_value(object),
            Self::ProvisioningRequestConfig(object) => serde_json::to_value(object),
            Self::MultiKueueCluster(object) => serde_json::to_value(object),
            Self::MultiKueueConfig(object) => serde_json::to_value(object),
            Self::AdmissionCheck(object) => serde_json::to_value(object),
            Self::Cohort(object) => serde_json::to_value(object),
            Self::ClusterQueue(object) => serde_json::to_value(object),
            Self::TierGateParameters(object) => serde_json::to_value(object),
            Self::ValidatingAdmissionPolicy(object) => serde_json::to_value(object),
            Self::ValidatingAdmissionPolicyBinding(object) => serde_json::to_value(object),
            Self::MutatingAdmissionPolicy(object) => serde_json::to_value(object),
            Self::MutatingAdmissionPolicyBinding(object) => serde_json::to_value(object),
            Self::LocalQueue(object) => serde_json::to_value(object),
        };
        result.map_err(|source| PlanError::SerializeObject { kind: self.kind(), name: self.name().to_owned(), source })
    }
}

impl Desired {
    /// Every object in apply order ([`OWNED_KINDS`]): namespaces, topologies, flavors, NodePools, priority classes, provisioning
    /// configs, MultiKueue clusters and configs, admission checks, Cohorts, ClusterQueues, the gate's policies and bindings, LocalQueues (each refers only to
    /// objects before it).
    pub fn objects(&self) -> Vec<DesiredObject<'_>> {
        let namespaces = self.namespaces.iter().map(DesiredObject::Namespace);
        let topologies = self.topologies.iter().map(DesiredObject::Topology);
        let device_classes = self.device_classes.iter().map(DesiredObject::DeviceClass);
        let flavors = self.resource_flavors.iter().map(DesiredObject::ResourceFlavor);
        let node_pools = self.node_pools.iter().map(DesiredObject::NodePool);
        let classes = self.workload_priority_classes.iter().map(DesiredObject::WorkloadPriorityClass);
        let configs = self.provisioning_request_configs.iter().map(DesiredObject::ProvisioningRequestConfig);
        let workers = self.multi_kueue_clusters.iter().map(DesiredObject::MultiKueueCluster);
        let worker_sets = self.multi_kueue_configs.iter().map(DesiredObject::MultiKueueConfig);
        let checks = self.admission_checks.iter().map(DesiredObject::AdmissionCheck);
        let cohorts = self.cohorts.iter().map(DesiredObject::Cohort);
        let cluster_queues = self.cluster_queues.iter().map(DesiredObject::ClusterQueue);
        let parameters = self.gate_parameters.iter().map(DesiredObject::TierGateParameters);
        let policies = self.admission_policies.iter().map(DesiredObject::ValidatingAdmissionPolicy);
        let bindings = self.admission_policy_bindings.iter().map(DesiredObject::ValidatingAdmissionPolicyBinding);
        let mutating = self.mutating_policies.iter().map(DesiredObject::MutatingAdmissionPolicy);
        let mutating_bindings = self.mutating_policy_bindings.iter().map(DesiredObject::MutatingAdmissionPolicyBinding);
        let local_queues = self.local_queues.iter().map(DesiredObject::LocalQueue);
        namespaces
            .chain(topologies)
            .chain(device_classes)
            .chain(flavors)
            .chain(node_pools)
            .chain(classes)
            .chain(configs)
            .chain(workers)
            .chain(worker_sets)
            .chain(checks)
            .chain(cohorts)
            .chain(cluster_queues)
            .chain(parameters)
            .chain(policies)
            .chain(bindings)
            .chain(mutating)
            .chain(mutating_bindings)
            .chain(local_queues)
            .collect()
    }

    /// Every object as JSON, in apply order.
    pub fn to_values(&self) -> Result<Vec<Value>, PlanError> {
        self.objects().iter().map(DesiredObject::to_value).collect()
    }

    /// Every object as a `DynamicObject`, in apply order (for server-side apply through a dynamic API).
    pub fn to_dynamic_objects(&self) -> Result<Vec<kube_core::DynamicObject>, PlanError> {
        self.objects()
            .iter()
            .map(|object| {
                serde_json::from_value(object.to_value()?).map_err(|source| PlanError::SerializeObject {
                    kind: object.kind(),
                    name: object.name().to_owned(),
                    source,
                })
            })
            .collect()
    }

    /// A multi-document YAML stream `kubectl apply -f -` accepts, in apply order.
    pub fn to_yaml_stream(&self) -> Result<String, PlanError> {
        let mut stream = String::new();
        for object in self.objects() {
            let value = object.to_value()?;
            let document = serde_saphyr::to_string(&value).map_err(|error| PlanError::WriteYaml {
                kind: object.kind(),
                name: object.name().to_owned(),
                message: error.to_string(),
            })?;
            stream.push_str("---\n");
            stream.push_str(&document);
            if !document.ends_with('\n') {
                stream.push('\n');
            }
        }
        Ok(stream)
    }

    /// A `v1` `List` of every object, in apply order.
    pub fn to_json_list(&self) -> Result<Value, PlanError> {
        Ok(serde_json::json!({"apiVersion": "v1", "kind": "List", "items": self.to_values()?}))
    }
}

/// Node labels, taints and pod tolerations of one ResourceFlavor. The webhook sets exactly `node_labels` as the
/// pod's nodeSelector and adds `tolerations`, so the pod matches the flavor Kueue admits it to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlavorSelector {
    /// ResourceFlavor name.
    pub flavor: String,
    /// The flavor's `nodeLabels` (the pod's nodeSelector).
    pub node_labels: BTreeMap<String, String>,
    /// The flavor's `nodeTaints`.
    pub node_taints: Vec<Taint>,
    /// The flavor's `tolerations` (what pods need).
    pub tolerations: Vec<Toleration>,
    /// The flavor's `topologyName`: its GPU class's Topology, if the class names levels.
    pub topology_name: Option<String>,
}

/// The flavor of GPU class `class`, or `None` when the policy declares no such class.
pub fn flavor_for_gpu_class(spec: &TierPolicySpec, class: &str) -> Option<FlavorSelector> {
    spec.gpu_class(class).map(|class| FlavorSelector {
        flavor: class_flavor_name(class),
        node_labels: class.node_labels.clone(),
        node_taints: class.node_taints.clone(),
        tolerations: class.pod_tolerations(),
        topology_name: topology::class_topology_name(class),
    })
}

/// The ResourceFlavor name of GPU class `class`: its name, with a hash of its Topology when it names levels.
pub fn class_flavor_name(class: &GpuClass) -> String {
    gpu_class_flavor_name(&class.name, topology::class_topology_name(class).as_deref())
}

/// The flavor of one placement-strategy rule on the nodes of `class` (a tier's primary class): the class's labels
/// plus the rule's (the pod's nodeSelector after the webhook set both), the class's taints, and the class's
/// tolerations plus the rule's (what Kueue adds to an admitted pod). Why the class labels must be there:
/// docs/guides/placement.md, "Which flavor Kueue charges".
pub fn flavor_for_rule(class: &FlavorSelector, strategy: &PlacementStrategy, rule: &PlacementRule) -> FlavorSelector {
    let class_name = class.flavor.as_str();
    let mut node_labels = class.node_labels.clone();
    node_labels.extend(rule.node_selector.iter().map(|(key, value)| (key.clone(), value.clone())));
    let mut tolerations = class.tolerations.clone();
    tolerations.extend(rule.tolerations.iter().filter(|toleration| !class.tolerations.contains(toleration)).cloned());
    FlavorSelector {
        flavor: class_rule_flavor_name(class_name, &strategy.name, &rule.name),
        node_labels,
        node_taints: class.node_taints.clone(),
        tolerations,
        topology_name: class.topology_name.clone(),
    }
}

/// The flavors of a tier's ClusterQueue in Kueue's try order: its primary GPU class, the rules of its placement
/// strategy on the primary class, then its fallback classes. Rules come before fallbacks because they are nodes
/// of the primary class, and because a queued Job of a tier with fallbacks carries no class selector (the webhook
/// leaves the class to Kueue), so a rule's Job reaches its own flavor before any fallback's. Unknown names (an
/// invalid policy) are skipped.
pub fn tier_flavors(spec: &TierPolicySpec, tier: &Tier) -> Vec<FlavorSelector> {
    tier_flavor_sources(spec, tier).into_iter().map(|flavor| flavor.selector).collect()
}

/// [`tier_flavors`] with where each flavor comes from (class, fallback or rule, and the rule's base and weight).
pub fn tier_flavor_sources(spec: &TierPolicySpec, tier: &Tier) -> Vec<FlavorSource> {
    let class_source = |class: &str, role: FlavorRole| {
        flavor_for_gpu_class(spec, class).map(|selector| FlavorSource {
            selector,
            role,
            source: class.to_owned(),
            base: 0,
            weight: 0,
        })
    };
    let primary = class_source(&tier.gpu_class, FlavorRole::Class);
    let strategy = tier.placement.as_deref().and_then(|name| spec.placement_strategy(name));
    let rules: Vec<FlavorSource> = primary
        .iter()
        .zip(strategy)
        .flat_map(|(class, strategy)| {
            strategy.rules.iter().map(move |rule| FlavorSource {
                selector: flavor_for_rule(&class.selector, strategy, rule),
                role: FlavorRole::Rule,
                source: rule.name.clone(),
                base: rule.base,
                weight: rule.weight,
            })
        })
        .collect();
    let fallbacks = tier.fallback_gpu_classes.iter().filter_map(|class| class_source(class, FlavorRole::Fallback));
    primary.into_iter().chain(rules).chain(fallbacks).collect()
}

/// The desired Kueue objects for `policy` in the cluster `view`; a policy that names no `trustedControllers`
/// trusts the operators the view's ClusterRoleBindings show installed (`trust`), as the daemon does.
pub fn desired(policy: &TierPolicy, view: &ClusterView) -> Desired {
    let installed = trust::find_installed_operators(&view.bindings, &view.namespaces_by_name());
    let resolved = trust::resolve_trusted_controllers(policy, &installed);
    let mut desired = desired_cluster_scoped(resolved.as_ref().unwrap_or(policy));
    for decision in namespace_queues(policy, view.namespaces.iter().map(AsRef::as_ref)) {
        match decision {
            NamespaceQueue::Queue(queue) => desired.local_queues.push(*queue),
            NamespaceQueue::Skipped(note) => desired.notes.push(note),
        }
    }
    desired.notes.extend(topology::missing_level_notes(&policy.spec, view.nodes.iter().map(AsRef::as_ref)));
    desired.notes.extend(view.namespaces.iter().filter_map(|namespace| {
        let tier = policy.spec.tier_of(&namespace.labels)?;
        tenants::local_queue_fair_sharing(&policy.spec, tier, &namespace.name, &namespace.labels).1
    }));
    desired
}

/// What the translation decides for one namespace that carries the tier label.
#[derive(Clone, Debug, PartialEq)]
pub enum NamespaceQueue {
    /// The namespace's LocalQueue (boxed: the note variant is a tenth of its size).
    Queue(Box<LocalQueue>),
    /// No LocalQueue there, and why (one of [`Desired::notes`]).
    Skipped(String),
}

/// The LocalQueue decision of every namespace in `namespaces` carrying the tier label, sorted by namespace,
/// built lazily one namespace at a time: [`desired`] collects it, the reconciler applies 10,000 queues without
/// holding them all (and without copying the snapshot's namespaces into a [`ClusterView`]).
pub fn namespace_queues<'a>(
    policy: &'a TierPolicy,
    namespaces: impl IntoIterator<Item = &'a NamespaceView>,
) -> impl Iterator<Item = NamespaceQueue> + 'a {
    let spec = &policy.spec;
    let labels = owned_labels(policy);
    let mut namespaces: Vec<&NamespaceView> = namespaces.into_iter().collect();
    namespaces.sort_by(|left, right| left.name.cmp(&right.name));
    namespaces.into_iter().filter_map(move |namespace| {
        let tier_name = namespace.labels.get(&spec.tier_label)?;
        if spec.is_excluded(&namespace.name, None) {
            return Some(NamespaceQueue::Skipped(format!(
                "namespace {} has {}={tier_name} but is excluded; no LocalQueue is created there",
                namespace.name, spec.tier_label
            )));
        }
        let Some(tier) = spec.tier(tier_name) else {
            return Some(NamespaceQueue::Skipped(format!(
                "namespace {} has {}={tier_name}, which names no tier of the policy; no LocalQueue is created there",
                namespace.name, spec.tier_label
            )));
        };
        Some(NamespaceQueue::Queue(Box::new(LocalQueue {
            metadata: ObjectMeta {
                name: Some(tier.local_queue()),
                namespace: Some(namespace.name.clone()),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            spec: LocalQueueSpec {
                cluster_queue: cluster_queue_name(&tier.name),
                stop_policy: None,
                fair_sharing: tenants::local_queue_fair_sharing(spec, tier, &namespace.name, &namespace.labels).0,
            },
        })))
    })
}

/// The cluster-scoped objects of `policy` in the management cluster (everything but LocalQueues); they do not
/// depend on the cluster view. A dispatching tier's ClusterQueue carries its MultiKueue check only: its
/// ProvisioningRequest check (if any) runs on the workers, where the nodes are ([`fleet`]).
pub fn desired_cluster_scoped(policy: &TierPolicy) -> Desired {
    let mut desired = build_cluster_scoped(policy, Side::Management, |_| true);
    let labels = owned_labels(policy);
    desired.multi_kueue_clusters = fleet::build_multi_kueue_clusters(&policy.spec, &labels);
    desired.multi_kueue_configs = fleet::build_multi_kueue_configs(&policy.spec, &labels);
    let gate = gate::build_gate(policy, &labels);
    desired.gate_parameters = gate.parameters;
    desired.admission_policies = gate.policies;
    desired.admission_policy_bindings = gate.bindings;
    desired.mutating_policies = gate.mutating_policies;
    desired.mutating_policy_bindings = gate.mutating_bindings;
    budget::hold_spent_budgets(&mut desired.cluster_queues, policy);
    desired
}

/// Which cluster objects are built for: the management cluster, or a worker MultiKueue dispatches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Management,
    Worker,
}

/// The flavors, priority classes, provisioning configs, admission checks and ClusterQueues of the tiers `keep`
/// selects, as built for `side`.
fn build_cluster_scoped(policy: &TierPolicy, side: Side, keep: impl Fn(&Tier) -> bool) -> Desired {
    let spec = &policy.spec;
    let labels = owned_labels(policy);
    let tiers: Vec<&Tier> = spec.tiers.iter().filter(|tier| keep(tier)).collect();
    let provisions_here = |tier: &Tier| match side {
        Side::Management => tier.provisions_on_management(),
        Side::Worker => tier.provisioning.is_some(),
    };
    let meta = |name: String| ObjectMeta { name: Some(name), labels: Some(labels.clone()), ..ObjectMeta::default() };

    let built_classes: Vec<_> = spec
        .gpu_classes
        .iter()
        .filter(|class| {
            side == Side::Management || tiers.iter().any(|tier| tier.gpu_class_names().any(|name| name == class.name))
        })
        .collect();
    let topologies = topology::build_topologies(built_classes.iter().copied(), &labels);
    let device_classes = dra::build_device_classes(built_classes.iter().copied(), &labels);
    let class_flavors = built_classes.iter().filter_map(|class| flavor_for_gpu_class(spec, &class.name));
    let mut rule_flavors: Vec<FlavorSelector> = Vec::new();
    for flavor in tiers.iter().flat_map(|tier| tier_flavor_sources(spec, tier)) {
        if flavor.role == FlavorRole::Rule && !rule_flavors.iter().any(|seen| seen.flavor == flavor.selector.flavor) {
            rule_flavors.push(flavor.selector);
        }
    }
    let resource_flavors = class_flavors
        .chain(rule_flavors)
        .map(|selector| ResourceFlavor { metadata: meta(selector.flavor.clone()), spec: build_flavor_spec(selector) })
        .collect();

    let running_here: Vec<&Tier> =
        tiers.iter().copied().filter(|tier| side == Side::Worker || tier.dispatch.is_none()).collect();
    let node_pools = nodepools::build_node_pools(spec, built_classes.iter().copied(), &running_here, &labels);

    let workload_priority_classes = spec
        .priority_buckets
        .iter()
        .map(|bucket| WorkloadPriorityClass {
            metadata: meta(bounded_name(&bucket.name)),
            spec: WorkloadPriorityClassFields { value: bucket.value, description: bucket.description.clone() },
        })
        .collect();

    let provisioned: Vec<&Tier> = tiers.iter().copied().filter(|tier| provisions_here(tier)).collect();
    let provisioning_request_configs = provisioned
        .iter()
        .filter_map(|tier| tier.provisioning.as_ref().map(|provisioning| (tier, provisioning)))
        .map(|(tier, provisioning)| ProvisioningRequestConfig {
            metadata: meta(provisioning_name(&tier.name)),
            spec: ProvisioningRequestConfigSpec {
                provisioning_class_name: provisioning.provisioning_class_name.clone(),
                parameters: non_empty_map(&provisioning.parameters),
                managed_resources: non_empty_vec(&provisioning.managed_resources),
                retry_strategy: Some(provisioning_retry_strategy(provisioning.retry_strategy.unwrap_or_default())),
            },
        })
        .collect();
    let check = |name: String, controller: &str, kind: &str, parameters: String| AdmissionCheck {
        metadata: meta(name),
        spec: AdmissionCheckSpec {
            controller_name: controller.to_owned(),
            parameters: Some(AdmissionCheckParametersReference {
                api_group: tiergate_kueue::GROUP.to_owned(),
                kind: kind.to_owned(),
                name: parameters,
            }),
        },
    };
    let admission_checks = tiers
        .iter()
        .filter_map(|tier| match (&tier.dispatch, side) {
            (Some(dispatch), Side::Management) => Some(check(
                multikueue_check_name(&tier.name),
                tiergate_kueue::MULTIKUEUE_CONTROLLER,
                tiergate_kueue::MULTIKUEUE_CONFIG_KIND,
                names::multikueue_config_name(&dispatch.clusters),
            )),
            _ if provisions_here(tier) => Some(check(
                provisioning_name(&tier.name),
                tiergate_kueue::PROVISIONING_REQUEST_CONTROLLER,
                tiergate_kueue::PROVISIONING_REQUEST_CONFIG_KIND,
                provisioning_name(&tier.name),
            )),
            _ => None,
        })
        .collect();

    let cohorts = cohorts::build_cohorts(spec, &labels, &tiers, side == Side::Management);
    let cluster_queues = tiers
        .iter()
        .map(|tier| {
            let mut queue = build_cluster_queue_spec(spec, tier);
            let check = match side {
                Side::Management if tier.dispatch.is_some() => Some(multikueue_check_name(&tier.name)),
                _ if provisions_here(tier) => Some(provisioning_name(&tier.name)),
                _ => None,
            };
            queue.admission_checks_strategy = check.map(|name| AdmissionChecksStrategy {
                admission_checks: vec![AdmissionCheckStrategyRule { name, on_flavors: Vec::new() }],
            });
            ClusterQueue { metadata: meta(cluster_queue_name(&tier.name)), spec: queue }
        })
        .collect();

    Desired {
        topologies,
        device_classes,
        resource_flavors,
        node_pools,
        workload_priority_classes,
        provisioning_request_configs,
        admission_checks,
        cohorts,
        cluster_queues,
        ..Desired::default()
    }
}

/// The policy's retry settings as Kueue's `retryStrategy`, always written out so the live object shows them.
fn provisioning_retry_strategy(retry: ProvisioningRetry) -> ProvisioningRequestRetryStrategy {
    ProvisioningRequestRetryStrategy {
        backoff_limit_count: retry.backoff_limit_count,
        backoff_base_seconds: retry.backoff_base_seconds,
        backoff_max_seconds: retry.backoff_max_seconds,
    }
}

/// The labels that mark an object as generated from `policy`.
pub fn owned_labels(policy: &TierPolicy) -> BTreeMap<String, String> {
    let policy_name = policy.metadata.name.as_deref().unwrap_or_default();
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (POLICY_LABEL.to_owned(), bounded_name(policy_name)),
    ])
}

fn build_flavor_spec(selector: FlavorSelector) -> ResourceFlavorSpec {
    ResourceFlavorSpec {
        node_labels: (!selector.node_labels.is_empty()).then_some(selector.node_labels),
        node_taints: (!selector.node_taints.is_empty()).then_some(selector.node_taints),
        tolerations: (!selector.tolerations.is_empty()).then_some(selector.tolerations),
        topology_name: selector.topology_name,
    }
}

fn build_cluster_queue_spec(spec: &TierPolicySpec, tier: &Tier) -> ClusterQueueSpec {
    let tier = &cohorts::with_floor(tier);
    let has_cohort = tier.cohort.is_some();
    let covered_resources: Vec<String> = tier.quotas.keys().cloned().collect();
    let flavors = tier_quota(spec, tier)
        .flavors
        .into_iter()
        .map(|share| {
            let resources = share
                .nominal
                .iter()
                .map(|(resource, nominal)| {
                    let written = tier.quotas.get(resource).and_then(|quota| quota.borrowing_limit.clone());
                    let borrowing = if share.no_borrowing { Some(Quantity("0".into())) } else { written };
                    ResourceQuota {
                        name: resource.clone(),
                        nominal_quota: nominal.clone(),
                        borrowing_limit: borrowing.filter(|_| has_cohort),
                        lending_limit: share.lending_limits.get(resource).cloned().filter(|_| has_cohort),
                    }
                })
                .collect();
            FlavorQuotas { name: share.selector.flavor, resources }
        })
        .collect();
    ClusterQueueSpec {
        cohort_name: tier.cohort.clone(),
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(spec.tier_label.clone(), tier.name.clone())])),
            match_expressions: None,
        }),
        resource_groups: vec![ResourceGroup { covered_resources, flavors }],
        preemption: cohorts::build_preemption(spec, tier),
        // Set by the caller, which knows which cluster the queue is for.
        admission_checks_strategy: None,
        stop_policy: None,
        fair_sharing: cohorts::build_fair_sharing(tier),
        admission_scope: tenants::admission_scope(tier),
    }
}

fn non_empty_map(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then(|| map.clone())
}

fn non_empty_vec(items: &[String]) -> Option<Vec<String>> {
    (!items.is_empty()).then(|| items.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};

    fn sample() -> Desired {
        let policy = load_policy(None).unwrap();
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        desired(&policy, &view)
    }

    #[test]
    fn bronze_cluster_queue_admits_only_bronze_namespaces_and_uses_the_l4_flavor() {
        let desired = sample();
        let bronze = desired
            .cluster_queues
            .iter()
            .find(|queue| queue.metadata.name.as_deref() == Some("tiergate-bronze"))
            .unwrap();
        let selector = bronze.spec.namespace_selector.as_ref().unwrap();
        assert_eq!(
            selector.match_labels.as_ref().unwrap(),
            &BTreeMap::from([("tenant.kubenexus.io/tier".to_owned(), "bronze".to_owned())])
        );
        let group = &bronze.spec.resource_groups[0];
        assert_eq!(group.flavors.iter().map(|flavor| flavor.name.as_str()).collect::<Vec<_>>(), ["l4"]);
        let names: Vec<&str> = group.flavors[0].resources.iter().map(|quota| quota.name.as_str()).collect();
        assert_eq!(names, group.covered_resources.iter().map(String::as_str).collect::<Vec<_>>());
    }

    #[test]
    fn every_tier_namespace_gets_its_local_queue_and_kube_system_none() {
        let desired = sample();
        let queues: Vec<(String, String, String)> = desired
            .local_queues
            .iter()
            .map(|queue| {
                (
                    queue.metadata.namespace.clone().unwrap(),
                    queue.metadata.name.clone().unwrap(),
                    queue.spec.cluster_queue.clone(),
                )
            })
            .collect();
        assert!(queues.contains(&("ml-team-dev".into(), "tiergate-bronze".into(), "tiergate-bronze".into())));
        assert!(queues.contains(&("ml-research".into(), "tiergate-gold".into(), "tiergate-gold".into())));
        assert!(queues.iter().all(|(namespace, _, _)| namespace != "kube-system"));
    }

    #[test]
    fn every_object_carries_the_ownership_labels() {
        for object in sample().objects() {
            let labels = object.metadata().labels.clone().unwrap_or_default();
            assert_eq!(labels.get(MANAGED_BY_LABEL).map(String::as_str), Some("tiergate"), "{}", object.name());
            assert_eq!(labels.get(POLICY_LABEL).map(String::as_str), Some("default"), "{}", object.name());
        }
    }

    #[test]
    fn objects_come_in_the_owned_kinds_apply_order() {
        let policy = crate::inputs::parse_policy(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/spot-mix/policy.yaml"))
                .unwrap(),
            "spot-mix",
        )
        .unwrap();
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let desired = desired(&policy, &view);
        let mut kinds: Vec<&str> = desired.objects().iter().map(DesiredObject::kind).collect();
        kinds.dedup();
        // spot-mix has no worker clusters, topology levels, DRA classes or Karpenter templates: every other kind,
        // in apply order.
        let local_kinds: Vec<&str> = OWNED_KINDS
            .into_iter()
            .filter(|kind| {
                !matches!(
                    *kind,
                    "Namespace"
                        | "Topology"
                        | "DeviceClass"
                        | "NodePool"
                        | "MultiKueueCluster"
                        | "MultiKueueConfig"
                        | "Cohort"
                )
            })
            .collect();
        assert_eq!(kinds, local_kinds);
        let selector = owned_label_selector("spot-mix");
        assert_eq!(selector, "app.kubernetes.io/managed-by=tiergate,tiergate.io/policy=spot-mix");
    }

    #[test]
    fn the_translation_is_deterministic() {
        assert_eq!(sample(), sample());
        assert_eq!(sample().to_yaml_stream().unwrap(), sample().to_yaml_stream().unwrap());
    }

    #[test]
    fn a_namespace_naming_an_unknown_tier_is_reported_not_dropped() {
        let policy = load_policy(None).unwrap();
        let mut view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let namespace = std::sync::Arc::make_mut(&mut view.namespaces[0]);
        namespace.labels = namespace.labels.with("tenant.kubenexus.io/tier", "platinum");
        let desired = desired(&policy, &view);
        assert!(desired.notes.iter().any(|note| note.contains("platinum")), "{:?}", desired.notes);
    }

    #[test]
    fn borrowing_limits_are_written_only_with_a_cohort() {
        let mut policy = load_policy(None).unwrap();
        let quota = policy.spec.tiers[0].quotas.get_mut("nvidia.com/gpu").unwrap();
        quota.borrowing_limit = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity("8".into()));
        let without = desired(&policy, &ClusterView::default());
        let limits = |desired: &Desired| {
            desired.cluster_queues[0].spec.resource_groups[0].flavors[0]
                .resources
                .iter()
                .filter(|quota| quota.borrowing_limit.is_some())
                .count()
        };
        assert_eq!(limits(&without), 0);
        policy.spec.tiers[0].cohort = Some("gpu".into());
        let with = desired(&policy, &ClusterView::default());
        assert_eq!(limits(&with), 1);
        assert_eq!(with.cluster_queues[0].spec.cohort_name.as_deref(), Some("gpu"));
    }

    #[test]
    fn the_webhook_selector_is_the_flavor_labels_and_tolerations() {
        let policy = load_policy(None).unwrap();
        let selector = flavor_for_gpu_class(&policy.spec, "l4").unwrap();
        let desired = sample();
        let flavor =
            desired.resource_flavors.iter().find(|flavor| flavor.metadata.name.as_deref() == Some("l4")).unwrap();
        assert_eq!(flavor.spec.node_labels.as_ref(), Some(&selector.node_labels));
        assert_eq!(flavor.spec.tolerations.as_ref(), Some(&selector.tolerations));
        assert_eq!(selector.tolerations[0].key.as_deref(), Some("nvidia.com/gpu"));
    }
}
