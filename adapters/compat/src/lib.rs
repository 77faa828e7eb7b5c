//! Parsers for the seed systems' annotation formats (placement strategies, GPU pinning maps, scoring inputs); no I/O.
pub mod scoring_annotations;
