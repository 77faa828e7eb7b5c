//! An owner's admission (every kind with pod templates `tiergate_workloads` knows: Deployment, ReplicaSet,
//! StatefulSet, Job, JobSet, CronJob): every strategy and GPU map on it or its pod templates must parse, and a
//! smart-scheduler strategy on its metadata is copied onto its pod templates in canonical form; pure, no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::Operation;
use serde_json::Value;
use tiergate_compat::strategy::{SMART_SCHEDULER_ANNOTATION, parse_schedule_strategy};
use tiergate_workloads::{TemplateLayout, controller_of};

use super::owner::{TemplateMeta, template_meta};
use super::pinning::check_owner_map;
use super::sources::declared_strategies;
use super::{PLACEMENT_ANNOTATION, PlacementError, PlacementOutcome, STRATEGY_ANNOTATION};
use crate::request::Request;
use crate::view::Snapshot;

/// An owner's admission: every strategy and map on it or its pod template must parse (else Err, so broken pods
/// are never created); a smart-scheduler strategy on the owner's metadata is copied onto the pod template in
/// canonical form, and removed from there when the owner drops it.
pub(super) fn check_owner(
    request: &Request,
    (meta, object): (&ObjectMeta, &Value),
    layout: TemplateLayout,
    snapshot: &Snapshot,
) -> Result<PlacementOutcome, PlacementError> {
    let kind = request.kind.kind.as_str();
    let templates: Vec<TemplateMeta> =
        layout.pod_templates(object).iter().map(|template| template_meta(object, &template.metadata)).collect();
    let owner_annotations = meta.annotations.clone().unwrap_or_default();
    let owner_labels = meta.labels.clone().unwrap_or_default();
    let mut outcome = PlacementOutcome::default();
    if owner_annotations.contains_key(PLACEMENT_ANNOTATION) || owner_labels.contains_key(PLACEMENT_ANNOTATION) {
        outcome.warnings.push(format!(
            "{PLACEMENT_ANNOTATION} on the {kind} itself is ignored; put it on spec.template.metadata so its pods \
             carry it"
        ));
    }
    // A controlled owner's template belongs to its controller (the Deployment controller compares ReplicaSet
    // templates with its own; a CronJob stamps out Jobs), and a Job's template is immutable after creation, so
    // those templates are only read.
    let controlled_by = controller_of(meta).map(|owner| owner.kind.clone());
    let may_edit_template = controlled_by.is_none() && !(kind == "Job" && request.operation == Operation::Update);
    // What each template's annotations will be once the outcome is applied.
    let mut effective: Vec<_> = templates.iter().map(|template| template.annotations.clone()).collect();
    match owner_annotations.get(SMART_SCHEDULER_ANNOTATION) {
        Some(value) => {
            let canonical = parse_schedule_strategy(value)
                .map_err(|error| PlacementError {
                    annotation: SMART_SCHEDULER_ANNOTATION.to_owned(),
                    message: format!("`{value}`: {}", error.detail()),
                })?
                .to_string();
            if may_edit_template {
                outcome.template_annotations.insert(STRATEGY_ANNOTATION.to_owned(), canonical.clone());
                for annotations in &mut effective {
                    annotations.insert(STRATEGY_ANNOTATION.to_owned(), canonical.clone());
                }
            } else if effective.iter().any(|annotations| annotations.get(STRATEGY_ANNOTATION) != Some(&canonical)) {
                outcome.warnings.push(match &controlled_by {
                    Some(controller) => format!(
                        "{SMART_SCHEDULER_ANNOTATION} on a {kind} controlled by a {controller} is not copied to its \
                         pod template; put it on the {controller}"
                    ),
                    None => format!(
                        "{SMART_SCHEDULER_ANNOTATION} changed on an existing {kind}, whose pod template is \
                         immutable; re-create the {kind} to apply it"
                    ),
                });
            }
        }
        None if may_edit_template => {
            let mut removed = false;
            for annotations in &mut effective {
                removed |= annotations.remove(STRATEGY_ANNOTATION).is_some();
            }
            if removed {
                outcome.removed_template_annotations.push(STRATEGY_ANNOTATION.to_owned());
            }
        }
        None => {}
    }
    let policy = snapshot.policy.as_deref().map(|policy| &policy.spec);
    let replicas = object["spec"]["replicas"].as_i64();
    for (template, annotations) in templates.iter().zip(&effective) {
        let declarations = declared_strategies(annotations, &template.labels, policy);
        if let Some(error) = declarations.strategies.into_iter().find_map(Result::err) {
            return Err(error);
        }
        for warning in declarations.warnings {
            if !outcome.warnings.contains(&warning) {
                outcome.warnings.push(warning);
            }
        }
        check_owner_map(kind, &template.annotations, replicas, &mut outcome.warnings)?;
    }
    Ok(outcome)
}
