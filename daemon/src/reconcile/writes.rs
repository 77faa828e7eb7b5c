//! Every write the reconciler makes: server-side apply (one field manager, forced), guarded deletes, the
//! status subresource and Events. Each checks the Lease write gate right before sending; does I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::DynamicObject;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::diff::{build_apply_need, build_missing_paths};
use super::fleet::health::merge_worker_conditions;
use super::kinds::{FIELD_MANAGER, KueueKind, display_name};
use super::live::LiveObject;
use super::status::{StatusInput, build_status, merge_blocked_condition};
use super::{Context, ReconcileError};
use crate::metrics::KindLabels;
use crate::policy::{TierPolicy, TierPolicyStatus};

/// How many times a conflicting apply or delete is re-read and retried before the reconcile fails.
const CONFLICT_ATTEMPTS: u32 = 3;

pub(super) fn check_gate(ctx: &Context, what: impl FnOnce() -> String) -> Result<(), ReconcileError> {
    if ctx.gate.is_open() { Ok(()) } else { Err(ReconcileError::WriteWithoutLease { what: what() }) }
}

pub(super) fn count_write(ctx: &Context, kind: &'static str) {
    ctx.metrics.api_writes.get_or_create(&KindLabels { kind }).inc();
}

fn object_api(ctx: &Context, kind: KueueKind, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = kind.api_resource();
    match namespace {
        Some(namespace) if kind.namespaced() => Api::namespaced_with(ctx.client.clone(), namespace, &resource),
        _ => Api::all_with(ctx.client.clone(), &resource),
    }
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// Server-side applies `object` with the `tiergate` field manager (forced). On 409 it re-reads the object and
/// retries unless the re-read shows it already matches. Returns the paths of the fields the API server's answer
/// lacks ([`build_missing_paths`]; an older CRD pruned them), empty when it kept every one.
pub(super) async fn apply_object(
    ctx: &Context,
    kind: KueueKind,
    object: &DynamicObject,
) -> Result<Vec<String>, ReconcileError> {
    let api = object_api(ctx, kind, object.metadata.namespace.as_deref());
    let name = object.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for _ in 0..CONFLICT_ATTEMPTS {
        check_gate(ctx, || format!("{} {}", kind.name(), display_name(object)))?;
        count_write(ctx, kind.name());
        match api.patch(&name, &params, &Patch::Apply(object)).await {
            Ok(returned) => return Ok(build_missing_paths(&object.data, &returned.data)),
            Err(error) if is_status(&error, 409) => {
                tracing::info!(kind = kind.name(), name = %display_name(object), "apply conflicted; re-reading");
                let live = api.get_opt(&name).await.map_err(|source| ReconcileError::ReadObject {
                    kind: kind.name(),
                    name: display_name(object),
                    source,
                })?;
                let live = live.map(|live| LiveObject::from_dynamic(kind, live));
                if !build_apply_need(object, live.as_ref()).needs_write() {
                    return Ok(Vec::new());
                }
            }
            Err(source) => {
                return Err(ReconcileError::ApplyObject { kind: kind.name(), name: display_name(object), source });
            }
        }
    }
    Err(ReconcileError::ApplyConflict { kind: kind.name(), name: display_name(object), attempts: CONFLICT_ATTEMPTS })
}

/// Deletes `live` only if it is still the object decided on (uid and resourceVersion preconditions). On 409 it
/// re-reads and deletes again only if `still_wanted` holds for the fresh object. `Ok(false)`: kept.
pub(super) async fn delete_object(
    ctx: &Context,
    live: &LiveObject,
    still_wanted: impl Fn(&LiveObject) -> bool,
) -> Result<bool, ReconcileError> {
    let kind = live.kind;
    let api = object_api(ctx, kind, live.namespace.as_deref());
    let mut preconditions = Preconditions { uid: live.uid.clone(), resource_version: live.resource_version.clone() };
    for _ in 0..CONFLICT_ATTEMPTS {
        check_gate(ctx, || format!("delete of {} {}", kind.name(), live.display_name()))?;
        let params = DeleteParams { preconditions: Some(preconditions.clone()), ..DeleteParams::background() };
        count_write(ctx, kind.name());
        tracing::info!(kind = kind.name(), name = %live.display_name(), "pruning");
        match api.delete(&live.name, &params).await {
            Ok(_) => return Ok(true),
            Err(error) if is_status(&error, 404) => return Ok(true),
            Err(error) if is_status(&error, 409) => {
                let fresh = api.get_opt(&live.name).await.map_err(|source| ReconcileError::ReadObject {
                    kind: kind.name(),
                    name: live.display_name(),
                    source,
                })?;
                match fresh.map(|fresh| LiveObject::from_dynamic(kind, fresh)) {
                    None => return Ok(true),
                    Some(fresh) if still_wanted(&fresh) && fresh.uid == live.uid => {
                        preconditions = Preconditions { uid: fresh.uid, resource_version: fresh.resource_version };
                    }
                    Some(_) => return Ok(false),
                }
            }
            Err(source) => {
                return Err(ReconcileError::DeleteObject { kind: kind.name(), name: live.display_name(), source });
            }
        }
    }
    Ok(false)
}

/// What relabelling one pending workload's owner came to.
#[derive(Debug)]
pub(super) enum MoveOutcome {
    /// Relabelled: Kueue moves its Workload to the new queue.
    Moved,
    /// The object is gone, was re-created or no longer names the old queue (the patch's tests failed): nothing to
    /// do, the next reconcile sees where its Workload is.
    Changed,
    /// Refused (RBAC, admission, Kueue's own validation), with the API server's message.
    Refused(String),
    /// Not answered (connection, timeout), with the error: tried again on the next reconcile.
    Unanswered(String),
}

/// Relabels `owner` (in `namespace`) from `from_queue` to `to_queue` with a JSON Patch that tests its uid and old
/// label first. It is an ordinary update: the webhook and the in-server gate decide it as any other.
pub(super) async fn move_to_queue(
    ctx: &Context,
    namespace: &str,
    owner: &super::requeue::PendingOwner,
    (from_queue, to_queue): (&str, &str),
) -> Result<MoveOutcome, ReconcileError> {
    check_gate(ctx, || format!("relabel of {}", owner.display(namespace)))?;
    let resource = crate::cache::kinds::adapter_resource(owner.adapter);
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    let patch = super::requeue::build_move_patch(&owner.uid, from_queue, to_queue);
    count_write(ctx, owner.adapter.kind);
    match api.patch(&owner.name, &PatchParams::default(), &Patch::<()>::Json(patch)).await {
        Ok(_) => Ok(MoveOutcome::Moved),
        Err(error) if is_status(&error, 404) => Ok(MoveOutcome::Changed),
        // A failed test answers 422 with a generic message, as an invalid object or a policy's denial may: the
        // object as it is now tells them apart (read with `list`, which the chart grants for the owner index).
        Err(kube::Error::Api(status)) if status.code == 422 && !still_names(&api, owner, from_queue).await => {
            Ok(MoveOutcome::Changed)
        }
        Err(kube::Error::Api(status)) => Ok(MoveOutcome::Refused(format!("{} ({})", status.message, status.code))),
        Err(error) => Ok(MoveOutcome::Unanswered(error.to_string())),
    }
}

/// Whether `owner` still exists with its uid and still names `queue` (unknown counts as yes: report, not skip).
async fn still_names(api: &Api<DynamicObject>, owner: &super::requeue::PendingOwner, queue: &str) -> bool {
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={}", owner.name));
    let Ok(list) = api.list(&params).await else { return true };
    list.items.iter().any(|object| {
        object.metadata.uid.as_deref() == Some(owner.uid.as_str())
            && object.labels().get(tiergate_workloads::QUEUE_NAME_LABEL).map(String::as_str) == Some(queue)
    })
}

/// Writes the status `input` implies via the status subresource (server-side apply), only when it differs from
/// what the policy shows. `Ok(true)` when it wrote.
pub(super) async fn write_status(
    ctx: &Context,
    policy: &TierPolicy,
    input: &StatusInput,
) -> Result<bool, ReconcileError> {
    let now = Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH));
    let mut status = build_status(policy.status.as_ref(), policy.metadata.generation, input, &now);
    let previous = policy.status.as_ref().map(|status| status.conditions.as_slice()).unwrap_or_default();
    let workers = ctx.fleet.workers();
    merge_worker_conditions(&mut status, &workers, previous, policy.metadata.generation, &now);
    let mut blockers = ctx.blockers.active();
    blockers.retain(|blocker| blocker.reason.is_about_the_policy());
    merge_blocked_condition(&mut status, &blockers, previous, policy.metadata.generation, &now);
    let without_usage = policy.status.as_ref().map(|live| TierPolicyStatus { usage: None, ..live.clone() });
    if without_usage.as_ref() == Some(&status) {
        return Ok(false);
    }
    let name = policy.name_any();
    check_gate(ctx, || format!("status of TierPolicy {name}"))?;
    let body = json!({
        "apiVersion": TierPolicy::api_version(&()),
        "kind": TierPolicy::kind(&()),
        "metadata": { "name": name },
        "status": status,
    });
    count_write(ctx, "TierPolicy");
    let api: Api<TierPolicy> = Api::all(ctx.client.clone());
    api.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(body))
        .await
        .map_err(|source| ReconcileError::WriteStatus { name: name.clone(), source })?;
    Ok(true)
}

/// Publishes an Event on the policy; failures are logged, never fail the reconcile.
pub(super) async fn publish_event(ctx: &Context, policy: &TierPolicy, type_: EventType, reason: &str, note: String) {
    if check_gate(ctx, || format!("event {reason}")).is_err() {
        return;
    }
    count_write(ctx, "Event");
    send_policy_event(&ctx.recorder, policy, type_, reason, note).await;
}

/// Publishes an Event on `policy` whose action is its reason, reporting (never failing on) an error; the caller
/// checks the Lease write gate.
pub(super) async fn send_policy_event(
    recorder: &Recorder,
    policy: &TierPolicy,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event =
        Event { type_, reason: reason.to_owned(), note: Some(note), action: reason.to_owned(), secondary: None };
    if let Err(error) = recorder.publish(&event, &policy.object_ref(&())).await {
        tracing::warn!(%error, reason, "failed to publish an Event");
    }
}
