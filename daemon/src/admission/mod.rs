//! The admission webhook: `mutate()` (pure decision and JSON patch) and the HTTPS server that feeds it.

mod classes;
mod decision;
mod mutate;
mod offline;
pub mod podspec;
mod review;
pub mod server;

pub use decision::{AdmissionInputs, Decision, Verdict};
pub use mutate::{
    CHOSEN_GPU_ANNOTATION, CUDA_VISIBLE_DEVICES, DECISION_ANNOTATION, DECISION_TIME_ANNOTATION, MutateError,
    SCORE_ANNOTATION, SCORE_FALLBACK_ANNOTATION, SEED_CHOSEN_GPU_ANNOTATION, SEED_DECISION_TIME_ANNOTATION,
    SEED_SCORE_ANNOTATION, TIER_ANNOTATION, mutate,
};
pub use offline::build_static_snapshot;
pub use review::{
    REVIEW_API_VERSION, ReviewError, build_request, decide_review, encode_review, invalid_response, parse_review,
};
