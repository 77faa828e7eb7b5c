//! The owner index: which controllers exist (uid, namespace, name, kind), so the webhook trusts an owner reference
//! only after looking it up; pure types and lookups, no I/O (the watches that fill it are in `owner_watch`).
//!
//! The owner kinds are derived from the adapter table: every kind with pod templates that tiergate itself
//! checks (a Pod is never a trusted owner), plus ReplicaSets, which are trusted only through a verified
//! Deployment. Records keep only what a lookup needs.

use std::collections::HashMap;
use std::sync::Arc;

use tiergate_workloads::{ADAPTERS, TemplateLayout, WorkloadAdapter};

/// The ReplicaSet kind: its template is its Deployment's, so it is trusted only through that Deployment.
pub const REPLICA_SET: OwnerKind = OwnerKind { group: "apps", version: "v1", kind: "ReplicaSet" };

/// A kind whose objects can be verified owners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerKind {
    /// API group (`""` for core).
    pub group: &'static str,
    /// API version watched.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
}

impl OwnerKind {
    /// `group/version` as an ownerReference's `apiVersion` spells it.
    pub fn api_version(&self) -> String {
        match self.group {
            "" => self.version.to_owned(),
            group => format!("{group}/{}", self.version),
        }
    }
}

/// Every adapter kind with pod templates (not Pod itself), one per group and kind: the kinds the owner index
/// watches. A kind added to the adapter table is covered without a change here.
pub fn owner_kinds() -> Vec<OwnerKind> {
    let mut kinds: Vec<OwnerKind> = Vec::new();
    for adapter in ADAPTERS.iter().filter(|adapter| adapter.templates != TemplateLayout::Pod) {
        if !kinds.iter().any(|kind| kind.group == adapter.group && kind.kind == adapter.kind) {
            kinds.push(OwnerKind { group: adapter.group, version: adapter.version, kind: adapter.kind });
        }
    }
    kinds
}

/// The adapter of an owner kind (any version), if tiergate checks that kind's templates.
pub fn owner_adapter(group: &str, kind: &str) -> Option<&'static WorkloadAdapter> {
    ADAPTERS
        .iter()
        .find(|adapter| adapter.group == group && adapter.kind == kind && adapter.templates != TemplateLayout::Pod)
}

/// One object that may own others: identity only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// Its kind.
    pub kind: OwnerKind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: Arc<str>,
    /// For a ReplicaSet: the uid of its controlling Deployment, if any.
    pub controller_uid: Option<String>,
}

/// Owners by uid: the watched kinds' live [`OwnerStore`] (shared with the watches that fill it, read at lookup
/// time, never copied per snapshot) plus records fixed when the index was built (ReplicaSets, tests).
#[derive(Clone, Debug, Default)]
pub struct OwnerIndex {
    store: Option<Arc<OwnerStore>>,
    fixed: HashMap<Arc<str>, Arc<OwnerRecord>>,
}

impl OwnerIndex {
    /// An index of `records` (a uid seen twice keeps the last record).
    pub fn build(records: impl IntoIterator<Item = Arc<OwnerRecord>>) -> Self {
        Self::with_store(None, records)
    }

    /// An index over the live `store` plus `records` (a uid in both resolves to the record).
    pub fn with_store(store: Option<Arc<OwnerStore>>, records: impl IntoIterator<Item = Arc<OwnerRecord>>) -> Self {
        Self { store, fixed: records.into_iter().map(|record| (record.uid.clone(), record)).collect() }
    }

    /// The record with `uid`, if any.
    pub fn get(&self, uid: &str) -> Option<Arc<OwnerRecord>> {
        if let Some(record) = self.fixed.get(uid) {
            return Some(record.clone());
        }
        self.store.as_ref().and_then(|store| store.get(uid)).map(Arc::new)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.fixed.len() + self.store.as_ref().map_or(0, |store| store.len())
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A uid as the API server writes it: a canonical lowercase UUID is kept as its 16 bytes, anything else as text,
/// so a lookup matches exactly the string that was stored (an uppercase spelling of a stored UUID does not).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OwnerUid {
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase hex.
    Uuid([u8; 16]),
    /// Any other spelling.
    Text(Box<str>),
}

impl OwnerUid {
    /// The compact form of `uid`.
    pub fn build(uid: &str) -> Self {
        parse_canonical_uuid(uid).map_or_else(|| Self::Text(uid.into()), Self::Uuid)
    }
}

impl std::fmt::Display for OwnerUid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text(text) => f.write_str(text),
            Self::Uuid(bytes) => write!(f, "{}", uuid::Uuid::from_bytes(*bytes).hyphenated()),
        }
    }
}

/// The bytes of `text` when it is a UUID spelled exactly as its canonical lowercase hyphenated form.
fn parse_canonical_uuid(text: &str) -> Option<[u8; 16]> {
    let uuid = uuid::Uuid::try_parse(text).ok()?;
    let mut buffer = uuid::Uuid::encode_buffer();
    (uuid.hyphenated().encode_lower(&mut buffer) == text).then(|| *uuid.as_bytes())
}

/// What the store keeps per owner besides its uid and kind: the namespace shared with every other record of it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OwnerEntry {
    namespace: Arc<str>,
    name: Box<str>,
}

/// The owners of one watched kind, by compact uid.
#[derive(Clone, Debug, Default)]
pub struct OwnerTable {
    by_uid: HashMap<OwnerUid, OwnerEntry>,
}

impl OwnerTable {
    /// Adds or replaces the owner `uid` (`namespace` is shared, see [`NamespaceNames`]).
    pub fn insert(&mut self, uid: &str, namespace: Arc<str>, name: &str) {
        self.by_uid.insert(OwnerUid::build(uid), OwnerEntry { namespace, name: name.into() });
    }

    /// Removes the owner `uid`.
    pub fn remove(&mut self, uid: &str) {
        self.by_uid.remove(&OwnerUid::build(uid));
    }

    /// Number of owners.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }

    /// Gives back spare capacity (after a re-list).
    pub fn shrink_to_fit(&mut self) {
        self.by_uid.shrink_to_fit();
    }
}

/// The watched owner kinds' records, compact (uids as 16 bytes, namespace names shared), one [`OwnerTable`] per
/// kind; written by the watches, read by every snapshot's [`OwnerIndex`] at lookup time.
#[derive(Debug, Default)]
pub struct OwnerStore {
    kinds: std::sync::RwLock<Vec<(OwnerKind, OwnerTable)>>,
}

impl OwnerStore {
    /// Adds an empty table for `kind`; returns its slot.
    pub fn add_kind(&self, kind: OwnerKind) -> usize {
        let mut kinds = self.kinds.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        kinds.push((kind, OwnerTable::default()));
        kinds.len() - 1
    }

    /// Runs `change` on the table in `slot` (nothing when there is none).
    pub fn update(&self, slot: usize, change: impl FnOnce(&mut OwnerTable)) {
        let mut kinds = self.kinds.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, table)) = kinds.get_mut(slot) {
            change(table);
        }
    }

    /// Replaces the table in `slot` whole (a re-list).
    pub fn replace(&self, slot: usize, table: OwnerTable) {
        self.update(slot, |current| *current = table);
    }

    /// The owner with `uid`, as a record.
    pub fn get(&self, uid: &str) -> Option<OwnerRecord> {
        let key = OwnerUid::build(uid);
        let kinds = self.kinds.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        kinds.iter().find_map(|(kind, table)| {
            table.by_uid.get(&key).map(|entry| OwnerRecord {
                kind: *kind,
                namespace: entry.namespace.to_string(),
                name: entry.name.to_string(),
                uid: uid.into(),
                controller_uid: None,
            })
        })
    }

    /// Number of owners of every kind.
    pub fn len(&self) -> usize {
        self.kinds.read().unwrap_or_else(std::sync::PoisonError::into_inner).iter().map(|(_, table)| table.len()).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One shared `Arc<str>` per namespace name, so thousands of owner records of a namespace hold one copy.
#[derive(Debug, Default)]
pub struct NamespaceNames {
    names: std::collections::HashSet<Arc<str>>,
}

impl NamespaceNames {
    /// The shared copy of `name`.
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        let shared: Arc<str> = name.into();
        self.names.insert(shared.clone());
        shared
    }

    /// Forgets names no record holds any more.
    pub fn forget_unused(&mut self) {
        self.names.retain(|name| Arc::strong_count(name) > 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_kinds_are_every_adapter_kind_with_templates_but_never_pod() {
        let kinds: Vec<&str> = owner_kinds().iter().map(|kind| kind.kind).collect();
        assert!(kinds.contains(&"Job") && kinds.contains(&"JobSet") && kinds.contains(&"Deployment"));
        assert!(!kinds.contains(&"Pod"));
        assert!(owner_adapter("", "Pod").is_none());
        assert_eq!(OwnerKind { group: "", version: "v1", kind: "Pod" }.api_version(), "v1");
        assert_eq!(REPLICA_SET.api_version(), "apps/v1");
    }

    #[test]
    fn a_canonical_uuid_is_kept_as_16_bytes_and_any_other_uid_as_text() {
        let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert!(matches!(OwnerUid::build(uid), OwnerUid::Uuid(_)));
        assert_eq!(OwnerUid::build(uid).to_string(), uid);
        for other in ["0F8FAD5B-D9CB-469F-A165-70867728950E", "0f8fad5bd9cb469fa16570867728950e", "rs-uid", ""] {
            assert_eq!(OwnerUid::build(other), OwnerUid::Text(other.into()), "{other}");
        }
    }

    #[test]
    fn the_store_answers_only_the_exact_uid_with_the_kind_namespace_and_name_it_was_given() {
        let store = Arc::new(OwnerStore::default());
        let job = OwnerKind { group: "batch", version: "v1", kind: "Job" };
        let slot = store.add_kind(job);
        let mut names = NamespaceNames::default();
        let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        store.update(slot, |table| table.insert(uid, names.intern("team-a"), "train"));
        let index = OwnerIndex::with_store(Some(store.clone()), []);
        let record = index.get(uid).expect("stored");
        assert_eq!((record.kind, record.namespace.as_str(), record.name.as_str()), (job, "team-a", "train"));
        assert_eq!(&*record.uid, uid);
        assert!(index.get(&uid.to_uppercase()).is_none(), "a uid is matched as written");
        store.update(slot, |table| table.remove(uid));
        assert!(index.get(uid).is_none(), "a deleted owner is gone from every snapshot's index at once");
    }

    #[test]
    fn the_charts_cluster_role_lets_the_daemon_list_and_watch_every_owner_kind() {
        // Without the rule the kind is skipped at start (403) and its children's owners stay unverified.
        let rbac = include_str!("../../../charts/tiergate/templates/rbac.yaml");
        let rules: Vec<(String, String)> = rbac
            .split("- apiGroups: [")
            .skip(1)
            .filter_map(|rule| {
                let (groups, rest) = rule.split_once(']')?;
                let resources = rest.split("resources: [").nth(1)?.split(']').next()?;
                Some((groups.replace('"', ""), resources.to_owned()))
            })
            .collect();
        for kind in owner_kinds() {
            let plural = format!("{}s", kind.kind.to_lowercase());
            let listed = rules.iter().any(|(groups, resources)| {
                groups.split(", ").any(|group| group == kind.group)
                    && resources.split(", ").any(|resource| resource == plural)
            });
            assert!(listed, "no RBAC rule for {}/{plural}", kind.group);
        }
    }
}
