//! Priority of a workload in a tiered namespace: a `kueue.x-k8s.io/priority-class` label held to the tier's
//! ceiling (`maxPriorityClass`), and the tier's default where a pod `priorityClassName` would otherwise become a
//! queued workload's priority; no I/O.

use std::collections::BTreeMap;

use tiergate_workloads::PRIORITY_CLASS_LABEL;

use crate::policy::{CeilingAction, Tier, TierPolicySpec};
use crate::request::Request;
use crate::scoring::buckets::{CeilingCheck, check_priority_ceiling, default_priority_class};

/// What to do with the object's priority-class label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum PriorityFix {
    /// Leave the labels as they are.
    Keep,
    /// Set the label to `class`.
    Set {
        /// The WorkloadPriorityClass.
        class: String,
        /// Said to the user (a clamp).
        warning: Option<String>,
        /// For the decision's reasons.
        reason: String,
    },
    /// Remove the label (the policy has no bucket to clamp to).
    Remove {
        /// Said to the user.
        warning: String,
    },
    /// Refuse the request (`priorityAboveCeiling: Deny`).
    Deny {
        /// What is wrong and the fix.
        message: String,
    },
}

/// The fix for an object with `labels` in `tier`; `queued` for objects Kueue queues (Job, JobSet, anything with a
/// queue-name label), whose pods' `priorityClassName` (`pod_priority_class`) Kueue takes as the workload priority
/// when no label is set.
pub(super) fn priority_fix(
    policy: &TierPolicySpec,
    tier: &Tier,
    labels: &BTreeMap<String, String>,
    queued: bool,
    pod_priority_class: Option<&str>,
) -> PriorityFix {
    let buckets = &policy.priority_buckets;
    let field = format!("metadata.labels[\"{PRIORITY_CLASS_LABEL}\"]");
    let Some(user) = labels.get(PRIORITY_CLASS_LABEL) else {
        return match (queued, pod_priority_class, default_priority_class(tier, buckets)) {
            (true, Some(pod_class), Some(class)) => PriorityFix::Set {
                reason: format!(
                    "priority class {class}, tier {}'s default: Kueue would otherwise take the workload priority \
                     from the pods' priorityClassName {pod_class}",
                    tier.name
                ),
                class,
                warning: None,
            },
            _ => PriorityFix::Keep,
        };
    };
    let check = check_priority_ceiling(user, tier, buckets);
    let Some(replacement) = check.replacement() else {
        return PriorityFix::Keep;
    };
    let why = match &check {
        CeilingCheck::NotABucket { .. } => format!("{user} is not a priority bucket of the TierPolicy"),
        _ => format!("{user} is above tier {}'s ceiling", tier.name),
    };
    if policy.admission.priority_above_ceiling == CeilingAction::Deny {
        let allowed =
            replacement.map_or_else(|| "no priority class".to_owned(), |ceiling| format!("{ceiling} or below"));
        return PriorityFix::Deny {
            message: format!(
                "{field} is {user}, but {why}; tier {} may use {allowed}. Fix: remove the label (tiergate sets the \
                 tier's priority) or name {allowed}.",
                tier.name
            ),
        };
    }
    match replacement {
        Some(ceiling) => PriorityFix::Set {
            class: ceiling.to_owned(),
            warning: Some(format!("{field} {user} replaced by {ceiling}: {why}")),
            reason: format!("priority class clamped to {ceiling}, the ceiling of tier {}", tier.name),
        },
        None => PriorityFix::Remove { warning: format!("{field} {user} removed: {why}, which has no buckets") },
    }
}

/// Whether the requester may keep any priority class: an admin namespace, user or group of the policy
/// (`foreignGpuClass: Allow` opens GPU classes, not priorities).
pub(super) fn is_admin(policy: &TierPolicySpec, request: &Request, namespace: &str) -> bool {
    let admission = &policy.admission;
    let user = &request.user_info;
    admission.admin_namespaces.iter().any(|name| name == namespace)
        || user.username.as_ref().is_some_and(|name| admission.admin_users.contains(name))
        || user.groups.as_deref().unwrap_or_default().iter().any(|group| admission.admin_groups.contains(group))
}
