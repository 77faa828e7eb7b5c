//! Bad policies are refused with an error naming the field (and the fix); no input makes parsing, validation
//! or the translation panic.

#![cfg(test)]

use proptest::prelude::*;
use serde_json::{Value, json};
use tiergate::inputs::{SAMPLE_POLICY, load_policy, parse_policy};
use tiergate::plan::desired;
use tiergate::policy::{PlacementRule, PlacementStrategy, TierPolicy, TierPolicySpec};
use tiergate::validation::{validate, validate_policy};
use tiergate::view::ClusterView;

/// The embedded KubeNexus sample, valid as is; each test breaks one thing.
fn sample() -> TierPolicy {
    load_policy(None).unwrap()
}

fn spot_strategy() -> PlacementStrategy {
    let rule = |name: &str, base: u32, weight: u32, node_type: &str| PlacementRule {
        name: name.into(),
        base,
        weight,
        node_selector: [("node-type".to_owned(), node_type.to_owned())].into(),
        tolerations: Vec::new(),
    };
    PlacementStrategy {
        name: "od-spot".into(),
        rules: vec![rule("ondemand", 1, 1, "ondemand"), rule("spot", 0, 2, "spot")],
    }
}

/// Asserts the spec is refused with a problem at `path`, and returns that problem's text.
fn refused_at(spec: &TierPolicySpec, path: &str) -> String {
    let errors = validate(spec).expect_err("the policy should be refused");
    let problem = errors.problems().iter().find(|error| error.path == path);
    let problem = problem.unwrap_or_else(|| panic!("no problem at {path}; got:\n{errors}"));
    assert!(!problem.fix.is_empty(), "{problem}");
    problem.to_string()
}

/// Parses a YAML policy and asserts it is refused at `path`.
fn yaml_refused_at(text: &str, path: &str) -> String {
    refused_at(&parse_policy(text, "test").unwrap().spec, path)
}

#[test]
fn the_samples_are_valid() {
    validate_policy(&sample()).unwrap();
    validate(&sample().spec).unwrap();
}

#[test]
fn an_unknown_gpu_class_names_the_tier_field_and_the_known_classes() {
    let mut policy = sample();
    policy.spec.tiers[1].gpu_class = "h200".into();
    let text = refused_at(&policy.spec, "spec.tiers[1].gpuClass");
    assert!(text.contains("h200") && text.contains("a100"), "{text}");
}

#[test]
fn an_unknown_fallback_class_is_refused() {
    let mut policy = sample();
    policy.spec.tiers[0].fallback_gpu_classes = vec!["a100".into(), "mi300".into()];
    refused_at(&policy.spec, "spec.tiers[0].fallbackGpuClasses[1]");
}

#[test]
fn duplicate_tier_and_class_names_are_refused() {
    let mut policy = sample();
    policy.spec.tiers[2].name = "gold".into();
    policy.spec.gpu_classes[1].name = "h100".into();
    refused_at(&policy.spec, "spec.tiers[2].name");
    refused_at(&policy.spec, "spec.gpuClasses[1].name");
}

#[test]
fn duplicate_local_queue_names_are_refused() {
    let mut policy = sample();
    policy.spec.tiers[0].local_queue_name = Some("gpu".into());
    policy.spec.tiers[1].local_queue_name = Some("gpu".into());
    let text = refused_at(&policy.spec, "spec.tiers[1].localQueueName");
    assert!(text.contains("spec.tiers[0].localQueueName"), "{text}");
}

#[test]
fn a_negative_quota_is_refused() {
    let text = SAMPLE_POLICY.replacen("nvidia.com/gpu: {nominal: \"64\"}", "nvidia.com/gpu: {nominal: \"-4\"}", 1);
    yaml_refused_at(&text, "spec.tiers[0].quotas[\"nvidia.com/gpu\"].nominal");
}

#[test]
fn an_unparseable_quota_is_refused() {
    let text = SAMPLE_POLICY.replacen("memory: {nominal: 2Ti}", "memory: {nominal: 2TB}", 1);
    let problem = yaml_refused_at(&text, "spec.tiers[1].quotas[\"memory\"].nominal");
    assert!(problem.contains("2TB"), "{problem}");
}

#[test]
fn a_tier_without_quota_for_its_gpu_resource_is_refused() {
    let mut policy = sample();
    policy.spec.tiers[2].quotas.remove("nvidia.com/gpu");
    let text = refused_at(&policy.spec, "spec.tiers[2].quotas");
    assert!(text.contains("nvidia.com/gpu"), "{text}");
}

#[test]
fn borrowing_and_lending_without_a_cohort_are_refused() {
    let text = SAMPLE_POLICY.replacen(
        "nvidia.com/gpu: {nominal: \"32\"}",
        "nvidia.com/gpu: {nominal: \"32\", borrowingLimit: \"8\", lendingLimit: \"4\"}",
        1,
    );
    yaml_refused_at(&text, "spec.tiers[1].quotas[\"nvidia.com/gpu\"].borrowingLimit");
    yaml_refused_at(&text, "spec.tiers[1].quotas[\"nvidia.com/gpu\"].lendingLimit");
}

#[test]
fn lending_more_than_the_nominal_quota_is_refused() {
    let mut policy = sample();
    policy.spec.tiers[0].cohort = Some("gpu".into());
    let quota = policy.spec.tiers[0].quotas.get_mut("cpu").unwrap();
    quota.lending_limit = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity("1k".into()));
    refused_at(&policy.spec, "spec.tiers[0].quotas[\"cpu\"].lendingLimit");
}

#[test]
fn invalid_kueue_preemption_values_are_refused() {
    let text = SAMPLE_POLICY.replacen(
        "    - name: silver\n",
        "    - name: silver\n      preemption: {reclaimWithinCohort: Always, withinClusterQueue: Sometimes}\n",
        1,
    );
    let problem = yaml_refused_at(&text, "spec.tiers[1].preemption.reclaimWithinCohort");
    assert!(problem.contains("LowerPriority"), "{problem}");
    yaml_refused_at(&text, "spec.tiers[1].preemption.withinClusterQueue");
}

#[test]
fn borrow_within_cohort_without_reclaim_is_refused_like_kueues_cel_rule() {
    let text = SAMPLE_POLICY.replacen(
        "    - name: gold\n",
        "    - name: gold\n      cohort: gpu\n      preemption: {borrowWithinCohort: {policy: LowerPriority}}\n",
        1,
    );
    yaml_refused_at(&text, "spec.tiers[0].preemption.borrowWithinCohort.policy");
}

#[test]
fn a_run_time_default_above_its_ceiling_or_no_duration_at_all_is_refused_by_field() {
    // Bronze (tiers[2]) with `max_run_time` in place of the sample's own.
    let with = |max_run_time: &str| -> String {
        let lines = SAMPLE_POLICY.lines().filter(|line| !line.trim_start().starts_with("maxRunTime:"));
        let text: Vec<String> = lines.map(str::to_owned).collect();
        text.join("\n").replacen(
            "      maxPriorityClass: gpu-high",
            &format!("      maxPriorityClass: gpu-high\n      maxRunTime: {max_run_time}"),
            1,
        )
    };
    let text = yaml_refused_at(&with("{default: 8h, ceiling: 4h}"), "spec.tiers[2].maxRunTime.default");
    assert!(text.contains("the default 8h is longer than the ceiling 4h"), "{text}");
    let text = yaml_refused_at(&with("{ceiling: 4}"), "spec.tiers[2].maxRunTime.ceiling");
    assert!(text.contains("\"4\" is not a duration") && text.contains("e.g. `4h`, `90m` or `1h30m`"), "{text}");
    yaml_refused_at(&with("{}"), "spec.tiers[2].maxRunTime");
    let valid = parse_policy(&with("{default: 90m, ceiling: 1h30m}"), "test").unwrap();
    validate(&valid.spec).unwrap();
}

#[test]
fn overlapping_and_out_of_range_buckets_are_refused() {
    let mut policy = sample();
    policy.spec.priority_buckets[1].min_score = 90;
    policy.spec.priority_buckets[2].min_score = 101;
    refused_at(&policy.spec, "spec.priorityBuckets[1].minScore");
    refused_at(&policy.spec, "spec.priorityBuckets[2].minScore");
}

#[test]
fn buckets_without_a_zero_floor_are_refused() {
    let mut policy = sample();
    policy.spec.priority_buckets.retain(|bucket| bucket.min_score > 0);
    let text = refused_at(&policy.spec, "spec.priorityBuckets");
    assert!(text.contains("minScore: 0"), "{text}");
}

#[test]
fn inverted_bucket_values_are_refused() {
    let mut policy = sample();
    policy.spec.priority_buckets[0].value = 50;
    refused_at(&policy.spec, "spec.priorityBuckets[0].value");
}

#[test]
fn names_and_labels_kubernetes_would_refuse_are_refused() {
    let mut policy = sample();
    policy.spec.tier_label = "tenant/tier/x".into();
    policy.spec.tiers[0].name = "Gold".into();
    policy.spec.gpu_classes[2].node_labels.insert("gpu.nvidia.com/class".into(), "l4 small".into());
    policy.spec.tiers[1].local_queue_name = Some("queue_1".into());
    policy.spec.excluded_namespaces = vec!["Kube-Public".into()];
    refused_at(&policy.spec, "spec.tierLabel");
    refused_at(&policy.spec, "spec.tiers[0].name");
    refused_at(&policy.spec, "spec.gpuClasses[2].nodeLabels[\"gpu.nvidia.com/class\"]");
    refused_at(&policy.spec, "spec.tiers[1].localQueueName");
    refused_at(&policy.spec, "spec.excludedNamespaces[0]");
}

#[test]
fn a_policy_name_that_is_no_label_value_is_refused() {
    let mut policy = sample();
    policy.metadata.name = Some("my.policy.example.com".into());
    let errors = validate_policy(&policy).unwrap_err();
    assert_eq!(errors.paths(), ["metadata.name"]);
}

#[test]
fn placement_base_on_a_later_rule_and_all_zero_weights_are_refused() {
    let mut policy = sample();
    let mut strategy = spot_strategy();
    strategy.rules[1].base = 2;
    policy.spec.placement_strategies.push(strategy);
    let mut zero = spot_strategy();
    zero.name = "zero".into();
    zero.rules.iter_mut().for_each(|rule| rule.weight = 0);
    policy.spec.placement_strategies.push(zero);
    refused_at(&policy.spec, "spec.placementStrategies[0].rules[1].base");
    refused_at(&policy.spec, "spec.placementStrategies[1].rules");
}

#[test]
fn an_unknown_placement_strategy_is_refused() {
    let mut policy = sample();
    policy.spec.placement_strategies.push(spot_strategy());
    policy.spec.tiers[2].placement = Some("spot-only".into());
    let text = refused_at(&policy.spec, "spec.tiers[2].placement");
    assert!(text.contains("od-spot"), "{text}");
}

#[test]
fn a_rule_flavor_colliding_with_a_gpu_class_is_refused() {
    let mut policy = sample();
    policy.spec.placement_strategies.push(spot_strategy());
    policy.spec.gpu_classes[0].name = "od-spot-spot".into();
    policy.spec.tiers[0].gpu_class = "od-spot-spot".into();
    refused_at(&policy.spec, "spec.placementStrategies[0].rules[1].name");
}

#[test]
fn scoring_url_and_timeout_are_checked() {
    let mut policy = sample();
    policy.spec.scoring.url = Some("ftp://agent:21".into());
    policy.spec.scoring.timeout_ms = 5000;
    refused_at(&policy.spec, "spec.scoring.url");
    refused_at(&policy.spec, "spec.scoring.timeoutMs");
    policy.spec.scoring.url = Some("http://scheduler-agent.ml:8080".into());
    policy.spec.scoring.timeout_ms = 0;
    refused_at(&policy.spec, "spec.scoring.timeoutMs");
    policy.spec.scoring.timeout_ms = 250;
    validate(&policy.spec).unwrap();
}

#[test]
fn bad_taints_and_tolerations_are_refused() {
    let text = SAMPLE_POLICY.replacen(
        "nodeTaints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]",
        "nodeTaints: [{key: nvidia.com/gpu, value: present, effect: Sometimes}]\n      tolerations: [{operator: Equal, value: x}]",
        1,
    );
    yaml_refused_at(&text, "spec.gpuClasses[0].nodeTaints[0].effect");
    yaml_refused_at(&text, "spec.gpuClasses[0].tolerations[0].key");
}

/// A small JSON value tree.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|number| json!(number)),
        "[a-zA-Z0-9./_ -]{0,12}".prop_map(Value::String),
        prop_oneof![Just("-1"), Just("4Ti"), Just("1e400"), Just("Gi"), Just("0.5")].prop_map(|text| json!(text)),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Every field path of the sample policy, as JSON pointers.
fn pointers(value: &Value, prefix: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.iter().for_each(|(key, child)| {
            let pointer = format!("{prefix}/{}", key.replace('~', "~0").replace('/', "~1"));
            out.push(pointer.clone());
            pointers(child, pointer, out);
        }),
        Value::Array(items) => items.iter().enumerate().for_each(|(index, child)| {
            let pointer = format!("{prefix}/{index}");
            out.push(pointer.clone());
            pointers(child, pointer, out);
        }),
        _ => {}
    }
}

/// Everything downstream of parsing must cope with whatever parsed.
fn exercise(text: &str) {
    if let Ok(policy) = parse_policy(text, "proptest") {
        let _ = validate_policy(&policy);
        let planned = desired(&policy, &ClusterView::default());
        let _ = planned.to_yaml_stream();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        exercise(&text);
    }

    #[test]
    fn a_sample_with_any_field_replaced_never_panics(index in any::<prop::sample::Index>(), replacement in json_value()) {
        let sample: Value = serde_saphyr::from_str(SAMPLE_POLICY).unwrap();
        let mut paths = Vec::new();
        pointers(&sample, String::new(), &mut paths);
        let mut mutated = sample.clone();
        if let Some(slot) = mutated.pointer_mut(&paths[index.index(paths.len())]) {
            *slot = replacement;
        }
        exercise(&serde_json::to_string(&mutated).unwrap());
    }

    #[test]
    fn a_random_spec_never_panics(spec in json_value()) {
        let document = json!({"apiVersion": "tiergate.io/v1alpha1", "kind": "TierPolicy", "metadata": {"name": "p"}, "spec": spec});
        exercise(&serde_json::to_string(&document).unwrap());
    }
}

/// The shipped spot-mix sample, whose gold tier gates admission on a ProvisioningRequest on autoscaled H100s.
fn spot_mix() -> TierPolicy {
    parse_policy(include_str!("../../samples/spot-mix/policy.yaml"), "samples/spot-mix/policy.yaml").unwrap()
}

#[test]
fn check_capacity_on_an_autoscaled_class_is_refused_with_the_class_that_scales() {
    let mut policy = spot_mix();
    validate(&policy.spec).unwrap();
    let gold = policy.spec.tiers.iter().position(|tier| tier.name == "gold").unwrap();
    let provisioning = policy.spec.tiers[gold].provisioning.as_mut().unwrap();
    provisioning.provisioning_class_name = "check-capacity.autoscaling.x-k8s.io".into();
    let text = refused_at(&policy.spec, &format!("spec.tiers[{gold}].provisioning.provisioningClassName"));
    assert!(text.contains("h100") && text.contains("best-effort-atomic-scale-up.autoscaling.x-k8s.io"), "{text}");
    assert!(text.contains("capacity: Fixed"), "{text}");
}

#[test]
fn check_capacity_on_an_autoscaled_fallback_class_is_refused() {
    let mut policy = spot_mix();
    let silver = policy.spec.tiers.iter().position(|tier| tier.name == "silver").unwrap();
    assert_eq!(policy.spec.tiers[silver].fallback_gpu_classes, ["h100"]);
    let mut provisioning = policy.spec.tiers[0].provisioning.clone().unwrap();
    provisioning.provisioning_class_name = "check-capacity.autoscaling.x-k8s.io".into();
    policy.spec.tiers[silver].provisioning = Some(provisioning);
    let text = refused_at(&policy.spec, &format!("spec.tiers[{silver}].provisioning.provisioningClassName"));
    assert!(text.contains("h100") && !text.contains("a100"), "only the autoscaled class is named: {text}");
}

#[test]
fn check_capacity_on_fixed_or_unstated_capacity_is_allowed() {
    for capacity in [Some(tiergate::policy::NodeCapacity::Fixed), None] {
        let mut policy = spot_mix();
        let h100 = policy.spec.gpu_classes.iter_mut().find(|class| class.name == "h100").unwrap();
        h100.capacity = capacity;
        for tier in &mut policy.spec.tiers {
            if let Some(provisioning) = &mut tier.provisioning {
                provisioning.provisioning_class_name = "check-capacity.autoscaling.x-k8s.io".into();
            }
        }
        validate(&policy.spec).unwrap();
    }
}

#[test]
fn nonsensical_retry_strategies_are_refused_by_field() {
    let retry = |count: i32, base: i32, max: i32| {
        let mut policy = spot_mix();
        let provisioning = policy.spec.tiers[0].provisioning.as_mut().unwrap();
        provisioning.retry_strategy = Some(tiergate::policy::ProvisioningRetry {
            backoff_limit_count: count,
            backoff_base_seconds: base,
            backoff_max_seconds: max,
        });
        policy.spec
    };
    let path = "spec.tiers[0].provisioning.retryStrategy";
    refused_at(&retry(-1, 60, 600), &format!("{path}.backoffLimitCount"));
    refused_at(&retry(3, 0, 600), &format!("{path}.backoffBaseSeconds"));
    let text = refused_at(&retry(3, 600, 60), &format!("{path}.backoffMaxSeconds"));
    assert!(text.contains("shorter than backoffBaseSeconds"), "{text}");
    validate(&retry(0, 1, 1)).unwrap();
}

#[test]
fn an_unknown_capacity_is_refused_when_parsed() {
    let text = include_str!("../../samples/spot-mix/policy.yaml").replace("capacity: Autoscaled", "capacity: Elastic");
    let error = parse_policy(&text, "test").unwrap_err().to_string();
    assert!(error.contains("Elastic") && error.contains("Autoscaled"), "{error}");
}

/// One change to a class's `karpenter` template.
type TemplateEdit = fn(&mut Value);

/// The Karpenter sample with its h100 class's template changed by `edit`.
fn karpenter_sample_with(edit: impl FnOnce(&mut Value)) -> TierPolicySpec {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/karpenter/policy.yaml");
    let mut policy: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut policy["spec"]["gpuClasses"][0]["karpenter"]);
    serde_json::from_value::<TierPolicy>(policy).unwrap().spec
}

#[test]
fn karpenter_templates_are_refused_where_karpenter_or_the_class_would_be() {
    let at = "spec.gpuClasses[0].karpenter";
    let cases: Vec<(TemplateEdit, String, &str)> = vec![
        (|t| t["weight"] = json!(0), format!("{at}.weight"), "1-100"),
        (|t| t["consolidateAfter"] = json!("5 min"), format!("{at}.consolidateAfter"), "Never"),
        (|t| t["expireAfter"] = json!("1.5h"), format!("{at}.expireAfter"), "duration"),
        (|t| t["nodeClassRef"]["name"] = json!(""), format!("{at}.nodeClassRef.name"), "empty"),
        (|t| t["limits"]["nvidia.com/gpu"] = json!("64"), format!("{at}.limits[\"nvidia.com/gpu\"]"), "quota"),
        (|t| t["limits"]["cpu"] = json!("lots"), format!("{at}.limits[\"cpu\"]"), "quantity"),
        (
            |t| t["requirements"][0] = json!({"key": "gpu.nvidia.com/class", "operator": "In", "values": ["l4"]}),
            format!("{at}.requirements[0].key"),
            "nodeLabels",
        ),
        (
            |t| t["requirements"][0] = json!({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}),
            format!("{at}.requirements[0].key"),
            "itself",
        ),
        (
            |t| t["requirements"][0] = json!({"key": "example.com/size", "operator": "Gt", "values": ["a"]}),
            format!("{at}.requirements[0].values"),
            "integer",
        ),
        (
            |t| t["requirements"][0] = json!({"key": "example.com/size", "operator": "Near", "values": ["1"]}),
            format!("{at}.requirements[0].operator"),
            "Near",
        ),
        (
            |t| {
                t["requirements"][0] =
                    json!({"key": "example.com/x", "operator": "In", "values": ["a"], "minValues": 2})
            },
            format!("{at}.requirements[0].minValues"),
            "minValues",
        ),
    ];
    for (edit, path, words) in cases {
        let text = refused_at(&karpenter_sample_with(edit), &path);
        assert!(text.contains(words), "{path}: {text}");
    }
}

#[test]
fn a_karpenter_template_on_a_class_without_node_labels_is_refused() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/karpenter/policy.yaml");
    let text = std::fs::read_to_string(path).unwrap().replace(
        "nodeLabels: {gpu.nvidia.com/class: l4}",
        "nodeLabels: {}\n      dra: {driver: gpu.nvidia.com, selector: \"true\"}",
    );
    let refused = yaml_refused_at(&text, "spec.gpuClasses[1].karpenter");
    assert!(refused.contains("without nodeLabels"), "{refused}");
}

#[test]
fn a_karpenter_template_on_a_class_without_a_scheduling_taint_is_refused() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples/karpenter/policy.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let untainted =
        text.replacen("nodeTaints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]", "nodeTaints: []", 1);
    let refused = yaml_refused_at(&untainted, "spec.gpuClasses[0].nodeTaints");
    assert!(refused.contains("karpenter.sh/nodepool"), "{refused}");
    let soft = text.replacen(
        "effect: NoSchedule}]\n      memoryGib: 80",
        "effect: PreferNoSchedule}]\n      memoryGib: 80",
        1,
    );
    assert_ne!(soft, text);
    yaml_refused_at(&soft, "spec.gpuClasses[0].nodeTaints");
}
