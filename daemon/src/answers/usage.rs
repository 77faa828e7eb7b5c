//! `kubectl tiergate status --usage`: each tier's and tenant namespace's counted use, this period and the last
//! (and in a budget's rolling window), with every budget's use, limit and reset, from the policy's checkpointed
//! `status.usage`; pure, no I/O.

use serde::Serialize;

use super::table::render_table;
use crate::policy::budget::{
    budget_counts, describe_window_release, format_unit_hours, limit_millis, parse_resource_seconds, spent_budgets,
};
use crate::policy::{TierPolicy, UsageStatus, UsageTotals};

/// The answer to `status --usage`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageAnswer {
    /// TierPolicy name.
    pub policy: String,
    /// The checkpointed counts' period, or `None` before the first checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<UsagePeriod>,
    /// One entry per tier (policy order; only `--tier` when given).
    pub tiers: Vec<TierUsage>,
    /// One entry per tenant namespace with use this period or the last (by name; those of `--tier` when given).
    pub tenants: Vec<TenantUsage>,
}

/// The period the counts run over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsagePeriod {
    /// `Month`, `Week` or `Day`.
    pub period: String,
    /// Its time zone.
    pub time_zone: String,
    /// This period's start.
    pub start: String,
    /// Its end: when budgets are renewed.
    pub end: String,
    /// The previous period's start.
    pub previous_start: String,
    /// When the counts were taken.
    pub checkpoint_time: String,
}

/// One tier's use of one resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// Resource name.
    pub resource: String,
    /// This period, in hours of one unit (GPU-hours for a GPU resource).
    pub this_period_hours: String,
    /// The previous period, likewise.
    pub last_period_hours: String,
    /// The use in the budget's rolling window at the checkpoint, likewise, when the budget has a window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_hours: Option<String>,
    /// The budget's limit of it, likewise, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_hours: Option<String>,
    /// Whether that limit is used up.
    pub spent: bool,
    /// When a spent limit has room again with no further use (RFC 3339): the period's end, or when enough use
    /// leaves the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<String>,
}

/// One tier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TierUsage {
    /// Tier name.
    pub tier: String,
    /// The budget's rolling window (`720h`), when it has one: its limits apply to the use in the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// Per resource counted.
    pub resources: Vec<ResourceUsage>,
    /// Whether a spent budget holds the tier's ClusterQueue.
    pub held: bool,
}

/// One tenant namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantUsage {
    /// Namespace.
    pub namespace: String,
    /// Its tier now, by its label (empty when none).
    pub tier: String,
    /// Per resource counted.
    pub resources: Vec<ResourceUsage>,
}

fn hours(side: &std::collections::BTreeMap<String, String>, resource: &str) -> String {
    format_unit_hours(side.get(resource).and_then(|text| parse_resource_seconds(text)).unwrap_or(0))
}

fn resources_of(totals: Option<&UsageTotals>, extra: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = totals
        .into_iter()
        .flat_map(|totals| totals.current.keys().chain(totals.previous.keys()).cloned())
        .chain(extra)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The usage answer of `policy` (only `tier`'s entries when given). `tenant_tiers` names each namespace's tier
/// (from its label; namespaces not listed are shown without one).
pub fn build_usage_answer(
    policy: &TierPolicy,
    tier: Option<&str>,
    tenant_tiers: &std::collections::BTreeMap<String, String>,
) -> UsageAnswer {
    let usage: Option<&UsageStatus> = policy.status.as_ref().and_then(|status| status.usage.as_ref());
    let spent = spent_budgets(&policy.spec, usage);
    let empty = UsageTotals::default();
    let tiers = policy
        .spec
        .tiers
        .iter()
        .filter(|candidate| tier.is_none_or(|name| candidate.name == name))
        .map(|candidate| {
            let totals = usage.and_then(|usage| usage.tiers.get(&candidate.name));
            let limits = candidate.budget.as_ref().map(|budget| budget.limits.clone()).unwrap_or_default();
            let window = candidate.budget.as_ref().and_then(|budget| budget.window.as_deref()).map(str::trim);
            let counts = usage.and_then(|usage| budget_counts(&policy.spec, candidate, usage));
            let resources = resources_of(totals, limits.keys().cloned())
                .into_iter()
                .map(|resource| {
                    let totals = totals.unwrap_or(&empty);
                    let spent =
                        spent.iter().find(|budget| budget.tier == candidate.name && budget.resource == resource);
                    ResourceUsage {
                        this_period_hours: hours(&totals.current, &resource),
                        last_period_hours: hours(&totals.previous, &resource),
                        window_hours: window
                            .map(|_| format_unit_hours(counts.as_ref().map_or(0, |counts| counts.used(&resource)))),
                        budget_hours: limits
                            .get(&resource)
                            .and_then(|text| limit_millis(text).ok())
                            .map(format_unit_hours),
                        spent: spent.is_some(),
                        resets_at: spent.map(|budget| budget.resets_at.clone()),
                        resource,
                    }
                })
                .collect();
            TierUsage {
                tier: candidate.name.clone(),
                window: window.map(str::to_owned),
                resources,
                held: spent.iter().any(|budget| budget.tier == candidate.name),
            }
        })
        .collect();
    let tenants = usage
        .into_iter()
        .flat_map(|usage| usage.namespaces.iter())
        .map(|(namespace, totals)| (namespace, totals, tenant_tiers.get(namespace).cloned().unwrap_or_default()))
        .filter(|(_, _, tenant_tier)| tier.is_none_or(|name| tenant_tier == name))
        .map(|(namespace, totals, tenant_tier)| TenantUsage {
            namespace: namespace.clone(),
            tier: tenant_tier,
            resources: resources_of(Some(totals), [])
                .into_iter()
                .map(|resource| ResourceUsage {
                    this_period_hours: hours(&totals.current, &resource),
                    last_period_hours: hours(&totals.previous, &resource),
                    window_hours: None,
                    budget_hours: None,
                    spent: false,
                    resets_at: None,
                    resource,
                })
                .collect(),
        })
        .collect();
    UsageAnswer {
        policy: kube::ResourceExt::name_any(policy),
        period: usage.map(|usage| UsagePeriod {
            period: usage.period.name().to_owned(),
            time_zone: usage.time_zone.clone(),
            start: usage.period_start.clone(),
            end: usage.period_end.clone(),
            previous_start: usage.previous_period_start.clone(),
            checkpoint_time: usage.checkpoint_time.clone(),
        }),
        tiers,
        tenants,
    }
}

impl UsageAnswer {
    /// The answer for people: the period, one table of tiers, one of tenants. Amounts are hours of one unit of
    /// the resource: GPU-hours for a GPU.
    pub fn to_table(&self) -> String {
        let mut out = match &self.period {
            Some(period) => format!(
                "TierPolicy {}: this period is the {} from {} to {} ({}), the last began {}; counted at {}\n\n",
                self.policy,
                period.period.to_lowercase(),
                period.start,
                period.end,
                period.time_zone,
                period.previous_start,
                period.checkpoint_time
            ),
            None => format!(
                "TierPolicy {}: no use counted yet (the leading tiergate writes status.usage at every checkpoint)\n\n",
                self.policy
            ),
        };
        let windowed = self.tiers.iter().any(|tier| tier.window.is_some());
        let tier_rows: Vec<Vec<String>> = self
            .tiers
            .iter()
            .flat_map(|tier| {
                tier.resources.iter().map(move |resource| {
                    let resets = resource.resets_at.clone().unwrap_or_default();
                    let state = match (&resource.budget_hours, resource.spent, &tier.window) {
                        (None, _, _) => String::new(),
                        (Some(_), true, Some(window)) => {
                            format!("spent: held until {}", describe_window_release(window, &resets))
                        }
                        (Some(_), true, None) => format!("spent: held until {resets}"),
                        (Some(_), false, _) => "within budget".to_owned(),
                    };
                    let budget = match (&resource.budget_hours, &tier.window) {
                        (Some(limit), Some(window)) => format!("{limit} in any {window}"),
                        (limit, _) => limit.clone().unwrap_or_default(),
                    };
                    let mut row = vec![
                        tier.tier.clone(),
                        resource.resource.clone(),
                        resource.this_period_hours.clone(),
                        resource.last_period_hours.clone(),
                    ];
                    if windowed {
                        row.push(resource.window_hours.clone().unwrap_or_default());
                    }
                    row.extend([budget, state]);
                    row
                })
            })
            .collect();
        let headers: &[&str] = if windowed {
            &["TIER", "RESOURCE", "THIS PERIOD", "LAST PERIOD", "IN WINDOW", "BUDGET", "STATE"]
        } else {
            &["TIER", "RESOURCE", "THIS PERIOD", "LAST PERIOD", "BUDGET", "STATE"]
        };
        out.push_str(&render_table(headers, &tier_rows));
        out.push('\n');
        let tenant_rows: Vec<Vec<String>> = self
            .tenants
            .iter()
            .flat_map(|tenant| {
                tenant.resources.iter().map(move |resource| {
                    vec![
                        tenant.namespace.clone(),
                        tenant.tier.clone(),
                        resource.resource.clone(),
                        resource.this_period_hours.clone(),
                        resource.last_period_hours.clone(),
                    ]
                })
            })
            .collect();
        out.push_str(&render_table(&["TENANT", "TIER", "RESOURCE", "THIS PERIOD", "LAST PERIOD"], &tenant_rows));
        out.push_str("\namounts are hours of one unit of the resource (GPU-hours for a GPU)\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::inputs::load_policy;
    use crate::policy::{Budget, TierPolicyStatus, UsageBucket, WindowUsage};

    fn policy() -> TierPolicy {
        let mut policy = load_policy(None).unwrap();
        let tier = policy.spec.tiers[0].name.clone();
        policy.spec.tiers[0].budget =
            Some(Budget { limits: BTreeMap::from([("nvidia.com/gpu".to_owned(), "2h".to_owned())]), window: None });
        let gpu = |text: &str| BTreeMap::from([("nvidia.com/gpu".to_owned(), text.to_owned())]);
        policy.status = Some(TierPolicyStatus {
            usage: Some(UsageStatus {
                checkpoint_time: "2026-12-02T08:00:00Z".into(),
                period: Default::default(),
                time_zone: "UTC".into(),
                period_start: "2026-12-01T00:00:00Z".into(),
                period_end: "2027-01-01T00:00:00Z".into(),
                previous_period_start: "2026-11-01T00:00:00Z".into(),
                tiers: BTreeMap::from([(tier, UsageTotals { current: gpu("7200"), previous: gpu("5400") })]),
                namespaces: BTreeMap::from([(
                    "team-a".to_owned(),
                    UsageTotals { current: gpu("3600"), previous: BTreeMap::new() },
                )]),
                windows: BTreeMap::new(),
            }),
            ..TierPolicyStatus::default()
        });
        policy
    }

    #[test]
    fn a_spent_budget_shows_its_use_limit_and_reset_and_tenants_their_share() {
        let policy = policy();
        let tier = policy.spec.tiers[0].name.clone();
        let tenants = BTreeMap::from([("team-a".to_owned(), tier.clone())]);
        let answer = build_usage_answer(&policy, None, &tenants);
        let first = &answer.tiers[0];
        assert!(first.held);
        assert_eq!(
            first.resources,
            [ResourceUsage {
                resource: "nvidia.com/gpu".into(),
                this_period_hours: "2h".into(),
                last_period_hours: "1.5h".into(),
                window_hours: None,
                budget_hours: Some("2h".into()),
                spent: true,
                resets_at: Some("2027-01-01T00:00:00Z".into()),
            }]
        );
        assert_eq!(answer.tenants[0].namespace, "team-a");
        assert_eq!(answer.tenants[0].resources[0].this_period_hours, "1h");
        let table = answer.to_table();
        assert!(table.contains("spent: held until 2027-01-01T00:00:00Z"), "{table}");
        assert!(table.contains("this period is the month from 2026-12-01T00:00:00Z"), "{table}");
    }

    #[test]
    fn a_tier_filter_keeps_its_tier_and_tenants_only() {
        let policy = policy();
        let other = policy.spec.tiers[1].name.clone();
        let tenants = BTreeMap::from([("team-a".to_owned(), policy.spec.tiers[0].name.clone())]);
        let answer = build_usage_answer(&policy, Some(&other), &tenants);
        assert_eq!(answer.tiers.len(), 1);
        assert_eq!(answer.tiers[0].tier, other);
        assert!(answer.tenants.is_empty());
    }

    #[test]
    fn before_the_first_checkpoint_the_answer_says_nothing_is_counted_yet() {
        let mut policy = policy();
        policy.status = None;
        let answer = build_usage_answer(&policy, None, &BTreeMap::new());
        assert!(answer.period.is_none());
        assert!(answer.to_table().contains("no use counted yet"));
    }

    /// `policy()` with tier 0's budget over a 4 h window (5-minute buckets): 1 GPU-hour in the bucket of 04:00 and
    /// 1.5 in that of 07:00, both in the window ending at the 08:00 checkpoint.
    fn windowed() -> TierPolicy {
        let mut policy = policy();
        let tier = policy.spec.tiers[0].name.clone();
        if let Some(budget) = policy.spec.tiers[0].budget.as_mut() {
            budget.window = Some("4h".into());
        }
        let bucket = |start: &str, used: &str| UsageBucket {
            start: start.into(),
            used: BTreeMap::from([("nvidia.com/gpu".to_owned(), used.to_owned())]),
        };
        let buckets = vec![bucket("2026-12-02T04:00:00Z", "3600"), bucket("2026-12-02T07:00:00Z", "5400")];
        let window = WindowUsage { window: "4h".into(), bucket_seconds: 300, buckets };
        if let Some(usage) = policy.status.as_mut().and_then(|status| status.usage.as_mut()) {
            usage.windows = BTreeMap::from([(tier, window)]);
        }
        policy
    }

    #[test]
    fn a_windowed_budget_shows_the_use_in_its_window_and_when_enough_of_it_leaves() {
        let answer = build_usage_answer(&windowed(), None, &BTreeMap::new());
        let first = &answer.tiers[0];
        assert_eq!(first.window.as_deref(), Some("4h"));
        assert!(first.held, "2.5h in the window of a 2h budget");
        let gpu = &first.resources[0];
        assert_eq!(gpu.window_hours.as_deref(), Some("2.5h"));
        assert_eq!(gpu.this_period_hours, "2h", "the period's count is reported as it is");
        assert_eq!(gpu.resets_at.as_deref(), Some("2026-12-02T08:05:00Z"), "the 04:00 bucket leaves at 04:05 + 4h");
        let table = answer.to_table();
        assert!(table.contains("IN WINDOW") && table.contains("2h in any 4h"), "{table}");
        assert!(
            table.contains("spent: held until use leaves the 4h window, at 2026-12-02T08:05:00Z if nothing more runs"),
            "{table}"
        );
        assert!(!table.contains("held until 2027"), "{table}");
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(json["tiers"][0]["window"], "4h");
        assert_eq!(json["tiers"][0]["resources"][0]["windowHours"], "2.5h");
        assert!(json["tiers"][1].get("window").is_none());
    }
}
