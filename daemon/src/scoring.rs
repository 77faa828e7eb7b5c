//! Scheduler-agent scores: the `/v1/score` client, priority buckets, timeouts, circuit breaker and the built-in
//! scorer. Does network I/O (the agent client); everything else here is pure.

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

use crate::view::Snapshot;

/// Where a score came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScoreSource {
    /// The external agent answered.
    Agent,
    /// The built-in scorer (no agent configured).
    BuiltIn,
    /// The agent failed; the tier's default priority was used. `reason` is a fixed string.
    Fallback {
        /// Fixed reason, e.g. `timeout`, `breaker_open`, `garbage`, `out_of_range`.
        reason: &'static str,
    },
}

/// What scoring decided for one workload; applied to the object by the admission mutation.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreOutcome {
    /// WorkloadPriorityClass for `kueue.x-k8s.io/priority-class`.
    pub priority_class: String,
    /// The score, when there is one.
    pub score: Option<i64>,
    /// GPU class chosen inside the tier (its flavor's labels become the selector).
    pub chosen_gpu_class: Option<String>,
    /// Job types to avoid sharing a node with (preferred pod anti-affinity).
    pub avoid_job_types: Vec<String>,
    /// Where the score came from.
    pub source: ScoreSource,
    /// Warnings for the AdmissionResponse.
    pub warnings: Vec<String>,
    /// Unix seconds of the decision.
    pub decided_at_unix: i64,
}

/// Scores workloads with the agent or the built-in scorer; shared by all webhook requests.
#[derive(Debug, Default)]
pub struct Scorer {}

impl Scorer {
    /// The score for a scorable workload (a GPU job with a job type in a tiered namespace), `None` otherwise.
    /// Never fails: agent problems become a `Fallback` outcome.
    pub async fn score_for(
        &self,
        _request: &AdmissionRequest<DynamicObject>,
        _snapshot: &Snapshot,
    ) -> Option<ScoreOutcome> {
        None
    }
}
