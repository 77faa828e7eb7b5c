//! Policy checks of a fleet: worker clusters (`spec.clusters`), each tier's `dispatch` and the identities trusted to
//! write MultiKueue's copies on a worker; pure, no I/O.
//!
//! They mirror what the API server and Kueue v0.19.2 refuse: MultiKueueCluster names are object names, the
//! kubeconfig `location` is at most 256 characters, a MultiKueueConfig lists 1 to 20 unique clusters
//! (`kueue.x-k8s.io_multikueueconfigs.yaml`). Kueue's rules on combining admission checks on one ClusterQueue
//! (one MultiKueue check, never per flavor, never next to a ProvisioningRequest check: the ClusterQueue turns
//! inactive with `MultipleMultiKueueAdmissionChecks`, `MultiKueueAdmissionCheckAppliedPerFlavor` or
//! `MultiKueueWithProvisioningRequest`, pkg/cache/scheduler/clusterqueue.go) hold by construction in the plan
//! (docs/guides/fleet.md, "Admission checks"), so no policy can break them.

use super::Problems;
use super::names::{DNS_SUBDOMAIN_RULE, is_dns_subdomain};
use crate::policy::{KubeConfigLocationType, TierPolicySpec};

/// Most clusters in one MultiKueueConfig (Kueue v0.19.2 `spec.clusters` maxItems).
pub const MAX_DISPATCH_CLUSTERS: usize = 20;
/// Longest kubeconfig `location` Kueue v0.19.2 accepts.
pub const MAX_KUBECONFIG_LOCATION_LENGTH: usize = 256;

/// `spec.clusters`, every tier's `dispatch` and `spec.admission.multiKueueUsers`.
pub(super) fn check_fleet(spec: &TierPolicySpec, problems: &mut Problems) {
    problems.duplicates(
        spec.clusters
            .iter()
            .enumerate()
            .map(|(index, cluster)| (format!("spec.clusters[{index}].name"), cluster.name.as_str())),
        "worker cluster",
    );
    for (index, cluster) in spec.clusters.iter().enumerate() {
        let path = format!("spec.clusters[{index}]");
        problems.dns_label(&format!("{path}.name"), &cluster.name, "worker cluster");
        let kube_config = &cluster.cluster_source.kube_config;
        if kube_config.location_type == KubeConfigLocationType::Path {
            problems.push(
                format!("{path}.clusterSource.kubeConfig.locationType"),
                "Path names a file on the Kueue controller's disk, which tiergate cannot read to reconcile the worker",
                "store the kubeconfig in a Secret in Kueue's namespace (key `kubeconfig`) and use locationType: \
                 Secret with the Secret's name as location",
            );
        }
        let location = &kube_config.location;
        if location.len() > MAX_KUBECONFIG_LOCATION_LENGTH || !is_dns_subdomain(location) {
            problems.push(
                format!("{path}.clusterSource.kubeConfig.location"),
                format!(
                    "{location:?} is not a Secret name ({DNS_SUBDOMAIN_RULE}; Kueue allows at most \
                     {MAX_KUBECONFIG_LOCATION_LENGTH} characters)"
                ),
                "name the Secret holding the worker's kubeconfig, e.g. `worker-us-east-kubeconfig`",
            );
        }
    }
    let known: Vec<&str> = spec.clusters.iter().map(|cluster| cluster.name.as_str()).collect();
    for (tier_index, tier) in spec.tiers.iter().enumerate() {
        let Some(dispatch) = &tier.dispatch else { continue };
        let path = format!("spec.tiers[{tier_index}].dispatch.clusters");
        if dispatch.clusters.is_empty() {
            problems.push(
                path.clone(),
                "no worker cluster is listed",
                "list the workers of spec.clusters that serve this tier, or remove `dispatch` to run it here",
            );
        }
        if dispatch.clusters.len() > MAX_DISPATCH_CLUSTERS {
            problems.push(
                path.clone(),
                format!(
                    "{} clusters; a Kueue MultiKueueConfig holds at most {MAX_DISPATCH_CLUSTERS}",
                    dispatch.clusters.len()
                ),
                format!("keep the {MAX_DISPATCH_CLUSTERS} most preferred workers"),
            );
        }
        problems.duplicates(
            dispatch.clusters.iter().enumerate().map(|(index, name)| (format!("{path}[{index}]"), name.as_str())),
            "dispatch cluster",
        );
        for (index, name) in dispatch.clusters.iter().enumerate() {
            if !known.contains(&name.as_str()) {
                let fix = if known.is_empty() {
                    "declare the worker under spec.clusters (name and kubeconfig Secret) first".to_owned()
                } else {
                    format!("use one of spec.clusters: {}, or declare {name:?} there", known.join(", "))
                };
                problems.push(format!("{path}[{index}]"), format!("{name:?} names no worker cluster"), fix);
            }
        }
    }
    for (index, user) in spec.admission.multi_kueue_users.iter().enumerate() {
        if user.trim().is_empty() {
            problems.push(
                format!("spec.admission.multiKueueUsers[{index}]"),
                "empty user name",
                "name the user MultiKueue's kubeconfig authenticates as on this cluster, or remove the entry",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::{ClusterSource, Dispatch, KubeConfigSource, TierPolicy, WorkerCluster};
    use crate::validation::validate_policy;

    fn worker(name: &str) -> WorkerCluster {
        WorkerCluster {
            name: name.to_owned(),
            cluster_source: ClusterSource {
                kube_config: KubeConfigSource { location_type: Default::default(), location: format!("{name}-kc") },
            },
        }
    }

    fn fleet(clusters: &[&str], dispatch: &[&str]) -> TierPolicy {
        let mut policy = crate::inputs::load_policy(None).unwrap();
        policy.spec.clusters = clusters.iter().map(|name| worker(name)).collect();
        policy.spec.tiers[0].dispatch =
            Some(Dispatch { clusters: dispatch.iter().map(|name| (*name).to_owned()).collect() });
        policy
    }

    fn problems(policy: &TierPolicy) -> Vec<String> {
        validate_policy(policy)
            .err()
            .map(|errors| errors.0.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_tier_dispatching_to_declared_workers_is_valid() {
        assert_eq!(problems(&fleet(&["east", "west"], &["west", "east"])), Vec::<String>::new());
    }

    #[test]
    fn an_unknown_cluster_is_named_with_the_known_ones() {
        let found = problems(&fleet(&["east"], &["north"]));
        assert_eq!(
            found,
            ["spec.tiers[0].dispatch.clusters[0]: \"north\" names no worker cluster; fix: use one of spec.clusters: \
              east, or declare \"north\" there"]
        );
    }

    #[test]
    fn duplicates_in_the_cluster_list_and_the_dispatch_list_are_refused() {
        let found = problems(&fleet(&["east", "east"], &["east", "east"]));
        assert!(
            found
                .iter()
                .any(|line| line.starts_with("spec.clusters[1].name: worker cluster \"east\" is declared twice")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|line| line
                .starts_with("spec.tiers[0].dispatch.clusters[1]: dispatch cluster \"east\" is declared twice")),
            "{found:?}"
        );
    }

    #[test]
    fn an_empty_dispatch_list_is_refused_with_the_fix() {
        let found = problems(&fleet(&["east"], &[]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("no worker cluster is listed"), "{found:?}");
        assert!(found[0].contains("remove `dispatch` to run it here"), "{found:?}");
    }

    #[test]
    fn cluster_names_must_be_dns_labels_and_locations_secret_names() {
        let mut policy = fleet(&["East_1"], &["East_1"]);
        policy.spec.clusters[0].cluster_source.kube_config.location = "not a secret".to_owned();
        let found = problems(&policy);
        assert!(
            found.iter().any(
                |line| line.starts_with("spec.clusters[0].name: worker cluster \"East_1\" is not a DNS-1123 label")
            ),
            "{found:?}"
        );
        assert!(
            found.iter().any(|line| line.starts_with(
                "spec.clusters[0].clusterSource.kubeConfig.location: \"not a secret\" is not a Secret name"
            )),
            "{found:?}"
        );
    }

    #[test]
    fn a_kubeconfig_path_is_refused_for_a_secret() {
        let mut policy = fleet(&["east"], &["east"]);
        policy.spec.clusters[0].cluster_source.kube_config.location_type = crate::policy::KubeConfigLocationType::Path;
        let found = problems(&policy);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("spec.clusters[0].clusterSource.kubeConfig.locationType: Path names a file"),
            "{found:?}"
        );
    }

    #[test]
    fn more_workers_than_a_multikueue_config_holds_are_refused() {
        let names: Vec<String> = (0..21).map(|index| format!("w{index}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let found = problems(&fleet(&names, &names));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("21 clusters; a Kueue MultiKueueConfig holds at most 20"), "{found:?}");
    }

    #[test]
    fn an_empty_multikueue_user_is_refused() {
        let mut policy = fleet(&["east"], &["east"]);
        policy.spec.admission.multi_kueue_users = vec![" ".to_owned()];
        assert_eq!(problems(&policy).len(), 1);
    }
}
