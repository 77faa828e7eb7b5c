//! Owner references verified against the snapshot's owner index, never trusted on their word; pure, no I/O.
//!
//! An owner is verified only when an object of that kind, with that uid and name, exists in the caches in the
//! request's namespace, tiergate checks that kind's pod templates itself, and the object is written by a trusted
//! controller (`spec.admission.trustedControllers`, named users a tenant cannot act as): a tenant can point an
//! ownerReference at its own real Job, but cannot write objects as the Job controller. A ReplicaSet is
//! verified only through its controlling Deployment. Offline there are no caches, so no owner is verified.

use std::sync::Arc;

use crate::owners::{OwnerIndex, OwnerRecord, REPLICA_SET, owner_adapter};
use crate::policy::AdmissionSettings;
use crate::view::Snapshot;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// What the object's controller reference turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerCheck {
    /// No controller reference.
    None,
    /// The controller exists in the caches as claimed.
    Verified {
        /// How reasons name it, e.g. `JobSet team/js` or `Deployment team/web`.
        owner: String,
        /// Kueue manages the owner as a workload (tiergate queues that kind), so the object is left to it.
        queued_by_kueue: bool,
    },
    /// A controller is claimed but could not be verified; the object is decided on its own.
    Unverified {
        /// The claim, e.g. `Job train`.
        claim: String,
        /// Why it is not trusted.
        why: String,
    },
}

impl OwnerCheck {
    /// The reason line for an unverified claim, if this is one.
    pub fn unverified_reason(&self) -> Option<String> {
        match self {
            Self::Unverified { claim, why } => {
                Some(format!("owner {claim} not verified ({why}); decided on the object alone"))
            }
            _ => None,
        }
    }
}

/// Checks the controller reference of an object in `namespace` against the snapshot's owner index.
pub fn check_owner(
    owner_references: Option<&[OwnerReference]>,
    namespace: &str,
    requester: Option<&str>,
    admission: &AdmissionSettings,
    snapshot: &Snapshot,
) -> OwnerCheck {
    let controller = owner_references.unwrap_or_default().iter().find(|owner| owner.controller == Some(true));
    let Some(controller) = controller else {
        return OwnerCheck::None;
    };
    let claim = format!("{} {}", controller.kind, controller.name);
    let unverified = |why: String| OwnerCheck::Unverified { claim: claim.clone(), why };
    let Some(index) = snapshot.owners.as_deref() else {
        return unverified(
            "tiergate runs without caches here (offline or explain), so no owner can be verified".into(),
        );
    };
    if !requester.is_some_and(|user| admission.trusts_controller(user)) {
        let user = requester.unwrap_or("an unnamed user");
        return unverified(format!(
            "the object was written by {user}, not by a trusted controller (spec.admission.trustedControllers)"
        ));
    }
    let (group, _) = controller.api_version.split_once('/').unwrap_or(("", &controller.api_version));
    let replica_set = group == REPLICA_SET.group && controller.kind == REPLICA_SET.kind;
    let adapter = owner_adapter(group, &controller.kind);
    if adapter.is_none() && !replica_set {
        return unverified(format!("tiergate does not check the pod templates of kind {}", controller.kind));
    }
    let record = match find(index, controller, namespace) {
        Ok(record) => record,
        Err(why) => return unverified(why),
    };
    if replica_set {
        let deployment = record.controller_uid.as_deref().and_then(|uid| index.get(uid));
        return match deployment {
            Some(deployment)
                if deployment.kind.kind == "Deployment"
                    && deployment.kind.group == "apps"
                    && deployment.namespace == namespace =>
            {
                OwnerCheck::Verified {
                    owner: format!("Deployment {namespace}/{}", deployment.name),
                    queued_by_kueue: false,
                }
            }
            _ => unverified(format!(
                "ReplicaSet {} is not controlled by a Deployment tiergate knows, and its own template is not checked",
                controller.name
            )),
        };
    }
    OwnerCheck::Verified {
        owner: format!("{} {namespace}/{}", controller.kind, controller.name),
        queued_by_kueue: adapter.is_some_and(|adapter| adapter.is_queued()),
    }
}

fn find(index: &OwnerIndex, controller: &OwnerReference, namespace: &str) -> Result<Arc<OwnerRecord>, String> {
    let Some(record) = index.get(&controller.uid) else {
        return Err(format!("no {} with uid {} exists in namespace {namespace}", controller.kind, controller.uid));
    };
    if record.namespace != namespace {
        return Err(format!(
            "uid {} belongs to an object in namespace {}, not {namespace}",
            controller.uid, record.namespace
        ));
    }
    let (group, _) = controller.api_version.split_once('/').unwrap_or(("", &controller.api_version));
    if record.kind.kind != controller.kind || record.kind.group != group {
        return Err(format!("uid {} belongs to a {}, not a {}", controller.uid, record.kind.kind, controller.kind));
    }
    if record.name != controller.name {
        return Err(format!(
            "uid {} belongs to {} {}, not {}",
            controller.uid, record.kind.kind, record.name, controller.name
        ));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_controllers_are_trusted_never_another_namespaces_service_account() {
        let defaults = AdmissionSettings::default();
        assert!(defaults.trusts_controller("system:serviceaccount:kube-system:job-controller"));
        assert!(defaults.trusts_controller("system:kube-controller-manager"));
        assert!(!defaults.trusts_controller("system:serviceaccount:team:builder"), "the tenant's own account");
        assert!(!defaults.trusts_controller("system:serviceaccount:team-dev:builder"), "the tenant's other namespace");
        assert!(!defaults.trusts_controller("alice"));
        let named = AdmissionSettings { trusted_controllers: Some(vec!["ops-bot".to_owned()]), ..defaults };
        assert!(named.trusts_controller("ops-bot"));
        assert!(!named.trusts_controller("system:kube-controller-manager"), "a named list replaces the defaults");
    }
}
