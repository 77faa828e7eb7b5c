//! One refusal of the tenant boundary: its fixed reason, the field and what is wrong, and the fix; shared by the
//! pod-template rules (`boundary`) and the DRA claim rules (`claims`); no I/O.

/// One thing a template in a tiered namespace may not do, whatever else it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    /// Fixed reason for metrics: `foreign_gpu_class`, `unprovided_gpu_resource`, `gpu_resource_without_quota`,
    /// or a DRA reason of [`super::claims`] (`foreign_device_class`, `dra_direct_claim`...).
    pub(super) reason: &'static str,
    /// The field and what is wrong with it.
    pub(super) problem: String,
    /// How to fix it.
    pub(super) fix: String,
}
