//! `tiergate check --fleet`, pure: every tier dispatched to a worker must find exactly one pool per GPU class (and
//! placement rule) among that worker's own pools; the tiers that run here are checked against this cluster's.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{NodePool, TierReport, build_targets};
use crate::policy::TierPolicySpec;

/// One worker's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerReport {
    /// Worker name (`spec.clusters[].name`).
    pub worker: String,
    /// One report per tier dispatched to it, in policy order; empty when no tier dispatches there.
    pub tiers: Vec<TierReport>,
    /// Why the worker could not be checked (no pools given for it although tiers dispatch there).
    pub missing_pools: Option<String>,
}

impl WorkerReport {
    /// True when every dispatched tier matched exactly one pool per target.
    pub fn passed(&self) -> bool {
        self.missing_pools.is_none() && self.tiers.iter().all(TierReport::passed)
    }
}

/// The result of `tiergate check --fleet`.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetCheckReport {
    /// The tiers without `dispatch`, against this cluster's pools (`None` when no pools were given for it).
    pub local: Option<Vec<TierReport>>,
    /// One report per worker of `spec.clusters`, in declaration order.
    pub workers: Vec<WorkerReport>,
}

impl FleetCheckReport {
    /// True when every checked tier passed and every worker a tier dispatches to had pools to check.
    pub fn passed(&self) -> bool {
        self.local.iter().flatten().all(TierReport::passed) && self.workers.iter().all(WorkerReport::passed)
    }

    /// The report as text for people.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        match &self.local {
            Some(tiers) => {
                let _ = writeln!(text, "this cluster:");
                write_tiers(&mut text, tiers);
            }
            None => {
                let _ = writeln!(text, "this cluster: not checked (no --nodepools)");
            }
        }
        for worker in &self.workers {
            let _ = writeln!(text, "worker {}:", worker.worker);
            if let Some(why) = &worker.missing_pools {
                let _ = writeln!(text, "  FAIL: {why}");
            } else if worker.tiers.is_empty() {
                let _ = writeln!(text, "  no tier dispatches here");
            }
            write_tiers(&mut text, &worker.tiers);
        }
        let summary = if self.passed() {
            "every dispatched tier matches exactly one pool per GPU class and placement rule on each of its workers"
        } else {
            "some tiers do not match exactly one pool on a worker; fix that worker's pools or the policy"
        };
        let _ = writeln!(text, "{summary}");
        text
    }
}

fn write_tiers(text: &mut String, tiers: &[TierReport]) {
    for tier in tiers {
        let verdict = if tier.passed() { "OK" } else { "FAIL" };
        let _ = writeln!(text, "  tier {}: {verdict}", tier.tier);
        for target in &tier.targets {
            let found = match target.matches.as_slice() {
                [] => "no pool can host these pods".to_owned(),
                [pool] => format!("-> {pool}"),
                pools => {
                    format!("{} pools can host these pods, expected exactly one: {}", pools.len(), pools.join(", "))
                }
            };
            let _ = writeln!(text, "    {}: {found}", target.target);
            if target.matches.is_empty() {
                for (pool, reason) in &target.rejections {
                    let _ = writeln!(text, "      {pool}: {reason}");
                }
            }
        }
    }
}

/// Checks the local tiers against `local_pools` (when given) and each worker's dispatched tiers against its own
/// pools in `worker_pools` (by worker name).
pub fn build_fleet_check_report(
    spec: &TierPolicySpec,
    local_pools: Option<&[NodePool]>,
    worker_pools: &BTreeMap<String, Vec<NodePool>>,
) -> FleetCheckReport {
    let report = |tier: &crate::policy::Tier, pools: &[NodePool]| TierReport {
        tier: tier.name.clone(),
        targets: build_targets(spec, tier, pools),
    };
    let local = local_pools.map(|pools| {
        spec.tiers.iter().filter(|tier| tier.dispatch.is_none()).map(|tier| report(tier, pools)).collect()
    });
    let workers = spec
        .clusters
        .iter()
        .map(|cluster| {
            let dispatched: Vec<_> = spec.tiers_dispatched_to(&cluster.name).collect();
            match worker_pools.get(&cluster.name) {
                Some(pools) => WorkerReport {
                    worker: cluster.name.clone(),
                    tiers: dispatched.into_iter().map(|tier| report(tier, pools)).collect(),
                    missing_pools: None,
                },
                None => WorkerReport {
                    worker: cluster.name.clone(),
                    tiers: Vec::new(),
                    missing_pools: (!dispatched.is_empty()).then(|| {
                        format!(
                            "no nodepools given for this worker, though tiers {} dispatch here; pass \
                             --worker-nodepools {}=FILE",
                            dispatched.iter().map(|tier| tier.name.as_str()).collect::<Vec<_>>().join(", "),
                            cluster.name
                        )
                    }),
                },
            }
        })
        .collect();
    FleetCheckReport { local, workers }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::parse_nodepools;
    use crate::inputs::load_policy;
    use std::path::Path;

    fn sample(file: &str) -> Vec<NodePool> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/fleet").join(file);
        parse_nodepools(&std::fs::read_to_string(&path).unwrap(), file).unwrap()
    }

    fn fleet_policy() -> crate::policy::TierPolicy {
        load_policy(Some(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/fleet/policy.yaml"))).unwrap()
    }

    #[test]
    fn the_fleet_sample_finds_one_pool_per_dispatched_tier_on_each_worker() {
        let policy = fleet_policy();
        let workers = BTreeMap::from([
            ("us-east".to_owned(), sample("workers/us-east-nodepools.yaml")),
            ("eu-west".to_owned(), sample("workers/eu-west-nodepools.yaml")),
        ]);
        let report = build_fleet_check_report(&policy.spec, None, &workers);
        assert!(report.passed(), "{}", report.to_text());
        let tiers: Vec<(&str, Vec<&str>)> = report
            .workers
            .iter()
            .map(|worker| (worker.worker.as_str(), worker.tiers.iter().map(|tier| tier.tier.as_str()).collect()))
            .collect();
        assert_eq!(tiers, [("us-east", vec!["gold"]), ("eu-west", vec!["gold", "silver"])]);
    }

    #[test]
    fn a_worker_lacking_a_dispatched_tiers_pool_fails_and_names_it() {
        let policy = fleet_policy();
        let workers = BTreeMap::from([
            ("us-east".to_owned(), sample("workers/us-east-nodepools.yaml")),
            ("eu-west".to_owned(), sample("workers/us-east-nodepools.yaml")),
        ]);
        let report = build_fleet_check_report(&policy.spec, None, &workers);
        assert!(!report.passed());
        let text = report.to_text();
        let west = &text[text.find("worker eu-west:").unwrap()..];
        assert!(west.contains("  tier gold: OK\n"), "{text}");
        assert!(west.contains("  tier silver: FAIL\n    a100: no pool can host"), "{text}");
    }

    #[test]
    fn a_worker_without_pools_fails_when_tiers_dispatch_there() {
        let policy = fleet_policy();
        let workers = BTreeMap::from([("us-east".to_owned(), sample("workers/us-east-nodepools.yaml"))]);
        let report = build_fleet_check_report(&policy.spec, None, &workers);
        assert!(!report.passed());
        assert!(report.to_text().contains("--worker-nodepools eu-west=FILE"), "{}", report.to_text());
    }
}
