//! Why a reconcile failed: one variant per failed action, each with a fixed `reason()`; no I/O.

use super::desired::DesiredError;
use super::discovery::DiscoveryError;
use crate::blockers::BlockedReason;

/// A reconcile failed; `error_policy` requeues it with capped exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The Lease write gate closed: this replica is not (or no longer) the leader.
    #[error("failed to write {what}: this replica does not hold the leader Lease")]
    WriteWithoutLease {
        /// What was about to be written.
        what: String,
    },
    /// Kueue is missing or too old.
    #[error(transparent)]
    DiscoverKueue(#[from] DiscoveryError),
    /// Server-side apply of an object failed.
    #[error("failed to apply {kind} {name}: {source}")]
    ApplyObject {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Applying kept conflicting after re-reading.
    #[error("failed to apply {kind} {name}: still conflicting after {attempts} re-reads")]
    ApplyConflict {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Attempts made.
        attempts: u32,
    },
    /// Re-reading an object after a conflict failed.
    #[error("failed to read {kind} {name}: {source}")]
    ReadObject {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading the webhook registration that owns the in-server gate (`--gate-owner`) failed.
    #[error(
        "failed to read MutatingWebhookConfiguration {name}, which owns the in-server gate (--gate-owner): {source}; \
         grant get on it (the chart does) or leave --gate-owner unset"
    )]
    ReadGateOwner {
        /// The registration's name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading the served TierPolicy from the API server failed (confirming it is gone before the gate is pruned).
    #[error(
        "failed to read TierPolicy {name} to confirm it is gone before pruning the in-server gate: {source}; the gate \
         stays until the API server answers (grant get on tierpolicies, as the chart does)"
    )]
    ReadServedPolicy {
        /// The served policy's name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting an orphan failed.
    #[error("failed to delete {kind} {name}: {source}")]
    DeleteObject {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing the policy's status failed.
    #[error("failed to write the status of TierPolicy {name}: {source}")]
    WriteStatus {
        /// Policy name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// The translation failed.
    #[error(transparent)]
    BuildDesired(#[from] DesiredError),
    /// Some objects could not be applied (each one's error in `summary`); every other object of the policy was,
    /// and nothing was pruned.
    #[error(
        "failed to apply {count} object(s); every other object of the policy was applied and nothing was pruned: {summary}"
    )]
    Unapplied {
        /// How many objects failed.
        count: usize,
        /// Each failure, `; `-separated.
        summary: String,
    },
}

impl ReconcileError {
    /// Fixed reason for metrics, conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::WriteWithoutLease { .. } => "write_without_lease",
            Self::DiscoverKueue(error) => error.reason(),
            Self::ApplyObject { .. } => "apply_object",
            Self::ApplyConflict { .. } => "apply_conflict",
            Self::ReadObject { .. } => "read_object",
            Self::ReadGateOwner { .. } => "read_gate_owner",
            Self::ReadServedPolicy { .. } => "read_served_policy",
            Self::DeleteObject { .. } => "delete_object",
            Self::WriteStatus { .. } => "write_status",
            Self::BuildDesired(error) => error.reason(),
            Self::Unapplied { .. } => "unapplied_objects",
        }
    }

    /// Whether the failure is one object's own (the API server, Kueue's webhook or a CRD rule refused that object,
    /// or it kept conflicting): the reconcile goes on with the others. Anything else (no Lease, RBAC, the API
    /// server not answering, a failed translation) stops it, as every other write would fail the same way.
    pub fn is_one_objects(&self) -> bool {
        match self {
            Self::ApplyConflict { .. } => true,
            Self::ApplyObject { source: kube::Error::Api(status), .. }
            | Self::ReadObject { source: kube::Error::Api(status), .. } => {
                !status.is_forbidden() && status.code != 401 && status.code < 500
            }
            _ => false,
        }
    }

    /// The blocker this failure is: Kueue not served, a write RBAC forbids, or any other failing reconcile;
    /// `None` for a replica that lost the Lease (not a fault).
    pub fn blocker(&self) -> Option<BlockedReason> {
        let source = match self {
            Self::WriteWithoutLease { .. } => return None,
            Self::DiscoverKueue(_) => return Some(BlockedReason::KueueMissing),
            Self::ApplyObject { source, .. }
            | Self::ReadObject { source, .. }
            | Self::ReadGateOwner { source, .. }
            | Self::ReadServedPolicy { source, .. }
            | Self::DeleteObject { source, .. }
            | Self::WriteStatus { source, .. } => source,
            Self::ApplyConflict { .. } | Self::BuildDesired(_) | Self::Unapplied { .. } => {
                return Some(BlockedReason::ReconcileFailing);
            }
        };
        Some(match source {
            kube::Error::Api(status) if status.is_forbidden() => BlockedReason::WriteForbidden,
            _ => BlockedReason::ReconcileFailing,
        })
    }
}
