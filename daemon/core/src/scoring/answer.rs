//! Checking a `/v1/score` answer against the job's tier: the score's range, the chosen GPU (only the tier's
//! classes), and the job types to avoid (valid label values only); pure, no I/O.

use crate::policy::GpuClass;
use crate::scoring::buckets::{MAX_SCORE, MIN_SCORE};
use crate::scoring::wire::ScoreResponse;

/// A checked answer, ready to become a [`crate::scoring::ScoreOutcome`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentAnswer {
    /// The score, floored to a whole number within 0..=100.
    pub score: i64,
    /// The chosen class, when it is one of the tier's.
    pub chosen_gpu_class: Option<String>,
    /// Job types to avoid sharing a node with, sorted and deduplicated.
    pub avoid_job_types: Vec<String>,
    /// Parts of the answer that were ignored, and why.
    pub warnings: Vec<String>,
    /// True when the answer chose a GPU outside the tier (the `ignored_gpu` call outcome).
    pub gpu_ignored: bool,
}

/// An answer that cannot be used at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The score is below 0 or above 100.
    #[error("failed to accept the scheduler agent's priority_score {score}: it must be within 0..=100")]
    AcceptScore {
        /// The score as sent.
        score: String,
    },
}

impl AnswerError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::AcceptScore { .. } => "out_of_range",
        }
    }
}

/// Checks `response` for a job of `tier` that may use `candidates`.
///
/// The chosen class is `terms.chosen_gpu` when it names a candidate; without `terms.chosen_gpu`, the candidate
/// whose node labels all appear in `gpu_selector.nodeSelector`. A choice outside the candidates is ignored with a
/// warning and the score is still used. The selector itself is never applied: the chosen class's own labels are.
pub fn build_answer(
    response: &ScoreResponse,
    tier: &str,
    candidates: &[&GpuClass],
) -> Result<AgentAnswer, AnswerError> {
    let score = response
        .priority_score
        .as_f64()
        .filter(|score| score.is_finite() && (MIN_SCORE as f64..=MAX_SCORE as f64).contains(score))
        .ok_or_else(|| AnswerError::AcceptScore { score: response.priority_score.to_string() })?
        .floor() as i64;
    let mut warnings = Vec::new();
    let allowed = || candidates.iter().map(|class| class.name.as_str()).collect::<Vec<_>>().join(", ");
    let named = response.terms.as_ref().and_then(|terms| terms.chosen_gpu.as_deref());
    let selector = response.gpu_selector.as_ref().map(|selector| &selector.node_selector).filter(|s| !s.is_empty());
    let chosen_gpu_class = match (named, selector) {
        (Some(name), _) => {
            let known = candidates.iter().find(|class| class.name == name).map(|class| class.name.clone());
            if known.is_none() {
                warnings.push(format!(
                    "the scheduler agent chose GPU {name:?}, which tier {tier} may not use (allowed: {}); the choice \
                     is ignored and the score is still used",
                    allowed()
                ));
            }
            known
        }
        (None, Some(selector)) => {
            let known = candidates.iter().find(|class| class.is_selected_by(selector)).map(|class| class.name.clone());
            if known.is_none() {
                warnings.push(format!(
                    "the scheduler agent's gpu_selector {selector:?} matches no GPU class of tier {tier} (allowed: \
                     {}); it is ignored and the score is still used",
                    allowed()
                ));
            }
            known
        }
        (None, None) => None,
    };
    let gpu_ignored = !warnings.is_empty();
    let mut avoid_job_types: Vec<String> = Vec::new();
    for job_type in response.avoid_co_locate_with.iter().flatten() {
        if is_label_value(job_type) {
            avoid_job_types.push(job_type.clone());
        } else {
            warnings.push(format!(
                "the scheduler agent asked to avoid job type {job_type:?}, which is not a valid label value (1-63 \
                 letters, digits, '-', '_' or '.', starting and ending with a letter or digit); it is ignored"
            ));
        }
    }
    avoid_job_types.sort();
    avoid_job_types.dedup();
    Ok(AgentAnswer { score, chosen_gpu_class, avoid_job_types, warnings, gpu_ignored })
}

/// Whether `value` can be a non-empty Kubernetes label value (it becomes an anti-affinity `In` value).
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge_ok = |byte: Option<&u8>| byte.is_some_and(u8::is_ascii_alphanumeric);
    !value.is_empty()
        && value.len() <= 63
        && edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && bytes.iter().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::load_policy;

    fn response(json: &str) -> ScoreResponse {
        serde_json::from_str(json).unwrap()
    }

    fn checked(json: &str, candidates: &[&str]) -> Result<AgentAnswer, AnswerError> {
        let classes = load_policy(None).unwrap().spec.gpu_classes;
        let tier: Vec<&GpuClass> = classes.iter().filter(|class| candidates.contains(&class.name.as_str())).collect();
        build_answer(&response(json), "bronze", &tier)
    }

    #[test]
    fn a_normal_answer_keeps_score_choice_and_avoid_list() {
        let answer = checked(
            r#"{"priority_score": 85, "avoid_co_locate_with": ["train-llama", "etl", "etl"],
                "terms": {"chosen_gpu": "l4"}}"#,
            &["l4"],
        )
        .unwrap();
        assert_eq!(answer.score, 85);
        assert_eq!(answer.chosen_gpu_class.as_deref(), Some("l4"));
        assert_eq!(answer.avoid_job_types, ["etl", "train-llama"]);
        assert!(answer.warnings.is_empty() && !answer.gpu_ignored);
    }

    #[test]
    fn fractional_scores_are_floored_so_89_9_stays_below_90() {
        assert_eq!(checked(r#"{"priority_score": 89.9}"#, &["l4"]).unwrap().score, 89);
    }

    #[test]
    fn scores_outside_0_to_100_are_refused() {
        for score in ["-1", "-0.5", "100.5", "101", "1e9"] {
            let error = checked(&format!(r#"{{"priority_score": {score}}}"#), &["l4"]).unwrap_err();
            assert_eq!(error.reason(), "out_of_range", "score {score}");
        }
        assert_eq!(checked(r#"{"priority_score": 100}"#, &["l4"]).unwrap().score, 100);
        assert_eq!(checked(r#"{"priority_score": 0}"#, &["l4"]).unwrap().score, 0);
    }

    #[test]
    fn a_gpu_outside_the_tier_is_ignored_with_a_warning_and_the_score_kept() {
        let answer = checked(r#"{"priority_score": 92, "terms": {"chosen_gpu": "h100"}}"#, &["l4"]).unwrap();
        assert_eq!(answer.score, 92);
        assert_eq!(answer.chosen_gpu_class, None);
        assert!(answer.gpu_ignored);
        assert!(answer.warnings[0].contains("\"h100\"") && answer.warnings[0].contains("allowed: l4"));
    }

    #[test]
    fn without_chosen_gpu_the_selector_identifies_the_class() {
        let answer = checked(
            r#"{"priority_score": 60, "gpu_selector": {"nodeSelector": {"gpu.nvidia.com/class": "l4"}}}"#,
            &["l4"],
        )
        .unwrap();
        assert_eq!(answer.chosen_gpu_class.as_deref(), Some("l4"));
        let foreign = checked(
            r#"{"priority_score": 60, "gpu_selector": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"}}}"#,
            &["l4"],
        )
        .unwrap();
        assert_eq!(foreign.chosen_gpu_class, None);
        assert!(foreign.gpu_ignored);
    }

    #[test]
    fn avoid_entries_that_are_not_label_values_are_dropped_with_a_warning() {
        let answer =
            checked(r#"{"priority_score": 50, "avoid_co_locate_with": ["ok-type", "bad type", ""]}"#, &["l4"]).unwrap();
        assert_eq!(answer.avoid_job_types, ["ok-type"]);
        assert_eq!(answer.warnings.len(), 2);
        assert!(!answer.gpu_ignored);
    }

    #[test]
    fn label_values_follow_kubernetes_rules() {
        assert!(is_label_value("train-bert") && is_label_value("a.b_c-1") && is_label_value(&"x".repeat(63)));
        assert!(!is_label_value("-x") && !is_label_value("x-") && !is_label_value(&"x".repeat(64)));
        assert!(!is_label_value("a/b") && !is_label_value(""));
    }
}
