//! End-to-end: the in-server gate of issue 40, on a real API server with its kube-controller-manager, the webhook
//! down (none registered). A bronze tenant tries the three classes of holes found live: a service account of its
//! other namespace (no `system:` identity is trusted for being one), a ReplicaSet and a ReplicationController whose
//! controllers write GPU pods (pods are gated whoever writes them), and a pod `priorityClassName` that Kueue would
//! take as the workload priority (the tier's default label goes on); then issue 49's two: a default operator's
//! service account in an install namespace the tenant made itself (trusted only once a ClusterRoleBinding binds it),
//! and a CPU pod that names a GPU node in `nodeName`. Then: kube-controller-manager type-checks
//! both generated policies clean within a minute and is idle again, and the sample's render is accepted as
//! `kubectl apply` (client-side: the last-applied annotation) and server-side apply send it. Skipped (and passing)
//! without a reachable cluster or Kueue's v1beta2 CRDs. See docs/admission.md ("The in-server gate").

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, ReplicationController, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tiergate::plan::gate::gate_policy_name;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate::scoring::buckets::default_priority_class;
use tiergate::trust::DEFAULT_OPERATOR_ACCOUNTS;
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, build_prefixed_policy, ensure, prefixed, random_name, run_cluster_test,
    start_tiergate, tenant_client, wait_for,
};
use tiergate_workloads::{PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL};

/// The API server compiles a new policy and starts enforcing it asynchronously (seconds).
const ENFORCEMENT: Duration = Duration::from_secs(120);
/// A guard against a hang while kube-controller-manager type-checks the policy and settles: issue 40 wants a
/// minute, which docs/performance.md reports as measured; the test asserts that it happens, not how fast.
const TYPE_CHECK: Duration = Duration::from_secs(300);
/// How long a controller may take to try its pods.
const CONTROLLER: Duration = Duration::from_secs(90);

/// One test function: both scenarios install and remove the same cluster-scoped CRDs, so they run in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holes_of_issue_40_are_closed_the_gate_type_checks_clean_and_its_render_applies() {
    let test = "holes_of_issue_40_are_closed_the_gate_type_checks_clean_and_its_render_applies";
    let scenarios = async |client: &Client, cleanup: &Cleanup| {
        holes(client, cleanup).await?;
        type_check_and_apply(client, cleanup).await
    };
    if let Err(error) = run_cluster_test(test, scenarios).await {
        panic!("{error}");
    }
}

struct Run {
    policy: TierPolicy,
    /// The priority buckets (name, value).
    buckets: Vec<(String, i32)>,
    prefix: String,
    bronze: String,
    other: String,
    tier: String,
    l4: Value,
    h100: Value,
}

async fn holes(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-holes");
    let policy = build_prefixed_policy(&prefix)?;
    let system = format!("{prefix}-system");
    let (bronze, other) = (format!("{prefix}-bronze"), format!("{prefix}-dev"));
    let tier = prefixed(&prefix, "bronze");
    let tenants: [(&str, &[(&str, &str)]); 2] =
        [(&bronze, &[(E2E_TIER_LABEL, &tier)]), (&other, &[(E2E_TIER_LABEL, &tier)])];
    let daemon = start_tiergate(client, cleanup, &policy, &system, &tenants).await?;
    let class = |name: &str| -> Result<Value, HarnessError> {
        let class = policy.spec.gpu_class(&prefixed(&prefix, name)).ok_or_else(|| format!("no class {name}"))?;
        Ok(serde_json::to_value(&class.node_labels)?)
    };
    let bronze_tier = policy.spec.tier(&tier).ok_or("no bronze tier")?;
    let default = default_priority_class(bronze_tier, &policy.spec.priority_buckets).ok_or("no default priority")?;
    let buckets = policy.spec.priority_buckets.iter().map(|bucket| (bucket.name.clone(), bucket.value)).collect();
    let run =
        Run { l4: class("l4")?, h100: class("h100")?, policy: policy.clone(), buckets, prefix, bronze, other, tier };
    let result = attack(client, cleanup, &run, &default).await;
    daemon.stop().await;
    result
}

async fn attack(client: &Client, cleanup: &Cleanup, run: &Run, default: &str) -> Result<(), HarnessError> {
    let tenant = tenant_client(client, cleanup, &[&run.bronze, &run.other]).await?;
    let tier_part = format!("binding '{}'", tiergate::plan::gate::gate_name(&run.tier));
    let h100 = json!({"nodeSelector": run.h100});
    wait_for("the API server to enforce the gate", ENFORCEMENT, || async {
        let job: Job =
            serde_json::from_value(job_body(&run.bronze, "probe", json!({}), gpu_spec(h100.clone()))).ok()?;
        let params = PostParams { dry_run: true, ..PostParams::default() };
        let refused = Api::<Job>::namespaced(tenant.clone(), &run.bronze).create(&params, &job).await.err()?;
        refused.to_string().contains(&tier_part).then_some(())
    })
    .await?;

    // 1. A service account of the tenant's other namespace, bound in bronze: not a trusted controller.
    let account = service_account_in(client, cleanup, &run.other, &run.bronze, "deployer").await?;
    for (what, body) in [
        ("Job selecting h100", job_body(&run.bronze, "sa-h100", json!({}), gpu_spec(h100.clone()))),
        ("Pod selecting h100", pod_body(&run.bronze, "sa-h100", gpu_spec(h100.clone()))),
    ] {
        let outcome = create_dynamic(&account, &run.bronze, &body).await;
        refused_by_gate(&format!("{what}, as a service account of {}", run.other), &tier_part, outcome)?;
    }

    // 2. Pods written by controllers of kinds the gate does not list: gated at the pod.
    let foreign_rs = replica_set(&run.bronze, "rs-h100", gpu_spec(h100.clone()));
    let foreign_rc = replication_controller(&run.bronze, "rc-h100", gpu_spec(h100.clone()));
    let plain_rs = replica_set(&run.bronze, "rs-plain", gpu_spec(json!({})));
    Api::<ReplicaSet>::namespaced(tenant.clone(), &run.bronze)
        .create(&PostParams::default(), &serde_json::from_value(foreign_rs)?)
        .await?;
    Api::<ReplicationController>::namespaced(tenant.clone(), &run.bronze)
        .create(&PostParams::default(), &serde_json::from_value(foreign_rc)?)
        .await?;
    Api::<ReplicaSet>::namespaced(tenant.clone(), &run.bronze)
        .create(&PostParams::default(), &serde_json::from_value(plain_rs)?)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &run.bronze);
    let mut refused = vec![("rs-h100", "ReplicaSet"), ("rc-h100", "ReplicationController")];
    let mutating = tiergate_e2e::serves_mutating_policies(client).await?;
    if mutating {
        // The plain ReplicaSet's pod exists, confined to l4 by the mutating half (so the controller runs and is
        // writing pods while the foreign ones are tried).
        let plain_pod = wait_for("the plain ReplicaSet's pod", CONTROLLER, || async {
            let list = pods.list(&ListParams::default().labels("app=rs-plain")).await.ok()?;
            list.items.into_iter().next()
        })
        .await?;
        let selector = plain_pod.spec.as_ref().and_then(|spec| spec.node_selector.clone());
        ensure(serde_json::to_value(&selector)? == run.l4, || {
            format!("the plain ReplicaSet's pod is not confined to l4: {selector:?}")
        })?;
    } else {
        // Before Kubernetes 1.36 the gate is its validating half: the plain pod is refused, not confined.
        println!("gate_holes: MutatingAdmissionPolicy is not served; the plain ReplicaSet's pod must be refused");
        refused.push(("rs-plain", "ReplicaSet"));
    }
    for (app, kind) in refused {
        let reason = wait_for(&format!("the {kind}'s ReplicaFailure"), CONTROLLER, || async {
            let status = match kind {
                "ReplicaSet" => {
                    let rs = Api::<ReplicaSet>::namespaced(client.clone(), &run.bronze).get(app).await.ok()?;
                    serde_json::to_value(rs.status?).ok()?
                }
                _ => {
                    let rc =
                        Api::<ReplicationController>::namespaced(client.clone(), &run.bronze).get(app).await.ok()?;
                    serde_json::to_value(rc.status?).ok()?
                }
            };
            let conditions = status["conditions"].as_array()?.clone();
            conditions
                .into_iter()
                .find(|condition| condition["type"] == "ReplicaFailure")
                .and_then(|condition| condition["message"].as_str().map(str::to_owned))
        })
        .await?;
        ensure(reason.contains(&tier_part), || format!("{kind}: refused without the gate's message: {reason}"))?;
        let stored = pods.list(&ListParams::default().labels(&format!("app={app}"))).await?;
        ensure(stored.items.is_empty(), || format!("{kind}: its controller stored a pod on h100"))?;
    }

    // 3. Priority by another field: a queued Job whose pods name a high PriorityClass gets the tier's default
    // label, which Kueue reads first.
    let high = format!("{}-high", run.prefix);
    let class: PriorityClass = serde_json::from_value(json!({"apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass", "metadata": {"name": high}, "value": 1_000_000_000}))?;
    Api::<PriorityClass>::all(client.clone()).create(&PostParams::default(), &class).await?;
    cleanup.track(ApiResource::erase::<PriorityClass>(&()), None, &high);
    let labels = json!({QUEUE_NAME_LABEL: format!("tiergate-{}", run.tier)});
    let mut job = job_body(
        &run.bronze,
        "pod-priority",
        labels,
        gpu_spec(json!({"nodeSelector": run.l4,
        "priorityClassName": high})),
    );
    job["spec"]["suspend"] = json!(true);
    let what = format!("a Job whose pods name PriorityClass {high}");
    match create_dynamic(&tenant, &run.bronze, &job).await {
        // The mutating half gives it the tier's default label; the validating half alone refuses it.
        Ok(stored) if mutating => {
            let label = stored["metadata"]["labels"][PRIORITY_CLASS_LABEL].as_str().map(str::to_owned);
            ensure(label.as_deref() == Some(default), || {
                format!("{what} was stored with priority label {label:?}, not {default}")
            })?;
        }
        outcome => refused_by_gate(&what, &tier_part, outcome)?,
    }

    forged_operator_account(client, cleanup, run, &tier_part).await?;
    pod_naming_its_node(&tenant, run).await
}

/// Issue 49, hole 1: on a self-service platform the tenant creates a default operator's install namespace, the
/// operator's service account in it, and binds it in bronze. A Job through it asking the top priority is refused
/// with the webhook down; once a ClusterRoleBinding binds the account (the platform installed the operator), the
/// same account writes a JobSet-style child Job (no queue label, unsuspended) unchecked, as the real operator must.
async fn forged_operator_account(
    client: &Client,
    cleanup: &Cleanup,
    run: &Run,
    tier_part: &str,
) -> Result<(), HarnessError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut free = None;
    for account in DEFAULT_OPERATOR_ACCOUNTS {
        let Some((namespace, name)) =
            account.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        if namespaces.get_opt(namespace).await?.is_none() {
            free = Some((*account, namespace.to_owned(), name.to_owned()));
            break;
        }
    }
    let Some((account, home, name)) = free else {
        println!(
            "note: every default operator's install namespace exists in this cluster (operators installed), so the \
             forged-account attack of issue 49 cannot be staged here; its unit tests cover it"
        );
        return Ok(());
    };
    // What the tenant does, on a platform that lets it create namespaces.
    let namespace: Namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": home}}))?;
    namespaces.create(&PostParams::default(), &namespace).await?;
    cleanup.track(ApiResource::erase::<Namespace>(&()), None, &home);
    let forged = service_account_in(client, cleanup, &home, &run.bronze, &name).await?;
    let bronze = policy_tier(run)?;
    let top = run
        .buckets
        .iter()
        .max_by_key(|(_, value)| *value)
        .map(|(name, _)| name.clone())
        .ok_or("the policy has no priority bucket")?;
    ensure(bronze.max_priority_class.as_deref() != Some(top.as_str()), || "bronze may use the top bucket".to_owned())?;
    let labels = json!({QUEUE_NAME_LABEL: format!("tiergate-{}", run.tier), PRIORITY_CLASS_LABEL: top});
    let mut ultra = job_body(&run.bronze, "forged-ultra", labels, gpu_spec(json!({"nodeSelector": run.l4})));
    ultra["spec"]["suspend"] = json!(true);
    // Judged as the tenant's own Job: the mutating half holds the label to bronze's ceiling (the validating half
    // alone, before Kubernetes 1.36, refuses it).
    let what = format!("a Job above bronze's ceiling, as {account} in a namespace the tenant made");
    match create_dynamic(&forged, &run.bronze, &ultra).await {
        Ok(stored) => {
            let label = stored["metadata"]["labels"][PRIORITY_CLASS_LABEL].as_str().map(str::to_owned);
            ensure(label.is_some() && label == bronze.max_priority_class, || {
                format!("{what}: stored with priority {label:?}, not bronze's ceiling {:?}", bronze.max_priority_class)
            })?;
            println!("issue 49: {what}: stored with its priority held to bronze's ceiling {label:?}");
        }
        outcome => refused_by_gate(&what, tier_part, outcome)?,
    }
    // The same account writing what an operator writes (a child Job with no queue label, unsuspended) gets the tier's
    // queue and is suspended for Kueue: no run outside the tier's quota.
    let child = job_body(&run.bronze, "operator-child", json!({}), gpu_spec(json!({"nodeSelector": run.l4})));
    let what = format!("a Job without a queue, as {account} in a namespace the tenant made");
    match create_dynamic(&forged, &run.bronze, &child).await {
        Ok(stored) => {
            let queue = stored["metadata"]["labels"][QUEUE_NAME_LABEL].as_str().map(str::to_owned);
            let suspended = stored["spec"]["suspend"] == json!(true);
            let expected = format!("tiergate-{}", run.tier);
            ensure(queue.as_deref() == Some(expected.as_str()) && suspended, || {
                format!("{what}: stored with queue {queue:?}, suspended {suspended}: it would run outside Kueue")
            })?;
            println!("issue 49: {what}: stored in {expected}, suspended for Kueue");
        }
        outcome => refused_by_gate(&what, tier_part, outcome)?,
    }

    // What the platform does when it installs the operator: a ClusterRoleBinding, which no tenant can make.
    let binding_name = format!("{}-operator", run.prefix);
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": binding_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": home}]}))?;
    Api::<ClusterRoleBinding>::all(client.clone()).create(&PostParams::default(), &binding).await?;
    cleanup.track(ApiResource::erase::<ClusterRoleBinding>(&()), None, &binding_name);
    let child = job_body(&run.bronze, "installed-child", json!({}), gpu_spec(json!({"nodeSelector": run.l4})));
    let installed_at = Instant::now();
    // Left exactly as written: no queue label, not suspended (the gate's policies skip a trusted writer).
    wait_for("the installed operator's child Job to pass the gate as written", ENFORCEMENT, || async {
        let object: DynamicObject = serde_json::from_value(child.clone()).ok()?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(forged.clone(), &run.bronze, &ApiResource::erase::<Job>(&()));
        let params = PostParams { dry_run: true, ..PostParams::default() };
        let stored = serde_json::to_value(api.create(&params, &object).await.ok()?).ok()?;
        let queued = stored["metadata"]["labels"].get(QUEUE_NAME_LABEL).is_some();
        (!queued && stored["spec"]["suspend"] != json!(true)).then_some(())
    })
    .await?;
    println!(
        "issue 49: {account} trusted {:.1} s after the platform's ClusterRoleBinding appeared",
        installed_at.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Issue 49, hole 2: a CPU pod bound by `nodeName` to a GPU node skips the scheduler and the classes' taints; with the
/// webhook down the gate refuses every node-naming pod in a tiered namespace. The fix it names (a hostname
/// nodeSelector) is stored.
async fn pod_naming_its_node(tenant: &Client, run: &Run) -> Result<(), HarnessError> {
    let sneak = json!({"nodeName": format!("{}-h100-node", run.prefix), "containers": [{"name": "main",
        "image": "registry.k8s.io/pause:3.10", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]});
    let outcome = create_dynamic(tenant, &run.bronze, &pod_body(&run.bronze, "sneak", sneak)).await;
    match outcome {
        Ok(stored) => {
            return Err(format!("a CPU pod naming a GPU node was stored with the webhook down: {stored}").into());
        }
        Err(error) => {
            let message = error.to_string();
            ensure(message.contains("may not name its node"), || {
                format!("refused without the rule's message: {message}")
            })?;
        }
    }
    let by_selector = json!({"nodeSelector": {"kubernetes.io/hostname": format!("{}-cpu-node", run.prefix)},
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]});
    create_dynamic(tenant, &run.bronze, &pod_body(&run.bronze, "by-hostname", by_selector)).await?;
    Ok(())
}

/// A service account `name` of `home`, given `edit` in `target` (as a tenant owning both sets it up), as a client.
async fn service_account_in(
    client: &Client,
    cleanup: &Cleanup,
    home: &str,
    target: &str,
    name: &str,
) -> Result<Client, HarnessError> {
    let account: ServiceAccount =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}))?;
    Api::<ServiceAccount>::namespaced(client.clone(), home).create(&PostParams::default(), &account).await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("{home}-{name}"), "namespace": target},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": home}]}))?;
    Api::<RoleBinding>::namespaced(client.clone(), target).create(&PostParams::default(), &binding).await?;
    cleanup.track(ApiResource::erase::<RoleBinding>(&()), Some(target), &format!("{home}-{name}"));
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{home}:{name}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{home}"),
        "system:authenticated".to_owned(),
    ]);
    Ok(Client::try_from(config)?)
}

async fn create_dynamic(client: &Client, namespace: &str, body: &Value) -> Result<Value, HarnessError> {
    let object: DynamicObject = serde_json::from_value(body.clone())?;
    let kind = body["kind"].as_str().unwrap_or_default();
    let resource = match kind {
        "Job" => ApiResource::erase::<Job>(&()),
        _ => ApiResource::erase::<Pod>(&()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    Ok(serde_json::to_value(api.create(&PostParams::default(), &object).await?)?)
}

fn refused_by_gate(what: &str, tier_part: &str, outcome: Result<Value, HarnessError>) -> Result<(), HarnessError> {
    match outcome {
        Ok(stored) => Err(format!("{what}: stored with the webhook down: {stored}").into()),
        Err(error) => {
            let message = error.to_string();
            ensure(message.contains(tier_part), || format!("{what}: refused without the gate's message: {message}"))
        }
    }
}

fn policy_tier(run: &Run) -> Result<&tiergate::policy::Tier, HarnessError> {
    Ok(run.policy.spec.tier(&run.tier).ok_or("no bronze tier")?)
}

fn gpu_spec(extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    for (key, value) in extra.as_object().into_iter().flatten() {
        spec[key] = value.clone();
    }
    spec
}

fn job_body(namespace: &str, name: &str, labels: Value, mut spec: Value) -> Value {
    spec["restartPolicy"] = json!("Never");
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace,
        "labels": labels}, "spec": {"template": {"spec": spec}}})
}

fn pod_body(namespace: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

fn replica_set(namespace: &str, app: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": app, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": spec}}})
}

fn replication_controller(namespace: &str, app: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": app, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"app": app},
            "template": {"metadata": {"labels": {"app": app}}, "spec": spec}}})
}

async fn type_check_and_apply(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e-typecheck");
    let policy = build_prefixed_policy(&prefix)?;
    let system = format!("{prefix}-system");
    let bronze = format!("{prefix}-bronze");
    let tier = prefixed(&prefix, "bronze");
    // kube-controller-manager type-checks every policy it sees, one after the other, also those the suites before
    // this one applied and deleted moments later: this policy's wait starts once that backlog is done.
    wait_for_controller_manager_idle("before the policy").await?;
    let daemon = start_tiergate(client, cleanup, &policy, &system, &[(&bronze, &[(E2E_TIER_LABEL, &tier)])]).await?;
    let result = check_type_checking(client, &gate_policy_name(&prefix)).await;
    daemon.stop().await;
    result?;
    apply_render_as_kubectl_does(client).await
}

/// The validating policy gets `status.typeChecking` for its generation, with no warning (a MutatingAdmissionPolicy
/// has no status: kube-controller-manager type-checks ValidatingAdmissionPolicies only); then
/// kube-controller-manager, where it runs on this machine, is idle again. Both times are printed.
async fn check_type_checking(client: &Client, name: &str) -> Result<(), HarnessError> {
    let started = Instant::now();
    let controller_manager_cpu = || controller_manager_pid().and_then(cpu_seconds);
    let cpu_before = controller_manager_cpu();
    for kind in [KueueKind::ValidatingAdmissionPolicy] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
        let found = std::sync::Mutex::new(String::from("no answer yet"));
        let waited = wait_for(&format!("{} {name} to be type-checked", kind.name()), TYPE_CHECK, || async {
            let policy = api.get_opt(name).await.ok()??;
            let generation = policy.metadata.generation?;
            let status = policy.data.get("status").cloned().unwrap_or(Value::Null);
            *found.lock().ok()? = format!("generation {generation}, status {status}");
            (status["observedGeneration"] == json!(generation) && status.get("typeChecking").is_some())
                .then_some(status)
        })
        .await;
        let status = waited.map_err(|error| {
            let found = found.lock().map(|found| found.clone()).unwrap_or_default();
            format!("{error}; found {found}, kube-controller-manager has not written status.typeChecking for it")
        })?;
        let warnings = &status["typeChecking"]["expressionWarnings"];
        ensure(warnings.as_array().is_none_or(Vec::is_empty), || {
            format!("{} {name}: type-checking warnings: {warnings}", kind.name())
        })?;
        let cpu = cpu_before.zip(controller_manager_cpu()).map(|(before, after)| after - before);
        let cpu =
            cpu.map(|used| format!(", kube-controller-manager used {used:.1} s of CPU meanwhile")).unwrap_or_default();
        println!(
            "gate_holes: {} {name} type-checked clean after {:.1} s{cpu}",
            kind.name(),
            started.elapsed().as_secs_f64()
        );
    }
    wait_for_controller_manager_idle("after the policy").await?;
    println!("gate_holes: kube-controller-manager idle {:.1} s after the policy", started.elapsed().as_secs_f64());
    Ok(())
}

/// Waits until kube-controller-manager, where it runs on this machine, uses under a quarter core over 5 s; prints its
/// CPU use, or that it does not run here.
async fn wait_for_controller_manager_idle(when: &str) -> Result<(), HarnessError> {
    let Some(pid) = controller_manager_pid() else {
        println!("gate_holes: kube-controller-manager does not run on this machine; its CPU is not measured");
        return Ok(());
    };
    wait_for(
        &format!("kube-controller-manager to be idle {when} (under a quarter core over 5 s)"),
        TYPE_CHECK,
        || async {
            let before = cpu_seconds(pid)?;
            tokio::time::sleep(Duration::from_secs(5)).await;
            let used = cpu_seconds(pid)? - before;
            println!("gate_holes: kube-controller-manager used {used:.2} s of CPU in 5 s ({when})");
            (used < 1.25).then_some(())
        },
    )
    .await
}

/// The kube-controller-manager of the cluster in `KUBECONFIG`, when it runs on this machine (the throwaway control
/// plane's, started with that kubeconfig).
fn controller_manager_pid() -> Option<u32> {
    let kubeconfig = std::env::var("KUBECONFIG").ok()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let command = std::fs::read(entry.path().join("cmdline")).ok()?;
        let command = String::from_utf8_lossy(&command);
        (command.contains("kube-controller-manager") && command.contains(&kubeconfig)).then_some(pid)
    })
}

/// User and system CPU seconds of process `pid`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// README's `tiergate render ... | kubectl apply -f -`: every cluster-scoped object of the kubenexus sample's render
/// (its gate included) is accepted as client-side apply sends it (the whole object again in the last-applied
/// annotation, which the API server caps at 256 KiB) and as server-side apply sends it, both as server dry runs.
async fn apply_render_as_kubectl_does(client: &Client) -> Result<(), HarnessError> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/kubenexus/policy.yaml");
    let policy = tiergate::inputs::parse_policy(&std::fs::read_to_string(&path)?, &path.display().to_string())?;
    let desired = tiergate::plan::desired_cluster_scoped(&policy);
    // What `tiergate render --kubeconfig` writes for this server: the mutating half only where it is served.
    let mutating = tiergate_e2e::serves_mutating_policies(client).await?;
    let mut checked = 0;
    for object in desired.objects() {
        if !mutating && KueueKind::from_kind(object.kind()).is_some_and(KueueKind::is_mutating_half) {
            continue;
        }
        let mut value = object.to_value()?;
        let (group, version) = value["apiVersion"].as_str().unwrap_or_default().split_once('/').unwrap_or_default();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        let plural = KueueKind::from_kind(&kind).map(KueueKind::plural).ok_or_else(|| format!("no kind {kind}"))?;
        let resource = ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: value["apiVersion"].as_str().unwrap_or_default().to_owned(),
            kind: kind.clone(),
            plural: plural.to_owned(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = object.name().to_owned();
        let applied = api
            .patch(&name, &PatchParams::apply("tiergate-e2e-render").dry_run(), &Patch::Apply(&value))
            .await
            .map_err(|error| format!("server-side apply of {kind} {name}: {error}"))?;
        ensure(applied.name_any() == name, || format!("{kind} {name}: applied as {}", applied.name_any()))?;
        let last_applied = serde_json::to_string(&value)?;
        value["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": last_applied});
        let params = PostParams { dry_run: true, ..PostParams::default() };
        api.create(&params, &serde_json::from_value(value)?)
            .await
            .map_err(|error| format!("kubectl apply (client-side) of {kind} {name}: {error}"))?;
        checked += 1;
    }
    println!(
        "gate_holes: {checked} objects of the kubenexus render accepted as kubectl and server-side apply send them"
    );
    Ok(())
}
