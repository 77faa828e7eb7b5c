//! The HTTPS admission server: axum on rustls, `POST /mutate`, request limits, certificate reload from files and
//! graceful shutdown; does I/O. The decision itself is [`super::decide_review`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, BodyDataStream};
use axum::extract::{Request, State};
use axum::http::{StatusCode, Version, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt as _;
use kube::core::admission::AdmissionResponse;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use super::DecisionLabel;
use super::limits::{Charge, Exhausted, RETRY_AFTER_SECONDS, RequestBudget, WebhookLimits, structure_cost};
use super::review::{decide_review, encode_review, invalid_response, parse_review};
use super::{Decision, Request as ReviewRequest, Verdict};
use crate::metrics::{AdmissionLabels, Metrics, ReasonLabels};
use crate::placement::PlacementLedger;
use crate::policy::FailureMode;
use crate::scoring::Scorer;
use crate::view::{SharedSnapshot, Snapshot};

pub use super::limits::MAX_BODY_BYTES;
/// Time allowed to receive a request body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to receive a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for a TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The default decision deadline: 4/5 of the chart's `timeoutSeconds: 5` ([`super::limits::deadlines`]).
pub const DECISION_TIMEOUT: Duration = Duration::from_secs(4);
/// Most bytes of an oversize HTTP/2 body read and discarded so the client sees the 413 (beyond it, the stream
/// is reset).
pub const H2_DRAIN_BYTES: usize = 16 * 1024 * 1024;
/// How often the certificate and key files are checked for changes.
pub const CERT_POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How long in-flight requests may take to finish after shutdown is asked for.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// Where and with which certificate to serve.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// HTTPS listen address.
    pub listen: SocketAddr,
    /// PEM certificate chain, reloaded when it changes.
    pub tls_cert: PathBuf,
    /// PEM private key, reloaded when it changes.
    pub tls_key: PathBuf,
    /// Body size, in-flight budget and deadlines.
    pub limits: WebhookLimits,
}

/// What every admission request reads: the snapshot, the scorer, the placement ledger and the metrics.
#[derive(Clone, Debug)]
pub struct AdmissionState {
    /// Synced caches.
    pub snapshot: SharedSnapshot,
    /// Scheduler-agent scores.
    pub scorer: Arc<Scorer>,
    /// Placement ledgers.
    pub ledger: Arc<PlacementLedger>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// Serving failed to start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The certificate or key could not be loaded.
    #[error("failed to load the TLS certificate or key: {0}")]
    LoadCertificate(String),
    /// The listener could not be bound or failed.
    #[error("failed to serve HTTPS on {listen}: {source}")]
    Serve {
        /// Listen address.
        listen: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

impl ServeError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::LoadCertificate(_) => "load_certificate",
            Self::Serve { .. } => "serve",
        }
    }
}

/// Serves `/mutate` until `shutdown` is cancelled, then drains in-flight requests.
pub async fn serve_webhook(
    config: WebhookConfig,
    state: AdmissionState,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let listener = bind_webhook_listener(config.listen)?;
    serve_webhook_with(listener, (&config.tls_cert, &config.tls_key), state, config.limits, shutdown).await
}

/// The webhook's listener on `listen`, bound now (non-blocking, for [`serve_webhook_with`]).
pub fn bind_webhook_listener(listen: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    std::net::TcpListener::bind(listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|source| ServeError::Serve { listen, source })
}

/// [`serve_webhook`] on a listener already bound (tests bind port 0 and read the address first), with the
/// default limits.
pub async fn serve_webhook_on(
    listener: std::net::TcpListener,
    tls_cert: &Path,
    tls_key: &Path,
    state: AdmissionState,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_webhook_with(listener, (tls_cert, tls_key), state, WebhookLimits::default(), shutdown).await
}

/// [`serve_webhook_on`] with `limits`.
pub async fn serve_webhook_with(
    listener: std::net::TcpListener,
    files: (&Path, &Path),
    state: AdmissionState,
    limits: WebhookLimits,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_webhook_draining(listener, files, state, limits, Arc::default(), shutdown).await
}

/// [`serve_webhook_with`] that, once `draining` is set (SIGTERM, before `shutdown` closes the server), answers
/// every HTTP/1.1 request with `Connection: close`: the API server closes the keep-alive connection itself after
/// that answer and dials again, reaching a replica that is not leaving. A connection the server closed instead
/// could race the API server's next request on it, which then fails open (issue 48 saw one create refused by the
/// in-server gate during a `helm upgrade`).
pub async fn serve_webhook_draining(
    listener: std::net::TcpListener,
    (tls_cert, tls_key): (&Path, &Path),
    state: AdmissionState,
    limits: WebhookLimits,
    draining: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let listen = listener.local_addr().map_err(|source| ServeError::Serve { listen: unspecified(), source })?;
    let files = read_pem_pair(tls_cert, tls_key).await.map_err(ServeError::LoadCertificate)?;
    let tls = RustlsConfig::from_config(Arc::new(build_tls_config(&files).map_err(ServeError::LoadCertificate)?));
    record_expiry(&state.metrics, &files.0);
    tokio::spawn(watch_certificate(
        (tls_cert.to_owned(), tls_key.to_owned()),
        files,
        tls.clone(),
        state.metrics.clone(),
        shutdown.child_token(),
    ));

    let handle = axum_server::Handle::new();
    let drain = handle.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        tracing::info!(timeout_seconds = DRAIN_TIMEOUT.as_secs(), "webhook draining in-flight requests");
        drain.graceful_shutdown(Some(DRAIN_TIMEOUT));
    });

    // TCP_NODELAY: the handshake's small records otherwise wait on Nagle and delayed ACKs (~40 ms each).
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
        .handshake_timeout(HANDSHAKE_TIMEOUT)
        .acceptor(axum_server::accept::NoDelayAcceptor::new());
    let mut server = axum_server::from_tcp(listener)
        .map_err(|source| ServeError::Serve { listen, source })?
        .acceptor(acceptor)
        .handle(handle);
    server.http_builder().http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    tracing::info!(%listen, "webhook serving POST /mutate over TLS");
    server
        .serve(draining_router(state, limits, draining).into_make_service())
        .await
        .map_err(|source| ServeError::Serve { listen, source })
}

/// [`router_with`] that answers `Connection: close` over HTTP/1.x once `draining` is set.
pub fn draining_router(state: AdmissionState, limits: WebhookLimits, draining: Arc<AtomicBool>) -> Router {
    router_with(state, limits).layer(from_fn_with_state(draining, close_while_draining))
}

/// Adds `Connection: close` to an HTTP/1.x answer while the replica drains (HTTP/2 has no such header: its
/// connections end with GOAWAY at shutdown).
async fn close_while_draining(State(draining): State<Arc<AtomicBool>>, request: Request, next: Next) -> Response {
    let http1 = request.version() < Version::HTTP_2;
    let mut response = next.run(request).await;
    if http1 && draining.load(Ordering::Relaxed) {
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    response
}

fn unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

/// What every handler shares: the admission state, the limits and the global budget.
#[derive(Debug)]
struct Served {
    state: AdmissionState,
    limits: WebhookLimits,
    budget: RequestBudget,
}

/// The webhook's routes with the default limits.
pub fn router(state: AdmissionState) -> Router {
    router_with(state, WebhookLimits::default())
}

/// The webhook's routes: `POST /mutate`; axum answers 405 for other methods and 404 for other paths.
pub fn router_with(state: AdmissionState, limits: WebhookLimits) -> Router {
    let budget = RequestBudget::new(&limits);
    Router::new().route("/mutate", post(handle_mutate)).with_state(Arc::new(Served { state, limits, budget }))
}

/// Why a body was not read to the end.
enum BodyRefusal {
    /// The rest of the body, still unread.
    TooLarge(BodyDataStream),
    Exhausted(Exhausted),
    Broken(axum::Error),
}

async fn handle_mutate(State(served): State<Arc<Served>>, request: Request) -> Response {
    let started = Instant::now();
    let (state, limits) = (&served.state, &served.limits);
    let headers = request.headers();
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the AdmissionReview as Content-Type: application/json\n")
            .into_response();
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    let http2 = request.version() == Version::HTTP_2;
    if declared.is_some_and(|length| length > limits.max_body_bytes) {
        return too_large(state, limits, http2, request.into_body().into_data_stream());
    }
    // The budget is taken before a byte of the body is buffered: Content-Length up front, the rest as it arrives.
    let mut charge = match served.budget.admit(declared.unwrap_or(0)) {
        Ok(charge) => charge,
        Err(exhausted) => return too_busy(state, exhausted),
    };
    let read = read_body(request.into_body(), declared, limits.max_body_bytes, &mut charge);
    let body = match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Err(_) => {
            return (StatusCode::REQUEST_TIMEOUT, "request body not received in time\n").into_response();
        }
        Ok(Err(BodyRefusal::TooLarge(rest))) => return too_large(state, limits, http2, rest),
        Ok(Err(BodyRefusal::Exhausted(exhausted))) => return too_busy(state, exhausted),
        Ok(Err(BodyRefusal::Broken(error))) => {
            tracing::debug!(%error, "failed to read the request body");
            return (StatusCode::BAD_REQUEST, "failed to read the request body\n").into_response();
        }
        Ok(Ok(body)) => body,
    };
    // Deciding builds a tree of every object in the body: charge that too, before parsing.
    let structure = structure_cost(&body);
    if structure.saturating_add(body.len()) > limits.max_inflight_bytes {
        return too_complex(state, limits, &body, structure);
    }
    if let Err(exhausted) = charge.add(structure) {
        return too_busy(state, exhausted);
    }
    let response = match parse_review(&body) {
        Err((uid, error)) => {
            count(&state.metrics, "unknown", DecisionLabel::Invalid);
            tracing::warn!(reason = error.reason(), %error, "malformed admission review");
            invalid_response(uid, &error)
        }
        // The body stays (it is charged until the answer is encoded): the patch is folded against the object as
        // sent, which the lean request holds only in part.
        Ok(request) => respond(state, limits.decision_timeout, &request, &body).await,
    };
    let body = encode_review(&response);
    state.metrics.admission_latency_seconds.observe(started.elapsed().as_secs_f64());
    drop(charge);
    match body {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "failed to encode the admission review");
            let fallback = encode_review(&AdmissionResponse::invalid("failed to encode the answer"));
            ([(header::CONTENT_TYPE, "application/json")], fallback.unwrap_or_default()).into_response()
        }
    }
}

/// Reads the body frame by frame, charging bytes beyond the declared length to the budget as they arrive.
async fn read_body(
    body: Body,
    declared: Option<usize>,
    max_body_bytes: usize,
    charge: &mut Charge,
) -> Result<Vec<u8>, BodyRefusal> {
    let mut charged = declared.unwrap_or(0);
    let mut buffer = Vec::with_capacity(charged);
    let mut frames = body.into_data_stream();
    while let Some(frame) = frames.next().await {
        let frame = frame.map_err(BodyRefusal::Broken)?;
        let total = buffer.len() + frame.len();
        if total > max_body_bytes {
            return Err(BodyRefusal::TooLarge(frames));
        }
        if total > charged {
            charge.add(total - charged).map_err(BodyRefusal::Exhausted)?;
            charged = total;
        }
        buffer.extend_from_slice(&frame);
    }
    Ok(buffer)
}

/// 413 for a body over the limit (declared or found while reading). Over HTTP/2 the rest of the body is read
/// and discarded by a task of its own (never buffered, at most [`H2_DRAIN_BYTES`] for [`BODY_READ_TIMEOUT`]), so
/// the stream ends cleanly after the 413 instead of being reset under a client still sending; HTTP/1.1 answers
/// and closes the connection.
fn too_large(state: &AdmissionState, limits: &WebhookLimits, http2: bool, mut frames: BodyDataStream) -> Response {
    if http2 {
        tokio::spawn(async move {
            let drain = async {
                let mut drained = 0usize;
                while let Some(Ok(frame)) = frames.next().await {
                    drained += frame.len();
                    if drained > H2_DRAIN_BYTES {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(BODY_READ_TIMEOUT, drain).await;
        });
    }
    refuse_too_large(state, limits)
}

/// A body whose objects alone would need more than the whole budget to decide is **denied** with a review-shaped
/// answer, never refused with a bare 413: the API server applies `failurePolicy` to a non-200, and under `Ignore` a
/// tenant could otherwise pad any GPU workload past the budget to have it admitted unchecked. Only the request's
/// uid is read (serde skips every other value without building it), so the answer costs no more than the bytes
/// already charged. Without a uid the body is no AdmissionReview at all: 413.
fn too_complex(state: &AdmissionState, limits: &WebhookLimits, body: &[u8], structure: usize) -> Response {
    state.metrics.admission_refused.get_or_create(&ReasonLabels { reason: "body_too_complex" }).inc();
    let message = format!(
        "tiergate cannot check this object: its AdmissionReview of {} bytes would need about {structure} more bytes \
         for its JSON objects, arrays and elements, more than the webhook's whole in-flight budget ({} bytes, \
         --max-inflight-bytes). Fix: move large inline data (long env lists, configs) into a ConfigMap or Secret \
         and reference it, or have the platform team raise webhook.maxInflightBytes with the memory limit.",
        body.len(),
        limits.max_inflight_bytes
    );
    let Some(uid) = review_uid(body) else {
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("{message}\n")).into_response();
    };
    let mut response = AdmissionResponse::invalid(message);
    response.uid = uid;
    response.result.code = 413;
    response.result.reason = "RequestEntityTooLarge".to_owned();
    count(&state.metrics, "unknown", DecisionLabel::Denied);
    match encode_review(&response) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "failed to encode the admission review");
            (StatusCode::PAYLOAD_TOO_LARGE, format!("{}\n", response.result.message)).into_response()
        }
    }
}

/// The `request.uid` of an AdmissionReview body, read without materializing anything else.
fn review_uid(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Review<'a> {
        #[serde(borrow)]
        request: Option<Uid<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Uid<'a> {
        #[serde(borrow)]
        uid: std::borrow::Cow<'a, str>,
    }
    let review: Review<'_> = serde_json::from_slice(body).ok()?;
    review.request.map(|request| request.uid.into_owned()).filter(|uid| !uid.is_empty())
}

fn refuse_too_large(state: &AdmissionState, limits: &WebhookLimits) -> Response {
    state.metrics.admission_refused.get_or_create(&ReasonLabels { reason: "body_too_large" }).inc();
    let message = format!("an AdmissionReview is at most {} bytes\n", limits.max_body_bytes);
    (StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
}

/// 429 past the global budget. The API server applies the webhook's `failurePolicy` to it (`Fail` rejects the
/// request, `Ignore` admits it unchanged), so the operator's choice decides, not tiergate; a review-shaped
/// answer would need the uid from a body the budget cannot afford to read.
fn too_busy(state: &AdmissionState, exhausted: Exhausted) -> Response {
    state.metrics.admission_refused.get_or_create(&ReasonLabels { reason: exhausted.reason() }).inc();
    tracing::warn!(reason = exhausted.reason(), "admission request refused: the in-flight budget is spent");
    let message = format!(
        "tiergate is at its in-flight limit ({}); retry in {RETRY_AFTER_SECONDS} s\n",
        match exhausted {
            Exhausted::Bytes => "--max-inflight-bytes",
            Exhausted::Requests => "--max-inflight-requests",
        }
    );
    (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, RETRY_AFTER_SECONDS.to_string())], message).into_response()
}

async fn respond(
    state: &AdmissionState,
    decision_timeout: Duration,
    request: &ReviewRequest,
    body: &[u8],
) -> AdmissionResponse {
    let started = tokio::time::Instant::now();
    let snapshot = synced_snapshot(&state.snapshot, decision_timeout / 2).await;
    let mut decision = if snapshot.synced {
        let decided = decide_review(request, &snapshot, &state.ledger, &state.scorer);
        match tokio::time::timeout(decision_timeout.saturating_sub(started.elapsed()), decided).await {
            Ok(decision) => decision,
            Err(_) => {
                let message = format!("failed to decide within {} ms", decision_timeout.as_millis());
                failed(&snapshot, kind_label(request), "decision_timeout", message)
            }
        }
    } else {
        let message = "tiergate's caches have not synced yet".to_owned();
        Decision::unchanged(
            kind_label(request),
            Verdict::Failed { reason: "not_synced", message: message.clone(), closed: false },
            vec![message],
        )
    };
    if decision.label() == DecisionLabel::Mutated {
        decision.fold_for_api_server(body);
    }
    record(&state.metrics, &decision);
    log(request, &decision);
    decision.response(request)
}

/// How often a request that arrived before the caches synced looks again.
const SYNC_POLL: Duration = Duration::from_millis(20);

/// The snapshot to decide from: the current one once synced, waiting up to `budget` for the caches to sync (a
/// restarted replica the API server reaches before it is Ready, through a Service endpoint not yet updated, then
/// confines the request instead of leaving it to the in-server gate, which refuses it); the unsynced one after that.
pub async fn synced_snapshot(shared: &SharedSnapshot, budget: Duration) -> Arc<Snapshot> {
    let snapshot = shared.load_full();
    if snapshot.synced {
        // Every review once the caches have synced: no clock read on this path.
        return snapshot;
    }
    let deadline = tokio::time::Instant::now() + budget;
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return shared.load_full();
        }
        tokio::time::sleep(SYNC_POLL.min(deadline - now)).await;
        let snapshot = shared.load_full();
        if snapshot.synced {
            return snapshot;
        }
    }
}

fn failed(snapshot: &Snapshot, kind: &'static str, reason: &'static str, message: String) -> Decision {
    let closed =
        snapshot.policy.as_ref().is_some_and(|policy| policy.spec.admission.failure_mode == FailureMode::Closed);
    Decision::unchanged(kind, Verdict::Failed { reason, message: message.clone(), closed }, vec![message])
}

/// The metrics label of the request's kind (`unknown` for kinds tiergate does not handle).
fn kind_label(request: &ReviewRequest) -> &'static str {
    let kind = &request.kind;
    tiergate_workloads::adapter_for(&kind.group, &kind.version, &kind.kind).map_or("unknown", |adapter| adapter.kind)
}

fn count(metrics: &Metrics, kind: &'static str, decision: DecisionLabel) {
    metrics.admission_requests.get_or_create(&AdmissionLabels { kind, decision: decision.as_str() }).inc();
}

fn record(metrics: &Metrics, decision: &Decision) {
    count(metrics, decision.kind, decision.label());
    match &decision.verdict {
        Verdict::Deny { reason, .. } => {
            metrics.admission_denials.get_or_create(&ReasonLabels { reason }).inc();
        }
        Verdict::Failed { reason, closed: false, .. } => {
            metrics.admission_fail_open.get_or_create(&ReasonLabels { reason }).inc();
        }
        _ => {}
    }
}

fn log(request: &ReviewRequest, decision: &Decision) {
    let namespace = request.namespace.as_deref().unwrap_or_default();
    match &decision.verdict {
        Verdict::Deny { reason, message } => {
            tracing::info!(kind = decision.kind, namespace, name = %request.name, reason, %message, "denied");
        }
        Verdict::Failed { reason, message, closed } => {
            tracing::warn!(kind = decision.kind, namespace, name = %request.name, reason, closed, %message, "failed");
        }
        verdict => {
            tracing::debug!(kind = decision.kind, namespace, name = %request.name, ?verdict, patch_ops = decision.patch.0.len(), "decided");
        }
    }
}

/// A certificate chain and key as read from their files.
type PemPair = (Vec<u8>, Vec<u8>);

async fn read_pem_pair(cert: &Path, key: &Path) -> Result<PemPair, String> {
    let read = |path: PathBuf| async move {
        tokio::fs::read(&path).await.map_err(|error| format!("failed to read {}: {error}", path.display()))
    };
    Ok((read(cert.to_owned()).await?, read(key.to_owned()).await?))
}

/// A rustls server config (ring, TLS 1.3 and 1.2, ALPN h2 and http/1.1) from a PEM chain and key.
pub fn build_tls_config((cert, key): &PemPair) -> Result<ServerConfig, String> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("failed to parse the certificate PEM: {error}"))?;
    if chain.is_empty() {
        return Err("failed to find a CERTIFICATE block in the certificate file".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| format!("failed to parse the key PEM: {error}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| format!("failed to select TLS versions: {error}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| format!("failed to pair the certificate with the key: {error}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Sets `certificate_expiry_timestamp_seconds` from the chain's first (serving) certificate.
fn record_expiry(metrics: &Metrics, cert_pem: &[u8]) {
    let not_after = CertificateDer::pem_slice_iter(cert_pem).next().and_then(Result::ok).and_then(|der| {
        x509_parser::parse_x509_certificate(&der).ok().map(|(_, cert)| cert.validity().not_after.timestamp())
    });
    match not_after {
        Some(timestamp) => {
            metrics.certificate_expiry_timestamp_seconds.set(timestamp);
        }
        None => tracing::warn!("failed to read the serving certificate's expiry; the expiry metric is not set"),
    }
}

/// Polls the certificate and key; a changed pair that loads is used for new handshakes, one that does not is
/// reported once and ignored (the previous certificate stays in use).
async fn watch_certificate(
    (cert, key): (PathBuf, PathBuf),
    mut current: PemPair,
    tls: RustlsConfig,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut rejected: Option<PemPair> = None;
    let mut ticks = tokio::time::interval(CERT_POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let files = match read_pem_pair(&cert, &key).await {
            Ok(files) => files,
            Err(error) => {
                tracing::debug!(%error, "certificate files not readable; keeping the current certificate");
                continue;
            }
        };
        if files == current || rejected.as_ref() == Some(&files) {
            continue;
        }
        match build_tls_config(&files) {
            Ok(config) => {
                tls.reload_from_config(Arc::new(config));
                record_expiry(&metrics, &files.0);
                metrics.certificate_reloads.get_or_create(&ReasonLabels { reason: "reloaded" }).inc();
                tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                current = files;
                rejected = None;
            }
            Err(error) => {
                metrics.certificate_reloads.get_or_create(&ReasonLabels { reason: "invalid" }).inc();
                tracing::warn!(%error, "changed certificate or key does not load; keeping the current certificate");
                rejected = Some(files);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    fn state() -> AdmissionState {
        AdmissionState {
            snapshot: Arc::default(),
            scorer: Arc::default(),
            ledger: Arc::default(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    async fn connection_header(draining: bool, version: Version) -> Option<String> {
        let router = draining_router(state(), WebhookLimits::default(), Arc::new(AtomicBool::new(draining)));
        let request = axum::http::Request::post("/mutate").version(version).body(Body::from("{}")).unwrap();
        let response = router.oneshot(request).await.unwrap();
        response.headers().get(header::CONNECTION).map(|value| value.to_str().unwrap().to_owned())
    }

    #[tokio::test]
    async fn a_draining_replica_asks_http1_clients_to_close_their_connection_and_only_then() {
        assert_eq!(connection_header(true, Version::HTTP_11).await.as_deref(), Some("close"));
        assert_eq!(connection_header(false, Version::HTTP_11).await, None);
        assert_eq!(connection_header(true, Version::HTTP_2).await, None, "HTTP/2 has no Connection header");
    }

    fn unsynced() -> SharedSnapshot {
        Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot { synced: false, ..Snapshot::default() }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_arrives_before_the_caches_sync_is_decided_once_they_do() {
        let shared = unsynced();
        let waiting = tokio::spawn({
            let shared = shared.clone();
            async move { synced_snapshot(&shared, Duration::from_secs(2)).await }
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(!waiting.is_finished(), "it waits while the caches list");
        shared.store(Arc::new(Snapshot { synced: true, ..Snapshot::default() }));
        let snapshot = waiting.await.unwrap();
        assert!(snapshot.synced);
    }

    #[tokio::test(start_paused = true)]
    async fn caches_that_do_not_sync_within_the_budget_leave_the_request_to_the_fail_open_answer() {
        let started = tokio::time::Instant::now();
        let snapshot = synced_snapshot(&unsynced(), Duration::from_secs(2)).await;
        assert!(!snapshot.synced);
        assert_eq!(started.elapsed(), Duration::from_secs(2), "bounded by the budget, on paused time");
    }
}
