//! A tier's topology rule resolved against its GPU classes' levels: what the webhook writes and the levels a
//! tenant may name; pure, shared by the plan and the admission decision (which must not import each other).

use crate::policy::{Tier, TierPolicySpec, TopologyLevel};

/// Whether a rule asks for one domain (`required`) or tries it first (`preferred`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TopologyMode {
    /// Kueue `podset-preferred-topology`.
    Preferred,
    /// Kueue `podset-required-topology` (stricter).
    Required,
}

impl TopologyMode {
    /// `required` or `preferred`, as the policy spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Preferred => "preferred",
        }
    }
}

/// A tier's topology rule resolved against its GPU classes: what the webhook writes on each pod set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedRule {
    /// Required or preferred.
    pub mode: TopologyMode,
    /// The level's short name, e.g. `rack`.
    pub level: String,
    /// The level's node label, e.g. `topology.example.com/rack`.
    pub node_label: String,
    /// The level's depth in the primary class's levels (0 = broadest).
    pub depth: usize,
    /// The rule applies to workloads of at least this many pods.
    pub min_pods: u32,
}

/// The levels a tenant may name in a tier: those of the tier's primary class, then the fallbacks' (first
/// occurrence of each node label), with the class they come from.
pub fn tier_levels<'p>(spec: &'p TierPolicySpec, tier: &Tier) -> Vec<&'p TopologyLevel> {
    let mut levels: Vec<&TopologyLevel> = Vec::new();
    for class in tier.gpu_class_names().filter_map(|name| spec.gpu_class(name)) {
        for level in &class.topology_levels {
            if !levels.iter().any(|seen| seen.node_label == level.node_label) {
                levels.push(level);
            }
        }
    }
    levels
}

/// The tier's rule, resolved against its primary class's levels; `None` without a rule or when the rule names no
/// level of the class (an invalid policy, refused by validation).
pub fn resolve_rule(spec: &TierPolicySpec, tier: &Tier) -> Option<ResolvedRule> {
    let rule = tier.topology.as_ref()?;
    let (mode, level) = match (&rule.required, &rule.preferred) {
        (Some(level), None) => (TopologyMode::Required, level),
        (None, Some(level)) => (TopologyMode::Preferred, level),
        _ => return None,
    };
    let class = spec.gpu_class(&tier.gpu_class)?;
    let depth = class.topology_levels.iter().position(|candidate| &candidate.name == level)?;
    Some(ResolvedRule {
        mode,
        level: level.clone(),
        node_label: class.topology_levels[depth].node_label.clone(),
        depth,
        min_pods: rule.min_pods,
    })
}

/// `rack (topology.example.com/rack), ...`: how levels are listed to people.
pub fn describe_levels(levels: &[&TopologyLevel]) -> String {
    if levels.is_empty() {
        return "none".to_owned();
    }
    levels.iter().map(|level| format!("{} ({})", level.name, level.node_label)).collect::<Vec<_>>().join(", ")
}
