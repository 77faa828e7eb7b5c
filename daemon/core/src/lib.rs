//! tiergate-core: everything tiergate decides, with no network and no runtime. A TierPolicy and a cluster view in,
//! desired Kueue objects out ([`plan`]); an AdmissionRequest and a snapshot in, a decision out ([`admission`]).
//!
//! The `tiergate` crate (daemon, webhook server, CLI) feeds these functions from its caches and applies what they
//! return. A `Client`, a socket or an `.await` has no place here: the crate does not depend on anything that
//! provides one (checked by the daemon's `core_is_pure` test).

pub mod admission;
pub mod check;
pub mod inputs;
pub mod labels;
pub mod owners;
pub mod placement;
pub mod plan;
pub mod policy;
pub mod provisioning;
pub mod request;
pub mod scoring;
pub mod syntax;
pub mod topology;
pub mod trust;
pub mod usage;
pub mod validation;
pub mod view;
