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
            Self::DeleteObject { .. } => "delete_object",
            Self::WriteStatus { .. } => "write_status",
            Self::BuildDesired(error) => error.reason(),
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
            | Self::DeleteObject { source, .. }
            | Self::WriteStatus { source, .. } => source,
            Self::ApplyConflict { .. } | Self::BuildDesired(_) => return Some(BlockedReason::ReconcileFailing),
        };
        Some(match source {
            kube::Error::Api(status) if status.is_forbidden() => BlockedReason::WriteForbidden,
            _ => BlockedReason::ReconcileFailing,
        })
    }
}
