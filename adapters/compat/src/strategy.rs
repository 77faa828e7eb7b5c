//! Base/weight placement strategies in the two seed formats — smart-scheduler's
//! `smart-scheduler.io/schedule-strategy` (seed 003) and the `CustomPodScheduleStrategy` annotation (seed 004) —
//! parsed into one normalized [`Strategy`]; no I/O.
//!
//! [`Strategy`]'s `Display` writes the canonical form, which is the seed 003 format and parses back to the same
//! value, so a normalized strategy can travel on a pod template as one annotation.

use std::collections::BTreeMap;
use std::fmt;

use crate::labels::{label_key_problem, label_value_problem};

/// Annotation smart-scheduler reads on a Deployment (seed 003).
pub const SMART_SCHEDULER_ANNOTATION: &str = "smart-scheduler.io/schedule-strategy";
/// Pod annotation holding a seed 004 strategy.
pub const CUSTOM_POD_STRATEGY_ANNOTATION: &str = "CustomPodScheduleStrategy";
/// Pod annotation that must be `'true'` for seed 004 to apply `CustomPodScheduleStrategy`.
pub const USE_CUSTOM_SCHEDULER_ANNOTATION: &str = "UseCustomKubeScheduler";

/// An ordered list of node types: the first `base` pods go to the first rule, the rest are split by weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strategy {
    /// The rules in the order written; never empty, only the first carries a non-zero `base`, at least one weight
    /// is non-zero and no two rules share a node selector.
    pub rules: Vec<Rule>,
}

/// One node type of a strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Node labels selecting this node type; never empty.
    pub node_selector: BTreeMap<String, String>,
    /// Pods placed here before the weights apply (first rule only).
    pub base: u32,
    /// Relative share of the pods beyond the base.
    pub weight: u32,
}

/// A strategy annotation that cannot be parsed; the message quotes the bad part and says the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    /// A seed 003 `smart-scheduler.io/schedule-strategy` value.
    #[error("failed to parse schedule strategy `{input}`: {detail}")]
    ParseScheduleStrategy {
        /// The annotation value as given.
        input: String,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// A seed 004 `CustomPodScheduleStrategy` value.
    #[error("failed to parse CustomPodScheduleStrategy `{input}`: {detail}")]
    ParseCustomPodStrategy {
        /// The annotation value as given.
        input: String,
        /// What is wrong and how to fix it.
        detail: String,
    },
}

impl StrategyError {
    /// Fixed reason for metrics and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ParseScheduleStrategy { .. } => "parse_schedule_strategy",
            Self::ParseCustomPodStrategy { .. } => "parse_custom_pod_strategy",
        }
    }

    /// What is wrong and how to fix it, without the input.
    pub fn detail(&self) -> &str {
        match self {
            Self::ParseScheduleStrategy { detail, .. } | Self::ParseCustomPodStrategy { detail, .. } => detail,
        }
    }
}

/// Parses seed 003's format: rules separated by `;`, each `base=N,weight=N,nodeSelector=key:value[,key:value]`.
pub fn parse_schedule_strategy(input: &str) -> Result<Strategy, StrategyError> {
    parse_rules(input, ';', parse_schedule_rule)
        .and_then(Strategy::checked)
        .map_err(|detail| StrategyError::ParseScheduleStrategy { input: input.to_owned(), detail })
}

/// Parses seed 004's format: rules separated by `:`, each a comma list of `label=value`, `base=N`, `weight=N`.
pub fn parse_custom_pod_strategy(input: &str) -> Result<Strategy, StrategyError> {
    parse_rules(input, ':', parse_custom_pod_rule)
        .and_then(Strategy::checked)
        .map_err(|detail| StrategyError::ParseCustomPodStrategy { input: input.to_owned(), detail })
}

impl Strategy {
    /// Pods the first rule takes before the weights apply.
    pub fn base(&self) -> u32 {
        self.rules.first().map_or(0, |rule| rule.base)
    }

    /// The weights in rule order.
    pub fn weights(&self) -> Vec<u32> {
        self.rules.iter().map(|rule| rule.weight).collect()
    }

    fn checked(self) -> Result<Self, String> {
        if let Some((index, _)) = self.rules.iter().enumerate().skip(1).find(|(_, rule)| rule.base > 0) {
            return Err(format!(
                "rule {} sets base={}; only the first rule may carry base, move it there or drop it",
                index + 1,
                self.rules[index].base
            ));
        }
        if self.rules.iter().all(|rule| rule.weight == 0) {
            return Err("every rule has weight=0, so pods beyond the base have nowhere to go; give at least one \
                        rule weight=1 or more"
                .to_owned());
        }
        for (index, rule) in self.rules.iter().enumerate() {
            if let Some(first) = self.rules[..index].iter().position(|other| other.node_selector == rule.node_selector)
            {
                return Err(format!(
                    "rules {} and {} select the same nodes `{}`; merge them into one rule",
                    first + 1,
                    index + 1,
                    selector_text(&rule.node_selector)
                ));
            }
        }
        Ok(self)
    }
}

impl fmt::Display for Strategy {
    /// The canonical form (seed 003 syntax): `base=1,weight=1,nodeSelector=k:v;weight=2,nodeSelector=k:v`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, rule) in self.rules.iter().enumerate() {
            if index > 0 {
                f.write_str(";")?;
            }
            if rule.base > 0 {
                write!(f, "base={},", rule.base)?;
            }
            write!(f, "weight={},nodeSelector={}", rule.weight, selector_text(&rule.node_selector))?;
        }
        Ok(())
    }
}

fn selector_text(selector: &BTreeMap<String, String>) -> String {
    selector.iter().map(|(key, value)| format!("{key}:{value}")).collect::<Vec<_>>().join(",")
}

/// Splits `input` into rules on `separator` and parses each with `parse_rule(index, text)`.
fn parse_rules(
    input: &str,
    separator: char,
    parse_rule: fn(usize, &str) -> Result<Rule, String>,
) -> Result<Strategy, String> {
    if input.trim().is_empty() {
        return Err("the value is empty; write at least one rule".to_owned());
    }
    let rules = input
        .split(separator)
        .enumerate()
        .map(|(index, text)| {
            let text = text.trim();
            if text.is_empty() {
                Err(format!("rule {} is empty; remove the stray `{separator}`", index + 1))
            } else {
                parse_rule(index, text)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Strategy { rules })
}

/// Fields of one rule as they are read, before required ones are checked.
#[derive(Default)]
struct RuleFields {
    base: Option<u32>,
    weight: Option<u32>,
    node_selector: BTreeMap<String, String>,
}

impl RuleFields {
    fn set_number(&mut self, key: &str, value: &str, at: &RuleAt<'_>) -> Result<(), String> {
        let number = value.trim().parse::<u32>().map_err(|_| {
            format!("{at}: {key} `{value}` is not a whole number; write {key}=<0 or more>, e.g. {key}=1")
        })?;
        let slot = if key == "base" { &mut self.base } else { &mut self.weight };
        if slot.replace(number).is_some() {
            return Err(format!("{at}: {key} is given twice; keep one"));
        }
        Ok(())
    }

    fn add_label(&mut self, key: &str, value: &str, at: &RuleAt<'_>, example: &str) -> Result<(), String> {
        let (key, value) = (key.trim(), value.trim());
        if let Some(problem) = label_key_problem(key) {
            return Err(format!("{at}: {problem}; node labels look like {example}"));
        }
        if let Some(problem) = label_value_problem(value) {
            return Err(format!("{at}: label `{key}` value {problem}; node labels look like {example}"));
        }
        if self.node_selector.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!("{at}: node label `{key}` is given twice; keep one"));
        }
        Ok(())
    }

    fn into_rule(self, at: &RuleAt<'_>, selector_hint: &str) -> Result<Rule, String> {
        let Some(weight) = self.weight else {
            return Err(format!("{at}: weight is missing; add weight=<0 or more>, e.g. weight=1"));
        };
        if self.node_selector.is_empty() {
            return Err(format!("{at}: no node labels; add {selector_hint}"));
        }
        Ok(Rule { node_selector: self.node_selector, base: self.base.unwrap_or(0), weight })
    }
}

/// Names a rule in messages: `rule 2 "weight=2,nodeSelector=node-type:spot"`.
struct RuleAt<'a> {
    index: usize,
    text: &'a str,
}

impl fmt::Display for RuleAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {} `{}`", self.index + 1, self.text)
    }
}

fn parse_schedule_rule(index: usize, text: &str) -> Result<Rule, String> {
    const EXAMPLE: &str = "`nodeSelector=node-type:spot`";
    let at = RuleAt { index, text };
    let mut fields = RuleFields::default();
    let mut in_selector = false;
    for item in text.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("{at}: has an empty item; remove the stray `,`"));
        }
        match item.split_once('=').map(|(key, value)| (key.trim(), value)) {
            Some((key @ ("base" | "weight"), value)) => {
                in_selector = false;
                fields.set_number(key, value, &at)?;
            }
            Some(("nodeSelector", pair)) => {
                if in_selector || !fields.node_selector.is_empty() {
                    return Err(format!(
                        "{at}: nodeSelector is given twice; list every label in one nodeSelector=k:v,k:v"
                    ));
                }
                in_selector = true;
                add_selector_pair(&mut fields, pair, &at)?;
            }
            Some((key, _)) => {
                return Err(format!("{at}: unknown key `{key}`; use base, weight or nodeSelector"));
            }
            None if in_selector => add_selector_pair(&mut fields, item, &at)?,
            None => {
                return Err(format!("{at}: `{item}` is not key=value; write base=N, weight=N or {EXAMPLE}"));
            }
        }
    }
    fields.into_rule(&at, EXAMPLE)
}

fn add_selector_pair(fields: &mut RuleFields, pair: &str, at: &RuleAt<'_>) -> Result<(), String> {
    const EXAMPLE: &str = "`node-type:spot`";
    let Some((key, value)) = pair.split_once(':') else {
        return Err(format!("{at}: node selector pair `{pair}` has no `:`; write key:value, e.g. {EXAMPLE}"));
    };
    fields.add_label(key, value, at, EXAMPLE)
}

fn parse_custom_pod_rule(index: usize, text: &str) -> Result<Rule, String> {
    const EXAMPLE: &str = "`nodesize=spot4vcpu16gb`";
    let at = RuleAt { index, text };
    let mut fields = RuleFields::default();
    for item in text.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("{at}: has an empty item; remove the stray `,`"));
        }
        match item.split_once('=').map(|(key, value)| (key.trim(), value)) {
            Some((key @ ("base" | "weight"), value)) => fields.set_number(key, value, &at)?,
            Some((key, value)) => fields.add_label(key, value, &at, EXAMPLE)?,
            None => {
                return Err(format!("{at}: `{item}` is not key=value; write base=N, weight=N or {EXAMPLE}"));
            }
        }
    }
    fields.into_rule(&at, EXAMPLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
    }

    fn rule(base: u32, weight: u32, pairs: &[(&str, &str)]) -> Rule {
        Rule { node_selector: selector(pairs), base, weight }
    }

    #[test]
    fn seed_003_usage_example_gives_base_ondemand_then_one_to_two_spot() {
        let strategy = parse_schedule_strategy(
            "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=node-type:spot",
        )
        .unwrap();
        assert_eq!(
            strategy.rules,
            vec![rule(1, 1, &[("node-type", "ondemand")]), rule(0, 2, &[("node-type", "spot")])]
        );
    }

    #[test]
    fn seed_003_example_1_gives_two_base_and_one_to_three() {
        let strategy = parse_schedule_strategy(
            "base=2,weight=1,nodeSelector=node-type:ondemand;weight=3,nodeSelector=node-type:spot",
        )
        .unwrap();
        assert_eq!(
            strategy.rules,
            vec![rule(2, 1, &[("node-type", "ondemand")]), rule(0, 3, &[("node-type", "spot")])]
        );
    }

    #[test]
    fn seed_003_example_2_reads_two_labels_per_selector() {
        let strategy = parse_schedule_strategy(
            "base=1,weight=2,nodeSelector=zone:us-west-1a,node-type:ondemand;weight=1,nodeSelector=zone:us-west-1b,node-type:spot",
        )
        .unwrap();
        assert_eq!(
            strategy.rules,
            vec![
                rule(1, 2, &[("zone", "us-west-1a"), ("node-type", "ondemand")]),
                rule(0, 1, &[("zone", "us-west-1b"), ("node-type", "spot")]),
            ]
        );
    }

    #[test]
    fn seed_003_example_3_selects_gpu_accelerators() {
        let strategy = parse_schedule_strategy(
            "base=1,weight=1,nodeSelector=accelerator:nvidia-tesla-k80;weight=2,nodeSelector=accelerator:nvidia-tesla-v100",
        )
        .unwrap();
        assert_eq!(
            strategy.rules,
            vec![
                rule(1, 1, &[("accelerator", "nvidia-tesla-k80")]),
                rule(0, 2, &[("accelerator", "nvidia-tesla-v100")]),
            ]
        );
    }

    #[test]
    fn seed_004_alpine_example_gives_base_on_od_and_even_spot_weights() {
        let strategy = parse_custom_pod_strategy(
            "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1",
        )
        .unwrap();
        assert_eq!(
            strategy.rules,
            vec![
                rule(1, 0, &[("nodesize", "od4vcpu16gb")]),
                rule(0, 1, &[("nodesize", "spot4vcpu16gb")]),
                rule(0, 1, &[("nodesize", "spot8vcpu32gb")]),
            ]
        );
        assert_eq!((strategy.base(), strategy.weights()), (1, vec![0, 1, 1]));
    }

    #[test]
    fn seed_004_rule_may_select_several_labels_including_prefixed_keys() {
        let strategy =
            parse_custom_pod_strategy("lc=od,base=2,weight=1:lc=spot,karpenter.sh/capacity-type=spot,weight=1")
                .unwrap();
        assert_eq!(
            strategy.rules,
            vec![rule(2, 1, &[("lc", "od")]), rule(0, 1, &[("lc", "spot"), ("karpenter.sh/capacity-type", "spot")])]
        );
    }

    #[test]
    fn seed_004_node_group_labels_can_all_select_one_rule() {
        // The labels seed 004 gives its three managed node groups.
        let strategy = parse_custom_pod_strategy(
            "lc=od,apps=critical,nodesize=od4vcpu16gb,base=1,weight=0:\
             lc=spot,apps=noncritical,nodesize=spot4vcpu16gb,weight=1:\
             lc=spot,apps=noncritical,nodesize=spot8vcpu32gb,weight=1",
        )
        .unwrap();
        assert_eq!(
            strategy.rules,
            vec![
                rule(1, 0, &[("lc", "od"), ("apps", "critical"), ("nodesize", "od4vcpu16gb")]),
                rule(0, 1, &[("lc", "spot"), ("apps", "noncritical"), ("nodesize", "spot4vcpu16gb")]),
                rule(0, 1, &[("lc", "spot"), ("apps", "noncritical"), ("nodesize", "spot8vcpu32gb")]),
            ]
        );
    }

    #[test]
    fn base_only_on_second_rule_is_rejected() {
        let error = parse_custom_pod_strategy("lc=spot,weight=1:lc=od,base=2,weight=1").unwrap_err();
        assert!(error.to_string().contains("rule 2 sets base=2; only the first rule may carry base"), "{error}");
    }

    #[test]
    fn whitespace_around_items_is_tolerated() {
        let strategy = parse_schedule_strategy(
            " base=1, weight=1, nodeSelector=node-type:ondemand ; weight=2,nodeSelector=node-type:spot ",
        )
        .unwrap();
        assert_eq!(
            strategy.to_string(),
            "base=1,weight=1,nodeSelector=node-type:ondemand;weight=2,nodeSelector=node-type:spot"
        );
    }

    #[test]
    fn canonical_form_of_a_seed_004_strategy_parses_back_to_the_same_strategy() {
        let strategy = parse_custom_pod_strategy(
            "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1",
        )
        .unwrap();
        let canonical = strategy.to_string();
        assert_eq!(
            canonical,
            "base=1,weight=0,nodeSelector=nodesize:od4vcpu16gb;weight=1,nodeSelector=nodesize:spot4vcpu16gb;\
             weight=1,nodeSelector=nodesize:spot8vcpu32gb"
        );
        assert_eq!(parse_schedule_strategy(&canonical).unwrap(), strategy);
    }

    /// (input, a part the message must quote, a part of the fix it must give)
    const MALFORMED_SCHEDULE_STRATEGIES: &[(&str, &str, &str)] = &[
        ("", "empty", "at least one rule"),
        ("   ", "empty", "at least one rule"),
        ("base=1,weight=1,nodeSelector=node-type:ondemand;", "rule 2 is empty", "remove the stray `;`"),
        ("base=one,weight=1,nodeSelector=node-type:ondemand", "base `one`", "base=<0 or more>"),
        ("base=1,weight=-2,nodeSelector=node-type:ondemand", "weight `-2`", "weight=<0 or more>"),
        ("base=1,nodeSelector=node-type:ondemand", "weight is missing", "add weight="),
        ("base=1,weight=1", "no node labels", "nodeSelector=node-type:spot"),
        ("base=1,weight=1,nodeSelector=node-type=ondemand", "`node-type=ondemand` has no `:`", "key:value"),
        ("base=1,weight=1,nodeSelector=node-type:on demand", "`on demand`", "letters, digits"),
        ("base=1,weight=1,nodeselector=node-type:ondemand", "unknown key `nodeselector`", "nodeSelector"),
        ("base=1,weight=1,spot", "`spot` is not key=value", "base=N"),
        ("base=1,,weight=1,nodeSelector=a:b", "empty item", "stray `,`"),
        ("weight=1,weight=2,nodeSelector=a:b", "weight is given twice", "keep one"),
        ("weight=1,nodeSelector=a:b,a:c", "`a` is given twice", "keep one"),
        ("weight=1,nodeSelector=a:b;base=1,weight=1,nodeSelector=a:c", "rule 2 sets base=1", "first rule"),
        ("base=1,weight=0,nodeSelector=a:b;weight=0,nodeSelector=a:c", "every rule has weight=0", "weight=1"),
        ("weight=1,nodeSelector=a:b;weight=2,nodeSelector=a:b", "rules 1 and 2 select the same nodes `a:b`", "merge"),
        ("weight=1,nodeSelector=:b", "empty name", "node-type:spot"),
        ("weight=1,nodeSelector=a:b,nodeSelector=c:d", "nodeSelector is given twice", "one nodeSelector"),
    ];

    #[test]
    fn malformed_schedule_strategies_are_rejected_quoting_the_bad_part_and_the_fix() {
        for (input, quoted, fix) in MALFORMED_SCHEDULE_STRATEGIES {
            let error = parse_schedule_strategy(input).unwrap_err();
            let message = error.to_string();
            assert!(message.starts_with("failed to parse schedule strategy"), "{message}");
            assert!(message.contains(quoted), "{input:?}: {message} should quote {quoted:?}");
            assert!(message.contains(fix), "{input:?}: {message} should say {fix:?}");
            assert_eq!(error.reason(), "parse_schedule_strategy");
        }
    }

    const MALFORMED_CUSTOM_POD_STRATEGIES: &[(&str, &str, &str)] = &[
        ("", "empty", "at least one rule"),
        ("nodesize=od4vcpu16gb,base=1,weight=0::nodesize=spot,weight=1", "rule 2 is empty", "stray `:`"),
        ("nodesize=od4vcpu16gb,base=x,weight=0", "base `x`", "base=<0 or more>"),
        ("nodesize=od4vcpu16gb,base=1", "weight is missing", "weight=1"),
        ("base=1,weight=1", "no node labels", "nodesize=spot4vcpu16gb"),
        ("nodesize,weight=1", "`nodesize` is not key=value", "base=N"),
        ("node size=od,weight=1", "label key `node size`", "nodesize=spot4vcpu16gb"),
        ("nodesize=od4vcpu16gb,weight=1:nodesize=od4vcpu16gb,weight=2", "rules 1 and 2", "merge"),
        ("nodesize=od,base=1,weight=0:nodesize=spot,weight=0", "every rule has weight=0", "weight=1"),
        ("nodesize=od,weight=1,weight=1", "weight is given twice", "keep one"),
        ("nodesize=od,nodesize=spot,weight=1", "`nodesize` is given twice", "keep one"),
    ];

    #[test]
    fn malformed_custom_pod_strategies_are_rejected_quoting_the_bad_part_and_the_fix() {
        for (input, quoted, fix) in MALFORMED_CUSTOM_POD_STRATEGIES {
            let error = parse_custom_pod_strategy(input).unwrap_err();
            let message = error.to_string();
            assert!(message.starts_with("failed to parse CustomPodScheduleStrategy"), "{message}");
            assert!(message.contains(quoted), "{input:?}: {message} should quote {quoted:?}");
            assert!(message.contains(fix), "{input:?}: {message} should say {fix:?}");
            assert_eq!(error.reason(), "parse_custom_pod_strategy");
        }
    }

    mod properties {
        use proptest::prelude::{Strategy as _, prop_assert_eq, proptest};

        use super::super::{Rule, Strategy, parse_schedule_strategy};

        fn arb_strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
            let label = "[a-z][a-z0-9-]{0,8}[a-z0-9]";
            let rule = (proptest::collection::btree_map(label, label, 1..3), 0u32..5);
            (proptest::collection::vec(rule, 1..5), 0u32..4).prop_filter_map("valid strategy", |(rules, base)| {
                let rules = rules
                    .into_iter()
                    .enumerate()
                    .map(|(index, (node_selector, weight))| Rule {
                        node_selector,
                        base: if index == 0 { base } else { 0 },
                        weight,
                    })
                    .collect();
                Strategy { rules }.checked().ok()
            })
        }

        proptest! {
            #[test]
            fn canonical_form_always_parses_back_to_the_same_strategy(strategy in arb_strategy()) {
                prop_assert_eq!(parse_schedule_strategy(&strategy.to_string()), Ok(strategy));
            }
        }
    }
}
