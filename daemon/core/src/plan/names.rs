//! The names of generated Kueue objects: deterministic, valid DNS-1123 labels; pure.
//!
//! | object | name |
//! |---|---|
//! | ResourceFlavor of a GPU class | `<class>`, or `<class>-<hash of its Topology's name>` when the class names topology levels (Kueue keeps `topologyName` immutable, so other levels are another flavor: docs/reconcile.md) |
//! | ResourceFlavor of a placement rule of a tier | `<class>-<strategy>-<rule>` (the tier's GPU class) |
//! | ClusterQueue of a tier | `tiergate-<tier>` |
//! | LocalQueue of a tier (in each of its namespaces) | `Tier::local_queue()`: `localQueueName`, default `tiergate-<tier>` |
//! | WorkloadPriorityClass | the bucket's `name` |
//! | AdmissionCheck and ProvisioningRequestConfig of a tier | `tiergate-<tier>-provisioning` |
//! | MultiKueueCluster of a worker | the worker's `name` |
//! | MultiKueueConfig of a list of workers | `tiergate-fleet-<worker>-<worker>...-<hash>` (in the tier's order) |
//! | MultiKueue AdmissionCheck of a tier | `tiergate-<tier>-multikueue` |
//! | Topology of a list of level node labels | `tiergate-<last segment>-...-<hash>` ([`super::topology`]) |
//!
//! A name longer than 63 characters is cut to 54, stripped of trailing `-`, and suffixed with `-` and the
//! 8-hex-digit FNV-1a hash of the full name, so it stays unique and stable across runs and versions.

use crate::syntax::MAX_LABEL_LENGTH;

const HASH_SUFFIX_LENGTH: usize = 9;

/// `name`, or its truncated-and-hashed form when longer than a DNS label allows.
pub fn bounded_name(name: &str) -> String {
    if name.len() <= MAX_LABEL_LENGTH {
        return name.to_owned();
    }
    let mut cut = MAX_LABEL_LENGTH - HASH_SUFFIX_LENGTH;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let prefix = name[..cut].trim_end_matches(['-', '.', '_']);
    format!("{prefix}-{:08x}", fnv1a(name))
}

/// ClusterQueue of a tier.
pub fn cluster_queue_name(tier: &str) -> String {
    bounded_name(&format!("tiergate-{tier}"))
}

/// Karpenter NodePool of a GPU class (issue 51).
pub fn node_pool_name(class: &str) -> String {
    bounded_name(&format!("tiergate-{class}"))
}

/// ResourceFlavor of a GPU class whose flavor names `topology` (its Topology, when the class names levels). The
/// name carries what Kueue keeps immutable in a flavor, so an edit of it is a new flavor, never a refused update.
pub fn gpu_class_flavor_name(class: &str, topology: Option<&str>) -> String {
    match topology {
        None => bounded_name(class),
        Some(topology) => bounded_name(&format!("{class}-{:08x}", fnv1a(topology))),
    }
}

/// ResourceFlavor of a placement strategy's rule.
pub fn rule_flavor_name(strategy: &str, rule: &str) -> String {
    bounded_name(&format!("{strategy}-{rule}"))
}

/// ResourceFlavor of a placement strategy's rule on the nodes of GPU class `class` (a tier's primary class): the
/// flavor carries the class's labels and the rule's, so it is per class.
pub fn class_rule_flavor_name(class: &str, strategy: &str, rule: &str) -> String {
    bounded_name(&format!("{class}-{strategy}-{rule}"))
}

/// AdmissionCheck and ProvisioningRequestConfig of a tier.
pub fn provisioning_name(tier: &str) -> String {
    bounded_name(&format!("tiergate-{tier}-provisioning"))
}

/// MultiKueue AdmissionCheck of a dispatching tier.
pub fn multikueue_check_name(tier: &str) -> String {
    bounded_name(&format!("tiergate-{tier}-multikueue"))
}

/// MultiKueueCluster of worker `cluster`.
pub fn multikueue_cluster_name(cluster: &str) -> String {
    bounded_name(cluster)
}

/// MultiKueueConfig of the ordered worker list `clusters`: a DNS label (Kueue's AdmissionCheck
/// `parameters.name` pattern), ending in the FNV-1a hash of the names joined by dots, which no DNS label contains,
/// so lists that join alike with `-` (`a-b`,`c` and `a`,`b-c`) still get distinct names.
pub fn multikueue_config_name(clusters: &[String]) -> String {
    let hash = fnv1a(&clusters.join("."));
    bounded_name(&format!("tiergate-fleet-{}-{hash:08x}", clusters.join("-")))
}

/// 32-bit FNV-1a: tiny, stable across platforms and releases (unlike `std`'s hasher).
pub(crate) fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::names::is_dns_label;

    #[test]
    fn short_names_are_kept() {
        assert_eq!(cluster_queue_name("gold"), "tiergate-gold");
        assert_eq!(gpu_class_flavor_name("h100", None), "h100");
        assert_eq!(rule_flavor_name("spot-mix", "ondemand"), "spot-mix-ondemand");
        assert_eq!(class_rule_flavor_name("l4", "od-spot", "spot"), "l4-od-spot-spot");
        assert_eq!(multikueue_check_name("gold"), "tiergate-gold-multikueue");
    }

    #[test]
    fn a_class_flavor_name_changes_with_its_topology_and_only_with_it() {
        let racks = gpu_class_flavor_name("h100", Some("tiergate-rack-hostname-0badcafe"));
        let blocks = gpu_class_flavor_name("h100", Some("tiergate-block-rack-hostname-12345678"));
        assert!(racks.starts_with("h100-") && blocks.starts_with("h100-"), "{racks} {blocks}");
        assert_ne!(racks, blocks);
        assert_ne!(racks, gpu_class_flavor_name("h100", None));
        assert_eq!(racks, gpu_class_flavor_name("h100", Some("tiergate-rack-hostname-0badcafe")));
        let long = gpu_class_flavor_name(&"x".repeat(63), Some("tiergate-rack-0badcafe"));
        assert!(is_dns_label(&long), "{long}");
    }

    #[test]
    fn worker_lists_that_join_alike_get_distinct_config_names() {
        let left = multikueue_config_name(&["a-b".to_owned(), "c".to_owned()]);
        let right = multikueue_config_name(&["a".to_owned(), "b-c".to_owned()]);
        assert!(left.starts_with("tiergate-fleet-a-b-c-"), "{left}");
        assert_ne!(left, right);
        assert!(is_dns_label(&left), "{left}");
    }

    #[test]
    fn long_names_are_cut_and_hashed_into_valid_distinct_labels() {
        let long_a = format!("{}-a", "x".repeat(60));
        let long_b = format!("{}-b", "x".repeat(60));
        let (name_a, name_b) = (cluster_queue_name(&long_a), cluster_queue_name(&long_b));
        assert!(is_dns_label(&name_a), "{name_a}");
        assert!(is_dns_label(&name_b), "{name_b}");
        assert_ne!(name_a, name_b);
        assert_eq!(name_a, cluster_queue_name(&long_a));
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(""), 0x811c_9dc5);
        assert_eq!(fnv1a("a"), 0xe40c_292c);
        assert_eq!(fnv1a("foobar"), 0xbf9c_f968);
    }
}
