//! Leader election on a `coordination.k8s.io/v1` Lease (client-go semantics: lease 15 s, renew deadline 10 s,
//! retry 2 s) and the write gate every reconciler write checks first. The decision is pure
//! ([`build_lease_step`]); [`run_lease`] does the I/O.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::blockers::{BlockedReason, Blockers};
use crate::metrics::Metrics;

/// Timings and names of the Lease.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease name (`--lease-name`).
    pub name: String,
    /// Lease namespace (`--namespace`).
    pub namespace: String,
    /// This replica's identity (the pod name, made unique).
    pub identity: String,
    /// How long a lease is valid without renewal (written to `leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops writing (must be < `lease_duration`).
    pub renew_deadline: Duration,
    /// How often the leader renews and followers retry.
    pub retry_period: Duration,
    /// The TierPolicy this instance serves, recorded on the Lease ([`POLICY_ANNOTATION`]) so an instance serving
    /// another policy under the same Lease name is reported instead of following silently (empty: not recorded).
    pub policy_name: String,
    /// Create `namespace` when it does not exist (`--create-lease-namespace`).
    pub create_namespace: bool,
}

/// Lease annotation naming the TierPolicy its holder serves.
pub const POLICY_ANNOTATION: &str = "tiergate.io/policy";

impl LeaseConfig {
    /// The standard timings (15 s / 10 s / 2 s).
    pub fn new(name: String, namespace: String, identity: String) -> Self {
        Self {
            name,
            namespace,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            policy_name: String::new(),
            create_namespace: false,
        }
    }

    /// Records `policy_name` on the Lease this replica holds.
    #[must_use]
    pub fn serving(self, policy_name: String) -> Self {
        Self { policy_name, ..self }
    }

    /// Creates the Lease namespace when it is missing.
    #[must_use]
    pub fn creating_namespace(self, create_namespace: bool) -> Self {
        Self { create_namespace, ..self }
    }
}

/// Whether this replica may write now: open only while it holds the Lease and its last renewal is younger than
/// the renew deadline. Checked right before every write, so a replica that loses the Lease stops at once.
#[derive(Debug)]
pub struct WriteGate {
    valid_until: Mutex<Option<Instant>>,
    leading: watch::Sender<bool>,
}

impl WriteGate {
    /// A closed gate (no Lease held yet).
    pub fn new() -> Arc<Self> {
        Arc::new(Self { valid_until: Mutex::new(None), leading: watch::Sender::new(false) })
    }

    /// A gate that is open forever (tests and single-replica tools).
    pub fn always_open() -> Arc<Self> {
        let gate = Self::new();
        gate.open_until(Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600));
        gate
    }

    /// Whether a write may be sent now.
    pub fn is_open(&self) -> bool {
        self.valid_until.lock().ok().and_then(|guard| *guard).is_some_and(|until| Instant::now() < until)
    }

    /// Subscribes to leadership changes (true while leading).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn open_until(&self, until: Instant) {
        if let Ok(mut guard) = self.valid_until.lock() {
            *guard = Some(until);
        }
        self.leading.send_if_modified(|leading| !std::mem::replace(leading, true));
    }

    fn close(&self) {
        if let Ok(mut guard) = self.valid_until.lock() {
            *guard = None;
        }
        self.leading.send_if_modified(|leading| std::mem::replace(leading, false));
    }
}

/// What to do with the Lease as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseStep {
    /// No Lease exists: create it holding it.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Nobody holds it, or its holder stopped renewing for a whole lease duration: take it over.
    TakeOver,
    /// Someone else holds it and renews it: wait.
    Follow {
        /// Current holder.
        holder: String,
    },
}

/// The last Lease record seen and when (by the local clock, so clock skew between replicas does not matter).
#[derive(Clone, Debug, Default)]
pub struct LeaseObservation {
    record: Option<(Option<String>, Option<String>, Option<i32>)>,
    seen_at: Option<Instant>,
    holder_policy: Option<String>,
}

impl LeaseObservation {
    /// The TierPolicy the Lease's holder serves, as its [`POLICY_ANNOTATION`] said when last read.
    pub fn holder_policy(&self) -> Option<&str> {
        self.holder_policy.as_deref()
    }
}

/// Decides the step for `lease` as read at `now`, updating `observation`.
pub fn build_lease_step(
    observation: &mut LeaseObservation,
    lease: Option<&LeaseSpec>,
    identity: &str,
    lease_duration: Duration,
    now: Instant,
) -> LeaseStep {
    let Some(spec) = lease else {
        *observation = LeaseObservation::default();
        return LeaseStep::Create;
    };
    let record =
        (spec.holder_identity.clone(), spec.renew_time.as_ref().map(|time| time.0.to_string()), spec.lease_transitions);
    if observation.record.as_ref() != Some(&record) {
        observation.record = Some(record);
        observation.seen_at = Some(now);
    }
    let holder = spec.holder_identity.clone().filter(|holder| !holder.is_empty());
    match holder {
        None => LeaseStep::TakeOver,
        Some(holder) if holder == identity => LeaseStep::Renew,
        Some(holder) => {
            let duration = spec
                .lease_duration_seconds
                .and_then(|seconds| u64::try_from(seconds).ok())
                .map_or(lease_duration, Duration::from_secs);
            let seen_at = observation.seen_at.unwrap_or(now);
            if now.saturating_duration_since(seen_at) >= duration {
                LeaseStep::TakeOver
            } else {
                LeaseStep::Follow { holder }
            }
        }
    }
}

/// The Lease body for `step` (None for `Follow`).
pub fn build_lease_spec(step: &LeaseStep, current: Option<&LeaseSpec>, config: &LeaseConfig) -> Option<LeaseSpec> {
    let now = Some(MicroTime(Timestamp::now()));
    let duration = i32::try_from(config.lease_duration.as_secs()).ok();
    let transitions = current.and_then(|spec| spec.lease_transitions).unwrap_or(0);
    match step {
        LeaseStep::Follow { .. } => None,
        LeaseStep::Renew => Some(LeaseSpec {
            renew_time: now,
            lease_duration_seconds: duration,
            ..current.cloned().unwrap_or_default()
        }),
        LeaseStep::Create | LeaseStep::TakeOver => Some(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            acquire_time: now.clone(),
            renew_time: now,
            lease_duration_seconds: duration,
            lease_transitions: Some(if matches!(step, LeaseStep::Create) { 0 } else { transitions.saturating_add(1) }),
            ..LeaseSpec::default()
        }),
    }
}

/// Lease I/O failed; the loop logs it and retries after `retry_period`.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Reading the Lease failed.
    #[error("failed to read Lease {name}: {source}")]
    ReadLease {
        /// Lease name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing the Lease failed (other than losing a race).
    #[error("failed to write Lease {name}: {source}")]
    WriteLease {
        /// Lease name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Creating the Lease namespace failed (`--create-lease-namespace`).
    #[error("failed to create namespace {namespace}: {source}")]
    CreateNamespace {
        /// Namespace.
        namespace: String,
        /// Cause.
        source: kube::Error,
    },
}

impl LeaseError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ReadLease { .. } => "read_lease",
            Self::WriteLease { .. } => "write_lease",
            Self::CreateNamespace { .. } => "create_namespace",
        }
    }

    /// The blocker this failure is, with its specifics: a missing namespace (404 on create), RBAC (403), or
    /// anything else.
    pub fn blocker(&self, config: &LeaseConfig) -> (BlockedReason, String) {
        let (Self::ReadLease { source, .. } | Self::WriteLease { source, .. } | Self::CreateNamespace { source, .. }) =
            self;
        let lease = format!("Lease {}/{}", config.namespace, config.name);
        match source {
            kube::Error::Api(status) if status.is_forbidden() => {
                (BlockedReason::LeaseForbidden, format!("{lease}: {}", status.message))
            }
            kube::Error::Api(status) if status.is_not_found() && names_a_namespace(status) => (
                BlockedReason::LeaseNamespaceMissing,
                format!(
                    "namespace {:?} (--namespace) does not exist, so {lease} cannot be created; run `kubectl create \
                     namespace {}`",
                    config.namespace, config.namespace
                ),
            ),
            _ => (BlockedReason::LeaseUnavailable, format!("{lease}: {self}")),
        }
    }
}

/// Whether a 404 is about the namespace (creating in a namespace that does not exist), not the Lease itself.
fn names_a_namespace(status: &kube::core::Status) -> bool {
    status
        .details
        .as_ref()
        .map_or_else(|| status.message.starts_with("namespaces "), |details| details.kind == "namespaces")
}

/// Tries once to acquire or renew; `Ok(true)` when this replica holds the Lease afterwards.
pub async fn acquire_or_renew_lease(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observation: &mut LeaseObservation,
) -> Result<bool, LeaseError> {
    let current = api
        .get_opt(&config.name)
        .await
        .map_err(|source| LeaseError::ReadLease { name: config.name.clone(), source })?;
    observation.holder_policy = current
        .as_ref()
        .and_then(|lease| lease.metadata.annotations.as_ref())
        .and_then(|annotations| annotations.get(POLICY_ANNOTATION).cloned());
    let step = build_lease_step(
        observation,
        current.as_ref().and_then(|lease| lease.spec.as_ref()),
        &config.identity,
        config.lease_duration,
        Instant::now(),
    );
    let Some(spec) = build_lease_spec(&step, current.as_ref().and_then(|lease| lease.spec.as_ref()), config) else {
        return Ok(false);
    };
    let result = match current {
        None => {
            let mut lease = Lease {
                metadata: ObjectMeta { name: Some(config.name.clone()), ..ObjectMeta::default() },
                spec: Some(spec),
            };
            annotate_policy(&mut lease, config);
            api.create(&PostParams::default(), &lease).await.map(|_| ())
        }
        Some(mut lease) => {
            lease.spec = Some(spec);
            annotate_policy(&mut lease, config);
            api.replace(&config.name, &PostParams::default(), &lease).await.map(|_| ())
        }
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(source) => Err(LeaseError::WriteLease { name: config.name.clone(), source }),
    }
}

/// [`acquire_or_renew_lease`], creating the Lease namespace first when it is missing and
/// `--create-lease-namespace` allows it.
pub async fn attempt_lease(
    client: &Client,
    api: &Api<Lease>,
    config: &LeaseConfig,
    observation: &mut LeaseObservation,
) -> Result<bool, LeaseError> {
    let outcome = acquire_or_renew_lease(api, config, observation).await;
    match &outcome {
        Err(error) if config.create_namespace && error.blocker(config).0 == BlockedReason::LeaseNamespaceMissing => {
            tracing::info!(namespace = %config.namespace, "creating the Lease namespace (--create-lease-namespace)");
            create_namespace(client, &config.namespace).await?;
            acquire_or_renew_lease(api, config, observation).await
        }
        _ => outcome,
    }
}

/// Records the served policy on a Lease this replica writes as holder.
fn annotate_policy(lease: &mut Lease, config: &LeaseConfig) {
    if !config.policy_name.is_empty() {
        lease
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(POLICY_ANNOTATION.to_owned(), config.policy_name.clone());
    }
}

/// Creates the Lease namespace (`--create-lease-namespace`); one that already exists is fine.
async fn create_namespace(client: &Client, namespace: &str) -> Result<(), LeaseError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let body = Namespace {
        metadata: ObjectMeta { name: Some(namespace.to_owned()), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &body).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() || status.code == 409 => Ok(()),
        Err(source) => Err(LeaseError::CreateNamespace { namespace: namespace.to_owned(), source }),
    }
}

/// Records the outcome of one Lease attempt as blockers: every Lease blocker clears on success; a failure sets
/// its own; a holder serving another policy is a conflict.
fn record_lease_blockers(
    blockers: &Blockers,
    outcome: &Result<bool, LeaseError>,
    observation: &LeaseObservation,
    config: &LeaseConfig,
) {
    const FAILURES: [BlockedReason; 3] =
        [BlockedReason::LeaseNamespaceMissing, BlockedReason::LeaseForbidden, BlockedReason::LeaseUnavailable];
    let failure = outcome.as_ref().err().map(|error| error.blocker(config));
    for reason in FAILURES {
        match &failure {
            Some((failed, detail)) if *failed == reason => blockers.set(reason, detail.clone()),
            _ => blockers.clear(reason),
        }
    }
    let conflict = match (outcome, observation.holder_policy()) {
        (Ok(false), Some(holder)) if !config.policy_name.is_empty() && holder != config.policy_name => Some(format!(
            "Lease {}/{} is held by a tiergate serving TierPolicy {holder:?}; this one serves {:?} and will never lead",
            config.namespace, config.name, config.policy_name
        )),
        _ => None,
    };
    blockers.update(BlockedReason::LeaseConflict, conflict);
}

/// Gives the Lease up on shutdown so another replica takes over without waiting for it to expire.
async fn release_lease(api: &Api<Lease>, config: &LeaseConfig) {
    let Ok(Some(mut lease)) = api.get_opt(&config.name).await else { return };
    let Some(spec) = lease.spec.as_mut() else { return };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    if let Err(error) = api.replace(&config.name, &PostParams::default(), &lease).await {
        tracing::warn!(%error, lease = %config.name, "failed to release the leader Lease");
    }
}

/// Runs leader election until `shutdown`: opens `gate` while this replica holds the Lease, closes it the moment
/// it cannot prove it still does, and sets `lease_held` / `lease_lost`.
pub async fn run_lease(
    client: Client,
    config: LeaseConfig,
    gate: Arc<WriteGate>,
    (metrics, blockers): (Arc<Metrics>, Arc<Blockers>),
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let mut observation = LeaseObservation::default();
    let mut last_renewal: Option<Instant> = None;
    loop {
        let attempt_started = Instant::now();
        let outcome = attempt_lease(&client, &api, &config, &mut observation).await;
        record_lease_blockers(&blockers, &outcome, &observation, &config);
        let lost = match (&outcome, last_renewal) {
            (Ok(true), _) => {
                if last_renewal.is_none() {
                    tracing::info!(identity = %config.identity, lease = %config.name, "acquired the leader Lease");
                }
                last_renewal = Some(attempt_started);
                gate.open_until(attempt_started + config.renew_deadline);
                metrics.lease_held.set(1);
                false
            }
            // Another replica holds it now: stop at once.
            (Ok(false), Some(_)) => true,
            // The API failed: the gate stays open only until the renew deadline of the last renewal.
            (Err(error), Some(renewed)) => {
                tracing::warn!(%error, reason = error.reason(), "failed to renew the leader Lease");
                attempt_started.saturating_duration_since(renewed) >= config.renew_deadline
            }
            (Err(error), None) => {
                tracing::debug!(%error, reason = error.reason(), "failed to acquire the leader Lease");
                false
            }
            (Ok(false), None) => false,
        };
        if lost {
            tracing::warn!(identity = %config.identity, "lost the leader Lease; writes stop now");
            last_renewal = None;
            gate.close();
            metrics.lease_held.set(0);
            metrics.lease_lost.inc();
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(config.retry_period) => {}
        }
    }
    if last_renewal.is_some() {
        gate.close();
        metrics.lease_held.set(0);
        release_lease(&api, &config).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(15);

    fn lease(holder: Option<&str>, renewed: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn missing_lease_is_created() {
        let mut observation = LeaseObservation::default();
        assert_eq!(build_lease_step(&mut observation, None, "me", DURATION, Instant::now()), LeaseStep::Create);
    }

    #[test]
    fn own_lease_is_renewed() {
        let mut observation = LeaseObservation::default();
        let spec = lease(Some("me"), "2026-01-01T00:00:00Z");
        assert_eq!(build_lease_step(&mut observation, Some(&spec), "me", DURATION, Instant::now()), LeaseStep::Renew);
    }

    #[test]
    fn released_lease_is_taken_over_at_once() {
        let mut observation = LeaseObservation::default();
        let spec = lease(None, "2026-01-01T00:00:00Z");
        assert_eq!(
            build_lease_step(&mut observation, Some(&spec), "me", DURATION, Instant::now()),
            LeaseStep::TakeOver
        );
        let spec = lease(Some(""), "2026-01-01T00:00:00Z");
        assert_eq!(
            build_lease_step(&mut observation, Some(&spec), "me", DURATION, Instant::now()),
            LeaseStep::TakeOver
        );
    }

    #[test]
    fn renewing_holder_is_followed_and_a_silent_one_is_replaced_after_a_full_duration() {
        let mut observation = LeaseObservation::default();
        let start = Instant::now();
        let first = lease(Some("other"), "2026-01-01T00:00:00Z");
        let follow = LeaseStep::Follow { holder: "other".to_owned() };
        assert_eq!(build_lease_step(&mut observation, Some(&first), "me", DURATION, start), follow);
        let later = start + Duration::from_secs(14);
        assert_eq!(build_lease_step(&mut observation, Some(&first), "me", DURATION, later), follow);
        let renewed = lease(Some("other"), "2026-01-01T00:00:10Z");
        assert_eq!(build_lease_step(&mut observation, Some(&renewed), "me", DURATION, later), follow);
        let after_renewal = later + Duration::from_secs(14);
        assert_eq!(build_lease_step(&mut observation, Some(&renewed), "me", DURATION, after_renewal), follow);
        let expired = later + DURATION;
        assert_eq!(build_lease_step(&mut observation, Some(&renewed), "me", DURATION, expired), LeaseStep::TakeOver);
    }

    #[test]
    fn take_over_counts_a_transition_and_renewal_keeps_the_holder() {
        let config = LeaseConfig::new("l".to_owned(), "ns".to_owned(), "me".to_owned());
        let current = lease(Some("other"), "2026-01-01T00:00:00Z");
        let taken = build_lease_spec(&LeaseStep::TakeOver, Some(&current), &config).unwrap();
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(4));
        let mine = lease(Some("me"), "2026-01-01T00:00:00Z");
        let renewed = build_lease_spec(&LeaseStep::Renew, Some(&mine), &config).unwrap();
        assert_eq!(renewed.holder_identity.as_deref(), Some("me"));
        assert_ne!(renewed.renew_time, mine.renew_time);
        assert_eq!(build_lease_spec(&LeaseStep::Follow { holder: "x".to_owned() }, None, &config), None);
    }

    /// A client whose API server answers `replies` in order; the task yields the `METHOD path` of each call once
    /// every client is dropped.
    fn mock_api_server(replies: Vec<(u16, serde_json::Value)>) -> (Client, tokio::task::JoinHandle<Vec<String>>) {
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let server = tokio::spawn(async move {
            let mut calls = Vec::new();
            let mut replies = replies.into_iter();
            while let Some((request, send)) = handle.next_request().await {
                calls.push(format!("{} {}", request.method(), request.uri().path()));
                let (status, body) = replies.next().unwrap();
                let response = http::Response::builder()
                    .status(status)
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap();
                send.send_response(response);
            }
            calls
        });
        (Client::new(service, "default"), server)
    }

    /// Serves `replies` in order to the Lease calls and returns the `METHOD path` of each call.
    async fn lease_calls(
        replies: Vec<(u16, serde_json::Value)>,
        observation: &mut LeaseObservation,
    ) -> (Result<bool, LeaseError>, Vec<String>) {
        let (client, server) = mock_api_server(replies);
        let api: Api<Lease> = Api::namespaced(client, "tiergate-system");
        let config = LeaseConfig::new("tiergate-leader".to_owned(), "tiergate-system".to_owned(), "me".to_owned());
        let result = acquire_or_renew_lease(&api, &config, observation).await;
        drop(api);
        (result, server.await.unwrap())
    }

    fn lease_json(holder: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "tiergate-leader", "namespace": "tiergate-system", "resourceVersion": "5"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"},
        })
    }

    fn status(code: u16, reason: &str) -> serde_json::Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
    }

    #[tokio::test]
    async fn missing_lease_is_created_holding_it() {
        let replies = vec![(404, status(404, "NotFound")), (201, lease_json("me"))];
        let (result, calls) = lease_calls(replies, &mut LeaseObservation::default()).await;
        assert!(result.unwrap());
        let path = "/apis/coordination.k8s.io/v1/namespaces/tiergate-system/leases";
        assert_eq!(calls, vec![format!("GET {path}/tiergate-leader"), format!("POST {path}")]);
    }

    #[tokio::test]
    async fn lease_renewed_by_another_replica_is_only_read() {
        let (result, calls) = lease_calls(vec![(200, lease_json("other"))], &mut LeaseObservation::default()).await;
        assert!(!result.unwrap());
        assert_eq!(calls.len(), 1, "{calls:?}");
    }

    #[tokio::test]
    async fn losing_the_race_for_a_released_lease_is_not_an_error() {
        let replies = vec![(200, lease_json("")), (409, status(409, "Conflict"))];
        let (result, calls) = lease_calls(replies, &mut LeaseObservation::default()).await;
        assert!(!result.unwrap());
        assert!(calls[1].starts_with("PUT "), "{calls:?}");
    }

    /// Serves `replies` in order to [`attempt_lease`] with `config`; returns the result and the calls made.
    async fn attempt_calls(
        replies: Vec<(u16, serde_json::Value)>,
        config: LeaseConfig,
        observation: &mut LeaseObservation,
    ) -> (Result<bool, LeaseError>, Vec<String>) {
        let (client, server) = mock_api_server(replies);
        let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
        let result = attempt_lease(&client, &api, &config, observation).await;
        drop((api, client));
        (result, server.await.unwrap())
    }

    fn config() -> LeaseConfig {
        LeaseConfig::new("tiergate-leader".to_owned(), "tiergate-system".to_owned(), "me".to_owned())
            .serving("default".to_owned())
    }

    fn namespace_not_found() -> serde_json::Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "namespaces \"tiergate-system\" not found",
            "details": {"name": "tiergate-system", "kind": "namespaces"}})
    }

    #[tokio::test]
    async fn a_missing_lease_namespace_blocks_with_the_command_that_creates_it() {
        let replies = vec![(404, status(404, "NotFound")), (404, namespace_not_found())];
        let mut observation = LeaseObservation::default();
        let (result, _) = attempt_calls(replies, config(), &mut observation).await;
        let metrics = Metrics::new();
        let blockers = Blockers::new(&metrics);
        record_lease_blockers(&blockers, &result, &observation, &config());
        let active = blockers.active();
        assert_eq!(active.len(), 1, "{active:?}");
        assert_eq!(active[0].reason, BlockedReason::LeaseNamespaceMissing);
        assert!(active[0].detail.contains("kubectl create namespace tiergate-system"), "{}", active[0].detail);
        // The next successful attempt clears it.
        record_lease_blockers(&blockers, &Ok(true), &observation, &config());
        assert!(blockers.active().is_empty());
    }

    #[tokio::test]
    async fn create_lease_namespace_creates_the_missing_namespace_then_the_lease() {
        let replies = vec![
            (404, status(404, "NotFound")),
            (404, namespace_not_found()),
            (
                201,
                serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tiergate-system"}}),
            ),
            (404, status(404, "NotFound")),
            (201, lease_json("me")),
        ];
        let config = config().creating_namespace(true);
        let (result, calls) = attempt_calls(replies, config, &mut LeaseObservation::default()).await;
        assert!(result.unwrap());
        assert_eq!(calls[2], "POST /api/v1/namespaces", "{calls:?}");
        assert_eq!(calls.len(), 5, "{calls:?}");
    }

    #[tokio::test]
    async fn a_forbidden_lease_blocks_as_forbidden() {
        let replies = vec![(403, status(403, "Forbidden"))];
        let mut observation = LeaseObservation::default();
        let (result, _) = attempt_calls(replies, config(), &mut observation).await;
        let blockers = Blockers::new(&Metrics::new());
        record_lease_blockers(&blockers, &result, &observation, &config());
        assert_eq!(blockers.active()[0].reason, BlockedReason::LeaseForbidden);
    }

    #[tokio::test]
    async fn a_lease_held_by_an_instance_serving_another_policy_is_a_conflict() {
        let mut held = lease_json("other");
        held["metadata"]["annotations"] = serde_json::json!({POLICY_ANNOTATION: "fleet"});
        let mut observation = LeaseObservation::default();
        let (result, _) = attempt_calls(vec![(200, held)], config(), &mut observation).await;
        assert!(!result.as_ref().unwrap());
        assert_eq!(observation.holder_policy(), Some("fleet"));
        let blockers = Blockers::new(&Metrics::new());
        record_lease_blockers(&blockers, &result, &observation, &config());
        let active = blockers.active();
        assert_eq!(active[0].reason, BlockedReason::LeaseConflict);
        assert!(active[0].detail.contains("\"fleet\"") && active[0].detail.contains("\"default\""));
        // A follower of an instance serving the same policy is not blocked.
        let mut same = lease_json("other");
        same["metadata"]["annotations"] = serde_json::json!({POLICY_ANNOTATION: "default"});
        let (result, _) = attempt_calls(vec![(200, same)], config(), &mut observation).await;
        record_lease_blockers(&blockers, &result, &observation, &config());
        assert!(blockers.active().is_empty());
    }

    #[tokio::test]
    async fn the_holder_records_its_policy_on_the_lease_it_creates() {
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let server = tokio::spawn(async move {
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(
                http::Response::builder()
                    .status(404)
                    .body(kube::client::Body::from(serde_json::to_vec(&status(404, "NotFound")).unwrap()))
                    .unwrap(),
            );
            let (request, send) = handle.next_request().await.unwrap();
            let body = request.into_body().collect_bytes().await.unwrap();
            send.send_response(
                http::Response::builder()
                    .status(201)
                    .body(kube::client::Body::from(serde_json::to_vec(&lease_json("me")).unwrap()))
                    .unwrap(),
            );
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()
        });
        let api: Api<Lease> = Api::namespaced(Client::new(service, "default"), "tiergate-system");
        assert!(acquire_or_renew_lease(&api, &config(), &mut LeaseObservation::default()).await.unwrap());
        drop(api);
        let created = server.await.unwrap();
        assert_eq!(created["metadata"]["annotations"][POLICY_ANNOTATION], "default");
    }

    #[tokio::test(start_paused = true)]
    async fn gate_closes_by_itself_when_renewals_stop() {
        let gate = WriteGate::new();
        assert!(!gate.is_open());
        gate.open_until(Instant::now() + Duration::from_secs(10));
        assert!(gate.is_open());
        assert!(*gate.subscribe().borrow());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!gate.is_open(), "a stalled renewal must close the gate without the lease loop");
        gate.close();
        assert!(!*gate.subscribe().borrow());
    }
}
