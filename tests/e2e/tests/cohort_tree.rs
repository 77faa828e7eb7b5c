//! End-to-end test of the cohort tree (issue 28) against a real API server with Kueue v0.19+ and fair sharing
//! on: the shape of `samples/org-tree` (gold and silver under `research`, bronze under `batch`, both under `org`;
//! a floor for gold; weights) with small numbers, reconciled by the in-process daemon. Skipped (and passing)
//! without a reachable cluster or Kueue's v1beta2 CRDs; see docs/guides/tier-hierarchy.md ("Cohort tree").
//!
//! Jobs carry their tier's queue label themselves (the webhook's queueing is the `webhook` and `quota_cap`
//! suites' subject); they ask for one GPU and nothing else, and their pods never need a node: Kueue admits by
//! quota alone. Where the API server serves no MutatingAdmissionPolicy (before 1.36), a one-class tier's Jobs also
//! carry their class's node selector, which the gate's mutating half gives them otherwise. Every count is awaited as
//! a condition with a generous timeout, then compared exactly.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tiergate::answers::{StatusInputs, build_status_answer};
use tiergate::cmd::build_live_answer;
use tiergate::live::fetch_status_inputs;
use tiergate::plan::gate::gate_name;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::{KueueKind, build_ownership_selector};
use tiergate::validation::validate_policy;
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, apply_policy, create_namespace, ensure,
    install_tierpolicy_crd, random_name, run_cluster_test, wait_for, wait_until_admitted_as, wait_until_refused,
};

/// Kueue objects after the policy is applied.
const CONVERGE: Duration = Duration::from_secs(60);
/// Kueue creates a Workload per Job, schedules and preempts in cycles; each step settles well within this.
const SCHEDULED: Duration = Duration::from_secs(180);
/// The suites' scenarios run one at a time: each installs the TierPolicy CRD and the first to finish would
/// remove it (and with it the other's policy) at cleanup.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Garbage collection after the policy is deleted runs in the controller-manager.
const GARBAGE_COLLECTION: Duration = Duration::from_secs(90);
const CLASS_LABEL: &str = "e2e.tiergate.io/gpu-class";
const GPU: &str = "nvidia.com/gpu";

/// gold: 6 H100s, a floor of 2 (lends at most 4), reclaims always.
const GOLD_GPUS: u32 = 6;
const GOLD_FLOOR: u32 = 2;
/// silver and bronze: 1 GPU of their own class each, borrowing at most 3 H100s through their h100 fallback.
const OWN_GPUS: u32 = 1;
const BORROWING_CAP: u32 = 3;

/// One run's names: everything cluster-scoped is prefixed, every namespace is new.
struct Run {
    prefix: String,
    system: String,
    policy: TierPolicy,
    /// Whether the Jobs of a one-class tier carry its class themselves (no MutatingAdmissionPolicy to give it).
    pins_class: bool,
}

impl Run {
    fn name(&self, base: &str) -> String {
        format!("{}-{base}", self.prefix)
    }

    fn namespace(&self, tier: &str) -> String {
        self.name(tier)
    }

    fn cluster_queue(&self, tier: &str) -> String {
        format!("tiergate-{}", self.name(tier))
    }
}

/// A GPU class named `<prefix>-<base>` (no node carries its label).
fn class(prefix: &str, base: &str) -> Value {
    json!({"name": format!("{prefix}-{base}"), "nodeLabels": {CLASS_LABEL: format!("{prefix}-{base}")}})
}

fn base_policy(prefix: &str, cohorts: Value, tiers: Value) -> Result<TierPolicy, HarnessError> {
    let policy: TierPolicy = serde_json::from_value(json!({
        "apiVersion": "tiergate.io/v1alpha1",
        "kind": "TierPolicy",
        "metadata": {"name": prefix},
        "spec": {
            "tierLabel": E2E_TIER_LABEL,
            "gpuClasses": [class(prefix, "h100"), class(prefix, "a100"), class(prefix, "l4")],
            "priorityBuckets": [{"name": format!("{prefix}-default"), "minScore": 0, "value": 100}],
            "scoring": {"enabled": false},
            "cohorts": cohorts,
            "tiers": tiers,
        }
    }))?;
    validate_policy(&policy).map_err(|errors| format!("the e2e policy is invalid: {errors}"))?;
    Ok(policy)
}

/// `samples/org-tree` in small: org -> research (weight 2: gold, silver), org -> batch (weight 1: bronze).
fn org_tree_policy(prefix: &str) -> Result<TierPolicy, HarnessError> {
    let name = |base: &str| format!("{prefix}-{base}");
    let borrower = |tier: &str, own_class: &str, cohort: &str| {
        json!({
            "name": name(tier), "gpuClass": name(own_class), "fallbackGpuClasses": [name("h100")], "cohort": name(cohort),
            "quotas": {GPU: {"nominal": OWN_GPUS.to_string(), "borrowingLimit": BORROWING_CAP.to_string()}},
            "sharing": {"weight": "1", "reclaim": "LowerPriority"},
        })
    };
    base_policy(
        prefix,
        json!([
            {"name": name("org")},
            {"name": name("research"), "parent": name("org"), "weight": "2"},
            {"name": name("batch"), "parent": name("org"), "weight": "1"},
        ]),
        json!([
            {"name": name("gold"), "gpuClass": name("h100"), "cohort": name("research"),
             "quotas": {GPU: {"nominal": GOLD_GPUS.to_string(), "borrowingLimit": "0"}},
             "sharing": {"floor": {GPU: GOLD_FLOOR.to_string()}, "weight": "2", "reclaim": "Always"}},
            borrower("silver", "a100", "research"),
            borrower("bronze", "l4", "batch"),
        ]),
    )
}

/// Two sibling tiers with nothing of their own, weights 2 and 1, borrowing from their cohort's pool of `pool`
/// H100s; neither reclaims, so what Kueue admits is decided by fair sharing's order alone.
fn weights_policy(prefix: &str, pool: u64) -> Result<TierPolicy, HarnessError> {
    let name = |base: &str| format!("{prefix}-{base}");
    let tier = |tier: &str, weight: &str| {
        json!({
            "name": name(tier), "gpuClass": name("h100"), "cohort": name("pool"),
            "quotas": {GPU: {"nominal": "0"}},
            "sharing": {"weight": weight, "reclaim": "Never"},
        })
    };
    base_policy(
        prefix,
        json!([
            {"name": name("org")},
            {"name": name("pool"), "parent": name("org"), "pools": {name("h100"): {GPU: {"nominal": pool.to_string()}}}},
        ]),
        json!([tier("heavy", "2"), tier("light", "1")]),
    )
}

/// Whether the Jobs must carry a one-class tier's class themselves: the API server serves no
/// MutatingAdmissionPolicy (before Kubernetes 1.36), which gives it to them otherwise; says which.
async fn jobs_pin_their_class(client: &Client, test: &str) -> Result<bool, HarnessError> {
    let served = tiergate_e2e::serves_mutating_policies(client).await?;
    if !served {
        println!(
            "{test}: the API server serves no MutatingAdmissionPolicy (before Kubernetes 1.36): a one-class tier's \
             Jobs carry their class's node selector themselves"
        );
    }
    Ok(!served)
}

/// Installs the CRD, creates the namespaces of `tiers`, starts the daemon, applies the policy and waits for the
/// tiers' LocalQueues, ClusterQueues and the Cohorts to be Active in Kueue.
async fn start(client: &Client, cleanup: &Cleanup, run: &Run, tiers: &[&str]) -> Result<InProcessDaemon, HarnessError> {
    install_tierpolicy_crd(client, cleanup).await?;
    create_namespace(client, cleanup, &run.system, &[]).await?;
    for tier in tiers {
        create_namespace(client, cleanup, &run.namespace(tier), &[(E2E_TIER_LABEL, &run.name(tier))]).await?;
    }
    let daemon = InProcessDaemon::start(client, &run.prefix, &run.system, &run.name("lease"));
    apply_policy(client, &run.policy).await?;
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &run.prefix);
    let cohorts: Vec<String> = run.policy.spec.cohorts.iter().map(|cohort| cohort.name.clone()).collect();
    wait_for("the LocalQueues, and the ClusterQueues and Cohorts Active in Kueue", CONVERGE, || async {
        for tier in tiers {
            let queues: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &run.namespace(tier), &KueueKind::LocalQueue.api_resource());
            queues.get_opt(&format!("tiergate-{}", run.name(tier))).await.ok()??;
            let queue = api(client, KueueKind::ClusterQueue).get_opt(&run.cluster_queue(tier)).await.ok()??;
            is_active(&queue).then_some(())?;
        }
        for cohort in &cohorts {
            api(client, KueueKind::Cohort).get_opt(cohort).await.ok()??;
        }
        Some(())
    })
    .await?;
    // No webhook runs here: the in-server gate confines the Jobs (its mutating half gives a one-class tier's Jobs
    // their class). Its policies, bindings and parameters reach the API server's admission informers separately, so
    // wait until the tier's validating binding refuses another tier's class, and then until a plain Job passes it.
    for tier in tiers {
        let refusal = format!("binding '{}'", gate_name(&run.name(tier)));
        let what = format!("the in-server gate to refuse another tier's class in tier {tier}");
        wait_until_refused(client, &what, CONVERGE, &foreign_class_job(run, tier)?, &refusal).await?;
        let what = format!("the in-server gate to let tier {tier}'s plain GPU Jobs through");
        wait_until_admitted_as(client, &what, CONVERGE, &one_gpu_job(run, tier, "probe")?, |_| true).await?;
    }
    Ok(daemon)
}

fn api(client: &Client, kind: KueueKind) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &kind.api_resource())
}

fn is_active(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "Active" && c["status"] == "True"))
}

/// A suspended one-GPU Job `name` in tier `tier`'s namespace, queued to its LocalQueue (and selecting a one-class
/// tier's class where `run.pins_class`).
fn one_gpu_job(run: &Run, tier: &str, name: &str) -> Result<Job, HarnessError> {
    let mut job = tiergate_e2e::one_gpu_job(&run.namespace(tier), name, &format!("tiergate-{}", run.name(tier)))?;
    let spec = run.policy.spec.tier(&run.name(tier)).ok_or_else(|| format!("no tier {tier} in the run's policy"))?;
    let classes: Vec<&str> = spec.gpu_class_names().collect();
    if let [only] = classes.as_slice()
        && run.pins_class
    {
        let template =
            job.spec.as_mut().and_then(|spec| spec.template.spec.as_mut()).ok_or("the Job has no pod template")?;
        template.node_selector = Some([(CLASS_LABEL.to_owned(), (*only).to_owned())].into());
    }
    Ok(job)
}

/// A one-GPU Job of tier `tier` that selects a GPU class the tier does not have.
fn foreign_class_job(run: &Run, tier: &str) -> Result<Job, HarnessError> {
    let spec = run.policy.spec.tier(&run.name(tier)).ok_or_else(|| format!("no tier {tier} in the run's policy"))?;
    let classes: Vec<&str> = spec.gpu_class_names().collect();
    let foreign = ["l4", "a100", "h100"]
        .map(|base| run.name(base))
        .into_iter()
        .find(|class| !classes.contains(&class.as_str()))
        .ok_or_else(|| format!("tier {tier} has every class of the run"))?;
    let mut job = one_gpu_job(run, tier, "probe-foreign")?;
    let template =
        job.spec.as_mut().and_then(|spec| spec.template.spec.as_mut()).ok_or("the Job has no pod template")?;
    template.node_selector = Some([(CLASS_LABEL.to_owned(), foreign)].into());
    Ok(job)
}

/// `count` one-GPU Jobs in tier `tier`'s namespace, queued to its LocalQueue.
async fn submit(client: &Client, run: &Run, tier: &str, count: u32) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.namespace(tier));
    for index in 0..count {
        jobs.create(&PostParams::default(), &one_gpu_job(run, tier, &format!("{tier}-{index}"))?).await?;
    }
    Ok(())
}

/// What Kueue reports for one tier: its ClusterQueue's counts and H100 usage, and its Workloads' preemptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct TierState {
    admitted: u64,
    pending: u64,
    /// GPUs in use on the h100 flavor, and how many of them are borrowed (`status.flavorsUsage`).
    h100_used: u64,
    h100_borrowed: u64,
    /// Workloads Kueue evicted to preempt them (`status.schedulingStats.evictions`, reason `Preempted`).
    preempted: u64,
}

async fn tier_state(client: &Client, run: &Run, tier: &str) -> Result<TierState, HarnessError> {
    let queue = api(client, KueueKind::ClusterQueue).get(&run.cluster_queue(tier)).await?;
    let status = &queue.data["status"];
    let count = |field: &str| status[field].as_u64().unwrap_or(0);
    let h100 = run.name("h100");
    let usage = |field: &str| {
        let flavors = status["flavorsUsage"].as_array().cloned().unwrap_or_default();
        let flavor = flavors.into_iter().find(|flavor| flavor["name"] == h100.as_str());
        let resource = flavor.and_then(|flavor| {
            flavor["resources"].as_array().and_then(|resources| resources.iter().find(|r| r["name"] == GPU).cloned())
        });
        resource.map_or(0, |resource| quantity(&resource[field]))
    };
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &run.namespace(tier), &workload_resource());
    let preempted = workloads
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|workload| {
            workload.data["status"]["schedulingStats"]["evictions"]
                .as_array()
                .is_some_and(|evictions| evictions.iter().any(|eviction| eviction["reason"] == "Preempted"))
        })
        .count();
    Ok(TierState {
        admitted: count("admittedWorkloads"),
        pending: count("pendingWorkloads"),
        h100_used: usage("total"),
        h100_borrowed: usage("borrowed"),
        preempted: u64::try_from(preempted).unwrap_or(u64::MAX),
    })
}

/// A whole quantity written as a number or a string ("3"); 0 for anything else.
fn quantity(value: &Value) -> u64 {
    value.as_u64().or_else(|| value.as_str().and_then(|text| text.parse().ok())).unwrap_or(0)
}

fn workload_resource() -> ApiResource {
    ApiResource {
        group: "kueue.x-k8s.io".to_owned(),
        version: "v1beta2".to_owned(),
        api_version: "kueue.x-k8s.io/v1beta2".to_owned(),
        kind: "Workload".to_owned(),
        plural: "workloads".to_owned(),
    }
}

/// Waits until every tier of `expected` reports exactly its state; fails with the last states seen.
async fn wait_for_states(
    client: &Client,
    run: &Run,
    what: &str,
    expected: &BTreeMap<&str, TierState>,
) -> Result<(), HarnessError> {
    let states = async || -> Option<BTreeMap<String, TierState>> {
        let mut states = BTreeMap::new();
        for tier in expected.keys() {
            states.insert((*tier).to_owned(), tier_state(client, run, tier).await.ok()?);
        }
        Some(states)
    };
    let reached = wait_for(what, SCHEDULED, || async {
        let seen = states().await?;
        expected.iter().all(|(tier, state)| seen.get(*tier) == Some(state)).then_some(())
    })
    .await;
    if let Err(error) = reached {
        return Err(format!("{error}; expected {expected:#?}; last seen {:#?}", states().await).into());
    }
    Ok(())
}

fn state(admitted: u32, pending: u32, h100_used: u32, h100_borrowed: u32, preempted: u32) -> TierState {
    TierState {
        admitted: admitted.into(),
        pending: pending.into(),
        h100_used: h100_used.into(),
        h100_borrowed: h100_borrowed.into(),
        preempted: preempted.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_gold_gpus_are_borrowed_up_to_the_cap_never_past_the_floor_and_reclaimed_when_gold_submits() {
    const TEST: &str = "idle_gold_gpus_are_borrowed_up_to_the_cap_never_past_the_floor_and_reclaimed_when_gold_submits";
    let _serial = SERIAL.lock().await;
    if let Err(error) = run_cluster_test(TEST, async |client: &Client, cleanup: &Cleanup| {
        let pins_class = jobs_pin_their_class(client, TEST).await?;
        borrow_and_reclaim(client, cleanup, pins_class).await
    })
    .await
    {
        panic!("{error}");
    }
}

async fn borrow_and_reclaim(client: &Client, cleanup: &Cleanup, pins_class: bool) -> Result<(), HarnessError> {
    let prefix = random_name("e2e");
    let run = Run { system: format!("{prefix}-system"), policy: org_tree_policy(&prefix)?, prefix, pins_class };
    let daemon = start(client, cleanup, &run, &["gold", "silver", "bronze"]).await?;
    let outcome = borrow_and_reclaim_steps(client, &run).await;
    match outcome {
        Ok(()) => restarts_without_writes_and_prunes(client, &run, daemon).await,
        Err(error) => {
            daemon.stop().await;
            Err(error)
        }
    }
}

async fn borrow_and_reclaim_steps(client: &Client, run: &Run) -> Result<(), HarnessError> {
    let lendable = GOLD_GPUS - GOLD_FLOOR;
    // 1. Gold idle: silver submits 6 one-GPU Jobs. Its own A100 takes one; the rest borrow gold's H100s, up to
    //    silver's cap of 3 (gold would lend 4).
    let silver_jobs = 6;
    submit(client, run, "silver", silver_jobs).await?;
    let silver_admitted = OWN_GPUS + BORROWING_CAP;
    let mut expected = BTreeMap::from([
        ("gold", state(0, 0, 0, 0, 0)),
        ("silver", state(silver_admitted, silver_jobs - silver_admitted, BORROWING_CAP, BORROWING_CAP, 0)),
    ]);
    wait_for_states(client, run, "silver to borrow up to its cap", &expected).await?;

    // 2. Bronze (another division) submits 4: its own L4 takes one, and only one more H100 is lendable: gold's
    //    floor of 2 is never lent.
    let bronze_jobs = 4;
    submit(client, run, "bronze", bronze_jobs).await?;
    let bronze_borrowed = lendable - BORROWING_CAP;
    let bronze_admitted = OWN_GPUS + bronze_borrowed;
    expected
        .insert("bronze", state(bronze_admitted, bronze_jobs - bronze_admitted, bronze_borrowed, bronze_borrowed, 0));
    wait_for_states(client, run, "bronze to borrow the rest of what gold lends, not its floor", &expected).await?;
    let gold = tier_state(client, run, "gold").await?;
    ensure(gold.h100_used == 0, || format!("gold's floor is untouched while idle: {gold:?}"))?;
    // `status` shows it from Kueue's own status: gold lends 4, silver borrows 3, bronze 1.
    let table = status_shows(client, run, &[("gold", "0", "4"), ("silver", "3", "0"), ("bronze", "1", "0")]).await?;
    println!("{table}");

    // 3. Gold submits 6: its floor admits 2 at once, and Kueue preempts every borrowed workload (silver's 3,
    //    bronze's 1) to admit the other 4. The preempted Jobs go back to pending; silver and bronze keep their own.
    submit(client, run, "gold", GOLD_GPUS).await?;
    expected.insert("gold", state(GOLD_GPUS, 0, GOLD_GPUS, 0, 0));
    expected.insert("silver", state(OWN_GPUS, silver_jobs - OWN_GPUS, 0, 0, BORROWING_CAP));
    expected.insert("bronze", state(OWN_GPUS, bronze_jobs - OWN_GPUS, 0, 0, bronze_borrowed));
    wait_for_states(client, run, "gold to reclaim every lent GPU by preemption", &expected).await?;
    // `why` on a preempted silver Job names the reclaim.
    let preempted = preempted_job(client, run, "silver").await?;
    let answer = build_live_answer(client, &format!("job/{preempted}"), &run.namespace("silver"), &run.prefix).await?;
    println!("why job/{preempted}: {}", answer.summary);
    ensure(answer.summary.contains("preempted by reclaim"), || {
        format!("why does not name the reclaim: {}", answer.to_table())
    })?;
    Ok(())
}

/// `kubectl tiergate status` for the run's policy shows, per tier, `(tier, borrowed, lent)` on the h100 flavor.
async fn status_shows(client: &Client, run: &Run, expected: &[(&str, &str, &str)]) -> Result<String, HarnessError> {
    let h100 = run.name("h100");
    let last = std::sync::Mutex::new(String::from("no status answer yet"));
    let shown = wait_for("status to show what each tier borrows and lends", SCHEDULED, || async {
        let fetched = fetch_status_inputs(client, Some(&run.prefix), false).await.ok()?;
        let answer = build_status_answer(&StatusInputs {
            policy: &fetched.policy,
            other_policies: &fetched.other_policies,
            cluster_queues: &fetched.cluster_queues,
            cohorts: &fetched.cohorts,
            pools: &[],
            local_queues: &[],
            tier: None,
        })
        .ok()?;
        let shows = |(tier, borrowed, lent): &(&str, &str, &str)| {
            let tier = answer.tiers.iter().find(|status| status.tier == run.name(tier))?;
            let row = tier.flavors.iter().find(|flavor| flavor.flavor == h100 && flavor.resource == GPU)?;
            (row.borrowed == *borrowed && row.lent == *lent).then_some(())
        };
        let cohorts = answer.cohorts.iter().filter(|cohort| cohort.resource == GPU).count();
        let table = answer.to_table();
        let done = expected.iter().all(|row| shows(row).is_some()) && cohorts == run.policy.spec.cohorts.len();
        if let Ok(mut last) = last.lock() {
            last.clone_from(&table);
        }
        done.then_some(table)
    })
    .await;
    shown.map_err(|error| {
        let last = last.lock().map(|last| last.clone()).unwrap_or_default();
        format!("{error}; expected (tier, borrowed, lent) on {h100}: {expected:?}; the last status:\n{last}").into()
    })
}

/// A Job of `tier` whose Workload Kueue preempted.
async fn preempted_job(client: &Client, run: &Run, tier: &str) -> Result<String, HarnessError> {
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &run.namespace(tier), &workload_resource());
    let found = workloads.list(&ListParams::default()).await?.items.into_iter().find_map(|workload| {
        let preempted = workload.data["status"]["schedulingStats"]["evictions"]
            .as_array()
            .is_some_and(|evictions| evictions.iter().any(|eviction| eviction["reason"] == "Preempted"));
        let owner =
            workload.metadata.owner_references.unwrap_or_default().into_iter().find(|owner| owner.kind == "Job");
        owner.filter(|_| preempted).map(|owner| owner.name)
    });
    found.ok_or_else(|| format!("no preempted Job in tier {tier}").into())
}

/// Deletes every Job of `tiers` and waits until Kueue has dropped their Workloads.
async fn remove_jobs(client: &Client, run: &Run, tiers: &[&str]) -> Result<(), HarnessError> {
    for tier in tiers {
        let jobs: Api<Job> = Api::namespaced(client.clone(), &run.namespace(tier));
        jobs.delete_collection(&DeleteParams::background(), &ListParams::default()).await?;
    }
    wait_for("the Jobs' Workloads to be gone", GARBAGE_COLLECTION, || async {
        for tier in tiers {
            let workloads: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &run.namespace(tier), &workload_resource());
            workloads.list(&ListParams::default()).await.ok()?.items.is_empty().then_some(())?;
        }
        Some(())
    })
    .await
}

/// Every owned object with its `metadata.generation` (which only a spec change moves; Kueue's status writes move
/// the resourceVersion), by `kind namespace/name`.
async fn owned_versions(client: &Client, policy: &str) -> Result<BTreeMap<String, i64>, HarnessError> {
    let mut versions = BTreeMap::new();
    let params = ListParams::default().labels(&build_ownership_selector(policy));
    for kind in KueueKind::ALL {
        let listed = match api(client, kind).list(&params).await {
            Ok(list) => list.items,
            // An optional kind the API server does not serve (Karpenter's NodePool without Karpenter): none owned.
            Err(kube::Error::Api(status)) if status.code == 404 && kind.is_optional() => Vec::new(),
            Err(error) => return Err(error.into()),
        };
        for object in listed {
            let key = format!("{} {}/{}", kind.name(), object.namespace().unwrap_or_default(), object.name_any());
            versions.insert(key, object.metadata.generation.unwrap_or_default());
        }
    }
    Ok(versions)
}

/// The Cohorts are owned like every other kind: a restart makes zero writes, and deleting the policy removes them.
async fn restarts_without_writes_and_prunes(
    client: &Client,
    run: &Run,
    daemon: InProcessDaemon,
) -> Result<(), HarnessError> {
    let before = owned_versions(client, &run.prefix).await?;
    let cohorts = before.keys().filter(|key| key.starts_with("Cohort ")).count();
    daemon.stop().await;
    ensure(cohorts == run.policy.spec.cohorts.len(), || format!("owned Cohorts: {before:?}"))?;
    let restarted = InProcessDaemon::start(client, &run.prefix, &run.system, &run.name("lease"));
    let settled = first_reconcile_finished(client, run, &restarted).await;
    let writes = restarted.writes_besides_checkpoints();
    let after = owned_versions(client, &run.prefix).await;
    let result = match (settled, after) {
        (Err(error), _) | (_, Err(error)) => Err(error),
        (Ok(()), Ok(after)) if writes != 0.0 || before != after => Err(format!(
            "restart made {writes} writes besides usage checkpoints; generations before {before:?} after {after:?}"
        )
        .into()),
        (Ok(()), Ok(_)) => {
            // A ClusterQueue holding workloads keeps Kueue's finalizer: the Jobs go first.
            remove_jobs(client, run, &["gold", "silver", "bronze"]).await?;
            Api::<TierPolicy>::all(client.clone()).delete(&run.prefix, &DeleteParams::background()).await?;
            wait_for("every owned object, Cohorts included, to be removed", GARBAGE_COLLECTION, || async {
                owned_versions(client, &run.prefix).await.ok()?.is_empty().then_some(())
            })
            .await
        }
    };
    restarted.stop().await;
    result
}

/// Waits until the restarted daemon leads, has synced and has *finished* its first reconcile, so that every write
/// that reconcile makes is counted before the counter is read.
///
/// `tiergate_owned_objects` is set in the middle of a reconcile, before its Events and its status write; a reconcile
/// counted from it alone could still write after the check. Reconciles of one TierPolicy never overlap, so once
/// another one has started (a tier namespace relabelled with a label no tier reads triggers it), the first has
/// finished. The run's policy is the only TierPolicy: the suites run one at a time.
async fn first_reconcile_finished(client: &Client, run: &Run, restarted: &InProcessDaemon) -> Result<(), HarnessError> {
    wait_for("the restarted daemon to lead, sync and reconcile", CONVERGE, || async {
        let reconciled = restarted.metric_sum("tiergate_owned_objects") > 0.0;
        (restarted.is_leading_and_synced() && reconciled).then_some(())
    })
    .await?;
    let started = restarted.metric_sum("tiergate_reconciles_total");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let nudge = json!({"metadata": {"labels": {"e2e.tiergate.io/nudge": run.prefix}}});
    namespaces.patch(&run.namespace("gold"), &PatchParams::default(), &Patch::Merge(&nudge)).await?;
    let next = wait_for("a second reconcile of the restarted daemon (the first one finished)", CONVERGE, || async {
        (restarted.metric_sum("tiergate_reconciles_total") > started).then_some(())
    })
    .await;
    next.map_err(|error| {
        let now = restarted.metric_sum("tiergate_reconciles_total");
        let blockers = restarted.blockers().active();
        format!("{error}: reconciles {now} (before the relabel {started}), blockers {blockers:?}").into()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tiers_competing_for_a_pool_get_it_in_proportion_to_their_weights() {
    const TEST: &str = "two_tiers_competing_for_a_pool_get_it_in_proportion_to_their_weights";
    let _serial = SERIAL.lock().await;
    if let Err(error) = run_cluster_test(TEST, async |client: &Client, cleanup: &Cleanup| {
        let pins_class = jobs_pin_their_class(client, TEST).await?;
        compete_by_weight(client, cleanup, pins_class).await
    })
    .await
    {
        panic!("{error}");
    }
}

async fn compete_by_weight(client: &Client, cleanup: &Cleanup, pins_class: bool) -> Result<(), HarnessError> {
    let prefix = random_name("e2e");
    let run = Run { system: format!("{prefix}-system"), policy: weights_policy(&prefix, 0)?, prefix, pins_class };
    let daemon = start(client, cleanup, &run, &["heavy", "light"]).await?;
    let outcome = compete_by_weight_steps(client, &run).await;
    daemon.stop().await;
    outcome
}

async fn compete_by_weight_steps(client: &Client, run: &Run) -> Result<(), HarnessError> {
    // Both tiers queue 6 Jobs while the pool is empty (light first); then the pool grows to 6 GPUs. 6 at 2:1 is
    // heavy 4, light 2, and the issue asks for that within one workload. Kueue 0.19.2 admits one head per queue
    // per scheduling cycle while both fit, so the split it reaches is 3:3 or 4:2; with nothing preempting, it is
    // final once the pool is full. (Preemption-driven rebalancing, light holding the whole pool first, stopped
    // at heavy 1, light 5 in our runs: an evicted light Job was readmitted before heavy's; see docs/guides/tier-hierarchy.md.)
    let (pool, jobs) = (6_u64, 6_u32);
    submit(client, run, "light", jobs).await?;
    submit(client, run, "heavy", jobs).await?;
    wait_for("both tiers' Jobs to wait for the empty pool", SCHEDULED, || async {
        let heavy = tier_state(client, run, "heavy").await.ok()?;
        let light = tier_state(client, run, "light").await.ok()?;
        let all_waiting = heavy.pending == u64::from(jobs) && light.pending == u64::from(jobs);
        (all_waiting && heavy.admitted + light.admitted == 0).then_some(())
    })
    .await?;
    apply_policy(client, &weights_policy(&run.prefix, pool)?).await?;
    let settled = wait_for("the grown pool to be full", SCHEDULED, || async {
        let heavy = tier_state(client, run, "heavy").await.ok()?;
        let light = tier_state(client, run, "light").await.ok()?;
        (heavy.admitted + light.admitted == pool).then_some((heavy, light))
    })
    .await;
    let (heavy, light) = match settled {
        Ok(states) => states,
        Err(error) => {
            let heavy = tier_state(client, run, "heavy").await.ok();
            let light = tier_state(client, run, "light").await.ok();
            return Err(format!("{error}; heavy {heavy:?}; light {light:?}").into());
        }
    };
    println!("weights 2:1 over {pool} GPUs: heavy {heavy:?}, light {light:?}");
    ensure(heavy.admitted.abs_diff(4) <= 1 && light.admitted.abs_diff(2) <= 1, || {
        format!(
            "heavy (weight 2) and light (weight 1) should share 6 GPUs 4:2 within one: heavy {heavy:?}, light {light:?}"
        )
    })?;
    ensure(heavy.preempted + light.preempted == 0, || format!("nothing reclaims: heavy {heavy:?}, light {light:?}"))?;
    // Kueue weighs what each borrows by the weight tiergate wrote: its weighted share per borrowed GPU is
    // 1000 / (pool x weight), so heavy's is half light's (status.fairSharing.weightedShare, rounded up).
    let share = |tier: &'static str| async move {
        let queue = api(client, KueueKind::ClusterQueue).get(&run.cluster_queue(tier)).await.ok()?;
        queue.data["status"]["fairSharing"]["weightedShare"].as_u64()
    };
    let (heavy_share, light_share) = (share("heavy").await, share("light").await);
    let per_gpu = |share: Option<u64>, admitted: u64, weight: u64| share.map(|share| share * weight / admitted.max(1));
    ensure(
        per_gpu(heavy_share, heavy.admitted, 2)
            .zip(per_gpu(light_share, light.admitted, 1))
            .is_some_and(|(h, l)| h.abs_diff(l) <= 1),
        || {
            format!(
                "weighted shares do not follow the weights 2:1: heavy {heavy_share:?} for {}, light {light_share:?} for {}",
                heavy.admitted, light.admitted
            )
        },
    )?;
    println!("weighted shares: heavy {heavy_share:?}, light {light_share:?}");
    Ok(())
}
