//! Lean decoding of what the caches watch: namespaces and nodes are deserialized as `NamespaceLite` / `NodeLite`
//! (managedFields, images and the like are never materialized) and, like pods, turned into the core's views with
//! reflector store keys; no I/O.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Namespace, Node, Pod, PodSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::ObjectMeta;
use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;

use crate::labels::Labels;
use crate::trust::BindingView;
use crate::view::{ClaimTemplateView, NamespaceView, NodeView, PodView};

/// Annotation kubectl copies whole objects into; never kept in caches.
pub(crate) const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A decoded namespace as the core sees it (nothing is copied: the decoded fields move).
pub fn build_namespace_view(namespace: NamespaceLite) -> NamespaceView {
    let ObjectMeta { name, creation_timestamp, deletion_timestamp, .. } = namespace.metadata;
    NamespaceView {
        name: name.unwrap_or_default(),
        labels: namespace.labels,
        terminating: deletion_timestamp.is_some(),
        created: creation_timestamp.map(|time| time.0.as_second()),
    }
}

/// A decoded node as the core sees it; allocatable keeps the integer quantities (GPUs and other devices).
pub fn build_node_view(node: NodeLite) -> NodeView {
    let allocatable = node
        .status
        .allocatable
        .into_iter()
        .filter_map(|(name, quantity)| Some((name, quantity.0.parse::<i64>().ok()?)))
        .collect();
    NodeView {
        name: node.metadata.name.unwrap_or_default(),
        labels: node.labels,
        taints: node.spec.taints,
        allocatable,
    }
}

/// A pod as the webhook's ledgers and co-location scoring see it; the rest of the pod is dropped on arrival.
pub(crate) fn build_pod_view(pod: Pod) -> PodView {
    let ObjectMeta { name, namespace, uid, labels, annotations, owner_references, .. } = pod.metadata;
    let mut annotations = annotations.unwrap_or_default();
    annotations.remove(LAST_APPLIED_ANNOTATION);
    PodView {
        namespace: namespace.unwrap_or_default(),
        name: name.unwrap_or_default(),
        uid: uid.unwrap_or_default(),
        owner_uid: owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|owner| owner.controller == Some(true))
            .map(|owner| owner.uid),
        requests: pod.spec.as_ref().map(build_extended_requests).unwrap_or_default(),
        node_name: pod.spec.and_then(|spec| spec.node_name),
        labels: labels.map(Labels::from).unwrap_or_default(),
        annotations,
    }
}

/// Whole-unit extended resources (names with a `/`) a pod spec requests, the way the scheduler counts them: the
/// larger of the containers' sum and any single init container; a container's limit, else its request.
pub(crate) fn build_extended_requests(spec: &PodSpec) -> BTreeMap<String, i64> {
    fn container_requests(container: &Container) -> impl Iterator<Item = (&String, i64)> {
        let resources = container.resources.as_ref();
        let limits = resources.and_then(|resources| resources.limits.as_ref());
        let requests = resources.and_then(|resources| resources.requests.as_ref());
        limits
            .into_iter()
            .flatten()
            .chain(
                requests.into_iter().flatten().filter(move |(name, _)| limits.is_none_or(|l| !l.contains_key(*name))),
            )
            .filter(|(name, _)| name.contains('/'))
            .filter_map(|(name, quantity)| Some((name, quantity.0.parse::<i64>().ok()?)))
    }
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for (name, count) in spec.containers.iter().flat_map(container_requests) {
        *total.entry(name.clone()).or_default() += count;
    }
    for (name, count) in spec.init_containers.iter().flatten().flat_map(container_requests) {
        let entry = total.entry(name.clone()).or_default();
        *entry = (*entry).max(count);
    }
    total
}

/// A watch event with its object converted (kube-runtime's `Event` has no map of its own).
pub fn map_watch_event<A, B>(event: watcher::Event<A>, convert: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(convert(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(convert(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(convert(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A core view held in a reflector store. The views are `tiergate_core` types, so the store's `Lookup` is
/// implemented on this wrapper; the inner `Arc` is the one snapshots share.
#[derive(Clone, Debug)]
pub struct Cached<T>(pub Arc<T>);

impl<T> Cached<T> {
    /// A freshly decoded view, ready for a store.
    pub fn new_view(view: T) -> Self {
        Self(Arc::new(view))
    }
}

impl<T> std::ops::Deref for Cached<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The views inside store entries, for a snapshot.
pub fn unwrap_cached<T>(entries: Vec<Arc<Cached<T>>>) -> Vec<Arc<T>> {
    entries.iter().map(|entry| entry.0.clone()).collect()
}

/// Store keys for views: kind and name from the Kubernetes type they were decoded from; no resourceVersion or
/// UID is copied into the key (the store never reads them).
macro_rules! impl_view_lookup {
    ($view:ty, $kube:ty, |$object:ident| $namespace:expr) => {
        impl Lookup for Cached<$view> {
            type DynamicType = ();

            fn kind(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::kind(dyntype)
            }
            fn group(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::group(dyntype)
            }
            fn version(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::version(dyntype)
            }
            fn plural(dyntype: &()) -> Cow<'_, str> {
                <$kube as kube::Resource>::plural(dyntype)
            }
            fn name(&self) -> Option<Cow<'_, str>> {
                Some(Cow::Borrowed(self.0.name.as_str()))
            }
            fn namespace(&self) -> Option<Cow<'_, str>> {
                let $object = &self.0;
                $namespace
            }
            fn resource_version(&self) -> Option<Cow<'_, str>> {
                None
            }
            fn uid(&self) -> Option<Cow<'_, str>> {
                None
            }
        }
    };
}

impl_view_lookup!(NamespaceView, Namespace, |_view| None);
impl_view_lookup!(BindingView, k8s_openapi::api::rbac::v1::ClusterRoleBinding, |_view| None);
impl_view_lookup!(NodeView, Node, |_view| None);
impl_view_lookup!(PodView, Pod, |pod| Some(Cow::Borrowed(pod.namespace.as_str())));
impl_view_lookup!(ClaimTemplateView, k8s_openapi::api::resource::v1::ResourceClaimTemplate, |template| Some(
    Cow::Borrowed(template.namespace.as_str())
));

/// Object metadata as the caches decode it: name, namespace, labels, deletion time and resourceVersion only, so
/// managedFields, annotations (kubectl's last-applied copy) and the rest are never materialized. The watcher needs
/// the resourceVersion of every event to resume from it: without it each change would fail the watch and re-list.
/// The labels are decoded straight into the views' interned `Labels`.
#[derive(Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<Labels>,
    #[serde(skip_serializing_if = "Option::is_none")]
    creation_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<String>,
}

impl LeanMeta {
    /// The metadata kube's watcher reads, and the labels apart.
    fn split(self) -> (ObjectMeta, Labels) {
        let metadata = ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            creation_timestamp: self.creation_timestamp,
            deletion_timestamp: self.deletion_timestamp,
            resource_version: self.resource_version,
            ..ObjectMeta::default()
        };
        (metadata, self.labels.unwrap_or_default())
    }

    fn join(metadata: ObjectMeta, labels: Labels) -> Self {
        Self {
            name: metadata.name,
            namespace: metadata.namespace,
            labels: (!labels.is_empty()).then_some(labels),
            creation_timestamp: metadata.creation_timestamp,
            deletion_timestamp: metadata.deletion_timestamp,
            resource_version: metadata.resource_version,
        }
    }
}

/// A namespace on the wire (metadata only).
#[derive(Clone, Default, serde::Deserialize, serde::Serialize)]
struct LeanNamespace {
    #[serde(default)]
    metadata: LeanMeta,
}

/// A namespace as tiergate reads it (metadata-only watch): name, labels, creation and deletion times,
/// resourceVersion.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(from = "LeanNamespace", into = "LeanNamespace")]
pub struct NamespaceLite {
    /// Name, creation and deletion times and resourceVersion only (the labels are in `labels`).
    pub metadata: ObjectMeta,
    /// The namespace's labels, interned.
    pub labels: Labels,
}

impl From<LeanNamespace> for NamespaceLite {
    fn from(lean: LeanNamespace) -> Self {
        let (metadata, labels) = lean.metadata.split();
        Self { metadata, labels }
    }
}

impl From<NamespaceLite> for LeanNamespace {
    fn from(namespace: NamespaceLite) -> Self {
        Self { metadata: LeanMeta::join(namespace.metadata, namespace.labels) }
    }
}

impl kube::Resource for NamespaceLite {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        <Namespace as kube::Resource>::plural(dt)
    }
    fn metadata_api() -> bool {
        true
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A node on the wire: only labels, taints and allocatable are decoded.
#[derive(Clone, Default, serde::Deserialize, serde::Serialize)]
struct LeanNode {
    #[serde(default)]
    metadata: LeanMeta,
    #[serde(default)]
    spec: NodeLiteSpec,
    #[serde(default)]
    status: NodeLiteStatus,
}

/// A node as tiergate reads it: deserialized from the Node API with only labels, taints and allocatable, so a
/// node's images, conditions, annotations and managedFields are never materialized (they dominate its size).
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(from = "LeanNode", into = "LeanNode")]
pub struct NodeLite {
    /// Name and resourceVersion only (the labels are in `labels`).
    pub metadata: ObjectMeta,
    /// The node's labels, interned.
    pub labels: Labels,
    /// `spec.taints` only.
    pub spec: NodeLiteSpec,
    /// `status.allocatable` only.
    pub status: NodeLiteStatus,
}

impl From<LeanNode> for NodeLite {
    fn from(lean: LeanNode) -> Self {
        let (metadata, labels) = lean.metadata.split();
        Self { metadata, labels, spec: lean.spec, status: lean.status }
    }
}

impl From<NodeLite> for LeanNode {
    fn from(node: NodeLite) -> Self {
        Self { metadata: LeanMeta::join(node.metadata, node.labels), spec: node.spec, status: node.status }
    }
}

/// The part of `NodeSpec` tiergate reads.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct NodeLiteSpec {
    /// Node taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// The part of `NodeStatus` tiergate reads.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct NodeLiteStatus {
    /// Allocatable resources.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
}

impl kube::Resource for NodeLite {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        <Node as kube::Resource>::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
