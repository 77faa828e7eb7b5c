//! The two gates agree: every recorded review, every sample workload and generated workloads go through the
//! webhook's decision (`mutate`) and through the generated ValidatingAdmissionPolicies (CEL evaluated offline).
//! No false denial: what the webhook admits, the policies admit as the webhook left it. No escape: what the
//! webhook denies or constrains (selector, affinity, queue, suspend, priority, run-time limit), the policies refuse
//! as sent, unless the request is one the gate exempts by design (a controller writing what a gated template says).
//!
//! The MutatingAdmissionPolicies run first on every CREATE too, as the API server runs them: the webhook then
//! decides exactly as on the object as sent (same verdict, same final object); with the webhook down, what the
//! webhook would deny stays refused, and what the validating policies admit after them reaches no foreign class.
#![cfg(test)]

mod gate_support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use gate_support::{CompiledGate, GateOutcome, gate_of};
use proptest::prelude::*;
use serde_json::{Value, json};
use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate, parse_review};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::labels::Labels;
use tiergate::view::Snapshot;

fn snapshot() -> Snapshot {
    build_static_snapshot(
        load_policy(None).unwrap(),
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    )
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn shared(dir: &str) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|root| root.join("shared").join(dir))
        .find(|dir| dir.is_dir())
        .unwrap_or_else(|| panic!("no shared/{dir} above {}", manifest.display()))
}

fn files_in(dir: PathBuf) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| (path.display().to_string(), std::fs::read_to_string(&path).unwrap()))
        .collect();
    files.sort();
    files
}

/// A tenant (`alice`, a person) creating `object` in its namespace, as the API server sends it.
fn tenant_request(object: &Value) -> Value {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    json!({"uid": "u1", "kind": {"group": group, "version": version, "kind": object["kind"]},
        "resource": {"group": group, "version": version, "resource": "x"},
        "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
        "operation": "CREATE", "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object, "oldObject": null, "dryRun": false})
}

/// How one request came out of the two gates.
#[derive(Debug, Default)]
struct Tally {
    reviews: usize,
    webhook_denied: usize,
    webhook_constrained: usize,
    gate_denied_as_sent: usize,
    gate_admitted_as_webhook_left_it: usize,
    mutated_by_policies: usize,
    webhook_down_admitted_constrained: usize,
    exempt_controllers: usize,
    cpu_only_out_of_scope: usize,
    unmatched_cpu_or_untiered: usize,
}

/// Whether the webhook's patch constrains the object: the queue label, suspend, the priority or run-time label, or the GPU
/// nodes its templates can land on (a template of the sent object reaches a node of the sample cluster outside the
/// tier's classes, and the same template after the patch does not).
fn constrains(snapshot: &Snapshot, request: &Value, patch: &json_patch::Patch) -> bool {
    let labels = patch.0.iter().any(|operation| {
        let path = operation.path().to_string();
        ["queue-name", "/suspend", "priority-class", "max-exec-time-seconds"].iter().any(|field| path.contains(field))
    });
    let mut after = request["object"].clone();
    json_patch::patch(&mut after, patch).unwrap();
    labels
        || (reaches_foreign_node(snapshot, request, &request["object"])
            && !reaches_foreign_node(snapshot, request, &after))
}

/// Whether a pod template of `object` can be scheduled (nodeSelector and required node affinity) on a GPU node of the
/// sample cluster whose class is outside the namespace's tier.
fn reaches_foreign_node(snapshot: &Snapshot, request: &Value, object: &Value) -> bool {
    let policy = snapshot.policy.as_ref().unwrap();
    let Some(tier) = policy.spec.tier_of(&namespace_labels(snapshot, request)) else { return false };
    let group = request["kind"]["group"].as_str().unwrap_or_default();
    let kind = request["kind"]["kind"].as_str().unwrap_or_default();
    let Some(layout) = tiergate_workloads::template_layout(group, kind) else { return false };
    let foreign_nodes: Vec<&Labels> = snapshot
        .nodes
        .values()
        .filter(|node| {
            policy.spec.gpu_classes.iter().any(|class| class.is_selected_by(&node.labels))
                && !tier
                    .gpu_class_names()
                    .filter_map(|name| policy.spec.gpu_class(name))
                    .any(|class| class.is_selected_by(&node.labels))
        })
        .map(|node| &node.labels)
        .collect();
    layout.pod_specs(object).into_iter().any(|spec| foreign_nodes.iter().any(|labels| schedulable(spec, labels)))
}

/// Whether `spec`'s nodeSelector and required node-affinity terms admit a node with `labels`.
fn schedulable(spec: &Value, labels: &Labels) -> bool {
    let selector =
        spec["nodeSelector"].as_object().into_iter().flatten().all(|(key, value)| labels.get(key) == value.as_str());
    let terms = spec.pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms");
    let affinity = match terms.and_then(Value::as_array) {
        None => true,
        Some(terms) => terms.iter().any(|term| {
            term["matchExpressions"].as_array().into_iter().flatten().all(|expression| {
                let value = labels.get(expression["key"].as_str().unwrap_or_default());
                let values: Vec<&str> =
                    expression["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                match expression["operator"].as_str().unwrap_or_default() {
                    "In" => value.is_some_and(|value| values.contains(&value)),
                    "NotIn" => value.is_none_or(|value| !values.contains(&value)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
        }),
    };
    selector && affinity
}

fn namespace_labels(snapshot: &Snapshot, request: &Value) -> BTreeMap<String, String> {
    let namespace = request["namespace"].as_str().unwrap_or_default();
    snapshot.namespaces.get(namespace).map(|view| view.labels.to_btree_map()).unwrap_or_default()
}

/// Runs one request (as JSON) through both gates and checks they agree.
fn check_agreement(name: &str, request: &Value, snapshot: &Snapshot, gate: &CompiledGate, tally: &mut Tally) {
    tally.reviews += 1;
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let parsed =
        parse_review(&serde_json::to_vec(&review).unwrap()).unwrap_or_else(|(_, error)| panic!("{name}: {error}"));
    let decision = mutate(&parsed, snapshot, &AdmissionInputs::default());
    let labels = namespace_labels(snapshot, request);
    let as_sent = gate.run(request, &labels);
    let exempt = matches!(&as_sent, GateOutcome::NotMatched { condition } if condition == gate_support::NOT_TRUSTED);
    tally.exempt_controllers += usize::from(exempt);
    let webhook_denied = matches!(decision.verdict, Verdict::Deny { .. });
    let webhook_constrained =
        matches!(decision.verdict, Verdict::Allow) && constrains(snapshot, request, &decision.patch);
    tally.webhook_denied += usize::from(webhook_denied);
    tally.webhook_constrained += usize::from(webhook_constrained);
    if matches!(as_sent, GateOutcome::NotMatched { .. } | GateOutcome::NotBound) && !exempt {
        tally.unmatched_cpu_or_untiered += 1;
    }
    // The gate judges GPU-asking objects only (the webhook also clamps a CPU object's priority label): an object the
    // webhook neither confined (no selector, toleration or affinity written) nor denied for a GPU reason is out of
    // its scope when the gate's GPU condition does not match it.
    let gpu_in_webhook = decision.patch.0.iter().any(|operation| {
        let path = operation.path().to_string();
        ["nodeSelector", "tolerations", "affinity"].iter().any(|field| path.contains(field))
    }) || matches!(decision.verdict, Verdict::Deny { reason, .. } if reason != "priority_above_ceiling");
    let cpu_only = !gpu_in_webhook
        && matches!(&as_sent, GateOutcome::NotMatched { condition } if condition == gate_support::NO_GPU);
    tally.cpu_only_out_of_scope += usize::from(cpu_only && (webhook_denied || webhook_constrained));
    if (webhook_denied || webhook_constrained) && !exempt && !cpu_only {
        assert!(
            as_sent.is_denied(),
            "{name}: escape: the webhook {} it ({:?}, patch {:?}), the in-server gate gives {as_sent:?}",
            if webhook_denied { "denies" } else { "constrains" },
            decision.verdict,
            decision.patch
        );
        tally.gate_denied_as_sent += 1;
    }
    if request["operation"] == "CREATE" {
        check_mutating_agreement(
            name,
            request,
            snapshot,
            gate,
            &decision,
            webhook_denied && !exempt && !cpu_only,
            tally,
        );
    }
    if matches!(decision.verdict, Verdict::Allow | Verdict::Skip { .. }) && !request["object"].is_null() {
        let mut object = request["object"].clone();
        json_patch::patch(&mut object, &decision.patch).unwrap_or_else(|error| panic!("{name}: {error}"));
        let mut after = request.clone();
        after["object"] = object;
        let outcome = gate.run(&after, &labels);
        assert!(!outcome.is_denied(), "{name}: false denial of what the webhook admitted: {outcome:?}");
        tally.gate_admitted_as_webhook_left_it += usize::from(outcome == GateOutcome::Admitted);
    }
}

/// The MutatingAdmissionPolicies on one CREATE: the webhook after them decides as on the object as sent, and with
/// the webhook down they neither admit what it denies nor leave an admitted object reaching a foreign class.
fn check_mutating_agreement(
    name: &str,
    request: &Value,
    snapshot: &Snapshot,
    gate: &CompiledGate,
    decision: &tiergate::admission::Decision,
    must_stay_refused: bool,
    tally: &mut Tally,
) {
    let labels = namespace_labels(snapshot, request);
    let Some(mutated) = gate.run_mutating(request, &labels) else { return };
    tally.mutated_by_policies += 1;
    let mut after_policies = request.clone();
    after_policies["object"] = mutated.clone();
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": after_policies});
    let parsed =
        parse_review(&serde_json::to_vec(&review).unwrap()).unwrap_or_else(|(_, error)| panic!("{name}: {error}"));
    let second = mutate(&parsed, snapshot, &AdmissionInputs::default());
    let same_verdict = std::mem::discriminant(&decision.verdict) == std::mem::discriminant(&second.verdict);
    assert!(
        same_verdict,
        "{name}: the webhook decides {:?} as sent but {:?} after the policies",
        decision.verdict, second.verdict
    );
    if decision.verdict == Verdict::Allow {
        let mut as_sent = request["object"].clone();
        json_patch::patch(&mut as_sent, &decision.patch).unwrap();
        let mut after = mutated.clone();
        json_patch::patch(&mut after, &second.patch).unwrap_or_else(|error| panic!("{name}: {error}"));
        pretty_assertions::assert_eq!(as_sent, after, "{name}: the webhook's result differs after the policies");
    }
    let down = gate.run(&after_policies, &labels);
    if must_stay_refused {
        assert!(
            down.is_denied(),
            "{name}: escape with the webhook down: the webhook denies it, the policies give {down:?}"
        );
    }
    if down == GateOutcome::Admitted {
        assert!(
            !reaches_foreign_node(snapshot, request, &mutated),
            "{name}: escape with the webhook down: admitted after the policies, still reaching a foreign class"
        );
        tally.webhook_down_admitted_constrained += 1;
    }
}

#[test]
fn generated_expressions_stay_inside_the_api_servers_limits() {
    let gate = gate_of(snapshot().policy.as_ref().unwrap());
    let mut expressions: Vec<&String> = Vec::new();
    for policy in &gate.policies {
        let spec = policy.spec.as_ref().unwrap();
        expressions.extend(spec.match_conditions.iter().flatten().map(|condition| &condition.expression));
        expressions.extend(spec.validations.iter().flatten().map(|validation| &validation.expression));
    }
    for policy in &gate.mutating_policies {
        let spec = policy.spec.as_ref().unwrap();
        expressions.extend(spec.match_conditions.iter().flatten().map(|condition| &condition.expression));
        expressions.extend(spec.variables.iter().flatten().map(|variable| &variable.expression));
        let patches = spec.mutations.iter().flatten().filter_map(|mutation| mutation.json_patch.as_ref());
        expressions.extend(patches.filter_map(|patch| patch.expression.as_ref()));
    }
    for expression in expressions {
        // cel-go's defaults in kube-apiserver: 100,000 code points per expression, 250 levels of recursion.
        assert!(
            expression.chars().count() < 100_000,
            "{} code points: {}",
            expression.chars().count(),
            &expression[..200]
        );
        assert!(gate_support::nesting_depth(expression) < 100, "nesting {}", gate_support::nesting_depth(expression));
    }
}

#[test]
fn every_recorded_review_and_sample_workload_gets_no_false_denial_and_no_escape() {
    gate_support::with_big_stack(every_recorded_review_and_sample_workload);
}

fn every_recorded_review_and_sample_workload() {
    let snapshot = snapshot();
    let policy = snapshot.policy.clone().unwrap();
    let gate = CompiledGate::new(gate_of(&policy));
    let mut tally = Tally::default();
    for dir in ["fixtures/admission", "fixtures/kinds/admission"] {
        for (name, text) in files_in(shared(dir)) {
            let review: Value = serde_json::from_str(&text).unwrap();
            check_agreement(&name, &review["request"], &snapshot, &gate, &mut tally);
        }
    }
    let mut workloads = files_in(repo().join("samples/workloads"));
    workloads.extend(files_in(shared("fixtures/workloads")));
    for (name, text) in workloads {
        let object: Value = serde_saphyr::from_str(&text).unwrap_or_else(|error| panic!("{name}: {error}"));
        check_agreement(&name, &tenant_request(&object), &snapshot, &gate, &mut tally);
    }
    println!("{tally:?}");
    assert!(tally.reviews >= 60, "{tally:?}");
    assert!(tally.gate_denied_as_sent >= 20, "too few escapes tried to prove anything: {tally:?}");
    assert!(tally.gate_admitted_as_webhook_left_it >= 20, "too few admissions compared: {tally:?}");
    assert!(tally.mutated_by_policies >= 20, "too few objects edited by the mutating policies: {tally:?}");
    assert!(tally.webhook_down_admitted_constrained >= 10, "too few admitted with the webhook down: {tally:?}");
}

/// A tenant's GPU-ish object of a common kind: every field the gate reads, drawn at random.
fn generated_workload() -> impl Strategy<Value = Value> {
    let kinds = prop::sample::select(vec!["Job", "Pod", "Deployment", "JobSet", "PyTorchJob", "CronJob"]);
    let namespaces = prop::sample::select(vec!["ml-team-dev", "ml-team-staging", "ml-research"]);
    let resources = prop::sample::select(vec![
        None,
        Some(("nvidia.com/gpu", "1")),
        Some(("nvidia.com/gpu", "0")),
        Some(("nvidia.com/mig-1g.5gb", "1")),
        Some(("amd.com/gpu", "1")),
        Some(("cpu", "2")),
    ]);
    let classes = prop::sample::select(vec![None, Some("l4"), Some("a100"), Some("h100"), Some("t4")]);
    let queues =
        prop::sample::select(vec![None, Some("tiergate-bronze"), Some("tiergate-gold"), Some(""), Some("mine")]);
    let priorities =
        prop::sample::select(vec![None, Some("gpu-ultra"), Some("gpu-high"), Some("gpu-default"), Some("vip")]);
    let run_times = prop::sample::select(vec![None, Some("600"), Some("14400"), Some("86400"), Some("abc")]);
    let labelled = (queues, priorities, run_times);
    (kinds, namespaces, resources, classes, any::<bool>(), labelled, any::<Option<bool>>()).prop_map(
        |(kind, namespace, resource, class, by_affinity, (queue, priority, run_time), suspend)| {
            let mut container = json!({"name": "c", "image": "busybox"});
            if let Some((name, quantity)) = resource {
                container["resources"] = json!({"limits": {name: quantity}});
            }
            let mut pod = json!({"containers": [container]});
            match (class, by_affinity) {
                (Some(class), false) => pod["nodeSelector"] = json!({"gpu.nvidia.com/class": class}),
                (Some(class), true) => {
                    pod["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "gpu.nvidia.com/class", "operator": "In", "values": [class]}]}]}}})
                }
                (None, _) => {}
            }
            let template = json!({"spec": pod});
            let mut labels = serde_json::Map::new();
            if let Some(queue) = queue {
                labels.insert("kueue.x-k8s.io/queue-name".into(), json!(queue));
            }
            if let Some(priority) = priority {
                labels.insert("kueue.x-k8s.io/priority-class".into(), json!(priority));
            }
            if let Some(run_time) = run_time {
                labels.insert("kueue.x-k8s.io/max-exec-time-seconds".into(), json!(run_time));
            }
            let metadata = json!({"name": "w", "namespace": namespace, "labels": labels});
            let (api_version, spec) = match kind {
                "Job" => ("batch/v1", json!({"template": template})),
                "Pod" => ("v1", pod.clone()),
                "Deployment" => ("apps/v1", json!({"selector": {}, "template": template})),
                "JobSet" => (
                    "jobset.x-k8s.io/v1alpha2",
                    json!({"replicatedJobs": [
                    {"name": "a", "template": {"spec": {"template": template}}}]}),
                ),
                "PyTorchJob" => ("kubeflow.org/v1", json!({"pytorchReplicaSpecs": {"Worker": {"template": template}}})),
                _ => (
                    "batch/v1",
                    json!({"schedule": "* * * * *", "jobTemplate": {
                    "metadata": {"labels": labels}, "spec": {"template": template}}}),
                ),
            };
            let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec});
            if let Some(suspend) = suspend {
                match kind {
                    "Job" | "JobSet" => object["spec"]["suspend"] = json!(suspend),
                    "PyTorchJob" => object["spec"]["runPolicy"] = json!({"suspend": suspend}),
                    "CronJob" => object["spec"]["jobTemplate"]["spec"]["suspend"] = json!(suspend),
                    _ => {}
                }
            }
            object
        },
    )
}

#[test]
fn generated_workloads_get_no_false_denial_and_no_escape() {
    gate_support::with_big_stack(|| {
        let snapshot = snapshot();
        let gate = CompiledGate::new(gate_of(snapshot.policy.as_ref().unwrap()));
        let tally = std::cell::RefCell::new(Tally::default());
        let mut runner =
            proptest::test_runner::TestRunner::new(ProptestConfig { cases: 512, ..ProptestConfig::default() });
        runner
            .run(&generated_workload(), |object| {
                check_agreement(
                    &object.to_string(),
                    &tenant_request(&object),
                    &snapshot,
                    &gate,
                    &mut tally.borrow_mut(),
                );
                Ok(())
            })
            .unwrap_or_else(|error| panic!("{error}"));
        let tally = tally.into_inner();
        println!("{tally:?}");
        assert!(tally.gate_denied_as_sent >= 100, "{tally:?}");
        assert!(tally.gate_admitted_as_webhook_left_it >= 50, "{tally:?}");
    });
}

/// A DRA claim or claim template of a tenant in one of `samples/dra`'s namespaces: each request an `exactly` or a
/// `firstAvailable` list, naming the tier's class, the other tier's, the driver's generic class or an unknown one,
/// with or without `adminAccess` and `allocationMode: All`.
fn generated_claim() -> impl Strategy<Value = Value> {
    let class = prop::sample::select(vec!["l4.tiergate.io", "h100.tiergate.io", "gpu.nvidia.com", "example.com-nic"]);
    let mode = prop_oneof![4 => Just("ExactCount"), 1 => Just("All")];
    let admin = prop_oneof![4 => Just(false), 1 => Just(true)];
    let exactly = (class.clone(), mode.clone(), admin).prop_map(|(class, mode, admin)| {
        let mut request = json!({"deviceClassName": class, "allocationMode": mode});
        if mode == "ExactCount" {
            request["count"] = json!(1);
        }
        if admin {
            request["adminAccess"] = json!(true);
        }
        json!({"name": "r", "exactly": request})
    });
    let alternatives = prop::collection::vec((class, mode), 1..3).prop_map(|alternatives| {
        let list: Vec<Value> = alternatives
            .iter()
            .enumerate()
            .map(|(index, (class, mode))| json!({"name": format!("a{index}"), "deviceClassName": class, "allocationMode": mode}))
            .collect();
        json!({"name": "r", "firstAvailable": list})
    });
    let request = prop_oneof![3 => exactly, 1 => alternatives];
    (prop::collection::vec(request, 1..=2), any::<bool>(), prop::sample::select(vec!["team-dev", "research"])).prop_map(
        |(requests, is_template, namespace)| {
            let spec = json!({"devices": {"requests": requests}});
            if is_template {
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "t", "namespace": namespace}, "spec": {"spec": spec}})
            } else {
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": "c", "namespace": namespace}, "spec": spec})
            }
        },
    )
}

/// Claims: what the webhook refuses, the gate refuses as sent (no escape); what the webhook admits, the gate admits
/// as the webhook left it (no false denial); a claim the webhook retargets is refused as sent (the webhook must be
/// up to retarget it).
#[test]
fn generated_claims_get_the_same_verdict_from_both_gates() {
    gate_support::with_big_stack(|| {
        let read = |file: &str| std::fs::read_to_string(repo().join("samples/dra").join(file)).unwrap();
        let policy = tiergate::inputs::parse_policy(&read("policy.yaml"), "samples/dra/policy.yaml").unwrap();
        let view = parse_cluster_view(&read("cluster.yaml"), "samples/dra/cluster.yaml").unwrap();
        let snapshot = build_static_snapshot(policy.clone(), view, Some("tiergate-system".into()));
        let gate = CompiledGate::new(gate_of(&policy));
        let counts = std::cell::RefCell::new([0_usize; 3]);
        let mut runner =
            proptest::test_runner::TestRunner::new(ProptestConfig { cases: 256, ..ProptestConfig::default() });
        runner
            .run(&generated_claim(), |object| {
                let request = tenant_request(&object);
                let labels = namespace_labels(&snapshot, &request);
                let review =
                    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
                let parsed = parse_review(review.to_string().as_bytes()).unwrap_or_else(|(_, error)| panic!("{error}"));
                let decision = mutate(&parsed, &snapshot, &AdmissionInputs::default());
                let as_sent = gate.run(&request, &labels);
                match &decision.verdict {
                    Verdict::Deny { message, .. } => {
                        prop_assert!(matches!(as_sent, GateOutcome::Denied(_)), "escape: {object} ({message})");
                        counts.borrow_mut()[0] += 1;
                    }
                    Verdict::Allow if decision.patch.0.is_empty() => {
                        prop_assert_eq!(&as_sent, &GateOutcome::Admitted, "false denial: {}", object);
                        counts.borrow_mut()[1] += 1;
                    }
                    Verdict::Allow => {
                        prop_assert!(matches!(as_sent, GateOutcome::Denied(_)), "retarget not needed: {object}");
                        let mut left = object.clone();
                        json_patch::patch(&mut left, &decision.patch).unwrap();
                        let mut after = request.clone();
                        after["object"] = left;
                        prop_assert_eq!(gate.run(&after, &labels), GateOutcome::Admitted, "false denial: {}", object);
                        counts.borrow_mut()[2] += 1;
                    }
                    other => prop_assert!(false, "unexpected verdict {other:?} for {object}"),
                }
                Ok(())
            })
            .unwrap_or_else(|error| panic!("{error}"));
        let [denied, admitted, retargeted] = counts.into_inner();
        println!("claims: {denied} denied by both, {admitted} admitted by both, {retargeted} retargeted");
        assert!(denied >= 50 && admitted >= 5 && retargeted >= 5, "{denied} {admitted} {retargeted}");
    });
}

/// Issue 49: the two ways past the gate with the webhook down, through both gates. A Job written as a default
/// operator's account in a namespace a tenant made (no ClusterRoleBinding binds it), asking a priority above
/// bronze's ceiling; and a CPU pod bound by `nodeName` to another tier's GPU node. The webhook constrains or denies
/// each, so the gate must refuse each as sent; the same Job from the installed operator is exempt in both.
#[test]
fn the_attacks_of_issue_49_get_the_same_verdict_from_both_gates() {
    gate_support::with_big_stack(|| {
        let account = "system:serviceaccount:jobset-system:jobset-controller-manager";
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ultra", "namespace": "ml-team-dev",
                "labels": {"kueue.x-k8s.io/queue-name": "tiergate-bronze", "kueue.x-k8s.io/priority-class": "gpu-ultra"}},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                "nodeSelector": {"gpu.nvidia.com/class": "l4"},
                "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
        let mut forged = tenant_request(&job);
        forged["userInfo"] = json!({"username": account, "groups": ["system:serviceaccounts", "system:authenticated"]});
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneak", "namespace": "ml-team-dev"},
            "spec": {"nodeName": "gpu-h100-node-1", "containers": [{"name": "main", "image": "cuda",
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}});
        for (made_by_tenant, expect_exempt) in [(true, false), (false, true)] {
            let mut view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
            view.namespaces.push(std::sync::Arc::new(tiergate::view::NamespaceView {
                name: "jobset-system".to_owned(),
                created: Some(100),
                ..tiergate::view::NamespaceView::default()
            }));
            if !made_by_tenant {
                view.bindings.push(tiergate::trust::BindingView {
                    name: "jobset-manager-rolebinding".to_owned(),
                    created: Some(100),
                    service_accounts: vec![account.to_owned()],
                });
            }
            let snapshot = build_static_snapshot(load_policy(None).unwrap(), view, Some("tiergate-system".into()));
            let gate = CompiledGate::new(gate_of(snapshot.policy.as_ref().unwrap()));
            let mut tally = Tally::default();
            check_agreement("forged operator account", &forged, &snapshot, &gate, &mut tally);
            check_agreement("pod naming a GPU node", &tenant_request(&pod), &snapshot, &gate, &mut tally);
            assert_eq!(tally.exempt_controllers, usize::from(expect_exempt), "{tally:?}");
            let refused = if expect_exempt { 1 } else { 2 };
            assert_eq!(tally.gate_denied_as_sent, refused, "each attack refused as sent by the gate: {tally:?}");
        }
    });
}
