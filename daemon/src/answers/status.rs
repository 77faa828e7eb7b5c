//! The answer to `kubectl tiergate status [--tier T]`: per tier, its ClusterQueue's usage against quota per
//! flavor, pending and admitted workload counts, borrowing, the nodepool each flavor maps to, and the
//! TierPolicy's status conditions with the last error; with a cohort tree, what each tier lends, its weighted
//! share, and one row per cohort ([`super::sharing`]); pure, built from recorded objects.

use std::fmt::Write as _;

use serde::Serialize;

use super::kueue::KueueCohort;
use super::kueue::{KueueClusterQueue, quantity_text};
use super::sharing::{CohortStatus, amount_text, build_cohort_statuses, lent_by_tier};
use super::table::render_table;
use crate::check::{NodePool, pool_rejection};
use crate::plan::names::cluster_queue_name;
use crate::plan::tier_flavors;
use crate::policy::TierPolicy;
use crate::reconcile::status::SERVED;

/// What `status` is built from.
#[derive(Debug)]
pub struct StatusInputs<'a> {
    /// The TierPolicy (with its status).
    pub policy: &'a TierPolicy,
    /// The cluster's other TierPolicies (empty when unknown): which of them a tiergate instance serves.
    pub other_policies: &'a [TierPolicy],
    /// The cluster's ClusterQueues (those of other owners are ignored).
    pub cluster_queues: &'a [KueueClusterQueue],
    /// The cluster's Cohorts (their fair-sharing status); empty when the policy declares none.
    pub cohorts: &'a [KueueCohort],
    /// Live nodepools (Karpenter NodePools, node groups); empty when they could not be listed.
    pub pools: &'a [NodePool],
    /// Only this tier, when given.
    pub tier: Option<&'a str>,
}

/// `status` was asked about something that does not exist.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// `--tier` names no tier of the policy.
    #[error("failed to find tier {tier:?} in TierPolicy {policy}; pass --tier with one of: {tiers}")]
    UnknownTier {
        /// The tier asked for.
        tier: String,
        /// The policy.
        policy: String,
        /// The tiers it has, comma-separated.
        tiers: String,
    },
}

impl StatusError {
    /// Fixed reason for exit messages.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownTier { .. } => "unknown_tier",
        }
    }
}

/// The answer to `status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusAnswer {
    /// TierPolicy name.
    pub policy: String,
    /// Its status conditions (Ready, Degraded).
    pub conditions: Vec<PolicyCondition>,
    /// The last reconcile error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Set when no tiergate instance serves this policy: says so and which policies are served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_served: Option<String>,
    /// One entry per tier, in policy order.
    pub tiers: Vec<TierStatus>,
    /// One entry per declared cohort and resource (`spec.cohorts` order).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cohorts: Vec<CohortStatus>,
}

/// A TierPolicy status condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`/`False`/`Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// One tier.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TierStatus {
    /// Tier name.
    pub tier: String,
    /// Its ClusterQueue.
    pub cluster_queue: String,
    /// Whether the ClusterQueue exists.
    pub cluster_queue_found: bool,
    /// Cohort, when the tier can borrow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Workloads waiting for quota.
    pub pending_workloads: i64,
    /// Workloads holding a quota reservation.
    pub reserving_workloads: i64,
    /// Admitted workloads.
    pub admitted_workloads: i64,
    /// For a tier whose ProvisioningRequest check runs in this cluster: workloads holding quota that wait for
    /// cluster-autoscaler to provision their nodes (reserving but not admitted; `kubectl tiergate why` says what
    /// the autoscaler answered each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for_provisioning: Option<i64>,
    /// Kueue's `status.fairSharing.weightedShare` of the ClusterQueue (absent when fair sharing is off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weighted_share: Option<i64>,
    /// Usage against quota per flavor and resource.
    pub flavors: Vec<FlavorStatus>,
}

/// One flavor and resource of a tier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorStatus {
    /// ResourceFlavor.
    pub flavor: String,
    /// Resource name.
    pub resource: String,
    /// Used by admitted workloads (`status.flavorsUsage`).
    pub used: String,
    /// Reserved by quota-reserving workloads (`status.flavorsReservation`).
    pub reserved: String,
    /// Nominal quota.
    pub quota: String,
    /// Borrowed from the cohort.
    pub borrowed: String,
    /// Borrowing limit (empty: unlimited within the cohort, or no cohort).
    pub borrowing_limit: String,
    /// Lent to other queues of the tree now (derived: Kueue does not record whose quota is borrowed).
    pub lent: String,
    /// Nodepools the flavor's pods land on (the policy's class labels matched against the live pools), or the
    /// class's node labels when no pool is known.
    pub nodepools: Vec<String>,
}

/// Builds the answer to `status`.
pub fn build_status_answer(inputs: &StatusInputs<'_>) -> Result<StatusAnswer, StatusError> {
    let policy = inputs.policy;
    let name = policy.metadata.name.clone().unwrap_or_default();
    if let Some(tier) = inputs.tier
        && policy.spec.tier(tier).is_none()
    {
        let tiers: Vec<&str> = policy.spec.tiers.iter().map(|tier| tier.name.as_str()).collect();
        return Err(StatusError::UnknownTier { tier: tier.to_owned(), policy: name, tiers: tiers.join(", ") });
    }
    let status = policy.status.clone().unwrap_or_default();
    let lent = lent_by_tier(&policy.spec, inputs.cluster_queues);
    let tiers = policy
        .spec
        .tiers
        .iter()
        .filter(|tier| inputs.tier.is_none_or(|wanted| wanted == tier.name))
        .map(|tier| {
            let queue_name = cluster_queue_name(&tier.name);
            let queue = inputs.cluster_queues.iter().find(|queue| queue.metadata.name.as_deref() == Some(&queue_name));
            let selectors = tier_flavors(&policy.spec, tier);
            let nodepools_of = |flavor: &str| -> Vec<String> {
                let Some(selector) = selectors.iter().find(|selector| selector.flavor == flavor) else {
                    return Vec::new();
                };
                let matched: Vec<String> = inputs
                    .pools
                    .iter()
                    .filter(|pool| pool_rejection(pool, &selector.node_labels, &selector.tolerations).is_none())
                    .map(|pool| pool.name.clone())
                    .collect();
                if inputs.pools.is_empty() {
                    selector.node_labels.iter().map(|(key, value)| format!("{key}={value}")).collect()
                } else {
                    matched
                }
            };
            let lent_of = |flavor: &str, resource: &str, like: &str| {
                let amount = lent.get(&(tier.name.clone(), flavor.to_owned(), resource.to_owned())).copied();
                amount_text(amount.unwrap_or(0), like)
            };
            let flavors = queue.map(|queue| build_flavor_rows(queue, &nodepools_of, &lent_of)).unwrap_or_default();
            let counts = queue.map(|queue| &queue.status);
            let reserving = counts.and_then(|status| status.reserving_workloads).unwrap_or_default();
            let admitted = counts.and_then(|status| status.admitted_workloads).unwrap_or_default();
            TierStatus {
                tier: tier.name.clone(),
                cluster_queue: queue_name.clone(),
                cluster_queue_found: queue.is_some(),
                cohort: queue.and_then(|queue| queue.spec.cohort_name.clone()).or_else(|| tier.cohort.clone()),
                pending_workloads: counts.and_then(|status| status.pending_workloads).unwrap_or_default(),
                reserving_workloads: reserving,
                admitted_workloads: admitted,
                waiting_for_provisioning: tier.provisions_on_management().then(|| (reserving - admitted).max(0)),
                weighted_share: counts
                    .and_then(|status| status.fair_sharing.as_ref())
                    .and_then(|fair| fair.weighted_share),
                flavors,
            }
        })
        .collect();
    Ok(StatusAnswer {
        policy: name,
        conditions: status
            .conditions
            .iter()
            .map(|condition| PolicyCondition {
                type_: condition.type_.clone(),
                status: condition.status.clone(),
                reason: condition.reason.clone(),
                message: condition.message.clone(),
            })
            .collect(),
        last_error: status.last_error,
        not_served: build_not_served_note(policy, inputs.other_policies),
        tiers,
        cohorts: build_cohort_statuses(&policy.spec, inputs.cluster_queues, inputs.cohorts),
    })
}

/// Whether a tiergate instance writes `policy`'s status: only the instance serving a policy writes it, and it
/// always sets `Served=True` ([`crate::reconcile::status::SERVED`]).
fn is_served(policy: &TierPolicy) -> bool {
    policy.status.as_ref().is_some_and(|status| {
        status.conditions.iter().any(|condition| condition.type_ == SERVED && condition.status == "True")
    })
}

/// "no tiergate instance serves policy X (this one serves Y)" when `policy` carries no `Served` condition.
pub fn build_not_served_note(policy: &TierPolicy, others: &[TierPolicy]) -> Option<String> {
    if is_served(policy) {
        return None;
    }
    let name = policy.metadata.name.clone().unwrap_or_default();
    let served: Vec<String> =
        others.iter().filter(|other| is_served(other)).filter_map(|other| other.metadata.name.clone()).collect();
    Some(match served.as_slice() {
        [] => format!(
            "no tiergate instance serves policy {name}: none has written its status; run `tiergate run --policy-name \
             {name}` (or set the chart's policyName), and if one runs, its log and /readyz say what blocks it"
        ),
        [one] => format!(
            "no tiergate instance serves policy {name} (this one serves {one}); restart it with --policy-name {name} \
             (the chart's policyName)"
        ),
        several => format!(
            "no tiergate instance serves policy {name} (running instances serve {}); give one --policy-name {name}",
            several.join(", ")
        ),
    })
}

fn build_flavor_rows(
    queue: &KueueClusterQueue,
    nodepools_of: &dyn Fn(&str) -> Vec<String>,
    lent_of: &dyn Fn(&str, &str, &str) -> String,
) -> Vec<FlavorStatus> {
    let usage = |list: &[super::kueue::FlavorUsage], flavor: &str, resource: &str| {
        list.iter()
            .filter(|usage| usage.name == flavor)
            .flat_map(|usage| usage.resources.iter())
            .find(|usage| usage.name == resource)
            .cloned()
            .unwrap_or_default()
    };
    let mut rows = Vec::new();
    for flavor in queue.spec.resource_groups.iter().flat_map(|group| group.flavors.iter()) {
        let nodepools = nodepools_of(&flavor.name);
        for resource in &flavor.resources {
            let used = usage(&queue.status.flavors_usage, &flavor.name, &resource.name);
            let reserved = usage(&queue.status.flavors_reservation, &flavor.name, &resource.name);
            let or_zero = |text: String| if text.is_empty() { "0".to_owned() } else { text };
            rows.push(FlavorStatus {
                flavor: flavor.name.clone(),
                resource: resource.name.clone(),
                used: or_zero(quantity_text(used.total.as_ref())),
                reserved: or_zero(quantity_text(reserved.total.as_ref())),
                quota: quantity_text(resource.nominal_quota.as_ref()),
                borrowed: or_zero(quantity_text(used.borrowed.as_ref())),
                borrowing_limit: quantity_text(resource.borrowing_limit.as_ref()),
                lent: lent_of(&flavor.name, &resource.name, &quantity_text(resource.nominal_quota.as_ref())),
                nodepools: nodepools.clone(),
            });
        }
    }
    rows
}

impl StatusAnswer {
    /// The answer for people: one table of tiers, one of flavors, then the policy's conditions.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let tier_rows: Vec<Vec<String>> = self
            .tiers
            .iter()
            .map(|tier| {
                vec![
                    tier.tier.clone(),
                    if tier.cluster_queue_found {
                        tier.cluster_queue.clone()
                    } else {
                        format!("{} (missing)", tier.cluster_queue)
                    },
                    tier.cohort.clone().unwrap_or_default(),
                    tier.pending_workloads.to_string(),
                    tier.reserving_workloads.to_string(),
                    tier.admitted_workloads.to_string(),
                    tier.waiting_for_provisioning.map(|count| count.to_string()).unwrap_or_default(),
                    tier.weighted_share.map(|share| share.to_string()).unwrap_or_default(),
                ]
            })
            .collect();
        out.push_str(&render_table(
            &["TIER", "CLUSTERQUEUE", "COHORT", "PENDING", "RESERVING", "ADMITTED", "PROVISIONING", "WEIGHTED SHARE"],
            &tier_rows,
        ));
        out.push('\n');
        let flavor_rows: Vec<Vec<String>> = self
            .tiers
            .iter()
            .flat_map(|tier| {
                tier.flavors.iter().map(move |flavor| {
                    vec![
                        tier.tier.clone(),
                        flavor.flavor.clone(),
                        flavor.resource.clone(),
                        flavor.used.clone(),
                        flavor.reserved.clone(),
                        flavor.quota.clone(),
                        flavor.borrowed.clone(),
                        flavor.borrowing_limit.clone(),
                        flavor.lent.clone(),
                        flavor.nodepools.join(","),
                    ]
                })
            })
            .collect();
        out.push_str(&render_table(
            &[
                "TIER",
                "FLAVOR",
                "RESOURCE",
                "USED",
                "RESERVED",
                "QUOTA",
                "BORROWED",
                "BORROW LIMIT",
                "LENT",
                "NODEPOOL",
            ],
            &flavor_rows,
        ));
        out.push('\n');
        if !self.cohorts.is_empty() {
            let cohort_rows: Vec<Vec<String>> = self
                .cohorts
                .iter()
                .map(|cohort| {
                    vec![
                        cohort.cohort.clone(),
                        cohort.parent.clone().unwrap_or_default(),
                        cohort.resource.clone(),
                        cohort.nominal.clone(),
                        cohort.used.clone(),
                        cohort.borrowed.clone(),
                        cohort.lent.clone(),
                        cohort.weighted_share.map(|share| share.to_string()).unwrap_or_default(),
                    ]
                })
                .collect();
            out.push_str(&render_table(
                &["COHORT", "PARENT", "RESOURCE", "NOMINAL", "USED", "BORROWED", "LENT", "WEIGHTED SHARE"],
                &cohort_rows,
            ));
            out.push('\n');
        }
        let _ = writeln!(out, "TierPolicy {}:", self.policy);
        if let Some(note) = &self.not_served {
            let _ = writeln!(out, "  NOT SERVED: {note}");
        }
        if self.conditions.is_empty() {
            out.push_str("  no status conditions yet (is the tiergate daemon running?)\n");
        }
        for condition in &self.conditions {
            let _ = writeln!(
                out,
                "  {}={} ({}): {}",
                condition.type_, condition.status, condition.reason, condition.message
            );
        }
        if let Some(error) = &self.last_error {
            let _ = writeln!(out, "  last error: {error}");
        }
        out
    }
}
