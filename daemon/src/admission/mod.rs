//! The admission webhook's I/O: the HTTPS server, its limits, and the review envelope around the pure decision
//! (`tiergate_core::admission`, re-exported here).

pub mod limits;
mod review;
pub mod server;

pub use review::{
    REVIEW_API_VERSION, ReviewError, build_request, decide_review, encode_review, invalid_response, parse_review,
};
pub use tiergate_core::admission::*;
