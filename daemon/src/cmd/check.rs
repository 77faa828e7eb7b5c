//! `tiergate check`: reads a policy and nodepools, prints which pools can host each tier, and exits non-zero
//! unless every tier matches exactly one pool per GPU class (and placement rule; among Karpenter NodePools, one
//! of strictly highest weight). Warnings (lower-weight NodePools that can also host a tier, NodePool limits below
//! the quota they host) are printed for the files and the live cluster alike and never change the exit status.
//! With `--fleet`, each tier that dispatches is checked against each of its workers' own nodepools files instead.
//! With `--kubeconfig` and DRA classes, Kueue's Configuration must also map each class's DeviceClass, and with
//! tiers sharing among their tenants hold the `admissionFairSharing` they need
//! (`reconcile::monitor::kueue_config`). With `--kubeconfig`, it also reports what the cluster serves of what the
//! policy renders (`live::served`): the in-server gate's halves, DRA, Karpenter, the Kueue fields its CRDs keep.

use std::collections::BTreeMap;
use std::process::ExitCode;

use super::CmdError;
use crate::check::fleet::build_fleet_check_report;
use crate::check::{NodePool, build_check_report, build_nodepool_warnings, parse_nodepools};
use crate::cli::{CheckArgs, Exit};
use crate::inputs::read_file;
use crate::live::pools::fetch_live_pools;
use crate::live::served::{
    ServedReport, THIS_CLUSTER, build_served_report, fetch_served_facts, served_facts_of_version,
};
use crate::live::{KubectlConnection, LiveError, connect};
use crate::plan::dra::kueue_device_class_mappings;
use crate::plan::tenants::any_tier_shares;
use crate::policy::{Tier, TierPolicy, TierPolicySpec};
use crate::reconcile::desired::desired_cluster_objects;
use crate::reconcile::monitor::kueue_config::{
    KueueFairSharingCheck, KueueMappingCheck, build_kueue_fair_sharing_check, build_kueue_mapping_check,
    read_kueue_configuration,
};

/// Runs `tiergate check`.
pub fn run(args: CheckArgs) -> Result<ExitCode, CmdError> {
    let policy = super::load_valid_policy(Some(&args.policy))?;
    let (live_pools, kueue, sharing, mut served) = match fetch_live_inputs(&args, &policy)? {
        Some(live) => (Some(live.pools), live.kueue_check, live.fair_sharing_check, Some(live.served)),
        None => (None, None, None, None),
    };
    if let Some(version) = args.kubernetes_version {
        let rendered = desired_cluster_objects(&policy).map_err(|error| error.to_string())?;
        let facts = served_facts_of_version(version.minor, &rendered);
        served = Some(build_served_report(&format!("Kubernetes {version}"), &rendered, &facts));
    }
    let passed = if args.fleet {
        run_fleet(&args, &policy.spec, live_pools)?
    } else {
        let pools = load_check_pools(&args, live_pools.unwrap_or_default())?;
        let report = build_check_report(&policy.spec, &pools);
        super::write_stdout(&report.to_text())?;
        report.passed()
    };
    if let Some(kueue) = &kueue {
        super::write_stdout(&kueue.to_text())?;
    }
    if let Some(sharing) = &sharing {
        super::write_stdout(&sharing.to_text())?;
    }
    if let Some(served) = &served {
        super::write_stdout(&served.to_text())?;
    }
    let passed = passed
        && served.as_ref().is_none_or(ServedReport::passed)
        && kueue.as_ref().is_none_or(KueueMappingCheck::passed)
        && sharing.as_ref().is_none_or(KueueFairSharingCheck::passed);
    Ok(if passed { Exit::Success } else { Exit::Failure }.into())
}

/// What `--kubeconfig` reads from the live cluster.
struct LiveInputs {
    /// Its Karpenter NodePools and node groups (never empty unless `--nodepools` names pools).
    pools: Vec<NodePool>,
    /// Kueue's `deviceClassMappings` against the policy's DRA classes (`None` without DRA classes).
    kueue_check: Option<KueueMappingCheck>,
    /// Kueue's `admissionFairSharing` against the policy's sharing tiers (`None` when no tier shares).
    fair_sharing_check: Option<KueueFairSharingCheck>,
    /// What the cluster serves of what the policy renders.
    served: ServedReport,
}

/// Connects once (with `--kubeconfig`) and reads the live pools and, when the policy has DRA classes, Kueue's
/// Configuration from `--kueue-namespace`, and what it serves of the policy's cluster-scoped objects.
fn fetch_live_inputs(args: &CheckArgs, policy: &TierPolicy) -> Result<Option<LiveInputs>, CmdError> {
    let Some(kubeconfig) = &args.kubeconfig else { return Ok(None) };
    let spec = &policy.spec;
    let needed = kueue_device_class_mappings(spec);
    let rendered = desired_cluster_objects(policy).map_err(|error| error.to_string())?;
    let connection = KubectlConnection { kubeconfig: Some(kubeconfig.clone()), context: args.context.clone() };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (pools, kueue_read, served) = runtime.block_on(async {
        let (client, _) = connect(&connection).await?;
        let pools = fetch_live_pools(&client).await?;
        let served = fetch_served_facts(&client, &rendered).await;
        let kueue_read = if needed.is_empty() && !any_tier_shares(spec) {
            None
        } else {
            Some(read_kueue_configuration(&client, &args.kueue_namespace).await)
        };
        Ok::<_, LiveError>((pools, kueue_read, served))
    })?;
    if pools.is_empty() && args.nodepools.is_none() {
        return Err("failed to find any live pool: the cluster has no nodes and no Karpenter NodePools (name the \
                    pools to check against with --nodepools)"
            .into());
    }
    let fair_sharing_check =
        kueue_read.as_ref().and_then(|read| build_kueue_fair_sharing_check(&args.kueue_namespace, spec, read));
    let kueue_check = kueue_read.and_then(|read| build_kueue_mapping_check(&args.kueue_namespace, needed, &read));
    let served = build_served_report(THIS_CLUSTER, &rendered, &served);
    Ok(Some(LiveInputs { pools, kueue_check, fair_sharing_check, served }))
}

/// The pools `tiergate check` matches against: those of `--nodepools`, then the `live` ones.
fn load_check_pools(args: &CheckArgs, live: Vec<NodePool>) -> Result<Vec<NodePool>, CmdError> {
    let mut pools = match &args.nodepools {
        Some(path) => parse_nodepools(&read_file(path)?, &path.display().to_string())?,
        None => Vec::new(),
    };
    pools.extend(live);
    Ok(pools)
}

/// Prints the fleet report; true when it passed. `live`: the pools `--kubeconfig` read.
fn run_fleet(args: &CheckArgs, spec: &TierPolicySpec, live: Option<Vec<NodePool>>) -> Result<bool, CmdError> {
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
    let local = match (&args.nodepools, live) {
        (None, None) => None,
        (_, live) => Some(load_check_pools(args, live.unwrap_or_default())?),
    };
    let report = build_fleet_check_report(spec, local.as_deref(), &workers);
    super::write_stdout(&report.to_text())?;
    if let (Some(pools), Some(tiers)) = (&local, &report.local) {
        let running: Vec<&Tier> = spec.tiers.iter().filter(|tier| tier.dispatch.is_none()).collect();
        for warning in build_nodepool_warnings(spec, tiers, &running, pools) {
            super::write_stdout(&format!("warning: this cluster: {warning}\n"))?;
        }
    }
    for worker in &report.workers {
        let Some(pools) = workers.get(&worker.worker) else { continue };
        let running: Vec<&Tier> = spec.tiers_dispatched_to(&worker.worker).collect();
        for warning in build_nodepool_warnings(spec, &worker.tiers, &running, pools) {
            super::write_stdout(&format!("warning: worker {}: {warning}\n", worker.worker))?;
        }
    }
    Ok(report.passed())
}
