//! Who owns the in-server gate under `--gate-owner`: the webhook registration (the chart's
//! MutatingWebhookConfiguration), so that `helm uninstall` takes the gate with the webhook it backs up; does I/O.
//!
//! A gate left without its webhook would hold every tiered namespace to rules nobody serves any more (issue 48:
//! after `helm uninstall` every GPU Job in a tiered namespace was refused). So the gate's parameters, policies and
//! bindings carry an owner reference to the registration, and Kubernetes' garbage collector deletes them with it;
//! while the registration does not exist the daemon applies no gate (and prunes one left, so a daemon still
//! draining during the uninstall never puts it back); and since the TierPolicy no longer owns the gate, the daemon
//! prunes it when the served policy is deleted. docs/operations.md, "Uninstall".

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use kube::api::Api;

use super::kinds::KueueKind;
use super::writes::delete_object;
use super::{Context, ReconcileError};
use crate::policy::TierPolicy;

/// Who owns the gate this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum GateOwner {
    /// No `--gate-owner`: the TierPolicy, like every other object.
    Policy,
    /// The registration exists: this reference.
    Registration(OwnerReference),
    /// The registration named by `--gate-owner` does not exist: no gate.
    Missing(String),
}

impl GateOwner {
    /// The owner reference the gate's objects get instead of the policy's, if any.
    pub(super) fn reference(&self) -> Option<&OwnerReference> {
        match self {
            Self::Registration(reference) => Some(reference),
            Self::Policy | Self::Missing(_) => None,
        }
    }
}

/// Reads the registration `--gate-owner` names.
pub(super) async fn resolve_gate_owner(ctx: &Context) -> Result<GateOwner, ReconcileError> {
    let Some(name) = &ctx.settings.gate_owner else {
        return Ok(GateOwner::Policy);
    };
    let api: Api<MutatingWebhookConfiguration> = Api::all(ctx.client.clone());
    match api.get_metadata_opt(name).await {
        Ok(Some(registration)) => Ok(build_gate_owner(name, &registration.metadata)),
        Ok(None) => Ok(GateOwner::Missing(name.clone())),
        Err(source) => Err(ReconcileError::ReadGateOwner { name: name.clone(), source }),
    }
}

/// The owner of the gate for the registration `name` with `metadata` (one without a uid, which the API server
/// always sets, counts as missing: an owner reference needs it).
pub(super) fn build_gate_owner(name: &str, metadata: &ObjectMeta) -> GateOwner {
    match &metadata.uid {
        Some(uid) => GateOwner::Registration(OwnerReference {
            api_version: MutatingWebhookConfiguration::api_version(&()).into_owned(),
            kind: MutatingWebhookConfiguration::kind(&()).into_owned(),
            name: name.to_owned(),
            uid: uid.clone(),
            controller: None,
            block_owner_deletion: None,
        }),
        None => GateOwner::Missing(name.to_owned()),
    }
}

/// Deletes every gate object the served policy owns (by label) when that policy is gone: under `--gate-owner` its
/// owner reference no longer takes the gate with it. Nothing to do without `--gate-owner`, before the caches have
/// synced, or while the policy exists.
///
/// The cache only proposes: deleting the gate opens the tenant boundary whenever the webhook does not answer, so
/// the policy's absence is confirmed by the API server itself before anything is deleted (a replica whose caches
/// lag, or a snapshot read while a store was still listing, must never take the gate away).
pub(super) async fn prune_gate_without_policy(ctx: &Context) -> Result<usize, ReconcileError> {
    let snapshot = ctx.snapshot.load_full();
    if ctx.settings.gate_owner.is_none() || !snapshot.synced || snapshot.policy.is_some() || !ctx.gate.is_open() {
        return Ok(0);
    }
    let policies: Api<TierPolicy> = Api::all(ctx.client.clone());
    let name = &ctx.settings.policy_name;
    match policies.get_metadata_opt(name).await {
        Ok(None) => {}
        Ok(Some(_)) => {
            tracing::info!(
                policy = %name,
                "the cache has no served TierPolicy but the API server has it: the in-server gate stays"
            );
            return Ok(0);
        }
        Err(source) => return Err(ReconcileError::ReadServedPolicy { name: name.clone(), source }),
    }
    let mut pruned = 0;
    for kind in KueueKind::ALL.into_iter().filter(|kind| kind.is_gate()) {
        let Some(store) = ctx.live.get(&kind) else { continue };
        for live in store.state() {
            if delete_object(ctx, &live, |_| true).await? {
                pruned += 1;
            }
        }
    }
    if pruned > 0 {
        tracing::info!(
            policy = %ctx.settings.policy_name,
            pruned,
            "the served TierPolicy is gone: pruned its in-server gate (owned by the webhook registration, not the policy)"
        );
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_owns_the_gate_by_uid_and_without_one_there_is_no_owner() {
        let metadata = ObjectMeta { uid: Some("u-1".to_owned()), ..ObjectMeta::default() };
        let owner = build_gate_owner("00-tiergate", &metadata);
        let reference = owner.reference().unwrap();
        assert_eq!(
            (reference.kind.as_str(), reference.api_version.as_str(), reference.name.as_str(), reference.uid.as_str()),
            ("MutatingWebhookConfiguration", "admissionregistration.k8s.io/v1", "00-tiergate", "u-1")
        );
        assert_eq!(reference.controller, None, "the registration does not control the gate, it only outlives it");
        assert_eq!(build_gate_owner("00-tiergate", &ObjectMeta::default()), GateOwner::Missing("00-tiergate".into()));
        assert_eq!(GateOwner::Policy.reference(), None);
    }
}
