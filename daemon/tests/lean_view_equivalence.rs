//! The lean view against the whole object: every recorded review (shared/fixtures/admission, shared/fixtures/kinds,
//! the repo's fuzz corpus) and generated env-heavy workloads, decided from the lean view, give the same verdict,
//! reasons and warnings, and the same final object (the patch applied to the request's object as sent), as the
//! decision made on the fully parsed object with the patch diffed from the two full trees.
#![cfg(test)]

#[allow(dead_code)]
#[path = "../benches/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use proptest::prelude::*;
use serde_json::{Value, json};
use tiergate::admission::Request;
use tiergate::admission::{AdmissionInputs, Decision, build_static_snapshot, mutate, parse_review};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::placement::{GpuPinning, PlacementAssignment, PlacementOutcome};
use tiergate::view::Snapshot;

fn snapshot() -> Snapshot {
    build_static_snapshot(
        load_policy(None).unwrap(),
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    )
}

/// The inputs each review is decided with: none, scored, placed by a rule, pinned to a node.
fn every_inputs() -> Vec<(&'static str, AdmissionInputs)> {
    let score = support::score();
    let rule = PlacementOutcome {
        assignment: Some(PlacementAssignment {
            rule: "spot".into(),
            owner: "job/j".into(),
            node_selector: BTreeMap::from([("node-type".to_owned(), "spot".to_owned())]),
            tolerations: Vec::new(),
        }),
        metadata_labels: BTreeMap::from([("tiergate.io/placement-rule".to_owned(), "spot".to_owned())]),
        template_annotations: BTreeMap::from([("tiergate.io/placed-by".to_owned(), "spot".to_owned())]),
        ..PlacementOutcome::default()
    };
    let pinned = PlacementOutcome {
        pinning: Some(GpuPinning { node: "gpu-l4-node-1".into(), cuda_visible_devices: "0,1".into() }),
        ..PlacementOutcome::default()
    };
    vec![
        ("plain", AdmissionInputs::default()),
        ("scored", AdmissionInputs { score: Some(score.clone()), ..AdmissionInputs::default() }),
        ("placed", AdmissionInputs { score: Some(score), placement: Ok(rule) }),
        ("pinned", AdmissionInputs { score: None, placement: Ok(pinned) }),
    ]
}

/// The request as kube-core parses it: the whole object.
fn full_request(body: &[u8]) -> Option<Request> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).ok()?;
    (review.types.api_version == "admission.k8s.io/v1" && review.types.kind == "AdmissionReview")
        .then(|| review.try_into().ok().map(|request: AdmissionRequest<DynamicObject>| Request::from(request)))
        .flatten()
}

fn applied(object: &Value, patch: &json_patch::Patch) -> Value {
    let mut object = object.clone();
    json_patch::patch(&mut object, patch).unwrap_or_else(|error| panic!("{error}: {patch:?}"));
    object
}

/// Decides `body` both ways with each set of inputs and asserts they agree; returns how many decisions patched.
fn assert_equivalent(name: &str, body: &[u8], snapshot: &Snapshot) -> usize {
    let (full, lean) = (full_request(body), parse_review(body).ok());
    assert_eq!(full.is_some(), lean.is_some(), "{name}: the lean and full parsers disagree on whether it is a review");
    let (Some(full), Some(lean)) = (full, lean) else { return 0 };
    let raw: Value = serde_json::from_slice(body).unwrap();
    let sent = &raw["request"]["object"];
    let mut patched = 0;
    for (label, inputs) in every_inputs() {
        let whole: Decision = mutate(&full, snapshot, &inputs);
        let decided = mutate(&lean, snapshot, &inputs);
        let context = format!("{name} ({label})");
        assert_eq!(decided.verdict, whole.verdict, "{context}: verdict");
        assert_eq!(decided.reasons, whole.reasons, "{context}: reasons");
        assert_eq!(decided.warnings, whole.warnings, "{context}: warnings");
        // The old path: the patch diffed from the whole object (without managedFields) to its mutated copy.
        let expected = match full.object.as_ref().and_then(|object| Some((object, whole.final_object(object)?))) {
            Some((object, after)) => applied(sent, &json_patch::diff(object, &after)),
            None => sent.clone(),
        };
        let got = if sent.is_null() { sent.clone() } else { applied(sent, &decided.patch) };
        assert_eq!(got, expected, "{context}: final object; patch {:?}", decided.patch);
        patched += usize::from(!decided.patch.0.is_empty());
    }
    patched
}

fn reviews_in(dir: PathBuf) -> Vec<(String, Vec<u8>)> {
    let mut reviews: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| (path.display().to_string(), std::fs::read(&path).unwrap()))
        .collect();
    reviews.sort();
    reviews
}

fn shared(dir: &str) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|root| root.join("shared/fixtures").join(dir))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| panic!("no shared/fixtures/{dir} above {}", manifest.display()))
}

#[test]
fn every_recorded_review_gets_the_same_decision_and_final_object_from_the_lean_view() {
    let snapshot = snapshot();
    let mut reviews = reviews_in(shared("admission"));
    reviews.extend(reviews_in(shared("kinds/admission")));
    assert!(reviews.len() >= 40, "expected the recorded fixtures, found {}", reviews.len());
    let patched: usize = reviews.iter().map(|(name, body)| assert_equivalent(name, body, &snapshot)).sum();
    assert!(patched >= 40, "too few decisions patched anything ({patched}): the comparison would prove little");
}

#[test]
fn every_fuzz_corpus_review_gets_the_same_decision_and_final_object_from_the_lean_view() {
    let snapshot = snapshot();
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/admission_review");
    for (name, body) in reviews_in(corpus) {
        assert_equivalent(&name, &body, &snapshot);
    }
}

/// A Job or Pod in `namespace` with long env lists (`CUDA_VISIBLE_DEVICES` among them or not), GPU requests or
/// not, a selector, managedFields and labels: the shapes the lean view prunes, around the fields it keeps.
fn workload() -> impl Strategy<Value = Vec<u8>> {
    let env_entry = prop_oneof![
        4 => (0..50u32).prop_map(|index| json!({"name": format!("CONFIG_{index}"), "value": "x".repeat(8)})),
        1 => Just(json!({"name": "CUDA_VISIBLE_DEVICES", "value": "3"})),
        1 => Just(json!({"name": "FROM_FIELD", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})),
    ];
    let container = (
        "[a-c]",
        proptest::collection::vec(env_entry, 0..40),
        prop_oneof![Just(None), Just(Some("nvidia.com/gpu")), Just(Some("cpu"))],
        any::<bool>(),
    )
        .prop_map(|(name, env, resource, has_env)| {
            let mut container = json!({"name": name, "image": "trainer:1", "args": ["--epochs", "3"]});
            if has_env {
                container["env"] = Value::from(env);
            }
            if let Some(resource) = resource {
                container["resources"] = json!({"limits": {resource: "1"}});
            }
            container
        });
    (
        prop_oneof![Just("Job"), Just("Pod")],
        prop_oneof![Just("ml-team-dev"), Just("ml-team-staging"), Just("ml-research"), Just("kube-system")],
        proptest::collection::vec(container, 1..3),
        prop_oneof![Just(None), Just(Some("l4")), Just(Some("a100")), Just(Some("h100"))],
        any::<bool>(),
        prop_oneof![Just("CREATE"), Just("UPDATE")],
    )
        .prop_map(|(kind, namespace, containers, class, labelled, operation)| {
            let mut spec = json!({"containers": containers, "restartPolicy": "Never"});
            if let Some(class) = class {
                spec["nodeSelector"] = json!({"gpu.nvidia.com/class": class});
            }
            let metadata = json!({"name": "w", "namespace": namespace,
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}],
                "labels": if labelled { json!({"app": "train", "kueue.x-k8s.io/queue-name": "tiergate-gold"}) }
                          else { json!({}) }});
            let (version, group, object) = match kind {
                "Job" => (
                    "v1",
                    "batch",
                    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
                    "spec": {"suspend": false, "template": {"metadata": {"labels": {"app": "train"}}, "spec": spec}}}),
                ),
                _ => ("v1", "", json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})),
            };
            let mut request = json!({"uid": "u", "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
                "namespace": namespace, "operation": operation, "userInfo": {"username": "alice"},
                "object": object});
            if operation == "UPDATE" {
                request["oldObject"] = request["object"].clone();
            }
            serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": request}))
            .unwrap()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn generated_env_heavy_workloads_get_the_same_decision_and_final_object_from_the_lean_view(body in workload()) {
        assert_equivalent("generated", &body, &snapshot());
    }
}
