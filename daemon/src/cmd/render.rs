//! `tiergate render`: reads a policy (and a cluster view), validates it and prints the desired Kueue objects as
//! a YAML stream or a JSON `List`. Without `--policy` it renders the embedded sample policy and cluster view. A
//! policy with worker clusters renders both sides: this cluster's objects, then each worker's under a
//! `# cluster: <name>` line, each worker from its own `--worker-view NAME=FILE` (default: the `--cluster` view).
//! The Kueue Configuration fragment DRA classes need goes to stderr (`--kueue-config`: alone, to stdout).

use std::collections::BTreeMap;
use std::process::ExitCode;

use super::CmdError;
use crate::cli::{OutputFormat, RenderArgs};
use crate::inputs::{SAMPLE_CLUSTER, load_cluster_view, load_policy, parse_cluster_view};
use crate::plan::dra::{kueue_configuration_fragment, kueue_device_class_mappings};
use crate::plan::fleet::build_fleet;
use crate::plan::gate::{GateMode, build_gate, gate_summary};
use crate::plan::tenants::kueue_admission_fair_sharing;
use crate::policy::TierPolicy;
use crate::trust::find_installed_operators;
use crate::validation::validate_policy;
use crate::view::ClusterView;

/// Says on stderr which operators a policy that names no `trustedControllers` trusts in the cluster file (the plan
/// trusts the same, `trust`).
fn note_installed_operators(policy: &TierPolicy, view: &ClusterView) {
    if policy.spec.admission.trusted_controllers.is_some() {
        return;
    }
    let installed = find_installed_operators(&view.bindings, &view.namespaces_by_name());
    let operators: Vec<&str> = installed.accounts().collect();
    eprintln!(
        "note: spec.admission.trustedControllers is unset, so the gate trusts kube-controller-manager and the \
         operators installed in the cluster file: [{}] (an operator counts as installed where a ClusterRoleBinding \
         of the file binds its service account, e.g. from `kubectl get ns,nodes,clusterrolebindings -o yaml`)",
        operators.join(", ")
    );
}

/// Runs `tiergate render`.
pub fn run(args: RenderArgs) -> Result<ExitCode, CmdError> {
    let policy = load_policy(args.policy.as_deref())?;
    let view = match (&args.policy, &args.cluster) {
        (_, Some(path)) => Some(load_cluster_view(path)?),
        (None, None) => Some(parse_cluster_view(SAMPLE_CLUSTER, "embedded sample cluster view")?),
        (Some(_), None) => None,
    };
    if let Err(errors) = validate_policy(&policy) {
        eprintln!("{errors}");
        return Ok(ExitCode::FAILURE);
    }
    let management = view.clone().unwrap_or_default();
    note_installed_operators(&policy, &management);
    let mut worker_views: BTreeMap<String, ClusterView> = BTreeMap::new();
    for (name, path) in &args.worker_views {
        if policy.spec.cluster(name).is_none() {
            let known: Vec<&str> = policy.spec.clusters.iter().map(|cluster| cluster.name.as_str()).collect();
            return Err(format!(
                "failed to match --worker-view {name}=...: the policy declares no worker {name:?} (spec.clusters: {})",
                known.join(", ")
            )
            .into());
        }
        worker_views.insert(name.clone(), load_cluster_view(path)?);
    }
    for cluster in &policy.spec.clusters {
        if !worker_views.contains_key(&cluster.name) {
            eprintln!(
                "note: no --worker-view {}=FILE given, so worker {} is rendered from this cluster's view (its nodes \
                 decide the notes about missing GPU classes)",
                cluster.name, cluster.name
            );
            worker_views.insert(cluster.name.clone(), management.clone());
        }
    }
    let fragment = kueue_configuration_fragment(&kueue_device_class_mappings(&policy.spec));
    let fair_sharing = kueue_admission_fair_sharing(&policy.spec).map(|block| {
        format!(
            "# Kueue's Configuration: add at its top level, then restart Kueue (the tiers sharing fairly among their \
             tenants need it; without it Kueue orders their queues first come, first served).\n{block}"
        )
    });
    if args.kueue_config {
        let text = match (&fragment, &fair_sharing) {
            (None, None) => "# the policy has no DRA class and no tier sharing fairly among its tenants: Kueue needs \
                             nothing from tiergate in its Configuration\n"
                .to_owned(),
            _ => [fragment.clone(), fair_sharing.clone()].into_iter().flatten().collect::<Vec<_>>().join(""),
        };
        super::write_stdout(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut fleet = build_fleet(&policy, &management, &worker_views);
    let mode = args.gate.mode();
    if mode == GateMode::ValidateOnly {
        fleet.management.mutating_policies.clear();
        fleet.management.mutating_policy_bindings.clear();
    }
    if view.is_none() {
        eprintln!(
            "note: no --cluster given, so only cluster-scoped objects are rendered; LocalQueues need a cluster view \
             (namespaces and their labels): pass --cluster FILE, e.g. from `kubectl get ns,nodes -o yaml`"
        );
    }
    for note in fleet.notes() {
        eprintln!("note: {note}");
    }
    // The arithmetic goes to stderr so stdout stays a stream `kubectl apply -f -` accepts.
    eprint!("{}", crate::plan::quota::quota_summary(&policy.spec));
    eprint!("{}", crate::plan::cohorts::cohort_summary(&policy.spec));
    eprint!("{}", gate_summary(&build_gate(&policy, &crate::plan::owned_labels(&policy)), mode));
    for block in [fragment, fair_sharing].into_iter().flatten() {
        eprint!("{block}");
    }
    let text = match args.output {
        OutputFormat::Yaml => fleet.to_yaml_stream()?,
        OutputFormat::Json if fleet.workers.is_empty() => {
            format!("{}\n", serde_json::to_string_pretty(&fleet.management.to_json_list()?)?)
        }
        OutputFormat::Json => {
            let mut clusters = serde_json::Map::new();
            for (name, desired) in &fleet.workers {
                clusters.insert(name.clone(), desired.to_json_list()?);
            }
            let both = serde_json::json!({"management": fleet.management.to_json_list()?, "workers": clusters});
            format!("{}\n", serde_json::to_string_pretty(&both)?)
        }
    };
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
