//! `tiergate check --kubeconfig`: the same `NodePool` inputs `crate::check` reads from files, built from the live
//! cluster: Karpenter NodePools (`karpenter.sh/v1`, when the CRD is served) and groups of live nodes.
//! `build_node_pools` and `build_karpenter_pools` are pure; `fetch_live_pools` lists (I/O).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::LiveError;
use crate::cache::is_not_served;
use crate::check::{CheckError, NodePool, PoolSource, parse_nodepools};

/// Node labels naming the node group a node belongs to, in the order they are tried (Karpenter, EKS, eksctl,
/// GKE, AKS). Nodes without one are grouped by their labels and taints.
pub const NODE_GROUP_LABELS: &[&str] = &[
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "alpha.eksctl.io/nodegroup-name",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
];

/// Labels that differ per node and say nothing about the pool.
const PER_NODE_LABELS: &[&str] = &["kubernetes.io/hostname"];

/// One pool per node group: the labels and taints every node of the group carries. Nodes of a Karpenter
/// NodePool listed in `karpenter_pools` are left out (the NodePool itself stands for them).
pub fn build_node_pools(nodes: &[Node], karpenter_pools: &[String]) -> Vec<NodePool> {
    let mut groups: BTreeMap<String, Vec<&Node>> = BTreeMap::new();
    for node in nodes {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let group_label = NODE_GROUP_LABELS.iter().find_map(|key| labels.get(*key).map(|value| (*key, value)));
        let key = match group_label {
            Some(("karpenter.sh/nodepool", pool)) if karpenter_pools.contains(pool) => continue,
            Some((key, value)) => format!("{key}={value}"),
            None => {
                let mut fingerprint: Vec<String> = labels
                    .iter()
                    .filter(|(key, _)| !PER_NODE_LABELS.contains(&key.as_str()))
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect();
                fingerprint.extend(node_taints(node).iter().map(|taint| format!("{taint:?}")));
                format!("nodes {}", fingerprint.join(","))
            }
        };
        groups.entry(key).or_default().push(node);
    }
    groups
        .into_iter()
        .filter_map(|(key, members)| {
            let first = members.first()?;
            let mut labels = first.metadata.labels.clone().unwrap_or_default();
            labels.retain(|key, value| {
                !PER_NODE_LABELS.contains(&key.as_str())
                    && members
                        .iter()
                        .all(|node| node.metadata.labels.as_ref().and_then(|labels| labels.get(key)) == Some(value))
            });
            let mut taints = node_taints(first);
            taints.retain(|taint| members.iter().all(|node| node_taints(node).contains(taint)));
            let name = if key.starts_with("nodes ") {
                format!("nodes like {} ({})", first.metadata.name.clone().unwrap_or_default(), members.len())
            } else {
                format!("{key} ({} nodes)", members.len())
            };
            Some(NodePool {
                name,
                source: PoolSource::LiveNodes,
                labels,
                requirements: Vec::new(),
                taints,
                weight: None,
                limits: BTreeMap::new(),
            })
        })
        .collect()
}

/// The live Karpenter NodePools as `check` reads them from a file (labels, requirements, taints, `spec.weight`
/// and `spec.limits`), through the very same parser.
pub fn build_karpenter_pools(items: Vec<DynamicObject>) -> Result<Vec<NodePool>, CheckError> {
    let items: Vec<Value> = items
        .into_iter()
        .map(|item| {
            let mut value = serde_json::to_value(item).unwrap_or(Value::Null);
            value["apiVersion"] = json!("karpenter.sh/v1");
            value["kind"] = json!("NodePool");
            value
        })
        .collect();
    let text = json!({"kind": "List", "items": items}).to_string();
    parse_nodepools(&text, "the live Karpenter NodePools")
}

fn node_taints(node: &Node) -> Vec<Taint> {
    node.spec.as_ref().and_then(|spec| spec.taints.clone()).unwrap_or_default()
}

/// Lists Karpenter NodePools (skipped when `karpenter.sh/v1` is not served) and nodes, and builds the pools.
pub async fn fetch_live_pools(client: &kube::Client) -> Result<Vec<NodePool>, LiveError> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"), "nodepools");
    let karpenter: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut pools = match karpenter.list(&ListParams::default()).await {
        Ok(list) if !list.items.is_empty() => build_karpenter_pools(list.items).map_err(|error| LiveError::Decode {
            what: "Karpenter NodePools".to_owned(),
            error: serde::de::Error::custom(error.to_string()),
        })?,
        Ok(_) => Vec::new(),
        Err(kube::Error::Api(status)) if is_not_served(&status) => Vec::new(),
        Err(source) => {
            return Err(LiveError::List { what: "Karpenter NodePools (karpenter.sh/v1)".to_owned(), error: source });
        }
    };
    let karpenter_names: Vec<String> = pools.iter().map(|pool| pool.name.clone()).collect();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| LiveError::List { what: "Nodes".to_owned(), error: source })?;
    pools.extend(build_node_pools(&nodes.items, &karpenter_names));
    Ok(pools)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str)]) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels.iter().cloned().collect::<BTreeMap<_, _>>()},
            "spec": {"taints": taints.iter().map(|(key, effect)| json!({"key": key, "effect": effect})).collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    #[test]
    fn nodes_of_one_node_group_become_one_pool_with_the_labels_they_share() {
        let nodes = [
            node(
                "a",
                &[
                    ("eks.amazonaws.com/nodegroup", "gpu"),
                    ("gpu.nvidia.com/class", "l4"),
                    ("kubernetes.io/hostname", "a"),
                ],
                &[("nvidia.com/gpu", "NoSchedule")],
            ),
            node(
                "b",
                &[
                    ("eks.amazonaws.com/nodegroup", "gpu"),
                    ("gpu.nvidia.com/class", "l4"),
                    ("kubernetes.io/hostname", "b"),
                ],
                &[("nvidia.com/gpu", "NoSchedule")],
            ),
            node("c", &[("kubernetes.io/hostname", "c"), ("role", "cpu")], &[]),
        ];
        let pools = build_node_pools(&nodes, &[]);
        assert_eq!(pools.len(), 2, "{pools:?}");
        let gpu = pools.iter().find(|pool| pool.name.starts_with("eks.amazonaws.com/nodegroup=gpu")).unwrap();
        assert_eq!(gpu.labels.get("gpu.nvidia.com/class").map(String::as_str), Some("l4"));
        assert!(!gpu.labels.contains_key("kubernetes.io/hostname"));
        assert_eq!(gpu.taints.len(), 1);
        assert_eq!(pools.iter().find(|pool| pool.name.starts_with("nodes like c")).unwrap().labels.len(), 1);
    }

    #[test]
    fn live_karpenter_nodepools_keep_their_weight_and_limits() {
        let nodepool = |name: &str, spec: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": name},
                "spec": spec,
            }))
            .unwrap()
        };
        let template =
            json!({"spec": {"requirements": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["h100"]}]}});
        let items = vec![
            nodepool(
                "platform-h100",
                json!({"template": template, "weight": 60, "limits": {"nvidia.com/gpu": "8", "cpu": 1000}}),
            ),
            nodepool("gpu-any", json!({"template": template})),
        ];
        let pools = build_karpenter_pools(items).unwrap();
        let platform = &pools[0];
        assert_eq!((platform.source, platform.weight), (PoolSource::Karpenter, Some(60)));
        let limits: Vec<(&str, &str)> =
            platform.limits.iter().map(|(resource, limit)| (resource.as_str(), limit.0.as_str())).collect();
        assert_eq!(limits, [("cpu", "1000"), ("nvidia.com/gpu", "8")]);
        assert_eq!((pools[1].weight, pools[1].limits.len()), (None, 0));
    }

    #[test]
    fn nodes_of_a_listed_karpenter_nodepool_are_left_to_the_nodepool() {
        let nodes = [
            node("a", &[("karpenter.sh/nodepool", "gpu-l4")], &[]),
            node("b", &[("karpenter.sh/nodepool", "orphan")], &[]),
        ];
        let pools = build_node_pools(&nodes, &["gpu-l4".to_owned()]);
        let names: Vec<&str> = pools.iter().map(|pool| pool.name.as_str()).collect();
        assert_eq!(names, ["karpenter.sh/nodepool=orphan (1 nodes)"]);
    }
}
