//! The fuzz targets' checks (fuzz/fuzz_targets/*.rs) as fast property tests for CI: every committed corpus file,
//! then random and mutated inputs, go through the same functions; reads fuzz/corpus.
#![cfg(test)]

use std::path::PathBuf;

use proptest::prelude::*;
use tiergate::admission::{
    AdmissionInputs, build_static_snapshot, decide_review, encode_review, fold_deep_edits, mutate, object_as_sent,
    parse_review,
};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view, parse_policy};
use tiergate::placement::PlacementLedger;
use tiergate::scoring::Scorer;
use tiergate::validation::validate_policy;
use tiergate::view::Snapshot;
use tiergate_compat::gpu_map::parse_gpu_scheduling_map;
use tiergate_compat::strategy::{parse_custom_pod_strategy, parse_schedule_strategy};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|entry| entry.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files.into_iter().map(|path| std::fs::read(path).unwrap()).collect()
}

fn sample_snapshot() -> Snapshot {
    build_static_snapshot(load_policy(None).unwrap(), parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None)
}

/// fuzz_targets/admission_review.rs: decide without panicking; every patch applies to the object; the answer
/// encodes. Returns whether the body was a readable review.
fn check_admission(data: &[u8], snapshot: &Snapshot, runtime: &tokio::runtime::Runtime) -> bool {
    let Ok(request) = parse_review(data) else { return false };
    let object = request.object.as_ref().map(|object| serde_json::to_value(object).unwrap());
    let scorer = Scorer::default();
    for decision in [
        mutate(&request, snapshot, &AdmissionInputs::default()),
        runtime.block_on(decide_review(&request, snapshot, &PlacementLedger::default(), &scorer)),
    ] {
        if let Some(mut object) = object.clone()
            && !decision.patch.0.is_empty()
        {
            json_patch::patch(&mut object, &decision.patch).unwrap();
        }
        // The patch as sent (deep edits folded) stores what the patch as built stores, on the object as sent.
        if let Some(folded) = fold_deep_edits(&decision.patch, data) {
            serde_json::from_slice::<serde::de::IgnoredAny>(&folded).unwrap();
            if let Some(mut through_built) = object_as_sent(data) {
                let folded: json_patch::Patch = serde_json::from_slice(&folded).unwrap();
                let mut through_folded = through_built.clone();
                json_patch::patch(&mut through_built, &decision.patch).unwrap();
                json_patch::patch(&mut through_folded, &folded).unwrap();
                assert_eq!(through_folded, through_built);
            }
        }
        encode_review(&decision.response(&request)).unwrap();
    }
    true
}

/// fuzz_targets/strategy.rs, gpu_map.rs and policy_yaml.rs: parse (and validate) without panicking; errors name
/// a reason and render.
fn check_text(target: &str, input: &str) {
    match target {
        "strategy" => {
            for parsed in [parse_schedule_strategy(input), parse_custom_pod_strategy(input)] {
                match parsed {
                    Ok(strategy) => assert_eq!(strategy.weights().len(), strategy.rules.len()),
                    Err(error) => assert!(!error.reason().is_empty() && !error.to_string().is_empty()),
                }
            }
        }
        "gpu_map" => {
            if let Err(error) = parse_gpu_scheduling_map(input) {
                assert!(error.to_string().starts_with("failed to"), "{error}");
            }
        }
        "policy_yaml" => match parse_policy(input, "property") {
            Ok(policy) => {
                let _ = validate_policy(&policy);
            }
            Err(error) => assert!(error.to_string().starts_with("failed to"), "{error}"),
        },
        _ => unreachable!("unknown target {target}"),
    }
}

/// Group, version and kind of the workloads tiergate handles.
const KINDS: [(&str, &str, &str); 5] = [
    ("batch", "v1", "Job"),
    ("", "v1", "Pod"),
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "StatefulSet"),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn every_admission_seed_is_decided_and_its_patch_applies() {
    let (snapshot, runtime) = (sample_snapshot(), runtime());
    for seed in corpus("admission_review") {
        assert!(check_admission(&seed, &snapshot, &runtime), "{}", String::from_utf8_lossy(&seed));
    }
}

#[test]
fn every_text_seed_parses_or_fails_with_a_reason() {
    for target in ["strategy", "gpu_map", "policy_yaml"] {
        for seed in corpus(target) {
            check_text(target, &String::from_utf8_lossy(&seed));
        }
    }
}

#[test]
fn the_sample_policies_in_the_corpus_are_valid() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/policy_yaml");
    for name in ["kubenexus.yaml", "spot-mix.yaml"] {
        let policy = parse_policy(&std::fs::read_to_string(dir.join(name)).unwrap(), name).unwrap();
        validate_policy(&policy).unwrap();
    }
}

/// Found by the property below: a byte that is not UTF-8 in `request.options`, which neither the lean view nor
/// the fold reads. The review is still decided and its patch folded, and the fold is checked on the object alone.
#[test]
fn a_body_broken_outside_the_object_is_decided_and_its_fold_checked() {
    let mut body = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/admission_review/deployment-create-smart-scheduler-strategy.json"),
    )
    .unwrap();
    let options = body.windows(13).position(|window| window == b"CreateOptions").unwrap();
    body[options] = 0x80;
    assert!(serde_json::from_slice::<serde_json::Value>(&body).is_err());
    let request = parse_review(&body).unwrap();
    let ledger = PlacementLedger::default();
    let decision = runtime().block_on(decide_review(&request, &sample_snapshot(), &ledger, &Scorer::default()));
    assert!(fold_deep_edits(&decision.patch, &body).is_some(), "the Deployment's template edits fold");
    assert!(check_admission(&body, &sample_snapshot(), &runtime()));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_admission_seeds_never_panic(seed in 0usize..64, edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8), cut in any::<usize>()) {
        let seeds = corpus("admission_review");
        let mut body = seeds[seed % seeds.len()].clone();
        for (at, byte) in edits {
            let at = at % body.len();
            body[at] = byte;
        }
        if cut % 4 == 0 {
            body.truncate(cut % (body.len() + 1));
        }
        check_admission(&body, &sample_snapshot(), &runtime());
    }

    #[test]
    fn reviews_with_random_json_objects_never_panic(mut object in arbitrary_json(), kind in prop::sample::select(KINDS.to_vec())) {
        let (group, version, kind) = kind;
        if let Some(map) = object.as_object_mut() {
            let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
            map.insert("apiVersion".to_owned(), api_version.into());
            map.insert("kind".to_owned(), kind.into());
        }
        let gvk = serde_json::json!({"group": group, "version": version, "kind": kind});
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": gvk, "requestKind": gvk,
                "resource": {"group": group, "version": version, "resource": "x"}, "namespace": "ml-team-dev",
                "operation": "CREATE", "userInfo": {}, "object": object}
        });
        check_admission(&serde_json::to_vec(&body).unwrap(), &sample_snapshot(), &runtime());
    }

    #[test]
    fn random_strategy_and_gpu_map_text_never_panics(input in "[a-z0-9=,;:./ \n-]{0,80}") {
        check_text("strategy", &input);
        check_text("gpu_map", &input);
    }

    #[test]
    fn mutated_policy_yaml_never_panics(seed in 0usize..8, at in any::<usize>(), insert in "[-:{}\\[\\]&*!|> a-z0-9\n]{0,12}") {
        let seeds = corpus("policy_yaml");
        let text = String::from_utf8_lossy(&seeds[seed % seeds.len()]).into_owned();
        let mut at = at % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        check_text("policy_yaml", &format!("{}{insert}{}", &text[..at], &text[at..]));
    }
}

/// Random JSON shaped a little like a workload: objects with `metadata`/`spec`-like keys, nested a few levels.
fn arbitrary_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z0-9./-]{0,12}".prop_map(serde_json::Value::from),
    ];
    let keys = prop::sample::select(vec![
        "metadata",
        "spec",
        "template",
        "containers",
        "labels",
        "annotations",
        "nodeSelector",
        "resources",
        "limits",
        "nvidia.com/gpu",
        "suspend",
        "name",
        "namespace",
        "tolerations",
        "parallelism",
        "replicas",
    ]);
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(keys.clone(), inner, 0..6)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}
