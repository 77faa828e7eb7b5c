//! What Karpenter says about the pods of a workload that waits for nodes, for `why`: which pods wait, Karpenter's
//! events on them (`Nominated`, `FailedScheduling`), the NodeClaims it nominated them to with their conditions, and
//! the sentence saying what holds them and what would unblock them; pure, built from recorded objects
//! (`crate::live::fetch` reads them).
//!
//! The texts are Karpenter's (v1.14, `pkg/controllers/provisioning/scheduling/events.go`,
//! `pkg/controllers/nodeclaim/lifecycle`), recorded in `daemon/tests/fixtures/live/karpenter/`.

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tiergate_karpenter::NODEPOOL_LABEL;
use tiergate_workloads::{TemplateLayout, WorkloadAdapter};

use super::kueue::KueueCondition;

/// The component Karpenter's events name (`source.component`, `reportingComponent`).
pub const KARPENTER_COMPONENT: &str = "karpenter";
/// Karpenter's event on a pod it launched (or found) a node for.
pub const NOMINATED: &str = "Nominated";
/// Karpenter's event on a pod no NodePool can launch a node for (kube-scheduler uses the same reason).
pub const FAILED_SCHEDULING: &str = "FailedScheduling";
/// Most waiting pods whose Events `why` reads (one LIST each); the answer names the most blocked of them.
pub const MAX_PODS_READ: usize = 5;

/// `Nominated` message: `Pod should schedule on: nodeclaim/<name>[, node/<name>]`.
const NOMINATED_PREFIX: &str = "Pod should schedule on: ";
/// `FailedScheduling` message: this, then one reason per NodePool joined by `; `.
const FAILED_PREFIX: &str = "Failed to schedule pod, ";
/// How a NodePool's limit reason ends: `all available instance types exceed limits for nodepool (NodePool=<name>)`
/// or `node limits have been exhausted for nodepool (NodePool=<name>)`.
const LIMIT_POOL_MARK: &str = " for nodepool (NodePool=";
/// NodeClaim condition types (Karpenter `pkg/apis/v1/nodeclaim_status.go`).
const LAUNCHED: &str = "Launched";
const REGISTERED: &str = "Registered";
const INITIALIZED: &str = "Initialized";
/// The reason of `Launched=Unknown` when the cloud provider refused the launch (`lifecycle/launch.go`).
const LAUNCH_FAILED: &str = "LaunchFailed";
/// The reason of a condition no controller has looked at yet, whose message says nothing.
const AWAITING_RECONCILIATION: &str = "AwaitingReconciliation";

/// How `why` finds the pods of the object it answers for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodQuery {
    /// The object is a pod (the adapter's layout is a pod's).
    Itself,
    /// The object's `spec.selector` as a label selector (Job, Deployment, StatefulSet).
    Selector(String),
    /// No selector: the namespace's pods whose controller is the object (by UID).
    ControlledBy(String),
}

/// A NodeClaim (`karpenter.sh/v1`, cluster-scoped) as `why` reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct NodeClaimRead {
    /// Name, the `karpenter.sh/nodepool` label, deletion time.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Karpenter's status.
    #[serde(default)]
    pub status: NodeClaimStatusRead,
}

/// `NodeClaim.status` fields read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatusRead {
    /// The node that registered for it.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Launched, Registered, Initialized, Ready (and others `why` ignores).
    #[serde(default)]
    pub conditions: Vec<KueueCondition>,
}

/// What `why` read about the pods of a workload waiting for nodes (all empty when it read nothing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KarpenterRead {
    /// The workload's pods that wait for a node ([`waiting_pods`]).
    pub pods: Vec<Pod>,
    /// The Events of the first [`MAX_PODS_READ`] of them.
    pub events: Vec<Event>,
    /// The NodeClaims their newest Karpenter events nominate them to.
    pub node_claims: Vec<NodeClaimRead>,
    /// Nominated NodeClaims the API server no longer has.
    pub gone_node_claims: Vec<String>,
}

/// What holds a waiting pod, as Karpenter tells it; the first is the most blocking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum KarpenterState {
    /// The NodeClaim's launch failed (`Launched` with reason `LaunchFailed`, or `Launched=False`).
    LaunchFailed,
    /// The NodePool the pods belong on has reached its `limits`.
    NodePoolLimits,
    /// No NodePool can launch a node for the pods.
    NoNodePool,
    /// The nominated NodeClaim is gone or being deleted.
    NodeClaimGone,
    /// The NodeClaim is not launched yet.
    Launching,
    /// Launched; its node has not joined the cluster yet.
    Registering,
    /// Its node joined and is not initialized (ready) yet.
    Initializing,
}

/// What Karpenter says about the most blocked of the workload's waiting pods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KarpenterFacts {
    /// The pod.
    pub pod: String,
    /// How many of the workload's pods wait for a node.
    pub waiting_pods: usize,
    /// What holds it.
    pub state: KarpenterState,
    /// The NodePool (the one at its limits, or the NodeClaim's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    /// The NodeClaim Karpenter nominated the pod to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
    /// The NodeClaim's node, once one registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The deciding condition as `Type=Status` (empty for an event).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub condition: String,
    /// The deciding condition's or event's reason.
    pub reason: String,
    /// Its message (a `FailedScheduling` message without Karpenter's `Failed to schedule pod, `).
    pub message: String,
}

/// How to find the pods of `object`: itself for a pod, its `spec.selector` where it has one, else the pods it
/// controls. `None` when it has neither selector nor UID.
pub fn build_pod_query(adapter: &WorkloadAdapter, object: &Value) -> Option<PodQuery> {
    if matches!(adapter.templates, TemplateLayout::Pod) {
        return Some(PodQuery::Itself);
    }
    if let Some(selector) = object.pointer("/spec/selector").and_then(build_label_selector) {
        return Some(PodQuery::Selector(selector));
    }
    let uid = object.pointer("/metadata/uid").and_then(Value::as_str).filter(|uid| !uid.is_empty())?;
    Some(PodQuery::ControlledBy(uid.to_owned()))
}

/// A `LabelSelector` (`matchLabels`, `matchExpressions`) as the `labelSelector` query parameter; `None` when it
/// is empty or uses an operator the query syntax lacks.
fn build_label_selector(selector: &Value) -> Option<String> {
    let mut terms: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(key, value)| Some(format!("{key}={}", value.as_str()?)))
        .collect::<Option<_>>()?;
    for expression in selector.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = expression.get("key").and_then(Value::as_str)?;
        let values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match expression.get("operator").and_then(Value::as_str)? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    (!terms.is_empty()).then(|| terms.join(","))
}

/// The pods of `listed` that wait for a node: Pending, not bound (`spec.nodeName` unset), not being deleted, and
/// (for [`PodQuery::ControlledBy`]) controlled by the object; sorted by name.
pub fn waiting_pods(query: &PodQuery, listed: &[Pod]) -> Vec<Pod> {
    let mut pods: Vec<Pod> = listed
        .iter()
        .filter(|pod| match query {
            PodQuery::ControlledBy(uid) => pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.controller == Some(true) && owner.uid == *uid),
            PodQuery::Itself | PodQuery::Selector(_) => true,
        })
        .filter(|pod| {
            let phase = pod.status.as_ref().and_then(|status| status.phase.as_deref());
            let node = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()).filter(|node| !node.is_empty());
            node.is_none() && phase.is_none_or(|phase| phase == "Pending") && pod.metadata.deletion_timestamp.is_none()
        })
        .cloned()
        .collect();
    pods.sort_by(|left, right| left.metadata.name.cmp(&right.metadata.name));
    pods
}

/// The newest event Karpenter wrote on `pod` (`Nominated` or `FailedScheduling`), matched by the pod's UID (by
/// name when either has none).
pub fn newest_karpenter_event<'a>(pod: &Pod, events: &'a [Event]) -> Option<&'a Event> {
    let (name, uid) = (pod.metadata.name.as_deref(), pod.metadata.uid.as_deref());
    events
        .iter()
        .filter(|event| {
            let object = &event.involved_object;
            match (object.uid.as_deref(), uid) {
                (Some(event_uid), Some(uid)) => event_uid == uid,
                _ => object.name.as_deref() == name,
            }
        })
        .filter(|event| {
            event.source.as_ref().and_then(|source| source.component.as_deref()) == Some(KARPENTER_COMPONENT)
                || event.reporting_component.as_deref() == Some(KARPENTER_COMPONENT)
        })
        .filter(|event| matches!(event.reason.as_deref(), Some(NOMINATED | FAILED_SCHEDULING)))
        .max_by_key(|event| {
            let time = event
                .last_timestamp
                .as_ref()
                .map(|time| time.0)
                .or_else(|| event.event_time.as_ref().map(|time| time.0))
                .or_else(|| event.first_timestamp.as_ref().map(|time| time.0))
                .or_else(|| event.metadata.creation_timestamp.as_ref().map(|time| time.0));
            (time, event.metadata.name.clone())
        })
}

/// The NodeClaim a `Nominated` event names.
pub fn nominated_node_claim(event: &Event) -> Option<String> {
    if event.reason.as_deref() != Some(NOMINATED) {
        return None;
    }
    let targets = event.message.as_deref()?.strip_prefix(NOMINATED_PREFIX)?;
    targets.split(", ").find_map(|target| target.strip_prefix("nodeclaim/")).map(str::to_owned)
}

/// The NodeClaims the newest Karpenter events of the first [`MAX_PODS_READ`] waiting `pods` nominate them to,
/// sorted and deduplicated: the ones `why` gets.
pub fn nominated_node_claims(pods: &[Pod], events: &[Event]) -> Vec<String> {
    let mut names: Vec<String> = pods
        .iter()
        .take(MAX_PODS_READ)
        .filter_map(|pod| nominated_node_claim(newest_karpenter_event(pod, events)?))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What Karpenter says about the most blocked of the waiting pods in `read` (the first in [`KarpenterState`]
/// order, then by name); `None` when Karpenter said nothing about them, or only that their node is ready.
/// `tier_pools` are the NodePools tiergate renders for the tier's GPU classes: Karpenter gives one reason per
/// NodePool, and a limit reached on one of them is the one that holds a tier's pod.
pub fn find_karpenter_facts(read: &KarpenterRead, tier_pools: &[String]) -> Option<KarpenterFacts> {
    read.pods
        .iter()
        .take(MAX_PODS_READ)
        .filter_map(|pod| {
            let event = newest_karpenter_event(pod, &read.events)?;
            let mut facts = match nominated_node_claim(event) {
                Some(claim) => build_claim_facts(&claim, read)?,
                None => build_failed_facts(event.message.as_deref().unwrap_or_default(), tier_pools),
            };
            facts.pod = pod.metadata.name.clone().unwrap_or_default();
            facts.waiting_pods = read.pods.len();
            Some(facts)
        })
        .min_by(|left, right| (left.state, &left.pod).cmp(&(right.state, &right.pod)))
}

fn blank(state: KarpenterState) -> KarpenterFacts {
    KarpenterFacts {
        pod: String::new(),
        waiting_pods: 0,
        state,
        node_pool: None,
        node_claim: None,
        node: None,
        condition: String::new(),
        reason: String::new(),
        message: String::new(),
    }
}

/// A `FailedScheduling` message. Karpenter checks a NodePool's limits before whether the pod fits it, so the
/// pools at their limits are the only ones that may fit: where tiergate renders the tier's pools (`tier_pools`),
/// a limit reached on one of them holds the pod, and without one the tier's pools do not fit; else the first pool
/// at its limits holds it. No pool at its limits: no pool fits.
fn build_failed_facts(message: &str, tier_pools: &[String]) -> KarpenterFacts {
    let reasons = message.strip_prefix(FAILED_PREFIX).unwrap_or(message);
    let limit_pool = |part: &str| -> Option<String> {
        let (_, pool) = part.split_once(LIMIT_POOL_MARK)?;
        pool.strip_suffix(')').map(str::to_owned)
    };
    let limits: Vec<(&str, String)> = reasons.split("; ").filter_map(|part| Some((part, limit_pool(part)?))).collect();
    let deciding =
        if tier_pools.is_empty() { limits.first() } else { limits.iter().find(|(_, pool)| tier_pools.contains(pool)) };
    match deciding {
        Some((part, pool)) => KarpenterFacts {
            node_pool: Some(pool.clone()),
            reason: FAILED_SCHEDULING.to_owned(),
            message: (*part).to_owned(),
            ..blank(KarpenterState::NodePoolLimits)
        },
        None => KarpenterFacts {
            reason: FAILED_SCHEDULING.to_owned(),
            message: reasons.to_owned(),
            ..blank(KarpenterState::NoNodePool)
        },
    }
}

/// A nominated NodeClaim: its conditions, in the order Karpenter sets them. `None` when its node is ready (the
/// pod then waits for kube-scheduler, not for Karpenter) or it was not read.
fn build_claim_facts(claim: &str, read: &KarpenterRead) -> Option<KarpenterFacts> {
    let gone = |reason: &str| KarpenterFacts {
        node_claim: Some(claim.to_owned()),
        reason: reason.to_owned(),
        ..blank(KarpenterState::NodeClaimGone)
    };
    if read.gone_node_claims.iter().any(|name| name == claim) {
        return Some(gone("NotFound"));
    }
    let found = read.node_claims.iter().find(|found| found.metadata.name.as_deref() == Some(claim))?;
    if found.metadata.deletion_timestamp.is_some() {
        return Some(gone("Deleting"));
    }
    let condition = |type_: &str| found.status.conditions.iter().find(|condition| condition.type_ == type_);
    let is_true = |type_: &str| condition(type_).is_some_and(|condition| condition.status == "True");
    let launched = condition(LAUNCHED);
    let (state, deciding) =
        if launched.is_some_and(|launched| launched.reason == LAUNCH_FAILED || launched.status == "False") {
            (KarpenterState::LaunchFailed, launched)
        } else if !is_true(LAUNCHED) {
            (KarpenterState::Launching, launched)
        } else if !is_true(REGISTERED) {
            (KarpenterState::Registering, condition(REGISTERED))
        } else if !is_true(INITIALIZED) {
            (KarpenterState::Initializing, condition(INITIALIZED))
        } else {
            return None;
        };
    let type_ = match state {
        KarpenterState::Registering => REGISTERED,
        KarpenterState::Initializing => INITIALIZED,
        _ => LAUNCHED,
    };
    Some(KarpenterFacts {
        node_pool: found.metadata.labels.as_ref().and_then(|labels| labels.get(NODEPOOL_LABEL)).cloned(),
        node_claim: Some(claim.to_owned()),
        node: found.status.node_name.clone().filter(|node| !node.is_empty()),
        condition: format!("{type_}={}", deciding.map_or("Unknown", |condition| condition.status.as_str())),
        reason: deciding.map(|condition| condition.reason.clone()).unwrap_or_default(),
        message: deciding.map(|condition| condition.message.clone()).unwrap_or_default(),
        ..blank(state)
    })
}

/// The clause on what Karpenter says, what it means and what to do, in lower case and ending the sentence: `its
/// pods wait for Karpenter: ...`. `rendered_by_tiergate`: the NodePool is one tiergate renders, whose limit comes
/// from the tiers' quota.
pub fn karpenter_clause(facts: &KarpenterFacts, rendered_by_tiergate: bool) -> String {
    let lead = if facts.waiting_pods == 1 { "its pod waits for Karpenter" } else { "its pods wait for Karpenter" };
    let claim = facts.node_claim.as_deref().unwrap_or("?");
    let pool = facts.node_pool.as_deref().unwrap_or("?");
    let KarpenterFacts { condition, reason, message, .. } = facts;
    // Conditions nobody has reconciled yet say nothing beyond `Type=Status`.
    let said = if message.is_empty() || reason == AWAITING_RECONCILIATION {
        condition.clone()
    } else {
        format!("{condition}: {message}")
    };
    let detail = match facts.state {
        KarpenterState::NodePoolLimits => format!(
            "NodePool {pool} has reached its limits ({message}); a node launches when nodes of the pool are removed \
             or the pool's limits are raised{}.",
            if rendered_by_tiergate {
                " (tiergate renders the limit from the tiers' quota: check `tiergate check --kubeconfig`)"
            } else {
                ""
            }
        ),
        KarpenterState::NoNodePool => format!(
            "no NodePool fits ({message}): a NodePool must match the pods' node selector and tolerations and offer \
             an instance type with the resources they request."
        ),
        KarpenterState::LaunchFailed => format!(
            "NodeClaim {claim} failed to launch: {reason}: {message}; Karpenter retries, and replaces the NodeClaim \
             after 5 minutes without a launch."
        ),
        KarpenterState::NodeClaimGone if reason == "Deleting" => {
            format!("NodeClaim {claim} is being deleted; Karpenter provisions again.")
        }
        KarpenterState::NodeClaimGone => format!(
            "NodeClaim {claim} no longer exists: Karpenter deletes a NodeClaim it cannot launch \
             (InsufficientCapacity) and provisions again."
        ),
        KarpenterState::Launching => format!("NodeClaim {claim} is launching ({said})."),
        KarpenterState::Registering => format!(
            "NodeClaim {claim} launched and its node has not joined the cluster yet ({said}); Karpenter replaces it \
             if the node does not join within 15 minutes."
        ),
        KarpenterState::Initializing => format!(
            "NodeClaim {claim} has node {}, which is not ready yet ({said}).",
            facts.node.as_deref().unwrap_or("?")
        ),
    };
    format!("{lead}: {detail}")
}
