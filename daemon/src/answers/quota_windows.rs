//! The quota windows part of `kubectl tiergate status`: per tier with windows, the window in force, the quota it
//! gives and when that next changes, as the daemon last recorded them in the policy's status; pure, no I/O.

use serde::Serialize;

use super::table::render_table;
use crate::plan::quota_windows::apply_window;
use crate::policy::TierPolicy;

/// One tier's quota windows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaWindowStatus {
    /// Tier name.
    pub tier: String,
    /// The window in force; absent: the tier's base quotas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_force: Option<String>,
    /// The quota in force, `resource nominal` per resource (with the borrowing and lending limits).
    pub quota: Vec<String>,
    /// When the quota next changes (RFC 3339); absent: not within two weeks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_change: Option<String>,
    /// The window from then on; absent with a `nextChange`: the base quotas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_in_force: Option<String>,
}

/// The rows of the tiers (all, or only `tier`) that have quota windows, from the status the daemon wrote; a tier the
/// daemon has not recorded yet shows its windows as not yet applied.
pub fn build_quota_window_rows(policy: &TierPolicy, tier: Option<&str>) -> Vec<QuotaWindowStatus> {
    let recorded = policy.status.as_ref().map(|status| status.quota_windows.as_slice()).unwrap_or_default();
    policy
        .spec
        .tiers
        .iter()
        .filter(|candidate| !candidate.quota_windows.is_empty() && tier.is_none_or(|wanted| wanted == candidate.name))
        .map(|candidate| {
            let record = recorded.iter().find(|record| record.tier == candidate.name);
            let in_force = record.and_then(|record| record.in_force.clone());
            let mut quotas = candidate.clone();
            if let Some(window) =
                in_force.as_ref().and_then(|name| candidate.quota_windows.iter().find(|window| &window.name == name))
            {
                apply_window(&mut quotas, window);
            }
            let quota = quotas
                .quotas
                .iter()
                .map(|(resource, quota)| {
                    let mut text = format!("{resource} {}", quota.nominal.0);
                    if let Some(limit) = &quota.borrowing_limit {
                        text.push_str(&format!(" borrow {}", limit.0));
                    }
                    if let Some(limit) = &quota.lending_limit {
                        text.push_str(&format!(" lend {}", limit.0));
                    }
                    text
                })
                .collect();
            QuotaWindowStatus {
                tier: candidate.name.clone(),
                in_force,
                quota,
                next_change: record.and_then(|record| record.next_change.clone()),
                next_in_force: record.and_then(|record| record.next_in_force.clone()),
            }
        })
        .collect()
}

/// The table: TIER, WINDOW, QUOTA IN FORCE, NEXT CHANGE, THEN (empty when no tier has windows).
pub fn render_quota_window_table(rows: &[QuotaWindowStatus]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.tier.clone(),
                row.in_force.clone().unwrap_or_else(|| "(base)".to_owned()),
                row.quota.join(", "),
                row.next_change.clone().unwrap_or_else(|| "none within two weeks".to_owned()),
                match (&row.next_change, &row.next_in_force) {
                    (None, _) => String::new(),
                    (Some(_), Some(window)) => window.clone(),
                    (Some(_), None) => "(base)".to_owned(),
                },
            ]
        })
        .collect();
    let mut out = render_table(&["TIER", "WINDOW", "QUOTA IN FORCE", "NEXT CHANGE", "THEN"], &table);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::parse_policy;
    use crate::policy::{TierPolicyStatus, TierQuotaWindowStatus};

    fn policy(recorded: Option<&str>) -> TierPolicy {
        let marker = "      maxRunTime: {ceiling: 4h}\n";
        let window = r#"{name: burst, once: {begin: "2026-12-02T10:00:00Z", end: "2026-12-02T10:01:00Z"}, quotas: {nvidia.com/gpu: {nominal: "20"}}}"#;
        let text = include_str!("../../../samples/kubenexus/policy.yaml").replacen(
            marker,
            &format!("{marker}      quotaWindows:\n        - {window}\n"),
            1,
        );
        let mut policy = parse_policy(&text, "sample").unwrap();
        policy.status = Some(TierPolicyStatus {
            quota_windows: vec![TierQuotaWindowStatus {
                tier: "bronze".to_owned(),
                in_force: recorded.map(str::to_owned),
                next_change: Some("2026-12-02T10:01:00Z".to_owned()),
                next_in_force: None,
            }],
            ..TierPolicyStatus::default()
        });
        policy
    }

    #[test]
    fn the_table_shows_the_window_in_force_its_quota_and_the_next_change() {
        let rows = build_quota_window_rows(&policy(Some("burst")), None);
        assert_eq!(rows.len(), 1, "only bronze has windows");
        assert_eq!(rows[0].quota[0], "cpu 128");
        assert!(rows[0].quota.contains(&"nvidia.com/gpu 20".to_owned()), "{:?}", rows[0].quota);
        let table = render_quota_window_table(&rows);
        assert!(table.starts_with("TIER"), "{table}");
        let line = table.lines().nth(1).unwrap();
        for cell in ["bronze", "burst", "nvidia.com/gpu 20", "2026-12-02T10:01:00Z", "(base)"] {
            assert!(line.contains(cell), "{cell} missing from {line:?}");
        }
    }

    #[test]
    fn without_a_window_in_force_the_base_quota_is_shown_and_other_tiers_are_filtered() {
        let rows = build_quota_window_rows(&policy(None), Some("bronze"));
        assert!(rows[0].quota.contains(&"nvidia.com/gpu 16".to_owned()), "{:?}", rows[0].quota);
        assert_eq!(rows[0].in_force, None);
        assert!(build_quota_window_rows(&policy(None), Some("gold")).is_empty());
        assert_eq!(render_quota_window_table(&[]), "");
    }
}
