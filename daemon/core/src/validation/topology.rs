//! Policy checks of topology-aware scheduling: each GPU class's `topologyLevels` and each tier's `topology` rule;
//! pure, no I/O.
//!
//! They mirror what Kueue v0.19.2 refuses in a Topology (`kueue.x-k8s.io_topologies.yaml`: 1 to 16 unique levels,
//! `kubernetes.io/hostname` only last, node labels as label keys) and what would leave a tier's rule unusable:
//! a level that no node of the class can tell apart (one of the class's own `nodeLabels`, the same on every node
//! of the class), or a rule naming a level one of the tier's classes lacks (Kueue would never admit its workloads
//! to that class's flavor).

use std::collections::BTreeMap;

use tiergate_kueue::{HOSTNAME_LABEL, MAX_TOPOLOGY_LEVELS};

use super::Problems;
use super::names::{DNS_LABEL_RULE, QUALIFIED_NAME_RULE, is_dns_label, is_qualified_name};
use crate::policy::{GpuClass, Tier, TierPolicySpec};

/// Every class's `topologyLevels` and every tier's `topology`.
pub(super) fn check_topology(spec: &TierPolicySpec, problems: &mut Problems) {
    for (index, class) in spec.gpu_classes.iter().enumerate() {
        check_levels(&format!("spec.gpuClasses[{index}]"), class, problems);
    }
    for (index, tier) in spec.tiers.iter().enumerate() {
        check_rule(spec, &format!("spec.tiers[{index}]"), tier, problems);
    }
}

fn check_levels(path: &str, class: &GpuClass, problems: &mut Problems) {
    let levels = &class.topology_levels;
    let path = format!("{path}.topologyLevels");
    if levels.len() > MAX_TOPOLOGY_LEVELS {
        problems.push(
            path.clone(),
            format!("{} levels; a Kueue Topology holds at most {MAX_TOPOLOGY_LEVELS}", levels.len()),
            "keep the levels your placement rules use, e.g. block, rack and kubernetes.io/hostname",
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut labels: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, level) in levels.iter().enumerate() {
        let at = format!("{path}[{index}]");
        if !is_dns_label(&level.name) {
            problems.push(
                format!("{at}.name"),
                format!("level name {:?} is not {DNS_LABEL_RULE}", level.name),
                "name the level as people say it, e.g. `rack`",
            );
        }
        if let Some(first) = names.insert(&level.name, index) {
            problems.push(
                format!("{at}.name"),
                format!("level name {:?} is also level {first}", level.name),
                "give each level its own name",
            );
        }
        if !is_qualified_name(&level.node_label) {
            problems.push(
                format!("{at}.nodeLabel"),
                format!("{:?} is not a node label key ({QUALIFIED_NAME_RULE})", level.node_label),
                "use the label key your nodes carry for this level, e.g. `topology.example.com/rack`",
            );
        }
        if let Some(first) = labels.insert(&level.node_label, index) {
            problems.push(
                format!("{at}.nodeLabel"),
                format!("node label {:?} is also level {first}", level.node_label),
                "list each node label once (Kueue refuses a Topology with a repeated level)",
            );
        }
        if let Some(value) = class.node_labels.get(&level.node_label) {
            problems.push(
                format!("{at}.nodeLabel"),
                format!(
                    "{:?} is one of the class's nodeLabels (always {value:?} on its nodes), so every node of the \
                     class is in one domain of this level",
                    level.node_label
                ),
                "name a label whose value differs between the class's nodes (block, rack, host), or drop the level",
            );
        }
        if level.node_label == HOSTNAME_LABEL && index + 1 != levels.len() {
            problems.push(
                format!("{at}.nodeLabel"),
                format!(
                    "{HOSTNAME_LABEL} is level {index} of {}; Kueue allows it only as the last level",
                    levels.len()
                ),
                format!("move {HOSTNAME_LABEL} to the end of topologyLevels (levels go broadest first)"),
            );
        }
    }
}

fn check_rule(spec: &TierPolicySpec, path: &str, tier: &Tier, problems: &mut Problems) {
    let Some(rule) = &tier.topology else { return };
    let path = format!("{path}.topology");
    let level = match (&rule.required, &rule.preferred) {
        (Some(level), None) | (None, Some(level)) => level,
        (Some(_), Some(_)) => {
            problems.push(
                path,
                "both required and preferred are set",
                "keep one: `required: rack` (must fit in one rack) or `preferred: rack` (rack first, then broader)",
            );
            return;
        }
        (None, None) => {
            problems.push(
                path,
                "neither required nor preferred is set",
                "name a level, e.g. `required: rack`, or remove `topology`",
            );
            return;
        }
    };
    let field = if rule.required.is_some() { "required" } else { "preferred" };
    if rule.min_pods < 2 {
        problems.push(
            format!("{path}.minPods"),
            format!("minPods {} would place single pods, which fit in any domain", rule.min_pods),
            "set minPods to 2 or more (default 2)",
        );
    }
    for class in tier.gpu_class_names().filter_map(|name| spec.gpu_class(name)) {
        if class.topology_levels.iter().any(|candidate| &candidate.name == level) {
            continue;
        }
        let known: Vec<&str> = class.topology_levels.iter().map(|level| level.name.as_str()).collect();
        let fix = match known.is_empty() {
            true => format!("declare topologyLevels on GPU class {}, or remove the rule", class.name),
            false => format!("name one of GPU class {}'s levels: {}", class.name, known.join(", ")),
        };
        problems.push(
            format!("{path}.{field}"),
            format!("level {level:?} is not a topology level of GPU class {}", class.name),
            fix,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;
    use crate::policy::{TopologyLevel, TopologyRule};
    use crate::validation::validate;

    fn level(name: &str, label: &str) -> TopologyLevel {
        TopologyLevel { name: name.to_owned(), node_label: label.to_owned() }
    }

    fn racked() -> TierPolicySpec {
        let mut spec = load_policy(None).unwrap().spec;
        for class in &mut spec.gpu_classes {
            class.topology_levels = vec![
                level("block", "topology.example.com/block"),
                level("rack", "topology.example.com/rack"),
                level("host", HOSTNAME_LABEL),
            ];
        }
        spec
    }

    fn problems(spec: &TierPolicySpec) -> Vec<String> {
        validate(spec).err().map(|errors| errors.0.iter().map(ToString::to_string).collect()).unwrap_or_default()
    }

    #[test]
    fn a_sample_policy_with_levels_and_a_rule_is_valid() {
        let mut spec = racked();
        spec.tiers[0].topology = Some(TopologyRule { required: Some("rack".into()), preferred: None, min_pods: 4 });
        assert_eq!(problems(&spec), Vec::<String>::new());
    }

    #[test]
    fn hostname_anywhere_but_last_is_refused_naming_the_field_and_the_fix() {
        let mut spec = racked();
        spec.gpu_classes[0].topology_levels.swap(1, 2);
        let found = problems(&spec);
        assert!(
            found.iter().any(|problem| problem.starts_with("spec.gpuClasses[0].topologyLevels[1].nodeLabel:")
                && problem.contains("only as the last level")
                && problem.contains("fix: move kubernetes.io/hostname to the end")),
            "{found:?}"
        );
    }

    #[test]
    fn more_than_sixteen_levels_are_refused() {
        let mut spec = racked();
        spec.gpu_classes[0].topology_levels =
            (0..17).map(|index| level(&format!("l{index}"), &format!("example.com/l{index}"))).collect();
        let found = problems(&spec);
        assert!(found.iter().any(|problem| problem.contains("at most 16")), "{found:?}");
    }

    #[test]
    fn a_level_that_is_one_of_the_class_node_labels_is_refused() {
        let mut spec = racked();
        let (key, _) = spec.gpu_classes[0].node_labels.iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap();
        spec.gpu_classes[0].topology_levels[0].node_label = key;
        let found = problems(&spec);
        assert!(
            found.iter().any(|problem| problem.starts_with("spec.gpuClasses[0].topologyLevels[0].nodeLabel:")
                && problem.contains("one of the class's nodeLabels")),
            "{found:?}"
        );
    }

    #[test]
    fn a_rule_naming_a_level_the_class_lacks_is_refused_with_the_levels_it_has() {
        let mut spec = racked();
        spec.tiers[0].topology = Some(TopologyRule { required: Some("zone".into()), preferred: None, min_pods: 2 });
        let found = problems(&spec);
        assert!(
            found.iter().any(|problem| problem.starts_with("spec.tiers[0].topology.required:")
                && problem.contains("block, rack, host")),
            "{found:?}"
        );
        let mut spec = racked();
        let class = spec.tiers[1].gpu_class.clone();
        spec.gpu_classes.iter_mut().find(|candidate| candidate.name == class).unwrap().topology_levels.clear();
        spec.tiers[1].topology = Some(TopologyRule { required: None, preferred: Some("rack".into()), min_pods: 2 });
        let found = problems(&spec);
        assert!(
            found.iter().any(|problem| problem.starts_with("spec.tiers[1].topology.preferred:")
                && problem.contains("declare topologyLevels")),
            "{found:?}"
        );
    }

    #[test]
    fn a_rule_must_name_exactly_one_level_and_at_least_two_pods() {
        let mut spec = racked();
        spec.tiers[0].topology =
            Some(TopologyRule { required: Some("rack".into()), preferred: Some("block".into()), min_pods: 1 });
        assert!(problems(&spec).iter().any(|problem| problem.contains("both required and preferred")));
        spec.tiers[0].topology = Some(TopologyRule { required: Some("rack".into()), preferred: None, min_pods: 1 });
        assert!(problems(&spec).iter().any(|problem| problem.starts_with("spec.tiers[0].topology.minPods")));
    }
}
