//! Policy checks of GPU classes found through DRA: each class's `dra` (driver, selector, generic classes), the
//! shared DeviceClasses, and what Kueue can charge (its mapping limits, one flavor per DRA class in a tier); pure,
//! no I/O.
//!
//! A DRA class's devices are charged to its whole-GPU resource, and Kueue picks the flavor by the pod's node
//! selection, never by the DeviceClass: a DRA class without node labels therefore may not share a tier with
//! another flavor of the same resource (its claims could be charged to the wrong class's quota).

use std::collections::BTreeMap;

use super::Problems;
use super::names::{DNS_SUBDOMAIN_RULE, is_dns_subdomain, is_qualified_name};
use crate::plan::dra::{MAX_DEVICE_CLASSES_PER_MAPPING, MAX_KUEUE_MAPPINGS, kueue_device_class_mappings};
use crate::plan::tier_flavor_sources;
use crate::policy::{DEVICE_CLASS_SUFFIX, GpuClass, TierPolicySpec, device_class_name};

/// Longest DRA driver name (a ResourceSlice's `spec.driver`).
const MAX_DRIVER_LENGTH: usize = 63;

/// Every class's `dra`, the shared DeviceClasses, Kueue's mapping limits and the flavors of tiers with DRA classes.
pub(super) fn check_dra(spec: &TierPolicySpec, problems: &mut Problems) {
    for (index, class) in spec.gpu_classes.iter().enumerate() {
        check_class(spec, &format!("spec.gpuClasses[{index}]"), class, problems);
    }
    check_shared(spec, problems);
    let mappings = kueue_device_class_mappings(spec);
    if mappings.len() > MAX_KUEUE_MAPPINGS {
        problems.push(
            "spec.gpuClasses",
            format!(
                "the DRA classes count as {} different GPU resources; Kueue's deviceClassMappings hold at most {}",
                mappings.len(),
                MAX_KUEUE_MAPPINGS
            ),
            "give DRA classes fewer distinct resourceName values",
        );
    }
    for mapping in mappings.iter().filter(|mapping| mapping.device_class_names.len() > MAX_DEVICE_CLASSES_PER_MAPPING) {
        problems.push(
            "spec.gpuClasses",
            format!(
                "{} DRA classes count as {}; one Kueue deviceClassMapping holds at most {} DeviceClasses",
                mapping.device_class_names.len(),
                mapping.name,
                MAX_DEVICE_CLASSES_PER_MAPPING
            ),
            "give some of those classes a resourceName of their own (and the tiers quota for it)",
        );
    }
    for (index, tier) in spec.tiers.iter().enumerate() {
        let flavors = tier_flavor_sources(spec, tier);
        for class in tier.gpu_class_names().filter_map(|name| spec.gpu_class(name)) {
            let unpinned = class.dra.is_some() && class.node_labels.is_empty();
            let others = flavors.iter().filter(|flavor| flavor.source != class.name).count();
            if unpinned && others > 0 {
                problems.push(
                    format!("spec.tiers[{index}]"),
                    format!(
                        "tier {} has {} flavor(s) besides DRA class {}, which has no nodeLabels: Kueue picks a \
                         claim's flavor by the pod's node selection, so {}'s devices could be charged to another \
                         flavor",
                        tier.name, others, class.name, class.name
                    ),
                    format!(
                        "give GPU class {} the nodeLabels its nodes carry, or keep it the tier's only class",
                        class.name
                    ),
                );
            }
        }
    }
}

fn check_class(spec: &TierPolicySpec, path: &str, class: &GpuClass, problems: &mut Problems) {
    let Some(dra) = &class.dra else { return };
    let path = format!("{path}.dra");
    let device_class = device_class_name(&class.name);
    if !is_qualified_name(&device_class) {
        problems.push(
            path.clone(),
            format!(
                "the class's DeviceClass name {device_class:?} is longer than 63 characters (Kueue's \
                 deviceClassMappings need a qualified name)"
            ),
            format!("shorten the class name to at most {} characters", 63 - DEVICE_CLASS_SUFFIX.len()),
        );
    }
    if dra.driver.len() > MAX_DRIVER_LENGTH || !is_dns_subdomain(&dra.driver) {
        problems.push(
            format!("{path}.driver"),
            format!("driver {:?} is not {DNS_SUBDOMAIN_RULE} of at most {MAX_DRIVER_LENGTH} characters", dra.driver),
            "use the driver name its ResourceSlices carry in spec.driver, e.g. gpu.nvidia.com",
        );
    }
    if let Some(selector) = &dra.selector {
        match cel::Program::compile(selector.trim()) {
            _ if selector.trim().is_empty() => problems.push(
                format!("{path}.selector"),
                "the selector is empty",
                "remove it (every device of the driver) or write a CEL expression over `device`",
            ),
            Ok(_) if !selector.contains("device.") => problems.push(
                format!("{path}.selector"),
                format!("the selector {selector:?} does not read the device"),
                "select on device.attributes or device.capacity, e.g. \
                 device.attributes[\"gpu.nvidia.com\"].productName.startsWith(\"NVIDIA H100\")",
            ),
            Ok(_) => {}
            Err(error) => problems.push(
                format!("{path}.selector"),
                format!("the selector is not valid CEL: {}", first_line(&error.to_string())),
                "fix the expression; it is a DeviceClass selector over `device` (attributes, capacity, driver)",
            ),
        }
    }
    for (index, generic) in dra.generic_device_classes.iter().enumerate() {
        let path = format!("{path}.genericDeviceClasses[{index}]");
        if !is_dns_subdomain(generic) {
            problems.push(&path, format!("{generic:?} is not {DNS_SUBDOMAIN_RULE}"), "name the driver's DeviceClass");
        }
        if spec.gpu_classes.iter().any(|other| other.dra.is_some() && device_class_name(&other.name) == *generic) {
            problems.push(
                &path,
                format!("{generic} is the DeviceClass tiergate renders for a GPU class, not a driver's"),
                "list only the DeviceClasses the driver installs (e.g. gpu.nvidia.com)",
            );
        }
    }
}

fn check_shared(spec: &TierPolicySpec, problems: &mut Problems) {
    let generic: BTreeMap<&str, &str> = spec
        .gpu_classes
        .iter()
        .flat_map(|class| class.generic_device_classes().into_iter().map(move |name| (name, class.name.as_str())))
        .collect();
    for (index, shared) in spec.admission.shared_device_classes.iter().enumerate() {
        let path = format!("spec.admission.sharedDeviceClasses[{index}]");
        if !is_dns_subdomain(shared) {
            problems.push(&path, format!("{shared:?} is not {DNS_SUBDOMAIN_RULE}"), "name a DeviceClass");
        }
        if let Some(class) = generic.get(shared.as_str()) {
            problems.push(
                &path,
                format!("{shared} reaches every GPU of GPU class {class}'s driver; any tier could claim them"),
                "remove it; claims of the driver's generic class are retargeted to each tier's class",
            );
        }
        if shared.ends_with(DEVICE_CLASS_SUFFIX) {
            problems.push(
                &path,
                format!("{shared} is a DeviceClass tiergate renders for a GPU class"),
                "remove it; a tier's own classes need no listing",
            );
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use crate::inputs::parse_policy;
    use crate::validation::validate_policy;

    const SAMPLE: &str = include_str!("../../../../samples/dra/policy.yaml");

    /// Every problem of the policy `text`, as `path: problem; fix: ...` lines.
    fn problems_of(text: &str) -> Vec<String> {
        let policy = parse_policy(text, "test").expect("parses");
        match validate_policy(&policy) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
        }
    }

    /// The problems of the sample with l4's selector line replaced by `edit`.
    fn problems(edit: &str) -> Vec<String> {
        problems_of(
            &SAMPLE.replace(
                "        selector: device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA L4\"\n",
                edit,
            ),
        )
    }

    #[test]
    fn the_sample_is_valid() {
        assert_eq!(
            problems("        selector: device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA L4\"\n"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_selector_that_is_not_cel_names_the_field() {
        let found = problems("        selector: device.attributes[\"gpu.nvidia.com\"].productName == \n");
        assert!(
            found.iter().any(|line| line.starts_with("spec.gpuClasses[1].dra.selector: the selector is not valid CEL")),
            "{found:?}"
        );
    }

    #[test]
    fn a_generic_class_may_not_be_shared_nor_a_rendered_one() {
        let found = problems("        genericDeviceClasses: [h100.tiergate.io]\n");
        assert!(
            found.iter().any(|line| line.starts_with("spec.gpuClasses[1].dra.genericDeviceClasses[0]")),
            "{found:?}"
        );
    }

    #[test]
    fn a_dra_class_without_node_labels_may_not_share_a_tier_with_another_flavor() {
        let found = problems_of(
            &SAMPLE
                .replace("      nodeLabels: {nvidia.com/gpu.product: NVIDIA-L4}\n", "")
                .replace("      gpuClass: h100\n", "      gpuClass: h100\n      fallbackGpuClasses: [l4]\n"),
        );
        assert!(
            found.iter().any(|line| line.starts_with("spec.tiers[0]: tier gold has 1 flavor(s) besides DRA class l4")
                && line.contains("give GPU class l4 the nodeLabels")),
            "{found:?}"
        );
        // Alone in its tier (bronze), the same class is fine.
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
