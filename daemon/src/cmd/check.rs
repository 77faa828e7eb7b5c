//! `tiergate check`: reads a policy and nodepools, prints which pools can host each tier, and exits non-zero
//! unless every tier matches exactly one pool per GPU class (and placement rule). With `--fleet`, each tier that
//! dispatches is checked against each of its workers' own nodepools files instead.

use std::collections::BTreeMap;
use std::process::ExitCode;

use super::CmdError;
use crate::check::fleet::build_fleet_check_report;
use crate::check::{NodePool, build_check_report, parse_nodepools};
use crate::cli::CheckArgs;
use crate::inputs::{load_policy, read_file};
use crate::live::pools::fetch_live_pools;
use crate::live::{KubectlConnection, connect};
use crate::validation::validate_policy;

/// Runs `tiergate check`.
pub fn run(args: CheckArgs) -> Result<ExitCode, CmdError> {
    let policy = load_policy(Some(&args.policy))?;
    if let Err(errors) = validate_policy(&policy) {
        eprintln!("{errors}");
        return Ok(ExitCode::FAILURE);
    }
    if args.fleet {
        return run_fleet(&args, &policy.spec);
    }
    let pools = load_check_pools(&args)?;
    let report = build_check_report(&policy.spec, &pools);
    print!("{}", report.to_text());
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The pools `tiergate check` matches against: those of `--nodepools`, then (with `--kubeconfig`) the live ones.
pub fn load_check_pools(args: &CheckArgs) -> Result<Vec<NodePool>, CmdError> {
    let mut pools = match &args.nodepools {
        Some(path) => parse_nodepools(&read_file(path)?, &path.display().to_string())?,
        None => Vec::new(),
    };
    if let Some(kubeconfig) = &args.kubeconfig {
        let connection = KubectlConnection { kubeconfig: Some(kubeconfig.clone()), context: args.context.clone() };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let live = runtime.block_on(async {
            let (client, _) = connect(&connection).await?;
            fetch_live_pools(&client).await
        })?;
        if live.is_empty() {
            return Err("failed to find any live pool: the cluster has no nodes and no Karpenter NodePools".into());
        }
        pools.extend(live);
    }
    Ok(pools)
}

fn run_fleet(args: &CheckArgs, spec: &crate::policy::TierPolicySpec) -> Result<ExitCode, CmdError> {
    let mut workers = BTreeMap::new();
    for (name, path) in &args.worker_nodepools {
        if spec.cluster(name).is_none() {
            let known: Vec<&str> = spec.clusters.iter().map(|cluster| cluster.name.as_str()).collect();
            return Err(format!(
                "failed to match --worker-nodepools {name}=...: the policy declares no worker {name:?} (spec.clusters: \
                 {})",
                known.join(", ")
            )
            .into());
        }
        let pools = parse_nodepools(&read_file(path)?, &path.display().to_string())?;
        workers.insert(name.clone(), pools);
    }
    let local = match (&args.nodepools, &args.kubeconfig) {
        (None, None) => None,
        _ => Some(load_check_pools(args)?),
    };
    let report = build_fleet_check_report(spec, local.as_deref(), &workers);
    print!("{}", report.to_text());
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
