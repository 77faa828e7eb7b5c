//! Mocked-API-server tests of the policy status's two writers: the reconcile's status apply (field manager
//! `tiergate`) and the usage checkpoint's (`tiergate-usage`) never erase each other's fields, in any order.
//!
//! The mocked API server keeps, per field manager, the top-level `status` fields its last apply set, as server-side
//! apply does: an apply takes the fields it sends (from any other manager, being forced) and gives up those it
//! sent before and no longer sends; the stored status is every manager's fields. The live proof against a real API
//! server is the gpu_budgets end-to-end suite.

use std::sync::Mutex as StdMutex;
use std::time::Duration;

use serde_json::Map;

use super::super::kinds::FIELD_MANAGER;
use super::super::usage::{USAGE_FIELD_MANAGER, UsageCheckpoints, checkpoint};
use super::*;
use crate::cache::workloads::now_second;
use crate::usage::{Admission, WorkloadLedger, WorkloadObservation};

/// The stored `status` of the policy, by the field manager that last applied each top-level field.
#[derive(Default)]
struct StatusOwners {
    fields: BTreeMap<String, (String, Value)>,
}

impl StatusOwners {
    /// A forced apply of `status` by `manager`.
    fn apply(&mut self, manager: &str, status: &Map<String, Value>) {
        self.fields.retain(|field, (owner, _)| owner != manager || status.contains_key(field));
        for (field, value) in status {
            self.fields.insert(field.clone(), (manager.to_owned(), value.clone()));
        }
    }

    fn status(&self) -> Value {
        Value::Object(self.fields.iter().map(|(field, (_, value))| (field.clone(), value.clone())).collect())
    }
}

/// The `fieldManager` of a call's query.
fn field_manager(call: &Call) -> Option<&str> {
    call.query.split('&').find_map(|pair| pair.strip_prefix("fieldManager="))
}

/// Answers status applies as server-side apply stores them (in `owners`), everything else as [`echo_server`].
fn owning_server(policy: TierPolicy, owners: Arc<StdMutex<StatusOwners>>) -> Responder {
    let mut echo = echo_server(policy.clone());
    Box::new(move |call| {
        if call.method != "PATCH" || !call.path.ends_with("/status") {
            return echo(call);
        }
        let manager = field_manager(call).unwrap_or_default().to_owned();
        let sent = call.body["status"].as_object().cloned().unwrap_or_default();
        let mut owners = owners.lock().unwrap();
        owners.apply(&manager, &sent);
        let mut stored = serde_json::to_value(&policy).unwrap();
        stored["status"] = owners.status();
        (StatusCode::OK, stored)
    })
}

/// `policy` at `generation` with the status the mocked API server stores.
fn as_stored(policy: &TierPolicy, generation: i64, owners: &StdMutex<StatusOwners>) -> TierPolicy {
    let mut stored = policy.clone();
    stored.metadata.generation = Some(generation);
    stored.status = Some(serde_json::from_value(owners.lock().unwrap().status()).unwrap());
    stored
}

/// A ledger that has listed one bronze workload admitted `seconds_ago`, still running, holding one GPU.
fn ledger_with_a_running_gpu_workload(seconds_ago: i64) -> crate::cache::workloads::SharedLedger {
    let mut ledger = WorkloadLedger::default();
    let now = now_second();
    ledger.begin_list();
    let admission = Admission {
        cluster_queue: "tiergate-bronze".to_owned(),
        usage: BTreeMap::from([("nvidia.com/gpu".to_owned(), 1000)]),
        since: now - seconds_ago,
        finished_at: None,
    };
    let observation = WorkloadObservation {
        uid: "workload-uid".to_owned(),
        namespace: "team-b".to_owned(),
        admission: Some(admission),
        stopped_at: None,
    };
    ledger.observe(observation, now);
    ledger.end_list(now);
    Arc::new(StdMutex::new(ledger))
}

/// Sets the snapshot's policy (what the checkpoint reads its last count from).
fn serve(snapshot: &SharedSnapshot, policy: &TierPolicy) {
    let mut next = (**snapshot.load()).clone();
    next.policy = Some(Arc::new(policy.clone()));
    snapshot.store(Arc::new(next));
}

#[tokio::test]
async fn the_reconciles_status_writes_and_the_usage_checkpoints_never_erase_each_others_fields() {
    let policy = sample_policy();
    let snapshot = snapshot_with(&[("team-a", "gold"), ("team-b", "bronze")]);
    let owners = Arc::new(StdMutex::new(StatusOwners::default()));
    let (client, api) = MockApi::start(owning_server(policy.clone(), owners.clone()));
    let gate = WriteGate::always_open();
    let ctx = context(client.clone(), snapshot.clone(), stores_with(vec![]), gate.clone());
    ctx.assume_kueue_discovered();
    let reporter = kube::runtime::events::Reporter { controller: "tiergate".to_owned(), instance: None };
    let recorder = kube::runtime::events::Recorder::new(client.clone(), reporter);
    let usage_loop = UsageCheckpoints {
        client,
        policy_name: "default".to_owned(),
        identity: "test".to_owned(),
        interval: Duration::from_secs(60),
        snapshot: snapshot.clone(),
        ledger: ledger_with_a_running_gpu_workload(30),
        gate,
        metrics: Arc::new(Metrics::new()),
    };
    let stored_usage = || owners.lock().unwrap().status().get("usage").cloned();
    let stored_generation = || owners.lock().unwrap().status().get("observedGeneration").cloned();

    // The reconcile writes the status first; then a checkpoint adds the usage.
    reconcile(Arc::new(policy.clone()), ctx.clone()).await.unwrap();
    assert_eq!(stored_generation(), Some(json!(1)));
    serve(&snapshot, &as_stored(&policy, 1, &owners));
    let first = checkpoint(&usage_loop, &recorder, None).await.unwrap().expect("a checkpoint was written");
    assert_eq!(stored_usage(), Some(serde_json::to_value(&first).unwrap()));
    assert_eq!(stored_generation(), Some(json!(1)), "the usage write kept the reconcile's fields");

    // A policy edit: the reconcile writes its status again, and the usage stays.
    let edited = as_stored(&policy, 2, &owners);
    reconcile(Arc::new(edited.clone()), ctx.clone()).await.unwrap();
    assert_eq!(stored_generation(), Some(json!(2)));
    assert_eq!(stored_usage(), Some(serde_json::to_value(&first).unwrap()), "the status write kept the usage");

    // The next checkpoint (a later second) replaces the usage and keeps the edit's status.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    serve(&snapshot, &as_stored(&policy, 2, &owners));
    let second = checkpoint(&usage_loop, &recorder, Some(&first)).await.unwrap().expect("a second checkpoint");
    assert_ne!(first, second);
    assert_eq!(stored_usage(), Some(serde_json::to_value(&second).unwrap()));
    assert_eq!(stored_generation(), Some(json!(2)), "the second usage write kept the reconcile's fields");
    let stored = owners.lock().unwrap().status();
    assert!(stored["conditions"].as_array().is_some_and(|conditions| !conditions.is_empty()), "{stored}");

    drop((usage_loop, recorder));
    let calls = api.finish(ctx).await;
    let status_writes: Vec<&Call> = calls.iter().filter(|call| call.path.ends_with("/status")).collect();
    let by = |manager: &str| status_writes.iter().filter(|call| field_manager(call) == Some(manager)).count();
    assert_eq!((by(FIELD_MANAGER), by(USAGE_FIELD_MANAGER)), (2, 2), "{status_writes:?}");
    for call in status_writes {
        let sent: Vec<&String> = call.body["status"].as_object().unwrap().keys().collect();
        if field_manager(call) == Some(USAGE_FIELD_MANAGER) {
            assert_eq!(sent, ["usage"], "the checkpoint sends the usage alone");
        } else {
            assert!(!sent.iter().any(|field| *field == "usage"), "the reconcile never sends the usage: {sent:?}");
        }
        assert!(call.query.contains("force=true"), "{}", call.query);
    }
}
