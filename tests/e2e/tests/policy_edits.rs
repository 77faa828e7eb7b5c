//! End-to-end test of issue 42 against a real API server with Kueue v0.19+: one policy walked through the edits a
//! platform team makes over the years, with gold Jobs admitted and pending throughout, and the in-server gate (no
//! webhook) confining them.
//!
//! 1. The h100 class gains topology levels: its flavor gets a new name (Kueue keeps `topologyName` immutable). The
//!    old flavor stays in gold's ClusterQueue frozen at what its Jobs hold, the new one gets the rest, so freed
//!    GPUs admit pending Jobs on the new flavor and gold never holds more than its quota.
//! 2. The levels change: a second new flavor; both old ones are held, and once the first old flavor's Jobs are gone
//!    it leaves the queue and its ResourceFlavor is pruned.
//! 3. The class moves to other node labels (in place: node labels are mutable).
//! 4. Gold gains a fallback class, and 5. loses it.
//! 6. Bronze's cohort is merged into gold's, and the emptied Cohort is pruned.
//! 7. Gold is renamed gold2 with its namespace: the new ClusterQueue gives up what the old one's running Jobs hold,
//!    until they finish and Kueue lets the old queue go; the Job pending in the old LocalQueue is moved to gold2's
//!    by the daemon and admitted there.
//! 8. The daemon is switched to serve another TierPolicy with the same class names and other levels.
//!
//! After each edit: the policy is Ready at its generation with no `reconcile_failing` (the time it took is printed,
//! never asserted), every Job admitted before is still admitted, and at every poll gold holds at most its quota.
//! Node objects stand in for machines (the control plane has no kubelets). Skipped (and passing) without a
//! reachable cluster or Kueue's v1beta2 CRDs.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tiergate::blockers::BlockedReason;
use tiergate::live::fetch::workload_resource;
use tiergate::plan::class_flavor_name;
use tiergate::plan::gate::gate_name;
use tiergate::plan::names::cluster_queue_name;
use tiergate::policy::TierPolicy;
use tiergate::reconcile::kinds::KueueKind;
use tiergate::validation::validate_policy;
use tiergate_e2e::{
    Cleanup, E2E_TIER_LABEL, HarnessError, InProcessDaemon, apply_policy, ensure, one_gpu_job, random_name,
    run_cluster_test, start_tiergate, wait_for, wait_until_admitted_as, wait_until_refused,
};

/// Bound on waiting for a policy edit to converge (the bar is 10 s; the time taken is printed).
const CONVERGE: Duration = Duration::from_secs(60);
/// Kueue admits in scheduling cycles; every decision here comes well within this.
const SCHEDULED: Duration = Duration::from_secs(120);
const GPU: &str = "nvidia.com/gpu";
const CLASS_LABEL: &str = "e2e.tiergate.io/gpu-class";
/// The label the h100 class moves to in step 3 (its nodes carry both from the start).
const POOL_LABEL: &str = "e2e.tiergate.io/gpu-pool";
const BLOCK_LABEL: &str = "e2e.tiergate.io/block";
const RACK_LABEL: &str = "e2e.tiergate.io/rack";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
const GOLD_GPUS: usize = 4;
const H100_NODES: usize = 8;
const A100_NODES: usize = 2;

struct Run {
    prefix: String,
    system: String,
}

impl Run {
    fn name(&self, base: &str) -> String {
        format!("{}-{base}", self.prefix)
    }

    /// The tier's namespace (named like the tier).
    fn namespace(&self, tier: &str) -> String {
        self.name(tier)
    }
}

/// One state of the policy along the walk.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    /// The h100 class's topology levels, by node label, broadest first.
    levels: &'static [&'static str],
    /// The h100 class selects its nodes by [`POOL_LABEL`] instead of [`CLASS_LABEL`].
    moved: bool,
    /// Gold falls back to a100.
    fallback: bool,
    /// Bronze sits in gold's cohort, and bronze's own cohort is gone.
    merged: bool,
    /// Gold is renamed gold2 (its namespace is relabelled with it).
    renamed: bool,
}

impl Shape {
    /// The gold tier's base name in this shape.
    fn gold(self) -> &'static str {
        if self.renamed { "gold2" } else { "gold" }
    }
}

fn build_policy(run: &Run, shape: Shape) -> Result<TierPolicy, HarnessError> {
    let name = |base: &str| run.name(base);
    let levels: Vec<Value> = shape
        .levels
        .iter()
        .map(|label| json!({"name": label.rsplit('/').next().unwrap_or(label), "nodeLabel": label}))
        .collect();
    let h100_labels = if shape.moved { json!({POOL_LABEL: name("h100")}) } else { json!({CLASS_LABEL: name("h100")}) };
    let mut cohorts = vec![json!({"name": name("gold-pool")})];
    if !shape.merged {
        cohorts.push(json!({"name": name("bronze-pool")}));
    }
    let mut gold = json!({"name": name(shape.gold()), "gpuClass": name("h100"), "cohort": name("gold-pool"),
                          "quotas": {GPU: {"nominal": GOLD_GPUS.to_string()}}, "sharing": {"reclaim": "Always"}});
    if shape.fallback {
        gold["fallbackGpuClasses"] = json!([name("a100")]);
    }
    let bronze_cohort = if shape.merged { name("gold-pool") } else { name("bronze-pool") };
    let policy: TierPolicy = serde_json::from_value(json!({
        "apiVersion": "tiergate.io/v1alpha1",
        "kind": "TierPolicy",
        "metadata": {"name": run.prefix},
        "spec": {
            "tierLabel": E2E_TIER_LABEL,
            "gpuClasses": [
                {"name": name("h100"), "nodeLabels": h100_labels, "topologyLevels": levels},
                {"name": name("a100"), "nodeLabels": {CLASS_LABEL: name("a100")}},
            ],
            "priorityBuckets": [{"name": name("default"), "minScore": 0, "value": 100}],
            "scoring": {"enabled": false},
            "cohorts": cohorts,
            "tiers": [
                gold,
                {"name": name("bronze"), "gpuClass": name("a100"), "cohort": bronze_cohort,
                 "quotas": {GPU: {"nominal": "2"}}, "sharing": {"reclaim": "Always"}},
            ],
        }
    }))?;
    validate_policy(&policy).map_err(|errors| format!("the e2e policy {shape:?} is invalid: {errors}"))?;
    Ok(policy)
}

/// The h100 flavor `shape` gives gold.
fn h100_flavor(run: &Run, shape: Shape) -> Result<String, HarnessError> {
    let policy = build_policy(run, shape)?;
    let class = policy.spec.gpu_class(&run.name("h100")).ok_or("the policy has no h100 class")?;
    Ok(class_flavor_name(class))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_walked_through_immutable_edits_converges_keeps_jobs_admitted_and_never_exceeds_quota() {
    const TEST: &str = "a_policy_walked_through_immutable_edits_converges_keeps_jobs_admitted_and_never_exceeds_quota";
    if let Err(error) = run_cluster_test(TEST, walk).await {
        panic!("{error}");
    }
}

async fn walk(client: &Client, cleanup: &Cleanup) -> Result<(), HarnessError> {
    let prefix = random_name("e2e");
    let run = Run { system: format!("{prefix}-system"), prefix };
    create_nodes(client, cleanup, &run).await?;
    let start = Shape::default();
    let policy = build_policy(&run, start)?;
    let tenants: Vec<(String, Vec<(&str, String)>)> =
        ["gold", "bronze"].iter().map(|tier| (run.namespace(tier), vec![(E2E_TIER_LABEL, run.name(tier))])).collect();
    let labels: Vec<Vec<(&str, &str)>> =
        tenants.iter().map(|(_, labels)| labels.iter().map(|(key, value)| (*key, value.as_str())).collect()).collect();
    let tenants: Vec<(&str, &[(&str, &str)])> =
        tenants.iter().zip(&labels).map(|((namespace, _), labels)| (namespace.as_str(), labels.as_slice())).collect();
    let daemon = start_tiergate(client, cleanup, &policy, &run.system, &tenants).await?;
    let outcome = walk_steps(client, &run, &daemon).await;
    daemon.stop().await;
    let (shape, admitted) = outcome?;
    switch_served_policy(client, cleanup, &run, shape, &admitted).await
}

/// 8. The daemon is switched to serve another TierPolicy with the same classes and tiers but other levels: its
///    flavors have other names, so nothing it applies over the first policy's queues is refused.
async fn switch_served_policy(
    client: &Client,
    cleanup: &Cleanup,
    run: &Run,
    last: Shape,
    admitted: &BTreeMap<String, String>,
) -> Result<(), HarnessError> {
    let shape = Shape { levels: &[BLOCK_LABEL, HOSTNAME_LABEL], ..last };
    let mut other = build_policy(run, shape)?;
    let name = run.name("other");
    other.metadata.name = Some(name.clone());
    cleanup.track(ApiResource::erase::<TierPolicy>(&()), None, &name);
    let daemon = InProcessDaemon::start(client, &name, &run.system, &format!("{name}-lease"));
    let outcome = async {
        converge_policy(client, &daemon, &other, "the served policy switched").await?;
        still_admitted(client, run, admitted).await?;
        let flavor = h100_flavor(run, shape)?;
        let queue = api(client, KueueKind::ClusterQueue).get(&cluster_queue_name(&run.name(shape.gold()))).await?;
        let listed = queue.data["spec"]["resourceGroups"][0]["flavors"][0]["name"].clone();
        ensure(listed == json!(flavor), || format!("gold's queue lists {listed} first, not {flavor}"))
    }
    .await;
    daemon.stop().await;
    outcome
}

/// Steps 1 to 7; returns the last shape and the Jobs admitted at the end, by flavor.
async fn walk_steps(
    client: &Client,
    run: &Run,
    daemon: &InProcessDaemon,
) -> Result<(Shape, BTreeMap<String, String>), HarnessError> {
    let mut shape = Shape::default();
    converge(client, run, daemon, shape, "the first policy").await?;
    wait_until_gate_confines(client, run, "gold").await?;
    submit(client, run, "gold", 0..6).await?;
    let original = h100_flavor(run, shape)?;
    let admitted = wait_admitted(client, run, GOLD_GPUS, "4 of gold's 6 Jobs").await?;
    ensure(admitted.values().all(|flavor| *flavor == original), || format!("admitted: {admitted:?}"))?;
    // tiergate reads what a flavor holds from Kueue's ClusterQueue status, which Kueue writes a moment after it
    // admits (docs/reconcile.md, "Flavor migrations"): the edit comes once it shows all four.
    gold_reservation_shows(client, run, &original, "4").await?;

    // 1. Topology levels added: a new flavor; the old one is kept at the 4 GPUs its Jobs hold, and what they free
    //    moves to the new one. Kueue treats a queue as topology-aware only when every flavor is, so the 2 pending
    //    Jobs (no topology asked) wait until the old flavor is empty; then it is pruned and they are admitted.
    shape.levels = &[BLOCK_LABEL, RACK_LABEL, HOSTNAME_LABEL];
    let racks = h100_flavor(run, shape)?;
    ensure(racks != original, || format!("the flavor kept its name {racks} with topology levels"))?;
    converge(client, run, daemon, shape, "topology levels added").await?;
    expect_gold_flavors(client, run, &[(&racks, "0"), (&original, "4")]).await?;
    let status = Api::<TierPolicy>::all(client.clone()).get(&run.prefix).await?.status.unwrap_or_default();
    let listed: Vec<(&str, Option<&String>)> =
        status.flavor_migrations.iter().map(|drain| (drain.flavor.as_str(), drain.held.get(GPU))).collect();
    ensure(listed == vec![(original.as_str(), Some(&"4".to_owned()))], || {
        format!("status.flavorMigrations: {:?}", status.flavor_migrations)
    })?;
    still_admitted(client, run, &admitted).await?;
    free(client, run, &original, 2).await?;
    expect_gold_flavors(client, run, &[(&racks, "2"), (&original, "2")]).await?;
    free(client, run, &original, 2).await?;
    flavor_pruned(client, &original).await?;
    expect_gold_flavors(client, run, &[(&racks, "4")]).await?;
    let admitted = wait_admitted(client, run, 2, "the 2 pending Jobs on the new flavor").await?;
    ensure(admitted.values().all(|flavor| *flavor == racks), || format!("{admitted:?}"))?;
    submit(client, run, "gold", 6..8).await?;
    let admitted = wait_admitted(client, run, GOLD_GPUS, "2 more Jobs on the new flavor").await?;

    // 2. Levels changed: both flavors are topology-aware, so what the old one frees admits pending Jobs on the new
    //    one at once; the old flavor and its Topology go once its Jobs do.
    submit(client, run, "gold", 8..10).await?;
    gold_reservation_shows(client, run, &racks, "4").await?;
    shape.levels = &[RACK_LABEL, HOSTNAME_LABEL];
    let hosts = h100_flavor(run, shape)?;
    converge(client, run, daemon, shape, "topology levels changed").await?;
    expect_gold_flavors(client, run, &[(&hosts, "0"), (&racks, "4")]).await?;
    still_admitted(client, run, &admitted).await?;
    free(client, run, &racks, 2).await?;
    let admitted = wait_admitted(client, run, GOLD_GPUS, "the 2 pending Jobs on the newest flavor").await?;
    ensure(admitted.values().filter(|flavor| **flavor == hosts).count() == 2, || format!("{admitted:?}"))?;
    let racks_topology = api(client, KueueKind::ResourceFlavor).get(&racks).await?.data["spec"]["topologyName"]
        .as_str()
        .map(str::to_owned)
        .ok_or("the first topology flavor names no Topology")?;
    free(client, run, &racks, 2).await?;
    flavor_pruned(client, &racks).await?;
    let what = format!("the first Topology {racks_topology}, unused, to be pruned");
    object_gone(client, KueueKind::Topology, &racks_topology, &what).await?;
    expect_gold_flavors(client, run, &[(&hosts, "4")]).await?;
    let admitted = wait_admitted(client, run, 2, "gold's 2 Jobs left").await?;

    // 3. The class moves to other node labels: the same flavor, relabelled in place.
    shape.moved = true;
    converge(client, run, daemon, shape, "the class moved to other node labels").await?;
    let flavor = api(client, KueueKind::ResourceFlavor).get(&hosts).await?;
    ensure(flavor.data["spec"]["nodeLabels"][POOL_LABEL] == json!(run.name("h100")), || {
        format!("flavor {hosts} after the move: {}", flavor.data["spec"])
    })?;
    still_admitted(client, run, &admitted).await?;

    // 4 and 5. A fallback class added, then removed.
    shape.fallback = true;
    converge(client, run, daemon, shape, "a fallback class added").await?;
    still_admitted(client, run, &admitted).await?;
    shape.fallback = false;
    converge(client, run, daemon, shape, "the fallback class removed").await?;
    still_admitted(client, run, &admitted).await?;

    // 6. Two cohorts merged: bronze joins gold's, and bronze's Cohort goes.
    shape.merged = true;
    converge(client, run, daemon, shape, "two cohorts merged").await?;
    still_admitted(client, run, &admitted).await?;
    let bronze_pool = run.name("bronze-pool");
    let what = format!("the emptied Cohort {bronze_pool} to be pruned");
    object_gone(client, KueueKind::Cohort, &bronze_pool, &what).await?;
    still_admitted(client, run, &admitted).await?;

    // 7. Gold renamed gold2, its namespace relabelled: a new ClusterQueue and LocalQueue. Kueue keeps the old queue,
    //    terminating, until its running Jobs finish, and the new one gives up what they hold. The Job still pending
    //    in the old LocalQueue is moved to gold2's by the daemon (its queue label relabelled, an update the in-server
    //    gate decides like a tenant's), and admitted there as the old Jobs finish.
    submit(client, run, "gold", 10..13).await?;
    let before_rename = wait_admitted(client, run, GOLD_GPUS, "2 more of gold's Jobs, the third pending").await?;
    gold_reservation_shows(client, run, &hosts, "4").await?;
    let pending: Vec<String> =
        (10..13).map(|index| format!("job-{index}")).filter(|job| !before_rename.contains_key(job)).collect();
    ensure(pending.len() == 1, || format!("expected one pending Job of job-10..12, admitted: {before_rename:?}"))?;
    shape.renamed = true;
    converge(client, run, daemon, shape, "gold renamed gold2").await?;
    relabel(client, run, "gold2").await?;
    expect_queue_flavors(client, run, "gold2", &[(&hosts, "0")]).await?;
    let moved_at = Instant::now();
    requeued_to(client, run, &pending[0], "gold2").await?;
    println!("policy edit (pending Job moved to the renamed tier's queue): {:?}", moved_at.elapsed());
    still_admitted(client, run, &before_rename).await?;
    wait_until_gate_confines(client, run, "gold2").await?;
    submit(client, run, "gold2", 13..14).await?;
    let running: Vec<String> = admitted.keys().cloned().collect();
    delete_jobs(client, run, &running).await?;
    let admitted =
        wait_admitted(client, run, GOLD_GPUS, "the moved Job and gold2's own beside the 2 still running").await?;
    ensure(admitted.contains_key(&pending[0]) && admitted.contains_key("job-13"), || format!("{admitted:?}"))?;
    let old_running: Vec<String> = before_rename.keys().filter(|job| !running.contains(job)).cloned().collect();
    delete_jobs(client, run, &old_running).await?;
    let old_queue = cluster_queue_name(&run.name("gold"));
    let what = format!("the retired ClusterQueue {old_queue}, released, to go");
    object_gone(client, KueueKind::ClusterQueue, &old_queue, &what).await?;
    expect_queue_flavors(client, run, "gold2", &[(&hosts, "4")]).await?;
    let admitted = wait_admitted(client, run, 2, "the renamed tier's 2 Jobs").await?;
    Ok((shape, admitted))
}

/// Waits until Job `job` of gold's namespace carries the LocalQueue of tier `tier` and Kueue has moved its Workload
/// there (Kueue follows a suspended Job's queue label: `jobframework.QueueNameChange`).
async fn requeued_to(client: &Client, run: &Run, job: &str, tier: &str) -> Result<(), HarnessError> {
    let queue = format!("tiergate-{}", run.name(tier));
    let namespace = run.namespace("gold");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &namespace);
    let workloads: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &workload_resource());
    let last = Mutex::new(String::from("no answer yet"));
    let moved = wait_for(
        &format!("Job {job}, pending in the retired LocalQueue, to be moved to {queue}"),
        CONVERGE,
        || async {
            let found = jobs.get(job).await.ok()?;
            let labelled = found.labels().get("kueue.x-k8s.io/queue-name").cloned();
            let uid = found.uid()?;
            let workload = workloads
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|workload| workload.owner_references().iter().any(|owner| owner.uid == uid));
            let queue_name = workload.as_ref().map(|workload| workload.data["spec"]["queueName"].clone());
            if let Ok(mut last) = last.lock() {
                *last = format!("the Job's queue label {labelled:?}, its Workload's spec.queueName {queue_name:?}");
            }
            (labelled.as_deref() == Some(queue.as_str()) && queue_name == Some(json!(queue))).then_some(())
        },
    )
    .await;
    moved.map_err(|error| format!("{error}; {}", last.lock().map(|last| last.clone()).unwrap_or_default()).into())
}

/// Relabels gold's namespace into tier `tier`.
async fn relabel(client: &Client, run: &Run, tier: &str) -> Result<(), HarnessError> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {E2E_TIER_LABEL: run.name(tier)}}});
    namespaces.patch(&run.namespace("gold"), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Waits until the ResourceFlavor `flavor`, released by every queue, is pruned.
async fn flavor_pruned(client: &Client, flavor: &str) -> Result<(), HarnessError> {
    object_gone(client, KueueKind::ResourceFlavor, flavor, &format!("flavor {flavor}, released, to be pruned")).await
}

/// Waits until the cluster-scoped `kind` `name` is gone; on timeout says what holds it (its deletion, finalizers
/// and conditions) and which ClusterQueues still list it as a flavor.
async fn object_gone(client: &Client, kind: KueueKind, name: &str, what: &str) -> Result<(), HarnessError> {
    let gone =
        wait_for(what, CONVERGE, || async { api(client, kind).get_opt(name).await.ok()?.is_none().then_some(()) })
            .await;
    let Err(error) = gone else { return Ok(()) };
    let found = api(client, kind).get_opt(name).await.ok().flatten().map(|object| {
        format!(
            "deleting {}, finalizers {:?}, conditions {}",
            object.metadata.deletion_timestamp.is_some(),
            object.finalizers(),
            object.data["status"]["conditions"]
        )
    });
    let queues = api(client, KueueKind::ClusterQueue).list(&ListParams::default()).await;
    let listing: Vec<String> = queues
        .map(|list| list.items)
        .unwrap_or_default()
        .iter()
        .filter(|queue| queue.data["spec"]["resourceGroups"].to_string().contains(&format!("\"{name}\"")))
        .map(ResourceExt::name_any)
        .collect();
    Err(format!("{error}; {} {name} now: {found:?}; ClusterQueues naming it: {listing:?}", kind.name()).into())
}

fn api(client: &Client, kind: KueueKind) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &kind.api_resource())
}

/// Applies `shape` and waits until the policy is Ready at its new generation with no reconcile blocker; prints the
/// time it took.
async fn converge(
    client: &Client,
    run: &Run,
    daemon: &InProcessDaemon,
    shape: Shape,
    edit: &str,
) -> Result<(), HarnessError> {
    converge_policy(client, daemon, &build_policy(run, shape)?, edit).await
}

/// Applies `policy` and waits until it is Ready at its new generation with no reconcile blocker; prints the time.
async fn converge_policy(
    client: &Client,
    daemon: &InProcessDaemon,
    policy: &TierPolicy,
    edit: &str,
) -> Result<(), HarnessError> {
    let started = Instant::now();
    apply_policy(client, policy).await?;
    let name = policy.name_any();
    let policies: Api<TierPolicy> = Api::all(client.clone());
    let generation = policies.get(&name).await?.metadata.generation.ok_or("the policy has no generation")?;
    let converged = wait_for(&format!("the policy to converge after {edit}"), CONVERGE, || async {
        let status = policies.get_opt(&name).await.ok()??.status?;
        let ready = status.conditions.iter().any(|condition| {
            condition.type_ == "Ready"
                && condition.status == "True"
                && condition.observed_generation == Some(generation)
        });
        let clean = status.last_error.as_deref().is_none_or(str::is_empty);
        (ready && clean && !daemon.blockers().is_active(BlockedReason::ReconcileFailing)).then_some(())
    })
    .await;
    if let Err(error) = converged {
        let status = policies.get_opt(&name).await.ok().flatten().and_then(|policy| policy.status);
        let conditions: Vec<String> = status
            .iter()
            .flat_map(|status| &status.conditions)
            .map(|c| {
                format!(
                    "{}={} ({}: {}) at generation {:?}",
                    c.type_, c.status, c.reason, c.message, c.observed_generation
                )
            })
            .collect();
        let last_error = status.as_ref().and_then(|status| status.last_error.clone());
        return Err(format!(
            "{error}: wanted Ready=True at generation {generation}, no last error and no reconcile_failing blocker; \
             found conditions {conditions:?}, last error {last_error:?}, blockers {:?}",
            daemon.blockers().active()
        )
        .into());
    }
    println!("{edit}: converged in {:?} (generation {generation})", started.elapsed());
    Ok(())
}

/// Waits until gold's validating binding refuses another tier's class and then lets a plain GPU Job through: the
/// in-server gate, loaded by the API server's informers on their own time, confines gold's Jobs.
async fn wait_until_gate_confines(client: &Client, run: &Run, tier: &str) -> Result<(), HarnessError> {
    let mut foreign = gold_job(run, tier, "probe-foreign")?;
    let template = foreign.spec.as_mut().and_then(|spec| spec.template.spec.as_mut()).ok_or("no pod template")?;
    template.node_selector = Some([(CLASS_LABEL.to_owned(), run.name("a100"))].into());
    let refusal = format!("binding '{}'", gate_name(&run.name(tier)));
    wait_until_refused(client, "the in-server gate to refuse bronze's class in gold", CONVERGE, &foreign, &refusal)
        .await?;
    let probe = gold_job(run, tier, "probe")?;
    wait_until_admitted_as(client, "the in-server gate to pass a plain gold Job", CONVERGE, &probe, |_| true).await
}

/// A suspended one-GPU Job `name` in gold's namespace, queued to the LocalQueue of tier `tier` (gold, or gold2
/// once renamed).
fn gold_job(run: &Run, tier: &str, name: &str) -> Result<Job, HarnessError> {
    one_gpu_job(&run.namespace("gold"), name, &format!("tiergate-{}", run.name(tier)))
}

/// Creates Jobs `job-<index>` for `indexes` in gold's namespace, queued to tier `tier`.
async fn submit(client: &Client, run: &Run, tier: &str, indexes: std::ops::Range<usize>) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.namespace("gold"));
    for index in indexes {
        jobs.create(&PostParams::default(), &gold_job(run, tier, &format!("job-{index}"))?).await?;
    }
    Ok(())
}

/// Gold's Jobs that hold quota, with the GPU flavor of each; fails when they hold more than gold's quota.
async fn quota_held(client: &Client, run: &Run) -> Result<BTreeMap<String, String>, HarnessError> {
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &run.namespace("gold"), &workload_resource());
    let mut held = BTreeMap::new();
    for workload in workloads.list(&ListParams::default()).await?.items {
        let reserved = workload.data["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "QuotaReserved" && c["status"] == "True"));
        let job = workload.owner_references().iter().find(|owner| owner.kind == "Job").map(|owner| owner.name.clone());
        let flavor = workload.data["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU].as_str();
        if let (true, Some(job), Some(flavor)) = (reserved, job, flavor) {
            held.insert(job, flavor.to_owned());
        }
    }
    ensure(held.len() <= GOLD_GPUS, || format!("gold holds {} GPUs, more than its {GOLD_GPUS}: {held:?}", held.len()))?;
    Ok(held)
}

/// Waits until exactly `count` gold Jobs hold quota (checking the quota at every poll); by Job, their flavors.
async fn wait_admitted(
    client: &Client,
    run: &Run,
    count: usize,
    what: &str,
) -> Result<BTreeMap<String, String>, HarnessError> {
    let over = Mutex::new(None);
    let found = wait_for(what, SCHEDULED, || async {
        match quota_held(client, run).await {
            Ok(held) => (held.len() == count).then_some(held),
            Err(error) => {
                if let Ok(mut over) = over.lock() {
                    *over = Some(error.to_string());
                }
                None
            }
        }
    })
    .await;
    match (over.into_inner().ok().flatten(), found) {
        (Some(over), _) => Err(over.into()),
        (None, Ok(found)) => Ok(found),
        (None, Err(error)) => Err(format!("{error}\n{}", describe_gold(client, run).await).into()),
    }
}

/// Gold's ClusterQueue (flavors, quota, reservation) and why its pending Workloads wait, for failure messages.
async fn describe_gold(client: &Client, run: &Run) -> String {
    let queue = api(client, KueueKind::ClusterQueue).get_opt(&cluster_queue_name(&run.name("gold"))).await;
    let queue = queue.ok().flatten().map(|queue| queue.data).unwrap_or_default();
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &run.namespace("gold"), &workload_resource());
    let waiting: Vec<String> = workloads
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default()
        .iter()
        .filter_map(|workload| {
            let conditions = workload.data["status"]["conditions"].as_array()?;
            let quota = conditions.iter().find(|condition| condition["type"] == "QuotaReserved")?;
            (quota["status"] != "True").then(|| format!("{}: {}", workload.name_any(), quota["message"]))
        })
        .collect();
    format!(
        "gold's ClusterQueue: flavors {} reservation {}; waiting: {waiting:?}",
        queue["spec"]["resourceGroups"], queue["status"]["flavorsReservation"]
    )
}

/// Every Job of `before` still holds quota, on the same flavor.
async fn still_admitted(client: &Client, run: &Run, before: &BTreeMap<String, String>) -> Result<(), HarnessError> {
    let now = quota_held(client, run).await?;
    let lost: Vec<&String> =
        before.iter().filter(|(job, flavor)| now.get(*job) != Some(flavor)).map(|(job, _)| job).collect();
    ensure(lost.is_empty(), || format!("Jobs no longer admitted as before: {lost:?}; now {now:?}"))
}

/// Deletes `count` of the gold Jobs that hold quota on `flavor` now and waits until their Workloads are gone.
async fn free(client: &Client, run: &Run, flavor: &str, count: usize) -> Result<Vec<String>, HarnessError> {
    let held = quota_held(client, run).await?;
    let chosen: Vec<String> =
        held.iter().filter(|(_, on)| *on == flavor).map(|(job, _)| job.clone()).take(count).collect();
    ensure(chosen.len() == count, || format!("fewer than {count} Jobs on {flavor}: {held:?}"))?;
    delete_jobs(client, run, &chosen).await?;
    Ok(chosen)
}

/// Deletes the Jobs `names` of gold's namespace and waits until their Workloads no longer hold quota.
async fn delete_jobs(client: &Client, run: &Run, names: &[String]) -> Result<(), HarnessError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &run.namespace("gold"));
    for job in names {
        jobs.delete(job, &DeleteParams::background()).await?;
    }
    let gone = wait_for("the deleted Jobs' Workloads to be gone", SCHEDULED, || async {
        let held = quota_held(client, run).await.ok()?;
        names.iter().all(|job| !held.contains_key(job)).then_some(())
    })
    .await;
    let Err(error) = gone else { return Ok(()) };
    let held = quota_held(client, run).await.map_err(|error| error.to_string());
    Err(format!("{error}: deleted {names:?}; quota held now {held:?}\n{}", describe_gold(client, run).await).into())
}

/// Waits until gold's ClusterQueue status shows `total` GPUs reserved on `flavor`.
async fn gold_reservation_shows(client: &Client, run: &Run, flavor: &str, total: &str) -> Result<(), HarnessError> {
    let queue = cluster_queue_name(&run.name("gold"));
    let shown =
        wait_for(&format!("ClusterQueue {queue}'s status to show {total} GPUs held on {flavor}"), CONVERGE, || async {
            let live = api(client, KueueKind::ClusterQueue).get(&queue).await.ok()?;
            let flavors = live.data["status"]["flavorsReservation"].as_array()?.clone();
            let entry = flavors.iter().find(|entry| entry["name"] == flavor)?;
            let gpus = entry["resources"].as_array()?.iter().find(|resource| resource["name"] == GPU)?;
            (gpus["total"].as_str() == Some(total)).then_some(())
        })
        .await;
    let Err(error) = shown else { return Ok(()) };
    let held = quota_held(client, run).await.map_err(|error| error.to_string());
    Err(format!("{error}; quota held by gold's Jobs now {held:?}\n{}", describe_gold(client, run).await).into())
}

/// Gold's live ClusterQueue lists exactly `expected` (flavor, nominal GPU quota), in order.
async fn expect_gold_flavors(client: &Client, run: &Run, expected: &[(&str, &str)]) -> Result<(), HarnessError> {
    expect_queue_flavors(client, run, "gold", expected).await
}

/// Tier `tier`'s live ClusterQueue lists exactly `expected` (flavor, nominal GPU quota), in order.
async fn expect_queue_flavors(
    client: &Client,
    run: &Run,
    tier: &str,
    expected: &[(&str, &str)],
) -> Result<(), HarnessError> {
    let queue = cluster_queue_name(&run.name(tier));
    let wanted: Vec<(String, String)> =
        expected.iter().map(|(flavor, nominal)| ((*flavor).to_owned(), (*nominal).to_owned())).collect();
    let last = Mutex::new(Vec::new());
    let found = wait_for(&format!("ClusterQueue {queue} to list {wanted:?}"), CONVERGE, || async {
        let live = api(client, KueueKind::ClusterQueue).get(&queue).await.ok()?;
        let flavors = live.data["spec"]["resourceGroups"][0]["flavors"].as_array().cloned().unwrap_or_default();
        let listed: Vec<(String, String)> = flavors
            .iter()
            .map(|flavor| {
                let name = flavor["name"].as_str().unwrap_or_default().to_owned();
                let nominal = flavor["resources"][0]["nominalQuota"].as_str().unwrap_or_default().to_owned();
                (name, nominal)
            })
            .collect();
        let matches = listed == wanted;
        if let Ok(mut last) = last.lock() {
            *last = listed;
        }
        matches.then_some(())
    })
    .await;
    let last = last.into_inner().unwrap_or_default();
    found.map_err(|error| format!("{error}; the queue lists {last:?}").into())
}

/// 8 h100 nodes (two racks of four, one block, labelled for both the class label and the pool label) and 2 a100
/// nodes, one GPU each, Ready and untainted.
async fn create_nodes(client: &Client, cleanup: &Cleanup, run: &Run) -> Result<(), HarnessError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let h100 = (0..H100_NODES).map(|index| {
        let labels = json!({CLASS_LABEL: run.name("h100"), POOL_LABEL: run.name("h100"),
                            BLOCK_LABEL: run.name("block-0"), RACK_LABEL: run.name(&format!("rack-{}", index / 4))});
        (format!("{}-h100-{index}", run.prefix), labels)
    });
    let a100 =
        (0..A100_NODES).map(|index| (format!("{}-a100-{index}", run.prefix), json!({CLASS_LABEL: run.name("a100")})));
    for (name, mut labels) in h100.chain(a100) {
        labels[HOSTNAME_LABEL] = json!(name);
        let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                                                       "metadata": {"name": name, "labels": labels}}))?;
        nodes.create(&PostParams::default(), &node).await?;
        cleanup.track(ApiResource::erase::<Node>(&()), None, &name);
        let resources = json!({GPU: "1", "cpu": "8", "memory": "32Gi", "pods": "110"});
        let status = json!({"status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake node of the policy-edits e2e test"}],
        }});
        nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
        // A new node is tainted not-ready until the node lifecycle controller, off here, sees it Ready.
        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": []}}))).await?;
    }
    Ok(())
}
