//! Every generated Kueue object is one the API server and Kueue would accept.
//!
//! Three layers, all against Kueue v0.19.2's CRDs (`adapters/kueue/crds/`, the `v1beta2` version):
//! 1. the structural `openAPIV3Schema` (types, required fields, enums, patterns, max items) with the
//!    `jsonschema` crate. Objects get `additionalProperties: false` wherever the CRD lists properties, as
//!    `kubectl apply` (strict field validation) refuses unknown fields; this catches v1beta1 names like `cohort`.
//!    `x-kubernetes-*` keywords are ignored by the validator; int-or-string is already written as `anyOf`.
//! 2. the CEL `x-kubernetes-validations` rules, evaluated from the CRD's own rule text by `kube-cel` (which
//!    applies the schema defaults first, like the API server). Transition rules (`oldSelf`) are evaluated on
//!    update only; `every_cel_rule_compiles` proves no rule is skipped for want of a function.
//! 3. Kueue's Go webhook checks that are not CEL, as Rust equivalents (see `kueue_webhook_errors`):
//!    a flavor's resources are the covered resources in the same order; a resource or flavor appears in one
//!    resource group only; on a ClusterQueue lendingLimit needs a cohort and is at most nominalQuota; on a
//!    Cohort borrowing and lending limits need a parent (and lendingLimit may exceed nominalQuota).
//!
//! Metadata is checked too: names and namespaces are DNS-1123 labels, label keys and values are valid. The fleet sample's worker side
//! is included; its Namespaces (a core kind, no Kueue CRD) get the metadata checks only.

#![cfg(test)]

mod crd_schema_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crd_schema_support::strict;
use serde_json::{Value, json};
use tiergate::inputs::{load_cluster_view, load_policy};
use tiergate::plan::desired;
use tiergate::plan::fleet::build_fleet;
use tiergate::validation::names::{is_dns_label, is_label_value, is_qualified_name};
use tiergate::validation::quantity::parse_quantity;
use tiergate::view::ClusterView;

const CRD_FILES: &[&str] = &[
    "kueue.x-k8s.io_resourceflavors.yaml",
    "kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io_localqueues.yaml",
    "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "kueue.x-k8s.io_admissionchecks.yaml",
    "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
    "kueue.x-k8s.io_multikueueclusters.yaml",
    "kueue.x-k8s.io_multikueueconfigs.yaml",
    "kueue.x-k8s.io_topologies.yaml",
    "kueue.x-k8s.io_cohorts.yaml",
];

fn crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/kueue/crds")
}

/// kind -> v1beta2 openAPIV3Schema.
fn schemas() -> BTreeMap<String, Value> {
    CRD_FILES
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(crd_dir().join(file)).unwrap();
            let crd: Value = serde_saphyr::from_str(&text).unwrap();
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_owned();
            let version = crd["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|version| version["name"] == "v1beta2")
                .unwrap_or_else(|| panic!("{file} has no v1beta2"));
            assert_eq!(version["storage"], true, "{file}: v1beta2 should be the storage version");
            (kind, version["schema"]["openAPIV3Schema"].clone())
        })
        .collect()
}

struct Checker {
    schemas: BTreeMap<String, Value>,
    structural: BTreeMap<String, jsonschema::Validator>,
    cel: kube_cel::Validator,
}

impl Checker {
    fn new() -> Self {
        let schemas = schemas();
        let structural = schemas
            .iter()
            .map(|(kind, schema)| (kind.clone(), jsonschema::validator_for(&strict(schema)).unwrap()))
            .collect();
        Self { schemas, structural, cel: kube_cel::Validator::new() }
    }

    fn kind<'a>(&self, object: &'a Value) -> &'a str {
        let kind = object["kind"].as_str().unwrap();
        assert!(self.schemas.contains_key(kind), "no CRD for kind {kind}");
        kind
    }

    fn structural_errors(&self, object: &Value) -> Vec<String> {
        let validator = &self.structural[self.kind(object)];
        validator.iter_errors(object).map(|error| format!("{}: {error}", error.instance_path())).collect()
    }

    fn cel_errors(&self, object: &Value, old: Option<&Value>) -> Vec<String> {
        let schema = &self.schemas[self.kind(object)];
        let object = apply_defaults(schema, object);
        let old = old.map(|old| apply_defaults(schema, old));
        match self.cel.validate(schema, &object, old.as_ref()) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    fn all_errors(&self, object: &Value) -> Vec<String> {
        let mut errors = self.structural_errors(object);
        errors.extend(self.cel_errors(object, None));
        errors.extend(self.cel_errors(object, Some(object)));
        errors.extend(kueue_webhook_errors(object));
        errors.extend(metadata_errors(object));
        errors
    }
}

/// The API server's structural defaulting: a missing property with a `default` gets it, and defaulting then
/// descends into every property, including one just defaulted (`preemption: {}` gets
/// `borrowWithinCohort: {}`, which gets `policy: Never`). kube-cel 0.8 defaults too but does not descend into a
/// default it inserted, so the ClusterQueue preemption rule would see no `policy`; defaulting here first
/// gives it the object the API server evaluates.
fn apply_defaults(schema: &Value, value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut result = object.clone();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, property) in properties {
                    if !result.contains_key(key)
                        && let Some(default) = property.get("default")
                    {
                        result.insert(key.clone(), default.clone());
                    }
                }
                for (key, child) in result.iter_mut() {
                    if let Some(property) = properties.get(key) {
                        *child = apply_defaults(property, child);
                    }
                }
            } else if let Some(additional) = schema.get("additionalProperties").filter(|value| value.is_object()) {
                for child in result.values_mut() {
                    *child = apply_defaults(additional, child);
                }
            }
            Value::Object(result)
        }
        Value::Array(items) => match schema.get("items") {
            Some(item_schema) => Value::Array(items.iter().map(|item| apply_defaults(item_schema, item)).collect()),
            None => value.clone(),
        },
        other => other.clone(),
    }
}

/// Rust equivalents of Kueue's Go webhook checks on a ClusterQueue that are not written as CEL.
fn kueue_webhook_errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let is_cohort = object["kind"] == "Cohort";
    if object["kind"] != "ClusterQueue" && !is_cohort {
        return errors;
    }
    let spec = &object["spec"];
    // A ClusterQueue lends to its cohort, a Cohort to its parent.
    let up = if is_cohort { "parentName" } else { "cohortName" };
    let has_cohort = spec.get(up).is_some_and(|cohort| cohort.as_str().is_some_and(|cohort| !cohort.is_empty()));
    let mut seen_resources = Vec::new();
    let mut seen_flavors = Vec::new();
    for (group_index, group) in spec["resourceGroups"].as_array().into_iter().flatten().enumerate() {
        let covered: Vec<&str> =
            group["coveredResources"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for resource in &covered {
            if seen_resources.contains(resource) {
                errors.push(format!("resourceGroups[{group_index}]: resource {resource} is in two resource groups"));
            }
            seen_resources.push(resource);
        }
        for (flavor_index, flavor) in group["flavors"].as_array().into_iter().flatten().enumerate() {
            let path = format!("resourceGroups[{group_index}].flavors[{flavor_index}]");
            let name = flavor["name"].as_str().unwrap_or_default();
            if seen_flavors.contains(&name) {
                errors.push(format!("{path}: flavor {name} is in two resource groups"));
            }
            seen_flavors.push(name);
            let resources: Vec<&Value> = flavor["resources"].as_array().into_iter().flatten().collect();
            let names: Vec<&str> = resources.iter().filter_map(|resource| resource["name"].as_str()).collect();
            if names != covered {
                errors.push(format!("{path}: resources {names:?} must be the covered resources {covered:?} in order"));
            }
            for resource in resources {
                if is_cohort && !has_cohort && resource.get("borrowingLimit").is_some() {
                    errors.push(format!("{path}: borrowingLimit must be nil when parent is empty"));
                }
                let Some(lending) = resource.get("lendingLimit") else { continue };
                if is_cohort {
                    if !has_cohort {
                        errors.push(format!("{path}: lendingLimit must be nil when parent is empty"));
                    }
                    continue;
                }
                if !has_cohort {
                    errors.push(format!("{path}: lendingLimit must be nil when cohort is empty"));
                }
                let quantity = |value: &Value| value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string());
                let (lending, nominal) =
                    (parse_quantity(&quantity(lending)), parse_quantity(&quantity(&resource["nominalQuota"])));
                if let (Some(lending), Some(nominal)) = (lending, nominal)
                    && lending.value > nominal.value
                {
                    errors.push(format!("{path}: lendingLimit must be less than or equal to nominalQuota"));
                }
            }
        }
    }
    errors
}

fn metadata_errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    if !is_dns_label(name) {
        errors.push(format!("metadata.name {name:?} is not a DNS label"));
    }
    let namespaced = object["kind"] == "LocalQueue";
    match metadata["namespace"].as_str() {
        Some(namespace) if namespaced && is_dns_label(namespace) => {}
        None if !namespaced => {}
        other => errors.push(format!("metadata.namespace {other:?} is wrong for {}", object["kind"])),
    }
    for (key, value) in metadata["labels"].as_object().into_iter().flatten() {
        if !is_qualified_name(key) || !value.as_str().is_some_and(is_label_value) {
            errors.push(format!("metadata.labels {key}={value} is not a valid label"));
        }
    }
    errors
}

fn sample_objects_of(name: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples").join(name);
    let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
    let view = load_cluster_view(&dir.join("cluster.yaml")).unwrap_or_else(|_| ClusterView::default());
    let workers: BTreeMap<String, ClusterView> = policy
        .spec
        .clusters
        .iter()
        .map(|worker| {
            let path = dir.join("workers").join(format!("{}.yaml", worker.name));
            (worker.name.clone(), load_cluster_view(&path).unwrap())
        })
        .collect();
    let fleet = build_fleet(&policy, &view, &workers);
    assert_eq!(fleet.management, desired(&policy, &view));
    fleet.to_values().unwrap()
}

/// The objects of every sample.
fn all_sample_objects() -> Vec<Value> {
    ["kubenexus", "spot-mix", "shared-quota", "fleet", "topology", "org-tree", "tenant-sharing"]
        .into_iter()
        .flat_map(sample_objects_of)
        .collect()
}

/// The spot-mix sample uses every feature (cohorts, borrowing, preemption, provisioning, placement).
fn sample_objects() -> Vec<Value> {
    sample_objects_of("spot-mix")
}

fn object_of_kind(objects: &[Value], kind: &str, name: &str) -> Value {
    objects.iter().find(|object| object["kind"] == kind && object["metadata"]["name"] == name).cloned().unwrap()
}

#[test]
fn every_generated_object_of_every_sample_is_accepted_by_its_kueue_crd() {
    let checker = Checker::new();
    let objects = all_sample_objects();
    let kinds: std::collections::BTreeSet<&str> = objects.iter().filter_map(|object| object["kind"].as_str()).collect();
    assert_eq!(kinds.len(), 16, "the samples should exercise every generated kind, got {kinds:?}");
    let parameters_crd =
        serde_json::to_value(<tiergate::plan::gate::params::TierGateParameters as kube::CustomResourceExt>::crd())
            .unwrap();
    let parameters_schema =
        jsonschema::validator_for(&parameters_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]).unwrap();
    for object in &objects {
        if object["kind"]
            .as_str()
            .is_some_and(|kind| kind.ends_with("AdmissionPolicy") || kind.ends_with("AdmissionPolicyBinding"))
        {
            let errors = metadata_errors(object);
            assert!(errors.is_empty(), "{}: {errors:#?}", object["metadata"]["name"]);
            assert_gate_object_is_well_formed(object);
            continue;
        }
        if object["kind"] == "TierGateParameters" {
            let errors: Vec<String> = parameters_schema.iter_errors(object).map(|error| error.to_string()).collect();
            assert!(errors.is_empty(), "TierGateParameters {}: {errors:#?}", object["metadata"]["name"]);
            continue;
        }
        if object["kind"] == "Namespace" {
            let errors = metadata_errors(object);
            assert!(errors.is_empty(), "Namespace {}: {errors:#?}", object["metadata"]["name"]);
            continue;
        }
        let errors = checker.all_errors(object);
        assert!(errors.is_empty(), "{} {}: {errors:#?}", object["kind"], object["metadata"]["name"]);
    }
}

/// The in-server gate's objects are built-in kinds (no CRD): each reads back into its typed
/// `admissionregistration.k8s.io/v1` struct unchanged, with the fields the API server requires.
fn assert_gate_object_is_well_formed(object: &Value) {
    let policy_name =
        tiergate::plan::gate::gate_policy_name(object["metadata"]["labels"]["tiergate.io/policy"].as_str().unwrap());
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding,
    };
    assert_eq!(object["apiVersion"], "admissionregistration.k8s.io/v1");
    let name = object["metadata"]["name"].as_str().unwrap();
    if object["kind"] == "ValidatingAdmissionPolicy" {
        let typed: ValidatingAdmissionPolicy = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&typed).unwrap(), object, "{name} has fields the type does not know");
        let spec = typed.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"), "{name}");
        let validations = spec.validations.unwrap_or_default();
        assert!(!validations.is_empty(), "{name}");
        assert!(validations.iter().all(|validation| !validation.expression.is_empty() && validation.message.is_some()));
        let conditions = spec.match_conditions.unwrap_or_default();
        assert!(conditions.len() <= 64, "{name}: the API server allows 64 matchConditions");
        let names: std::collections::BTreeSet<&str> =
            conditions.iter().map(|condition| condition.name.as_str()).collect();
        assert_eq!(names.len(), conditions.len(), "{name}: matchCondition names must be unique");
        assert!(
            spec.match_constraints
                .and_then(|constraints| constraints.resource_rules)
                .is_some_and(|rules| !rules.is_empty())
        );
    } else if object["kind"] == "MutatingAdmissionPolicy" {
        let typed: MutatingAdmissionPolicy = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&typed).unwrap(), object, "{name} has fields the type does not know");
        let spec = typed.spec.unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Ignore"), "{name}: the validating half holds the gate");
        assert_eq!(spec.reinvocation_policy.as_deref(), Some("Never"), "{name}");
        let mutations = spec.mutations.unwrap_or_default();
        assert!(!mutations.is_empty(), "{name}");
        assert!(mutations.iter().all(|mutation| {
            mutation.patch_type == "JSONPatch"
                && mutation
                    .json_patch
                    .as_ref()
                    .and_then(|patch| patch.expression.as_deref())
                    .is_some_and(|e| !e.is_empty())
        }));
        let variables = spec.variables.unwrap_or_default();
        let names: std::collections::BTreeSet<&str> = variables.iter().map(|variable| variable.name.as_str()).collect();
        assert_eq!(names.len(), variables.len(), "{name}: variable names must be unique");
        assert!(spec.match_conditions.unwrap_or_default().len() <= 64, "{name}");
        let rules = spec.match_constraints.and_then(|constraints| constraints.resource_rules).unwrap_or_default();
        assert!(
            !rules.is_empty()
                && rules.iter().all(|rule| rule.operations.as_deref() == Some(&["CREATE".to_owned()][..]))
        );
    } else if object["kind"] == "MutatingAdmissionPolicyBinding" {
        let typed: MutatingAdmissionPolicyBinding = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&typed).unwrap(), object, "{name} has fields the type does not know");
        let spec = typed.spec.unwrap();
        assert_eq!(spec.policy_name.as_deref(), Some(policy_name.as_str()), "{name}: binds the one mutating policy");
        let param = spec.param_ref.unwrap();
        assert_eq!(param.name.as_deref(), Some(name), "a binding names the parameter object of its own name");
        assert_eq!(param.parameter_not_found_action.as_deref(), Some("Deny"), "{name}");
    } else {
        let typed: ValidatingAdmissionPolicyBinding = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&typed).unwrap(), object, "{name} has fields the type does not know");
        assert_eq!(typed.spec.policy_name, policy_name, "{name}: binds the one validating policy");
        let param = typed.spec.param_ref.unwrap();
        assert_eq!(param.name.as_deref(), Some(name), "a binding names the parameter object of its own name");
        assert_eq!(param.parameter_not_found_action.as_deref(), Some("Deny"), "{name}: fails closed");
        assert_eq!(typed.spec.validation_actions, ["Deny"]);
    }
}

#[test]
fn every_cel_rule_compiles_so_none_is_skipped() {
    for (kind, schema) in schemas() {
        let compiled = kube_cel::compile_schema(&schema);
        assert!(!compiled.has_errors(), "{kind}: {:?}", compiled.compilation_errors());
    }
}

#[test]
fn a_borrowing_limit_without_cohort_is_caught_by_the_cel_rule() {
    let checker = Checker::new();
    let mut queue = object_of_kind(&sample_objects(), "ClusterQueue", "tiergate-gold");
    assert!(checker.all_errors(&queue).is_empty());
    queue["spec"].as_object_mut().unwrap().remove("cohortName");
    let errors = checker.cel_errors(&queue, None);
    assert!(errors.iter().any(|error| error.contains("borrowingLimit must be nil when cohort is empty")), "{errors:?}");
    let webhook = kueue_webhook_errors(&queue);
    assert!(webhook.iter().any(|error| error.contains("lendingLimit must be nil")), "{webhook:?}");
}

#[test]
fn flavors_listing_resources_out_of_order_are_caught() {
    let checker = Checker::new();
    let mut queue = object_of_kind(&sample_objects(), "ClusterQueue", "tiergate-silver");
    let resources = queue["spec"]["resourceGroups"][0]["flavors"][1]["resources"].as_array_mut().unwrap();
    resources.swap(0, 2);
    let errors = checker.all_errors(&queue);
    assert!(errors.iter().any(|error| error.contains("must be the covered resources")), "{errors:?}");
}

#[test]
fn a_flavor_missing_a_covered_resource_is_caught_by_the_cel_rule() {
    let checker = Checker::new();
    let mut queue = object_of_kind(&sample_objects(), "ClusterQueue", "tiergate-bronze");
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"].as_array_mut().unwrap().pop();
    let errors = checker.cel_errors(&queue, None);
    assert!(errors.iter().any(|error| error.contains("same number of resources")), "{errors:?}");
}

#[test]
fn borrow_within_cohort_without_reclaim_is_caught_after_defaulting() {
    let checker = Checker::new();
    let mut queue = object_of_kind(&sample_objects(), "ClusterQueue", "tiergate-gold");
    queue["spec"]["preemption"].as_object_mut().unwrap().remove("reclaimWithinCohort");
    let errors = checker.cel_errors(&queue, None);
    assert!(errors.iter().any(|error| error.contains("reclaimWithinCohort=Never")), "{errors:?}");
}

#[test]
fn the_v1beta1_cohort_field_name_is_refused() {
    let checker = Checker::new();
    let mut queue = object_of_kind(&sample_objects(), "ClusterQueue", "tiergate-gold");
    let cohort = queue["spec"].as_object_mut().unwrap().remove("cohortName").unwrap();
    queue["spec"]["cohort"] = cohort;
    assert!(!checker.structural_errors(&queue).is_empty());
    let mut queue = object_of_kind(&sample_objects(), "ClusterQueue", "tiergate-gold");
    queue["spec"]["admissionChecks"] = json!(["tiergate-gold-provisioning"]);
    assert!(!checker.structural_errors(&queue).is_empty(), "v1beta2 has no plain admissionChecks list");
}

#[test]
fn a_bad_flavor_toleration_and_taint_effect_are_caught() {
    let checker = Checker::new();
    let mut flavor = object_of_kind(&sample_objects(), "ResourceFlavor", "l4");
    flavor["spec"]["tolerations"][0]["operator"] = json!("Equal");
    flavor["spec"]["tolerations"][0].as_object_mut().unwrap().remove("key");
    flavor["spec"]["nodeTaints"][0]["effect"] = json!("NoWay");
    let errors = checker.cel_errors(&flavor, None);
    assert!(errors.iter().any(|error| error.contains("operator must be Exists")), "{errors:?}");
    assert!(errors.iter().any(|error| error.contains("supported taint effect values")), "{errors:?}");
}

#[test]
fn structural_mistakes_are_caught() {
    let checker = Checker::new();
    let objects = sample_objects();
    let mut class = object_of_kind(&objects, "WorkloadPriorityClass", "gpu-high");
    class.as_object_mut().unwrap().remove("value");
    assert!(!checker.structural_errors(&class).is_empty(), "value is required");
    let mut queue = objects.iter().find(|object| object["kind"] == "LocalQueue").cloned().unwrap();
    queue["spec"]["stopPolicy"] = json!("Pause");
    assert!(!checker.structural_errors(&queue).is_empty(), "stopPolicy is an enum");
    let mut queue = object_of_kind(&objects, "ClusterQueue", "tiergate-gold");
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = json!("lots");
    assert!(!checker.structural_errors(&queue).is_empty(), "quantities follow the pattern");
    queue["spec"]["cohortName"] = json!("GPU");
    assert!(!checker.structural_errors(&queue).is_empty(), "cohortName is a DNS subdomain");
}

#[test]
fn defaults_descend_into_defaults_like_the_api_server() {
    let schema = &schemas()["ClusterQueue"];
    let queue = json!({"kind": "ClusterQueue", "spec": {"preemption": {}}});
    let defaulted = apply_defaults(schema, &queue);
    assert_eq!(defaulted["spec"]["preemption"]["borrowWithinCohort"]["policy"], "Never");
    assert_eq!(defaulted["spec"]["preemption"]["reclaimWithinCohort"], "Never");
    assert_eq!(defaulted["spec"]["queueingStrategy"], "BestEffortFIFO");
}

#[test]
fn the_vendored_crds_equal_the_shared_kueue_release_when_present() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("shared/kueue/crds"))
        .find(|dir| dir.is_dir());
    let Some(shared) = shared else {
        eprintln!("shared/kueue/crds not found beside the repository; only the vendored copies are used");
        return;
    };
    for file in CRD_FILES {
        let vendored = std::fs::read_to_string(crd_dir().join(file)).unwrap();
        let original = std::fs::read_to_string(shared.join(file)).unwrap();
        assert!(vendored == original, "{file} differs from {}", shared.display());
    }
}

#[test]
fn a_multikueue_config_with_a_repeated_or_no_worker_is_caught_by_the_crd() {
    let checker = Checker::new();
    let objects = sample_objects_of("fleet");
    let mut config = objects.iter().find(|object| object["kind"] == "MultiKueueConfig").cloned().unwrap();
    assert_eq!(checker.all_errors(&config), Vec::<String>::new());
    config["spec"]["clusters"] = json!(["us-east", "us-east"]);
    assert!(checker.all_errors(&config).iter().any(|error| error.contains("must be unique")), "{config}");
    config["spec"]["clusters"] = json!([]);
    assert!(!checker.structural_errors(&config).is_empty(), "minItems 1");
}

#[test]
fn a_multikueue_cluster_without_a_cluster_source_is_caught_by_the_crd() {
    let checker = Checker::new();
    let objects = sample_objects_of("fleet");
    let mut cluster = object_of_kind(&objects, "MultiKueueCluster", "us-east");
    assert_eq!(checker.all_errors(&cluster), Vec::<String>::new());
    cluster["spec"]["clusterSource"] = json!({});
    assert!(!checker.all_errors(&cluster).is_empty(), "exactly one of kubeConfig or clusterProfileRef");
}

#[test]
fn the_org_tree_cohorts_and_queues_are_accepted_and_a_root_pool_with_limits_is_caught() {
    let checker = Checker::new();
    let objects = sample_objects_of("org-tree");
    let cohorts: Vec<&Value> = objects.iter().filter(|object| object["kind"] == "Cohort").collect();
    assert_eq!(cohorts.len(), 3, "org, research, batch");
    for object in objects.iter().filter(|object| object["kind"] == "Cohort" || object["kind"] == "ClusterQueue") {
        assert_eq!(checker.all_errors(object), Vec::<String>::new(), "{}", object["metadata"]["name"]);
    }
    let mut batch = object_of_kind(&objects, "Cohort", "batch");
    batch["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = json!("1");
    assert_eq!(checker.all_errors(&batch), Vec::<String>::new(), "a cohort with a parent may lend");
    batch["spec"].as_object_mut().unwrap().remove("parentName");
    let errors = checker.all_errors(&batch);
    assert!(errors.iter().any(|error| error.contains("lendingLimit must be nil when parent is empty")), "{errors:?}");
    let mut gold = object_of_kind(&objects, "ClusterQueue", "tiergate-gold");
    gold["spec"]["fairSharing"]["weight"] = json!("heavy");
    assert!(!checker.structural_errors(&gold).is_empty(), "a weight is a quantity");
}

/// A flavor migration's ClusterQueues (a retired flavor kept, frozen at what it holds, the rest given up by the
/// others) and kept ResourceFlavor are accepted too, on every queue of the spot-mix sample (cohorts, lending
/// limits, placement rules, several resources).
#[test]
fn the_queues_and_flavors_of_a_flavor_migration_are_accepted_by_their_kueue_crds() {
    use kube::core::DynamicObject;
    use tiergate::reconcile::drain::carry_draining_flavors;
    use tiergate::reconcile::kinds::KueueKind;
    use tiergate::reconcile::live::LiveObject;

    let checker = Checker::new();
    let objects = sample_objects();
    let mut desired: Vec<DynamicObject> = objects
        .iter()
        .filter(|object| matches!(object["kind"].as_str(), Some("ClusterQueue" | "ResourceFlavor")))
        .map(|object| serde_json::from_value(object.clone()).unwrap())
        .collect();
    // Live, each queue still has a retired flavor in every group, holding 1 of each covered resource.
    let live: Vec<LiveObject> = desired
        .iter()
        .filter(|object| KueueKind::of(object) == Some(KueueKind::ClusterQueue))
        .flat_map(|queue| {
            let mut live = serde_json::to_value(queue).unwrap();
            let mut reservations = Vec::new();
            for (index, group) in live["spec"]["resourceGroups"].as_array_mut().unwrap().iter_mut().enumerate() {
                let covered: Vec<Value> = group["coveredResources"].as_array().unwrap().clone();
                let retired = format!("retired-{index}");
                let resources: Vec<Value> =
                    covered.iter().map(|resource| json!({"name": resource, "nominalQuota": "1"})).collect();
                group["flavors"].as_array_mut().unwrap().push(json!({"name": retired, "resources": resources}));
                let held: Vec<Value> = covered.iter().map(|resource| json!({"name": resource, "total": "1"})).collect();
                reservations.push(json!({"name": retired, "resources": held}));
            }
            live["status"] = json!({"flavorsReservation": reservations});
            let flavors: Vec<Value> = reservations
                .iter()
                .map(|reservation| {
                    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                           "metadata": {"name": reservation["name"]}, "spec": {"nodeLabels": {"pool": "retired"}}})
                })
                .collect();
            std::iter::once((KueueKind::ClusterQueue, live))
                .chain(flavors.into_iter().map(|flavor| (KueueKind::ResourceFlavor, flavor)))
        })
        .map(|(kind, value)| LiveObject::from_dynamic(kind, serde_json::from_value(value).unwrap()))
        .collect();
    let draining = carry_draining_flavors(&mut desired, |kind, name| {
        live.iter().find(|object| object.kind == kind && object.name == name).cloned()
    });

    assert!(draining.len() >= 3, "every queue of spot-mix keeps its retired flavors: {draining:?}");
    for object in &desired {
        let value = serde_json::to_value(object).unwrap();
        let errors = checker.all_errors(&value);
        assert!(errors.is_empty(), "{} {}: {errors:#?}", value["kind"], value["metadata"]["name"]);
    }
    let kept = desired.iter().filter(|object| object.metadata.name.as_deref() == Some("retired-0")).count();
    assert_eq!(kept, 1, "the retired flavor is kept once, however many queues hold it");
}

/// The ClusterQueues a quota window puts in force (nominal, borrowing and lending limits changed on a tier of a
/// cohort, the GPU quota of a tier with placement rules raised) are accepted by Kueue's CRD, and carry the window's
/// values.
#[test]
fn the_queues_of_a_quota_window_in_force_are_accepted_by_the_kueue_crd() {
    use tiergate::plan::quota_windows::build_windows_in_force;
    use tiergate::validation::validate_policy;

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/spot-mix");
    let mut policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
    let window = |tier: &str, quotas: Value| -> tiergate::policy::QuotaWindow {
        serde_json::from_value(json!({
            "name": format!("{tier}-burst"),
            "once": {"begin": "2026-12-02T10:00:00Z", "end": "2026-12-02T11:00:00Z"},
            "quotas": quotas,
        }))
        .unwrap()
    };
    for tier in &mut policy.spec.tiers {
        let quotas = match tier.name.as_str() {
            "gold" => json!({"nvidia.com/gpu": {"nominal": "40", "borrowingLimit": "4", "lendingLimit": "8"}}),
            "silver" => json!({"nvidia.com/gpu": {"borrowingLimit": "0"}, "cpu": {"nominal": "300"}}),
            _ => json!({"nvidia.com/gpu": {"nominal": "24"}}),
        };
        tier.quota_windows = vec![window(&tier.name.clone(), quotas)];
    }
    validate_policy(&policy).unwrap();
    let windows = build_windows_in_force(&policy.spec, "2026-12-02T10:30:00Z".parse().unwrap());
    assert!(windows.tiers.iter().all(|tier| tier.in_force.is_some()), "{:?}", windows.tiers);
    let mut in_force = policy.clone();
    in_force.spec = windows.spec;
    let view = load_cluster_view(&dir.join("cluster.yaml")).unwrap();
    let objects = desired(&in_force, &view).to_values().unwrap();
    let checker = Checker::new();
    for object in objects.iter().filter(|object| object["kind"] == "ClusterQueue") {
        let errors = checker.all_errors(object);
        assert!(errors.is_empty(), "ClusterQueue {}: {errors:#?}", object["metadata"]["name"]);
    }
    let gold = object_of_kind(&objects, "ClusterQueue", "tiergate-gold");
    let resources = gold["spec"]["resourceGroups"][0]["flavors"][0]["resources"].as_array().unwrap();
    let gpu = resources.iter().find(|resource| resource["name"] == "nvidia.com/gpu").unwrap();
    assert_eq!(
        (&gpu["nominalQuota"], &gpu["borrowingLimit"], &gpu["lendingLimit"]),
        (&json!("40"), &json!("4"), &json!("8"))
    );
}
