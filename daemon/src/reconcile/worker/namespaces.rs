//! The tenant namespaces on a worker: which to apply with their tier label and which tiergate no longer wants
//! there (their labels are released, the namespace itself is never deleted); `build_namespace_changes` is pure,
//! `apply_namespace` does I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::json;

use super::WorkerNamespace;
use crate::reconcile::kinds::{
    FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POLICY_LABEL, build_ownership_labels,
};
use crate::reconcile::{Context, ReconcileError, writes};
use crate::view::NamespaceView;

/// What the namespaces of a worker need.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespaceChanges {
    /// Namespaces to apply, with every label tiergate owns on them (tier label and ownership labels).
    pub apply: Vec<(String, BTreeMap<String, String>)>,
    /// Namespaces carrying tiergate's ownership labels that are no longer wanted: tiergate releases its labels.
    pub release: Vec<String>,
}

/// Compares the wanted namespaces with the worker's cached ones: a namespace is applied when missing or when a
/// label tiergate sets differs; one tiergate labelled for `policy_name` and no longer wants is released.
pub fn build_namespace_changes(
    policy_name: &str,
    wanted: &[WorkerNamespace],
    live: &BTreeMap<String, Arc<NamespaceView>>,
) -> NamespaceChanges {
    let ownership = build_ownership_labels(policy_name);
    let mut changes = NamespaceChanges::default();
    let mut wanted_names = BTreeSet::new();
    for namespace in wanted {
        wanted_names.insert(namespace.name.as_str());
        let mut labels = namespace.labels.clone();
        labels.extend(ownership.clone());
        let current = live.get(&namespace.name);
        let up_to_date = current.is_some_and(|current| {
            labels.iter().all(|(key, value)| current.labels.get(key).is_some_and(|have| have == value))
        });
        if !up_to_date {
            changes.apply.push((namespace.name.clone(), labels));
        }
    }
    for (name, view) in live {
        let owned = view.labels.get(MANAGED_BY_LABEL).is_some_and(|value| value == MANAGED_BY_VALUE)
            && view.labels.get(POLICY_LABEL).is_some_and(|value| value == policy_name);
        if owned && !wanted_names.contains(name.as_str()) {
            changes.release.push(name.clone());
        }
    }
    changes
}

/// Server-side applies namespace `name` with exactly `labels` as tiergate's fields: labels tiergate applied
/// before and leaves out here are removed (an empty map releases them all); other managers' labels stay.
pub(super) async fn apply_namespace(
    ctx: &Context,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), ReconcileError> {
    writes::check_gate(ctx, || format!("Namespace {name}"))?;
    writes::count_write(ctx, "Namespace");
    let api = Api::<DynamicObject>::all_with(ctx.client.clone(), &ApiResource::erase::<Namespace>(&()));
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(body))
        .await
        .map(|_| ())
        .map_err(|source| ReconcileError::ApplyObject { kind: "Namespace", name: name.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIER: &str = "tenant.kubenexus.io/tier";

    fn live(entries: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, Arc<NamespaceView>> {
        entries
            .iter()
            .map(|(name, labels)| {
                let labels = labels.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect();
                (
                    (*name).to_owned(),
                    Arc::new(NamespaceView { name: (*name).to_owned(), labels, ..NamespaceView::default() }),
                )
            })
            .collect()
    }

    fn wanted(name: &str, tier: &str) -> WorkerNamespace {
        WorkerNamespace { name: name.to_owned(), labels: BTreeMap::from([(TIER.to_owned(), tier.to_owned())]) }
    }

    #[test]
    fn missing_or_relabelled_namespaces_are_applied_with_the_tier_and_ownership_labels() {
        let owned: &[(&str, &str)] = &[(TIER, "gold"), (MANAGED_BY_LABEL, MANAGED_BY_VALUE), (POLICY_LABEL, "default")];
        let live = live(&[("team-a", owned), ("team-b", &[(TIER, "bronze")])]);
        let changes = build_namespace_changes(
            "default",
            &[wanted("team-a", "gold"), wanted("team-b", "gold"), wanted("team-c", "silver")],
            &live,
        );
        let applied: Vec<&str> = changes.apply.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(applied, vec!["team-b", "team-c"], "team-a already holds every label");
        assert_eq!(
            changes.apply[1].1,
            BTreeMap::from([
                (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (TIER.to_owned(), "silver".to_owned()),
                (POLICY_LABEL.to_owned(), "default".to_owned()),
            ])
        );
        assert!(changes.release.is_empty());
    }

    #[test]
    fn only_namespaces_labelled_by_this_policy_and_no_longer_wanted_are_released() {
        let mine: &[(&str, &str)] = &[(TIER, "gold"), (MANAGED_BY_LABEL, MANAGED_BY_VALUE), (POLICY_LABEL, "default")];
        let other: &[(&str, &str)] = &[(TIER, "gold"), (MANAGED_BY_LABEL, MANAGED_BY_VALUE), (POLICY_LABEL, "other")];
        let live = live(&[("team-a", mine), ("team-b", other), ("team-c", &[(TIER, "gold")]), ("team-d", mine)]);
        let changes = build_namespace_changes("default", &[wanted("team-d", "gold")], &live);
        assert_eq!(changes.release, vec!["team-a".to_owned()]);
        assert!(changes.apply.is_empty());
    }
}
