//! Base/weight placement strategies and GPU pinning: which rule each new pod gets, from a per-owner ledger kept
//! in memory (rebuilt from the pods themselves); no network I/O.
//!
//! [`PlacementLedger::assign_for`] is the entry point: at an owner's admission (Deployment, ReplicaSet,
//! StatefulSet, Job, CronJob) it validates the strategy and GPU map and copies a Deployment's smart-scheduler
//! strategy onto its pod template; at a pod's creation it picks the pod's rule (`split`) from the pods the
//! caches show plus this replica's in-flight admissions (`ledger`). See docs/guides/placement.md.

mod ledger;
mod owner;
mod owner_admission;
mod pinning;
mod sources;
pub mod split;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::Operation;
use serde_json::Value;

pub use ledger::LedgerTimings;
pub use pinning::CUDA_VISIBLE_DEVICES;

use crate::policy::ALWAYS_EXCLUDED_NAMESPACES;
use crate::request::{Request, metadata_of};
use crate::view::Snapshot;
use ledger::{InFlight, observed_pods};
use owner::pod_owner_key;
use owner_admission::check_owner;
use pinning::pod_pinning;
use sources::ResolvedStrategy;
/// The strategies an object's annotations declare (the admission boundary checks their rules' classes).
pub(crate) use sources::{Entries, JsonEntries, declared_strategies};

/// Pod label recording the rule a pod was given; the ledger counts pods by it (and rebuilds from it).
pub const RULE_LABEL: &str = "tiergate.io/placement-rule";
/// Pod annotation recording the ledger key of the pod's owner, e.g. `Deployment/ns/web-app`.
pub const OWNER_ANNOTATION: &str = "tiergate.io/placement-owner";
/// Pod annotation recording the admission request UID the rule was chosen under (matches in-flight entries).
pub const REQUEST_ANNOTATION: &str = "tiergate.io/placement-request";
/// Pod template annotation carrying a normalized strategy (canonical seed 003 syntax), set from an owner's
/// `smart-scheduler.io/schedule-strategy`.
pub const STRATEGY_ANNOTATION: &str = "tiergate.io/placement-strategy";
/// Pod template annotation (or label) naming a TierPolicy placement strategy.
pub const PLACEMENT_ANNOTATION: &str = "tiergate.io/placement";

/// The rule a pod was given.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementAssignment {
    /// Rule name (recorded on the pod so the ledger can be rebuilt).
    pub rule: String,
    /// Ledger key of the owning workload, e.g. `Deployment/ns/name`.
    pub owner: String,
    /// Node selector of the rule (exactly the labels of its ResourceFlavor).
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the rule.
    pub tolerations: Vec<Toleration>,
}

/// A StatefulSet pod pinned to a node and GPU list (seed 002 `gpu-scheduling-map`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuPinning {
    /// Node name for required node affinity on `kubernetes.io/hostname`.
    pub node: String,
    /// Value for `CUDA_VISIBLE_DEVICES`, e.g. `0,1`.
    pub cuda_visible_devices: String,
}

/// Everything placement decided for one request; the admission mutation applies it as given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlacementOutcome {
    /// The base/weight rule for a pod.
    pub assignment: Option<PlacementAssignment>,
    /// The GPU pinning for a StatefulSet pod.
    pub pinning: Option<GpuPinning>,
    /// Labels to set on the admitted object's metadata (e.g. the rule, so ledgers can be rebuilt).
    pub metadata_labels: BTreeMap<String, String>,
    /// Annotations to set on the admitted object's metadata.
    pub metadata_annotations: BTreeMap<String, String>,
    /// Annotations to set on every pod template of an owner (e.g. a normalized strategy its pods will carry).
    pub template_annotations: BTreeMap<String, String>,
    /// Annotations to remove from every pod template of an owner (a normalized strategy whose source is gone).
    pub removed_template_annotations: Vec<String>,
    /// Warnings for the AdmissionResponse.
    pub warnings: Vec<String>,
}

/// A strategy or map that cannot be parsed; the owner's admission is denied with this message.
#[derive(Debug, thiserror::Error)]
#[error("failed to parse placement annotation {annotation}: {message}")]
pub struct PlacementError {
    /// The annotation key.
    pub annotation: String,
    /// What is wrong, quoting the bad part, and the fix.
    pub message: String,
}

impl PlacementError {
    /// Fixed reason for metrics and events.
    pub fn reason(&self) -> &'static str {
        "parse_placement_annotation"
    }
}

/// Where the ledger counts its decisions (the daemon's metrics: `placement_assignments` by reason).
pub trait AssignmentCounter: std::fmt::Debug + Send + Sync {
    /// One placement decision, by fixed reason.
    fn count_assignment(&self, reason: &'static str);
}

/// Per-owner ledgers of which rule each live pod holds; shared by all webhook requests.
///
/// Counts come from the snapshot's pods (by [`RULE_LABEL`] and [`OWNER_ANNOTATION`]) plus the pods this replica
/// admitted that the caches do not show yet, so concurrent admissions never double-assign and a restart rebuilds
/// everything from the pods.
#[derive(Debug, Default)]
pub struct PlacementLedger {
    in_flight: InFlight,
    timings: LedgerTimings,
    excluded_namespaces: Vec<String>,
    counter: Option<Arc<dyn AssignmentCounter>>,
}

impl PlacementLedger {
    /// A ledger that counts its decisions in `counter` (the daemon passes its `Metrics`).
    pub fn new(counter: Arc<impl AssignmentCounter + 'static>) -> Self {
        Self { counter: Some(counter), ..Self::default() }
    }

    /// Also leaves these namespaces alone (seed 004's `BLOCKLISTED_NAMESPACE_LIST`, parsed with
    /// `tiergate_compat::namespaces::parse_namespace_blocklist`), on top of the policy's exclusions.
    pub fn with_excluded_namespaces(mut self, namespaces: impl IntoIterator<Item = String>) -> Self {
        self.excluded_namespaces.extend(namespaces);
        self
    }

    /// Overrides how long in-flight entries live.
    pub fn with_timings(mut self, timings: LedgerTimings) -> Self {
        self.timings = timings;
        self
    }

    /// Tells the ledger what the caches show now; call it after every snapshot swap (the cluster wiring does).
    /// Without it, a pod deleted before any further admission of its owner keeps counting until its TTL ends.
    pub fn observe(&self, snapshot: &Snapshot) {
        self.observe_at(snapshot, Instant::now());
    }

    /// [`PlacementLedger::observe`] at a given instant.
    pub fn observe_at(&self, snapshot: &Snapshot, now: Instant) {
        self.in_flight.observe(snapshot, now);
    }

    /// Entries held: pods admitted here that the caches have not shown yet (within their TTL) or showed less than
    /// the observed grace ago.
    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Decides placement for one request: validates strategies and maps on owners (Err denies the owner),
    /// assigns a rule to a pod CREATE (dry-run: decided, not recorded). Requests without placement get a default.
    pub fn assign_for(&self, request: &Request, snapshot: &Snapshot) -> Result<PlacementOutcome, PlacementError> {
        self.assign_for_at(request, snapshot, Instant::now())
    }

    /// [`PlacementLedger::assign_for`] at a given instant (tests and replays drive the clock).
    pub fn assign_for_at(
        &self,
        request: &Request,
        snapshot: &Snapshot,
        now: Instant,
    ) -> Result<PlacementOutcome, PlacementError> {
        let Some(object) = &request.object else {
            return Ok(PlacementOutcome::default());
        };
        let namespace = request
            .namespace
            .as_deref()
            .or_else(|| object.get("metadata")?.get("namespace")?.as_str())
            .unwrap_or_default();
        if self.is_excluded(namespace, snapshot) {
            return Ok(PlacementOutcome::default());
        }
        let kind = request.kind.kind.as_str();
        let pod_create = request.operation == Operation::Create && kind == "Pod" && request.kind.group.is_empty();
        let owner_layout = match request.operation {
            Operation::Create | Operation::Update if kind != "Pod" => {
                tiergate_workloads::template_layout(&request.kind.group, kind)
            }
            _ => None,
        };
        if !pod_create && owner_layout.is_none() {
            return Ok(PlacementOutcome::default());
        }
        // Typed metadata only for a request placement acts on.
        let meta = match metadata_of(object) {
            Ok(meta) => meta,
            Err(error) => {
                let warning = format!(
                    "admitted without placement: request.object.metadata is not Kubernetes object metadata \
                     ({error}); fix the object's metadata"
                );
                return Ok(PlacementOutcome { warnings: vec![warning], ..PlacementOutcome::default() });
            }
        };
        match owner_layout {
            Some(layout) => check_owner(request, (&meta, object), layout, snapshot),
            None => Ok(self.place_pod(request, (&meta, object), namespace, snapshot, now)),
        }
    }

    fn is_excluded(&self, namespace: &str, snapshot: &Snapshot) -> bool {
        let own = snapshot.own_namespace.as_deref();
        self.excluded_namespaces.iter().any(|excluded| excluded == namespace)
            || match &snapshot.policy {
                Some(policy) => policy.spec.is_excluded(namespace, own),
                None => ALWAYS_EXCLUDED_NAMESPACES.contains(&namespace) || own == Some(namespace),
            }
    }

    fn place_pod(
        &self,
        request: &Request,
        (meta, pod): (&ObjectMeta, &Value),
        namespace: &str,
        snapshot: &Snapshot,
        now: Instant,
    ) -> PlacementOutcome {
        let annotations = meta.annotations.clone().unwrap_or_default();
        let labels = meta.labels.clone().unwrap_or_default();
        let mut outcome = PlacementOutcome::default();
        outcome.pinning = pod_pinning(&annotations, meta, pod, &mut outcome.warnings);
        let declarations = declared_strategies(&annotations, &labels, snapshot.policy.as_deref().map(|p| &p.spec));
        outcome.warnings.extend(declarations.warnings);
        match declarations.strategies.into_iter().next() {
            None => {}
            Some(Err(error)) => {
                outcome.warnings.push(format!(
                    "admitted without placement: {error}; fix the annotation on the pod's owner (its admission is \
                     denied while it is malformed)"
                ));
                self.count("malformed");
            }
            Some(Ok(strategy)) => {
                let owner = pod_owner_key(namespace, meta, snapshot);
                let pod = PodContext { request, namespace, labels: &labels, annotations: &annotations, owner };
                let assignment = self.assign_rule(&pod, &strategy, snapshot, now);
                if let Some(assignment) = assignment {
                    outcome.metadata_labels.insert(RULE_LABEL.to_owned(), assignment.rule.clone());
                    outcome.metadata_annotations.insert(OWNER_ANNOTATION.to_owned(), assignment.owner.clone());
                    outcome.metadata_annotations.insert(REQUEST_ANNOTATION.to_owned(), request.uid.clone());
                    outcome.assignment = Some(assignment);
                }
            }
        }
        outcome
    }

    fn assign_rule(
        &self,
        pod: &PodContext<'_>,
        strategy: &ResolvedStrategy,
        snapshot: &Snapshot,
        now: Instant,
    ) -> Option<PlacementAssignment> {
        let PodContext { request, namespace, labels, annotations, owner } = pod;
        // A pod that already carries one of the strategy's rules keeps it: our own output on reinvocation, or a
        // pod re-created from a dump. It is still counted.
        let existing = labels.get(RULE_LABEL).filter(|rule| strategy.position(rule).is_some());
        let reinvoked = existing.is_some() && annotations.get(REQUEST_ANNOTATION) == Some(&request.uid);
        let record = (!request.dry_run && !reinvoked).then_some(request.uid.as_str());
        let observed = observed_pods(snapshot, namespace, owner);
        let split = strategy.split();
        let rule = self.in_flight.decide(owner, &observed, now, self.timings, record, |counts| {
            if let Some(rule) = existing {
                return Some(rule.clone());
            }
            let held: Vec<u32> =
                strategy.rules.iter().map(|rule| counts.get(rule.name.as_str()).copied().unwrap_or(0)).collect();
            strategy.rules.get(split.next_rule(&held)).map(|rule| rule.name.clone())
        })?;
        self.count(match (reinvoked, existing.is_some(), request.dry_run) {
            (true, _, _) => "reinvoked",
            (_, true, _) => "kept",
            (_, _, true) => "dry_run",
            _ => "assigned",
        });
        let chosen = strategy.rules.iter().find(|candidate| candidate.name == rule)?;
        Some(PlacementAssignment {
            rule,
            owner: owner.clone(),
            node_selector: chosen.node_selector.clone(),
            tolerations: chosen.tolerations.clone(),
        })
    }

    fn count(&self, reason: &'static str) {
        if let Some(counter) = &self.counter {
            counter.count_assignment(reason);
        }
    }
}

/// The pod being placed, as `assign_rule` needs it.
struct PodContext<'a> {
    request: &'a Request,
    namespace: &'a str,
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    owner: String,
}
