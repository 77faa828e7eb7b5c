//! What scoring decides for one workload, and the pure parts that decide it: the agent's wire format and the
//! checks of its answer, priority buckets, the job features sent, and the built-in scorer. No I/O; the agent
//! client lives in the `tiergate` crate.

pub mod answer;
pub mod buckets;
pub mod builtin;
pub mod features;
pub mod wire;

#[cfg(test)]
pub(crate) mod test_support;

use std::collections::BTreeMap;

/// Annotation recording the score (`tiergate.io/`).
pub const SCORE_ANNOTATION: &str = "tiergate.io/priority-score";
/// Annotation recording the chosen GPU class.
pub const CHOSEN_GPU_ANNOTATION: &str = "tiergate.io/chosen-gpu";
/// Annotation recording the decision time (Unix seconds).
pub const DECIDED_AT_ANNOTATION: &str = "tiergate.io/decision-timestamp";
/// Annotation recording where the priority came from: `agent`, `builtin` or `fallback`.
pub const SCORE_SOURCE_ANNOTATION: &str = "tiergate.io/score-source";
/// Annotation recording why the default priority was used (a `Fallback` reason).
pub const FALLBACK_REASON_ANNOTATION: &str = "tiergate.io/score-fallback-reason";
/// Seed 000's score annotation, kept for dashboards built on it.
pub const SEED_SCORE_ANNOTATION: &str = "scheduler.radix.ai/priority-score";
/// Seed 000's chosen-GPU annotation.
pub const SEED_CHOSEN_GPU_ANNOTATION: &str = "scheduler.radix.ai/chosen-gpu";
/// Seed 000's decision-time annotation.
pub const SEED_DECIDED_AT_ANNOTATION: &str = "scheduler.radix.ai/decision-timestamp";

/// Where a score came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScoreSource {
    /// The external agent answered.
    Agent,
    /// The built-in scorer (no agent configured).
    BuiltIn,
    /// The agent failed; the tier's default priority was used. `reason` is a fixed string.
    Fallback {
        /// Fixed reason: `timeout`, `refused`, `http_error`, `garbage`, `out_of_range`, `breaker_open`, `busy`,
        /// `transport_error`, `bad_url` or `client_error` (see docs/guides/scoring.md).
        reason: &'static str,
    },
}

impl ScoreSource {
    /// `agent`, `builtin` or `fallback`: the value of [`SCORE_SOURCE_ANNOTATION`].
    pub fn name(&self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::BuiltIn => "builtin",
            Self::Fallback { .. } => "fallback",
        }
    }
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

impl ScoreOutcome {
    /// The annotations recording this decision: tiergate's keys and seed 000's (score, chosen GPU, time), plus
    /// the source and, for a fallback, its reason. Absent values are left out.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut annotations = BTreeMap::new();
        let decided_at = self.decided_at_unix.to_string();
        for key in [DECIDED_AT_ANNOTATION, SEED_DECIDED_AT_ANNOTATION] {
            annotations.insert(key.to_owned(), decided_at.clone());
        }
        if let Some(score) = self.score {
            for key in [SCORE_ANNOTATION, SEED_SCORE_ANNOTATION] {
                annotations.insert(key.to_owned(), score.to_string());
            }
        }
        if let Some(class) = &self.chosen_gpu_class {
            for key in [CHOSEN_GPU_ANNOTATION, SEED_CHOSEN_GPU_ANNOTATION] {
                annotations.insert(key.to_owned(), class.clone());
            }
        }
        annotations.insert(SCORE_SOURCE_ANNOTATION.to_owned(), self.source.name().to_owned());
        if let ScoreSource::Fallback { reason } = self.source {
            annotations.insert(FALLBACK_REASON_ANNOTATION.to_owned(), reason.to_owned());
        }
        annotations
    }
}
