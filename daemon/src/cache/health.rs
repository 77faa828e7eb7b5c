//! Health of one cluster's caches: per-watch health (last delivery, failing or not), the signals the watch tasks
//! and the snapshot loop share, and the [`CacheHealth`] summary; no I/O (the sync barrier is in `stores.rs`).

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use tokio::sync::Notify;
use tokio::time::Instant;

/// A point-in-time summary of one cluster's caches, for readiness probes and per-cluster status.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheHealth {
    /// Every store has listed once (the snapshot is `synced`).
    pub synced: bool,
    /// Watches whose last attempt failed (their labels, e.g. `Namespace`, `ClusterQueue`), in start order.
    pub failing_watches: Vec<&'static str>,
    /// Seconds since the worst failing watch last heard from the API server (0 while all are healthy).
    pub staleness_seconds: f64,
}

impl CacheHealth {
    /// Whether the API server answers every watch (no watch is failing).
    pub fn is_reachable(&self) -> bool {
        self.failing_watches.is_empty()
    }
}

/// Why a watch fails, as far as it matters to a person fixing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFailure {
    /// 403: RBAC forbids listing or watching the resource.
    Forbidden,
    /// 404: the API server does not serve the resource (its CRD is missing, or another version is served).
    NotServed,
    /// Anything else: the API server is unreachable or erroring.
    Other,
}

/// Whether the API server's answer says it does not serve what was asked for: a 404, whether a `NotFound` Status
/// (a kind of a served group) or the plain-text `404 page not found` of a group it does not serve at all, which the
/// client reads as a Status of another reason (so `Status::is_not_found` misses it).
pub fn is_not_served(status: &kube::core::Status) -> bool {
    status.code == 404
}

/// Classifies a watch error by the API server's answer.
pub fn classify_watch_error(error: &kube::runtime::watcher::Error) -> WatchFailure {
    use kube::runtime::watcher::Error;
    let status = match error {
        Error::InitialListFailed(kube::Error::Api(status))
        | Error::WatchStartFailed(kube::Error::Api(status))
        | Error::WatchFailed(kube::Error::Api(status)) => status.as_ref(),
        Error::WatchError(status) => status.as_ref(),
        _ => return WatchFailure::Other,
    };
    if status.is_forbidden() {
        WatchFailure::Forbidden
    } else if is_not_served(status) {
        WatchFailure::NotServed
    } else {
        WatchFailure::Other
    }
}

/// Health of one watch: when it last delivered, and since when it has been failing (and why).
#[derive(Debug)]
struct WatchHealth {
    label: &'static str,
    last_ok: Instant,
    failing: Option<WatchFailure>,
}

/// Signals shared by the watch tasks and the snapshot loop.
#[derive(Debug)]
pub(crate) struct Signals {
    pub(crate) changed: Notify,
    pub(crate) reconcile_dirty: AtomicBool,
    health: Mutex<Vec<WatchHealth>>,
}

impl Signals {
    pub(crate) fn new() -> Self {
        Self { changed: Notify::new(), reconcile_dirty: AtomicBool::new(false), health: Mutex::default() }
    }

    pub(crate) fn register(&self, label: &'static str) -> usize {
        let Ok(mut health) = self.health.lock() else { return usize::MAX };
        health.push(WatchHealth { label, last_ok: Instant::now(), failing: None });
        health.len() - 1
    }

    pub(crate) fn record(&self, index: usize, failure: Option<WatchFailure>) {
        if let Ok(mut health) = self.health.lock()
            && let Some(entry) = health.get_mut(index)
        {
            entry.failing = failure;
            if failure.is_none() {
                entry.last_ok = Instant::now();
            }
        }
    }

    /// Seconds since the worst failing watch last heard from the API server (0 while all are healthy).
    pub(crate) fn staleness(&self, now: Instant) -> f64 {
        let Ok(health) = self.health.lock() else { return 0.0 };
        health
            .iter()
            .filter(|entry| entry.failing.is_some())
            .map(|entry| now.saturating_duration_since(entry.last_ok).as_secs_f64())
            .fold(0.0, f64::max)
    }

    pub(crate) fn failing_watches(&self) -> Vec<&'static str> {
        let Ok(health) = self.health.lock() else { return vec![] };
        health.iter().filter(|entry| entry.failing.is_some()).map(|entry| entry.label).collect()
    }

    /// The failing watches with why each fails, in start order.
    pub(crate) fn watch_failures(&self) -> Vec<(&'static str, WatchFailure)> {
        let Ok(health) = self.health.lock() else { return vec![] };
        health.iter().filter_map(|entry| entry.failing.map(|failure| (entry.label, failure))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use kube::runtime::watcher::Error;

    fn listed(status: Status) -> Error {
        Error::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn a_missing_kind_and_a_group_not_served_at_all_are_both_not_served() {
        let missing_kind =
            Status::failure("the server could not find the requested resource", "NotFound").with_code(404);
        assert_eq!(classify_watch_error(&listed(missing_kind)), WatchFailure::NotServed);
        // What kube reads from the plain-text body of a group the API server does not serve at all.
        let missing_group = Status::failure("404 page not found", "Failed to parse error data").with_code(404);
        assert_eq!(classify_watch_error(&listed(missing_group)), WatchFailure::NotServed);
        let forbidden = Status::failure("namespaces is forbidden", "Forbidden").with_code(403);
        assert_eq!(classify_watch_error(&listed(forbidden)), WatchFailure::Forbidden);
        let unavailable = Status::failure("etcd leader changed", "ServiceUnavailable").with_code(503);
        assert_eq!(classify_watch_error(&listed(unavailable)), WatchFailure::Other);
    }
}
