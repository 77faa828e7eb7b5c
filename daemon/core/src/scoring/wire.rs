//! Seed 000's scheduler-agent wire format for `POST /v1/score`, shared by the client, the built-in scorer and
//! `tiergate agent`; serde types only, no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The body tiergate sends to `POST {url}/v1/score`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScoreRequest {
    /// The workload's job type, e.g. `train-bert`.
    pub job_type: String,
    /// What the workload declared about itself.
    pub features: ScoreFeatures,
    /// GPU class names the workload's tier may use, primary first.
    pub candidate_gpu_types: Vec<String>,
    /// Job types already running on nodes of the candidate classes, sorted.
    #[serde(default)]
    pub colocated_job_types: Vec<String>,
}

/// Declared features; a feature the workload did not declare is left out of the JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScoreFeatures {
    /// GPU memory needed per GPU, GiB (seed annotation `gpu.mem.gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_mem_gb: Option<u32>,
    /// Batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Tenant (team).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// The agent's answer. Unknown fields are ignored; only `priority_score` is required.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ScoreResponse {
    /// 0..=100; higher means more important. Fractions are floored.
    pub priority_score: serde_json::Number,
    /// The node selector of the chosen GPU (used only to identify the class when `terms.chosen_gpu` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_selector: Option<GpuSelector>,
    /// Job types the workload should not share a node with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avoid_co_locate_with: Option<Vec<String>>,
    /// Decision details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms: Option<ScoreTerms>,
}

/// `gpu_selector` of an answer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuSelector {
    /// Node labels of the chosen GPU.
    #[serde(rename = "nodeSelector", default)]
    pub node_selector: BTreeMap<String, String>,
}

/// `terms` of an answer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ScoreTerms {
    /// The chosen GPU class name (one of `candidate_gpu_types`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_gpu: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_serializes_exactly_as_seed_000_documents() {
        let request = ScoreRequest {
            job_type: "train-bert".to_owned(),
            features: ScoreFeatures { gpu_mem_gb: Some(40), batch_size: Some(16), tenant: Some("team-a".to_owned()) },
            candidate_gpu_types: vec!["A100-80GB".to_owned(), "A100-40GB".to_owned(), "L4-24GB".to_owned()],
            colocated_job_types: vec![],
        };
        let seed: serde_json::Value = serde_json::from_str(
            r#"{"job_type": "train-bert", "features": {"gpu_mem_gb": 40, "batch_size": 16, "tenant": "team-a"},
                "candidate_gpu_types": ["A100-80GB", "A100-40GB", "L4-24GB"], "colocated_job_types": []}"#,
        )
        .unwrap();
        assert_eq!(serde_json::to_value(&request).unwrap(), seed);
    }

    #[test]
    fn undeclared_features_are_left_out_not_null() {
        let features = serde_json::to_value(ScoreFeatures { batch_size: Some(8), ..ScoreFeatures::default() }).unwrap();
        assert_eq!(features, serde_json::json!({"batch_size": 8}));
    }

    #[test]
    fn seed_000_mock_answer_parses() {
        let answer: ScoreResponse = serde_json::from_str(
            r#"{"priority_score": 75, "gpu_selector": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"}},
                "avoid_co_locate_with": [], "terms": {"chosen_gpu": "A100-80GB", "expected_gain": 0.3}}"#,
        )
        .unwrap();
        assert_eq!(answer.priority_score.as_f64(), Some(75.0));
        assert_eq!(answer.terms.unwrap().chosen_gpu.as_deref(), Some("A100-80GB"));
        assert_eq!(answer.gpu_selector.unwrap().node_selector["gpu.nvidia.com/class"], "A100-80GB");
    }

    #[test]
    fn an_answer_without_a_score_is_refused() {
        assert!(serde_json::from_str::<ScoreResponse>(r#"{"terms": {"chosen_gpu": "l4"}}"#).is_err());
    }
}
