//! tiergate: turns one TierPolicy into Kueue objects (the daemon) and mutates GPU workloads to match (the webhook).
//!
//! Pure core: [`plan`] (policy + cluster view -> desired Kueue objects) and [`admission`] (request + snapshot ->
//! decision). Everything else feeds or applies them.

pub mod admin;
pub mod admission;
pub mod answers;
pub mod cache;
pub mod certs;
pub mod check;
pub mod cli;
pub mod cmd;
pub mod inputs;
pub mod live;
pub mod metrics;
pub mod owners;
pub mod placement;
pub mod plan;
pub mod policy;
pub mod reconcile;
pub mod scoring;
pub mod telemetry;
pub mod validation;
pub mod view;
