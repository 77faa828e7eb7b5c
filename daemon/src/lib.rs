//! tiergate: turns one TierPolicy into Kueue objects (the daemon) and mutates GPU workloads to match (the webhook).
//!
//! This crate is the I/O around the pure core, `tiergate_core`: caches fed by watches, the reconciler that applies
//! the desired objects, the HTTPS webhook server, the scoring client, certificates, the admin server and the CLI.
//! The core's modules are re-exported under their own names (`tiergate::policy`, `tiergate::plan`, ...).

pub mod admin;
pub mod admission;
pub mod answers;
pub mod blockers;
pub mod cache;
pub mod certs;
pub mod cli;
pub mod cmd;
pub mod live;
pub mod metrics;
pub mod reconcile;
pub mod scoring;
pub mod telemetry;
pub mod view;

pub use tiergate_core::{
    check, inputs, labels, owners, placement, plan, policy, provisioning, request, trust, usage, validation,
};
