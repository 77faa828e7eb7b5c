//! End-to-end: what a platform team's `helm upgrade` and `helm uninstall` do to a running tiergate (issue 48), on a
//! real API server with its kube-controller-manager (whose garbage collector is what removes the gate), the
//! webhook not registered. Two findings of the real install are checked here without a node:
//!
//! - **Handover.** Two replicas share the Lease; the leader steps down as `tiergate run` does on SIGTERM, and the
//!   other takes the Lease at its next retry instead of after the Lease expires (the gap is printed, not
//!   asserted).
//! - **Uninstall.** With the gate owned by a webhook registration (`--gate-owner`, as the chart runs it), deleting
//!   that registration (what `helm uninstall` does, the TierPolicy left in place) takes the gate's policies,
//!   bindings and parameters with it, a reconcile afterwards does not put them back, and a GPU Job the gate refused
//!   is then stored as it would be without tiergate. The registration made again brings the gate back, and deleting
//!   the TierPolicy prunes it.
//!
//! Skipped (and passing) without a reachable cluster or Kueue's v1beta2 CRDs.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tiergate::plan::gate::params::TierGateParameters;
use tiergate::plan::gate::{gate_name, gate_policy_name};
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, apply_policy, build_prefixed_policy, create_namespace,
    ensure, install_tierpolicy_crd, plain_gpu_job, prefixed, random_name, run_cluster_test, tenant_client, wait_for,
    wait_until_admitted_as, wait_until_refused,
};
use tiergate_workloads::QUEUE_NAME_LABEL;

/// The API server and the garbage collector act on their own informers' time (seconds).
const SETTLE: Duration = Duration::from_secs(120);
/// Longer than any Lease the daemon writes (15 s) plus its retry: a bound against a hang, not a measurement.
const TAKE_OVER: Duration = Duration::from_secs(60);

/// One test function: both scenarios install the same cluster-scoped CRDs, so they run in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_handed_over_and_uninstall_takes_the_gate_along() {
    let test = "the_lease_is_handed_over_and_uninstall_takes_the_gate_along";
    let scenarios = async |client: &Client, cleanup: &Cleanup| {
        handover(client, cleanup).await?;
        uninstall(client, cleanup).await
    };
    if let Err(error) = run_cluster_test(test, scenarios).await {
        panic!("{error}");
    }
}

/// The policy, its system namespace and its bronze namespace, all under a fresh prefix.
async fn set_up(client: &Client, cleanup: &Cleanup, what: &str) -> Result<(TierPolicy, String, String), HarnessError> {
    let prefix = random_name(what);
    let policy = build_prefixed_policy(&prefix)?;
    let (system, bronze) = (format!("{prefix}-system"), format!("{prefix}-bronze"));
    install_tierpolicy_crd(client, cleanup).await?;
    create_namespace(client, cleanup, &system, &[]).await?;
    create_namespace(client, cleanup, &bronze, &[(E2E_TIER_LABEL, &prefixed(&prefix, "bronze"))]).await?;
    Ok((policy, system, bronze))
}

async fn handover(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let (policy, system, _) = set_up(client, cleanup, "e2e-handover").await?;
    let name = policy.name_any();
    let lease_name = format!("{name}-lease");
    let first = InProcessDaemon::start(client, &name, &system, &lease_name);
    let second = InProcessDaemon::start(client, &name, &system, &lease_name);
    let applied = apply_policy(client, &policy).await;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &name);
    let result = async {
        applied?;
        // The wait names the leader it saw: asked again afterwards, a Lease lost meanwhile would swap the roles.
        let (leader, follower) = wait_for("one replica to lead", TAKE_OVER, || async {
            if first.is_leading_and_synced() {
                Some((&first, &second))
            } else {
                second.is_leading_and_synced().then_some((&second, &first))
            }
        })
        .await?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), &system);
        let held_by = |lease: &Lease| lease.spec.as_ref().and_then(|spec| spec.holder_identity.clone());
        let before = held_by(&leases.get(&lease_name).await?);
        let stepped_down = Instant::now();
        leader.step_down();
        wait_for("the other replica to take the Lease", TAKE_OVER, || async {
            follower.is_leading_and_synced().then_some(())
        })
        .await?;
        let gap = stepped_down.elapsed();
        let after = held_by(&leases.get(&lease_name).await?);
        ensure(after.is_some() && after != before, || format!("the Lease is still held by {before:?}: {after:?}"))?;
        ensure(!leader.is_leading_and_synced(), || "the replica that stepped down still leads".to_owned())?;
        println!(
            "lifecycle: the Lease went from {before:?} to {after:?} {:.1} s after the leader stepped down (it is \
             valid 15 s without renewal)",
            gap.as_secs_f64()
        );
        Ok::<(), HarnessError>(())
    }
    .await;
    first.stop().await;
    second.stop().await;
    result
}

async fn uninstall(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let (policy, system, bronze) = set_up(client, cleanup, "e2e-uninstall").await?;
    let name = policy.name_any();
    let tier = prefixed(&name, "bronze");
    let registration = format!("{name}-registration");
    let registrations: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    create_registration(&registrations, &registration).await?;
    cleanup.track(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, &registration);
    let daemon = InProcessDaemon::start_owned_by(client, &name, &system, &format!("{name}-lease"), Some(&registration));
    let applied = apply_policy(client, &policy).await;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &name);
    let result = async {
        applied?;
        let tenant = tenant_client(client, cleanup, &[&bronze]).await?;
        let h100 = policy.spec.gpu_class(&prefixed(&name, "h100")).ok_or("no class h100")?.node_labels.clone();
        let mut probe: Job = plain_gpu_job(&bronze, "probe", 1, 1)?;
        let spec = probe.spec.as_mut().and_then(|spec| spec.template.spec.as_mut()).ok_or("the probe has no spec")?;
        spec.node_selector = Some(h100);
        let refusal = format!("binding '{}'", gate_name(&tier));

        // Installed: the gate, owned by the registration, refuses bronze's Job on h100.
        let uid = registrations.get(&registration).await?.uid().ok_or("the registration has no uid")?;
        wait_for("the gate's policy owned by the registration", SETTLE, || async {
            let gate = gate_objects(client, &name, &tier).await.ok()?;
            let owners = gate.policy?.owner_references().to_vec();
            owners.iter().any(|owner| owner.kind == "MutatingWebhookConfiguration" && owner.uid == uid).then_some(())
        })
        .await?;
        wait_until_refused(&tenant, "the gate to refuse bronze's Job on h100", SETTLE, &probe, &refusal).await?;

        // `helm uninstall`: the registration goes; the garbage collector takes the gate along.
        let deleted = Instant::now();
        registrations.delete(&registration, &DeleteParams::background()).await?;
        wait_for("the gate to be garbage-collected with the registration", SETTLE, || async {
            gate_objects(client, &name, &tier).await.ok()?.is_empty().then_some(())
        })
        .await?;
        println!("lifecycle: the gate was gone {:.1} s after its registration", deleted.elapsed().as_secs_f64());
        // A reconcile after that (the namespace relabelled to trigger one) does not put it back. The counter moves
        // when a reconcile starts; what shows one finished is the policy's status, written last, counting no gate
        // object. Every reconcile after that one reads the registration as missing, so the check below is final.
        let reconciles = daemon.metric_sum("tiergate_reconciles_total");
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let relabel = json!({"metadata": {"labels": {"e2e.tiergate.io/nudge": "1"}}});
        namespaces.patch(&bronze, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&relabel)).await?;
        let policies: Api<TierPolicy> = Api::all(client.clone());
        let counted = std::sync::Mutex::new(None);
        let reconciled = wait_for("a reconcile after the uninstall, finished with no gate counted", SETTLE, || async {
            let started = daemon.metric_sum("tiergate_reconciles_total") > reconciles;
            let counts = policies.get_opt(&name).await.ok()??.status?.object_counts;
            let gate_counted: Vec<(String, i32)> = counts
                .into_iter()
                .filter(|(kind, count)| *count > 0 && gate_kinds().contains(&kind.as_str()))
                .collect();
            let done = started && gate_counted.is_empty();
            if let Ok(mut counted) = counted.lock() {
                *counted = Some(gate_counted);
            }
            done.then_some(())
        })
        .await;
        reconciled.map_err(|error| {
            format!(
                "{error}: reconciles {} (before the relabel {reconciles}), gate objects in the status {:?}",
                daemon.metric_sum("tiergate_reconciles_total"),
                counted.lock().ok().and_then(|counted| counted.clone())
            )
        })?;
        let left = gate_objects(client, &name, &tier).await?;
        ensure(left.is_empty(), || format!("a reconcile without the registration put the gate back: {left:?}"))?;
        // The Job the gate refused is stored as it would be without tiergate: as sent, in no queue.
        wait_until_admitted_as(&tenant, "bronze's Job on h100, stored as sent", SETTLE, &probe, |stored: &Job| {
            !stored.labels().contains_key(QUEUE_NAME_LABEL)
        })
        .await?;

        // Installed again: the gate comes back, owned by the new registration, at the next reconcile (a real
        // reinstall starts new replicas, whose first reconcile it is; here the namespace is relabelled again).
        create_registration(&registrations, &registration).await?;
        let relabel = json!({"metadata": {"labels": {"e2e.tiergate.io/nudge": "2"}}});
        namespaces.patch(&bronze, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&relabel)).await?;
        wait_until_refused(&tenant, "the gate to refuse again after a reinstall", SETTLE, &probe, &refusal).await?;
        // The TierPolicy deleted while tiergate runs: the daemon prunes the gate (the policy does not own it).
        Api::<TierPolicy>::all(client.clone()).delete(&name, &DeleteParams::background()).await?;
        wait_for("the gate of the deleted policy to be pruned", SETTLE, || async {
            gate_objects(client, &name, &tier).await.ok()?.is_empty().then_some(())
        })
        .await?;
        Ok::<(), HarnessError>(())
    }
    .await;
    daemon.stop().await;
    result
}

/// A webhook registration that sends nothing anywhere: it selects only namespaces with a label none has.
async fn create_registration(api: &Api<MutatingWebhookConfiguration>, name: &str) -> Result<(), HarnessError> {
    let registration: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{"name": "inert.e2e.tiergate.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore", "timeoutSeconds": 1,
            "clientConfig": {"url": "https://127.0.0.1:9/mutate"},
            "namespaceSelector": {"matchLabels": {"e2e.tiergate.io/never": "selected"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["configmaps"]}]}]}))?;
    api.create(&PostParams::default(), &registration).await?;
    Ok(())
}

/// The names of the in-server gate's kinds, as the policy's `status.objectCounts` keys them.
fn gate_kinds() -> Vec<&'static str> {
    KueueKind::ALL.into_iter().filter(|kind| kind.is_gate()).map(KueueKind::name).collect()
}

/// The gate objects of policy `name` and its `tier` that exist now.
#[derive(Debug, Default)]
struct GateObjects {
    policy: Option<ValidatingAdmissionPolicy>,
    binding: Option<ValidatingAdmissionPolicyBinding>,
    parameters: Option<TierGateParameters>,
}

impl GateObjects {
    fn is_empty(&self) -> bool {
        self.policy.is_none() && self.binding.is_none() && self.parameters.is_none()
    }
}

async fn gate_objects(client: &Client, name: &str, tier: &str) -> Result<GateObjects, HarnessError> {
    Ok(GateObjects {
        policy: Api::<ValidatingAdmissionPolicy>::all(client.clone()).get_opt(&gate_policy_name(name)).await?,
        binding: Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).get_opt(&gate_name(tier)).await?,
        parameters: Api::<TierGateParameters>::all(client.clone()).get_opt(&gate_name(tier)).await?,
    })
}
