//! `tiergate render`: reads a policy (and a cluster view), validates it and prints the desired Kueue objects as
//! a YAML stream or a JSON `List`. Without `--policy` it renders the embedded sample policy and cluster view. A
//! policy with worker clusters renders both sides: this cluster's objects, then each worker's under a
//! `# cluster: <name>` line, each worker from its own `--worker-view NAME=FILE` (default: the `--cluster` view).
//! The Kueue Configuration fragment DRA classes need goes to stderr (`--kueue-config`: alone, to stdout). The
//! in-server gate is the one the target API server serves: `--gate`, else by `--kubernetes-version`, else by the
//! version `--kubeconfig`'s API server reports (`GET /version`), else 1.36's, said on stderr. Quota windows: the base
//! quotas, or with `--at` the quotas in force at that instant.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use k8s_openapi::jiff::Timestamp;

use super::CmdError;
use crate::cli::{Exit, GateArg, KubernetesVersion, OutputFormat, RenderArgs};
use crate::inputs::{SAMPLE_CLUSTER, load_cluster_view, parse_cluster_view};
use crate::live::{KubectlConnection, LiveError, connect};
use crate::plan::dra::{kueue_configuration_fragment, kueue_device_class_mappings};
use crate::plan::fleet::build_fleet;
use crate::plan::gate::{GateMode, build_gate, gate_summary};
use crate::plan::quota_windows::build_windows_in_force;
use crate::plan::tenants::{kueue_admission_fair_sharing, kueue_usage_truncation_warning};
use crate::policy::TierPolicy;
use crate::trust::find_installed_operators;
use crate::view::ClusterView;
use tiergate_core::syntax::parse_timestamp;

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

/// The policy with the quota windows in force at `--at` applied, said on stderr; without `--at`, the policy as written
/// (its base quotas) and a note naming the tiers' windows.
fn build_policy_at(policy: TierPolicy, at: Option<&str>) -> Result<TierPolicy, CmdError> {
    let Some(at) = at else {
        for tier in policy.spec.tiers.iter().filter(|tier| !tier.quota_windows.is_empty()) {
            let names: Vec<&str> = tier.quota_windows.iter().map(|window| window.name.as_str()).collect();
            eprintln!(
                "note: tier {} has quota windows [{}]; rendered with its base quotas (--at now, or --at an RFC 3339 \
                 instant, renders the quotas in force then)",
                tier.name,
                names.join(", ")
            );
        }
        return Ok(policy);
    };
    let instant = if at == "now" {
        Timestamp::now()
    } else {
        parse_timestamp(at).ok_or_else(|| {
            format!("failed to read --at {at:?}: not `now` or an RFC 3339 instant such as 2026-12-24T20:00:00+01:00")
        })?
    };
    let windows = build_windows_in_force(&policy.spec, instant);
    for tier in &windows.tiers {
        let in_force = tier.in_force.as_deref().map_or("its base quotas".to_owned(), |name| format!("window {name:?}"));
        let next = match (tier.next_change, &tier.next_in_force) {
            (Some(change), Some(next)) => format!("window {next:?} from {change}"),
            (Some(change), None) => format!("its base quotas from {change}"),
            (None, _) => "no change within two weeks".to_owned(),
        };
        eprintln!("note: at {instant}, tier {} has {in_force} in force; then {next}", tier.tier);
    }
    Ok(TierPolicy { spec: windows.spec, ..policy })
}

/// Runs `tiergate render`.
pub fn run(args: RenderArgs) -> Result<ExitCode, CmdError> {
    let policy = build_policy_at(super::load_valid_policy(args.policy.as_deref())?, args.at.as_deref())?;
    let view = match (&args.policy, &args.cluster) {
        (_, Some(path)) => Some(load_cluster_view(path)?),
        (None, None) => Some(parse_cluster_view(SAMPLE_CLUSTER, "embedded sample cluster view")?),
        (Some(_), None) => None,
    };
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
        let warning = kueue_usage_truncation_warning(&policy.spec).map(|warning| format!("# note: {warning}\n"));
        format!(
            "# Kueue's Configuration: add at its top level, then restart Kueue (the tiers sharing fairly among their \
             tenants need it; without it Kueue orders their queues first come, first served).\n{}{block}",
            warning.unwrap_or_default()
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
        return Ok(Exit::Success.into());
    }
    let mode = choose_gate(&args)?.mode();
    let mut fleet = build_fleet(&policy, &management, &worker_views);
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
    Ok(Exit::Success.into())
}

/// The gate to render: `--gate`, else the one the target Kubernetes version serves (`--kubernetes-version`, else
/// `--kubeconfig`'s API server's, else [`KubernetesVersion::NEWEST`], said on stderr). `--gate
/// validate-and-mutate` for a version without MutatingAdmissionPolicy is refused.
fn choose_gate(args: &RenderArgs) -> Result<GateArg, CmdError> {
    let version = match (args.kubernetes_version, &args.kubeconfig) {
        (Some(version), _) => Some(version),
        (None, Some(path)) => {
            let version = fetch_server_version(path, args.context.clone())?;
            eprintln!("note: the API server of {} runs Kubernetes {version}", path.display());
            Some(version)
        }
        (None, None) => None,
    };
    match (args.gate, version) {
        (Some(GateArg::ValidateAndMutate), Some(version)) if version.gate() == GateArg::ValidateOnly => Err(format!(
            "failed to render --gate validate-and-mutate for Kubernetes {version}: MutatingAdmissionPolicy is served \
             from Kubernetes {}; drop --gate (or pass --gate validate-only)",
            KubernetesVersion::MUTATING_POLICIES
        )
        .into()),
        (Some(gate), _) => Ok(gate),
        (None, Some(version)) => Ok(version.gate()),
        (None, None) => {
            let older: Vec<String> = (KubernetesVersion::OLDEST.minor..KubernetesVersion::MUTATING_POLICIES.minor)
                .map(|minor| KubernetesVersion { minor, ..KubernetesVersion::OLDEST }.to_string())
                .collect();
            eprintln!(
                "note: rendering for Kubernetes {} (the gate's Validating- and MutatingAdmissionPolicies); for an older \
                 API server pass --kubernetes-version {} (the validating half only), or --kubeconfig to ask the cluster",
                KubernetesVersion::NEWEST,
                older.join("|")
            );
            Ok(KubernetesVersion::NEWEST.gate())
        }
    }
}

/// The Kubernetes version the API server of `kubeconfig` reports (`GET /version`), refused outside the versions
/// `render` supports.
fn fetch_server_version(kubeconfig: &Path, context: Option<String>) -> Result<KubernetesVersion, CmdError> {
    let connection = KubectlConnection { kubeconfig: Some(kubeconfig.to_owned()), context };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let info = runtime.block_on(async {
        let (client, _) = connect(&connection).await?;
        client
            .apiserver_version()
            .await
            .map_err(|error| LiveError::Get { what: "the API server's version (/version)".to_owned(), error })
    })?;
    // An API server run with --emulated-version serves the APIs of the version it emulates (emulationMajor and
    // emulationMinor, Kubernetes 1.33+), not of its binary's. Managed clusters report minors such as "33+"; the
    // git version ("v1.33.4-eks-...") says the same.
    let (major, minor) = match (&info.emulation_major, &info.emulation_minor) {
        (Some(major), Some(minor)) if !major.is_empty() && !minor.is_empty() => (major.as_str(), minor.as_str()),
        _ => (info.major.as_str(), info.minor.as_str()),
    };
    let version = KubernetesVersion::parse(&format!("{major}.{}", minor.trim_end_matches('+')))
        .or_else(|_| KubernetesVersion::parse(info.git_version.split('-').next().unwrap_or_default()))?;
    version.supported().map_err(|error| {
        format!(
            "failed to render for the API server of {}: {error}; pass --kubernetes-version to render for a supported \
             one",
            kubeconfig.display()
        )
        .into()
    })
}
