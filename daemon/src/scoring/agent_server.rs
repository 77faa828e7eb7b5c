//! `tiergate agent`'s HTTP server: the built-in scorer behind `POST /v1/score` and `GET /healthz` (plain HTTP,
//! axum); does network I/O. The answer is exactly what the webhook's embedded built-in scorer computes.

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::policy::{GpuClass, TierPolicySpec};
use crate::scoring::builtin::{Inventory, build_inventory, builtin_response};
use crate::scoring::wire::{ScoreRequest, ScoreResponse};
use crate::view::ClusterView;

/// What the standalone built-in agent knows: the policy's GPU classes and the cluster's GPU inventory (taken
/// once at start; the standalone agent has no pod cache, so every allocatable GPU counts as free).
#[derive(Clone, Debug)]
pub struct BuiltinAgent {
    classes: Vec<GpuClass>,
    inventory: Inventory,
}

impl BuiltinAgent {
    /// The agent for `policy`'s GPU classes on `view`'s nodes.
    pub fn new(policy: &TierPolicySpec, view: &ClusterView) -> Self {
        let inventory = build_inventory(&policy.gpu_classes.iter().collect::<Vec<_>>(), &view.nodes, &[]);
        Self { classes: policy.gpu_classes.clone(), inventory }
    }

    /// The answer to one request.
    pub fn response(&self, request: &ScoreRequest) -> ScoreResponse {
        builtin_response(request, &self.classes, &self.inventory)
    }
}

/// `POST /v1/score` and `GET /healthz`; a body that is not a `/v1/score` request gets axum's 4xx.
pub fn build_agent_router(agent: Arc<BuiltinAgent>) -> Router {
    Router::new().route("/v1/score", post(handle_score)).route("/healthz", get(handle_healthz)).with_state(agent)
}

async fn handle_score(
    State(agent): State<Arc<BuiltinAgent>>,
    Json(request): Json<ScoreRequest>,
) -> Json<ScoreResponse> {
    Json(agent.response(&request))
}

async fn handle_healthz() -> &'static str {
    "ok"
}

/// Serves the agent on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve_agent(
    listener: tokio::net::TcpListener,
    agent: Arc<BuiltinAgent>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, build_agent_router(agent)).with_graceful_shutdown(shutdown).await
}
