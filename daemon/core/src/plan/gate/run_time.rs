//! The run-time rule in both halves of the gate: Kueue's `kueue.x-k8s.io/max-exec-time-seconds` label held to the
//! tier's `maxRunTime` where Kueue reads it (the webhook's `admission::run_time`), at the places the adapter table
//! names (`WorkloadAdapter::run_time_labels_at`; a Pod's own metadata when Kueue queues it by its queue label),
//! the limits read from the tier's parameter object (`params::RunTimeFacts`); pure string building.
//!
//! The validating half refuses a GPU workload whose label is missing, not a plain positive int32, or above the
//! ceiling, unless an UPDATE leaves it as it was; the mutating half sets the tier's default (else its ceiling) where
//! it is missing, and leaves a value it cannot use for the validating half to refuse with its message.

use tiergate_workloads::{MAX_EXEC_TIME_LABEL, QUEUE_NAME_LABEL, TemplateLayout, WorkloadAdapter};

use super::cel::{escape, literal, pointer_path};
use super::program::{OBJECT, OLD_OBJECT};
use super::rules::F;
use crate::policy::run_time::LABEL_SECONDS_PATTERN;

/// The tier's run-time facts in the parameter object.
const R: &str = "params.spec.tier.maxRunTime";

/// CEL: the tier has a run-time limit.
pub(crate) fn limited() -> String {
    format!("has({F}.maxRunTime)")
}

/// One place of an object where Kueue reads the label.
struct Place {
    /// The metadata pointer.
    at: String,
    /// The pod template the metadata belongs to: the label is held only where the template exists.
    template: Option<String>,
    /// A Pod's own metadata: held only when Kueue queues the pod by its queue label.
    pod: bool,
}

/// Where the label is held on `adapter`'s objects, as the webhook holds it (`Work::run_time_labels`).
fn places(adapter: &WorkloadAdapter) -> Vec<Place> {
    if adapter.templates == TemplateLayout::Pod {
        return vec![Place { at: "/metadata".to_owned(), template: None, pod: true }];
    }
    adapter
        .run_time_labels_at()
        .into_iter()
        .enumerate()
        .map(|(index, at)| {
            let template = (index > 0).then(|| at.strip_suffix("/metadata").unwrap_or(&at).to_owned());
            Place { at, template, pod: false }
        })
        .collect()
}

/// Whether an UPDATE of the kind is judged against the old object: the label sits on the object itself (a
/// CronJob's template never belongs to a running workload, so its UPDATE is judged as a CREATE).
fn judged_against_old(adapter: &WorkloadAdapter) -> bool {
    adapter.templates == TemplateLayout::Pod || adapter.queue_labels_at == "/metadata"
}

/// CEL: the labels map at `at` of `root` has the label, and the map's path.
fn present(root: &str, at: &str) -> (String, String) {
    let (guard, labels) = pointer_path(root, &format!("{at}/labels"));
    (format!("(({guard}) && {} in {labels})", literal(MAX_EXEC_TIME_LABEL)), labels)
}

/// CEL: the label's value at `at` of `root`, or `(absent)` (no label value can be that).
fn value(root: &str, at: &str) -> String {
    let (present, labels) = present(root, at);
    format!("({present} ? {labels}[{}] : '(absent)')", literal(MAX_EXEC_TIME_LABEL))
}

/// CEL: the pod at `root` is queued by Kueue's pod integration (a non-empty queue label).
fn queued_pod(root: &str) -> String {
    let (guard, labels) = pointer_path(root, "/metadata/labels");
    let queue = literal(QUEUE_NAME_LABEL);
    format!("(({guard}) && {queue} in {labels} && {labels}[{queue}] != '')")
}

/// CEL: the object at `root` names a controller (Kueue may manage the pod through it; the gate cannot tell).
fn has_controller(root: &str) -> String {
    format!(
        "(has({root}.metadata.ownerReferences) && {root}.metadata.ownerReferences.exists(o, has(o.controller) && o.controller))"
    )
}

/// CEL: the label is held at `place` at all: its template exists, or Kueue queues the pod; `None`: always.
fn held_at(place: &Place) -> Option<String> {
    match &place.template {
        Some(template) => Some(format!("({})", pointer_path(OBJECT, template).0)),
        None => place.pod.then(|| queued_pod(OBJECT)),
    }
}

/// The validating half's rule for `adapter` (`None`: the kind carries no label Kueue reads).
pub(crate) fn run_time_rule(adapter: &WorkloadAdapter) -> Option<String> {
    let places = places(adapter);
    if places.is_empty() {
        return None;
    }
    let label = literal(MAX_EXEC_TIME_LABEL);
    let rules = places.iter().map(|place| {
        let (present, labels) = present(OBJECT, &place.at);
        let usable = format!(
            "({labels}[{label}].matches({}) && int({labels}[{label}]) <= {R}.highestSeconds)",
            literal(LABEL_SECONDS_PATTERN)
        );
        let unchanged = match judged_against_old(adapter) {
            true => format!(
                "(request.operation == 'UPDATE' && {} == {})",
                value(OBJECT, &place.at),
                value(OLD_OBJECT, &place.at)
            ),
            false => "false".to_owned(),
        };
        // A pod with a controller may be Kueue's to manage through it (a Job's pod): a missing label is its owner's.
        let may_lack = if place.pod { has_controller(OBJECT) } else { "false".to_owned() };
        let rule = format!("({present} ? ({usable} || {unchanged}) : ({may_lack} || {unchanged}))");
        match held_at(place) {
            Some(held) => format!("(!{held} || {rule})"),
            None => rule,
        }
    });
    Some(format!("({})", rules.collect::<Vec<_>>().join(" && ")))
}

/// CEL: the mutating half sets the label at `place` (on a CREATE, the tier having a limit): it is missing, where
/// the validating half would require it.
fn adds_at(place: &Place) -> String {
    let (present, _) = present(OBJECT, &place.at);
    let mut conditions: Vec<String> = held_at(place).into_iter().collect();
    if place.pod {
        conditions.push(format!("!{}", has_controller(OBJECT)));
    }
    conditions.push(format!("!{present}"));
    format!("({})", conditions.join(" && "))
}

/// CEL list of the metadata pointers where the mutating half sets the label on `adapter`'s object.
pub(crate) fn added_places(adapter: &WorkloadAdapter) -> Option<String> {
    let places = places(adapter);
    let parts: Vec<String> =
        places.iter().map(|place| format!("({} ? [{}] : [])", adds_at(place), literal(&place.at))).collect();
    (!parts.is_empty()).then(|| format!("({})", parts.join(" + ")))
}

/// CEL list of the additions setting the label where `variables.runTimeAdded` names a place, to follow the queue
/// label's. A template's labels may be missing: `set_at` builds the addition creating missing ancestors. The first
/// place has its labels map by then (a queued kind's holds the queue label, which the queue edit before creates
/// when missing; a pod's holds its queue label), and is added to by its path: creating the map again would drop the
/// queue label just added.
pub(crate) fn additions_for(adapter: &WorkloadAdapter, set_at: &dyn Fn(&str, &str) -> String) -> Option<String> {
    let places = places(adapter);
    let when_missing = format!("{R}.whenMissing");
    let parts: Vec<String> = places
        .iter()
        .map(|place| {
            let pointer = format!("{}/labels/{}", place.at, escape(MAX_EXEC_TIME_LABEL));
            let addition = match place.template {
                Some(_) => set_at(&pointer, &when_missing),
                None => format!("[{{'path': dyn({}), 'value': dyn({when_missing})}}]", literal(&pointer)),
            };
            format!("({} in variables.runTimeAdded ? {addition} : [])", literal(&place.at))
        })
        .collect();
    (!parts.is_empty()).then(|| format!("({})", parts.join(" + ")))
}

/// CEL string: the mark's value, each place in `variables.runTimeAdded` followed by a comma.
pub(crate) fn mark_text(adapter: &WorkloadAdapter) -> Option<String> {
    let places = places(adapter);
    let parts: Vec<String> = places
        .iter()
        .map(|place| {
            let at = literal(&place.at);
            format!("({at} in variables.runTimeAdded ? {} : '')", literal(&format!("{},", place.at)))
        })
        .collect();
    (!parts.is_empty()).then(|| format!("({})", parts.join(" + ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiergate_workloads::{ADAPTERS, adapter_for};

    #[test]
    fn every_queued_kind_and_the_pod_have_a_rule_and_no_other_kind_does() {
        for adapter in ADAPTERS {
            let expected = adapter.is_queued() || adapter.templates == TemplateLayout::Pod;
            assert_eq!(run_time_rule(adapter).is_some(), expected, "{}", adapter.kind);
        }
    }

    #[test]
    fn a_leaderworkersets_templates_are_held_only_where_they_exist() {
        let lws = adapter_for("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet").unwrap();
        let rule = run_time_rule(lws).unwrap();
        assert!(rule.contains("has(dyn(object).spec.leaderWorkerTemplate.leaderTemplate)"), "{rule}");
        let cron = adapter_for("batch", "v1", "CronJob").unwrap();
        assert!(!run_time_rule(cron).unwrap().contains("UPDATE"), "a CronJob's template is judged as on CREATE");
    }
}
