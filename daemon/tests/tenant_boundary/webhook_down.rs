//! The webhook does not answer (`failurePolicy: Ignore`, the pod down, saturated or cut off): the in-server gate's
//! ValidatingAdmissionPolicies, evaluated offline as kube-apiserver runs them, still refuse every GPU attack of
//! issue 27 with a message naming the tier, the rule and the fix; CPU-only workloads are never matched.
//!
//! Every attacker is a tenant of tier bronze (namespace `ml-team-dev`, GPU class l4, queue `tiergate-bronze`,
//! priority ceiling gpu-high in the sample policy).
#![cfg(test)]

use serde_json::{Value, json};
use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};

use crate::gate_support::GateOutcome;
use crate::tenant::{denial, gate_in, tenant_review, tenant_review_body};

const BRONZE: &str = "ml-team-dev";
const CLASS: &str = "gpu.nvidia.com/class";
/// Kueue's run-time label (bronze's ceiling is 4h in the sample policy).
const RUN_TIME: &str = "kueue.x-k8s.io/max-exec-time-seconds";

/// The request as the API server would send it for user `user` (a tenant by default).
fn request_of(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let body: Value = serde_json::from_str(&tenant_review_body(operation, object, old, false, &[])).unwrap();
    body["request"].clone()
}

/// What the gate does with `request` (the webhook down: the object as sent).
fn gate(request: Value) -> GateOutcome {
    gate_in(load_policy(None).unwrap(), parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), request)
}

fn gpu_spec(extra: Value) -> Value {
    let mut spec = json!({"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    for (key, value) in extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    spec
}

fn job(labels: Value, spec: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": BRONZE, "labels": labels},
        "spec": {"template": {"spec": spec}}})
}

fn h100_selector() -> Value {
    json!({"nodeSelector": {CLASS: "h100"}})
}

#[test]
fn bronze_gpu_job_selecting_h100_is_denied_with_the_tier_and_the_fix() {
    let message = denial(&gate(request_of("CREATE", &job(json!({}), gpu_spec(h100_selector())), None)));
    assert!(
        message.contains(
            "with binding 'tiergate-gate-bronze' denied request: GPU pods must select a GPU class of this tier"
        ),
        "{message}"
    );
    assert!(message.contains("is it running?"), "{message}");
    assert!(
        message.contains("must carry the label kueue.x-k8s.io/queue-name naming this tier's LocalQueue"),
        "{message}"
    );
}

#[test]
fn bronze_gpu_job_without_any_selector_is_denied() {
    let message = denial(&gate(request_of("CREATE", &job(json!({}), gpu_spec(json!({}))), None)));
    assert!(message.contains("must select a GPU class of this tier"), "{message}");
}

#[test]
fn bronze_gpu_job_with_h100_required_node_affinity_is_denied() {
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": CLASS, "operator": "In", "values": ["h100"]}]}]}}}});
    let message = denial(&gate(request_of("CREATE", &job(json!({}), gpu_spec(affinity)), None)));
    assert!(message.contains("no other GPU class"), "{message}");
}

#[test]
fn bronze_gpu_job_naming_the_top_priority_is_denied_even_when_queued_and_confined() {
    let labels = json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze", "kueue.x-k8s.io/priority-class": "gpu-ultra",
        RUN_TIME: "3600"});
    let mut object = job(labels, gpu_spec(json!({"nodeSelector": {CLASS: "l4"}})));
    object["spec"]["suspend"] = json!(true);
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert_eq!(
        message,
        "ValidatingAdmissionPolicy 'tiergate-gate-default' with binding 'tiergate-gate-bronze' denied request: the \
         kueue.x-k8s.io/priority-class label of a GPU workload (and of a CronJob's job template) may name only a \
         priority this tier may use (TierGateParameters spec.tier.allowedPriorities); remove it or name one of \
         those; the tiergate webhook normally adds this — is it running?"
    );
}

#[test]
fn bronze_gpu_pod_selecting_h100_is_denied() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE},
        "spec": gpu_spec(h100_selector())});
    let message = denial(&gate(request_of("CREATE", &pod, None)));
    assert!(message.contains("GPU pods must select a GPU class of this tier"), "{message}");
}

#[test]
fn bronze_gpu_deployment_selecting_h100_is_denied() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": BRONZE},
        "spec": {"selector": {}, "template": {"spec": gpu_spec(h100_selector())}}});
    let message = denial(&gate(request_of("CREATE", &deployment, None)));
    assert!(message.contains("GPU pods must select a GPU class of this tier"), "{message}");
}

#[test]
fn cpu_only_pods_and_jobs_are_never_matched() {
    let cpu = json!({"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE}, "spec": cpu});
    for object in [pod, job(json!({}), cpu.clone())] {
        let outcome = gate(request_of("CREATE", &object, None));
        assert!(
            matches!(&outcome, GateOutcome::NotMatched { condition } if condition == crate::gate_support::NO_GPU),
            "{outcome:?}"
        );
    }
}

#[test]
fn a_bronze_gpu_job_as_the_webhook_leaves_it_passes() {
    let object = job(json!({}), gpu_spec(json!({})));
    let snapshot = build_static_snapshot(
        load_policy(None).unwrap(),
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    );
    let decision = mutate(&tenant_review("CREATE", &object, None, false, &[]), &snapshot, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow);
    let mut mutated = object.clone();
    json_patch::patch(&mut mutated, &decision.patch).unwrap();
    assert_eq!(gate(request_of("CREATE", &mutated, None)), GateOutcome::Admitted);
}

#[test]
fn a_job_forging_a_jobset_owner_still_needs_the_queue() {
    let mut object = job(json!({}), gpu_spec(json!({"nodeSelector": {CLASS: "l4"}})));
    object["metadata"]["ownerReferences"] = json!([{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "name": "js", "uid": "forged", "controller": true}]);
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert!(
        message.contains("must carry the label kueue.x-k8s.io/queue-name naming this tier's LocalQueue"),
        "{message}"
    );
}

#[test]
fn another_tiers_queue_or_an_unsuspended_create_is_denied() {
    let selector = json!({"nodeSelector": {CLASS: "l4"}});
    let gold = job(json!({"kueue.x-k8s.io/queue-name": "tiergate-gold"}), gpu_spec(selector.clone()));
    assert!(denial(&gate(request_of("CREATE", &gold, None))).contains("no other tier's"));
    let running = job(json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze"}), gpu_spec(selector));
    assert!(denial(&gate(request_of("CREATE", &running, None))).contains("suspend: true"));
}

#[test]
fn an_update_dropping_the_queue_label_is_denied() {
    let selector = json!({"nodeSelector": {CLASS: "l4"}});
    let mut old = job(json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze"}), gpu_spec(selector.clone()));
    old["spec"]["suspend"] = json!(true);
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({});
    new["spec"]["suspend"] = json!(false);
    let message = denial(&gate(request_of("UPDATE", &new, Some(&old))));
    assert!(
        message.contains("must carry the label kueue.x-k8s.io/queue-name naming this tier's LocalQueue"),
        "{message}"
    );
}

#[test]
fn the_tenants_own_service_account_is_not_exempt_as_a_controller() {
    let mut request = request_of("CREATE", &job(json!({}), gpu_spec(h100_selector())), None);
    request["userInfo"]["username"] = json!(format!("system:serviceaccount:{BRONZE}:builder"));
    assert!(gate(request).is_denied());
}

#[test]
fn a_controller_creating_pods_from_a_gated_template_passes() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE},
        "spec": gpu_spec(json!({"nodeSelector": {CLASS: "l4"}}))});
    let mut request = request_of("CREATE", &pod, None);
    request["userInfo"]["username"] = json!("system:serviceaccount:kube-system:job-controller");
    assert_eq!(gate(request), GateOutcome::Admitted);
}

#[test]
fn a_pod_written_by_any_controller_is_still_held_to_the_tier() {
    // Issue 40: a tenant's ReplicaSet, ReplicationController or DaemonSet (kinds the gate does not list) makes
    // their controllers write the tenant's pod template; the pod is gated whoever writes it.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": BRONZE},
        "spec": gpu_spec(h100_selector())});
    for writer in [
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:replication-controller",
        "system:serviceaccount:kube-system:daemon-set-controller",
        "system:serviceaccount:kube-system:job-controller",
        "system:kube-controller-manager",
        "system:serviceaccount:kueue-system:kueue-controller-manager",
    ] {
        let mut request = request_of("CREATE", &pod, None);
        request["userInfo"]["username"] = json!(writer);
        let message = denial(&gate(request));
        assert!(message.contains("GPU pods must select a GPU class of this tier"), "{writer}: {message}");
    }
}

#[test]
fn a_service_account_of_the_tenants_other_namespace_is_not_a_trusted_controller() {
    // Issue 40: a tenant owning two namespaces binds a service account of one in the other.
    for object in [job(json!({}), gpu_spec(h100_selector())), {
        let mut cron = cron_job(json!({}));
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["nodeSelector"] = json!({CLASS: "h100"});
        cron
    }] {
        let mut request = request_of("CREATE", &object, None);
        request["userInfo"]["username"] = json!("system:serviceaccount:ml-research:deployer");
        let message = denial(&gate(request));
        assert!(message.contains("no other GPU class"), "{message}");
    }
}

#[test]
fn a_trusted_controller_writing_a_jobs_child_kind_is_left_alone_but_not_its_pods() {
    let mut request = request_of("CREATE", &job(json!({}), gpu_spec(json!({}))), None);
    request["userInfo"]["username"] = json!("system:serviceaccount:kube-system:cronjob-controller");
    assert_eq!(gate(request), GateOutcome::NotMatched { condition: crate::gate_support::NOT_TRUSTED.to_owned() });
}

#[test]
fn a_queued_job_whose_pods_name_a_priority_class_needs_the_priority_label() {
    // Issue 40: Kueue takes a pod priorityClassName as the workload priority when no label names one.
    let labels = json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze", RUN_TIME: "3600"});
    let mut object = job(labels, gpu_spec(json!({"nodeSelector": {CLASS: "l4"}, "priorityClassName": "top"})));
    object["spec"]["suspend"] = json!(true);
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert!(message.contains("name a priorityClassName, which Kueue would take as the workload priority"), "{message}");
    assert!(message.contains("set the kueue.x-k8s.io/priority-class label where Kueue reads it"), "{message}");
    object["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = json!("gpu-high");
    assert_eq!(gate(request_of("CREATE", &object, None)), GateOutcome::Admitted);
}

#[test]
fn kube_system_is_never_bound() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "kube-system"},
        "spec": gpu_spec(h100_selector())});
    assert_eq!(gate(request_of("CREATE", &pod, None)), GateOutcome::NotBound);
}

/// A bronze GPU CronJob whose job template carries `template_labels`.
fn cron_job(template_labels: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": BRONZE},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {
            "metadata": {"labels": template_labels},
            "spec": {"template": {"spec": gpu_spec(json!({}))}}}}})
}

#[test]
fn a_cron_jobs_job_template_naming_the_top_priority_is_denied_then_clamped_by_the_webhook() {
    // The CronJob controller creates its Jobs, and the gate exempts controllers: the job template's label is the
    // Jobs' priority, so the gate judges it on the CronJob.
    let object = cron_job(json!({"kueue.x-k8s.io/priority-class": "gpu-ultra"}));
    let message = denial(&gate(request_of("CREATE", &object, None)));
    assert!(
        message.contains("priority-class label of a GPU workload (and of a CronJob's job template) may name only a"),
        "{message}"
    );
    // The webhook clamps it to bronze's ceiling, and the gate then passes what it stores.
    let snapshot = build_static_snapshot(
        load_policy(None).unwrap(),
        parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
        Some("tiergate-system".into()),
    );
    let decision = mutate(&tenant_review("CREATE", &object, None, false, &[]), &snapshot, &AdmissionInputs::default());
    assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
    let mut mutated = object.clone();
    json_patch::patch(&mut mutated, &decision.patch).unwrap();
    assert_eq!(mutated["spec"]["jobTemplate"]["metadata"]["labels"]["kueue.x-k8s.io/priority-class"], "gpu-high");
    assert_eq!(gate(request_of("CREATE", &mutated, None)), GateOutcome::Admitted);
}

/// Issue 49, hole 1: the default operator accounts by name, in namespaces a tenant made.
mod forged_operator_accounts {
    use std::sync::Arc;

    use serde_json::{Value, json};
    use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate, parse_review};
    use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    use tiergate::policy::TierPolicy;
    use tiergate::trust::{
        BindingView, DEFAULT_OPERATOR_ACCOUNTS, find_installed_operators, resolve_trusted_controllers,
    };
    use tiergate::view::{ClusterView, NamespaceView};

    use super::{CLASS, gpu_spec, job, request_of};
    use crate::gate_support::{GateOutcome, NOT_TRUSTED};
    use crate::tenant::{denial, gate_in};

    /// A Job in bronze's queue, suspended, on l4, asking Kueue for a priority above bronze's ceiling (gpu-high).
    fn ultra_job() -> Value {
        let labels =
            json!({"kueue.x-k8s.io/queue-name": "tiergate-bronze", "kueue.x-k8s.io/priority-class": "gpu-ultra"});
        let mut object = job(labels, gpu_spec(json!({"nodeSelector": {CLASS: "l4"}})));
        object["spec"]["suspend"] = json!(true);
        object
    }

    /// The sample cluster plus the operator's namespace made at `namespace_made` and, if given, a
    /// ClusterRoleBinding of `account` made at `binding_made`.
    fn cluster_with(account: &str, namespace_made: i64, binding_made: Option<i64>) -> ClusterView {
        let mut view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let namespace = account.split(':').nth(2).unwrap().to_owned();
        view.namespaces.push(Arc::new(NamespaceView {
            name: namespace,
            created: Some(namespace_made),
            ..NamespaceView::default()
        }));
        view.bindings.extend(binding_made.map(|made| BindingView {
            name: "operator-manager-rolebinding".to_owned(),
            created: Some(made),
            service_accounts: vec![account.to_owned()],
        }));
        view
    }

    /// The policy as the daemon serves it in `view` (the installed operators written in).
    fn served(view: &ClusterView) -> TierPolicy {
        let namespaces = view.namespaces.iter().map(|namespace| (namespace.name.clone(), namespace.clone())).collect();
        let installed = find_installed_operators(&view.bindings, &namespaces);
        resolve_trusted_controllers(&load_policy(None).unwrap(), &installed).unwrap()
    }

    fn as_user(user: &str) -> Value {
        let mut request = request_of("CREATE", &ultra_job(), None);
        request["userInfo"]["username"] = json!(user);
        request["userInfo"]["groups"] = json!(["system:serviceaccounts", "system:authenticated"]);
        request
    }

    fn webhook_priority(view: ClusterView, request: &Value) -> Option<String> {
        let snapshot = build_static_snapshot(load_policy(None).unwrap(), view, Some("tiergate-system".into()));
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        let parsed = parse_review(body.to_string().as_bytes()).unwrap_or_else(|(_, error)| panic!("{error}"));
        let decision = mutate(&parsed, &snapshot, &AdmissionInputs::default());
        assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
        let mut patched = request["object"].clone();
        json_patch::patch(&mut patched, &decision.patch).unwrap();
        patched["metadata"]["labels"]["kueue.x-k8s.io/priority-class"].as_str().map(str::to_owned)
    }

    #[test]
    fn every_default_operator_account_in_a_namespace_without_its_binding_is_judged_as_a_tenant() {
        for account in DEFAULT_OPERATOR_ACCOUNTS {
            // The tenant made the namespace and the account, and bound it in bronze: no ClusterRoleBinding.
            let view = cluster_with(account, 100, None);
            let message = denial(&gate_in(served(&view), view.clone(), as_user(account)));
            assert!(message.contains("may name only a priority this tier may use"), "{account}: {message}");
            assert_eq!(webhook_priority(view, &as_user(account)).as_deref(), Some("gpu-high"), "{account}");
        }
    }

    #[test]
    fn a_namespace_made_again_after_the_operator_left_does_not_inherit_its_binding() {
        let account = "system:serviceaccount:jobset-system:jobset-controller-manager";
        let view = cluster_with(account, 300, Some(200));
        let message = denial(&gate_in(served(&view), view.clone(), as_user(account)));
        assert!(message.contains("may name only a priority this tier may use"), "{message}");
        assert_eq!(webhook_priority(view, &as_user(account)).as_deref(), Some("gpu-high"));
    }

    #[test]
    fn an_installed_operator_is_still_trusted_by_both_gates() {
        let account = "system:serviceaccount:jobset-system:jobset-controller-manager";
        let view = cluster_with(account, 100, Some(100));
        let outcome = gate_in(served(&view), view.clone(), as_user(account));
        assert_eq!(outcome, GateOutcome::NotMatched { condition: NOT_TRUSTED.to_owned() });
        // A JobSet's child Job carries no queue label and runs unsuspended: from the installed operator it passes.
        let child = job(json!({}), gpu_spec(json!({"nodeSelector": {CLASS: "l4"}})));
        let mut request = request_of("CREATE", &child, None);
        request["userInfo"]["username"] = json!(account);
        assert_eq!(
            gate_in(served(&view), view, request),
            GateOutcome::NotMatched { condition: NOT_TRUSTED.to_owned() }
        );
    }
}

/// Issue 49, hole 2: a pod that names its node skips the scheduler and the GPU classes' taints.
mod pods_naming_nodes {
    use serde_json::{Value, json};
    use tiergate::admission::{AdmissionInputs, Verdict, build_static_snapshot, mutate, parse_review};
    use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    use tiergate::policy::{NodeNameAction, TierPolicy};

    use super::{BRONZE, gpu_spec, job, request_of};
    use crate::gate_support::{GateOutcome, NO_GPU};
    use crate::tenant::{denial, denied, gate_in};

    /// A CPU pod (no GPU resource, toleration or selector) bound to the h100 node, asking the runtime for every GPU.
    fn cpu_pod_on_h100() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneak", "namespace": BRONZE},
            "spec": {"nodeName": "gpu-h100-node-1", "containers": [{"name": "main", "image": "cuda",
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}})
    }

    fn policy_with(action: NodeNameAction) -> TierPolicy {
        let mut policy = load_policy(None).unwrap();
        policy.spec.admission.pods_naming_nodes = action;
        policy
    }

    fn gate(policy: TierPolicy, request: Value) -> GateOutcome {
        gate_in(policy, parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), request)
    }

    fn webhook(policy: TierPolicy, request: &Value) -> tiergate::admission::Decision {
        let snapshot = build_static_snapshot(
            policy,
            parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(),
            Some("tiergate-system".into()),
        );
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        let parsed = parse_review(body.to_string().as_bytes()).unwrap_or_else(|(_, error)| panic!("{error}"));
        mutate(&parsed, &snapshot, &AdmissionInputs::default())
    }

    #[test]
    fn a_cpu_pod_naming_a_gpu_node_is_refused_by_both_gates() {
        let request = request_of("CREATE", &cpu_pod_on_h100(), None);
        let message = denial(&gate(policy_with(NodeNameAction::Deny), request.clone()));
        assert!(message.contains("may not name its node in spec.nodeName"), "{message}");
        assert!(message.contains("nodeSelector kubernetes.io/hostname"), "the fix: {message}");
        let message = denied(&webhook(policy_with(NodeNameAction::Deny), &request), "pod_names_node");
        assert!(message.contains("names node gpu-h100-node-1 in /spec/nodeName"), "{message}");
        assert!(message.contains("podsNamingNodes: CheckNodeClass"), "{message}");
    }

    #[test]
    fn a_node_naming_pod_is_refused_whatever_node_it_names_and_whoever_writes_it() {
        // The gate cannot tell a GPU node from a CPU node; the webhook refuses the same, so the two agree.
        let mut cpu_node = cpu_pod_on_h100();
        cpu_node["spec"]["nodeName"] = json!("cpu-node-1");
        for (writer, pod) in [
            ("mallory", cpu_node.clone()),
            ("system:serviceaccount:kube-system:job-controller", cpu_pod_on_h100()),
            ("system:serviceaccount:kueue-system:kueue-controller-manager", cpu_pod_on_h100()),
        ] {
            let mut request = request_of("CREATE", &pod, None);
            request["userInfo"]["username"] = json!(writer);
            let message = denial(&gate(policy_with(NodeNameAction::Deny), request.clone()));
            assert!(message.contains("may not name its node"), "{writer}: {message}");
            denied(&webhook(policy_with(NodeNameAction::Deny), &request), "pod_names_node");
        }
    }

    #[test]
    fn a_workload_whose_template_names_a_node_is_refused_at_create() {
        let object = job(json!({}), gpu_spec(json!({"nodeName": "gpu-l4-node-1"})));
        let request = request_of("CREATE", &object, None);
        let message = denial(&gate(policy_with(NodeNameAction::Deny), request.clone()));
        assert!(message.contains("may not name its node"), "{message}");
        let message = denied(&webhook(policy_with(NodeNameAction::Deny), &request), "pod_names_node");
        assert!(message.contains("/spec/template/spec/nodeName"), "{message}");
    }

    #[test]
    fn mirror_pods_admins_and_updates_of_bound_pods_pass() {
        // A kubelet's mirror pod of a static pod on its own (bronze) node: the static pod runs whatever is stored.
        let mut own_node = cpu_pod_on_h100();
        own_node["spec"]["nodeName"] = json!("gpu-l4-node-1");
        let mut mirror = request_of("CREATE", &own_node, None);
        mirror["userInfo"]["username"] = json!("system:node:gpu-l4-node-1");
        assert!(!gate(policy_with(NodeNameAction::Deny), mirror.clone()).is_denied());
        assert!(!matches!(webhook(policy_with(NodeNameAction::Deny), &mirror).verdict, Verdict::Deny { .. }));

        let mut admin_policy = policy_with(NodeNameAction::Deny);
        admin_policy.spec.admission.admin_users = vec!["mallory".to_owned()];
        let request = request_of("CREATE", &cpu_pod_on_h100(), None);
        assert!(!gate(admin_policy.clone(), request.clone()).is_denied());
        assert!(!matches!(webhook(admin_policy, &request).verdict, Verdict::Deny { .. }));

        // A bound pod's label update: its nodeName came from the scheduler and cannot change.
        let mut bound = cpu_pod_on_h100();
        bound["spec"]["nodeName"] = json!("cpu-node-1");
        let mut relabelled = bound.clone();
        relabelled["metadata"]["labels"] = json!({"team": "a"});
        let update = request_of("UPDATE", &relabelled, Some(&bound));
        assert!(!gate(policy_with(NodeNameAction::Deny), update.clone()).is_denied());
        assert!(!matches!(webhook(policy_with(NodeNameAction::Deny), &update).verdict, Verdict::Deny { .. }));
    }

    #[test]
    fn check_node_class_keeps_the_webhooks_node_lookup_and_the_gate_stores_a_cpu_pod() {
        let request = request_of("CREATE", &cpu_pod_on_h100(), None);
        let stored = gate(policy_with(NodeNameAction::CheckNodeClass), request.clone());
        assert_eq!(stored, GateOutcome::NotMatched { condition: NO_GPU.to_owned() }, "the documented gap");
        let message = denied(&webhook(policy_with(NodeNameAction::CheckNodeClass), &request), "foreign_gpu_class");
        assert!(message.contains("gpu-h100-node-1"), "{message}");
        let mut own = cpu_pod_on_h100();
        own["spec"]["nodeName"] = json!("gpu-l4-node-1");
        let decision = webhook(policy_with(NodeNameAction::CheckNodeClass), &request_of("CREATE", &own, None));
        assert_eq!(decision.verdict, Verdict::Allow, "{:?}", decision.reasons);
    }
}
