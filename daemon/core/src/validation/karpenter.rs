//! Policy checks of the GPU classes' Karpenter NodePool templates (`spec.gpuClasses[].karpenter`, issue 51): what
//! Karpenter's v1 NodePool CRD would refuse, and what would let the rendered pool serve pods of other classes;
//! pure, no I/O.

use tiergate_karpenter::{MAX_REQUIREMENTS, REQUIREMENT_OPERATOR_VALUES, WEIGHT_RANGE};

use super::Problems;
use super::names::{QUALIFIED_NAME_RULE, is_qualified_name};
use super::quantity::parse_quantity;
use crate::policy::{GpuClass, KarpenterPoolTemplate, TierPolicySpec};

/// Node labels Karpenter refuses in a NodePool's requirements (it sets them itself).
const RESERVED_REQUIREMENT_KEYS: [&str; 2] = ["karpenter.sh/nodepool", "kubernetes.io/hostname"];

/// Every problem of every class's `karpenter` template.
pub(super) fn check_karpenter(spec: &TierPolicySpec, problems: &mut Problems) {
    for (index, class) in spec.gpu_classes.iter().enumerate() {
        if let Some(template) = &class.karpenter {
            check_template(&format!("spec.gpuClasses[{index}]"), class, template, problems);
        }
    }
}

fn check_template(path: &str, class: &GpuClass, template: &KarpenterPoolTemplate, problems: &mut Problems) {
    if class.node_labels.is_empty() {
        problems.push(
            format!("{path}.karpenter"),
            "a NodePool for a class without nodeLabels would launch nodes that any GPU pod fits",
            "give the class the nodeLabels its nodes carry, or remove `karpenter`",
        );
    }
    let fences = class.node_taints.iter().any(|taint| matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute"));
    if !fences {
        problems.push(
            format!("{path}.nodeTaints"),
            "a class with a karpenter template needs a NoSchedule or NoExecute taint: without one, any pod that \
             selects the NodePool by its karpenter.sh/nodepool or instance-type labels makes Karpenter buy this \
             class's nodes, whatever its tier (a pod tolerating the taint is confined to its own tier's class)",
            "add a taint, e.g. {key: nvidia.com/gpu, value: present, effect: NoSchedule}",
        );
    }
    let reference = &template.node_class_ref;
    for (field, value) in [("group", &reference.group), ("kind", &reference.kind), ("name", &reference.name)] {
        if value.trim().is_empty() {
            problems.push(
                format!("{path}.karpenter.nodeClassRef.{field}"),
                "empty",
                "name the cloud's node class, e.g. {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}",
            );
        }
    }
    let room = MAX_REQUIREMENTS.saturating_sub(class.node_labels.len());
    if template.requirements.len() > room {
        problems.push(
            format!("{path}.karpenter.requirements"),
            format!(
                "{} requirements and {} class labels; a NodePool holds at most {MAX_REQUIREMENTS} requirements",
                template.requirements.len(),
                class.node_labels.len()
            ),
            "drop requirements",
        );
    }
    for (index, requirement) in template.requirements.iter().enumerate() {
        let at = format!("{path}.karpenter.requirements[{index}]");
        let key = requirement.key.as_str();
        if !is_qualified_name(key) {
            problems.push(format!("{at}.key"), format!("{key:?} is not {QUALIFIED_NAME_RULE}"), "fix the label key");
        }
        if RESERVED_REQUIREMENT_KEYS.contains(&key) {
            problems.push(format!("{at}.key"), format!("Karpenter sets {key} itself"), "remove the requirement");
        }
        if class.node_labels.contains_key(key) {
            problems.push(
                format!("{at}.key"),
                format!("{key} is one of the class's nodeLabels, which tiergate writes into the NodePool"),
                "remove the requirement; change the class's nodeLabels instead",
            );
        }
        check_operator(&at, &requirement.operator, &requirement.values, problems);
        match requirement.min_values {
            Some(min) if !(1..=50).contains(&min) => {
                problems.push(format!("{at}.minValues"), "must be 1 to 50", "set minValues between 1 and 50 or drop it")
            }
            Some(min) if requirement.operator == "In" && requirement.values.len() < min as usize => problems.push(
                format!("{at}.minValues"),
                format!("{min} is more than the {} value(s) listed", requirement.values.len()),
                "list at least minValues values or lower minValues",
            ),
            _ => {}
        }
    }
    if let Some(weight) = template.weight
        && !WEIGHT_RANGE.contains(&weight)
    {
        problems.push(
            format!("{path}.karpenter.weight"),
            format!("{weight} is outside 1-100"),
            "set a weight from 1 to 100 (default 50)",
        );
    }
    for (field, value) in [("consolidateAfter", &template.consolidate_after), ("expireAfter", &template.expire_after)] {
        if let Some(value) = value
            && !is_karpenter_duration(value)
        {
            problems.push(
                format!("{path}.karpenter.{field}"),
                format!("{value:?} is neither Never nor a duration of whole h, m and s"),
                "write e.g. 5m, 1h30m or Never",
            );
        }
    }
    let gpu = class.primary_resource();
    for (resource, quantity) in &template.limits {
        let at = format!("{path}.karpenter.limits[{resource:?}]");
        if class.counts_resource(resource) {
            problems.push(
                at,
                format!("{resource} is the class's GPU; its limit is what the tiers' quota can admit"),
                format!("remove the {gpu} limit; raise or lower the tiers' quota instead"),
            );
        } else if parse_quantity(&quantity.0).is_none_or(|parsed| parsed.is_negative()) {
            problems.push(at, format!("{:?} is not a non-negative quantity", quantity.0), "write e.g. 1000 or 4Ti");
        }
    }
}

fn check_operator(at: &str, operator: &str, values: &[String], problems: &mut Problems) {
    match operator {
        "In" | "NotIn" if values.is_empty() => {
            problems.push(format!("{at}.values"), format!("{operator} needs at least one value"), "list the values")
        }
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            problems.push(format!("{at}.values"), format!("{operator} takes no values"), "remove the values")
        }
        "Gt" | "Lt" | "Gte" | "Lte" if values.len() != 1 || values[0].parse::<u64>().is_err() => problems.push(
            format!("{at}.values"),
            format!("{operator} takes exactly one non-negative integer"),
            "write one integer value, e.g. \"8\"",
        ),
        _ if !REQUIREMENT_OPERATOR_VALUES.contains(&operator) => problems.push(
            format!("{at}.operator"),
            format!("{operator:?} is not one of {REQUIREMENT_OPERATOR_VALUES:?}"),
            "use In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte",
        ),
        _ => {}
    }
}

/// Karpenter's duration grammar (`^(([0-9]+(s|m|h))+|Never)$`).
fn is_karpenter_duration(value: &str) -> bool {
    if value == "Never" {
        return true;
    }
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        match rest[digits..].chars().next() {
            Some('s' | 'm' | 'h') => rest = &rest[digits + 1..],
            _ => return false,
        }
    }
    !value.is_empty()
}

#[cfg(test)]
mod tests {
    use super::is_karpenter_duration;

    #[test]
    fn durations_follow_karpenters_pattern() {
        for good in ["Never", "5m", "1h30m", "720h", "10s"] {
            assert!(is_karpenter_duration(good), "{good}");
        }
        for bad in ["", "never", "5", "1.5h", "5ms", "h", "-5m", "5m "] {
            assert!(!is_karpenter_duration(bad), "{bad}");
        }
    }
}
