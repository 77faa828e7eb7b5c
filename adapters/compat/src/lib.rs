//! Parsers for the seed systems' annotation formats (placement strategies, GPU pinning maps, scoring inputs); no I/O.

pub mod gpu_map;
mod labels;
pub mod namespaces;
pub mod scoring_annotations;
pub mod strategy;
