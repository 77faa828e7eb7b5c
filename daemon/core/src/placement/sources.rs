//! Where a pod's placement strategy comes from — a TierPolicy strategy by name, tiergate's canonical
//! annotation, seed 004's `CustomPodScheduleStrategy` or seed 003's smart-scheduler annotation — resolved into
//! named rules; pure, no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use serde_json::Value;
use tiergate_compat::strategy::{
    CUSTOM_POD_STRATEGY_ANNOTATION, SMART_SCHEDULER_ANNOTATION, Strategy, StrategyError,
    USE_CUSTOM_SCHEDULER_ANNOTATION, parse_custom_pod_strategy, parse_schedule_strategy,
};

use super::split::Split;
use super::{PLACEMENT_ANNOTATION, PlacementError, STRATEGY_ANNOTATION};
use crate::policy::TierPolicySpec;

/// Which annotation a strategy came from, in precedence order (the first present wins on a pod).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `tiergate.io/placement: NAME`, a strategy of the TierPolicy.
    Policy,
    /// `tiergate.io/placement-strategy`, the canonical form tiergate copies from an owner onto its pod template.
    Canonical,
    /// Seed 004 `CustomPodScheduleStrategy` with `UseCustomKubeScheduler: 'true'`.
    CustomPod,
    /// Seed 003 `smart-scheduler.io/schedule-strategy`.
    SmartScheduler,
}

impl Source {
    /// The annotation (or label) key this source is read from.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Self::Policy => PLACEMENT_ANNOTATION,
            Self::Canonical => STRATEGY_ANNOTATION,
            Self::CustomPod => CUSTOM_POD_STRATEGY_ANNOTATION,
            Self::SmartScheduler => SMART_SCHEDULER_ANNOTATION,
        }
    }
}

/// One rule with the name recorded on its pods.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResolvedRule {
    /// Label value of `tiergate.io/placement-rule`.
    pub name: String,
    pub base: u32,
    pub weight: u32,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

/// A strategy ready to place pods.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResolvedStrategy {
    pub source: Source,
    pub rules: Vec<ResolvedRule>,
}

impl ResolvedStrategy {
    /// The split arithmetic of this strategy.
    pub(crate) fn split(&self) -> Split {
        Split::new(self.rules.first().map_or(0, |rule| rule.base), self.rules.iter().map(|rule| rule.weight).collect())
    }

    /// Index of the rule called `name`.
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        self.rules.iter().position(|rule| rule.name == name)
    }
}

/// Every strategy an object's metadata declares, in precedence order, plus warnings about ignored annotations.
#[derive(Debug, Default)]
pub(crate) struct Declarations {
    pub strategies: Vec<Result<ResolvedStrategy, PlacementError>>,
    pub warnings: Vec<String>,
}

/// String entries by key: labels or annotations, as a map or as the JSON map of an object's metadata (read in
/// place, nothing copied).
pub(crate) trait Entries {
    /// The string value of `key`, if any.
    fn entry(&self, key: &str) -> Option<&str>;
}

impl Entries for BTreeMap<String, String> {
    fn entry(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// The string map `field` (`labels`, `annotations`) of a metadata JSON value; values that are not strings are
/// not entries, as a typed map would not hold them.
pub(crate) struct JsonEntries<'v>(pub Option<&'v serde_json::Map<String, Value>>);

impl<'v> JsonEntries<'v> {
    /// The map `field` of `metadata`.
    pub(crate) fn of(metadata: &'v Value, field: &str) -> Self {
        Self(metadata.get(field).and_then(Value::as_object))
    }
}

impl Entries for JsonEntries<'_> {
    fn entry(&self, key: &str) -> Option<&str> {
        self.0?.get(key)?.as_str()
    }
}

/// Reads the strategy annotations (and the `tiergate.io/placement` label) of a pod or pod template.
pub(crate) fn declared_strategies(
    annotations: &impl Entries,
    labels: &impl Entries,
    policy: Option<&TierPolicySpec>,
) -> Declarations {
    let mut declarations = Declarations::default();
    if let Some(name) = annotations.entry(PLACEMENT_ANNOTATION).or_else(|| labels.entry(PLACEMENT_ANNOTATION)) {
        declarations.strategies.push(policy_strategy(name.trim(), policy));
    }
    if let Some(value) = annotations.entry(STRATEGY_ANNOTATION) {
        declarations.strategies.push(annotation_strategy(Source::Canonical, value, parse_schedule_strategy));
    }
    if let Some(value) = annotations.entry(CUSTOM_POD_STRATEGY_ANNOTATION) {
        let enabled = annotations
            .entry(USE_CUSTOM_SCHEDULER_ANNOTATION)
            .is_some_and(|flag| flag.trim().eq_ignore_ascii_case("true"));
        if enabled {
            declarations.strategies.push(annotation_strategy(Source::CustomPod, value, parse_custom_pod_strategy));
        } else {
            declarations.warnings.push(format!(
                "{CUSTOM_POD_STRATEGY_ANNOTATION} is ignored because {USE_CUSTOM_SCHEDULER_ANNOTATION} is not 'true'; \
                 set {USE_CUSTOM_SCHEDULER_ANNOTATION}: 'true' to apply it or remove it"
            ));
        }
    }
    if let Some(value) = annotations.entry(SMART_SCHEDULER_ANNOTATION) {
        declarations.strategies.push(annotation_strategy(Source::SmartScheduler, value, parse_schedule_strategy));
    }
    if let [Ok(first), rest @ ..] = declarations.strategies.as_slice()
        && !rest.is_empty()
    {
        let ignored: Vec<&str> =
            rest.iter().map(|other| other.as_ref().map_or("a malformed strategy", |s| s.source.key())).collect();
        declarations.warnings.push(format!(
            "placement follows {} and ignores {}; keep one strategy annotation",
            first.source.key(),
            ignored.join(", ")
        ));
    }
    declarations
}

fn policy_strategy(name: &str, policy: Option<&TierPolicySpec>) -> Result<ResolvedStrategy, PlacementError> {
    let error = |message: String| PlacementError { annotation: PLACEMENT_ANNOTATION.to_owned(), message };
    let Some(policy) = policy else {
        return Err(error(format!(
            "`{name}` names a TierPolicy placement strategy but no TierPolicy is active; create the policy or \
             remove {PLACEMENT_ANNOTATION}"
        )));
    };
    let Some(strategy) = policy.placement_strategy(name) else {
        let known: Vec<&str> = policy.placement_strategies.iter().map(|s| s.name.as_str()).collect();
        return Err(error(format!(
            "no placement strategy `{name}` in the TierPolicy (known: {}); use one of those names or add it to \
             spec.placementStrategies",
            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
        )));
    };
    if strategy.rules.is_empty() {
        return Err(error(format!("placement strategy `{name}` has no rules; add rules to it in the TierPolicy")));
    }
    let rules = strategy
        .rules
        .iter()
        .map(|rule| ResolvedRule {
            name: rule.name.clone(),
            base: rule.base,
            weight: rule.weight,
            node_selector: rule.node_selector.clone(),
            tolerations: rule.tolerations.clone(),
        })
        .collect();
    Ok(ResolvedStrategy { source: Source::Policy, rules })
}

fn annotation_strategy(
    source: Source,
    value: &str,
    parse: fn(&str) -> Result<Strategy, StrategyError>,
) -> Result<ResolvedStrategy, PlacementError> {
    let strategy = parse(value).map_err(|error| PlacementError {
        annotation: source.key().to_owned(),
        message: format!("`{value}`: {}", error.detail()),
    })?;
    Ok(ResolvedStrategy { source, rules: named_rules(&strategy) })
}

/// Names the rules of an annotation strategy after their node label values (`ondemand`, `us-west-1a-spot`), so
/// the name survives reordering; `rule-N` when that is not a unique label value.
pub(crate) fn named_rules(strategy: &Strategy) -> Vec<ResolvedRule> {
    let mut names: Vec<String> = Vec::with_capacity(strategy.rules.len());
    for (index, rule) in strategy.rules.iter().enumerate() {
        let joined =
            rule.node_selector.values().filter(|value| !value.is_empty()).cloned().collect::<Vec<_>>().join("-");
        let unique = !joined.is_empty() && joined.len() <= 63 && !names.contains(&joined);
        names.push(if unique { joined } else { format!("rule-{}", index + 1) });
    }
    strategy
        .rules
        .iter()
        .zip(names)
        .map(|(rule, name)| ResolvedRule {
            name,
            base: rule.base,
            weight: rule.weight,
            node_selector: rule.node_selector.clone(),
            tolerations: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
    }

    #[test]
    fn annotation_rules_are_named_after_their_label_values() {
        let strategy = parse_schedule_strategy(
            "base=1,weight=2,nodeSelector=zone:us-west-1a,node-type:ondemand;weight=1,nodeSelector=zone:us-west-1b,node-type:spot",
        )
        .unwrap();
        let names: Vec<String> = named_rules(&strategy).into_iter().map(|rule| rule.name).collect();
        assert_eq!(names, ["ondemand-us-west-1a", "spot-us-west-1b"]);
    }

    #[test]
    fn rules_whose_values_collide_fall_back_to_their_position() {
        let strategy = parse_schedule_strategy("weight=1,nodeSelector=a:x;weight=1,nodeSelector=b:x").unwrap();
        let names: Vec<String> = named_rules(&strategy).into_iter().map(|rule| rule.name).collect();
        assert_eq!(names, ["x", "rule-2"]);
    }

    #[test]
    fn custom_pod_strategy_without_use_custom_scheduler_is_ignored_with_a_warning() {
        let declarations = declared_strategies(
            &map(&[(CUSTOM_POD_STRATEGY_ANNOTATION, "nodesize=od,weight=1")]),
            &BTreeMap::new(),
            None,
        );
        assert!(declarations.strategies.is_empty());
        assert!(declarations.warnings[0].contains("UseCustomKubeScheduler is not 'true'"));
    }

    #[test]
    fn a_second_strategy_annotation_is_ignored_with_a_warning_naming_both() {
        let declarations = declared_strategies(
            &map(&[
                (STRATEGY_ANNOTATION, "weight=1,nodeSelector=a:b"),
                (SMART_SCHEDULER_ANNOTATION, "weight=1,nodeSelector=a:c"),
            ]),
            &BTreeMap::new(),
            None,
        );
        assert_eq!(declarations.strategies.len(), 2);
        assert_eq!(
            declarations.warnings,
            ["placement follows tiergate.io/placement-strategy and ignores smart-scheduler.io/schedule-strategy; \
              keep one strategy annotation"]
        );
    }

    #[test]
    fn unknown_policy_strategy_names_the_known_ones() {
        let declarations = declared_strategies(&map(&[(PLACEMENT_ANNOTATION, "nope")]), &BTreeMap::new(), None);
        let error = declarations.strategies[0].as_ref().unwrap_err();
        assert!(error.message.contains("no TierPolicy is active"), "{error}");
    }
}
