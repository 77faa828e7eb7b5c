//! The answer to `kubectl tiergate status [--tier T]`: per tier, its ClusterQueue's usage against quota per
//! flavor, pending and admitted workload counts, borrowing, the nodepool each flavor maps to, and the
//! TierPolicy's status conditions with the last error; with a cohort tree, what each tier lends, its weighted
//! share, and one row per cohort ([`super::sharing`]); with `--tier`, one row per tenant (its LocalQueue's weight,
//! workloads, GPUs and, where the tier shares among its tenants, Kueue's decayed usage per weight); pure, built from
//! recorded objects.

use std::fmt::Write as _;

use serde::Serialize;

use super::kueue::KueueCohort;
use super::kueue::{KueueClusterQueue, KueueLocalQueue, quantity_text};
use super::quota_windows::{QuotaWindowStatus, build_quota_window_rows, render_quota_window_table};
use super::sharing::{CohortStatus, amount_text, build_cohort_statuses, lent_by_tier};
use super::table::render_table;
use crate::check::{NodePool, pool_rejection};
use crate::plan::names::cluster_queue_name;
use crate::plan::tenants::resource_weights;
use crate::plan::tier_flavors;
use crate::policy::{GpuClass, Tier, TierPolicy, TierPolicySpec};
use crate::reconcile::status::SERVED;
use crate::validation::quantity::parse_quantity;

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
    /// The tiers' LocalQueues (one per tenant namespace; read with `--tier`, else empty).
    pub local_queues: &'a [KueueLocalQueue],
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
    /// Per tier with quota windows: the window and quota in force, and the next change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quota_windows: Vec<QuotaWindowStatus>,
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
    /// One row per tenant (the tier's LocalQueues), with `--tier`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantStatus>,
}

/// One tenant of a tier: its namespace's LocalQueue.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// The namespace.
    pub namespace: String,
    /// Its fair-sharing weight (`1` when unset).
    pub weight: String,
    /// Workloads waiting for quota.
    pub pending_workloads: i64,
    /// Admitted workloads.
    pub admitted_workloads: i64,
    /// GPUs its admitted workloads use (the tier's classes' resources).
    pub gpus_in_use: String,
    /// Kueue's decayed past usage, weighted by resource and divided by the tenant's weight: the lower, the sooner
    /// its next workload is admitted (absent where the tier does not share among its tenants or Kueue has not
    /// sampled it yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_per_weight: Option<f64>,
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
                tenants: build_tenant_rows(&policy.spec, tier, &queue_name, inputs.local_queues),
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
        quota_windows: build_quota_window_rows(policy, inputs.tier),
    })
}

/// A usage per weight for people: two decimals, or three significant digits below 0.1 (Kueue's decayed usage of
/// a tenant that ran for minutes is small, and two tenants' must not both read 0.00).
pub(super) fn usage_text(usage: f64) -> String {
    if usage == 0.0 || !usage.is_finite() || usage.abs() >= 0.1 {
        return format!("{usage:.2}");
    }
    let digits = usize::try_from(2 - usage.abs().log10().floor() as i64).unwrap_or(2);
    format!("{usage:.digits$}")
}

/// The tier's tenants, by namespace: each LocalQueue of `local_queues` submitting to `queue_name`.
pub(super) fn build_tenant_rows(
    spec: &TierPolicySpec,
    tier: &Tier,
    queue_name: &str,
    local_queues: &[KueueLocalQueue],
) -> Vec<TenantStatus> {
    let classes: Vec<&GpuClass> = tier.gpu_class_names().filter_map(|name| spec.gpu_class(name)).collect();
    let weights = resource_weights(spec);
    let mut rows: Vec<TenantStatus> = local_queues
        .iter()
        .filter(|queue| queue.spec.cluster_queue == queue_name)
        .map(|queue| {
            let weight = queue
                .spec
                .fair_sharing
                .as_ref()
                .map(|fair| quantity_text(fair.weight.as_ref()))
                .filter(|weight| !weight.is_empty())
                .unwrap_or_else(|| "1".to_owned());
            let gpus: f64 = queue
                .status
                .flavors_usage
                .iter()
                .flat_map(|flavor| &flavor.resources)
                .filter(|resource| classes.iter().any(|class| class.counts_resource(&resource.name)))
                .filter_map(|resource| parse_quantity(&quantity_text(resource.total.as_ref())))
                .map(|quantity| quantity.value)
                .sum();
            let consumed =
                queue.status.fair_sharing.as_ref().and_then(|fair| fair.admission_fair_sharing_status.as_ref());
            let usage_per_weight = consumed.filter(|_| tier.tenant_fair_sharing).map(|consumed| {
                let usage: f64 = consumed
                    .consumed_resources
                    .iter()
                    .filter_map(|(resource, amount)| {
                        let value = parse_quantity(&quantity_text(Some(amount)))?.value;
                        Some(weights.get(resource).copied().unwrap_or(1.0) * value)
                    })
                    .sum();
                let weight = parse_quantity(&weight).map_or(1.0, |weight| weight.value);
                if weight > 0.0 { usage / weight } else { f64::INFINITY }
            });
            TenantStatus {
                namespace: queue.metadata.namespace.clone().unwrap_or_default(),
                weight,
                pending_workloads: queue.status.pending_workloads.unwrap_or_default(),
                admitted_workloads: queue.status.admitted_workloads.unwrap_or_default(),
                gpus_in_use: format!("{gpus}"),
                usage_per_weight,
            }
        })
        .collect();
    rows.sort_by(|left, right| left.namespace.cmp(&right.namespace));
    rows
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
        let tenant_rows: Vec<Vec<String>> = self
            .tiers
            .iter()
            .flat_map(|tier| {
                tier.tenants.iter().map(move |tenant| {
                    vec![
                        tier.tier.clone(),
                        tenant.namespace.clone(),
                        tenant.weight.clone(),
                        tenant.pending_workloads.to_string(),
                        tenant.admitted_workloads.to_string(),
                        tenant.gpus_in_use.clone(),
                        tenant.usage_per_weight.map(usage_text).unwrap_or_default(),
                    ]
                })
            })
            .collect();
        if !tenant_rows.is_empty() {
            out.push_str(&render_table(
                &["TIER", "TENANT", "WEIGHT", "PENDING", "ADMITTED", "GPUS", "USAGE/WEIGHT"],
                &tenant_rows,
            ));
            out.push('\n');
        }
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
        out.push_str(&render_quota_window_table(&self.quota_windows));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn local_queue(namespace: &str, weight: Option<&str>, consumed_gpus: &str, in_use: &str) -> KueueLocalQueue {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tiergate-bronze", "namespace": namespace},
            "spec": {"clusterQueue": "tiergate-bronze", "fairSharing": weight.map(|weight| serde_json::json!({"weight": weight}))},
            "status": {"pendingWorkloads": 3, "admittedWorkloads": 1,
                "flavorsUsage": [{"name": "l4", "resources": [{"name": "nvidia.com/gpu", "total": in_use},
                    {"name": "memory", "total": "64Gi"}]}],
                "fairSharing": {"weightedShare": 0, "admissionFairSharingStatus": {
                    "consumedResources": {"nvidia.com/gpu": consumed_gpus, "memory": "512Gi", "cpu": "100"},
                    "lastUpdate": "2026-11-27T10:00:00Z"}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_small_usage_keeps_three_significant_digits() {
        assert_eq!(usage_text(4.5), "4.50");
        assert_eq!(usage_text(0.0), "0.00");
        assert_eq!(usage_text(0.0123), "0.0123");
        assert_eq!(usage_text(0.000456), "0.000456");
    }

    #[test]
    fn a_sharing_tier_lists_each_tenant_with_its_weight_gpus_and_usage_per_weight() {
        let text = include_str!("../../../samples/tenant-sharing/policy.yaml");
        let policy = crate::inputs::parse_policy(text, "samples/tenant-sharing/policy.yaml").unwrap();
        let queues = [
            local_queue("team-b", Some("2"), "8", "1"),
            local_queue("team-a", None, "8", "2"),
            KueueLocalQueue {
                spec: tiergate_kueue::read::LocalQueueSpecRead {
                    cluster_queue: "tiergate-gold".to_owned(),
                    ..Default::default()
                },
                ..local_queue("ml-prod", None, "0", "0")
            },
        ];
        let inputs = StatusInputs {
            policy: &policy,
            other_policies: &[],
            cluster_queues: &[],
            cohorts: &[],
            pools: &[],
            local_queues: &queues,
            tier: Some("bronze"),
        };
        let answer = build_status_answer(&inputs).unwrap();
        let tenants = &answer.tiers[0].tenants;
        assert_eq!(tenants.iter().map(|tenant| tenant.namespace.as_str()).collect::<Vec<_>>(), ["team-a", "team-b"]);
        // 8 GPUs weigh 8, 100 cores 1, memory nothing: 9 per weight 1, 4.5 per weight 2.
        assert_eq!(tenants[0].usage_per_weight, Some(9.0));
        assert_eq!((tenants[1].weight.as_str(), tenants[1].usage_per_weight), ("2", Some(4.5)));
        assert_eq!((tenants[0].gpus_in_use.as_str(), tenants[0].pending_workloads), ("2", 3), "only GPUs count");
        let table = answer.to_table();
        assert!(table.contains("TENANT") && table.contains("USAGE/WEIGHT"), "{table}");
        assert!(table.contains("team-b") && table.contains("4.50"), "{table}");
    }
}
