//! Topology-aware scheduling in the plan: one Kueue `Topology` per distinct level list of the GPU classes, its
//! name, and notes on nodes that lack a level; pure. A tier's rule resolved against its classes is
//! [`crate::topology`].
//!
//! A class's levels are its nodes' label keys, broadest first. Two classes with the same node-label list share one
//! Topology: its name is made of the labels alone (the last segment of each, and a hash of the whole list), so
//! renaming a class or a level, or reordering the classes, never renames it; Kueue keeps a flavor's
//! `topologyName` immutable.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tiergate_kueue::{Topology, TopologyLevel as KueueTopologyLevel, TopologySpec};

use super::names::{bounded_name, fnv1a};
use crate::policy::{GpuClass, TierPolicySpec, TopologyLevel};
use crate::view::NodeView;

/// The Topology of the level list `node_labels`: `tiergate-<last segments>-<hash>`, a DNS label.
pub fn topology_name(node_labels: &[&str]) -> String {
    let segments: Vec<String> = node_labels
        .iter()
        .map(|label| {
            let segment = label.rsplit('/').next().unwrap_or(label).to_ascii_lowercase();
            let cleaned: String = segment.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
            cleaned.trim_matches('-').to_owned()
        })
        .filter(|segment| !segment.is_empty())
        .collect();
    let hash = fnv1a(&node_labels.join(" "));
    bounded_name(&format!("tiergate-{}-{hash:08x}", segments.join("-")))
}

/// The Topology name of `class`, or `None` when it names no levels.
pub fn class_topology_name(class: &GpuClass) -> Option<String> {
    (!class.topology_levels.is_empty()).then(|| topology_name(&node_labels(&class.topology_levels)))
}

/// The node labels of `levels`, in order.
pub fn node_labels(levels: &[TopologyLevel]) -> Vec<&str> {
    levels.iter().map(|level| level.node_label.as_str()).collect()
}

/// One Topology per distinct level list of `classes` (first-use order), labelled with `labels`.
pub fn build_topologies<'a>(
    classes: impl IntoIterator<Item = &'a GpuClass>,
    labels: &BTreeMap<String, String>,
) -> Vec<Topology> {
    let mut topologies: Vec<Topology> = Vec::new();
    for class in classes {
        let Some(name) = class_topology_name(class) else { continue };
        if topologies.iter().any(|topology| topology.metadata.name.as_deref() == Some(name.as_str())) {
            continue;
        }
        let levels = class
            .topology_levels
            .iter()
            .map(|level| KueueTopologyLevel { node_label: level.node_label.clone() })
            .collect();
        topologies.push(Topology {
            metadata: ObjectMeta { name: Some(name), labels: Some(labels.clone()), ..ObjectMeta::default() },
            spec: TopologySpec { levels },
        });
    }
    topologies
}

/// One note per GPU class level that some of the class's nodes in `nodes` lack: Kueue leaves a node without a
/// level's label out of the class's Topology, so its GPUs are never assigned to topology-placed workloads.
pub fn missing_level_notes<'a>(
    spec: &TierPolicySpec,
    nodes: impl IntoIterator<Item = &'a NodeView> + Clone,
) -> Vec<String> {
    let mut notes = Vec::new();
    for class in spec.gpu_classes.iter().filter(|class| !class.topology_levels.is_empty()) {
        let members: Vec<&NodeView> =
            nodes.clone().into_iter().filter(|node| class.is_selected_by(&node.labels)).collect();
        for level in &class.topology_levels {
            let lacking: Vec<&str> = members
                .iter()
                .filter(|node| !node.labels.contains_key(&level.node_label))
                .map(|node| node.name.as_str())
                .collect();
            if lacking.is_empty() {
                continue;
            }
            let shown: Vec<&str> = lacking.iter().copied().take(5).collect();
            let more = if lacking.len() > shown.len() {
                format!(" and {} more", lacking.len() - shown.len())
            } else {
                String::new()
            };
            notes.push(format!(
                "{} of {} nodes of GPU class {} lack topology level {} ({}): {}{more}; Kueue's Topology leaves them out, \
                 so topology-placed workloads never use their GPUs; label them or fix the level's nodeLabel",
                lacking.len(),
                members.len(),
                class.name,
                level.name,
                level.node_label,
                shown.join(", ")
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::is_dns_label;

    #[test]
    fn topology_names_come_from_the_labels_alone_and_are_dns_labels() {
        let name =
            topology_name(&["topology.example.com/block", "topology.example.com/rack", "kubernetes.io/hostname"]);
        assert!(name.starts_with("tiergate-block-rack-hostname-"), "{name}");
        assert!(is_dns_label(&name), "{name}");
        let other = topology_name(&["other.example.com/block", "topology.example.com/rack", "kubernetes.io/hostname"]);
        assert_ne!(name, other);
        let odd = topology_name(&["Example.COM/Weird_Level.x"]);
        assert!(is_dns_label(&odd), "{odd}");
        let long: Vec<String> = (0..16).map(|index| format!("topology.example.com/level-number-{index}")).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        assert!(is_dns_label(&topology_name(&long)));
    }

    #[test]
    fn classes_with_the_same_levels_share_one_topology() {
        let level = |name: &str, label: &str| TopologyLevel { name: name.into(), node_label: label.into() };
        let class = |name: &str, levels: Vec<TopologyLevel>| GpuClass {
            name: name.into(),
            node_labels: BTreeMap::from([("gpu".into(), name.into())]),
            node_taints: vec![],
            tolerations: vec![],
            resource_name: "nvidia.com/gpu".into(),
            resource_names: vec![],
            memory_gib: None,
            topology_levels: levels,
            dra: None,
            capacity: None,
            karpenter: None,
        };
        let classes = [
            class("h100", vec![level("rack", "example.com/rack"), level("host", "kubernetes.io/hostname")]),
            class("a100", vec![level("r", "example.com/rack"), level("node", "kubernetes.io/hostname")]),
            class("l4", vec![]),
            class("b200", vec![level("block", "example.com/block")]),
        ];
        let topologies = build_topologies(&classes, &BTreeMap::new());
        assert_eq!(topologies.len(), 2);
        assert_eq!(topologies[0].metadata.name, class_topology_name(&classes[1]));
        assert_eq!(topologies[0].spec.levels.len(), 2);
        assert_eq!(class_topology_name(&classes[2]), None);
    }

    #[test]
    fn nodes_of_a_class_without_a_level_label_are_noted() {
        let mut spec = crate::inputs::load_policy(None).unwrap().spec;
        spec.gpu_classes[0].topology_levels =
            vec![TopologyLevel { name: "rack".into(), node_label: "example.com/rack".into() }];
        let class_labels = spec.gpu_classes[0].node_labels.clone();
        let node = |name: &str, rack: bool| {
            let mut labels = class_labels.clone();
            if rack {
                labels.insert("example.com/rack".into(), "r1".into());
            }
            NodeView { name: name.into(), labels: labels.into(), ..NodeView::default() }
        };
        let nodes = [node("a", true), node("b", false), NodeView { name: "other".into(), ..NodeView::default() }];
        let notes = missing_level_notes(&spec, &nodes);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with(&format!(
                "1 of 2 nodes of GPU class {} lack topology level rack",
                spec.gpu_classes[0].name
            ))
        );
        assert!(notes[0].contains(": b;"), "{}", notes[0]);
        assert!(missing_level_notes(&spec, &nodes[..1]).is_empty());
    }
}
