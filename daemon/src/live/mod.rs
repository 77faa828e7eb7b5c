//! Live inputs for `kubectl tiergate status`, `why` and `tiergate check --kubeconfig`: a client built from the
//! kubeconfig the way kubectl builds it, and read-only fetches of the objects the answers need (get/list, and
//! `check`'s dry-run applies, which store nothing); I/O.

pub mod fetch;
pub mod pools;
pub mod served;

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

pub use fetch::{StatusFetched, WhyFetched, fetch_policy_names, fetch_status_inputs, fetch_why_inputs};
pub use pools::{build_node_pools, fetch_live_pools};

/// A live read failed. Causes are part of each message, not `source`s, so `main` prints each once.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The kubeconfig could not be read or parsed.
    #[error("failed to read the kubeconfig {path}: {cause}; {fix}", path = path.display())]
    ReadKubeconfig {
        /// The file that failed (of `--kubeconfig`, `KUBECONFIG`, or `~/.kube/config`).
        path: PathBuf,
        /// What went wrong, e.g. the OS error.
        cause: String,
        /// How to fix it, for where the path came from.
        fix: &'static str,
    },
    /// The kubeconfig has no usable context.
    #[error("failed to load context {context} from the kubeconfig: {cause}; pick one with --context")]
    LoadContext {
        /// The context asked for, or `current-context`.
        context: String,
        /// What went wrong.
        cause: String,
    },
    /// No client could be built from the config.
    #[error("failed to build a Kubernetes client: {0}")]
    BuildClient(kube::Error),
    /// A get failed.
    #[error("failed to get {what}: {error}")]
    Get {
        /// What, e.g. `Job ml-team-dev/train`.
        what: String,
        /// Cause.
        error: kube::Error,
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
    #[error("failed to list {what}: {error}")]
    List {
        /// What, e.g. `Workloads in ml-team-dev`.
        what: String,
        /// Cause.
        error: kube::Error,
    },
    /// An object did not have the expected shape.
    #[error("failed to decode {what}: {error}")]
    Decode {
        /// What.
        what: String,
        /// Cause.
        error: serde_json::Error,
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

/// The environment variable kubectl (and kube) read kubeconfig files from.
const KUBECONFIG_ENV: &str = "KUBECONFIG";

/// Reads the kubeconfig as kubectl does: `path` (`--kubeconfig`), else the files `KUBECONFIG` names (merged), else
/// `~/.kube/config`. An error names the file, the cause once, and the fix for where the path came from.
pub fn read_kubeconfig(path: Option<&Path>) -> Result<Kubeconfig, LiveError> {
    let from_env = std::env::var_os(KUBECONFIG_ENV).filter(|value| !value.is_empty());
    let (read, fallback, fix) = match (path, &from_env) {
        (Some(path), _) => (
            Kubeconfig::read_from(path),
            path.to_owned(),
            "check the path given to --kubeconfig (or TIERGATE_KUBECONFIG)",
        ),
        (None, Some(value)) => (Kubeconfig::read(), PathBuf::from(value), "check the files KUBECONFIG names"),
        (None, None) => (
            Kubeconfig::read(),
            std::env::home_dir().unwrap_or_default().join(".kube").join("config"),
            "pass --kubeconfig PATH or set KUBECONFIG",
        ),
    };
    read.map_err(|error| match error {
        KubeconfigError::ReadConfig(cause, path) => LiveError::ReadKubeconfig { path, cause: cause.to_string(), fix },
        other => LiveError::ReadKubeconfig { path: fallback, cause: other.to_string(), fix },
    })
}

/// A client and the context's default namespace (what `-n` falls back to), read from the kubeconfig as kubectl
/// reads it: never the in-cluster config, which a laptop does not have and a pod should not silently use.
pub async fn connect(connection: &KubectlConnection) -> Result<(kube::Client, String), LiveError> {
    let kubeconfig = read_kubeconfig(connection.kubeconfig.as_deref())?;
    let options = KubeConfigOptions { context: connection.context.clone(), ..KubeConfigOptions::default() };
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(|error| LiveError::LoadContext {
            context: connection.context.clone().unwrap_or_else(|| "current-context".to_owned()),
            cause: error.to_string(),
        })?;
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(LiveError::BuildClient)?;
    Ok((client, namespace))
}
