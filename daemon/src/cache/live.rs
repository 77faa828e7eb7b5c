//! The compact form in which the watch caches keep live Kueue objects: only what the reconciler reads (identity,
//! labels, owners, the compared body as JSON text, LocalQueue workload counts); no I/O.
//!
//! A stripped `DynamicObject` costs ~3 kB per LocalQueue (full `ObjectMeta`, `serde_json` maps, and a store key
//! carrying its own `ApiResource`); a [`LiveObject`] keeps a few hundred bytes, and its store key carries only
//! the `Copy` [`KueueKind`]. 10,000 tiered namespaces mean 10,000 cached LocalQueues, so this is what keeps the
//! daemon under its memory budget (issue 3).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::DynamicObject;
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher;
use serde_json::Value;

use super::kinds::{KueueKind, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POLICY_LABEL};

/// Live Kueue objects as the watches show them, per kind (LocalQueues: all of them; other kinds: owned ones),
/// in the compact form of [`LiveObject`].
pub type OwnedStores = BTreeMap<KueueKind, Store<LiveObject>>;

/// Annotation kubectl copies whole objects into; never kept.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A live Kueue object as the reconciler reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveObject {
    /// Its kind (also the store key's dynamic type).
    pub kind: KueueKind,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (LocalQueues only).
    pub namespace: Option<String>,
    /// `metadata.uid` (a delete precondition).
    pub uid: Option<String>,
    /// `metadata.resourceVersion` (a delete precondition).
    pub resource_version: Option<String>,
    /// `metadata.labels` as `key=value` lines sorted by key, one allocation instead of two per label (label
    /// keys and values cannot contain `=` or line breaks); read with [`Self::label`] and [`Self::labels`].
    labels: Box<str>,
    /// `metadata.annotations` without kubectl's last-applied copy (usually empty: no allocation).
    pub annotations: BTreeMap<String, String>,
    /// `metadata.ownerReferences` as JSON text (empty when there are none), one allocation instead of five per
    /// owner; read with [`Self::owner_references`].
    owners: Box<str>,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Everything but `apiVersion`, `kind`, `metadata` and `status`, as JSON text (parsed only when compared).
    pub body: Box<str>,
    /// LocalQueue `status` workload counts (zero for other kinds).
    pub workloads: WorkloadCounts,
    /// ClusterQueue `status.flavorsReservation` (empty for other kinds): what its workloads hold per flavor.
    pub reserved: FlavorReservations,
}

/// What the reconciler reads from a LocalQueue's `spec`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueueSpec {
    stop_policy: Option<String>,
    cluster_queue: Option<String>,
}

/// Quota held per flavor and resource, in milli-units: a ClusterQueue's `status.flavorsReservation` (`total`),
/// which counts every workload holding quota, admitted or waiting for its admission checks. Zero entries are
/// left out, so an empty map means the queue holds nothing.
pub type FlavorReservations = BTreeMap<String, BTreeMap<String, i128>>;

/// `status.flavorsReservation` of a ClusterQueue's `status`.
fn read_reservations(status: Option<&Value>) -> FlavorReservations {
    let mut reserved = FlavorReservations::new();
    let flavors = status.and_then(|status| status.get("flavorsReservation")).and_then(Value::as_array);
    for flavor in flavors.into_iter().flatten() {
        let Some(name) = flavor.get("name").and_then(Value::as_str) else { continue };
        let resources = flavor.get("resources").and_then(Value::as_array);
        for resource in resources.into_iter().flatten() {
            let total = resource.get("total").and_then(crate::plan::quota::quantity_millis);
            if let (Some(resource), Some(total)) = (resource.get("name").and_then(Value::as_str), total)
                && total != 0
            {
                reserved.entry(name.to_owned()).or_default().insert(resource.to_owned(), total);
            }
        }
    }
    reserved
}

/// A LocalQueue's `status.pendingWorkloads`, `reservingWorkloads` and `admittedWorkloads` (missing reads as 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WorkloadCounts {
    /// `status.pendingWorkloads`.
    pub pending: i32,
    /// `status.reservingWorkloads`.
    pub reserving: i32,
    /// `status.admittedWorkloads`.
    pub admitted: i32,
}

impl LiveObject {
    /// The compact form of `object` as a watch or a read returns it.
    pub fn from_dynamic(kind: KueueKind, object: DynamicObject) -> Self {
        let DynamicObject { metadata, data, .. } = object;
        let mut body = match data {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let status = body.remove("status");
        let count = |field: &str| {
            status
                .as_ref()
                .and_then(|status| status.get(field))
                .and_then(Value::as_i64)
                .map_or(0, |value| i32::try_from(value).unwrap_or(i32::MAX))
        };
        let workloads = if kind == KueueKind::LocalQueue {
            WorkloadCounts {
                pending: count("pendingWorkloads"),
                reserving: count("reservingWorkloads"),
                admitted: count("admittedWorkloads"),
            }
        } else {
            WorkloadCounts::default()
        };
        let reserved = if kind == KueueKind::ClusterQueue {
            read_reservations(status.as_ref())
        } else {
            FlavorReservations::new()
        };
        let mut annotations = metadata.annotations.unwrap_or_default();
        annotations.remove(LAST_APPLIED_ANNOTATION);
        Self {
            kind,
            name: metadata.name.unwrap_or_default(),
            namespace: metadata.namespace,
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            labels: metadata
                .labels
                .unwrap_or_default()
                .into_iter()
                .map(|(key, value)| format!("{key}={value}\n"))
                .collect::<String>()
                .into_boxed_str(),
            annotations,
            owners: metadata
                .owner_references
                .filter(|owners| !owners.is_empty())
                .map(|owners| serde_json::to_string(&owners).unwrap_or_default())
                .unwrap_or_default()
                .into_boxed_str(),
            deleting: metadata.deletion_timestamp.is_some(),
            // Serializing a `Value` map cannot fail (its keys are strings).
            body: serde_json::to_string(&body).unwrap_or_default().into_boxed_str(),
            workloads,
            reserved,
        }
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels().find(|(candidate, _)| *candidate == key).map(|(_, value)| value)
    }

    /// Every label as `(key, value)`, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.lines().filter_map(|line| line.split_once('='))
    }

    /// `metadata.ownerReferences` (parsed from the stored text; empty if none).
    pub fn owner_references(&self) -> Vec<OwnerReference> {
        if self.owners.is_empty() {
            return Vec::new();
        }
        serde_json::from_str(&self.owners).unwrap_or_default()
    }

    /// The stored labels and owner references, for change fingerprints.
    pub fn metadata_text(&self) -> (&str, &str) {
        (&self.labels, &self.owners)
    }

    /// The compared body as JSON (`Value::Null` if the stored text does not parse, which then reads as drift).
    pub fn body_value(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// `spec.stopPolicy`, if set.
    pub fn stop_policy(&self) -> Option<String> {
        self.queue_spec()?.stop_policy
    }

    /// A LocalQueue's `spec.clusterQueue`.
    pub fn cluster_queue(&self) -> Option<String> {
        self.queue_spec()?.cluster_queue
    }

    /// The LocalQueue fields read from the stored body.
    fn queue_spec(&self) -> Option<QueueSpec> {
        #[derive(serde::Deserialize)]
        struct Body {
            spec: Option<QueueSpec>,
        }
        serde_json::from_str::<Body>(&self.body).ok()?.spec
    }

    /// Whether it carries both ownership labels for `policy_name`.
    pub fn is_owned_by(&self, policy_name: &str) -> bool {
        self.label(MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE) && self.label(POLICY_LABEL) == Some(policy_name)
    }

    /// `namespace/name` or `name`: how objects are named in logs, events and status.
    pub fn display_name(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{namespace}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl Lookup for LiveObject {
    type DynamicType = KueueKind;

    fn kind(kind: &KueueKind) -> Cow<'_, str> {
        Cow::Borrowed(kind.name())
    }

    fn group(kind: &KueueKind) -> Cow<'_, str> {
        Cow::Borrowed(kind.group())
    }

    fn version(kind: &KueueKind) -> Cow<'_, str> {
        Cow::Borrowed(kind.version())
    }

    fn plural(kind: &KueueKind) -> Cow<'_, str> {
        Cow::Borrowed(kind.plural())
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.namespace.as_deref().map(Cow::Borrowed)
    }

    /// `None`, so store keys do not copy it (the object itself carries it; keys compare without it anyway).
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    /// `None`, for the same reason as [`Self::resource_version`].
    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

/// A watch event over `DynamicObject`s as the same event over [`LiveObject`]s (feeds the Kueue reflectors).
pub fn build_live_event(kind: KueueKind, event: watcher::Event<DynamicObject>) -> watcher::Event<LiveObject> {
    super::decode::map_watch_event(event, |object| LiveObject::from_dynamic(kind, object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn local_queue(status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "tiergate-gold", "namespace": "team-a", "uid": "u1", "resourceVersion": "7",
                         "labels": {"tiergate.io/policy": "default", "app.kubernetes.io/managed-by": "tiergate"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                         "managedFields": [{"manager": "tiergate"}],
                         "ownerReferences": [{"apiVersion": "tiergate.io/v1alpha1", "kind": "TierPolicy",
                                              "name": "default", "uid": "p1", "controller": true}]},
            "spec": {"clusterQueue": "tiergate-gold", "stopPolicy": "Hold"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn live_local_queue_keeps_identity_labels_owner_spec_and_workload_counts_only() {
        let status = json!({"pendingWorkloads": 2, "admittedWorkloads": 1, "conditions": [{"type": "Active"}]});
        let live = LiveObject::from_dynamic(KueueKind::LocalQueue, local_queue(status));
        assert_eq!(live.display_name(), "team-a/tiergate-gold");
        assert_eq!((live.uid.as_deref(), live.resource_version.as_deref()), (Some("u1"), Some("7")));
        assert!(live.is_owned_by("default"));
        assert!(!live.is_owned_by("other"));
        assert!(live.annotations.is_empty(), "kubectl's last-applied copy is dropped");
        assert_eq!(live.owner_references()[0].uid, "p1");
        let labels: Vec<(&str, &str)> = live.labels().collect();
        assert_eq!(labels, vec![("app.kubernetes.io/managed-by", "tiergate"), ("tiergate.io/policy", "default")]);
        assert_eq!(live.body_value(), json!({"spec": {"clusterQueue": "tiergate-gold", "stopPolicy": "Hold"}}));
        assert_eq!(live.stop_policy().as_deref(), Some("Hold"));
        assert_eq!(live.cluster_queue().as_deref(), Some("tiergate-gold"));
        assert_eq!(live.workloads, WorkloadCounts { pending: 2, reserving: 0, admitted: 1 });
    }

    #[test]
    fn a_live_cluster_queue_keeps_what_its_workloads_hold_per_flavor_and_nothing_of_zero() {
        let queue: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "tiergate-gold"},
            "spec": {"resourceGroups": []},
            "status": {"flavorsReservation": [
                {"name": "h100-1a2b3c4d", "resources": [{"name": "nvidia.com/gpu", "total": "3", "borrowed": "0"},
                                                       {"name": "cpu", "total": "1500m"}]},
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "0"}]},
            ]},
        }))
        .unwrap();
        let live = LiveObject::from_dynamic(KueueKind::ClusterQueue, queue);
        let gpus: BTreeMap<String, i128> = [("cpu".to_owned(), 1500), ("nvidia.com/gpu".to_owned(), 3000)].into();
        assert_eq!(live.reserved, [("h100-1a2b3c4d".to_owned(), gpus)].into());
        assert_eq!(live.body_value(), json!({"spec": {"resourceGroups": []}}), "status stays out of the body");
        let local = LiveObject::from_dynamic(KueueKind::LocalQueue, local_queue(json!({"flavorsReservation": []})));
        assert!(local.reserved.is_empty());
    }

    #[test]
    fn store_keys_carry_no_resource_version_or_uid() {
        let live = LiveObject::from_dynamic(KueueKind::LocalQueue, local_queue(json!({})));
        let key = live.to_object_ref(KueueKind::LocalQueue);
        assert_eq!((key.name.as_str(), key.namespace.as_deref()), ("tiergate-gold", Some("team-a")));
        assert!(key.extra.uid.is_none() && key.extra.resource_version.is_none());
    }

    #[test]
    fn watch_events_keep_their_variant() {
        let event = build_live_event(KueueKind::LocalQueue, watcher::Event::Delete(local_queue(json!({}))));
        assert!(matches!(event, watcher::Event::Delete(live) if live.name == "tiergate-gold"));
        assert!(matches!(build_live_event(KueueKind::LocalQueue, watcher::Event::InitDone), watcher::Event::InitDone));
    }
}
