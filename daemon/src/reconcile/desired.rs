//! What the reconciler applies: the translation's output as dynamic Kueue objects, stamped with tiergate's
//! ownership labels, the owner reference to the policy and a stable hash of the body; no I/O.
//!
//! The calls into the pure core: [`desired_cluster_objects`] (`plan::desired_cluster_scoped`, few objects),
//! [`desired_local_queues`] (`plan::namespace_queues`, lazily, so 10,000 queues are never held at once) and
//! [`policy_problems`] (`validation::validate_policy`). [`desired_objects`] builds everything at once.

use std::hash::Hasher;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::core::DynamicObject;
use serde_json::Value;

use super::kinds::{APPLIED_HASH_LABEL, KueueKind, build_ownership_labels};
use crate::policy::TierPolicy;
use crate::view::{ClusterView, NamespaceView};

/// The translation could not produce objects for this policy.
#[derive(Debug, thiserror::Error)]
pub enum DesiredError {
    /// The translation rejected the policy or the cluster view.
    #[error("failed to translate the policy into Kueue objects: {0}")]
    Translate(String),
    /// A translated object is not a Kueue kind tiergate owns.
    #[error("failed to recognize translated object {name}: kind {kind:?} is not one tiergate applies")]
    UnknownKind {
        /// Object name.
        name: String,
        /// Its kind.
        kind: String,
    },
}

impl DesiredError {
    /// Fixed reason for metrics, conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Translate(_) => "translate_policy",
            Self::UnknownKind { .. } => "unknown_kind",
        }
    }
}

/// One object to apply: its kind and its full body (ownership stamped, hash labelled).
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredObject {
    /// Kueue kind.
    pub kind: KueueKind,
    /// The body sent with server-side apply.
    pub object: DynamicObject,
}

/// Everything the policy wants to exist, in apply order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DesiredSet {
    /// Objects in apply order (flavors, priority classes, checks, cluster queues, local queues).
    pub objects: Vec<DesiredObject>,
}

/// The translation's objects for `policy` over `view`, as dynamic objects (all of them at once: for tests,
/// benches and small views; the reconciler streams LocalQueues with [`desired_local_queues`]).
pub fn desired_objects(policy: &TierPolicy, view: &ClusterView) -> Result<Vec<DynamicObject>, DesiredError> {
    crate::plan::desired(policy, view).to_dynamic_objects().map_err(|error| DesiredError::Translate(error.to_string()))
}

/// The translation's cluster-scoped objects for `policy` (everything but LocalQueues), as dynamic objects.
pub fn desired_cluster_objects(policy: &TierPolicy) -> Result<Vec<DynamicObject>, DesiredError> {
    crate::plan::desired_cluster_scoped(policy)
        .to_dynamic_objects()
        .map_err(|error| DesiredError::Translate(error.to_string()))
}

/// The desired LocalQueues of `policy` over `namespaces`, stamped, built one at a time in namespace order (a
/// namespace the translation skips yields nothing here; its note is in `plan::desired`).
pub fn desired_local_queues<'a>(
    policy: &'a TierPolicy,
    namespaces: impl IntoIterator<Item = &'a NamespaceView>,
) -> impl Iterator<Item = Result<DesiredObject, DesiredError>> + 'a {
    let stamp = Stamp::of(policy);
    crate::plan::namespace_queues(policy, namespaces).filter_map(move |decision| match decision {
        crate::plan::NamespaceQueue::Queue(queue) => {
            Some(build_dynamic_object(&queue).and_then(|object| stamp.build_stamped(object)))
        }
        crate::plan::NamespaceQueue::Skipped(_) => None,
    })
}

/// Typed objects (anything serializing to a Kubernetes object with `apiVersion` and `kind`, e.g. the
/// `tiergate-kueue` structs) as dynamic objects, for [`desired_objects`].
pub fn build_dynamic_objects<T: serde::Serialize>(
    objects: impl IntoIterator<Item = T>,
) -> Result<Vec<DynamicObject>, DesiredError> {
    objects.into_iter().map(|object| build_dynamic_object(&object)).collect()
}

/// One typed object as a dynamic object.
pub fn build_dynamic_object<T: serde::Serialize>(object: &T) -> Result<DynamicObject, DesiredError> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|error| DesiredError::Translate(format!("failed to convert a translated object: {error}")))
}

/// The policy's problems (empty when valid), one message per problem naming the field and the fix.
pub fn policy_problems(policy: &TierPolicy) -> Vec<String> {
    match crate::validation::validate_policy(policy) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}

/// The translation's objects, stamped as owned by `policy` and sorted in apply order.
/// `gate_owner`, when given, owns the in-server gate's objects instead of the policy (`--gate-owner`: the webhook
/// registration, so the garbage collector removes the gate with it).
pub fn build_desired_set(
    policy: &TierPolicy,
    objects: Vec<DynamicObject>,
    gate_owner: Option<&OwnerReference>,
) -> Result<DesiredSet, DesiredError> {
    let stamp = Stamp { gate_owner: gate_owner.cloned(), ..Stamp::of(policy) };
    let mut stamped =
        objects.into_iter().map(|object| stamp.build_stamped(object)).collect::<Result<Vec<_>, DesiredError>>()?;
    stamped.sort_by_key(|desired| desired.kind);
    Ok(DesiredSet { objects: stamped })
}

/// Objects for a cluster other than the policy's (a fleet's worker), stamped with the ownership labels of
/// `policy_name` and the hash label but no owner reference: the worker does not know the policy's uid, and its
/// garbage collector would delete an object owned by an unknown uid. Sorted in apply order.
pub fn build_worker_desired_set(policy_name: &str, objects: Vec<DynamicObject>) -> Result<DesiredSet, DesiredError> {
    let stamp = Stamp { labels: build_ownership_labels(policy_name), owner: None, gate_owner: None };
    let mut stamped =
        objects.into_iter().map(|object| stamp.build_stamped(object)).collect::<Result<Vec<_>, DesiredError>>()?;
    stamped.sort_by_key(|desired| desired.kind);
    Ok(DesiredSet { objects: stamped })
}

/// What every object of one policy is stamped with: the ownership labels and the owner reference.
#[derive(Clone, Debug)]
struct Stamp {
    labels: std::collections::BTreeMap<String, String>,
    owner: Option<OwnerReference>,
    /// The owner of the gate's objects, when not `owner`.
    gate_owner: Option<OwnerReference>,
}

impl Stamp {
    fn of(policy: &TierPolicy) -> Self {
        Self {
            labels: build_ownership_labels(policy.meta().name.as_deref().unwrap_or_default()),
            owner: build_owner_reference(policy),
            gate_owner: None,
        }
    }

    /// `object` with ownership labels, owner reference and the hash label of the result.
    fn build_stamped(&self, mut object: DynamicObject) -> Result<DesiredObject, DesiredError> {
        let Some(kind) = KueueKind::of(&object) else {
            return Err(DesiredError::UnknownKind {
                name: object.metadata.name.clone().unwrap_or_default(),
                kind: object.types.as_ref().map(|types| types.kind.clone()).unwrap_or_default(),
            });
        };
        object.metadata.labels.get_or_insert_default().extend(self.labels.clone());
        let owner = match &self.gate_owner {
            Some(gate_owner) if kind.is_gate() => Some(gate_owner),
            _ => self.owner.as_ref(),
        };
        if let Some(owner) = owner {
            object.metadata.owner_references = Some(vec![owner.clone()]);
        }
        object.metadata.labels.get_or_insert_default().remove(APPLIED_HASH_LABEL);
        let hash = build_body_hash(&object);
        object.metadata.labels.get_or_insert_default().insert(APPLIED_HASH_LABEL.to_owned(), hash);
        Ok(DesiredObject { kind, object })
    }
}

/// The owner reference that lets Kubernetes' garbage collector remove every owned object with the policy.
fn build_owner_reference(policy: &TierPolicy) -> Option<OwnerReference> {
    let meta = policy.meta();
    Some(OwnerReference {
        api_version: TierPolicy::api_version(&()).into_owned(),
        kind: TierPolicy::kind(&()).into_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: None,
    })
}

/// A stable (FNV-1a, key-order independent) hash of an object's body, hex encoded.
pub fn build_body_hash(object: &DynamicObject) -> String {
    let mut hasher = fnv::FnvHasher::default();
    if let Ok(value) = serde_json::to_value(object) {
        hash_value(&value, &mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

fn hash_value(value: &Value, hasher: &mut fnv::FnvHasher) {
    match value {
        Value::Null => hasher.write_u8(0),
        Value::Bool(flag) => hasher.write_u8(if *flag { 2 } else { 1 }),
        Value::Number(number) => {
            hasher.write_u8(3);
            hasher.write(number.to_string().as_bytes());
        }
        Value::String(text) => {
            hasher.write_u8(4);
            hasher.write(text.as_bytes());
            hasher.write_u8(0xff);
        }
        Value::Array(items) => {
            hasher.write_u8(5);
            hasher.write_usize(items.len());
            items.iter().for_each(|item| hash_value(item, hasher));
        }
        Value::Object(map) => {
            hasher.write_u8(6);
            hasher.write_usize(map.len());
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                hasher.write(key.as_bytes());
                hasher.write_u8(0xff);
                if let Some(item) = map.get(key) {
                    hash_value(item, hasher);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{SAMPLE_POLICY, load_policy};
    use crate::view::NamespaceView;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn sample_view() -> ClusterView {
        ClusterView {
            namespaces: vec![std::sync::Arc::new(NamespaceView {
                name: "team-a".to_owned(),
                labels: BTreeMap::from([("tenant.kubenexus.io/tier".to_owned(), "gold".to_owned())]).into(),
                ..NamespaceView::default()
            })],
            ..ClusterView::default()
        }
    }

    #[test]
    fn desired_set_is_in_apply_order_and_stamped_with_ownership() {
        assert!(SAMPLE_POLICY.contains("TierPolicy"));
        let policy = load_policy(None).unwrap();
        let objects = desired_objects(&policy, &sample_view()).unwrap();
        let set = build_desired_set(&policy, objects, None).unwrap();
        let kinds: Vec<KueueKind> = set.objects.iter().map(|desired| desired.kind).collect();
        let mut sorted = kinds.clone();
        sorted.sort();
        assert_eq!(kinds, sorted);
        assert_eq!(kinds.last(), Some(&KueueKind::MutatingAdmissionPolicyBinding));
        assert!(kinds.contains(&KueueKind::LocalQueue));
        for desired in &set.objects {
            let labels = desired.object.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels.get("tiergate.io/policy").map(String::as_str), Some("default"));
            assert!(labels.contains_key(APPLIED_HASH_LABEL));
            assert!(desired.object.metadata.annotations.is_none(), "no empty annotation map is sent");
        }
    }

    #[test]
    fn typed_objects_become_dynamic_objects_without_nulls() {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Flavor {
            api_version: &'static str,
            kind: &'static str,
            metadata: kube::core::ObjectMeta,
        }
        let flavor = Flavor {
            api_version: "kueue.x-k8s.io/v1beta2",
            kind: "ResourceFlavor",
            metadata: kube::core::ObjectMeta { name: Some("h100".to_owned()), ..Default::default() },
        };
        let objects = build_dynamic_objects([flavor]).unwrap();
        assert_eq!(KueueKind::of(&objects[0]), Some(KueueKind::ResourceFlavor));
        assert!(!serde_json::to_string(&objects[0]).unwrap().contains("null"));
    }

    #[test]
    fn body_hash_ignores_key_order_but_not_values() {
        let first: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "a": 1, "b": 2}))
                .unwrap();
        let reordered: DynamicObject =
            serde_json::from_value(json!({"b": 2, "a": 1, "kind": "X", "apiVersion": "v1", "metadata": {"name": "a"}}))
                .unwrap();
        let changed: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "a": 1, "b": 3}))
                .unwrap();
        assert_eq!(build_body_hash(&first), build_body_hash(&reordered));
        assert_ne!(build_body_hash(&first), build_body_hash(&changed));
    }

    #[test]
    fn unknown_gpu_class_is_a_problem_naming_the_field() {
        let mut policy = load_policy(None).unwrap();
        policy.spec.tiers[0].gpu_class = "b200".to_owned();
        let problems = policy_problems(&policy);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("spec.tiers[0].gpuClass"), "{problems:?}");
    }
}
