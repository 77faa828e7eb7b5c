//! `tiergate agent`: serves the built-in scorer as a standalone scheduler agent (`POST /v1/score`, plain HTTP)
//! until SIGTERM or ctrl-c; reads the policy and cluster files, binds a socket.

use std::process::ExitCode;
use std::sync::Arc;

use super::{CmdError, shutdown_signal};
use crate::cli::{AgentArgs, Exit};
use crate::inputs::{SAMPLE_CLUSTER, load_cluster_view, load_policy, parse_cluster_view};
use crate::scoring::agent_server::{BuiltinAgent, serve_agent};
use crate::view::ClusterView;

/// Runs `tiergate agent` until SIGTERM or ctrl-c. Without `--policy` the embedded sample policy and (unless
/// `--cluster` is given) its sample cluster are used; with `--policy` but no `--cluster` the inventory is empty.
pub async fn run(args: AgentArgs) -> Result<ExitCode, CmdError> {
    let policy = load_policy(args.policy.as_deref())?;
    let view = match (&args.cluster, &args.policy) {
        (Some(path), _) => load_cluster_view(path)?,
        (None, None) => parse_cluster_view(SAMPLE_CLUSTER, "embedded sample cluster")?,
        (None, Some(_)) => ClusterView::default(),
    };
    let agent = Arc::new(BuiltinAgent::new(&policy.spec, &view));
    let listener = tokio::net::TcpListener::bind(args.agent_listen).await?;
    tracing::info!(listen = %listener.local_addr()?, gpu_classes = policy.spec.gpu_classes.len(), nodes = view.nodes.len(), "serving the built-in scorer on POST /v1/score");
    serve_agent(listener, agent, shutdown_signal()).await?;
    tracing::info!("agent stopped");
    Ok(Exit::Success.into())
}
