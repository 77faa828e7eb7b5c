//! The admission decision, pure: a Request and a Snapshot in, a Decision (verdict, JSON patch,
//! warnings) out. The tenant boundary's rules live here, one concern a file; the HTTPS server that feeds it is
//! the `tiergate` crate's `admission::server`.

mod boundary;
pub mod claims;
mod classes;
mod decision;
mod error;
mod fold;
pub mod gate_marks;
mod lean;
mod multikueue;
mod mutate;
mod offline;
mod owners;
mod patch;
pub mod podspec;
mod priority;
mod run_time;
mod topology;
mod update;
mod violation;

pub use crate::request::{Request, metadata_of, owner_references};
pub use boundary::{MIRROR_POD_WRITER_PREFIX, VENDOR_GPU_RESOURCE_PREFIXES};
pub use decision::{AdmissionInputs, Decision, DecisionLabel, Verdict};
pub use error::MutateError;
pub use fold::{fold_deep_edits, object_as_sent};
pub use lean::{LeanError, lean_request};
pub use multikueue::MULTIKUEUE_MARKS;
pub use mutate::{DECISION_ANNOTATION, TIER_ANNOTATION, mutate};
pub use offline::build_static_snapshot;
pub use patch::PatchError;
