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

/// Owners by uid, shared by every snapshot until the stores change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnerIndex {
    by_uid: HashMap<Arc<str>, Arc<OwnerRecord>>,
}

impl OwnerIndex {
    /// An index of `records` (a uid seen twice keeps the last record).
    pub fn build(records: impl IntoIterator<Item = Arc<OwnerRecord>>) -> Self {
        Self { by_uid: records.into_iter().map(|record| (record.uid.clone(), record)).collect() }
    }

    /// The record with `uid`, if any.
    pub fn get(&self, uid: &str) -> Option<&OwnerRecord> {
        self.by_uid.get(uid).map(Arc::as_ref)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
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
