//! GPU-hour accounting: the ledger of Workload admissions, the calendar periods and the checkpoint step that turns
//! them into the counts of `status.usage`; pure, no I/O (the daemon's `usage/` watches, checkpoints and exports).

pub mod ledger;
pub mod period;

pub use self::ledger::{
    Admission, CheckpointFrame, ResourceMillis, UsageAdded, WorkloadLedger, WorkloadObservation, advance_usage,
    checkpoint_second, counted_resources,
};
pub use self::period::{PeriodBounds, format_instant, parse_instant, period_bounds};
