//! The red-team suite: every attack a tenant (create/update on workloads in its own namespace, nothing more) can
//! try on the tier boundary, each test named as the attack it stops. One file per class of attack.

mod budgets;
mod cohort_tree;
mod dra_claims;
mod fleet;
mod gate_marks;
#[path = "../gate_support/mod.rs"]
mod gate_support;
mod gpu_classes;
mod karpenter;
mod kinds_and_children;
mod owners_and_updates;
mod policy_mistakes;
mod quota_cap;
mod requeue;
mod run_time;
mod tenant;
mod tenant_sharing;
mod topology;
mod webhook_down;
mod webhook_limits;
