//! What tiergate knows of cluster-autoscaler's ProvisioningRequest classes: which of them grow a pool for a waiting
//! workload, and which only look for capacity that already exists (docs/guides/cluster-autoscaler.md "Autoscaled nodepools").

use crate::policy::{NodeCapacity, Tier, TierPolicySpec};

/// cluster-autoscaler's class that only checks for capacity that exists (and books it); it never adds a node.
pub const CHECK_CAPACITY_CLASS: &str = "check-capacity.autoscaling.x-k8s.io";

/// cluster-autoscaler's class that grows node groups by the whole request at once, or not at all.
pub const BEST_EFFORT_ATOMIC_CLASS: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";

/// The GPU classes of `tier` (its `gpuClass`, then its fallbacks) that the policy says are `Autoscaled`, when the
/// tier's provisioning class is [`CHECK_CAPACITY_CLASS`]: a ProvisioningRequest of that class on such a pool waits
/// forever while the pool is empty, since a suspended workload has no pending pods for the autoscaler to grow it for.
pub fn check_capacity_on_autoscaled<'a>(spec: &'a TierPolicySpec, tier: &'a Tier) -> Vec<&'a str> {
    if !checks_capacity(tier) {
        return Vec::new();
    }
    classes_stated(spec, tier, Some(NodeCapacity::Autoscaled)).collect()
}

/// True when `tier` asks cluster-autoscaler only to check capacity, and the policy does not say the nodes of each
/// of its classes are `Fixed`: whether they can be empty is then for the node groups to tell (`tiergate check`).
pub fn checks_capacity_of_unstated_pools(spec: &TierPolicySpec, tier: &Tier) -> bool {
    checks_capacity(tier) && classes_stated(spec, tier, None).next().is_some()
}

/// Whether `tier`'s ProvisioningRequests are of [`CHECK_CAPACITY_CLASS`].
fn checks_capacity(tier: &Tier) -> bool {
    tier.provisioning.as_ref().is_some_and(|provisioning| provisioning.provisioning_class_name == CHECK_CAPACITY_CLASS)
}

/// The GPU classes of `tier` (its `gpuClass`, then its fallbacks) whose `capacity` is `capacity`.
fn classes_stated<'a>(
    spec: &'a TierPolicySpec,
    tier: &'a Tier,
    capacity: Option<NodeCapacity>,
) -> impl Iterator<Item = &'a str> {
    tier.gpu_class_names().filter(move |name| spec.gpu_class(name).is_some_and(|class| class.capacity == capacity))
}
