//! Fields the API server drops from what tiergate applies (a Kueue CRD older than the policy's features prunes
//! them): remembered per object and applied body, so the drift they leave is reported once and the object is not
//! re-applied on every reconcile; pure, no I/O.

use std::collections::BTreeMap;

use super::kinds::KueueKind;

/// One object tiergate applies: its kind, namespace (LocalQueues) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Its kind.
    pub kind: KueueKind,
    /// Its namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(formatter, "{} {namespace}/{}", self.kind.name(), self.name),
            None => write!(formatter, "{} {}", self.kind.name(), self.name),
        }
    }
}

/// What the API server dropped from one applied body.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dropped {
    /// The applied body's hash (`tiergate.io/applied-hash`): a changed policy renders a new body, applied afresh.
    hash: Option<String>,
    /// The paths of the fields the API server did not keep.
    paths: Vec<String>,
}

/// Every object whose last apply came back without some of its fields.
#[derive(Debug, Default)]
pub struct DroppedFields {
    objects: BTreeMap<ObjectKey, Dropped>,
}

/// What an apply's outcome changed in [`DroppedFields`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DroppedChange {
    /// Nothing: the same fields were already known dropped, or none were and none are.
    Same,
    /// The object now loses fields it did not, or other ones: worth one warning.
    Newly,
    /// The object now keeps every field it lost before.
    Converged,
}

impl DroppedFields {
    /// Records the outcome of applying the body hashed `hash` to `key`: `paths` are the fields the API server's
    /// answer lacked (empty when it kept everything).
    pub fn record(&mut self, key: ObjectKey, hash: Option<String>, paths: Vec<String>) -> DroppedChange {
        if paths.is_empty() {
            return if self.objects.remove(&key).is_some() { DroppedChange::Converged } else { DroppedChange::Same };
        }
        let dropped = Dropped { hash, paths };
        match self.objects.insert(key, dropped.clone()) {
            Some(previous) if previous == dropped => DroppedChange::Same,
            _ => DroppedChange::Newly,
        }
    }

    /// The fields known dropped from `key`'s body hashed `hash` (empty when none are, or the body changed since).
    pub fn known(&self, key: &ObjectKey, hash: Option<&str>) -> &[String] {
        match self.objects.get(key) {
            Some(dropped) if dropped.hash.as_deref() == hash => &dropped.paths,
            _ => &[],
        }
    }

    /// Forgets the objects `keep` says are no longer applied; true when any was forgotten.
    pub fn retain(&mut self, keep: impl Fn(&ObjectKey) -> bool) -> bool {
        let before = self.objects.len();
        self.objects.retain(|key, _| keep(key));
        self.objects.len() != before
    }

    /// One line naming each object and its dropped fields; `None` when every object keeps all of them.
    pub fn describe(&self) -> Option<String> {
        if self.objects.is_empty() {
            return None;
        }
        let objects: Vec<String> =
            self.objects.iter().map(|(key, dropped)| format!("{key}: {}", dropped.paths.join(", "))).collect();
        Some(objects.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str) -> ObjectKey {
        ObjectKey { kind: KueueKind::ClusterQueue, namespace: None, name: name.to_owned() }
    }

    #[test]
    fn dropped_fields_are_news_once_per_body_and_converge_when_kept() {
        let mut dropped = DroppedFields::default();
        let paths = vec!["spec.admissionScope".to_owned()];
        assert_eq!(dropped.record(queue("gold"), Some("h1".into()), paths.clone()), DroppedChange::Newly);
        assert_eq!(dropped.record(queue("gold"), Some("h1".into()), paths.clone()), DroppedChange::Same);
        assert_eq!(dropped.known(&queue("gold"), Some("h1")), paths.as_slice());
        assert!(dropped.known(&queue("gold"), Some("h2")).is_empty(), "a new body is applied afresh");
        assert_eq!(dropped.describe().unwrap(), "ClusterQueue gold: spec.admissionScope");
        assert_eq!(dropped.record(queue("gold"), Some("h2".into()), paths), DroppedChange::Newly);
        assert_eq!(dropped.record(queue("gold"), Some("h2".into()), Vec::new()), DroppedChange::Converged);
        assert_eq!(dropped.record(queue("gold"), Some("h2".into()), Vec::new()), DroppedChange::Same);
        assert!(dropped.describe().is_none());
    }

    #[test]
    fn objects_no_longer_applied_are_forgotten() {
        let mut dropped = DroppedFields::default();
        dropped.record(queue("gold"), None, vec!["spec.x".to_owned()]);
        dropped.record(queue("bronze"), None, vec!["spec.y".to_owned()]);
        assert!(dropped.retain(|key| key.name == "gold"));
        assert!(!dropped.retain(|key| key.name == "gold"));
        assert_eq!(dropped.describe().unwrap(), "ClusterQueue gold: spec.x");
    }
}
