//! The static snapshot `tiergate webhook --offline`, `tiergate explain` and the tests decide from: a policy and a
//! cluster view, with the LocalQueues the translation creates (one per tiered namespace); no I/O.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::policy::TierPolicy;
use crate::trust::{find_installed_operators, with_trusted_controllers};
use crate::view::{ClusterView, Snapshot, index_claim_templates};

/// A synced snapshot of `policy` and `view`, as if the daemon had reconciled it: every namespace whose tier label
/// names a tier (and is not excluded) has that tier's LocalQueue, and a policy that names no `trustedControllers`
/// trusts the operators the view's ClusterRoleBindings show installed (`trust`).
pub fn build_static_snapshot(policy: TierPolicy, view: ClusterView, own_namespace: Option<String>) -> Snapshot {
    let local_queues: BTreeSet<(String, String)> = view
        .namespaces
        .iter()
        .filter(|namespace| !policy.spec.is_excluded(&namespace.name, own_namespace.as_deref()))
        .filter_map(|namespace| {
            let tier = policy.spec.tier_of(&namespace.labels)?;
            Some((namespace.name.clone(), tier.local_queue()))
        })
        .collect();
    let namespaces = view.namespaces_by_name();
    let installed = find_installed_operators(&view.bindings, &namespaces);
    Snapshot {
        policy: Some(with_trusted_controllers(&Arc::new(policy), &installed)),
        installed_operators: installed,
        namespaces,
        nodes: view.nodes.into_iter().map(|node| (node.name.clone(), node)).collect(),
        local_queues,
        claim_templates: index_claim_templates(view.claim_templates),
        own_namespace,
        synced: true,
        ..Snapshot::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};

    #[test]
    fn sample_snapshot_has_one_local_queue_per_tiered_namespace() {
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let snapshot = build_static_snapshot(load_policy(None).unwrap(), view, None);
        let queues: Vec<(&str, &str)> =
            snapshot.local_queues.iter().map(|(namespace, queue)| (namespace.as_str(), queue.as_str())).collect();
        assert_eq!(
            queues,
            [
                ("ml-research", "tiergate-gold"),
                ("ml-team-dev", "tiergate-bronze"),
                ("ml-team-staging", "tiergate-silver")
            ]
        );
        assert!(snapshot.synced);
    }
}
