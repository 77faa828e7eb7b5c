//! The attacker every module of the suite plays: an AdmissionReview as the API server sends it for a tenant
//! (user `mallory` in the given groups) creating or updating an object in its own namespace; no I/O.
#![cfg(test)]

use serde_json::{Value, json};
use tiergate::admission::{Decision, Request, Verdict};

use std::collections::BTreeMap;

use tiergate::policy::TierPolicy;
use tiergate::view::ClusterView;

use crate::gate_support::{CompiledGate, GateOutcome, gate_of, with_big_stack};
use tiergate::admission::parse_review;

/// The review of `operation` on `object` (and `old` for UPDATE), sent for user `mallory` in `groups`.
pub fn tenant_review(operation: &str, object: &Value, old: Option<&Value>, dry_run: bool, groups: &[&str]) -> Request {
    parse_tenant_body(tenant_review_body(operation, object, old, dry_run, groups).as_bytes())
}

/// The body of `tenant_review`, as compact JSON (request `uid` `u1`), for attacks on the bytes themselves.
pub fn tenant_review_body(
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    dry_run: bool,
    groups: &[&str],
) -> String {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": group, "version": version, "kind": object["kind"]},
        "resource": {"group": group, "version": version, "resource": "x"},
        "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
        "operation": operation, "userInfo": {"username": "mallory", "groups": groups},
        "object": object, "oldObject": old, "dryRun": dry_run}});
    body.to_string()
}

/// A review body read as the webhook reads it.
pub fn parse_tenant_body(body: &[u8]) -> Request {
    parse_review(body).unwrap_or_else(|(_, error)| panic!("{error}"))
}

/// The denial's message, failing the test on any other verdict.
pub fn denied(decision: &Decision, reason: &str) -> String {
    match &decision.verdict {
        Verdict::Deny { reason: actual, message } => {
            assert_eq!(*actual, reason, "{message}");
            message.clone()
        }
        other => panic!("expected deny ({reason}), got {other:?}; reasons {:?}", decision.reasons),
    }
}

/// The in-server gate's denial messages, failing the test on any other outcome.
pub fn denial(outcome: &GateOutcome) -> String {
    match outcome {
        GateOutcome::Denied(messages) => messages.join("\n"),
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// What the in-server gate of `policy` does with `request` (the AdmissionRequest as JSON) in the cluster `view` (the
/// webhook down: the object as sent).
pub fn gate_in(policy: TierPolicy, view: ClusterView, request: Value) -> GateOutcome {
    with_big_stack(move || {
        let namespace = request["namespace"].as_str().unwrap_or_default().to_owned();
        let labels: BTreeMap<String, String> = view
            .namespaces
            .iter()
            .find(|ns| ns.name == namespace)
            .map(|ns| ns.labels.to_btree_map())
            .unwrap_or_default();
        CompiledGate::new(gate_of(&policy)).run(&request, &labels)
    })
}
