//! The cluster as the pure core sees it: namespaces with labels, nodes with labels, taints and allocatable GPUs,
//! and the immutable `Snapshot` the webhook decides from; no I/O.
//!
//! Views are shared, never copied: the daemon's watch caches hold them behind `Arc`s and every snapshot and
//! translation view points at the same allocations, so 10,000 namespaces are in memory once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

mod class_digest;

pub use class_digest::{ClassCapacity, ClassDigest, Inventory, build_class_digest};

use crate::labels::Labels;
use crate::policy::TierPolicy;

/// A namespace: its name and labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceView {
    /// Namespace name.
    pub name: String,
    /// Namespace labels.
    #[serde(default)]
    pub labels: Labels,
    /// Whether the namespace is being deleted: it accepts no new objects, so it is neither queued for nor
    /// mutated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminating: bool,
    /// `metadata.creationTimestamp`, in seconds since the epoch (which operator accounts are installed,
    /// `trust`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<i64>,
}

/// A node: its labels, taints and allocatable extended resources (whole units, e.g. GPUs).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// Node labels.
    #[serde(default)]
    pub labels: Labels,
    /// Node taints (key, value, effect).
    #[serde(default)]
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// Allocatable integer resources by name, e.g. `nvidia.com/gpu: 8`.
    #[serde(default)]
    pub allocatable: BTreeMap<String, i64>,
}

/// What the translation needs to know about the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterView {
    /// ResourceClaimTemplates (a kubectl `List` may carry them; `explain` judges a pod's claims by them).
    #[serde(skip)]
    pub claim_templates: Vec<Arc<ClaimTemplateView>>,
    /// All namespaces.
    #[serde(default)]
    pub namespaces: Vec<Arc<NamespaceView>>,
    /// All nodes.
    #[serde(default)]
    pub nodes: Vec<Arc<NodeView>>,
    /// ClusterRoleBindings that bind service accounts (a kubectl `List` may carry them; they tell which operators
    /// are installed, `trust`).
    #[serde(skip)]
    pub bindings: Vec<BindingView>,
}

/// A ClusterRoleBinding as `trust` reads it: when it was made and the service accounts it binds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingView {
    /// The binding's name (for reasons).
    pub name: String,
    /// `metadata.creationTimestamp` in seconds since the epoch (the API server always sets it; a cluster file may
    /// leave it out).
    pub created: Option<i64>,
    /// The `ServiceAccount` subjects, as user names (`system:serviceaccount:<namespace>:<name>`).
    pub service_accounts: Vec<String>,
}

/// The default operator accounts the platform has installed, and those a binding names but whose namespace is newer
/// than every such binding (not trusted: reported, since a GitOps tool that applies cluster-scoped objects first
/// makes exactly that).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstalledOperators {
    pub(crate) accounts: BTreeSet<String>,
    pub(crate) newer_namespaces: BTreeSet<String>,
}

impl InstalledOperators {
    /// Whether `user` is an installed default operator account.
    pub fn contains(&self, user: &str) -> bool {
        self.accounts.contains(user)
    }

    /// The installed accounts, sorted.
    pub fn accounts(&self) -> impl Iterator<Item = &str> {
        self.accounts.iter().map(String::as_str)
    }

    /// Accounts a ClusterRoleBinding binds whose namespace was made after every such binding, sorted: not trusted.
    pub fn bound_before_their_namespace(&self) -> impl Iterator<Item = &str> {
        self.newer_namespaces.iter().map(String::as_str)
    }
}

impl ClusterView {
    /// The namespaces by name (shared, not copied).
    pub fn namespaces_by_name(&self) -> BTreeMap<String, Arc<NamespaceView>> {
        self.namespaces.iter().map(|namespace| (namespace.name.clone(), namespace.clone())).collect()
    }
}

/// A live pod as the webhook's caches know it (for placement ledgers and co-location).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodView {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// Owner reference UID of the controlling owner (e.g. the ReplicaSet), if any.
    pub owner_uid: Option<String>,
    /// Node the pod runs on, if scheduled.
    pub node_name: Option<String>,
    /// Pod labels.
    pub labels: Labels,
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
    /// Whole-unit extended resources the pod requests (names with a `/`, e.g. `nvidia.com/gpu: 2`): the larger of
    /// the containers' sum and any single init container, each container's limit or else its request.
    pub requests: BTreeMap<String, i64>,
}

/// One device request of a DRA claim spec (`devices.requests[i].exactly`, or one `firstAvailable` alternative), as
/// the tenant boundary judges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRequestView {
    /// JSON pointer of its `deviceClassName` below the claim spec, e.g. `/devices/requests/0/exactly/deviceClassName`.
    pub pointer: String,
    /// The DeviceClass it names (empty when the request names none).
    pub device_class: String,
    /// `adminAccess: true`: access to every device of the class, allocated or not.
    pub admin_access: bool,
    /// `allocationMode: All`: every matching device.
    pub all_devices: bool,
    /// Devices asked (`count`, 1 when unset; 0 under `allocationMode: All`).
    pub count: i64,
    /// One alternative of a `firstAvailable` list.
    pub alternative: bool,
}

/// A ResourceClaimTemplate, reduced to its device requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimTemplateView {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Every device request of `spec.spec`.
    pub requests: Vec<DeviceRequestView>,
}

/// ResourceClaimTemplates keyed as [`Snapshot::claim_templates`] holds them, by (namespace, name).
pub fn index_claim_templates(
    templates: impl IntoIterator<Item = Arc<ClaimTemplateView>>,
) -> BTreeMap<(String, String), Arc<ClaimTemplateView>> {
    templates.into_iter().map(|template| ((template.namespace.clone(), template.name.clone()), template)).collect()
}

/// Everything the webhook decides from: an immutable copy of synced caches.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The active TierPolicy (the one the daemon reconciles); `None` until one exists.
    pub policy: Option<Arc<TierPolicy>>,
    /// Namespaces by name (terminating ones are left out).
    pub namespaces: BTreeMap<String, Arc<NamespaceView>>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, Arc<NodeView>>,
    /// LocalQueues that exist: (namespace, name).
    pub local_queues: BTreeSet<(String, String)>,
    /// Live pods carrying a placement or job-type label, for ledgers and co-location.
    pub pods: Vec<Arc<PodView>>,
    /// ReplicaSet UID -> owning Deployment (namespace, name), so pods of one Deployment share a ledger.
    pub replica_set_owners: BTreeMap<String, (String, String)>,
    /// Owners the caches have seen (by uid), to verify ownerReferences; `None` offline (`webhook --offline`,
    /// `explain`, tests without caches), where no owner can be verified.
    pub owners: Option<Arc<crate::owners::OwnerIndex>>,
    /// ResourceClaimTemplates by (namespace, name): the DeviceClasses their requests name, so a pod referencing
    /// one is judged by what it claims (a template written before its namespace joined a tier included).
    pub claim_templates: BTreeMap<(String, String), Arc<ClaimTemplateView>>,
    /// The default operator accounts the platform has installed (`trust`); `policy` already trusts them when it
    /// names no `trustedControllers`, and the reconciler gives the gate's parameters the same.
    pub installed_operators: InstalledOperators,
    /// The daemon's own namespace (always excluded).
    pub own_namespace: Option<String>,
    /// True once every store behind this snapshot has synced; the webhook is not ready before.
    pub synced: bool,
    /// The digest of every policy class, filled on first use by [`Snapshot::gpu_class_digest`]; leave it empty
    /// when building a snapshot (a clone carries it over, so edit the nodes or pods of a fresh one only).
    pub gpu_class_digest_memo: OnceLock<ClassDigest>,
    /// Positions in `pods` by namespace, filled on first use by [`Snapshot::pods_in`]; leave it empty when
    /// building a snapshot, like the digest.
    pub pods_by_namespace_memo: OnceLock<HashMap<String, Vec<usize>>>,
}

impl Snapshot {
    /// The ResourceClaimTemplate `name` of `namespace`, if the caches hold it.
    pub fn claim_template(&self, namespace: &str, name: &str) -> Option<&ClaimTemplateView> {
        self.claim_templates.get(&(namespace.to_owned(), name.to_owned())).map(Arc::as_ref)
    }

    /// The cluster view (namespaces and nodes) for the translation; shares the snapshot's views.
    pub fn cluster_view(&self) -> ClusterView {
        ClusterView {
            namespaces: self.namespaces.values().cloned().collect(),
            nodes: self.nodes.values().cloned().collect(),
            claim_templates: self.claim_templates.values().cloned().collect(),
            // The snapshot's policy already has the installed operators written in (`trust`).
            bindings: Vec::new(),
        }
    }

    /// GPU capacity and running job types of every class of the policy (empty without one), from this
    /// snapshot's nodes and pods. Computed once per snapshot, on the first scored review, so scoring does not walk
    /// every node and pod of the cluster for each admission request.
    pub fn gpu_class_digest(&self) -> &ClassDigest {
        self.gpu_class_digest_memo.get_or_init(|| {
            let classes: Vec<_> = self.policy.iter().flat_map(|policy| &policy.spec.gpu_classes).collect();
            build_class_digest(&classes, self.nodes.values(), &self.pods)
        })
    }

    /// The cached pods of `namespace`, from an index built once per snapshot on first use, so a placed pod's
    /// admission reads its namespace's pods, not every pod of the cluster.
    pub fn pods_in(&self, namespace: &str) -> impl Iterator<Item = &PodView> {
        let index = self.pods_by_namespace_memo.get_or_init(|| {
            let mut index: HashMap<String, Vec<usize>> = HashMap::new();
            for (position, pod) in self.pods.iter().enumerate() {
                index.entry(pod.namespace.clone()).or_default().push(position);
            }
            index
        });
        let positions = index.get(namespace).map_or(&[][..], Vec::as_slice);
        positions.iter().filter_map(|position| self.pods.get(*position).map(AsRef::as_ref))
    }
}
