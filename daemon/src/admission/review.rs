//! AdmissionReview in and out: parsing a raw review body into its lean view with a clear error, and the one decision flow (placement,
//! scoring, `mutate`) shared by the server and `tiergate explain`; I/O only through the scorer.

use kube::core::admission::AdmissionResponse;
use serde_json::Value;

use super::mutate;
use super::{AdmissionInputs, Decision, LeanError, Request, Verdict, lean_request};
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

/// Parses a review body into its lean view (`admission::lean`: the objects without the parts no rule reads); on
/// failure also returns the request uid when one could be read, so the API server can match the `invalid` answer
/// to its request.
pub fn parse_review(body: &[u8]) -> Result<Request, (Option<String>, ReviewError)> {
    let error = match lean_request(body, REVIEW_API_VERSION) {
        Ok(request) => return Ok(request),
        Err(error) => error,
    };
    // Only to explain the failure: the uid, if the body is JSON at all.
    let value: Value = serde_json::from_slice(body).map_err(|error| (None, ReviewError::ParseJson(error)))?;
    let uid = value.pointer("/request/uid").and_then(Value::as_str).map(str::to_owned);
    let message = match error {
        LeanError::Version(api_version, kind) => format!("found apiVersion {api_version:?} kind {kind:?}"),
        LeanError::NoRequest => "the review has no `request`".to_owned(),
        LeanError::Json(error) => error.to_string(),
    };
    Err((uid, ReviewError::ReadReview(message)))
}

/// A synthetic dry-run CREATE request for `object` (what `tiergate explain` decides on), or the request of
/// `object` when it is itself an AdmissionReview.
pub fn build_request(object: Value) -> Result<Request, ReviewError> {
    if object.get("kind").and_then(Value::as_str) == Some("AdmissionReview") {
        let body = serde_json::to_vec(&object).map_err(ReviewError::ParseJson)?;
        return parse_review(&body).map_err(|(_, error)| error);
    }
    let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    let (api_version, kind, namespace) = (field("/apiVersion"), field("/kind"), field("/metadata/namespace"));
    if api_version.is_empty() || kind.is_empty() {
        return Err(ReviewError::ReadReview(
            "the workload needs apiVersion and kind (e.g. apiVersion: batch/v1, kind: Job)".to_owned(),
        ));
    }
    if namespace.is_empty() {
        return Err(ReviewError::ReadReview(
            "the workload needs metadata.namespace: the namespace decides the tier".to_owned(),
        ));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version.as_str()));
    let name = match field("/metadata/name") {
        name if name.is_empty() => field("/metadata/generateName"),
        name => name,
    };
    let gvk = serde_json::json!({"group": group, "version": version, "kind": kind});
    let review = serde_json::json!({
        "apiVersion": REVIEW_API_VERSION,
        "kind": "AdmissionReview",
        "request": {
            "uid": "tiergate-explain",
            "kind": gvk,
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "requestKind": gvk,
            "name": name,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "tiergate-explain"},
            "object": object,
            "dryRun": true
        }
    });
    let body = serde_json::to_vec(&review).map_err(ReviewError::ParseJson)?;
    parse_review(&body).map_err(|(_, error)| error)
}

/// The AdmissionReview body answering with `response`. The patch is base64 as Kubernetes' `[]byte` requires
/// (kube-core would write it as an array of numbers, kube-rs/kube#1781), which is also 3x smaller.
pub fn encode_review(response: &AdmissionResponse) -> Result<Vec<u8>, serde_json::Error> {
    use base64::Engine as _;
    let patch = response.patch.as_ref().map(|patch| base64::engine::general_purpose::STANDARD.encode(patch));
    let wire = WireReview {
        api_version: REVIEW_API_VERSION,
        kind: "AdmissionReview",
        response: WireResponse {
            uid: &response.uid,
            allowed: response.allowed,
            status: &response.result,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            audit_annotations: &response.audit_annotations,
            warnings: response.warnings.as_deref(),
        },
    };
    // Sized for the envelope, the encoded patch and the warnings, so the body is not regrown while written.
    let warnings: usize = response.warnings.iter().flatten().map(|warning| warning.len() + 4).sum();
    let patch_len = wire.response.patch.as_ref().map_or(0, String::len);
    let mut body = Vec::with_capacity(256 + response.uid.len() + patch_len + warnings);
    serde_json::to_writer(&mut body, &wire)?;
    Ok(body)
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    status: &'a kube::core::Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    audit_annotations: &'a std::collections::HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
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
    request: &Request,
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
    fn the_patch_is_written_as_base64_with_its_type() {
        use base64::Engine as _;
        let request = build_request(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n"}}))
        .unwrap();
        let patch: json_patch::Patch = serde_json::from_str(r#"[{"op":"add","path":"/a","value":1}]"#).unwrap();
        let response = request.allowed().with_patch(patch).unwrap();
        let body: Value = serde_json::from_slice(&encode_review(&response).unwrap()).unwrap();
        assert_eq!(body["response"]["patchType"], "JSONPatch");
        let decoded =
            base64::engine::general_purpose::STANDARD.decode(body["response"]["patch"].as_str().unwrap()).unwrap();
        assert_eq!(decoded, br#"[{"op":"add","path":"/a","value":1}]"#);
        assert_eq!(
            (body["apiVersion"].as_str(), body["response"]["uid"].as_str()),
            (Some(REVIEW_API_VERSION), Some("tiergate-explain"))
        );
    }

    #[test]
    fn a_plain_job_becomes_a_dry_run_create_request() {
        let job = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ml-team-dev"}, "spec": {}});
        let request = build_request(job).unwrap();
        assert_eq!((request.kind.group.as_str(), request.kind.kind.as_str()), ("batch", "Job"));
        assert!(request.dry_run && request.object.is_some());
    }

    #[test]
    fn a_workload_without_namespace_is_refused_naming_the_field() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(build_request(pod).unwrap_err().to_string().contains("metadata.namespace"));
    }

    #[test]
    fn a_review_without_request_is_refused() {
        let (_, error) = parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).unwrap_err();
        assert_eq!(error.reason(), "read_review");
    }
}
