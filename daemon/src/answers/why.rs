//! The answer to `kubectl tiergate why KIND/NAME -n NS`: the namespace's tier, tiergate's decision and its
//! reasons, the annotations tiergate wrote, the Kueue Workload's state, and one sentence naming what holds the
//! workload and what would unblock it; pure, built from recorded objects.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tiergate_workloads::{ADAPTERS, MAX_EXEC_TIME_LABEL, QUEUE_NAME_LABEL, Queueing, WorkloadAdapter};

use super::karpenter::{KarpenterFacts, KarpenterRead, find_karpenter_facts, karpenter_clause};
use super::kueue::{
    ADMITTED, AdmissionCheckState, EVICTED, FINISHED, KueueCondition, KueueLocalQueue, KueueWorkload, PODS_READY,
    QUOTA_RESERVED,
};
use super::provisioning::{ProvisioningFacts, ProvisioningRequestRead, find_provisioning_facts, provisioning_sentence};
use super::status::{TenantStatus, build_tenant_rows, usage_text};
use crate::admission::{DECISION_ANNOTATION, Decision, TIER_ANNOTATION, Verdict, build_static_snapshot};
use crate::plan::names::{cluster_queue_name, node_pool_name};
use crate::policy::TierPolicy;
use crate::policy::budget::{describe_window_release, format_unit_hours, spent_budgets};
use crate::reconcile::drain::DRAINING_TAINT;
use crate::view::{ClusterView, NamespaceView, Snapshot};

/// Kueue's condition reason for a workload that can never be admitted as it is (e.g. its LocalQueue is missing).
const INADMISSIBLE_REASON: &str = "Inadmissible";
/// Admission check states (Kueue `CheckState`).
const CHECK_READY: &str = "Ready";
const CHECK_REJECTED: &str = "Rejected";
/// Kueue v0.19.2's message on a provisioning check whose controller is not running (`provisioning.CheckInactiveMessage`).
const INACTIVE_CHECK_MESSAGE: &str = "the check is not active";

/// The `KIND/NAME` argument of `why` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WhyError {
    /// Not `KIND/NAME`.
    #[error("failed to read {target:?} as KIND/NAME; write it like job/train")]
    ParseTarget {
        /// The argument.
        target: String,
    },
    /// A kind tiergate does not handle.
    #[error("failed to find kind {kind:?} among the kinds tiergate handles; use one of: {kinds}")]
    UnknownKind {
        /// The kind given.
        kind: String,
        /// The kinds of the adapter table, comma-separated.
        kinds: String,
    },
}

impl WhyError {
    /// Fixed reason for exit messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ParseTarget { .. } => "parse_target",
            Self::UnknownKind { .. } => "unknown_kind",
        }
    }
}

/// Reads `KIND/NAME` (kind in any case, singular or plural, optionally `.group`) against the adapter table, so
/// every kind tiergate handles is one `why` answers for.
pub fn parse_target(target: &str) -> Result<(&'static WorkloadAdapter, String), WhyError> {
    let (kind, name) = target
        .split_once('/')
        .filter(|(kind, name)| !kind.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| WhyError::ParseTarget { target: target.to_owned() })?;
    let (kind_name, group) = match kind.split_once('.') {
        Some((kind_name, group)) => (kind_name, Some(group)),
        None => (kind, None),
    };
    let kind_name = kind_name.to_lowercase();
    ADAPTERS
        .iter()
        .find(|adapter| {
            let lower = adapter.kind.to_lowercase();
            (kind_name == lower || kind_name == format!("{lower}s")) && group.is_none_or(|group| group == adapter.group)
        })
        .map(|adapter| (adapter, name.to_owned()))
        .ok_or_else(|| WhyError::UnknownKind {
            kind: kind.to_owned(),
            kinds: ADAPTERS.iter().map(|adapter| adapter.kind).collect::<Vec<_>>().join(", "),
        })
}

/// The snapshot `why` decides from: the live policy, the workload's namespace with its live labels, and the
/// LocalQueues that really exist there (not the ones the policy implies), so a missing queue decides as the
/// webhook would decide it now.
pub fn build_live_snapshot(
    policy: TierPolicy,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    local_queues: &[String],
) -> Snapshot {
    let view = ClusterView {
        namespaces: vec![Arc::new(NamespaceView {
            name: namespace.to_owned(),
            labels: labels.into(),
            ..NamespaceView::default()
        })],
        ..ClusterView::default()
    };
    let mut snapshot = build_static_snapshot(policy, view, None);
    snapshot.local_queues =
        local_queues.iter().map(|queue| (namespace.to_owned(), queue.clone())).collect::<BTreeSet<_>>();
    snapshot
}

/// What `why` is built from: the live object and the objects around it, as listed by `crate::live`.
#[derive(Debug)]
pub struct WhyInputs<'a> {
    /// The workload kind's adapter row.
    pub adapter: &'a WorkloadAdapter,
    /// The live object (JSON as the API server returned it).
    pub object: &'a Value,
    /// The TierPolicy, or `None` when it does not exist.
    pub policy: Option<&'a TierPolicy>,
    /// Name of the TierPolicy asked for (named in the answer when it is missing).
    pub policy_name: &'a str,
    /// Labels of the object's namespace.
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// Names of the LocalQueues in the namespace.
    pub local_queues: &'a [String],
    /// tiergate's decision on the object, re-run on the live snapshot (the `explain` path).
    pub decision: Option<&'a Decision>,
    /// Kueue Workloads of the namespace.
    pub workloads: &'a [KueueWorkload],
    /// ProvisioningRequests of the namespace (empty when none is served or none was needed).
    pub provisioning_requests: &'a [ProvisioningRequestRead],
    /// The policy's LocalQueues in every namespace when the tier shares its quota among its tenants (empty when
    /// it does not, or they could not be listed): who a pending workload waits behind.
    pub tier_local_queues: &'a [KueueLocalQueue],
    /// The pods waiting for a node and what Karpenter said about them, read when Kueue admitted the workload or
    /// does not queue its kind ([`waits_for_nodes`]); empty otherwise, or without Karpenter.
    pub karpenter: &'a KarpenterRead,
}

/// The answer to `why`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhyAnswer {
    /// Workload kind.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// The namespace's tier.
    pub tier: TierFacts,
    /// What tiergate wrote on the object at admission.
    pub annotations: TiergateAnnotations,
    /// tiergate's decision re-run on the live object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionSummary>,
    /// The Kueue Workload, when one exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadFacts>,
    /// What holds the workload.
    pub hold: Hold,
    /// Where its tenant stands in the tier's order by past usage, when it waits for quota in a tier that shares
    /// among its tenants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_order: Option<TenantOrder>,
    /// What Karpenter says about its pods that wait for a node, when it says something.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub karpenter: Option<KarpenterFacts>,
    /// One plain sentence: what holds the workload and what would unblock it.
    pub summary: String,
}

/// A pending workload's tenant in its tier's order: Kueue admits first the pending workload of the tenant with the
/// least decayed past usage per weight (`UsageBasedAdmissionFairSharing`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantOrder {
    /// The workload's own tenant (its namespace's LocalQueue), when listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own: Option<TenantStatus>,
    /// The tier's other tenants with workloads pending and less usage per weight: admitted before it.
    pub ahead: Vec<TenantStatus>,
}

/// The namespace's tier.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TierFacts {
    /// The policy's tier label.
    pub label: String,
    /// The label's value on the namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_value: Option<String>,
    /// The tier it names, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The tier's LocalQueue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_queue: Option<String>,
    /// Whether that LocalQueue exists in the namespace.
    pub local_queue_exists: bool,
    /// The LocalQueue the object names (`kueue.x-k8s.io/queue-name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_label: Option<String>,
}

/// The `tiergate.io/*` annotations on the object.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TiergateAnnotations {
    /// `tiergate.io/tier`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// `tiergate.io/decision`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
}

/// A decision as `why` reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionSummary {
    /// `mutate`, `skip (REASON)`, `deny (REASON)`, ...
    pub outcome: String,
    /// Patch operations tiergate would still apply to the live object (0: it carries every mutation).
    pub pending_patch_operations: usize,
    /// Each reason, as `tiergate explain` prints them.
    pub reasons: Vec<String>,
    /// Warnings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The Kueue Workload's state.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadFacts {
    /// Workload name.
    pub name: String,
    /// Its LocalQueue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    /// The ClusterQueue holding its quota reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// QuotaReserved, Admitted, Evicted, PodsReady, Finished, in that order when present.
    pub conditions: Vec<KueueCondition>,
    /// Kueue's own message while the workload waits for quota (`QuotaReserved=False`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_message: Option<String>,
    /// Per pod set, the flavor chosen for each resource.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub flavors: BTreeMap<String, BTreeMap<String, String>>,
    /// Per pod set, what Kueue charged for each resource (`resourceUsage`; DRA devices under their mapped
    /// resource).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub charged: BTreeMap<String, BTreeMap<String, String>>,
    /// Admission checks (e.g. the tier's ProvisioningRequest check).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<AdmissionCheckState>,
    /// The newest ProvisioningRequest Kueue made for the workload, and what cluster-autoscaler answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provisioning_request: Option<ProvisioningFacts>,
    /// Per pod set placed by topology: each domain Kueue assigned, as `level=value,...` and its pod count.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, Vec<(String, u64)>>,
}

/// What holds the workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Hold {
    /// The TierPolicy does not exist.
    NoPolicy {
        /// Its name.
        policy: String,
    },
    /// The namespace is excluded by the policy.
    Excluded,
    /// The namespace has no tier label.
    NoTierLabel {
        /// The label.
        label: String,
        /// The tiers it could name.
        tiers: Vec<String>,
    },
    /// The tier label names no tier.
    UnknownTier {
        /// The label.
        label: String,
        /// Its value.
        value: String,
        /// The tiers it could name.
        tiers: Vec<String>,
    },
    /// The tier's LocalQueue is missing.
    NoLocalQueue {
        /// Tier.
        tier: String,
        /// LocalQueue name.
        queue: String,
    },
    /// Kueue admitted the workload.
    Admitted {
        /// ClusterQueue.
        cluster_queue: String,
        /// Flavors chosen, e.g. `l4`.
        flavors: Vec<String>,
    },
    /// Kueue admitted the workload and its pods wait for Karpenter to launch their nodes (the answer's
    /// `karpenter` says why).
    WaitingForKarpenter {
        /// ClusterQueue.
        cluster_queue: String,
        /// Flavors chosen, e.g. `l4`.
        flavors: Vec<String>,
    },
    /// The workload finished.
    Finished {
        /// Kueue's message.
        message: String,
    },
    /// Kueue evicted the workload.
    Evicted {
        /// Kueue's reason, e.g. `Preempted`.
        reason: String,
        /// Kueue's message.
        message: String,
    },
    /// Quota is reserved; an admission check is not Ready.
    WaitingForCheck {
        /// Check name.
        check: String,
        /// `Pending`, `Retry` or `Rejected`.
        check_state: String,
        /// The check's message.
        message: String,
        /// The check's ProvisioningRequest and the autoscaler's answer, when it is a provisioning check.
        provisioning: Option<ProvisioningFacts>,
    },
    /// Quota is reserved and no admission check holds it; Kueue has not marked it Admitted yet.
    QuotaReserved {
        /// ClusterQueue.
        cluster_queue: String,
    },
    /// The tier's budget for the period (or its rolling window) is spent: its ClusterQueue is held
    /// (`stopPolicy: Hold`) and admits nothing new until the period turns (or enough use leaves the window) or the
    /// budget is raised.
    BudgetSpent {
        /// The tier.
        tier: String,
        /// Its ClusterQueue.
        cluster_queue: String,
        /// The resource whose limit is used up.
        resource: String,
        /// Used this period (or in the window), hours of one unit (GPU-hours).
        used: String,
        /// The limit per period (or window), likewise.
        limit: String,
        /// When the budget has room again with no further use (RFC 3339): the period's turn, or when enough use
        /// leaves the window.
        resets_at: String,
        /// The budget's rolling window (`720h`), when it has one.
        window: Option<String>,
        /// The limit's field in the TierPolicy.
        field: String,
    },
    /// Waiting for quota in the ClusterQueue.
    PendingQuota {
        /// ClusterQueue (from the tier), when known.
        cluster_queue: Option<String>,
        /// Kueue's pending message.
        message: String,
    },
    /// Waiting for one domain of the topology level its pods require to have room for them all.
    PendingTopology {
        /// ClusterQueue (from the tier), when known.
        cluster_queue: Option<String>,
        /// Kueue's pending message (names the Topology and how many pods fit).
        message: String,
    },
    /// Kueue finds the workload inadmissible as it is.
    Inadmissible {
        /// Kueue's message.
        message: String,
    },
    /// tiergate does not queue this kind and no Workload owns it.
    NotQueued,
    /// Kueue has not created a Workload for it.
    NoWorkload {
        /// The queue it should be in.
        queue: Option<String>,
    },
}

/// Builds the answer to `why` from recorded objects.
pub fn build_why_answer(inputs: &WhyInputs<'_>) -> WhyAnswer {
    let text = |pointer: &str| inputs.object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    let (name, namespace) = (text("/metadata/name"), text("/metadata/namespace"));
    let annotation =
        |key: &str| inputs.object.pointer("/metadata/annotations").and_then(|map| map.get(key)).and_then(Value::as_str);
    let annotations = TiergateAnnotations {
        tier: annotation(TIER_ANNOTATION).map(str::to_owned),
        decision: annotation(DECISION_ANNOTATION).map(str::to_owned),
    };
    let tier = build_tier_facts(inputs);
    let workload = find_workload(inputs.object, inputs.workloads)
        .map(|workload| build_workload_facts(workload, inputs.provisioning_requests));
    let mut hold = build_hold(inputs, &namespace, &tier, workload.as_ref());
    let karpenter = match &hold {
        Hold::Admitted { .. } | Hold::NotQueued => {
            find_karpenter_facts(inputs.karpenter, &tier_node_pools(inputs, tier.tier.as_deref()))
        }
        _ => None,
    };
    if let (Hold::Admitted { cluster_queue, flavors }, Some(_)) = (&hold, &karpenter) {
        hold = Hold::WaitingForKarpenter { cluster_queue: cluster_queue.clone(), flavors: flavors.clone() };
    }
    let mut summary = build_summary(&hold, inputs, &namespace, &tier, karpenter.as_ref());
    let tenant_order = build_tenant_order(inputs, &hold, &namespace, tier.tier.as_deref());
    if let (Some(order), Some(tier_name)) = (&tenant_order, tier.tier.as_deref()) {
        summary = format!("{summary} {}", tenant_order_sentence(order, tier_name, &namespace));
    }
    if let (Some(policy), Some(facts)) = (inputs.policy, workload.as_ref()) {
        let admitted: Vec<String> = match &hold {
            Hold::Admitted { flavors, .. } | Hold::WaitingForKarpenter { flavors, .. } => flavors.clone(),
            _ => Vec::new(),
        };
        let note = super::sharing::sharing_note(
            &policy.spec,
            tier.tier.as_deref(),
            &facts.conditions,
            &admitted,
            facts.pending_message.as_deref(),
        );
        if let Some(note) = note {
            summary = format!("{summary} {note}");
        }
        if let Some(note) = facts.pending_message.as_deref().and_then(draining_note) {
            summary = format!("{summary} {note}");
        }
    }
    WhyAnswer {
        kind: inputs.adapter.kind.to_owned(),
        name,
        namespace,
        tier,
        annotations,
        decision: inputs.decision.map(summarize_decision),
        workload,
        hold,
        tenant_order,
        karpenter,
        summary,
    }
}

/// Whether `why` reads the object's pods for Karpenter: Kueue admitted its Workload and it has not finished, or
/// tiergate does not queue the kind and no Workload owns it (nothing in Kueue holds it, so its pods may wait for
/// nodes).
pub fn waits_for_nodes(adapter: &WorkloadAdapter, object: &Value, workloads: &[KueueWorkload]) -> bool {
    match find_workload(object, workloads) {
        Some(workload) => workload.is_true(ADMITTED) && !workload.is_true(FINISHED),
        None => adapter.queueing == Queueing::NotQueued,
    }
}

/// The NodePools tiergate renders for the GPU classes `tier` may land on (its class and fallbacks, those with a
/// `karpenter` template).
fn tier_node_pools(inputs: &WhyInputs<'_>, tier: Option<&str>) -> Vec<String> {
    let Some((spec, tier)) = inputs.policy.map(|policy| &policy.spec).zip(tier) else { return Vec::new() };
    let Some(tier) = spec.tier(tier) else { return Vec::new() };
    std::iter::once(&tier.gpu_class)
        .chain(&tier.fallback_gpu_classes)
        .filter(|class| spec.gpu_class(class).is_some_and(|class| class.karpenter.is_some()))
        .map(|class| node_pool_name(class))
        .collect()
}

/// Whether the NodePool Karpenter names is one tiergate renders (a GPU class's with a `karpenter` template).
fn rendered_by_tiergate(inputs: &WhyInputs<'_>, facts: &KarpenterFacts) -> bool {
    let (Some(policy), Some(pool)) = (inputs.policy, facts.node_pool.as_deref()) else { return false };
    policy.spec.gpu_classes.iter().any(|class| class.karpenter.is_some() && node_pool_name(&class.name) == pool)
}

/// The tier whose ClusterQueue is `cluster_queue` (else the namespace's tier).
fn tier_of_queue(inputs: &WhyInputs<'_>, tier: &TierFacts, cluster_queue: &str) -> String {
    inputs
        .policy
        .and_then(|policy| policy.spec.tiers.iter().find(|tier| cluster_queue_name(&tier.name) == cluster_queue))
        .map(|tier| tier.name.clone())
        .or_else(|| tier.tier.clone())
        .unwrap_or_else(|| "?".to_owned())
}

/// Where the workload's tenant stands, when it waits for quota in a tier sharing among its tenants and the tier's
/// LocalQueues were listed.
fn build_tenant_order(inputs: &WhyInputs<'_>, hold: &Hold, namespace: &str, tier: Option<&str>) -> Option<TenantOrder> {
    let Hold::PendingQuota { cluster_queue, .. } = hold else { return None };
    let spec = &inputs.policy?.spec;
    let tier = spec.tier(tier?).filter(|tier| tier.tenant_fair_sharing)?;
    if inputs.tier_local_queues.is_empty() {
        return None;
    }
    let queue = cluster_queue.clone().unwrap_or_else(|| cluster_queue_name(&tier.name));
    let rows = build_tenant_rows(spec, tier, &queue, inputs.tier_local_queues);
    let usage = |row: &TenantStatus| row.usage_per_weight.unwrap_or(0.0);
    let own = rows.iter().find(|row| row.namespace == namespace).cloned();
    let own_usage = own.as_ref().map_or(0.0, usage);
    let mut ahead: Vec<TenantStatus> = rows
        .into_iter()
        .filter(|row| row.namespace != namespace && row.pending_workloads > 0 && usage(row) < own_usage)
        .collect();
    ahead.sort_by(|left, right| usage(left).total_cmp(&usage(right)));
    Some(TenantOrder { own, ahead })
}

/// The sentence on the tenant order: who is admitted first, and by how much less usage.
fn tenant_order_sentence(order: &TenantOrder, tier: &str, namespace: &str) -> String {
    let usage = |row: &TenantStatus| row.usage_per_weight.unwrap_or(0.0);
    let own = order.own.as_ref().map_or(0.0, usage);
    let weight = order.own.as_ref().map_or_else(|| "1".to_owned(), |own| own.weight.clone());
    let head = format!(
        "Tier {tier} shares its quota by past usage: {namespace} has used {} per weight (weight {weight})",
        usage_text(own)
    );
    if order.ahead.is_empty() {
        return format!("{head}, and no tenant with workloads pending has used less, so its workloads are next.");
    }
    let ahead: Vec<String> = order
        .ahead
        .iter()
        .map(|row| format!("{} ({}, {} pending)", row.namespace, usage_text(usage(row)), row.pending_workloads))
        .collect();
    format!(
        "{head}; {} tenant(s) with workloads pending have used less and are admitted first: {}.",
        ahead.len(),
        ahead.join(", ")
    )
}

fn build_tier_facts(inputs: &WhyInputs<'_>) -> TierFacts {
    let queue_label = inputs
        .object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(QUEUE_NAME_LABEL))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(policy) = inputs.policy else {
        return TierFacts { queue_label, ..TierFacts::default() };
    };
    let label = policy.spec.tier_label.clone();
    let tier = policy.spec.tier_of(inputs.namespace_labels);
    let local_queue = tier.map(|tier| tier.local_queue());
    let local_queue_exists =
        local_queue.as_ref().is_some_and(|queue| inputs.local_queues.iter().any(|name| name == queue));
    TierFacts {
        label_value: inputs.namespace_labels.get(&label).cloned(),
        label,
        tier: tier.map(|tier| tier.name.clone()),
        local_queue,
        local_queue_exists,
        queue_label,
    }
}

/// The Workload of the object: owned by it (or carrying its UID as job-uid), else, for a pod, owned by the
/// pod's controller (a Job's pods are accounted in the Job's Workload).
fn find_workload<'a>(object: &Value, workloads: &'a [KueueWorkload]) -> Option<&'a KueueWorkload> {
    let uid = object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    let controller_uid = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|owner| owner.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|owner| owner.get("uid"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut candidates: Vec<&KueueWorkload> = workloads.iter().filter(|workload| workload.belongs_to(uid)).collect();
    if candidates.is_empty() {
        candidates = workloads.iter().filter(|workload| workload.belongs_to(controller_uid)).collect();
    }
    // A re-created Workload replaces the finished one; prefer one that is still active.
    candidates.sort_by_key(|workload| (workload.is_true(FINISHED), workload.metadata.name.clone()));
    candidates.into_iter().next()
}

fn build_workload_facts(workload: &KueueWorkload, provisioning_requests: &[ProvisioningRequestRead]) -> WorkloadFacts {
    let order = [QUOTA_RESERVED, ADMITTED, EVICTED, PODS_READY, FINISHED];
    let mut conditions = workload.status.conditions.clone();
    conditions.sort_by_key(|condition| order.iter().position(|type_| *type_ == condition.type_).unwrap_or(order.len()));
    let admission = workload.status.admission.as_ref();
    WorkloadFacts {
        name: workload.metadata.name.clone().unwrap_or_default(),
        queue_name: workload.spec.queue_name.clone(),
        cluster_queue: admission.map(|admission| admission.cluster_queue.clone()).filter(|name| !name.is_empty()),
        pending_message: workload
            .condition(QUOTA_RESERVED)
            .filter(|condition| condition.status == "False" && !condition.message.is_empty())
            .map(|condition| condition.message.clone()),
        conditions,
        flavors: admission
            .map(|admission| {
                admission
                    .pod_set_assignments
                    .iter()
                    .map(|assignment| (assignment.name.clone(), assignment.flavors.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        charged: admission
            .map(|admission| {
                admission
                    .pod_set_assignments
                    .iter()
                    .map(|assignment| {
                        let usage = assignment
                            .resource_usage
                            .iter()
                            .map(|(resource, quantity)| {
                                let quantity = quantity.as_str().map_or_else(|| quantity.to_string(), str::to_owned);
                                (resource.clone(), quantity)
                            })
                            .collect();
                        (assignment.name.clone(), usage)
                    })
                    .collect()
            })
            .unwrap_or_default(),
        admission_checks: workload.status.admission_checks.clone(),
        provisioning_request: find_provisioning_facts(
            workload.metadata.uid.as_deref().unwrap_or_default(),
            provisioning_requests,
        ),
        topology: admission
            .map(|admission| {
                admission
                    .pod_set_assignments
                    .iter()
                    .filter_map(|assignment| {
                        let (levels, domains) =
                            tiergate_kueue::decode_topology_assignment(assignment.topology_assignment.as_ref()?);
                        let domains = domains
                            .into_iter()
                            .map(|domain| {
                                let at: Vec<String> = levels
                                    .iter()
                                    .zip(&domain.values)
                                    .map(|(level, value)| format!("{level}={value}"))
                                    .collect();
                                (at.join(","), domain.pods)
                            })
                            .collect();
                        Some((assignment.name.clone(), domains))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn condition<'a>(workload: &'a WorkloadFacts, type_: &str) -> Option<&'a KueueCondition> {
    workload.conditions.iter().find(|condition| condition.type_ == type_)
}

fn is_true(workload: &WorkloadFacts, type_: &str) -> bool {
    condition(workload, type_).is_some_and(|condition| condition.status == "True")
}

fn build_hold(inputs: &WhyInputs<'_>, namespace: &str, tier: &TierFacts, workload: Option<&WorkloadFacts>) -> Hold {
    if let Some(workload) = workload {
        if let Some(finished) = condition(workload, FINISHED).filter(|condition| condition.status == "True") {
            return Hold::Finished { message: finished.message.clone() };
        }
        if is_true(workload, ADMITTED) {
            let mut flavors: Vec<String> = workload.flavors.values().flat_map(|map| map.values().cloned()).collect();
            flavors.sort();
            flavors.dedup();
            return Hold::Admitted { cluster_queue: workload.cluster_queue.clone().unwrap_or_default(), flavors };
        }
        if let Some(evicted) = condition(workload, EVICTED).filter(|condition| condition.status == "True") {
            return Hold::Evicted { reason: evicted.reason.clone(), message: evicted.message.clone() };
        }
        if is_true(workload, QUOTA_RESERVED) {
            let blocking = workload.admission_checks.iter().find(|check| check.state != CHECK_READY);
            if let Some(check) = blocking {
                // Kueue names each request `<workload>-<check>-<attempt>`.
                let provisioning =
                    workload.provisioning_request.clone().filter(|facts| facts.request.contains(check.name.as_str()));
                return Hold::WaitingForCheck {
                    check: check.name.clone(),
                    check_state: check.state.clone(),
                    message: check.message.clone(),
                    provisioning,
                };
            }
            return Hold::QuotaReserved { cluster_queue: workload.cluster_queue.clone().unwrap_or_default() };
        }
    }
    // Pending or never queued: a missing tier explains everything Kueue says after it.
    let Some(policy) = inputs.policy else { return Hold::NoPolicy { policy: inputs.policy_name.to_owned() } };
    if policy.spec.is_excluded(namespace, None) {
        return Hold::Excluded;
    }
    let tiers: Vec<String> = policy.spec.tiers.iter().map(|tier| tier.name.clone()).collect();
    match (&tier.label_value, &tier.tier, &tier.local_queue) {
        (None, _, _) => return Hold::NoTierLabel { label: tier.label.clone(), tiers },
        (Some(value), None, _) => return Hold::UnknownTier { label: tier.label.clone(), value: value.clone(), tiers },
        (Some(_), Some(name), Some(queue)) if !tier.local_queue_exists => {
            return Hold::NoLocalQueue { tier: name.clone(), queue: queue.clone() };
        }
        _ => {}
    }
    if let (Some(_), Some(spent)) = (workload, spent_budget_of(policy, tier.tier.as_deref())) {
        return spent;
    }
    if let Some(workload) = workload {
        let reserved = condition(workload, QUOTA_RESERVED);
        let message = reserved.map(|condition| condition.message.clone()).unwrap_or_default();
        if reserved.is_some_and(|condition| condition.reason == INADMISSIBLE_REASON) {
            return Hold::Inadmissible { message };
        }
        let cluster_queue = tier.tier.as_deref().map(cluster_queue_name);
        // Kueue v0.19.2's TAS messages: `topology "T" allows to fit only N out of M pod(s)` or `... doesn't allow
        // to fit any of M pod(s)`.
        if message.contains("topology \"") && message.contains("fit") {
            return Hold::PendingTopology { cluster_queue, message };
        }
        return Hold::PendingQuota { cluster_queue, message };
    }
    match inputs.adapter.queueing {
        Queueing::NotQueued => Hold::NotQueued,
        Queueing::SuspendedWithQueueLabel { .. } | Queueing::PodGroupWithQueueLabel { .. } => {
            Hold::NoWorkload { queue: tier.queue_label.clone().or_else(|| tier.local_queue.clone()) }
        }
    }
}

/// [`Hold::BudgetSpent`] when `tier`'s budget is spent in the period the policy's `status.usage` describes.
fn spent_budget_of(policy: &TierPolicy, tier: Option<&str>) -> Option<Hold> {
    let tier = tier?;
    let usage = policy.status.as_ref().and_then(|status| status.usage.as_ref());
    let spent = spent_budgets(&policy.spec, usage).into_iter().find(|budget| budget.tier == tier)?;
    let index = policy.spec.tiers.iter().position(|candidate| candidate.name == tier)?;
    Some(Hold::BudgetSpent {
        cluster_queue: cluster_queue_name(tier),
        field: format!("spec.tiers[{index}].budget.limits[{:?}]", spent.resource),
        tier: spent.tier,
        resource: spent.resource,
        used: format_unit_hours(spent.used),
        limit: format_unit_hours(spent.limit),
        resets_at: spent.resets_at,
        window: spent.window,
    })
}

/// A sentence for Kueue's pending `message` when it names a flavor tiergate is draining after a policy edit
/// (Kueue: `untolerated taint {tiergate.io/draining true NoSchedule <nil>} in flavor <name>`).
fn draining_note(message: &str) -> Option<String> {
    let (_, after) = message.split_once(&format!("untolerated taint {{{DRAINING_TAINT} "))?;
    let (_, flavor) = after.split_once("} in flavor ")?;
    let flavor = flavor.split([',', ';', ' ']).next().filter(|flavor| !flavor.is_empty())?;
    Some(format!(
        "Flavor {flavor} is draining after a policy edit (the TierPolicy's status.flavorMigrations): Kueue admits \
         nothing new on it, and this workload goes to the tier's new flavor as quota frees there."
    ))
}

fn build_summary(
    hold: &Hold,
    inputs: &WhyInputs<'_>,
    namespace: &str,
    tier: &TierFacts,
    karpenter: Option<&KarpenterFacts>,
) -> String {
    let tier_name = |cluster_queue: &str| tier_of_queue(inputs, tier, cluster_queue);
    let karpenter_clause =
        karpenter.map(|facts| karpenter_clause(facts, rendered_by_tiergate(inputs, facts))).unwrap_or_default();
    let in_tier = tier.tier.as_deref().map(|name| format!(" in tier {name}")).unwrap_or_default();
    let kind = inputs.adapter.kind;
    match hold {
        Hold::NoPolicy { policy } => format!(
            "Not managed: TierPolicy {policy} does not exist, so no namespace has a tier; apply the policy (or pass \
             --policy-name)."
        ),
        Hold::Excluded => format!(
            "Not managed: namespace {namespace} is excluded by the TierPolicy, so tiergate gives it no tier and no \
             LocalQueue; run tiered workloads in a tenant namespace."
        ),
        Hold::NoTierLabel { label, tiers } => format!(
            "Not queued: namespace {namespace} has no {label} label, so it has no tier and no LocalQueue; a platform \
             engineer must label it with one of the tiers ({}).",
            tiers.join(", ")
        ),
        Hold::UnknownTier { label, value, tiers } => format!(
            "Not queued: namespace {namespace} has {label}={value}, which names no tier, so it has no LocalQueue; a \
             platform engineer must set the label to one of the tiers ({}).",
            tiers.join(", ")
        ),
        Hold::NoLocalQueue { tier, queue } => format!(
            "Not queued: LocalQueue {queue} of tier {tier} does not exist in namespace {namespace} yet; the tiergate \
             daemon creates it, so check its last error with `kubectl tiergate status`."
        ),
        Hold::Admitted { cluster_queue, flavors } => format!(
            "Admitted by Kueue in ClusterQueue {cluster_queue} (tier {}) on flavor {}: nothing is holding it.",
            tier_name(cluster_queue),
            if flavors.is_empty() { "-".to_owned() } else { flavors.join(", ") }
        ),
        Hold::WaitingForKarpenter { cluster_queue, .. } => {
            format!("Admitted in tier {}; {karpenter_clause}", tier_name(cluster_queue))
        }
        Hold::QuotaReserved { cluster_queue } => format!(
            "Quota is reserved in ClusterQueue {cluster_queue} (tier {}) and no admission check holds it: Kueue \
             admits it next, nothing else is needed.",
            tier_name(cluster_queue)
        ),
        Hold::Finished { message } => format!("Finished ({message}): nothing is holding it."),
        Hold::Evicted { reason, message } => {
            let next = match reason.as_str() {
                // Kueue's deactivation (`Deactivated` in v1beta2) for running past `maximumExecutionTimeSeconds`.
                "Deactivated" | "InactiveWorkload" if message.contains("maximum execution time") => format!(
                    "it ran for its whole run-time limit (its {MAX_EXEC_TIME_LABEL} label, held to its tier's \
                     maxRunTime) and Kueue does not queue it again: re-create it to run it again (asking for no more \
                     than the tier's ceiling), or set spec.active back to true on the Workload for one more run of \
                     the same length"
                ),
                "Deactivated" | "InactiveWorkload" => {
                    "set spec.active back to true on the Workload to queue it again".to_owned()
                }
                "PodsReadyTimeout" => {
                    "Kueue requeues it; its pods did not become ready in time, so check why they cannot start"
                        .to_owned()
                }
                _ => format!("Kueue requeues it and admits it again when there is quota{in_tier}"),
            };
            format!("Evicted by Kueue ({reason}: {message}); {next}.")
        }
        Hold::WaitingForCheck { check, check_state, message, .. } if check_state == CHECK_REJECTED => format!(
            "Quota is reserved{in_tier}, but admission check {check} rejected it ({message}); it is not admitted \
             until the check passes, so fix what the check names and resubmit."
        ),
        Hold::WaitingForCheck { provisioning: Some(facts), .. } => {
            provisioning_sentence(facts, inputs.policy.map(|policy| &policy.spec), tier.tier.as_deref())
        }
        Hold::WaitingForCheck { check, message, .. } if message == INACTIVE_CHECK_MESSAGE => format!(
            "Quota is reserved{in_tier}, but admission check {check} is not active ({message}): Kueue's \
             ProvisioningRequest controller starts only when cluster-autoscaler's ProvisioningRequest CRD \
             (autoscaling.x-k8s.io/v1) exists as the Kueue manager starts; install the CRD and restart Kueue \
             (docs/guides/cluster-autoscaler.md, Autoscaled nodepools)."
        ),
        Hold::WaitingForCheck { check, check_state, message, .. } => format!(
            "Quota is reserved{in_tier}, but the ProvisioningRequest of admission check {check} is not provisioned \
             ({check_state}: {message}); it is admitted when the cluster autoscaler provisions the nodes."
        ),
        Hold::BudgetSpent { tier, cluster_queue, resource, used, limit, resets_at, field, window } => {
            let (per, spent, until) = match window {
                Some(window) => (
                    format!("in any {window}"),
                    format!("{used} used in the last {window}"),
                    describe_window_release(window, resets_at),
                ),
                None => (
                    "per period".to_owned(),
                    format!("{used} used this period"),
                    format!("the period turns at {resets_at}"),
                ),
            };
            format!(
                "Pending: tier {tier}'s budget of {limit} of {resource} {per} is spent ({spent}), so its ClusterQueue \
                 {cluster_queue} admits nothing new (stopPolicy Hold; admitted workloads run on) until {until}; to \
                 admit it sooner, a platform engineer raises {field} in the TierPolicy (`kubectl tiergate status \
                 --usage` shows the counts)."
            )
        }
        Hold::PendingQuota { cluster_queue, message } => format!(
            "Pending: quota is full{in_tier}{} (Kueue: {message}); it is admitted when running workloads{in_tier} \
             finish or the tier's quota is raised in the TierPolicy.",
            cluster_queue.as_deref().map(|name| format!(" (ClusterQueue {name})")).unwrap_or_default()
        ),
        Hold::PendingTopology { cluster_queue, message } => format!(
            "Pending: no domain of the topology level its pods must share has room for all of them{in_tier}{} \
             (Kueue: {message}); it is admitted when enough GPUs free up inside one domain, or run fewer pods per \
             pod set.",
            cluster_queue.as_deref().map(|name| format!(" (ClusterQueue {name})")).unwrap_or_default()
        ),
        Hold::Inadmissible { message } if message.contains("is not mapped in DRA configuration") => format!(
            "Kueue cannot charge its DRA claims ({message}): Kueue's Configuration lacks the deviceClassMappings the \
             policy's DRA classes need; print them with `tiergate render --kueue-config`, merge them into \
             kueue-system/kueue-manager-config and restart Kueue (docs/guides/dra.md, DRA with NVIDIA's driver)."
        ),
        Hold::Inadmissible { message } => {
            format!("Kueue cannot admit it as it is ({message}); fix what Kueue names and it is queued again.")
        }
        Hold::NotQueued => format!(
            "tiergate does not queue a {kind} in Kueue (it sets only the GPU class, placement and priority) and no \
             Kueue Workload owns it, so nothing in Kueue holds it; {}",
            if karpenter.is_some() { karpenter_clause } else { "look at its pods' scheduling events.".to_owned() }
        ),
        Hold::NoWorkload { queue } => format!(
            "Kueue has not created a Workload for this {kind}: check that Kueue manages {kind}s and that the object \
             carries {QUEUE_NAME_LABEL}={}.",
            queue.clone().unwrap_or_else(|| "<the tier's LocalQueue>".to_owned())
        ),
    }
}

fn summarize_decision(decision: &Decision) -> DecisionSummary {
    let mut outcome = decision.verdict.outcome();
    if let Verdict::Deny { message, .. } | Verdict::Invalid { message } | Verdict::Failed { message, .. } =
        &decision.verdict
    {
        outcome = format!("{outcome}: {message}");
    }
    DecisionSummary {
        outcome,
        pending_patch_operations: decision.patch.0.len(),
        reasons: decision.reasons.clone(),
        warnings: decision.warnings.clone(),
    }
}
