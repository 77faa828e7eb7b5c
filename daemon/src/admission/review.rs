//! AdmissionReview in and out: parsing a raw review body with a clear error, and the one decision flow (placement,
//! scoring, `mutate`) shared by the server and `tiergate explain`; I/O only through the scorer.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::Value;

use super::decision::{AdmissionInputs, Decision, Verdict};
use super::mutate::mutate;
use crate::placement::PlacementLedger;
use crate::scoring::Scorer;
use crate::view::Snapshot;

/// The only AdmissionReview version served.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// A review body tiergate cannot read.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON at all.
    #[error("failed to parse the body as JSON: {0}")]
    ParseJson(#[source] serde_json::Error),
    /// JSON, but not an AdmissionReview request.
    #[error(
        "failed to read an AdmissionReview {REVIEW_API_VERSION} request (kind AdmissionReview with a `request`): {0}"
    )]
    ReadReview(String),
}

impl ReviewError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ParseJson(_) => "parse_json",
            Self::ReadReview(_) => "read_review",
        }
    }
}

/// Parses a review body; on failure also returns the request uid when one could be read, so the API server can
/// match the `invalid` answer to its request.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, (Option<String>, ReviewError)> {
    let value: Value = serde_json::from_slice(body).map_err(|error| (None, ReviewError::ParseJson(error)))?;
    let uid = value.pointer("/request/uid").and_then(Value::as_str).map(str::to_owned);
    let fail = |message: String| (uid.clone(), ReviewError::ReadReview(message));
    match (value.get("apiVersion").and_then(Value::as_str), value.get("kind").and_then(Value::as_str)) {
        (Some(REVIEW_API_VERSION), Some("AdmissionReview")) => {}
        (api_version, kind) => {
            return Err(fail(format!(
                "found apiVersion {:?} kind {:?}",
                api_version.unwrap_or_default(),
                kind.unwrap_or_default()
            )));
        }
    }
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(value).map_err(|error| fail(error.to_string()))?;
    review.try_into().map_err(|_| fail("the review has no `request`".to_owned()))
}

/// The `invalid` answer to a body that could not be read.
pub fn invalid_response(uid: Option<String>, error: &ReviewError) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid(error.to_string());
    response.uid = uid.unwrap_or_default();
    response.result.code = 400;
    response
}

/// Places, scores and decides one request: the flow every caller (server, explain, tests) uses. Scoring is
/// skipped when placement already denies.
pub async fn decide_review(
    request: &AdmissionRequest<DynamicObject>,
    snapshot: &Snapshot,
    ledger: &PlacementLedger,
    scorer: &Scorer,
) -> Decision {
    let placement = ledger.assign_for(request, snapshot);
    let score = match placement {
        Ok(_) => scorer.score_for(request, snapshot).await,
        Err(_) => None,
    };
    let inputs = AdmissionInputs { score, placement };
    let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mutate(request, snapshot, &inputs)));
    decided.unwrap_or_else(|_| {
        let closed = snapshot
            .policy
            .as_ref()
            .is_some_and(|policy| policy.spec.admission.failure_mode == crate::policy::FailureMode::Closed);
        let message = "failed to decide: the decision panicked (a tiergate bug; please report it)".to_owned();
        Decision::unchanged(
            "unknown",
            Verdict::Failed { reason: "panic", message: message.clone(), closed },
            vec![message],
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_is_not_json_is_a_parse_error_without_uid() {
        let (uid, error) = parse_review(b"{nope").unwrap_err();
        assert_eq!((uid, error.reason()), (None, "parse_json"));
    }

    #[test]
    fn a_review_of_another_version_names_what_was_found_and_keeps_the_uid() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u1"}}"#;
        let (uid, error) = parse_review(body).unwrap_err();
        assert_eq!(uid.as_deref(), Some("u1"));
        assert!(error.to_string().contains("v1beta1"), "{error}");
    }

    #[test]
    fn a_review_without_request_is_refused() {
        let (_, error) = parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).unwrap_err();
        assert_eq!(error.reason(), "read_review");
    }
}
