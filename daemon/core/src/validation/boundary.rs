//! Policy checks of the tenant boundary: GPU resource names and patterns of a class, and a tier's priority
//! ceiling and default; pure, no I/O.

use super::Problems;
use super::names::{QUALIFIED_NAME_RULE, is_qualified_name};
use crate::policy::{DEFAULT_GPU_RESOURCE, GpuClass, PriorityBucket, Tier};

/// `resourceName` and `resourceNames` of one class: well-formed names or `prefix*` patterns, not both fields.
pub(super) fn check_resource_names(path: &str, class: &GpuClass, problems: &mut Problems) {
    if !is_qualified_name(&class.resource_name) {
        problems.push(
            format!("{path}.resourceName"),
            format!("{:?} is not a resource name ({QUALIFIED_NAME_RULE})", class.resource_name),
            "use the extended resource the device plugin advertises, e.g. `nvidia.com/gpu`",
        );
    }
    if !class.resource_names.is_empty() && class.resource_name != DEFAULT_GPU_RESOURCE {
        problems.push(
            format!("{path}.resourceName"),
            "resourceName and resourceNames are both set; resourceNames replaces resourceName",
            format!("remove resourceName and list {:?} under resourceNames", class.resource_name),
        );
    }
    for (index, pattern) in class.resource_names.iter().enumerate() {
        let field = format!("{path}.resourceNames[{index}]");
        let (stem, wildcard) = match pattern.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (pattern.as_str(), false),
        };
        // `nvidia.com/mig-*` is well-formed when some name completes it: the stem plus one letter is a name.
        let completed = if wildcard { format!("{stem}x") } else { stem.to_owned() };
        if stem.contains('*') || !is_qualified_name(&completed) || !completed.contains('/') {
            problems.push(
                field,
                format!(
                    "{pattern:?} is not an extended resource name or a pattern ending in `*` (a domain-prefixed \
                     {QUALIFIED_NAME_RULE}, with `*` allowed only at the end)"
                ),
                "write e.g. `nvidia.com/gpu` or `nvidia.com/mig-*`",
            );
        }
    }
    if !class.resource_names.is_empty() && class.resource_names.iter().all(|name| name.ends_with('*')) {
        problems.push(
            format!("{path}.resourceNames"),
            "only patterns: the class has no whole-GPU resource for its quota and the scorer",
            "list the exact whole-GPU resource first, e.g. `nvidia.com/gpu`",
        );
    }
}

/// A tier's `maxPriorityClass` and `defaultPriorityClass`: both name buckets, the default at or below the ceiling.
pub(super) fn check_priority_ceiling(path: &str, tier: &Tier, buckets: &[PriorityBucket], problems: &mut Problems) {
    let find = |name: &str| buckets.iter().find(|bucket| bucket.name == name);
    let Some(ceiling_name) = &tier.max_priority_class else {
        return;
    };
    let Some(ceiling) = find(ceiling_name) else {
        problems.push(
            format!("{path}.maxPriorityClass"),
            format!("{ceiling_name:?} is not a priority bucket"),
            "name one of spec.priorityBuckets[*].name",
        );
        return;
    };
    if let Some(default) = tier.default_priority_class.as_deref().and_then(find)
        && default.value > ceiling.value
    {
        problems.push(
            format!("{path}.defaultPriorityClass"),
            format!(
                "default {:?} (value {}) is above the tier's maxPriorityClass {:?} (value {})",
                default.name, default.value, ceiling.name, ceiling.value
            ),
            format!("use a bucket at or below {:?}, or raise maxPriorityClass", ceiling.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::inputs::load_policy;
    use crate::validation::validate;

    fn paths_after(edit: impl FnOnce(&mut crate::policy::TierPolicySpec)) -> Vec<String> {
        let mut spec = load_policy(None).unwrap().spec;
        edit(&mut spec);
        match validate(&spec) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.problems().iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_resource_pattern_with_a_star_inside_or_no_domain_is_refused_naming_the_field() {
        let problems = paths_after(|spec| {
            spec.gpu_classes[0].resource_names =
                vec!["nvidia.com/gpu".into(), "nvidia.com/*-mig".into(), "gpu*".into()];
        });
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("spec.gpuClasses[0].resourceNames[1]: \"nvidia.com/*-mig\""), "{problems:?}");
        assert!(problems[1].starts_with("spec.gpuClasses[0].resourceNames[2]: \"gpu*\""), "{problems:?}");
        assert!(problems[1].contains("fix: write e.g. `nvidia.com/gpu` or `nvidia.com/mig-*`"), "{problems:?}");
    }

    #[test]
    fn resource_name_and_resource_names_together_name_the_replacement() {
        let problems = paths_after(|spec| {
            spec.gpu_classes[0].resource_name = "amd.com/gpu".into();
            spec.gpu_classes[0].resource_names = vec!["nvidia.com/gpu".into()];
        });
        assert_eq!(
            problems,
            ["spec.gpuClasses[0].resourceName: resourceName and resourceNames are both set; resourceNames replaces \
              resourceName; fix: remove resourceName and list \"amd.com/gpu\" under resourceNames"]
        );
    }

    #[test]
    fn only_patterns_leave_a_class_without_its_whole_gpu_resource() {
        let problems = paths_after(|spec| spec.gpu_classes[0].resource_names = vec!["nvidia.com/mig-*".into()]);
        assert!(problems.iter().any(|problem| problem.starts_with("spec.gpuClasses[0].resourceNames: only patterns")));
    }

    #[test]
    fn a_ceiling_must_name_a_bucket_and_sit_at_or_above_the_default() {
        let unknown = paths_after(|spec| spec.tiers[2].max_priority_class = Some("gpu-mega".into()));
        assert_eq!(
            unknown,
            ["spec.tiers[2].maxPriorityClass: \"gpu-mega\" is not a priority bucket; fix: name one of \
              spec.priorityBuckets[*].name"]
        );
        let above = paths_after(|spec| spec.tiers[2].default_priority_class = Some("gpu-ultra".into()));
        assert_eq!(above.len(), 1, "{above:?}");
        assert!(above[0].starts_with("spec.tiers[2].defaultPriorityClass: default \"gpu-ultra\" (value 900) is above"));
        assert!(above[0].contains("fix: use a bucket at or below \"gpu-high\""), "{above:?}");
    }
}
