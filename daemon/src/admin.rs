//! The plain-HTTP admin server: `/healthz`, `/readyz` (caches synced, not draining, the webhook's certificate
//! usable; the body lists every active blocker with its fix) and `/metrics`; does I/O.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::blockers::{Blocker, Blockers, Severity};
use crate::metrics::Metrics;
use crate::view::SharedSnapshot;

/// Content type of `/metrics` (prometheus-client encodes OpenMetrics text).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the admin endpoints report on.
#[derive(Clone, Debug)]
pub struct AdminState {
    /// Metrics to encode.
    pub metrics: Arc<Metrics>,
    /// Ready only once `synced` is true.
    pub snapshot: SharedSnapshot,
    /// Set on SIGTERM: `/readyz` turns false so the Service stops sending new requests.
    pub draining: Arc<AtomicBool>,
    /// What keeps the daemon from its job: listed in `/readyz`'s body; those that stop the webhook make it 503.
    pub blockers: Arc<Blockers>,
    /// Set once the webhook's listener is bound with its certificate: until then the Service must not send this
    /// replica an admission request (a self-managed certificate is issued after the caches may have synced).
    pub webhook_serving: Arc<AtomicBool>,
}

/// Serves the admin endpoints until `shutdown` is cancelled.
pub async fn serve_admin(
    listen: SocketAddr,
    state: AdminState,
    shutdown: CancellationToken,
) -> Result<(), std::io::Error> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "admin server listening (/healthz, /readyz, /metrics)");
    axum::serve(listener, build_admin_router(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

/// The admin routes, without a listener (tests drive it directly).
pub fn build_admin_router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(handle_healthz))
        .route("/readyz", get(handle_readyz))
        .route("/metrics", get(handle_metrics))
        .with_state(state)
}

async fn handle_healthz() -> &'static str {
    "ok"
}

/// Why the replica is not ready, if it is not.
pub fn unready_reason(state: &AdminState) -> Option<&'static str> {
    if state.draining.load(Ordering::Relaxed) {
        Some("draining: shutting down")
    } else if !state.snapshot.load().synced {
        Some("caches not synced yet")
    } else if !state.webhook_serving.load(Ordering::Relaxed) {
        Some("the webhook is not serving yet: its certificate is being issued")
    } else if state.blockers.active().iter().any(|blocker| blocker.reason.blocks_readiness()) {
        Some("the webhook cannot serve")
    } else {
        None
    }
}

/// The `/readyz` answer: `ok` alone when ready and nothing blocks; else the first line says whether the replica
/// is ready, and one line per active blocker says what is wrong and how to fix it.
/// Features the cluster does not serve (notices) follow, one `[~]` line each, without changing the first line.
pub fn build_readyz_body(unready: Option<&str>, blockers: &[Blocker]) -> String {
    let (notices, blockers): (Vec<&Blocker>, Vec<&Blocker>) =
        blockers.iter().partition(|blocker| blocker.reason.severity() == Severity::Notice);
    let mut body = match (unready, blockers.is_empty()) {
        (None, true) if notices.is_empty() => return "ok".to_owned(),
        (None, true) => "ok".to_owned(),
        (None, false) => "ready (the webhook serves), but blocked:".to_owned(),
        (Some(reason), true) => reason.to_owned(),
        (Some(reason), false) => format!("{reason}; blocked:"),
    };
    for blocker in blockers {
        body.push_str(&format!("\n[-] {}: {}", blocker.reason.label(), blocker.describe()));
    }
    if !notices.is_empty() {
        body.push_str("\nnot served by this cluster:");
    }
    for notice in notices {
        body.push_str(&format!("\n[~] {}: {}", notice.reason.label(), notice.describe()));
    }
    body.push('\n');
    body
}

async fn handle_readyz(State(state): State<AdminState>) -> (StatusCode, String) {
    let unready = unready_reason(&state);
    let body = build_readyz_body(unready, &state.blockers.active());
    let code = if unready.is_some() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (code, body)
}

async fn handle_metrics(State(state): State<AdminState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::warn!(%error, "failed to encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "failed to encode metrics").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Snapshot;
    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt;

    fn state(synced: bool, draining: bool) -> AdminState {
        let metrics = Arc::new(Metrics::new());
        AdminState {
            blockers: Blockers::new(&metrics),
            metrics,
            snapshot: Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot { synced, ..Snapshot::default() })),
            draining: Arc::new(AtomicBool::new(draining)),
            webhook_serving: Arc::new(AtomicBool::new(true)),
        }
    }

    async fn get_path(state: AdminState, path: &str) -> (StatusCode, String, Option<String>) {
        let response =
            build_admin_router(state).oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let content_type = response.headers().get(header::CONTENT_TYPE).map(|value| value.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap(), content_type)
    }

    #[tokio::test]
    async fn readyz_waits_for_the_webhook_to_serve_with_its_certificate() {
        let state = state(true, false);
        state.webhook_serving.store(false, Ordering::Relaxed);
        let (status, body, _) = get_path(state.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("not serving yet"), "{body}");
        state.webhook_serving.store(true, Ordering::Relaxed);
        assert_eq!(get_path(state, "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn readyz_waits_for_synced_caches() {
        let (status, body, _) = get_path(state(false, false), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("not synced"));
        let (status, _, _) = get_path(state(true, false), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn readyz_turns_false_while_draining_but_healthz_stays_ok() {
        let (status, body, _) = get_path(state(true, true), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("draining"));
        let (status, body, _) = get_path(state(true, true), "/healthz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }

    #[tokio::test]
    async fn readyz_stays_ready_but_lists_each_blocker_with_its_fix() {
        use crate::blockers::BlockedReason;
        let state = state(true, false);
        state.blockers.set(BlockedReason::LeaseNamespaceMissing, "namespace \"tiergate-system\" does not exist");
        state.blockers.set(BlockedReason::PolicyNotFound, "this one serves \"default\"");
        let (status, body, _) = get_path(state.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::OK, "the webhook still serves: {body}");
        assert!(body.starts_with("ready (the webhook serves), but blocked:"), "{body}");
        assert!(body.contains("[-] lease_namespace_missing:") && body.contains("--create-lease-namespace"), "{body}");
        assert!(body.contains("[-] policy_not_found:") && body.contains("this one serves"), "{body}");
        let (_, metrics, _) = get_path(state, "/metrics").await;
        assert!(metrics.contains(r#"tiergate_blocked{reason="lease_namespace_missing"} 1"#), "{metrics}");
        assert!(metrics.contains(r#"tiergate_blocked{reason="kueue_missing"} 0"#), "{metrics}");
    }

    #[tokio::test]
    async fn readyz_lists_what_the_cluster_does_not_serve_after_ok() {
        use crate::blockers::BlockedReason;
        let state = state(true, false);
        state.blockers.set(BlockedReason::MutatingGateNotServed, "no mutatingadmissionpolicies");
        let (status, body, _) = get_path(state.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.starts_with("ok\nnot served by this cluster:\n[~] mutating_gate_not_served:"), "{body}");
        state.blockers.set(BlockedReason::PolicyNotFound, "this one serves \"default\"");
        let (_, body, _) = get_path(state, "/readyz").await;
        assert!(body.starts_with("ready (the webhook serves), but blocked:\n[-] policy_not_found"), "{body}");
        assert!(body.contains("\n[~] mutating_gate_not_served:"), "{body}");
    }

    #[tokio::test]
    async fn readyz_is_unavailable_while_the_webhook_certificate_is_missing_or_expired() {
        use crate::blockers::BlockedReason;
        let state = state(true, false);
        state.blockers.set(BlockedReason::CertificateExpired, "the serving certificate expired at 2026-01-01");
        let (status, body, _) = get_path(state.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.starts_with("the webhook cannot serve; blocked:") && body.contains("expired at 2026"), "{body}");
        state.blockers.clear(BlockedReason::CertificateExpired);
        let (status, body, _) = get_path(state, "/readyz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text_with_tiergate_families() {
        let state = state(true, false);
        state.metrics.reconciles.inc();
        let (status, body, content_type) = get_path(state, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some(METRICS_CONTENT_TYPE));
        assert!(body.contains("tiergate_reconciles_total 1"), "{body}");
        assert!(body.trim_end().ends_with("# EOF"));
    }
}
