//! The Kueue Workload watch that feeds the usage ledger: each Workload decoded leanly (identity, the `Admitted`,
//! `Finished` conditions, the admission's ClusterQueue and `resourceUsage`; never its pod templates) into the
//! core's `WorkloadObservation`, deletions and relists recorded with the moment they were seen; does I/O (spawns the
//! watch).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use serde::Deserialize;
use tiergate_kueue::read::{ADMITTED, FINISHED};

use super::kinds::{KUEUE_GROUP, KUEUE_VERSION};
use super::wiring::{Spawner, Trigger};
use crate::plan::quota::quantity_millis;
use crate::usage::{Admission, WorkloadLedger, WorkloadObservation};

/// The usage ledger the Workload watch fills and the checkpoint loop reads, shared by both.
pub type SharedLedger = Arc<Mutex<WorkloadLedger>>;

/// A Workload as the ledger reads it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WorkloadLite {
    /// Its metadata (the ledger reads the uid and namespace; nothing of it is kept).
    pub metadata: kube::core::ObjectMeta,
    /// Conditions and admission.
    #[serde(default)]
    pub status: LeanWorkloadStatus,
}

/// `status` of a Workload: the conditions and the admission.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LeanWorkloadStatus {
    /// `Admitted`, `Finished`, ...
    #[serde(default)]
    pub conditions: Vec<LeanCondition>,
    /// Where and with what Kueue admitted it.
    #[serde(default)]
    pub admission: Option<LeanAdmission>,
}

/// One condition: type, status and when it last changed.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanCondition {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the status last changed.
    #[serde(default)]
    pub last_transition_time: Option<Time>,
}

/// `status.admission`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanAdmission {
    /// The ClusterQueue.
    #[serde(default)]
    pub cluster_queue: String,
    /// Per pod set: the total Kueue charged for it.
    #[serde(default)]
    pub pod_set_assignments: Vec<LeanAssignment>,
}

/// One pod set's `resourceUsage` (the total of all its pods).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanAssignment {
    /// Resource name -> quantity.
    #[serde(default)]
    pub resource_usage: BTreeMap<String, serde_json::Value>,
}

impl kube::Resource for WorkloadLite {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Workload")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KUEUE_GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KUEUE_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("workloads")
    }
    fn meta(&self) -> &kube::core::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut kube::core::ObjectMeta {
        &mut self.metadata
    }
}

/// The condition `kind` of `status` when it is `True`: its transition time, in Unix seconds.
fn true_since(status: &LeanWorkloadStatus, kind: &str) -> Option<Option<i64>> {
    status
        .conditions
        .iter()
        .find(|condition| condition.type_ == kind)
        .map(|condition| (condition.status == "True", condition.last_transition_time.as_ref()))
        .and_then(|(is_true, time)| is_true.then(|| time.map(|time| time.0.as_second())))
}

/// What the ledger reads from a Workload: its admission while `Admitted=True` (with the ClusterQueue and the sum
/// of its pod sets' `resourceUsage`), else when it stopped being admitted. `None` without a uid or namespace.
pub fn build_workload_observation(workload: &WorkloadLite) -> Option<WorkloadObservation> {
    let uid = workload.metadata.uid.clone()?;
    let namespace = workload.metadata.namespace.clone()?;
    let status = &workload.status;
    let admitted = true_since(status, ADMITTED).flatten();
    let admission = match (admitted, &status.admission) {
        (Some(since), Some(admission)) if !admission.cluster_queue.is_empty() => {
            let mut usage = BTreeMap::<String, i128>::new();
            for assignment in &admission.pod_set_assignments {
                for (resource, quantity) in &assignment.resource_usage {
                    if let Some(millis) = quantity_millis(quantity) {
                        *usage.entry(resource.clone()).or_insert(0) += millis;
                    }
                }
            }
            Some(Admission {
                cluster_queue: admission.cluster_queue.clone(),
                usage,
                since,
                finished_at: true_since(status, FINISHED).flatten(),
            })
        }
        _ => None,
    };
    let stopped_at = status
        .conditions
        .iter()
        .find(|condition| condition.type_ == ADMITTED && condition.status != "True")
        .and_then(|condition| condition.last_transition_time.as_ref())
        .map(|time| time.0.as_second());
    Some(WorkloadObservation { uid, namespace, admission, stopped_at })
}

/// Now, in Unix seconds.
pub fn now_second() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// Applies one watch event to `ledger` at `now`.
pub fn record_event(ledger: &mut WorkloadLedger, event: &watcher::Event<WorkloadLite>, now: i64) {
    match event {
        watcher::Event::Init => ledger.begin_list(),
        watcher::Event::InitApply(workload) | watcher::Event::Apply(workload) => {
            if let Some(observation) = build_workload_observation(workload) {
                ledger.observe(observation, now);
            }
        }
        watcher::Event::Delete(workload) => {
            if let Some(observation) = build_workload_observation(workload) {
                let uid = observation.uid.clone();
                ledger.observe(observation, now);
                ledger.forget(&uid, now);
            }
        }
        watcher::Event::InitDone => ledger.end_list(now),
    }
}

/// Watches every Workload into `ledger` (never triggers a reconcile: the checkpoint loop reads the ledger).
pub(super) fn start_workload_watch(client: &Client, spawner: &Spawner, ledger: SharedLedger) {
    let api = Api::<WorkloadLite>::all(client.clone());
    let events = watcher(api, watcher::Config::default());
    spawner.watch_into("Workload", Trigger::Never, events, move |event| {
        if let Ok(mut ledger) = ledger.lock() {
            record_event(&mut ledger, event, now_second());
        }
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn workload(status: serde_json::Value) -> WorkloadLite {
        serde_json::from_value(json!({
            "metadata": {"name": "job-a", "namespace": "team-a", "uid": "u1"},
            "spec": {"podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": []}}}]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn an_admitted_workload_reads_its_queue_summed_usage_and_admission_time() {
        let observed = build_workload_observation(&workload(json!({
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-12-02T07:59:59Z"},
                {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-02T08:00:00Z"},
            ],
            "admission": {"clusterQueue": "tiergate-gold", "podSetAssignments": [
                {"name": "main", "resourceUsage": {"nvidia.com/gpu": "2", "cpu": "500m"}},
                {"name": "side", "resourceUsage": {"nvidia.com/gpu": 1}},
            ]},
        })))
        .unwrap();
        let admission = observed.admission.unwrap();
        assert_eq!(admission.cluster_queue, "tiergate-gold");
        assert_eq!(admission.usage, BTreeMap::from([("cpu".to_owned(), 500), ("nvidia.com/gpu".to_owned(), 3000)]));
        assert_eq!(crate::usage::format_instant(admission.since), "2026-12-02T08:00:00Z");
        assert_eq!(admission.finished_at, None);
        assert_eq!((observed.uid.as_str(), observed.namespace.as_str()), ("u1", "team-a"));
    }

    #[test]
    fn a_finished_workload_reads_when_it_finished_and_an_evicted_one_when_it_stopped() {
        let finished = build_workload_observation(&workload(json!({
            "conditions": [
                {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-02T08:00:00Z"},
                {"type": "Finished", "status": "True", "lastTransitionTime": "2026-12-02T09:00:00Z"},
            ],
            "admission": {"clusterQueue": "tiergate-gold", "podSetAssignments": []},
        })))
        .unwrap();
        let finished_at = finished.admission.and_then(|admission| admission.finished_at);
        assert_eq!(finished_at.map(crate::usage::format_instant).as_deref(), Some("2026-12-02T09:00:00Z"));
        let evicted = build_workload_observation(&workload(json!({
            "conditions": [
                {"type": "Admitted", "status": "False", "lastTransitionTime": "2026-12-02T08:30:00Z"},
                {"type": "Evicted", "status": "True", "lastTransitionTime": "2026-12-02T08:30:00Z"},
            ],
        })))
        .unwrap();
        assert_eq!(evicted.admission, None);
        assert_eq!(evicted.stopped_at.map(crate::usage::format_instant).as_deref(), Some("2026-12-02T08:30:00Z"));
    }

    #[test]
    fn a_deleted_workload_is_closed_at_its_deletion_and_kept_until_counted() {
        let admitted = workload(json!({
            "conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-02T08:00:00Z"}],
            "admission": {"clusterQueue": "tiergate-gold", "podSetAssignments": [
                {"name": "main", "resourceUsage": {"nvidia.com/gpu": "1"}},
            ]},
        }));
        let start = crate::usage::parse_instant("2026-12-02T08:00:00Z").unwrap();
        let mut ledger = WorkloadLedger::default();
        record_event(&mut ledger, &watcher::Event::Init, start);
        record_event(&mut ledger, &watcher::Event::InitApply(admitted.clone()), start);
        record_event(&mut ledger, &watcher::Event::InitDone, start);
        assert!(ledger.is_listed());
        record_event(&mut ledger, &watcher::Event::Delete(admitted), start + 5);
        assert_eq!(ledger.len(), 1, "kept until a checkpoint counts it");
        ledger.prune(start + 5);
        assert!(ledger.is_empty(), "closed at its deletion, so a checkpoint then counted all of it");
    }
}
