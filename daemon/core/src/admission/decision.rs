//! What the admission decision is made from (`AdmissionInputs`) and what it yields (`Decision`), and how a decision
//! becomes an AdmissionResponse; no I/O.

use kube_core::admission::AdmissionResponse;
use serde_json::Value;

use super::patch::Lookup;
use crate::placement::{PlacementError, PlacementOutcome};
use crate::request::Request;
use crate::scoring::ScoreOutcome;

/// What the I/O side computed before the pure decision: the score (if scoring ran) and the placement (an error
/// denies the request with its message).
#[derive(Debug)]
pub struct AdmissionInputs {
    /// The scorer's outcome; `None` leaves priority, scoring annotations and anti-affinity alone.
    pub score: Option<ScoreOutcome>,
    /// The placement ledger's outcome.
    pub placement: Result<PlacementOutcome, PlacementError>,
}

impl Default for AdmissionInputs {
    fn default() -> Self {
        Self { score: None, placement: Ok(PlacementOutcome::default()) }
    }
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing to do for this request: allowed, no patch.
    Skip {
        /// Fixed reason, e.g. `namespace_excluded`.
        reason: &'static str,
    },
    /// Allowed with the decision's patch (empty when the object already carries every mutation).
    Allow,
    /// Denied by policy.
    Deny {
        /// Fixed reason for metrics, e.g. `foreign_gpu_class`.
        reason: &'static str,
        /// Message for the user: what is wrong and the fix.
        message: String,
    },
    /// The request itself is malformed.
    Invalid {
        /// What is wrong with it.
        message: String,
    },
    /// tiergate failed while deciding; `closed` follows the policy's `admission.failureMode`.
    Failed {
        /// Fixed reason for metrics.
        reason: &'static str,
        /// The error.
        message: String,
        /// Deny (fail-closed) instead of admitting unchanged (fail-open).
        closed: bool,
    },
}

impl Verdict {
    /// Short form used in docs/admission.md's fixture table: `mutate`, `skip (REASON)`, `deny (REASON)`,
    /// `invalid`, `fail-open (REASON)` or `fail-closed (REASON)`.
    pub fn outcome(&self) -> String {
        match self {
            Self::Skip { reason } => format!("skip ({reason})"),
            Self::Allow => "mutate".to_owned(),
            Self::Deny { reason, .. } => format!("deny ({reason})"),
            Self::Invalid { .. } => "invalid".to_owned(),
            Self::Failed { reason, closed: false, .. } => format!("fail-open ({reason})"),
            Self::Failed { reason, closed: true, .. } => format!("fail-closed ({reason})"),
        }
    }
}

/// A decision: the verdict, the JSON patch, warnings for the user and each reason (for `tiergate explain`).
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Workload kind for metrics (`unknown` when tiergate does not handle it).
    pub kind: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// RFC 6902 patch from the request object to the mutated object.
    pub patch: json_patch::Patch,
    /// The lean view of the mutated object (without what the lean view skips), when the decision got that far,
    /// except below `object_as_sent_at`; apply `patch` to the request object for the whole result, or see
    /// `final_object`.
    pub object: Option<Value>,
    /// Pointers an UPDATE left as sent (immutable after creation) without copying them into `object`, which still
    /// holds the edits tiergate undid there.
    pub object_as_sent_at: Vec<&'static str>,
    /// `patch` as the webhook sends it, deep edits folded (`admission::fold`), when they were; `None` sends
    /// `patch` itself.
    pub patch_as_sent: Option<Vec<u8>>,
    /// AdmissionResponse warnings.
    pub warnings: Vec<String>,
    /// Why each change was made (or not), in order.
    pub reasons: Vec<String>,
}

impl Decision {
    /// A decision with no patch.
    pub fn unchanged(kind: &'static str, verdict: Verdict, reasons: Vec<String>) -> Self {
        Self {
            kind,
            verdict,
            patch: json_patch::Patch(Vec::new()),
            object: None,
            object_as_sent_at: Vec::new(),
            patch_as_sent: None,
            warnings: Vec::new(),
            reasons,
        }
    }

    /// The lean view of the mutated object as the patch leaves it: `object` with each pointer of
    /// `object_as_sent_at` copied from `sent` (the request's object). For `tiergate explain` and the tests; the
    /// webhook only needs the patch.
    pub fn final_object(&self, sent: &Value) -> Option<Value> {
        let mut object = self.object.clone()?;
        for pointer in &self.object_as_sent_at {
            if let Some(value) = sent.lookup(pointer) {
                tiergate_workloads::set_pointer(&mut object, pointer, Some(value.clone()));
            }
        }
        Some(object)
    }

    /// The metrics label of this decision.
    pub fn label(&self) -> DecisionLabel {
        match &self.verdict {
            Verdict::Skip { .. } => DecisionLabel::Skipped,
            Verdict::Allow if self.patch.0.is_empty() => DecisionLabel::Skipped,
            Verdict::Allow => DecisionLabel::Mutated,
            Verdict::Deny { .. } => DecisionLabel::Denied,
            Verdict::Invalid { .. } => DecisionLabel::Invalid,
            Verdict::Failed { closed: false, .. } => DecisionLabel::FailedOpen,
            Verdict::Failed { closed: true, .. } => DecisionLabel::FailedClosed,
        }
    }

    /// Folds the patch's deep edits into one `replace` per top-level member, written from the object of the
    /// review `body` as the API server sent it (`admission::fold`): the same stored object, cheaper for the API
    /// server to apply. Sent as built when nothing folds.
    pub fn fold_for_api_server(&mut self, body: &[u8]) {
        self.patch_as_sent = super::fold::fold_deep_edits(&self.patch, body);
    }

    /// The AdmissionResponse for `request`.
    pub fn response(&self, request: &Request) -> AdmissionResponse {
        let mut warnings = self.warnings.clone();
        let mut response = request.allowed();
        match &self.verdict {
            Verdict::Skip { .. } => {}
            Verdict::Allow if self.patch.0.is_empty() => {}
            // `with_patch` takes the patch by value: it is given an empty one to set the patch type, and the
            // decision's own patch is serialized in place, not cloned first (the folded one is copied as written).
            Verdict::Allow => match self.patch_as_sent.clone().map_or_else(|| patch_bytes(&self.patch), Ok) {
                Ok(bytes) => match response.with_patch(json_patch::Patch(Vec::new())) {
                    Ok(patched) => {
                        response = patched;
                        response.patch = Some(bytes);
                    }
                    Err(error) => {
                        response = request.allowed();
                        warnings.push(format!("tiergate admitted the object unchanged: {error}"));
                    }
                },
                Err(error) => warnings
                    .push(format!("tiergate admitted the object unchanged: failed to serialize the patch: {error}")),
            },
            Verdict::Deny { message, .. } => response = denied(response, message, 403, "Forbidden"),
            Verdict::Invalid { message } => {
                response = AdmissionResponse::invalid(message);
                response.uid = request.uid.clone();
                response.result.code = 400;
            }
            Verdict::Failed { message, closed: true, .. } => {
                response =
                    denied(response, &format!("tiergate failed (failureMode Closed): {message}"), 500, "InternalError");
            }
            Verdict::Failed { message, closed: false, .. } => {
                warnings.push(format!("tiergate admitted the object unchanged after an internal error: {message}"));
            }
        }
        response.warnings = (!warnings.is_empty()).then_some(warnings);
        response
    }
}

/// `patch` as JSON, written into a buffer sized for it up front (an operation's path and value are rarely longer
/// than 128 bytes) rather than one grown by doubling.
fn patch_bytes(patch: &json_patch::Patch) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = Vec::with_capacity(patch.0.len() * 128);
    serde_json::to_writer(&mut bytes, patch)?;
    Ok(bytes)
}

fn denied(response: AdmissionResponse, message: &str, code: u16, reason: &str) -> AdmissionResponse {
    let mut response = response.deny(message);
    response.result.code = code;
    response.result.reason = reason.to_owned();
    response.result.status = Some(kube_core::response::StatusSummary::Failure);
    response
}

/// Outcome of one admission decision.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DecisionLabel {
    /// Allowed without a patch.
    Skipped,
    /// Allowed with a patch.
    Mutated,
    /// Denied by policy.
    Denied,
    /// The request itself was malformed.
    Invalid,
    /// An internal error admitted the object unchanged.
    FailedOpen,
    /// An internal error denied the object (fail-closed).
    FailedClosed,
}

impl DecisionLabel {
    /// The metrics label value: the variant's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skipped => "Skipped",
            Self::Mutated => "Mutated",
            Self::Denied => "Denied",
            Self::Invalid => "Invalid",
            Self::FailedOpen => "FailedOpen",
            Self::FailedClosed => "FailedClosed",
        }
    }
}
