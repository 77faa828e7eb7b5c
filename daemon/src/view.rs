//! The pure core's views (`tiergate_core::view`, re-exported) and the one thing the I/O side adds: the snapshot
//! shared between the cache writers and the webhook.

use std::sync::Arc;

pub use tiergate_core::view::*;

/// The snapshot shared between the cache writers and the webhook: swapped whole, read without locks.
pub type SharedSnapshot = Arc<arc_swap::ArcSwap<Snapshot>>;
