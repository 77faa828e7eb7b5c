//! What cluster-autoscaler answered a Workload's ProvisioningRequest (`autoscaling.x-k8s.io/v1`), for `why`: the
//! request Kueue made for the Workload's latest attempt, the autoscaler's condition that decides its state, and
//! the sentence saying what it means and what to do; pure, built from recorded objects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::kueue::KueueCondition;
use crate::policy::TierPolicySpec;
use crate::provisioning::{BEST_EFFORT_ATOMIC_CLASS, CHECK_CAPACITY_CLASS};

/// ProvisioningRequest condition types (cluster-autoscaler's `autoscaling.x-k8s.io/v1` API).
const ACCEPTED: &str = "Accepted";
const PROVISIONED: &str = "Provisioned";
const FAILED: &str = "Failed";
const BOOKING_EXPIRED: &str = "BookingExpired";
const CAPACITY_REVOKED: &str = "CapacityRevoked";
/// cluster-autoscaler's reason for a request it cannot satisfy (yet).
const CAPACITY_IS_NOT_FOUND: &str = "CapacityIsNotFound";

/// A ProvisioningRequest as `why` reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ProvisioningRequestRead {
    /// Name, owner references (Kueue makes the Workload its controller), creation time.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec fields read.
    #[serde(default)]
    pub spec: ProvisioningRequestSpecRead,
    /// The autoscaler's status.
    #[serde(default)]
    pub status: ProvisioningRequestStatusRead,
}

/// `ProvisioningRequest.spec` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestSpecRead {
    /// e.g. `best-effort-atomic-scale-up.autoscaling.x-k8s.io`.
    #[serde(default)]
    pub provisioning_class_name: String,
}

/// `ProvisioningRequest.status` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ProvisioningRequestStatusRead {
    /// Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked.
    #[serde(default)]
    pub conditions: Vec<KueueCondition>,
}

/// Where a ProvisioningRequest stands, as the autoscaler's conditions say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProvisioningState {
    /// No condition yet: the autoscaler has not picked it up.
    NotAccepted,
    /// Accepted; the autoscaler is working on it and has given no verdict.
    Accepted,
    /// `Provisioned=False, CapacityIsNotFound`: no capacity now (check-capacity), or the pool cannot grow by the
    /// whole request (best-effort-atomic); the autoscaler tries again each scan.
    CapacityNotFound,
    /// `Provisioned=False` for another reason.
    NotProvisioned,
    /// `Provisioned=True`: the nodes exist; Kueue admits the workload.
    Provisioned,
    /// `Failed=True`: the autoscaler gave up; Kueue retries per the tier's `retryStrategy`.
    Failed,
    /// `BookingExpired=True`: the capacity was booked and the booking ran out before the pods came.
    BookingExpired,
    /// `CapacityRevoked=True`: the nodes were taken back.
    CapacityRevoked,
}

/// The ProvisioningRequest of a Workload's admission check, and what the autoscaler said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningFacts {
    /// The request's name (`<workload>-<check>-<attempt>`).
    pub request: String,
    /// Its provisioning class.
    pub class: String,
    /// What its conditions say.
    pub state: ProvisioningState,
    /// The deciding condition's reason (empty when there is none).
    pub reason: String,
    /// The deciding condition's message.
    pub message: String,
}

/// The newest ProvisioningRequest the Workload with `workload_uid` owns (Kueue makes one per attempt), with the
/// state its conditions give.
pub fn find_provisioning_facts(workload_uid: &str, requests: &[ProvisioningRequestRead]) -> Option<ProvisioningFacts> {
    let newest = requests
        .iter()
        .filter(|request| {
            !workload_uid.is_empty()
                && request.metadata.owner_references.iter().flatten().any(|owner| owner.uid == workload_uid)
        })
        .max_by_key(|request| {
            (request.metadata.creation_timestamp.clone().map(|time| time.0), request.metadata.name.clone())
        })?;
    let condition = |type_: &str| newest.status.conditions.iter().find(|condition| condition.type_ == type_);
    let true_condition = |type_: &str| condition(type_).filter(|condition| condition.status == "True");
    let (state, deciding) = if let Some(revoked) = true_condition(CAPACITY_REVOKED) {
        (ProvisioningState::CapacityRevoked, Some(revoked))
    } else if let Some(failed) = true_condition(FAILED) {
        (ProvisioningState::Failed, Some(failed))
    } else if let Some(expired) = true_condition(BOOKING_EXPIRED) {
        (ProvisioningState::BookingExpired, Some(expired))
    } else if let Some(provisioned) = condition(PROVISIONED) {
        let state = match (provisioned.status.as_str(), provisioned.reason.as_str()) {
            ("True", _) => ProvisioningState::Provisioned,
            (_, CAPACITY_IS_NOT_FOUND) => ProvisioningState::CapacityNotFound,
            _ => ProvisioningState::NotProvisioned,
        };
        (state, Some(provisioned))
    } else if let Some(accepted) = true_condition(ACCEPTED) {
        (ProvisioningState::Accepted, Some(accepted))
    } else {
        (ProvisioningState::NotAccepted, None)
    };
    Some(ProvisioningFacts {
        request: newest.metadata.name.clone().unwrap_or_default(),
        class: newest.spec.provisioning_class_name.clone(),
        state,
        reason: deciding.map(|condition| condition.reason.clone()).unwrap_or_default(),
        message: deciding.map(|condition| condition.message.clone()).unwrap_or_default(),
    })
}

/// The sentence for a workload whose quota is reserved in `tier` and which waits on the ProvisioningRequest
/// `facts`: what the autoscaler said, what it means, and what to do.
pub fn provisioning_sentence(facts: &ProvisioningFacts, spec: Option<&TierPolicySpec>, tier: Option<&str>) -> String {
    let in_tier = tier.map(|tier| format!(" in tier {tier}")).unwrap_or_default();
    let field = spec
        .zip(tier)
        .and_then(|(spec, tier)| spec.tiers.iter().position(|candidate| candidate.name == tier))
        .map_or_else(|| "the tier's provisioning".to_owned(), |index| format!("spec.tiers[{index}].provisioning"));
    let ProvisioningFacts { request, class, reason, message, .. } = facts;
    let said = if reason.is_empty() { String::new() } else { format!(" ({reason}: {message})") };
    let head = format!("Quota is reserved{in_tier}; ProvisioningRequest {request} (class {class})");
    match facts.state {
        ProvisioningState::NotAccepted => format!(
            "{head} has no answer from cluster-autoscaler yet: check that cluster-autoscaler runs with \
             --enable-provisioning-requests and knows class {class} (its log names the request)."
        ),
        ProvisioningState::Accepted => format!(
            "{head} is accepted by cluster-autoscaler{said}, which has not provisioned the nodes yet; it is admitted \
             when it does."
        ),
        ProvisioningState::CapacityNotFound if class == CHECK_CAPACITY_CLASS => format!(
            "{head} found no free capacity{said}: {CHECK_CAPACITY_CLASS} only looks for nodes that exist and never \
             grows a pool, so on an autoscaled pool that is empty it waits forever. Set {field}.provisioningClassName \
             to {BEST_EFFORT_ATOMIC_CLASS} (and the GPU class's capacity: Autoscaled), or add nodes."
        ),
        ProvisioningState::CapacityNotFound => format!(
            "{head} cannot be met{said}: cluster-autoscaler cannot grow a node group by the whole request at once \
             (the group's maximum size or the cloud's stock is too small for all its pods), and tries again each \
             scan. Raise the node group's maximum size, or ask for fewer or smaller pods."
        ),
        ProvisioningState::NotProvisioned => {
            format!("{head} is not provisioned yet{said}; it is admitted when cluster-autoscaler provisions the nodes.")
        }
        ProvisioningState::Provisioned => {
            format!("{head} is provisioned{said}: the nodes exist and Kueue admits the workload next.")
        }
        ProvisioningState::Failed => format!(
            "{head} failed{said}: Kueue retries it as {field}.retryStrategy says, and deactivates the workload after \
             backoffLimitCount retries (then fix the cause and set spec.active: true on the Workload)."
        ),
        ProvisioningState::BookingExpired => format!(
            "{head} had its capacity booked, and the booking expired before the pods came{said}: Kueue retries it as \
             {field}.retryStrategy says."
        ),
        ProvisioningState::CapacityRevoked => format!(
            "{head} lost its nodes{said}: cluster-autoscaler took them back, so Kueue deactivates the workload; \
             resubmit it."
        ),
    }
}
