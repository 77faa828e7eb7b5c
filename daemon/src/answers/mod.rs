//! Answers to the two live questions, `kubectl tiergate status` (how full is each tier?) and `kubectl tiergate
//! why` (why is my job pending, or why did it land there?): typed answers built from recorded objects, and their
//! table rendering; pure, no I/O (`crate::live` lists the objects).

pub use tiergate_kueue::read as kueue;
pub mod karpenter;
pub mod provisioning;
pub mod quota_windows;
pub mod sharing;
pub mod status;
pub mod table;
pub mod usage;
pub mod why;
mod why_text;

pub use status::{StatusAnswer, StatusInputs, build_status_answer};
pub use why::{Hold, WhyAnswer, WhyInputs, build_why_answer};
