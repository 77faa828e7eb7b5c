//! Live inputs for `kubectl tiergate status`, `why` and `tiergate check --kubeconfig`: a client built from the
//! kubeconfig the way kubectl builds it, and read-only (get/list) fetches of the objects the answers need; I/O.

pub mod fetch;
pub mod pools;

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

pub use fetch::{StatusFetched, WhyFetched, fetch_status_inputs, fetch_why_inputs};
pub use pools::{build_node_pools, fetch_live_pools};

/// A live read failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The kubeconfig could not be read.
    #[error("failed to read the kubeconfig {origin}: {source}; pass --kubeconfig or set KUBECONFIG")]
    ReadKubeconfig {
        /// Path, or `KUBECONFIG / ~/.kube/config`.
        origin: String,
        /// Cause.
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig has no usable context.
    #[error("failed to load context {context} from the kubeconfig: {source}; pick one with --context")]
    LoadContext {
        /// The context asked for, or `current-context`.
        context: String,
        /// Cause.
        source: kube::config::KubeconfigError,
    },
    /// No client could be built from the config.
    #[error("failed to build a Kubernetes client: {0}")]
    BuildClient(#[source] kube::Error),
    /// A get failed.
    #[error("failed to get {what}: {source}")]
    Get {
        /// What, e.g. `Job ml-team-dev/train`.
        what: String,
        /// Cause.
        source: kube::Error,
    },
    /// A get found nothing.
    #[error("failed to find {what}: {hint}")]
    NotFound {
        /// What, e.g. `Job ml-team-dev/train`.
        what: String,
        /// How to fix it.
        hint: String,
    },
    /// A list failed.
    #[error("failed to list {what}: {source}")]
    List {
        /// What, e.g. `Workloads in ml-team-dev`.
        what: String,
        /// Cause.
        source: kube::Error,
    },
    /// An object did not have the expected shape.
    #[error("failed to decode {what}: {source}")]
    Decode {
        /// What.
        what: String,
        /// Cause.
        source: serde_json::Error,
    },
}

impl LiveError {
    /// Fixed reason for exit messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ReadKubeconfig { .. } => "read_kubeconfig",
            Self::LoadContext { .. } => "load_context",
            Self::BuildClient(_) => "build_client",
            Self::Get { .. } => "get_object",
            Self::NotFound { .. } => "object_not_found",
            Self::List { .. } => "list_objects",
            Self::Decode { .. } => "decode_object",
        }
    }
}

/// Where to connect, as kubectl's flags say it.
#[derive(Clone, Debug, Default)]
pub struct KubectlConnection {
    /// `--kubeconfig`; `None`: `KUBECONFIG` (several files merged), else `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`; `None`: the kubeconfig's current context.
    pub context: Option<String>,
}

/// A client and the context's default namespace (what `-n` falls back to), read from the kubeconfig as kubectl
/// reads it: never the in-cluster config, which a laptop does not have and a pod should not silently use.
pub async fn connect(connection: &KubectlConnection) -> Result<(kube::Client, String), LiveError> {
    let (kubeconfig, origin) = match &connection.kubeconfig {
        Some(path) => (Kubeconfig::read_from(path), path.display().to_string()),
        None => (Kubeconfig::read(), "KUBECONFIG / ~/.kube/config".to_owned()),
    };
    let kubeconfig = kubeconfig.map_err(|source| LiveError::ReadKubeconfig { origin, source })?;
    let options = KubeConfigOptions { context: connection.context.clone(), ..KubeConfigOptions::default() };
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(|source| LiveError::LoadContext {
            context: connection.context.clone().unwrap_or_else(|| "current-context".to_owned()),
            source,
        })?;
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(LiveError::BuildClient)?;
    Ok((client, namespace))
}
