//! TierPolicy validation: every problem of a policy, each naming its field path and the fix; no I/O.
//!
//! [`validate`] never stops at the first problem: a platform team fixing a policy sees the whole list at once.
//! The checks mirror what Kubernetes and Kueue would refuse later (names, label syntax, quantities, Kueue enums
//! and the ClusterQueue CEL rules) plus tiergate's own rules (known classes, one bucket per score range...).

mod boundary;
mod budget;
pub mod cohorts;
mod dra;
pub mod fields;
pub mod fleet;
mod karpenter;
/// Kubernetes name and label syntax, where validation has always offered it.
pub use crate::syntax as names;
pub mod quantity;
pub mod quota;
mod quota_windows;
mod run_time;
mod tenants;
pub mod topology;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use tiergate_kueue as kueue;

use self::names::{
    DNS_LABEL_RULE, DNS_SUBDOMAIN_RULE, LABEL_VALUE_RULE, QUALIFIED_NAME_RULE, is_dns_label, is_dns_subdomain,
    is_label_value, is_qualified_name,
};
use self::quantity::{ParsedQuantity, parse_quantity};
use crate::plan::names::rule_flavor_name;
use crate::policy::{
    GpuClass, PlacementStrategy, Preemption, PriorityBucket, ProvisioningRetry, ResourceQuota, Tier, TierPolicy,
    TierPolicySpec,
};
use crate::provisioning::{BEST_EFFORT_ATOMIC_CLASS, CHECK_CAPACITY_CLASS};

/// Longest scoring timeout, in milliseconds: the webhook itself must answer within the API server's 5 s.
pub const MAX_SCORING_TIMEOUT_MS: u64 = 5000;

/// One problem of a policy: where, what, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// Field path, e.g. `spec.tiers[1].gpuClass`.
    pub path: String,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}: {}; fix: {}", self.path, self.problem, self.fix)
    }
}

/// Every problem of a policy (never empty).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl fmt::Display for PolicyErrors {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "failed to validate the TierPolicy: {} problem(s)", self.0.len())?;
        for error in &self.0 {
            write!(formatter, "\n  - {error}")?;
        }
        Ok(())
    }
}

impl PolicyErrors {
    /// Fixed reason for metrics, events and status conditions.
    pub fn reason(&self) -> &'static str {
        "invalid_policy"
    }

    /// The problems.
    pub fn problems(&self) -> &[PolicyError] {
        &self.0
    }

    /// The field paths with a problem, in order.
    pub fn paths(&self) -> Vec<&str> {
        self.0.iter().map(|error| error.path.as_str()).collect()
    }
}

/// Checks a whole TierPolicy: its name (it becomes a label value on every generated object) and its spec.
pub fn validate_policy(policy: &TierPolicy) -> Result<(), PolicyErrors> {
    let mut problems = Problems::default();
    match policy.metadata.name.as_deref() {
        None | Some("") => {
            problems.push("metadata.name", "the policy has no name", "set metadata.name, e.g. `default`")
        }
        Some(name) if !is_dns_label(name) => problems.push(
            "metadata.name",
            format!("{name:?} is not {DNS_LABEL_RULE}"),
            "rename the policy; its name is written as the `tiergate.io/policy` label value on every object",
        ),
        Some(_) => {}
    }
    check_spec(&policy.spec, &mut problems);
    problems.into_result()
}

/// Checks a TierPolicy spec and lists every problem.
pub fn validate(spec: &TierPolicySpec) -> Result<(), PolicyErrors> {
    let mut problems = Problems::default();
    check_spec(spec, &mut problems);
    problems.into_result()
}

#[derive(Default)]
struct Problems(Vec<PolicyError>);

impl Problems {
    fn push(&mut self, path: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) {
        self.0.push(PolicyError { path: path.into(), problem: problem.into(), fix: fix.into() });
    }

    fn into_result(self) -> Result<(), PolicyErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(PolicyErrors(self.0)) }
    }

    fn dns_label(&mut self, path: &str, value: &str, what: &str) {
        if !is_dns_label(value) {
            self.push(path, format!("{what} {value:?} is not {DNS_LABEL_RULE}"), format!("rename the {what}"));
        }
    }

    /// Reports every name that appears more than once, at each later occurrence.
    fn duplicates<'a>(&mut self, items: impl IntoIterator<Item = (String, &'a str)>, what: &str) {
        let mut seen = BTreeMap::new();
        for (path, name) in items {
            if let Some(first) = seen.get(name) {
                self.push(
                    path,
                    format!("{what} {name:?} is declared twice (first at {first})"),
                    format!("give each {what} a unique name"),
                );
            } else {
                seen.insert(name, path);
            }
        }
    }

    fn labels(&mut self, path: &str, labels: &BTreeMap<String, String>) {
        for (key, value) in labels {
            if !is_qualified_name(key) {
                self.push(
                    format!("{path}[{key:?}]"),
                    format!("label key {key:?} is not {QUALIFIED_NAME_RULE}"),
                    "fix the label key",
                );
            }
            if !is_label_value(value) {
                self.push(
                    format!("{path}[{key:?}]"),
                    format!("label value {value:?} is not {LABEL_VALUE_RULE}"),
                    "fix the label value",
                );
            }
        }
    }
}

fn check_spec(spec: &TierPolicySpec, problems: &mut Problems) {
    if !is_qualified_name(&spec.tier_label) {
        problems.push(
            "spec.tierLabel",
            format!("{:?} is not a valid namespace label key ({QUALIFIED_NAME_RULE})", spec.tier_label),
            "set the label your namespaces carry, e.g. `tiergate.io/tier` or `tenant.kubenexus.io/tier`",
        );
    }
    check_gpu_classes(spec, problems);
    check_placement_strategies(spec, problems);
    check_priority_buckets(&spec.priority_buckets, problems);
    check_tiers(spec, problems);
    check_flavor_names(spec, problems);
    problems.0.extend(quota::quota_problems(spec));
    for (index, namespace) in spec.excluded_namespaces.iter().enumerate() {
        problems.dns_label(&format!("spec.excludedNamespaces[{index}]"), namespace, "namespace");
    }
    for (index, namespace) in spec.admission.admin_namespaces.iter().enumerate() {
        problems.dns_label(&format!("spec.admission.adminNamespaces[{index}]"), namespace, "namespace");
    }
    for (field, values) in [("adminUsers", &spec.admission.admin_users), ("adminGroups", &spec.admission.admin_groups)]
    {
        for (index, value) in values.iter().enumerate() {
            if value.trim().is_empty() {
                problems.push(format!("spec.admission.{field}[{index}]"), "empty name", "remove the entry or name it");
            }
        }
    }
    check_scoring(spec, problems);
    fleet::check_fleet(spec, problems);
    topology::check_topology(spec, problems);
    cohorts::check_cohorts(spec, problems);
    dra::check_dra(spec, problems);
    karpenter::check_karpenter(spec, problems);
    tenants::check_tenant_fair_sharing(spec, problems);
    run_time::check_run_times(spec, problems);
    quota_windows::check_quota_windows(spec, problems);
    budget::check_budgets(spec, problems);
}

fn check_gpu_classes(spec: &TierPolicySpec, problems: &mut Problems) {
    if spec.gpu_classes.is_empty() {
        problems.push(
            "spec.gpuClasses",
            "no GPU class is declared",
            "declare at least one GPU class with its node labels",
        );
    }
    problems.duplicates(
        spec.gpu_classes
            .iter()
            .enumerate()
            .map(|(index, class)| (format!("spec.gpuClasses[{index}].name"), class.name.as_str())),
        "GPU class",
    );
    for (index, class) in spec.gpu_classes.iter().enumerate() {
        check_gpu_class(&format!("spec.gpuClasses[{index}]"), class, problems);
    }
}

fn check_gpu_class(path: &str, class: &GpuClass, problems: &mut Problems) {
    problems.dns_label(&format!("{path}.name"), &class.name, "GPU class");
    if class.node_labels.is_empty() && class.dra.is_none() {
        problems.push(
            format!("{path}.nodeLabels"),
            "a GPU class without node labels would select every node",
            "add the label its nodes carry, e.g. `gpu.nvidia.com/class: h100`, or find its devices through `dra`",
        );
    }
    if class.node_labels.len() > kueue::MAX_FLAVOR_ENTRIES {
        problems.push(
            format!("{path}.nodeLabels"),
            format!(
                "{} labels; a Kueue ResourceFlavor holds at most {}",
                class.node_labels.len(),
                kueue::MAX_FLAVOR_ENTRIES
            ),
            "keep only the labels that identify the class",
        );
    }
    problems.labels(&format!("{path}.nodeLabels"), &class.node_labels);
    check_taints(&format!("{path}.nodeTaints"), &class.node_taints, problems);
    check_tolerations(&format!("{path}.tolerations"), &class.tolerations, problems);
    boundary::check_resource_names(path, class, problems);
}

fn check_taints(path: &str, taints: &[Taint], problems: &mut Problems) {
    if taints.len() > kueue::MAX_FLAVOR_ENTRIES {
        problems.push(
            path,
            format!("{} taints; a ResourceFlavor holds at most {}", taints.len(), kueue::MAX_FLAVOR_ENTRIES),
            "drop taints",
        );
    }
    for (index, taint) in taints.iter().enumerate() {
        let path = format!("{path}[{index}]");
        if !is_qualified_name(&taint.key) {
            problems.push(
                format!("{path}.key"),
                format!("taint key {:?} is not {QUALIFIED_NAME_RULE}", taint.key),
                "fix the key",
            );
        }
        if let Some(value) = &taint.value
            && !is_label_value(value)
        {
            problems.push(
                format!("{path}.value"),
                format!("taint value {value:?} is not {LABEL_VALUE_RULE}"),
                "fix the value",
            );
        }
        if !kueue::TAINT_EFFECT_VALUES.contains(&taint.effect.as_str()) {
            problems.push(
                format!("{path}.effect"),
                format!("taint effect {:?} is not one of {:?}", taint.effect, kueue::TAINT_EFFECT_VALUES),
                "use NoSchedule, PreferNoSchedule or NoExecute",
            );
        }
    }
}

fn check_tolerations(path: &str, tolerations: &[Toleration], problems: &mut Problems) {
    if tolerations.len() > kueue::MAX_FLAVOR_ENTRIES {
        problems.push(
            path,
            format!("{} tolerations; a ResourceFlavor holds at most {}", tolerations.len(), kueue::MAX_FLAVOR_ENTRIES),
            "drop tolerations",
        );
    }
    for (index, toleration) in tolerations.iter().enumerate() {
        let path = format!("{path}[{index}]");
        let operator = toleration.operator.as_deref().unwrap_or("Equal");
        if !kueue::TOLERATION_OPERATOR_VALUES.contains(&operator) {
            problems.push(
                format!("{path}.operator"),
                format!("operator {operator:?} is not Equal or Exists"),
                "use Equal or Exists",
            );
        }
        match toleration.key.as_deref() {
            None | Some("") if operator != "Exists" => problems.push(
                format!("{path}.key"),
                "a toleration without a key must use operator Exists (it then tolerates every taint)",
                "set the taint key, or operator: Exists",
            ),
            Some(key) if !key.is_empty() && !is_qualified_name(key) => {
                problems.push(format!("{path}.key"), format!("key {key:?} is not {QUALIFIED_NAME_RULE}"), "fix the key")
            }
            _ => {}
        }
        if operator == "Exists" && toleration.value.as_deref().is_some_and(|value| !value.is_empty()) {
            problems.push(
                format!("{path}.value"),
                "operator Exists takes no value",
                "remove the value or use operator Equal",
            );
        }
        if let Some(effect) = toleration.effect.as_deref()
            && !effect.is_empty()
            && !kueue::TAINT_EFFECT_VALUES.contains(&effect)
        {
            problems.push(
                format!("{path}.effect"),
                format!("effect {effect:?} is not one of {:?}", kueue::TAINT_EFFECT_VALUES),
                "use NoSchedule, PreferNoSchedule, NoExecute or leave it empty",
            );
        }
        if toleration.toleration_seconds.is_some() && toleration.effect.as_deref() != Some("NoExecute") {
            problems.push(
                format!("{path}.tolerationSeconds"),
                "tolerationSeconds only applies to effect NoExecute",
                "remove tolerationSeconds or set effect: NoExecute",
            );
        }
    }
}

fn check_placement_strategies(spec: &TierPolicySpec, problems: &mut Problems) {
    problems.duplicates(
        spec.placement_strategies
            .iter()
            .enumerate()
            .map(|(index, strategy)| (format!("spec.placementStrategies[{index}].name"), strategy.name.as_str())),
        "placement strategy",
    );
    for (index, strategy) in spec.placement_strategies.iter().enumerate() {
        check_placement_strategy(&format!("spec.placementStrategies[{index}]"), strategy, problems);
    }
}

fn check_placement_strategy(path: &str, strategy: &PlacementStrategy, problems: &mut Problems) {
    problems.dns_label(&format!("{path}.name"), &strategy.name, "placement strategy");
    if strategy.rules.is_empty() {
        problems.push(
            format!("{path}.rules"),
            "a strategy needs at least one rule",
            "add a rule with a nodeSelector and weight",
        );
    }
    problems.duplicates(
        strategy
            .rules
            .iter()
            .enumerate()
            .map(|(index, rule)| (format!("{path}.rules[{index}].name"), rule.name.as_str())),
        "placement rule",
    );
    for (index, rule) in strategy.rules.iter().enumerate() {
        let rule_path = format!("{path}.rules[{index}]");
        problems.dns_label(&format!("{rule_path}.name"), &rule.name, "placement rule");
        if index > 0 && rule.base > 0 {
            problems.push(
                format!("{rule_path}.base"),
                format!("base {} on rule {index}; only the first rule gets the base pods", rule.base),
                "move `base` to the first rule or remove it",
            );
        }
        if rule.node_selector.is_empty() {
            problems.push(
                format!("{rule_path}.nodeSelector"),
                "a rule without a node selector places pods anywhere",
                "add the label of this node type, e.g. `node-type: spot`",
            );
        }
        if rule.node_selector.len() > kueue::MAX_FLAVOR_ENTRIES {
            problems.push(
                format!("{rule_path}.nodeSelector"),
                "more than 8 labels (a ResourceFlavor holds 8)",
                "drop labels",
            );
        }
        problems.labels(&format!("{rule_path}.nodeSelector"), &rule.node_selector);
        check_tolerations(&format!("{rule_path}.tolerations"), &rule.tolerations, problems);
    }
    if !strategy.rules.is_empty() && strategy.rules.iter().all(|rule| rule.weight == 0) {
        problems.push(
            format!("{path}.rules"),
            "every rule has weight 0, so pods beyond `base` have nowhere to go",
            "give at least one rule a weight above 0",
        );
    }
}

fn check_priority_buckets(buckets: &[PriorityBucket], problems: &mut Problems) {
    if buckets.is_empty() {
        problems.push(
            "spec.priorityBuckets",
            "no priority bucket",
            "remove the field to get the defaults (gpu-ultra >= 90, gpu-high >= 70, gpu-medium >= 50, gpu-default >= 0)",
        );
        return;
    }
    problems.duplicates(
        buckets
            .iter()
            .enumerate()
            .map(|(index, bucket)| (format!("spec.priorityBuckets[{index}].name"), bucket.name.as_str())),
        "priority bucket",
    );
    let mut by_score: BTreeMap<i32, usize> = BTreeMap::new();
    for (index, bucket) in buckets.iter().enumerate() {
        let path = format!("spec.priorityBuckets[{index}]");
        problems.dns_label(&format!("{path}.name"), &bucket.name, "WorkloadPriorityClass");
        if !(0..=100).contains(&bucket.min_score) {
            problems.push(
                format!("{path}.minScore"),
                format!("minScore {} is outside 0..=100", bucket.min_score),
                "use a score from 0 to 100",
            );
        }
        if let Some(first) = by_score.get(&bucket.min_score) {
            problems.push(
                format!("{path}.minScore"),
                format!(
                    "minScore {} is also the minScore of spec.priorityBuckets[{first}]; the buckets overlap",
                    bucket.min_score
                ),
                "give each bucket a distinct minScore",
            );
        } else {
            by_score.insert(bucket.min_score, index);
        }
    }
    if !by_score.contains_key(&0) {
        problems.push(
            "spec.priorityBuckets",
            "no bucket starts at minScore 0, so low scores map to no WorkloadPriorityClass",
            "add a bucket with minScore: 0 (e.g. gpu-default)",
        );
    }
    let ordered: Vec<usize> = by_score.values().copied().collect();
    for pair in ordered.windows(2) {
        let (lower, higher) = (&buckets[pair[0]], &buckets[pair[1]]);
        if higher.value <= lower.value {
            problems.push(
                format!("spec.priorityBuckets[{}].value", pair[1]),
                format!(
                    "bucket {:?} (minScore {}) has value {} but {:?} (minScore {}) has {}; higher scores must get higher priority",
                    higher.name, higher.min_score, higher.value, lower.name, lower.min_score, lower.value
                ),
                "order the values like the minScores",
            );
        }
    }
}

fn check_tiers(spec: &TierPolicySpec, problems: &mut Problems) {
    if spec.tiers.is_empty() {
        problems.push("spec.tiers", "no tier is declared", "declare at least one tier with a GPU class and quotas");
    }
    problems.duplicates(
        spec.tiers.iter().enumerate().map(|(index, tier)| (format!("spec.tiers[{index}].name"), tier.name.as_str())),
        "tier",
    );
    let local_queues: Vec<(String, String)> = spec
        .tiers
        .iter()
        .enumerate()
        .map(|(index, tier)| (format!("spec.tiers[{index}].localQueueName"), tier.local_queue()))
        .collect();
    let mut seen = BTreeMap::new();
    for (path, name) in &local_queues {
        if let Some(first) = seen.insert(name.as_str(), path.as_str()) {
            problems.push(
                path.clone(),
                format!("LocalQueue name {name:?} is also used at {first}"),
                "give each tier its own LocalQueue name: a LocalQueue's clusterQueue cannot change, so a namespace \
                 moving tier needs a queue with a new name",
            );
        }
    }
    for (index, tier) in spec.tiers.iter().enumerate() {
        check_tier(spec, &format!("spec.tiers[{index}]"), tier, problems);
    }
}

fn check_tier(spec: &TierPolicySpec, path: &str, tier: &Tier, problems: &mut Problems) {
    // A DNS label is also a valid value of the tier label, which the ClusterQueue's namespaceSelector matches.
    problems.dns_label(&format!("{path}.name"), &tier.name, "tier");
    let known_classes: Vec<&str> = spec.gpu_classes.iter().map(|class| class.name.as_str()).collect();
    let class_fields = std::iter::once((format!("{path}.gpuClass"), tier.gpu_class.as_str())).chain(
        tier.fallback_gpu_classes
            .iter()
            .enumerate()
            .map(|(index, name)| (format!("{path}.fallbackGpuClasses[{index}]"), name.as_str())),
    );
    let mut seen = BTreeSet::new();
    for (field, class_name) in class_fields {
        if !seen.insert(class_name) {
            problems.push(
                field.clone(),
                format!("GPU class {class_name:?} is listed twice for this tier"),
                "list each class once",
            );
        }
        match spec.gpu_class(class_name) {
            None => problems.push(
                field,
                format!("unknown GPU class {class_name:?}"),
                format!("use one of the declared classes {known_classes:?} or declare it under spec.gpuClasses"),
            ),
            Some(class) if !tier.quotas.contains_key(class.primary_resource()) => problems.push(
                format!("{path}.quotas"),
                format!("no quota for {:?}, the GPU resource of class {:?}", class.primary_resource(), class.name),
                format!("add `{}: {{nominal: \"N\"}}` under quotas", class.primary_resource()),
            ),
            Some(_) => {}
        }
    }
    if tier.quotas.len() > kueue::MAX_RESOURCE_GROUP_ENTRIES {
        problems.push(format!("{path}.quotas"), "more than 64 resources", "quota at most 64 resources");
    }
    for (resource, quota) in &tier.quotas {
        check_quota(&format!("{path}.quotas[{resource:?}]"), resource, quota, tier.cohort.is_some(), problems);
    }
    if let Some(cohort) = &tier.cohort
        && !is_dns_subdomain(cohort)
    {
        problems.push(
            format!("{path}.cohort"),
            format!("cohort {cohort:?} is not {DNS_SUBDOMAIN_RULE}"),
            "rename the cohort",
        );
    }
    if let Some(preemption) = &tier.preemption {
        check_preemption(&format!("{path}.preemption"), preemption, problems);
    }
    if let Some(name) = &tier.local_queue_name {
        problems.dns_label(&format!("{path}.localQueueName"), name, "LocalQueue");
    }
    if let Some(strategy) = &tier.placement
        && spec.placement_strategy(strategy).is_none()
    {
        let known: Vec<&str> = spec.placement_strategies.iter().map(|strategy| strategy.name.as_str()).collect();
        problems.push(
            format!("{path}.placement"),
            format!("unknown placement strategy {strategy:?}"),
            format!("use one of {known:?} or declare it under spec.placementStrategies"),
        );
    }
    if let Some(class) = &tier.default_priority_class
        && !spec.priority_buckets.iter().any(|bucket| &bucket.name == class)
    {
        problems.push(
            format!("{path}.defaultPriorityClass"),
            format!("{class:?} is not a priority bucket"),
            "name one of spec.priorityBuckets[*].name",
        );
    }
    boundary::check_priority_ceiling(path, tier, &spec.priority_buckets, problems);
    let flavor_count = 1
        + tier.fallback_gpu_classes.len()
        + tier
            .placement
            .as_deref()
            .and_then(|name| spec.placement_strategy(name))
            .map_or(0, |strategy| strategy.rules.len());
    if flavor_count > kueue::MAX_RESOURCE_GROUP_ENTRIES {
        problems.push(
            path,
            format!("{flavor_count} flavors; a ClusterQueue resource group holds 64"),
            "use fewer classes or rules",
        );
    }
    if let Some(provisioning) = &tier.provisioning {
        let path = format!("{path}.provisioning");
        if !is_dns_subdomain(&provisioning.provisioning_class_name) {
            problems.push(
                format!("{path}.provisioningClassName"),
                format!("{:?} is not {DNS_SUBDOMAIN_RULE}", provisioning.provisioning_class_name),
                "use e.g. `check-capacity.autoscaling.x-k8s.io` or `queued-provisioning.gke.io`",
            );
        }
        if provisioning.parameters.len() > kueue::MAX_PROVISIONING_PARAMETERS {
            problems.push(format!("{path}.parameters"), "more than 100 parameters", "pass at most 100 parameters");
        }
        for (key, value) in &provisioning.parameters {
            if value.len() > kueue::MAX_PROVISIONING_PARAMETER_LENGTH {
                problems.push(
                    format!("{path}.parameters[{key:?}]"),
                    "value longer than 255 characters",
                    "shorten the value",
                );
            }
        }
        for (index, resource) in provisioning.managed_resources.iter().enumerate() {
            if !tier.quotas.contains_key(resource) {
                problems.push(
                    format!("{path}.managedResources[{index}]"),
                    format!("{resource:?} has no quota in this tier"),
                    "list only resources under the tier's quotas",
                );
            }
        }
        let autoscaled = crate::provisioning::check_capacity_on_autoscaled(spec, tier);
        if !autoscaled.is_empty() {
            problems.push(
                format!("{path}.provisioningClassName"),
                format!(
                    "{CHECK_CAPACITY_CLASS} only finds capacity that exists, and GPU class(es) {} are `capacity: \
                     Autoscaled`: on an empty pool the workload waits forever (a suspended workload has no pods \
                     the autoscaler would grow the pool for)",
                    autoscaled.join(", ")
                ),
                format!(
                    "use `{BEST_EFFORT_ATOMIC_CLASS}`, which grows the pool by the whole request at once, or set \
                     the class's `capacity: Fixed` if its nodes exist whether or not a workload waits"
                ),
            );
        }
        if let Some(retry) = &provisioning.retry_strategy {
            check_retry_strategy(&format!("{path}.retryStrategy"), retry, problems);
        }
    }
}

/// Kueue's retry settings must make sense: no negative count, delays of at least a second, the longest delay no
/// shorter than the first.
fn check_retry_strategy(path: &str, retry: &ProvisioningRetry, problems: &mut Problems) {
    if retry.backoff_limit_count < 0 {
        problems.push(
            format!("{path}.backoffLimitCount"),
            format!("{} is negative", retry.backoff_limit_count),
            "use 0 to switch retrying off, or a positive count",
        );
    }
    for (field, seconds) in
        [("backoffBaseSeconds", retry.backoff_base_seconds), ("backoffMaxSeconds", retry.backoff_max_seconds)]
    {
        if seconds < 1 {
            problems.push(format!("{path}.{field}"), format!("{seconds} is below 1 second"), "use at least 1");
        }
    }
    if retry.backoff_max_seconds < retry.backoff_base_seconds {
        problems.push(
            format!("{path}.backoffMaxSeconds"),
            format!(
                "{} is shorter than backoffBaseSeconds ({})",
                retry.backoff_max_seconds, retry.backoff_base_seconds
            ),
            "make backoffMaxSeconds at least backoffBaseSeconds",
        );
    }
}

/// Largest quantity value Kubernetes stores: its milli-value must fit an int64.
const MAX_QUANTITY_VALUE: f64 = i64::MAX as f64 / 1000.0;

/// Kubernetes' `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io`, not a quota `requests.` name.
fn is_extended_resource(resource: &str) -> bool {
    resource.contains('/') && !resource.contains("kubernetes.io/") && !resource.starts_with("requests.")
}

fn check_quota(path: &str, resource: &str, quota: &ResourceQuota, has_cohort: bool, problems: &mut Problems) {
    if !is_qualified_name(resource) {
        problems.push(
            path,
            format!("{resource:?} is not a resource name ({QUALIFIED_NAME_RULE})"),
            "use e.g. cpu, memory, nvidia.com/gpu",
        );
    }
    let parse = |problems: &mut Problems, field: &str, text: &str| -> Option<ParsedQuantity> {
        match parse_quantity(text) {
            None => {
                problems.push(
                    format!("{path}.{field}"),
                    format!("{text:?} is not a Kubernetes quantity"),
                    "write e.g. \"64\", \"500m\", \"512Gi\" or \"4Ti\"",
                );
                None
            }
            // `-0` parses as zero, but a sign on a quota is a mistake either way.
            Some(parsed) if parsed.is_negative() || text.starts_with('-') => {
                problems.push(
                    format!("{path}.{field}"),
                    format!("{text:?} is negative"),
                    "use zero or more, without a sign",
                );
                None
            }
            Some(parsed) if parsed.value > MAX_QUANTITY_VALUE => {
                problems.push(
                    format!("{path}.{field}"),
                    format!("{text:?} is beyond the largest quantity Kubernetes stores (2^63-1 milli-units)"),
                    "use the real quota of the tier, e.g. \"64\" or \"512Gi\"",
                );
                None
            }
            Some(parsed) if is_extended_resource(resource) && parsed.value.fract() != 0.0 => {
                problems.push(
                    format!("{path}.{field}"),
                    format!(
                        "{text:?} is not a whole number; {resource} is an extended resource, counted in whole units"
                    ),
                    "use a whole number of devices, e.g. \"1\" or \"8\"",
                );
                None
            }
            Some(parsed) => Some(parsed),
        }
    };
    let nominal = parse(problems, "nominal", &quota.nominal.0);
    for (field, limit) in [("borrowingLimit", &quota.borrowing_limit), ("lendingLimit", &quota.lending_limit)] {
        let Some(limit) = limit else { continue };
        let parsed = parse(problems, field, &limit.0);
        if !has_cohort {
            problems.push(
                format!("{path}.{field}"),
                format!("{field} without a cohort (Kueue refuses it: a queue outside a cohort cannot borrow or lend)"),
                format!("set the tier's cohort or remove {field}"),
            );
        }
        if field == "lendingLimit"
            && let (Some(nominal), Some(limit)) = (nominal, parsed)
            && limit.value > nominal.value
        {
            problems.push(
                format!("{path}.lendingLimit"),
                format!(
                    "lendingLimit {:?} exceeds nominal {:?}",
                    quota.lending_limit.as_ref().map_or("", |limit| limit.0.as_str()),
                    quota.nominal.0
                ),
                "lend at most the nominal quota",
            );
        }
    }
}

fn check_preemption(path: &str, preemption: &Preemption, problems: &mut Problems) {
    let mut check = |field: &str, value: Option<&str>, allowed: &[&str]| {
        if let Some(value) = value
            && !allowed.contains(&value)
        {
            problems.push(
                format!("{path}.{field}"),
                format!("{value:?} is not one of {allowed:?}"),
                format!("use one of {allowed:?}"),
            );
        }
    };
    check("reclaimWithinCohort", preemption.reclaim_within_cohort.as_deref(), kueue::RECLAIM_WITHIN_COHORT_VALUES);
    check("withinClusterQueue", preemption.within_cluster_queue.as_deref(), kueue::WITHIN_CLUSTER_QUEUE_VALUES);
    let borrow_policy = preemption.borrow_within_cohort.as_ref().map(|borrow| borrow.policy.as_str());
    check("borrowWithinCohort.policy", borrow_policy, kueue::BORROW_WITHIN_COHORT_POLICY_VALUES);
    let reclaim = preemption.reclaim_within_cohort.as_deref().unwrap_or("Never");
    if reclaim == "Never" && borrow_policy.is_some_and(|policy| policy != "Never") {
        problems.push(
            format!("{path}.borrowWithinCohort.policy"),
            "borrowWithinCohort needs reclaimWithinCohort other than Never (Kueue's CEL rule)",
            "set reclaimWithinCohort to LowerPriority or Any, or borrowWithinCohort.policy to Never",
        );
    }
}

/// GPU classes and placement rules both become ResourceFlavors: their names must not collide.
fn check_flavor_names(spec: &TierPolicySpec, problems: &mut Problems) {
    let classes = spec
        .gpu_classes
        .iter()
        .enumerate()
        .map(|(index, class)| (format!("spec.gpuClasses[{index}].name"), class.name.clone()));
    let rules = spec.placement_strategies.iter().enumerate().flat_map(|(strategy_index, strategy)| {
        strategy.rules.iter().enumerate().map(move |(rule_index, rule)| {
            (
                format!("spec.placementStrategies[{strategy_index}].rules[{rule_index}].name"),
                rule_flavor_name(&strategy.name, &rule.name),
            )
        })
    });
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (path, flavor) in classes.chain(rules) {
        if let Some(first) = seen.get(&flavor) {
            problems.push(
                path,
                format!("its ResourceFlavor would be named {flavor:?}, like the one of {first}"),
                "rename the GPU class, strategy or rule",
            );
        } else {
            seen.insert(flavor, path);
        }
    }
}

fn check_scoring(spec: &TierPolicySpec, problems: &mut Problems) {
    if let Some(url) = &spec.scoring.url {
        let usable = url::Url::parse(url).ok().is_some_and(|parsed| {
            matches!(parsed.scheme(), "http" | "https") && parsed.host_str().is_some_and(|host| !host.is_empty())
        });
        if !usable {
            problems.push(
                "spec.scoring.url",
                format!("{url:?} is not an http(s) URL with a host"),
                "use the agent's base URL, e.g. `http://scheduler-agent.ml:8080`",
            );
        }
    }
    if spec.scoring.timeout_ms == 0 || spec.scoring.timeout_ms >= MAX_SCORING_TIMEOUT_MS {
        problems.push(
            "spec.scoring.timeoutMs",
            format!(
                "{} ms is not between 1 and {} ms (it must end before the webhook's 5 s deadline)",
                spec.scoring.timeout_ms,
                MAX_SCORING_TIMEOUT_MS - 1
            ),
            "use a timeout well under the webhook's 5 s deadline, e.g. 250",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;

    #[test]
    fn the_embedded_sample_policy_is_valid() {
        let policy = load_policy(None).unwrap();
        validate_policy(&policy).unwrap();
    }

    #[test]
    fn every_problem_is_listed_not_just_the_first() {
        let mut spec = load_policy(None).unwrap().spec;
        spec.tiers[0].gpu_class = "h200".into();
        spec.tiers[1].name = "Silver".into();
        spec.scoring.timeout_ms = 0;
        let errors = validate(&spec).unwrap_err();
        let paths = errors.paths();
        assert!(paths.contains(&"spec.tiers[0].gpuClass"), "{errors}");
        assert!(paths.contains(&"spec.tiers[1].name"), "{errors}");
        assert!(paths.contains(&"spec.scoring.timeoutMs"), "{errors}");
    }

    #[test]
    fn the_message_names_path_problem_and_fix() {
        let mut spec = load_policy(None).unwrap().spec;
        spec.tiers[2].gpu_class = "t4".into();
        let text = validate(&spec).unwrap_err().to_string();
        assert!(text.starts_with("failed to validate the TierPolicy: 1 problem(s)"), "{text}");
        assert!(text.contains("spec.tiers[2].gpuClass: unknown GPU class \"t4\"; fix: use one of"), "{text}");
    }
}
