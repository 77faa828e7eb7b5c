//! Every workload kind Kueue v0.19.2 manages, through `mutate()` with the sample KubeNexus policy: the recorded
//! CREATE and UPDATE reviews of `shared/fixtures/kinds/admission/` (a bronze namespace), variants built from them,
//! the patched objects validated against the kinds' CRDs (`shared/workload-crds/`), and a property: the decision on
//! a parent equals the decision on a Pod built from each of its templates.
#![cfg(test)]

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use support::*;

/// Fixture loading, deciding and template helpers (a `cfg(test)` module so the test lints apply).
mod crd_schema_support;

#[cfg(test)]
mod support {
    pub use super::crd_schema_support::strict;
    pub use std::path::{Path, PathBuf};

    pub use serde_json::{Value, json};
    pub use tiergate::admission::Request;
    pub use tiergate::admission::{AdmissionInputs, Decision, Verdict, build_static_snapshot, mutate, parse_review};
    pub use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    pub use tiergate::policy::TierPolicy;
    pub use tiergate_workloads::{PodTemplatePointers, WorkloadAdapter, adapter_for, requests_any};

    pub const BRONZE_QUEUE: &str = "tiergate-bronze";
    pub const QUEUE: &str = "kueue.x-k8s.io/queue-name";
    pub const L4: &str = "l4";

    /// `shared/`, found from the crate upwards (the repository's sibling, also from a worktree one level deeper).
    pub fn shared() -> PathBuf {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        manifest
            .ancestors()
            .map(|dir| dir.join("shared"))
            .find(|dir| dir.join("fixtures/kinds/admission").is_dir())
            .unwrap_or_else(|| panic!("no shared/fixtures/kinds/admission above {}", manifest.display()))
    }

    pub fn fixture_names() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(shared().join("fixtures/kinds/admission"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".json"))
            .collect();
        names.sort();
        assert!(names.len() >= 11, "{names:?}");
        names
    }

    /// The recorded review's `request`.
    pub fn raw(name: &str) -> Value {
        let text = std::fs::read(shared().join("fixtures/kinds/admission").join(name)).unwrap();
        serde_json::from_slice::<Value>(&text).unwrap()
    }

    pub fn request_of(raw: &Value) -> Request {
        parse_review(&serde_json::to_vec(raw).unwrap()).unwrap_or_else(|(_, error)| panic!("{error}"))
    }

    pub fn load(name: &str) -> Request {
        request_of(&raw(name))
    }

    /// The same review carrying `object` (and, for UPDATE, the recorded old object).
    pub fn with_object(name: &str, object: &Value) -> Request {
        let mut review = raw(name);
        review["request"]["object"] = object.clone();
        request_of(&review)
    }

    pub fn policy() -> TierPolicy {
        load_policy(None).unwrap()
    }

    pub fn decide_with(request: &Request, policy: TierPolicy) -> Decision {
        let snapshot = build_static_snapshot(policy, parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None);
        mutate(request, &snapshot, &AdmissionInputs::default())
    }

    pub fn decide(request: &Request) -> Decision {
        decide_with(request, policy())
    }

    pub fn object_of(request: &Request) -> Value {
        serde_json::to_value(request.object.as_ref().unwrap()).unwrap()
    }

    pub fn patched(request: &Request, decision: &Decision) -> Value {
        let mut object = object_of(request);
        json_patch::patch(&mut object, &decision.patch).unwrap();
        object
    }

    pub fn adapter(request: &Request) -> &'static WorkloadAdapter {
        adapter_for(&request.kind.group, &request.kind.version, &request.kind.kind).unwrap()
    }

    /// The templates of `object` whose pods ask for a GPU (every template when the kind is sized outside them).
    pub fn gpu_templates(adapter: &WorkloadAdapter, object: &Value) -> Vec<PodTemplatePointers> {
        let outside = adapter.requests_outside_templates(object, &["nvidia.com/gpu"]);
        adapter
            .pod_templates(object)
            .into_iter()
            .filter(|template| outside || object.pointer(&template.spec).is_some_and(|spec| requests_any(spec, GPU)))
            .collect()
    }

    pub const GPU: &[&str] = &["nvidia.com/gpu"];

    pub fn cpu_templates(adapter: &WorkloadAdapter, object: &Value) -> Vec<PodTemplatePointers> {
        let gpu = gpu_templates(adapter, object);
        adapter.pod_templates(object).into_iter().filter(|template| !gpu.contains(template)).collect()
    }

    pub fn has_gpu_toleration(spec: &Value) -> bool {
        spec["tolerations"].as_array().is_some_and(|tolerations| {
            tolerations.contains(&json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                "effect": "NoSchedule"}))
        })
    }

    /// Where the kind carries its queue label.
    pub fn queue_of(adapter: &WorkloadAdapter, object: &Value) -> Option<String> {
        let labels = object.pointer(adapter.queue_labels_at)?.get("labels")?;
        labels.get(QUEUE)?.as_str().map(str::to_owned)
    }

    /// The `suspend` field of a kind that has one.
    pub fn suspend_of(adapter: &WorkloadAdapter, object: &Value) -> Option<bool> {
        match adapter.queueing {
            tiergate_workloads::Queueing::SuspendedWithQueueLabel { suspend } => {
                object.pointer(suspend).and_then(Value::as_bool)
            }
            _ => None,
        }
    }

    /// The CRD's `openAPIV3Schema` for the object's apiVersion, made strict (`additionalProperties: false` where
    /// properties are listed and unknown fields are not preserved), as the API server's strict field validation.
    pub fn crd_schema(object: &Value) -> Option<Value> {
        let (group, version) = object["apiVersion"].as_str()?.split_once('/')?;
        let kind = object["kind"].as_str()?;
        // The CRD files are named `GROUP_PLURAL.yaml`, and every plural here is the lower-case kind plus `s`.
        let path = shared().join("workload-crds").join(format!("{group}_{}s.yaml", kind.to_lowercase()));
        let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).ok()?).unwrap();
        assert_eq!(crd["spec"]["names"]["kind"], kind, "{}", path.display());
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let served = versions.iter().find(|candidate| candidate["name"] == version)?;
        Some(strict(&served["schema"]["openAPIV3Schema"]))
    }

    /// Sets the GPU-class nodeSelector `class` on the template's pod spec.
    pub fn select(object: &mut Value, template: &PodTemplatePointers, class: &str) {
        let pointer = format!("{}/nodeSelector", template.spec);
        assert!(tiergate_workloads::set_pointer(object, &pointer, Some(json!({"gpu.nvidia.com/class": class}))));
    }
}

fn creates() -> Vec<String> {
    fixture_names().into_iter().filter(|name| name.contains("-create-")).collect()
}

#[test]
fn every_kind_created_in_a_bronze_namespace_carries_the_bronze_queue_where_kueue_reads_it() {
    for name in creates() {
        let request = load(&name);
        let adapter = adapter(&request);
        let decision = decide(&request);
        assert_eq!(decision.verdict, Verdict::Allow, "{name}: {:?}", decision.reasons);
        let object = patched(&request, &decision);
        assert_eq!(queue_of(adapter, &object).as_deref(), Some(BRONZE_QUEUE), "{name}");
        assert_eq!(object["metadata"]["annotations"]["tiergate.io/tier"], "bronze", "{name}");
    }
}

/// Bronze's run-time ceiling in the sample policy (4h), in seconds.
const BRONZE_CEILING: &str = "14400";
const RUN_TIME: &str = "kueue.x-k8s.io/max-exec-time-seconds";

/// The run-time label at each place Kueue reads it on `object` (templates only where present), by pointer.
fn run_time_labels(adapter: &WorkloadAdapter, object: &Value) -> Vec<(String, Option<String>)> {
    adapter
        .run_time_labels_at()
        .into_iter()
        .enumerate()
        .filter(|(index, at)| *index == 0 || object.pointer(at.strip_suffix("/metadata").unwrap_or(at)).is_some())
        .map(|(_, at)| {
            let value = object.pointer(&at).and_then(|metadata| metadata["labels"][RUN_TIME].as_str());
            (at, value.map(str::to_owned))
        })
        .collect()
}

/// The fixture's object with the run-time label `value` where Kueue reads it first.
fn asking_for(name: &str, value: &str) -> Request {
    let request = load(name);
    let adapter = adapter(&request);
    let mut object = object_of(&request);
    let at = adapter.run_time_labels_at().remove(0);
    let pointer = format!("{at}/labels/{}", RUN_TIME.replace('/', "~1"));
    assert!(tiergate_workloads::set_pointer(&mut object, &pointer, Some(json!(value))), "{name}");
    with_object(name, &object)
}

#[test]
fn every_kind_created_in_a_bronze_namespace_gets_bronzes_run_time_ceiling_where_kueue_reads_it() {
    for name in creates() {
        let request = load(&name);
        let adapter = adapter(&request);
        let decision = decide(&request);
        let object = patched(&request, &decision);
        let labels = run_time_labels(adapter, &object);
        assert!(!labels.is_empty(), "{name}");
        for (at, value) in labels {
            assert_eq!(value.as_deref(), Some(BRONZE_CEILING), "{name} {at}");
        }
        let summary = object["metadata"]["annotations"]["tiergate.io/decision"].as_str().unwrap_or_default();
        assert!(summary.ends_with("; max-exec-time: 14400s"), "{name}: {summary}");
        assert!(decision.reasons.iter().any(|reason| reason.contains("run-time limit 14400s (4h)")), "{name}");
    }
}

#[test]
fn every_kind_asking_for_less_keeps_it_and_asking_for_more_or_garbage_gets_the_ceiling_with_a_warning() {
    for name in creates() {
        for (asked, stored, warned) in
            [("600", "600", false), ("86400", BRONZE_CEILING, true), ("4h", BRONZE_CEILING, true)]
        {
            let request = asking_for(&name, asked);
            let adapter = adapter(&request);
            let decision = decide(&request);
            assert_eq!(decision.verdict, Verdict::Allow, "{name} {asked}");
            for (at, value) in run_time_labels(adapter, &patched(&request, &decision)) {
                assert_eq!(value.as_deref(), Some(stored), "{name} {asked} {at}");
            }
            let warning = decision.warnings.iter().any(|warning| warning.contains(RUN_TIME));
            assert_eq!(warning, warned, "{name} {asked}: {:?}", decision.warnings);
        }
    }
}

#[test]
fn an_update_of_a_running_kubeflow_or_ray_job_can_neither_raise_nor_drop_its_run_time_limit() {
    for name in ["pytorchjob-update-bronze-pt-ddp.json", "rayjob-update-bronze-ray-finetune.json"] {
        let request = load(name);
        let adapter = adapter(&request);
        // Recorded without the label: an update that leaves it so adds none (Kueue refuses a change while it runs).
        assert_eq!(run_time_labels(adapter, &patched(&request, &decide(&request)))[0].1, None, "{name}");
        let mut review = raw(name);
        let labelled = |object: &mut Value, value: Option<&str>| {
            if !object["metadata"]["labels"].is_object() {
                object["metadata"]["labels"] = json!({});
            }
            let labels = object["metadata"]["labels"].as_object_mut().unwrap();
            match value {
                Some(value) => labels.insert(RUN_TIME.to_owned(), json!(value)),
                None => labels.remove(RUN_TIME),
            };
        };
        labelled(&mut review["request"]["oldObject"], Some("3600"));
        for new in [Some("86400"), None, Some("60")] {
            labelled(&mut review["request"]["object"], new);
            let request = request_of(&review);
            let decision = decide(&request);
            assert_eq!(decision.verdict, Verdict::Allow, "{name} {new:?}");
            let object = patched(&request, &decision);
            assert_eq!(run_time_labels(adapter, &object)[0].1.as_deref(), Some("3600"), "{name} {new:?}");
            assert!(decision.warnings.iter().any(|warning| warning.contains("undone")), "{name} {new:?}");
        }
    }
}

#[test]
fn every_suspendable_kind_is_created_suspended_and_a_cronjob_only_in_its_job_template() {
    for name in creates() {
        let request = load(&name);
        let adapter = adapter(&request);
        let object = patched(&request, &decide(&request));
        match request.kind.kind.as_str() {
            "LeaderWorkerSet" => assert_eq!(suspend_of(adapter, &object), None, "{name}"),
            _ => assert_eq!(suspend_of(adapter, &object), Some(true), "{name}"),
        }
    }
    let request = load("cronjob-create-bronze-nightly-eval.json");
    let before = object_of(&request);
    let object = patched(&request, &decide(&request));
    // `spec.suspend` pauses the schedule: the user's value stays.
    assert_eq!(object["spec"]["suspend"], before["spec"]["suspend"]);
    assert_eq!(object["spec"]["jobTemplate"]["spec"]["suspend"], true);
    assert_eq!(object["spec"]["jobTemplate"]["metadata"]["labels"][QUEUE], BRONZE_QUEUE);
    assert_eq!(object["metadata"]["labels"].get(QUEUE), None);
}

#[test]
fn every_gpu_template_of_every_kind_gets_the_l4_selector_and_toleration_and_cpu_templates_stay_as_written() {
    let mut cpu_templates_seen = 0;
    for name in creates() {
        let request = load(&name);
        let adapter = adapter(&request);
        let before = object_of(&request);
        let object = patched(&request, &decide(&request));
        for template in gpu_templates(adapter, &before) {
            let spec = object.pointer(&template.spec).unwrap();
            assert_eq!(spec["nodeSelector"], json!({"gpu.nvidia.com/class": L4}), "{name} {}", template.spec);
            assert!(has_gpu_toleration(spec), "{name} {}", template.spec);
        }
        for template in cpu_templates(adapter, &before) {
            cpu_templates_seen += 1;
            assert_eq!(object.pointer(&template.spec), before.pointer(&template.spec), "{name} {}", template.spec);
        }
    }
    // The CPU Ray head and the CPU MPI launcher.
    assert!(cpu_templates_seen >= 2, "{cpu_templates_seen}");
}

#[test]
fn the_templates_of_every_fixture_are_found_where_the_crd_puts_them() {
    let expected = [
        ("appwrapper", 1),
        ("cronjob", 1),
        ("jobset", 1),
        ("leaderworkerset", 2),
        ("mpijob", 2),
        ("pytorchjob-create", 2),
        ("raycluster", 2),
        ("rayjob-create", 2),
        ("trainjob", 0),
    ];
    for (prefix, count) in expected {
        let name = creates().into_iter().find(|name| name.starts_with(prefix)).unwrap();
        let request = load(&name);
        let templates = adapter(&request).pod_templates(&object_of(&request));
        assert_eq!(templates.len(), count, "{name}: {templates:?}");
        let object = object_of(&request);
        for template in templates {
            assert!(object.pointer(&template.spec).unwrap().get("containers").is_some(), "{name}");
        }
    }
}

#[test]
fn a_foreign_gpu_class_in_any_gpu_template_of_any_kind_is_denied_naming_the_kind() {
    let mut denied = 0;
    for name in creates() {
        let request = load(&name);
        let adapter = adapter(&request);
        let before = object_of(&request);
        for template in gpu_templates(adapter, &before) {
            let mut object = before.clone();
            select(&mut object, &template, "h100");
            let decision = decide(&with_object(&name, &object));
            let Verdict::Deny { reason, message } = &decision.verdict else {
                panic!("{name} {}: {:?}", template.spec, decision.verdict);
            };
            assert_eq!(*reason, "foreign_gpu_class");
            assert!(message.starts_with(adapter.kind), "{message}");
            assert!(message.contains("tier bronze"), "{message}");
            denied += 1;
        }
    }
    assert!(denied >= 10, "{denied}");
}

#[test]
fn running_every_kind_through_the_webhook_twice_changes_nothing_the_second_time() {
    for name in fixture_names() {
        let request = load(&name);
        let decision = decide(&request);
        let once = patched(&request, &decision);
        let again = with_object(&name, &once);
        let second = decide(&again);
        assert!(second.patch.0.is_empty(), "{name}: {:?}", second.patch);
    }
}

#[test]
fn an_update_of_a_running_kubeflow_or_ray_job_never_suspends_or_requeues_it() {
    for name in ["pytorchjob-update-bronze-pt-ddp.json", "rayjob-update-bronze-ray-finetune.json"] {
        let request = load(name);
        let adapter = adapter(&request);
        let decision = decide(&request);
        assert_eq!(decision.verdict, Verdict::Allow, "{name}");
        let before = object_of(&request);
        let object = patched(&request, &decision);
        for pointer in adapter.immutable_on_update {
            assert_eq!(object.pointer(pointer), before.pointer(pointer), "{name} {pointer}");
        }
        assert_eq!(suspend_of(adapter, &object), suspend_of(adapter, &before), "{name}");
    }
}

#[test]
fn an_update_that_adds_an_h100_selector_to_a_ray_worker_group_is_denied() {
    let name = "rayjob-update-bronze-ray-finetune.json";
    let request = load(name);
    let mut object = object_of(&request);
    let worker = adapter(&request)
        .pod_templates(&object)
        .into_iter()
        .find(|template| template.spec.contains("workerGroupSpecs"))
        .unwrap();
    select(&mut object, &worker, "h100");
    let decision = decide(&with_object(name, &object));
    assert!(matches!(decision.verdict, Verdict::Deny { reason: "foreign_gpu_class", .. }), "{:?}", decision.verdict);
}

#[test]
fn a_leaderworkerset_labels_leader_and_worker_templates_as_kueues_own_webhook_would() {
    let request = load("leaderworkerset-create-bronze-vllm-multihost.json");
    let object = patched(&request, &decide(&request));
    for template in ["leaderTemplate", "workerTemplate"] {
        let metadata = &object["spec"]["leaderWorkerTemplate"][template]["metadata"];
        assert_eq!(metadata["labels"][QUEUE], BRONZE_QUEUE, "{template}");
        assert_eq!(
            metadata["annotations"]["kueue.x-k8s.io/pod-suspending-parent"],
            "leaderworkerset.x-k8s.io/leaderworkerset"
        );
        assert_eq!(metadata["annotations"]["kueue.x-k8s.io/pod-group-serving"], "true");
    }
}

#[test]
fn an_update_of_a_leaderworkerset_created_without_a_queue_does_not_relabel_its_templates() {
    let name = "leaderworkerset-create-bronze-vllm-multihost.json";
    let object = object_of(&load(name));
    let mut review = raw(name);
    review["request"]["operation"] = json!("UPDATE");
    review["request"]["oldObject"] = object.clone();
    let request = request_of(&review);
    let decision = decide(&request);
    assert_eq!(decision.verdict, Verdict::Allow);
    let after = patched(&request, &decision);
    for template in ["leaderTemplate", "workerTemplate"] {
        let metadata = &after["spec"]["leaderWorkerTemplate"][template]["metadata"];
        assert_eq!(metadata.get("labels").and_then(|labels| labels.get(QUEUE)), None, "{template}");
    }
    assert_eq!(after["metadata"].get("labels").and_then(|labels| labels.get(QUEUE)), None);
}

#[test]
fn a_trainjob_sized_by_resources_per_node_is_queued_and_suspended_and_kueue_places_its_pods() {
    let request = load("trainjob-create-bronze-tj-llm.json");
    let decision = decide(&request);
    let object = patched(&request, &decide(&request));
    assert_eq!(object["spec"]["suspend"], true);
    assert_eq!(object["metadata"]["labels"][QUEUE], BRONZE_QUEUE);
    // No pod template on the object: nothing to write a selector into (Kueue writes the flavor's).
    assert_eq!(object["spec"].get("runtimePatches"), None);
    assert!(decision.reasons.iter().any(|reason| reason.contains("(spec.suspend: true)")), "{:?}", decision.reasons);
    let cpu = {
        let mut object = object_of(&request);
        object["spec"]["trainer"]["resourcesPerNode"] = json!({"limits": {"cpu": "4"}});
        object
    };
    let decision = decide(&with_object("trainjob-create-bronze-tj-llm.json", &cpu));
    assert_eq!(decision.verdict, Verdict::Skip { reason: "no_gpu_request" });
}

#[test]
fn a_trainjob_runtime_patch_selecting_h100_is_denied() {
    let name = "trainjob-create-bronze-tj-llm.json";
    let mut object = object_of(&load(name));
    object["spec"]["runtimePatches"] = json!([{"manager": "example.com/me", "trainingRuntimeSpec": {"template": {
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"gpu.nvidia.com/class": "h100"}}}}}}]}}}}]);
    let decision = decide(&with_object(name, &object));
    assert!(matches!(decision.verdict, Verdict::Deny { reason: "foreign_gpu_class", .. }), "{:?}", decision.verdict);
}

#[test]
fn every_patched_object_of_a_crd_kind_is_valid_against_its_crd_schema_and_the_check_catches_a_stray_field() {
    // One validator per kind: the CRDs are large (up to 1.3 MB of YAML), parsing each once keeps this affordable.
    let mut validators: std::collections::BTreeMap<String, jsonschema::Validator> = Default::default();
    let mut validated = 0;
    for name in fixture_names() {
        let request = load(&name);
        let object = patched(&request, &decide(&request));
        let key = format!("{}/{}", object["apiVersion"].as_str().unwrap(), object["kind"].as_str().unwrap());
        if !validators.contains_key(&key) {
            let Some(schema) = crd_schema(&object) else {
                assert_eq!(request.kind.group, "batch", "{name}: no CRD found");
                continue;
            };
            validators.insert(key.clone(), jsonschema::validator_for(&schema).unwrap());
        }
        let validator = &validators[&key];
        let errors: Vec<String> = validator.iter_errors(&object).map(|error| error.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        validated += 1;
        // The check is strict: a field the CRD does not have (a nodeSelector beside a template) is caught.
        if let Some(head) = object.pointer("/spec/rayClusterSpec/headGroupSpec") {
            let mut stray = object.clone();
            let mut head = head.clone();
            head["nodeSelector"] = json!({"a": "b"});
            stray["spec"]["rayClusterSpec"]["headGroupSpec"] = head;
            assert!(!validator.is_valid(&stray), "{name}");
        }
    }
    assert!(validated >= 9, "{validated}");
}

#[test]
fn an_appwrapper_wrapping_an_unknown_gpu_kind_follows_the_policy_choice() {
    let name = "appwrapper-create-bronze-aw-train.json";
    let mut object = object_of(&load(name));
    object["spec"]["components"][0]["template"]["apiVersion"] = json!("example.com/v1");
    object["spec"]["components"][0]["template"]["kind"] = json!("Trainer");
    let decision = decide(&with_object(name, &object));
    let Verdict::Deny { reason, message } = &decision.verdict else { panic!("{:?}", decision.verdict) };
    assert_eq!(*reason, "unknown_gpu_kind");
    assert!(message.contains("example.com/Trainer"), "{message}");
    let mut queue_pods = policy();
    queue_pods.spec.admission.unknown_gpu_kinds = tiergate::policy::UnknownKindAction::QueuePods;
    let decision = decide_with(&with_object(name, &object), queue_pods);
    assert_eq!(decision.verdict, Verdict::Allow);
    // The embedded object's pod spec was still found and placed on the tier's class.
    let patched = patched(&with_object(name, &object), &decision);
    let spec = &patched["spec"]["components"][0]["template"]["spec"]["template"]["spec"];
    assert_eq!(spec["nodeSelector"], json!({"gpu.nvidia.com/class": L4}));
}

/// A pod spec: GPUs (0 = CPU only) and an optional GPU-class selector (a class of the policy or an unknown one).
fn pod_spec_strategy() -> impl Strategy<Value = Value> {
    let selector = prop_oneof![Just(None), Just(Some("l4")), Just(Some("h100")), Just(Some("a100")), Just(Some("z9"))];
    (0u32..3, selector).prop_map(|(gpus, class)| {
        let mut container = json!({"name": "main", "image": "img"});
        if gpus > 0 {
            container["resources"] = json!({"limits": {"nvidia.com/gpu": gpus.to_string()}});
        }
        let mut spec = json!({"containers": [container]});
        if let Some(class) = class {
            spec["nodeSelector"] = json!({"gpu.nvidia.com/class": class});
        }
        spec
    })
}

/// The CREATE fixtures whose every template is a full pod spec (the TrainJob has none, by design).
fn template_fixtures() -> Vec<String> {
    creates().into_iter().filter(|name| !name.starts_with("trainjob")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_decision_on_a_parent_equals_the_decision_on_a_pod_built_from_each_of_its_templates(
        fixture in 0usize..9,
        specs in proptest::collection::vec(pod_spec_strategy(), 2),
    ) {
        let names = template_fixtures();
        let name = &names[fixture % names.len()];
        let request = load(name);
        let adapter = adapter(&request);
        let mut parent = object_of(&request);
        let templates = adapter.pod_templates(&parent);
        for (index, template) in templates.iter().enumerate() {
            let mut spec = specs[index % specs.len()].clone();
            // Keep what the kind needs in its pod spec (restartPolicy and the like), replace containers/selector.
            if let Some(Value::Object(original)) = parent.pointer(&template.spec) {
                for (key, value) in original {
                    if key != "containers" && key != "nodeSelector" && key != "initContainers" {
                        spec[key] = value.clone();
                    }
                }
            }
            prop_assert!(tiergate_workloads::set_pointer(&mut parent, &template.spec, Some(spec)));
        }
        let parent_request = with_object(name, &parent);
        let parent_decision = decide(&parent_request);
        let parent_denied = matches!(parent_decision.verdict, Verdict::Deny { .. });
        let parent_after = match parent_decision.verdict {
            Verdict::Allow => patched(&parent_request, &parent_decision),
            _ => parent.clone(),
        };
        let mut any_pod_denied = false;
        for template in &templates {
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ml-team-dev"},
                "spec": parent.pointer(&template.spec).unwrap().clone()});
            let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "name": "p",
                "namespace": "ml-team-dev", "operation": "CREATE", "userInfo": {"username": "alice"},
                "object": pod, "dryRun": false}});
            let pod_request = request_of(&review);
            let pod_decision = decide(&pod_request);
            if let Verdict::Deny { .. } = pod_decision.verdict {
                any_pod_denied = true;
                continue;
            }
            if parent_denied {
                continue;
            }
            let pod_after = match pod_decision.verdict {
                Verdict::Allow => patched(&pod_request, &pod_decision),
                _ => object_of(&pod_request),
            };
            let field = |object: &Value, pointer: &str, key: &str| {
                object.pointer(pointer).and_then(|spec| spec.get(key)).cloned()
            };
            for key in ["nodeSelector", "tolerations"] {
                prop_assert_eq!(
                    field(&parent_after, &template.spec, key),
                    field(&pod_after, "/spec", key),
                    "{} {} {}", name, template.spec, key
                );
            }
        }
        prop_assert_eq!(parent_denied, any_pod_denied, "{}: {:?}", name, parent_decision.verdict);
    }
}

/// Issue 52: the patch the server sends, deep edits folded into one `replace` per member, stores the same object
/// as the patch as built, for every recorded kind.
#[test]
fn the_folded_patch_of_every_kind_stores_the_same_object() {
    let mut folded_any = false;
    for name in fixture_names() {
        let request = load(&name);
        let decision = decide(&request);
        let body = serde_json::to_vec(&raw(&name)).unwrap();
        let Some(folded) = tiergate::admission::fold_deep_edits(&decision.patch, &body) else { continue };
        let folded: json_patch::Patch = serde_json::from_slice(&folded).unwrap();
        folded_any = true;
        assert!(folded.0.len() < decision.patch.0.len(), "{name}: {folded:?}");
        // Both applied to the object as the API server sent it (the request's lean view prunes `env`).
        let mut through_folded = raw(&name)["request"]["object"].clone();
        let mut through_built = through_folded.clone();
        json_patch::patch(&mut through_built, &decision.patch).unwrap();
        json_patch::patch(&mut through_folded, &folded).unwrap();
        assert_eq!(through_folded, through_built, "{name}");
    }
    assert!(folded_any, "no recorded kind has an edit deep enough to fold");
}
