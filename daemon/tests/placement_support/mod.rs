//! Shared builders for the placement tests: recorded admission requests, the pods the caches would show after
//! an admission, and snapshots; reads fixture files.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::Value;
use tiergate::admission::{Request, metadata_of};
use tiergate::placement::{PlacementLedger, PlacementOutcome};
use tiergate::policy::TierPolicy;
use tiergate::view::{PodView, Snapshot};

/// `shared/fixtures/admission`, found from the crate upwards (the repo root's sibling `shared/`, also from a
/// worktree one level deeper).
pub fn fixtures_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|dir| dir.join("shared/fixtures/admission"))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| panic!("no shared/fixtures/admission above {}", manifest.display()))
}

/// Every recorded fixture's file name, sorted.
pub fn every_fixture() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .collect();
    names.sort();
    names
}

/// The row of docs/admission.md's fixture table for `name`.
pub fn documented_row(name: &str) -> String {
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/admission.md");
    let text = std::fs::read_to_string(&docs).unwrap();
    let row = text.lines().find(|line| line.starts_with(&format!("| `{name}`")));
    row.unwrap_or_else(|| panic!("docs/admission.md has no row for {name}")).to_owned()
}

/// Runs `decide` on every item at once, each from its own thread (released together by a barrier).
pub fn concurrently<I: Sync, O: Send>(items: &[I], decide: impl Fn(&I) -> O + Sync) -> Vec<O> {
    let barrier = std::sync::Barrier::new(items.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .iter()
            .map(|item| {
                let (barrier, decide) = (&barrier, &decide);
                scope.spawn(move || {
                    barrier.wait();
                    decide(item)
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().unwrap()).collect()
    })
}

/// The recorded request in `name` (e.g. `pod-create-from-replicaset-web-app-1.json`).
pub fn fixture(name: &str) -> Request {
    let path = fixtures_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let review: AdmissionReview<DynamicObject> = serde_json::from_str(&text).unwrap();
    let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
    request.into()
}

/// Edits the metadata of `object` (a request's object) in its typed form.
pub fn edit_metadata(object: &mut Value, edit: impl FnOnce(&mut ObjectMeta)) {
    let mut meta = metadata_of(object).unwrap();
    edit(&mut meta);
    object["metadata"] = serde_json::to_value(meta).unwrap();
}

/// The `count` recorded pod creations of a burst, e.g. `burst("web-app", 6)`.
pub fn burst(app: &str, count: usize) -> Vec<Request> {
    (1..=count).map(|index| fixture(&format!("pod-create-from-replicaset-{app}-{index}.json"))).collect()
}

/// The request with `annotations` added to the object (what a controller copies from the pod template).
pub fn with_annotations(mut request: Request, annotations: &BTreeMap<String, String>) -> Request {
    if let Some(object) = request.object.as_mut() {
        edit_metadata(object, |meta| meta.annotations.get_or_insert_with(BTreeMap::new).extend(annotations.clone()));
    }
    request
}

/// The web-app burst as the ReplicaSet creates it once tiergate has admitted the Deployment: every pod carries
/// the template annotations the Deployment's admission returned.
pub fn web_app_burst() -> Vec<Request> {
    let deployment = fixture("deployment-create-smart-scheduler-strategy.json");
    let outcome = PlacementLedger::default().assign_for(&deployment, &Snapshot::default()).unwrap();
    burst("web-app", 6).into_iter().map(|pod| with_annotations(pod, &outcome.template_annotations)).collect()
}

/// A copy of `request` under another request UID (another pod of the same burst).
pub fn another(request: &Request, uid: &str) -> Request {
    let mut copy = request.clone();
    copy.uid = uid.to_owned();
    copy
}

/// The pod the caches show once `request` was admitted with `outcome` (the API server named it `name`).
pub fn admitted_pod(request: &Request, outcome: &PlacementOutcome, name: &str) -> PodView {
    let meta = metadata_of(request.object.as_ref().unwrap()).unwrap();
    let mut labels = meta.labels.clone().unwrap_or_default();
    labels.extend(outcome.metadata_labels.clone());
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    annotations.extend(outcome.metadata_annotations.clone());
    PodView {
        namespace: request.namespace.clone().unwrap_or_default(),
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        owner_uid: meta.owner_references.as_ref().and_then(|owners| owners.first()).map(|owner| owner.uid.clone()),
        node_name: None,
        labels: labels.into(),
        annotations,
        requests: BTreeMap::new(),
    }
}

/// A synced snapshot holding `pods`.
pub fn snapshot_with(pods: Vec<PodView>) -> Snapshot {
    Snapshot { pods: pods.into_iter().map(std::sync::Arc::new).collect(), synced: true, ..Snapshot::default() }
}

/// A synced snapshot with `policy` active.
pub fn snapshot_with_policy(policy: TierPolicy) -> Snapshot {
    Snapshot { policy: Some(Arc::new(policy)), synced: true, ..Snapshot::default() }
}

/// The rule each outcome assigned.
pub fn rule_of(outcome: &PlacementOutcome) -> String {
    outcome.assignment.as_ref().map(|assignment| assignment.rule.clone()).unwrap_or_default()
}

/// Pods per rule among `outcomes`.
pub fn rule_counts<'a>(outcomes: impl IntoIterator<Item = &'a PlacementOutcome>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for outcome in outcomes {
        *counts.entry(rule_of(outcome)).or_default() += 1;
    }
    counts
}

/// `[("a", 1)]` as a map of owned strings and counts.
pub fn expected(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(rule, count)| ((*rule).to_owned(), *count)).collect()
}
