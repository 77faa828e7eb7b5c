//! The table form of the `why` answer: facts, the Workload's conditions, flavors and admission checks as
//! aligned tables, and the sentence last; pure.

use std::fmt::Write as _;

use super::table::render_table;
use super::why::WhyAnswer;
use crate::admission::{DECISION_ANNOTATION, TIER_ANNOTATION};

impl WhyAnswer {
    /// The answer for people: facts, tables, and the sentence last.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let tier = &self.tier;
        let _ = writeln!(out, "{} {}/{}", self.kind, self.namespace, self.name);
        let label = match &tier.label_value {
            Some(value) => format!("{}={value}", tier.label),
            None if tier.label.is_empty() => "no TierPolicy".to_owned(),
            None => format!("no {} label", tier.label),
        };
        let queue = match (&tier.local_queue, tier.local_queue_exists) {
            (Some(queue), true) => format!(", LocalQueue {queue}"),
            (Some(queue), false) => format!(", LocalQueue {queue} (missing)"),
            (None, _) => String::new(),
        };
        let _ =
            writeln!(out, "Tier:        {} ({label}{queue})", tier.tier.clone().unwrap_or_else(|| "none".to_owned()));
        let _ = writeln!(
            out,
            "Annotations: {TIER_ANNOTATION}={} {DECISION_ANNOTATION}={}",
            self.annotations.tier.as_deref().unwrap_or("-"),
            self.annotations.decision.as_deref().unwrap_or("-")
        );
        if let Some(decision) = &self.decision {
            let _ = writeln!(
                out,
                "Decision:    {} ({} patch operation(s)), re-run as if the object were created now",
                decision.outcome, decision.pending_patch_operations
            );
            for reason in &decision.reasons {
                let _ = writeln!(out, "  - {reason}");
            }
            for warning in &decision.warnings {
                let _ = writeln!(out, "  warning: {warning}");
            }
        }
        match &self.workload {
            None => out.push_str("Workload:    none\n"),
            Some(workload) => {
                let _ = writeln!(
                    out,
                    "Workload:    {} (LocalQueue {}, ClusterQueue {})",
                    workload.name,
                    workload.queue_name.as_deref().unwrap_or("-"),
                    workload.cluster_queue.as_deref().unwrap_or("-")
                );
                out.push('\n');
                let rows: Vec<Vec<String>> = workload
                    .conditions
                    .iter()
                    .map(|c| vec![c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone()])
                    .collect();
                out.push_str(&render_table(&["CONDITION", "STATUS", "REASON", "MESSAGE"], &rows));
                if !workload.flavors.is_empty() {
                    out.push('\n');
                    let rows: Vec<Vec<String>> = workload
                        .flavors
                        .iter()
                        .flat_map(|(pod_set, flavors)| {
                            let charged = workload.charged.get(pod_set);
                            flavors.iter().map(move |(resource, flavor)| {
                                let quantity = charged.and_then(|usage| usage.get(resource)).cloned();
                                vec![pod_set.clone(), resource.clone(), flavor.clone(), quantity.unwrap_or_default()]
                            })
                        })
                        .collect();
                    out.push_str(&render_table(&["POD SET", "RESOURCE", "FLAVOR", "CHARGED"], &rows));
                }
                if !workload.topology.is_empty() {
                    out.push('\n');
                    let rows: Vec<Vec<String>> = workload
                        .topology
                        .iter()
                        .flat_map(|(pod_set, domains)| {
                            domains.iter().map(move |(at, pods)| vec![pod_set.clone(), at.clone(), pods.to_string()])
                        })
                        .collect();
                    out.push_str(&render_table(&["POD SET", "TOPOLOGY DOMAIN", "PODS"], &rows));
                }
                if !workload.admission_checks.is_empty() {
                    out.push('\n');
                    let rows: Vec<Vec<String>> = workload
                        .admission_checks
                        .iter()
                        .map(|check| vec![check.name.clone(), check.state.clone(), check.message.clone()])
                        .collect();
                    out.push_str(&render_table(&["ADMISSION CHECK", "STATE", "MESSAGE"], &rows));
                }
            }
        }
        out.push('\n');
        out.push_str(&self.summary);
        out.push('\n');
        out
    }
}
