//! The fleet side of the translation, pure: the management cluster's MultiKueue objects, and
//! [`desired_for_worker`], what one worker cluster must hold for the tiers dispatched to it.
//!
//! One policy is the source of truth for both sides: a worker gets the very ResourceFlavors, ClusterQueues,
//! WorkloadPriorityClasses and LocalQueue names the management cluster has for its tiers, so a Job MultiKueue
//! copies there (queue-name and priority-class labels unchanged) finds its queue. Why a dispatching tier's
//! ProvisioningRequest check moves to the workers: docs/guides/fleet.md, "Admission checks".

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tiergate_kueue::{
    KubeConfig, MultiKueueCluster, MultiKueueClusterSource, MultiKueueClusterSpec, MultiKueueConfig,
    MultiKueueConfigSpec,
};

use super::names::{multikueue_cluster_name, multikueue_config_name};
use super::{Desired, NamespaceQueue, PlanError, Side, build_cluster_scoped, desired, namespace_queues, owned_labels};
use crate::policy::{KubeConfigLocationType, TierPolicy, TierPolicySpec};
use crate::view::{ClusterView, NamespaceView};

/// What a worker's objects are built from.
#[derive(Clone, Copy, Debug)]
pub struct WorkerView<'a> {
    /// The management cluster's namespaces: the tenants, whose tier label decides which namespaces (and
    /// LocalQueues) the worker gets.
    pub tenants: &'a [Arc<NamespaceView>],
    /// The worker's own view (its nodes: which GPU classes it actually has).
    pub worker: &'a ClusterView,
}

/// One MultiKueueCluster per `spec.clusters` entry.
pub(super) fn build_multi_kueue_clusters(
    spec: &TierPolicySpec,
    labels: &BTreeMap<String, String>,
) -> Vec<MultiKueueCluster> {
    spec.clusters
        .iter()
        .map(|cluster| {
            let kube_config = &cluster.cluster_source.kube_config;
            let location_type = match kube_config.location_type {
                KubeConfigLocationType::Secret => "Secret",
                KubeConfigLocationType::Path => "Path",
            };
            MultiKueueCluster {
                metadata: meta(multikueue_cluster_name(&cluster.name), labels),
                spec: MultiKueueClusterSpec {
                    cluster_source: MultiKueueClusterSource {
                        kube_config: Some(KubeConfig {
                            location_type: location_type.to_owned(),
                            location: kube_config.location.clone(),
                        }),
                    },
                },
            }
        })
        .collect()
}

/// One MultiKueueConfig per distinct ordered worker list of the dispatching tiers, in first-use order.
pub(super) fn build_multi_kueue_configs(
    spec: &TierPolicySpec,
    labels: &BTreeMap<String, String>,
) -> Vec<MultiKueueConfig> {
    let mut lists: Vec<&Vec<String>> = Vec::new();
    for dispatch in spec.tiers.iter().filter_map(|tier| tier.dispatch.as_ref()) {
        if !lists.contains(&&dispatch.clusters) {
            lists.push(&dispatch.clusters);
        }
    }
    lists
        .into_iter()
        .map(|clusters| MultiKueueConfig {
            metadata: meta(multikueue_config_name(clusters), labels),
            spec: MultiKueueConfigSpec { clusters: clusters.clone() },
        })
        .collect()
}

/// The objects worker `worker` must hold: for each tier dispatched to it, the tier's ResourceFlavors, ClusterQueue
/// (its ProvisioningRequest check if it has one, never a MultiKueue check), every WorkloadPriorityClass, and the
/// tier's tenant namespaces (with their tier label) and LocalQueues under the management cluster's names. Nothing
/// for a worker no tier dispatches to (so everything tiergate left there is pruned). `notes` names a dispatched
/// tier whose GPU class has no node in the worker's view.
pub fn desired_for_worker(policy: &TierPolicy, worker: &str, view: &WorkerView<'_>) -> Desired {
    let spec = &policy.spec;
    if !spec.tiers.iter().any(|tier| tier.dispatches_to(worker)) {
        return Desired::default();
    }
    let mut desired = build_cluster_scoped(policy, Side::Worker, |tier| tier.dispatches_to(worker));
    let labels = owned_labels(policy);
    let tenants: Vec<&NamespaceView> = view
        .tenants
        .iter()
        .map(AsRef::as_ref)
        .filter(|namespace| !namespace.terminating && !spec.is_excluded(&namespace.name, None))
        .filter(|namespace| spec.tier_of(&namespace.labels).is_some_and(|tier| tier.dispatches_to(worker)))
        .collect();
    for namespace in &tenants {
        let mut namespace_labels = labels.clone();
        if let Some(tier) = namespace.labels.get(&spec.tier_label) {
            namespace_labels.insert(spec.tier_label.clone(), tier.to_owned());
        }
        desired.namespaces.push(Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.name.clone()),
                labels: Some(namespace_labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        });
    }
    desired.namespaces.sort_by(|left, right| left.metadata.name.cmp(&right.metadata.name));
    for decision in namespace_queues(policy, tenants) {
        match decision {
            NamespaceQueue::Queue(queue) => desired.local_queues.push(*queue),
            NamespaceQueue::Skipped(note) => desired.notes.push(note),
        }
    }
    for tier in spec.tiers.iter().filter(|tier| tier.dispatches_to(worker)) {
        let Some(class) = spec.gpu_class(&tier.gpu_class) else { continue };
        if !view.worker.nodes.iter().any(|node| class.is_selected_by(&node.labels)) {
            desired.notes.push(format!(
                "worker {worker} has no node of GPU class {} (tier {}): the tier's workloads dispatched there wait \
                 until such nodes join it",
                class.name, tier.name
            ));
        }
    }
    desired
}

/// Both sides of a fleet: the management cluster's objects, then each worker's (in `spec.clusters` order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fleet {
    /// The management cluster's objects ([`desired`]).
    pub management: Desired,
    /// Each worker's name and objects ([`desired_for_worker`]).
    pub workers: Vec<(String, Desired)>,
}

/// The objects of `policy` on the management cluster (`management` view) and on every worker of `spec.clusters`,
/// each from its own view in `worker_views` (a worker without one is planned from an empty view: no nodes).
pub fn build_fleet(
    policy: &TierPolicy,
    management: &ClusterView,
    worker_views: &BTreeMap<String, ClusterView>,
) -> Fleet {
    let empty = ClusterView::default();
    let workers = policy
        .spec
        .clusters
        .iter()
        .map(|cluster| {
            let view = WorkerView {
                tenants: &management.namespaces,
                worker: worker_views.get(&cluster.name).unwrap_or(&empty),
            };
            (cluster.name.clone(), desired_for_worker(policy, &cluster.name, &view))
        })
        .collect();
    Fleet { management: desired(policy, management), workers }
}

impl Fleet {
    /// The management stream, then each worker's under a `# cluster: <name>` line (a YAML comment, so the whole
    /// text still parses as one multi-document stream).
    pub fn to_yaml_stream(&self) -> Result<String, PlanError> {
        let mut stream = self.management.to_yaml_stream()?;
        for (name, desired) in &self.workers {
            stream.push_str(&format!("# cluster: {name}\n"));
            stream.push_str(&desired.to_yaml_stream()?);
        }
        Ok(stream)
    }

    /// Every object as JSON: the management cluster's, then each worker's, in the order of [`Self::to_yaml_stream`].
    pub fn to_values(&self) -> Result<Vec<serde_json::Value>, PlanError> {
        let mut values = self.management.to_values()?;
        for (_, desired) in &self.workers {
            values.extend(desired.to_values()?);
        }
        Ok(values)
    }

    /// The notes of both sides, each worker's prefixed with its name.
    pub fn notes(&self) -> Vec<String> {
        let workers = self
            .workers
            .iter()
            .flat_map(|(name, desired)| desired.notes.iter().map(move |note| format!("{name}: {note}")));
        self.management.notes.iter().cloned().chain(workers).collect()
    }
}

fn meta(name: String, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta { name: Some(name), labels: Some(labels.clone()), ..ObjectMeta::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};

    #[test]
    fn a_policy_without_workers_plans_no_fleet_objects_and_a_worker_no_tier_uses_gets_nothing() {
        let policy = load_policy(None).unwrap();
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let fleet = build_fleet(&policy, &view, &BTreeMap::new());
        assert!(fleet.workers.is_empty());
        assert!(fleet.management.multi_kueue_clusters.is_empty() && fleet.management.multi_kueue_configs.is_empty());
        let unused = desired_for_worker(&policy, "nowhere", &WorkerView { tenants: &view.namespaces, worker: &view });
        assert_eq!(unused, Desired::default());
    }

    #[test]
    fn both_sides_of_the_fleet_sample_come_in_the_owned_kinds_apply_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/fleet");
        let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
        let view = crate::inputs::load_cluster_view(&dir.join("cluster.yaml")).unwrap();
        let fleet = build_fleet(&policy, &view, &BTreeMap::new());
        let order = |desired: &Desired| -> Vec<usize> {
            let kinds = desired.objects().iter().map(super::super::DesiredObject::kind).collect::<Vec<_>>();
            kinds.iter().map(|kind| super::super::OWNED_KINDS.iter().position(|owned| owned == kind).unwrap()).collect()
        };
        for desired in std::iter::once(&fleet.management).chain(fleet.workers.iter().map(|(_, desired)| desired)) {
            let positions = order(desired);
            assert!(positions.windows(2).all(|pair| pair[0] <= pair[1]), "{positions:?}");
        }
        let management: Vec<&str> = fleet.management.objects().iter().map(|object| object.kind()).collect();
        assert!(!management.contains(&"Namespace"), "tenants create their namespaces in the management cluster");
        let (_, east) = &fleet.workers[0];
        assert_eq!(east.objects().first().map(|object| object.kind()), Some("Namespace"), "namespaces before queues");
    }
}
