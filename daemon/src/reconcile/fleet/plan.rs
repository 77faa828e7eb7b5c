//! The plan of one worker engine in `tiergate run`: what the worker must hold, from the management cluster's
//! CURRENT snapshot (policy and tenant namespaces) and the worker's own snapshot (its nodes), through the pure
//! `desired_for_worker`; no I/O.

use std::sync::Arc;

use kube::ResourceExt;

use crate::plan::fleet::{WorkerView, desired_for_worker};
use crate::reconcile::desired::{DesiredError, policy_problems};
use crate::reconcile::worker::{WorkerDesired, WorkerNamespace, WorkerPlan};
use crate::view::{SharedSnapshot, Snapshot};

/// The plan of worker `cluster`: every pass reads the management snapshot anew, so a policy edit or a tenant
/// namespace changing tier reaches the worker at its next pass. A worker no longer in `spec.clusters` (or with no
/// policy at all) gets [`WorkerDesired::retired`]; an invalid policy or unsynced management caches keep the
/// worker's last applied state.
pub fn build_worker_plan(management: SharedSnapshot, cluster: String) -> WorkerPlan {
    Arc::new(move |worker: &Snapshot| {
        let management = management.load();
        if !management.synced {
            return Err(DesiredError::Translate(
                "failed to plan the worker: the management cluster's caches have not synced yet".to_owned(),
            ));
        }
        let Some(policy) = management.policy.as_deref() else { return Ok(WorkerDesired::retired()) };
        if !policy.spec.clusters.iter().any(|entry| entry.name == cluster) {
            return Ok(WorkerDesired::retired());
        }
        let problems = policy_problems(policy);
        if !problems.is_empty() {
            return Err(DesiredError::Translate(format!(
                "failed to plan the worker: TierPolicy {} is invalid: {}",
                policy.name_any(),
                problems.join("; ")
            )));
        }
        // The quota windows in force at this pass: a worker follows a window at its next pass after the boundary.
        let (in_force, _) =
            crate::reconcile::quota_windows::build_policy_in_force(policy, k8s_openapi::jiff::Timestamp::now());
        let policy = in_force.as_ref();
        let own = management.own_namespace.as_deref();
        let tenants: Vec<_> =
            management.namespaces.values().filter(|namespace| Some(namespace.name.as_str()) != own).cloned().collect();
        let view = worker.cluster_view();
        let mut desired = desired_for_worker(policy, &cluster, &WorkerView { tenants: &tenants, worker: &view });
        for note in &desired.notes {
            tracing::debug!(%cluster, %note, "worker plan note");
        }
        let tier_label = &policy.spec.tier_label;
        let namespaces = std::mem::take(&mut desired.namespaces)
            .into_iter()
            .filter_map(|namespace| {
                let name = namespace.metadata.name?;
                let mut labels = namespace.metadata.labels.unwrap_or_default();
                labels.retain(|key, _| key == tier_label);
                Some(WorkerNamespace { name, labels })
            })
            .collect();
        let objects = desired.to_dynamic_objects().map_err(|error| DesiredError::Translate(error.to_string()))?;
        Ok(WorkerDesired { objects, namespaces })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::inputs::load_policy;
    use crate::view::{NamespaceView, NodeView};

    const TIER: &str = "tenant.kubenexus.io/tier";

    fn fleet_policy() -> Arc<crate::policy::TierPolicy> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/fleet/policy.yaml");
        Arc::new(load_policy(Some(&path)).unwrap())
    }

    fn namespace(name: &str, tier: &str) -> (String, Arc<NamespaceView>) {
        let labels = BTreeMap::from([(TIER.to_owned(), tier.to_owned())]).into();
        (name.to_owned(), Arc::new(NamespaceView { name: name.to_owned(), labels, ..NamespaceView::default() }))
    }

    fn management(policy: Option<Arc<crate::policy::TierPolicy>>) -> SharedSnapshot {
        let snapshot = Snapshot {
            policy,
            namespaces: BTreeMap::from([namespace("team-gold", "gold"), namespace("team-bronze", "bronze")]),
            synced: true,
            ..Snapshot::default()
        };
        Arc::new(arc_swap::ArcSwap::from_pointee(snapshot))
    }

    fn worker_nodes() -> Snapshot {
        let labels = BTreeMap::from([("gpu.nvidia.com/class".to_owned(), "h100".to_owned())]).into();
        let node = NodeView { name: "east-1".to_owned(), labels, ..NodeView::default() };
        Snapshot { nodes: BTreeMap::from([("east-1".to_owned(), Arc::new(node))]), synced: true, ..Snapshot::default() }
    }

    #[test]
    fn a_worker_in_the_policy_gets_its_dispatched_tiers_queues_and_only_their_tenant_namespaces() {
        let plan = build_worker_plan(management(Some(fleet_policy())), "us-east".to_owned());
        let desired = plan(&worker_nodes()).unwrap();
        let names: Vec<&str> = desired.namespaces.iter().map(|namespace| namespace.name.as_str()).collect();
        assert_eq!(names, vec!["team-gold"], "bronze stays local, so its tenant is not on the worker");
        assert_eq!(desired.namespaces[0].labels, BTreeMap::from([(TIER.to_owned(), "gold".to_owned())]));
        let kinds: Vec<String> =
            desired.objects.iter().map(|object| object.types.as_ref().unwrap().kind.clone()).collect();
        assert!(kinds.contains(&"ClusterQueue".to_owned()) && kinds.contains(&"LocalQueue".to_owned()), "{kinds:?}");
        assert!(!kinds.contains(&"MultiKueueCluster".to_owned()), "MultiKueue objects stay on the management side");
    }

    #[test]
    fn a_worker_that_left_the_policy_or_a_deleted_policy_retires_it() {
        let left = build_worker_plan(management(Some(fleet_policy())), "ap-south".to_owned());
        assert_eq!(left(&worker_nodes()).unwrap(), WorkerDesired::retired());
        let deleted = build_worker_plan(management(None), "us-east".to_owned());
        assert_eq!(deleted(&worker_nodes()).unwrap(), WorkerDesired::retired());
    }

    #[test]
    fn unsynced_management_caches_keep_the_worker_as_it_is_instead_of_pruning_it() {
        let unsynced = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
        let plan = build_worker_plan(unsynced, "us-east".to_owned());
        assert!(plan(&worker_nodes()).unwrap_err().to_string().contains("not synced"));
    }
}
