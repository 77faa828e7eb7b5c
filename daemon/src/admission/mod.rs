//! The admission webhook: `mutate()` (pure decision and JSON patch) and the HTTPS server that feeds it.

mod boundary;
mod classes;
mod decision;
pub mod limits;
mod multikueue;
mod mutate;
mod offline;
mod owners;
pub mod podspec;
mod priority;
mod review;
pub mod server;
mod update;

pub use boundary::VENDOR_GPU_RESOURCE_PREFIXES;
pub use decision::{AdmissionInputs, Decision, Verdict};
pub use multikueue::MULTIKUEUE_MARKS;
pub use mutate::{DECISION_ANNOTATION, MutateError, TIER_ANNOTATION, mutate};
pub use offline::build_static_snapshot;
pub use review::{
    REVIEW_API_VERSION, ReviewError, build_request, decide_review, encode_review, invalid_response, parse_review,
};
