//! The admission webhook: `mutate()` (pure decision and JSON patch) and the HTTPS server that feeds it.

mod boundary;
mod classes;
mod decision;
mod lean;
pub mod limits;
mod mutate;
mod offline;
mod owners;
mod patch;
pub mod podspec;
mod priority;
mod review;
pub mod server;
mod update;

pub use boundary::VENDOR_GPU_RESOURCE_PREFIXES;
pub use decision::{AdmissionInputs, Decision, Verdict};
pub use lean::lean_value;
pub use mutate::{DECISION_ANNOTATION, MutateError, TIER_ANNOTATION, mutate};
pub use offline::build_static_snapshot;
pub use patch::PatchError;
pub use review::{
    REVIEW_API_VERSION, ReviewError, build_request, decide_review, encode_review, invalid_response, parse_review,
};
