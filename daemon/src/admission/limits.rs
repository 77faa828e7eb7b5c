//! The webhook's limits: the global budget of request bytes and requests in flight, and the decision and scoring
//! deadlines derived from the API server's `timeoutSeconds`; no I/O (permits are in-memory semaphores).
//!
//! Memory arithmetic (docs/operations.md): peak RSS ≈ baseline + charged bytes × amplification, where a request
//! is charged its body plus [`STRUCTURE_COST_BYTES`] per JSON object or array, and the amplification (body, parsed
//! object, patch, answer) was measured by `perf/body_flood.py`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest review body accepted: etcd stores objects up to 1.5 MiB and an UPDATE review carries two of them.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The API server's default and the chart's `webhook.timeoutSeconds`.
pub const DEFAULT_WEBHOOK_TIMEOUT_SECONDS: u64 = 5;
/// Kubernetes' range of a webhook's `timeoutSeconds`.
pub const WEBHOOK_TIMEOUT_SECONDS_RANGE: std::ops::RangeInclusive<u64> = 1..=30;
/// Default budget of request bytes in flight, the chart's derivation for its 256Mi limit: (256 MiB − 96 MiB
/// baseline) / amplification 5 (docs/operations.md "Memory under load" has the arithmetic and the measurement).
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 32 * 1024 * 1024;
/// Default number of requests in flight (each also holds a connection, a task and its decision).
pub const DEFAULT_MAX_INFLIGHT_REQUESTS: usize = 128;
/// Bytes charged for a request before its body is read: headers, task, connection buffers.
pub const REQUEST_OVERHEAD_BYTES: usize = 16 * 1024;
/// Bytes charged for each JSON object or array in a body, on top of its bytes: parsing and deciding build a tree
/// of every object (maps, strings, copies for the patch). Measured: a 3.9 MiB review of ~131,000 small objects
/// grew RSS by ~305 MiB in one request, ~2.4 KiB per object (`perf/body_flood.py 1`, before the lean view). The
/// lean view still builds every object outside `env` lists, so this rate stays; `env` lists have their own.
pub const STRUCTURE_COST_BYTES: usize = 2 * 1024;
/// Bytes charged for each `,` (one more element or member): a 3.9 MiB review of a million one-letter `args` grew
/// RSS by ~189 MiB, ~190 bytes per element (`perf/body_flood.py --shape array 1`).
pub const ELEMENT_COST_BYTES: usize = 256;
/// Bytes charged for each JSON object or array inside an `env` list or the `metadata.managedFields` of the
/// request's objects: the lean view skips those without building them (only the first `CUDA_VISIBLE_DEVICES` env
/// entry is kept; managedFields is read as `IgnoredAny`), so what is left is parse work, bounded here so that a
/// body of hundreds of thousands of entries is still denied as too complex. A 1.5 MiB Job of 15,000 env entries is
/// charged ~9 MiB (~17 MiB as an UPDATE), inside the default budget. The API server's managedFields name every
/// env entry again (four objects each, issue 33): charged at the full rate they made a 600 KiB Job cost ~47 MiB,
/// past the whole budget, so it was refused as too complex whatever it asked for.
pub const ENV_STRUCTURE_COST_BYTES: usize = 512;
/// Seconds a refused client is told to wait (`Retry-After`).
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// The limits the HTTPS server enforces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookLimits {
    /// Largest single body.
    pub max_body_bytes: usize,
    /// Request bytes (bodies plus [`REQUEST_OVERHEAD_BYTES`] each) in flight at once.
    pub max_inflight_bytes: usize,
    /// Requests in flight at once.
    pub max_inflight_requests: usize,
    /// The decision deadline (placement, scoring, mutate), safely below the API server's timeout.
    pub decision_timeout: Duration,
    /// The longest scheduler-agent call, below the decision deadline.
    pub scoring_timeout_cap: Duration,
}

impl Default for WebhookLimits {
    fn default() -> Self {
        let (decision_timeout, scoring_timeout_cap) = deadlines(Duration::from_secs(DEFAULT_WEBHOOK_TIMEOUT_SECONDS));
        Self {
            max_body_bytes: MAX_BODY_BYTES,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            max_inflight_requests: DEFAULT_MAX_INFLIGHT_REQUESTS,
            decision_timeout,
            scoring_timeout_cap,
        }
    }
}

/// A limit flag that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitsError {
    /// `--webhook-timeout-seconds` outside Kubernetes' range.
    #[error(
        "failed to use --webhook-timeout-seconds {0}: Kubernetes allows 1 to 30; pass the MutatingWebhookConfiguration's timeoutSeconds (chart value webhook.timeoutSeconds)"
    )]
    WebhookTimeout(u64),
    /// A decision deadline that the API server would cut off.
    #[error(
        "failed to use --decision-timeout-ms {decision_ms}: it must be at least 100 and leave 500 ms of the API server's {webhook_seconds} s (--webhook-timeout-seconds) for the answer; use at most {max_ms} or leave it unset"
    )]
    DecisionTimeout {
        /// The flag's value.
        decision_ms: u64,
        /// `--webhook-timeout-seconds`.
        webhook_seconds: u64,
        /// The largest value that works.
        max_ms: u64,
    },
    /// A budget smaller than one request.
    #[error(
        "failed to use --max-inflight-bytes {bytes}: it must hold at least one largest review ({needed} bytes); raise it or the memory limit"
    )]
    InflightBytes {
        /// The flag's value.
        bytes: usize,
        /// One maximal request.
        needed: usize,
    },
    /// No request could ever be served.
    #[error("failed to use --max-inflight-requests 0: at least one request must be served; use e.g. 128")]
    InflightRequests,
}

impl LimitsError {
    /// Fixed reason for metrics and exit messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::WebhookTimeout(_) => "webhook_timeout",
            Self::DecisionTimeout { .. } => "decision_timeout",
            Self::InflightBytes { .. } => "inflight_bytes",
            Self::InflightRequests => "inflight_requests",
        }
    }
}

/// The decision deadline (4/5 of the API server's timeout) and the scoring cap (3/4 of the decision deadline):
/// 5 s gives 4 s and 3 s, so a closed failure mode still answers before the API server gives up.
pub fn deadlines(webhook_timeout: Duration) -> (Duration, Duration) {
    let decision = webhook_timeout * 4 / 5;
    (decision, decision * 3 / 4)
}

/// Builds the limits from the flags, refusing combinations that cannot work.
pub fn build_limits(
    webhook_timeout_seconds: u64,
    decision_timeout_ms: Option<u64>,
    max_inflight_bytes: usize,
    max_inflight_requests: usize,
) -> Result<WebhookLimits, LimitsError> {
    if !WEBHOOK_TIMEOUT_SECONDS_RANGE.contains(&webhook_timeout_seconds) {
        return Err(LimitsError::WebhookTimeout(webhook_timeout_seconds));
    }
    let webhook_timeout = Duration::from_secs(webhook_timeout_seconds);
    let (mut decision_timeout, mut scoring_timeout_cap) = deadlines(webhook_timeout);
    if let Some(decision_ms) = decision_timeout_ms {
        let max_ms = webhook_timeout_seconds * 1000 - 500;
        if !(100..=max_ms).contains(&decision_ms) {
            return Err(LimitsError::DecisionTimeout { decision_ms, webhook_seconds: webhook_timeout_seconds, max_ms });
        }
        decision_timeout = Duration::from_millis(decision_ms);
        scoring_timeout_cap = decision_timeout * 3 / 4;
    }
    let needed = MAX_BODY_BYTES + REQUEST_OVERHEAD_BYTES;
    if max_inflight_bytes < needed || u32::try_from(max_inflight_bytes).is_err() {
        return Err(LimitsError::InflightBytes { bytes: max_inflight_bytes, needed });
    }
    if max_inflight_requests == 0 {
        return Err(LimitsError::InflightRequests);
    }
    Ok(WebhookLimits {
        max_body_bytes: MAX_BODY_BYTES,
        max_inflight_bytes,
        max_inflight_requests,
        decision_timeout,
        scoring_timeout_cap,
    })
}

/// The global budget, shared by every connection and protocol.
#[derive(Clone, Debug)]
pub struct RequestBudget {
    bytes: Arc<Semaphore>,
    requests: Arc<Semaphore>,
}

/// What was over budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// Too many requests in flight.
    Requests,
    /// Too many bytes in flight.
    Bytes,
}

impl Exhausted {
    /// Fixed reason for metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Requests => "inflight_requests",
            Self::Bytes => "inflight_bytes",
        }
    }
}

/// One request's share of the budget; dropping it gives the share back.
#[derive(Debug)]
pub struct Charge {
    _request: OwnedSemaphorePermit,
    bytes: OwnedSemaphorePermit,
    budget: Arc<Semaphore>,
}

impl RequestBudget {
    /// A budget of `limits.max_inflight_bytes` and `limits.max_inflight_requests`.
    pub fn new(limits: &WebhookLimits) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(limits.max_inflight_bytes)),
            requests: Arc::new(Semaphore::new(limits.max_inflight_requests)),
        }
    }

    /// Admits a request, charging its overhead and `declared` body bytes (its Content-Length) at once; never waits.
    pub fn admit(&self, declared: usize) -> Result<Charge, Exhausted> {
        let request = Arc::clone(&self.requests).try_acquire_owned().map_err(|_| Exhausted::Requests)?;
        let bytes = try_bytes(&self.bytes, REQUEST_OVERHEAD_BYTES.saturating_add(declared))?;
        Ok(Charge { _request: request, bytes, budget: Arc::clone(&self.bytes) })
    }

    /// Bytes still free (for tests and metrics).
    pub fn available_bytes(&self) -> usize {
        self.bytes.available_permits()
    }
}

impl Charge {
    /// Charges `bytes` more as they arrive (a body without Content-Length, or longer than declared).
    pub fn add(&mut self, bytes: usize) -> Result<(), Exhausted> {
        let more = try_bytes(&self.budget, bytes)?;
        self.bytes.merge(more);
        Ok(())
    }
}

/// What deciding on `body` is estimated to cost beyond its bytes: [`STRUCTURE_COST_BYTES`] per `{` or `[` and
/// [`ELEMENT_COST_BYTES`] per `,`, outside strings; inside an `env` list or the `metadata.managedFields` of the
/// request's object or old object, which the lean view skips without building (`admission::lean`),
/// [`ENV_STRUCTURE_COST_BYTES`] per `{` or `[` and nothing per `,`. One pass; a key written with escapes or nested past [`TRACKED_DEPTH`] is charged in full
/// (an overestimate is safe).
pub fn structure_cost(body: &[u8]) -> usize {
    let mut scan = Scan::default();
    let mut cost = 0usize;
    let mut index = 0;
    while let Some(&byte) = body.get(index) {
        index += 1;
        let charge = match byte {
            b'"' => {
                let start = index;
                while let Some(&byte) = body.get(index) {
                    index += 1;
                    match byte {
                        b'\\' => index += 1,
                        b'"' => break,
                        _ => {}
                    }
                }
                scan.string(body.get(start..index.saturating_sub(1)).unwrap_or_default());
                0
            }
            b'{' | b'[' => {
                let cost = if scan.in_skipped() { ENV_STRUCTURE_COST_BYTES } else { STRUCTURE_COST_BYTES };
                scan.open(byte == b'{');
                cost
            }
            b'}' | b']' => {
                scan.close();
                0
            }
            b',' => {
                scan.comma();
                if scan.in_skipped() { 0 } else { ELEMENT_COST_BYTES }
            }
            _ => 0,
        };
        cost = cost.saturating_add(charge);
    }
    cost
}

/// How deep `structure_cost` follows keys; deeper containers are charged in full.
pub const TRACKED_DEPTH: usize = 32;

/// The key the scanner last read at one depth, as far as the charge cares.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Key {
    #[default]
    Other,
    Request,
    Object,
    Env,
    Metadata,
    ManagedFields,
}

/// Where `structure_cost` is in the body.
#[derive(Default)]
struct Scan {
    /// Open containers.
    depth: usize,
    /// Whether the container at each tracked depth is an object, and its last key.
    objects: [bool; TRACKED_DEPTH],
    keys: [Key; TRACKED_DEPTH],
    /// The next string of the current object is a key.
    expect_key: bool,
    /// Depth of the request's object (or old object), while inside it.
    object_depth: Option<usize>,
    /// Depth of the `env` list or `metadata.managedFields` being skipped, while inside it.
    skipped_depth: Option<usize>,
}

impl Scan {
    fn in_skipped(&self) -> bool {
        self.skipped_depth.is_some()
    }

    fn current_key(&self, depth: usize) -> Key {
        depth.checked_sub(1).and_then(|at| self.keys.get(at)).copied().unwrap_or_default()
    }

    fn string(&mut self, text: &[u8]) {
        if !self.expect_key {
            return;
        }
        self.expect_key = false;
        let in_object = self.object_depth == Some(self.depth);
        let in_metadata = self.object_depth.map(|depth| depth + 1) == Some(self.depth)
            && self.object_depth.is_some_and(|depth| self.current_key(depth) == Key::Metadata);
        let key = match (self.depth, text) {
            (1, b"request") => Key::Request,
            (2, b"object" | b"oldObject") => Key::Object,
            (_, b"metadata") if in_object => Key::Metadata,
            (_, b"managedFields") if in_metadata => Key::ManagedFields,
            (_, b"env") => Key::Env,
            _ => Key::Other,
        };
        if let Some(slot) = self.depth.checked_sub(1).and_then(|at| self.keys.get_mut(at)) {
            *slot = key;
        }
    }

    fn open(&mut self, object: bool) {
        let parent_key = self.current_key(self.depth);
        let parent_is_object = self.depth.checked_sub(1).and_then(|at| self.objects.get(at)).copied().unwrap_or(false);
        let keyed = |key: Key| parent_is_object && parent_key == key;
        if self.depth == 2 && self.current_key(1) == Key::Request && keyed(Key::Object) && object {
            self.object_depth = Some(self.depth + 1);
        }
        if self.skipped_depth.is_none()
            && self.object_depth.is_some()
            && ((keyed(Key::Env) && !object) || keyed(Key::ManagedFields))
        {
            self.skipped_depth = Some(self.depth + 1);
        }
        self.depth += 1;
        if let Some(slot) = self.depth.checked_sub(1).and_then(|at| self.objects.get_mut(at)) {
            *slot = object;
        }
        if let Some(slot) = self.depth.checked_sub(1).and_then(|at| self.keys.get_mut(at)) {
            *slot = Key::Other;
        }
        self.expect_key = object && self.depth <= TRACKED_DEPTH;
    }

    fn close(&mut self) {
        if self.skipped_depth == Some(self.depth) {
            self.skipped_depth = None;
        }
        if self.object_depth == Some(self.depth) {
            self.object_depth = None;
        }
        self.depth = self.depth.saturating_sub(1);
        self.expect_key = false;
    }

    fn comma(&mut self) {
        let object = self.depth.checked_sub(1).and_then(|at| self.objects.get(at)).copied().unwrap_or(false);
        self.expect_key = object && self.depth <= TRACKED_DEPTH;
    }
}

fn try_bytes(semaphore: &Arc<Semaphore>, bytes: usize) -> Result<OwnedSemaphorePermit, Exhausted> {
    let permits = u32::try_from(bytes).map_err(|_| Exhausted::Bytes)?;
    Arc::clone(semaphore).try_acquire_many_owned(permits).map_err(|_| Exhausted::Bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_deadlines_fit_inside_the_charts_five_seconds() {
        let limits = WebhookLimits::default();
        assert_eq!(limits.decision_timeout, Duration::from_secs(4));
        assert_eq!(limits.scoring_timeout_cap, Duration::from_secs(3));
        assert_eq!(build_limits(5, None, DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_MAX_INFLIGHT_REQUESTS), Ok(limits));
    }

    #[test]
    fn a_decision_deadline_the_api_server_would_cut_off_is_refused_naming_the_flag() {
        let error = build_limits(5, Some(8000), DEFAULT_MAX_INFLIGHT_BYTES, 1).unwrap_err();
        assert_eq!(error, LimitsError::DecisionTimeout { decision_ms: 8000, webhook_seconds: 5, max_ms: 4500 });
        assert!(error.to_string().contains("--decision-timeout-ms 8000"), "{error}");
        let error = build_limits(31, None, DEFAULT_MAX_INFLIGHT_BYTES, 1).unwrap_err();
        assert!(error.to_string().contains("--webhook-timeout-seconds 31"), "{error}");
    }

    #[test]
    fn a_budget_below_one_largest_review_is_refused() {
        let error = build_limits(5, None, MAX_BODY_BYTES, 1).unwrap_err();
        assert!(error.to_string().starts_with("failed to use --max-inflight-bytes"), "{error}");
        assert_eq!(build_limits(5, None, DEFAULT_MAX_INFLIGHT_BYTES, 0), Err(LimitsError::InflightRequests));
    }

    #[test]
    fn many_small_objects_cost_more_than_one_long_string_of_the_same_size() {
        let objects = br#"[{"a":1},{"b":2}]"#;
        assert_eq!(structure_cost(objects), 3 * STRUCTURE_COST_BYTES + ELEMENT_COST_BYTES);
        assert_eq!(structure_cost(br#""aaaaaaaaaaaaaaa""#), 0);
        // Brackets, commas and escaped quotes inside strings are not structure; an unterminated string runs to the
        // end of the body.
        assert_eq!(structure_cost(br#"["{[,\"\\",{"k\"{":"\\"}]"#), 2 * STRUCTURE_COST_BYTES + ELEMENT_COST_BYTES);
        assert_eq!(structure_cost(br#"[{"a":"[,{\"#), 2 * STRUCTURE_COST_BYTES);
    }

    #[test]
    fn env_entries_of_the_request_objects_are_charged_less_and_the_same_list_elsewhere_in_full() {
        let entries = r#"[{"name":"A","value":"1"},{"name":"B","value":"{[,]}"}]"#;
        let review = |container: &str| {
            format!(r#"{{"request":{{"uid":"u","object":{{"spec":{container}}},"oldObject":{{"spec":{container}}}}}}}"#)
        };
        let env = review(&format!(r#"{{"containers":[{{"name":"c","env":{entries}}}]}}"#));
        let base = review(r#"{"containers":[{"name":"c","env":[]}]}"#);
        // Per object: two entries at the env rate, nothing for their commas.
        assert_eq!(structure_cost(env.as_bytes()) - structure_cost(base.as_bytes()), 4 * ENV_STRUCTURE_COST_BYTES);
        let full = 2 * STRUCTURE_COST_BYTES + 3 * ELEMENT_COST_BYTES;
        for elsewhere in [
            format!(r#"{{"request":{{"options":{{"env":{entries}}}}}}}"#),
            format!(r#"{{"request":{{"object":{{"e\u006ev":{entries}}}}}}}"#),
            format!(r#"{{"request":{{"object":{{"env":{{"list":{entries}}}}}}}}}"#),
        ] {
            let without = elsewhere.replace(entries, "[]");
            assert_eq!(structure_cost(elsewhere.as_bytes()) - structure_cost(without.as_bytes()), full, "{elsewhere}");
        }
    }

    #[test]
    fn an_update_of_a_one_and_a_half_mib_job_of_env_entries_fits_the_default_budget() {
        let value = "x".repeat(64);
        let entries: Vec<String> =
            (0..15_000).map(|index| format!(r#"{{"name":"CONFIG_{index:05}","value":"{value}"}}"#)).collect();
        let object = format!(
            r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"j"}},"spec":{{"template":{{"spec":{{"containers":[{{"name":"c","env":[{}]}}]}}}}}}}}"#,
            entries.join(",")
        );
        let body = format!(r#"{{"request":{{"uid":"u","object":{object},"oldObject":{object}}}}}"#);
        assert!(object.len() > 1_400_000, "{}", object.len());
        let charged = structure_cost(body.as_bytes()) + body.len();
        assert!(charged < DEFAULT_MAX_INFLIGHT_BYTES * 3 / 5, "{charged}");
    }

    /// The managedFields the API server writes for a container's `env` list: four objects per entry.
    fn managed_fields_for_env(names: &[String]) -> String {
        let entries: Vec<String> = names
            .iter()
            .map(|name| format!(r#""k:{{\"name\":\"{name}\"}}":{{".":{{}},"f:name":{{}},"f:value":{{}}}}"#))
            .collect();
        format!(
            r#"[{{"manager":"kubectl","operation":"Update","apiVersion":"batch/v1","fieldsType":"FieldsV1","fieldsV1":{{"f:spec":{{"f:template":{{"f:spec":{{"f:containers":{{"k:{{\"name\":\"c\"}}":{{".":{{}},"f:env":{{".":{{}},{}}}}}}}}}}}}}}}}}]"#,
            entries.join(",")
        )
    }

    #[test]
    fn managed_fields_of_the_request_objects_are_charged_less_and_the_same_list_elsewhere_in_full() {
        let fields = managed_fields_for_env(&["A".to_owned(), "B".to_owned()]);
        let review = |metadata: &str| {
            format!(
                r#"{{"request":{{"uid":"u","object":{{"metadata":{metadata}}},"oldObject":{{"metadata":{metadata}}}}}}}"#
            )
        };
        let with = review(&format!(r#"{{"name":"j","managedFields":{fields}}}"#));
        let without = review(r#"{"name":"j","managedFields":[]}"#);
        let skipped = structure_cost(with.as_bytes()) - structure_cost(without.as_bytes());
        // Per object: the entry, fieldsV1 and its 5 nested levels, the container, env and its ".", two entries of
        // four objects each, all at the skipped rate, nothing for their commas.
        assert_eq!(skipped, 2 * 18 * ENV_STRUCTURE_COST_BYTES, "{with}");
        for elsewhere in [
            format!(r#"{{"request":{{"object":{{"spec":{{"managedFields":{fields}}}}}}}}}"#),
            format!(r#"{{"request":{{"object":{{"metadata":{{"labels":{{"managedFields":{fields}}}}}}}}}}}"#),
            format!(r#"{{"request":{{"options":{{"metadata":{{"managedFields":{fields}}}}}}}}}"#),
        ] {
            let without = elsewhere.replace(&fields, "[]");
            let charged = structure_cost(elsewhere.as_bytes()) - structure_cost(without.as_bytes());
            assert!(charged > 17 * STRUCTURE_COST_BYTES, "{charged} for {elsewhere}");
        }
    }

    #[test]
    fn a_six_hundred_kib_job_of_env_entries_with_the_api_servers_managed_fields_fits_half_the_budget() {
        let value = "x".repeat(80);
        let names: Vec<String> = (0..5_000).map(|index| format!("FLOOD_VAR_{index:05}")).collect();
        let entries: Vec<String> =
            names.iter().map(|name| format!(r#"{{"name":"{name}","value":"{value}"}}"#)).collect();
        let object = format!(
            r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"j","managedFields":{}}},"spec":{{"template":{{"spec":{{"containers":[{{"name":"c","env":[{}]}}]}}}}}}}}"#,
            managed_fields_for_env(&names),
            entries.join(",")
        );
        let body = format!(r#"{{"request":{{"uid":"u","object":{object}}}}}"#);
        assert!(body.len() > 850_000, "{}", body.len());
        let charged = structure_cost(body.as_bytes()) + body.len();
        assert!(charged < DEFAULT_MAX_INFLIGHT_BYTES / 2, "{charged}");
    }

    #[test]
    fn charges_are_given_back_when_dropped_and_refused_past_the_budget() {
        let limits = WebhookLimits { max_inflight_bytes: 100_000, max_inflight_requests: 2, ..Default::default() };
        let budget = RequestBudget::new(&limits);
        let mut first = budget.admit(50_000).unwrap();
        assert_eq!(budget.admit(50_000).unwrap_err(), Exhausted::Bytes);
        assert_eq!(first.add(40_000).unwrap_err(), Exhausted::Bytes);
        first.add(10_000).unwrap();
        let second = budget.admit(0).unwrap();
        assert_eq!(budget.admit(0).unwrap_err(), Exhausted::Requests);
        drop((first, second));
        assert_eq!(budget.available_bytes(), 100_000);
    }
}
