//! What the cluster's nodes and pods say per GPU class, as scoring reads it: the GPU capacity of each class and
//! the job types running on its nodes. One pass over the nodes and one over the pods, done once per snapshot
//! (`Snapshot::gpu_class_digest`) instead of once per scored review; pure, no I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tiergate_compat::scoring_annotations::SEED_JOB_TYPE as JOB_TYPE_LABEL;

use super::{NodeView, PodView};
use crate::policy::GpuClass;

/// GPUs of one class: allocatable on its nodes, and the share the caches know to be taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCapacity {
    /// Sum of the class's resource over the class's nodes' allocatable.
    pub allocatable: i64,
    /// GPUs the cached pods on the class's nodes request (the pod cache holds only pods with a placement or
    /// job-type label, so this is a lower bound).
    pub in_use: i64,
}

/// Capacity per GPU class name.
pub type Inventory = BTreeMap<String, ClassCapacity>;

/// Per GPU class: its capacity, and the job types (the `app.kubernetes.io/job-type` label) of cached pods on its
/// nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassDigest {
    /// Capacity per class name; every class asked for has an entry.
    pub inventory: Inventory,
    /// Non-empty job types per class name; classes without any are left out.
    pub job_types: BTreeMap<String, BTreeSet<String>>,
}

impl ClassDigest {
    /// The job types running on the nodes of any of `classes`, sorted and deduplicated.
    pub fn job_types_on(&self, classes: &[&GpuClass]) -> Vec<String> {
        let on_classes = classes.iter().filter_map(|class| self.job_types.get(&class.name)).flatten();
        on_classes.collect::<BTreeSet<&String>>().into_iter().cloned().collect()
    }
}

/// The digest of `classes` over `nodes` and `pods`.
pub fn build_class_digest<'a>(
    classes: &[&GpuClass],
    nodes: impl IntoIterator<Item = &'a Arc<NodeView>>,
    pods: &[Arc<PodView>],
) -> ClassDigest {
    let mut digest = ClassDigest {
        inventory: classes.iter().map(|class| (class.name.clone(), ClassCapacity::default())).collect(),
        job_types: BTreeMap::new(),
    };
    let mut classes_of_node: HashMap<&str, Vec<&GpuClass>> = HashMap::new();
    for node in nodes {
        for class in classes.iter().filter(|class| class.is_selected_by(&node.labels)) {
            let capacity = digest.inventory.entry(class.name.clone()).or_default();
            capacity.allocatable += node.allocatable.get(class.primary_resource()).copied().unwrap_or(0);
            classes_of_node.entry(node.name.as_str()).or_default().push(class);
        }
    }
    for pod in pods {
        let node_classes = pod.node_name.as_deref().and_then(|node| classes_of_node.get(node));
        let job_type = pod.labels.get(JOB_TYPE_LABEL).filter(|job_type| !job_type.is_empty());
        for class in node_classes.into_iter().flatten() {
            let requested = pod.requests.get(class.primary_resource()).copied().unwrap_or(0);
            digest.inventory.entry(class.name.clone()).or_default().in_use += requested;
            if let Some(job_type) = job_type {
                digest.job_types.entry(class.name.clone()).or_default().insert(job_type.to_owned());
            }
        }
    }
    digest
}
