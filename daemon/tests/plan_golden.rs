//! Golden tests: every `samples/<name>/policy.yaml` (with its `cluster.yaml`) renders to the committed
//! `samples/<name>/expected.yaml`; a sample with worker clusters (`samples/fleet/`) renders both sides, each worker
//! from its own view `workers/<name>.yaml`, as `tiergate render --worker-view` does. After an intended change, regenerate with
//! `TIERGATE_BLESS=1 cargo test -p tiergate --test plan_golden` and review the diff.

#![cfg(test)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tiergate::inputs::{load_cluster_view, load_policy};
use tiergate::plan::desired;
use tiergate::plan::fleet::{Fleet, build_fleet};
use tiergate::validation::validate_policy;
use tiergate::view::ClusterView;

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples")
}

fn sample_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("policy.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The sample's fleet: its management objects and, for each of its worker clusters, the worker's.
fn plan(dir: &Path) -> Fleet {
    let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
    validate_policy(&policy).unwrap_or_else(|errors| panic!("{}: {errors}", dir.display()));
    let cluster = dir.join("cluster.yaml");
    let view = if cluster.is_file() { load_cluster_view(&cluster).unwrap() } else { ClusterView::default() };
    let workers: BTreeMap<String, ClusterView> = policy
        .spec
        .clusters
        .iter()
        .map(|worker| {
            let path = dir.join("workers").join(format!("{}.yaml", worker.name));
            (
                worker.name.clone(),
                load_cluster_view(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display())),
            )
        })
        .collect();
    let fleet = build_fleet(&policy, &view, &workers);
    assert_eq!(fleet.management, desired(&policy, &view), "the management side is what desired() plans");
    fleet
}

fn render(dir: &Path) -> String {
    plan(dir).to_yaml_stream().unwrap()
}

#[test]
fn every_sample_policy_renders_to_its_committed_expected_yaml() {
    let bless = std::env::var_os("TIERGATE_BLESS").is_some_and(|value| value == "1");
    let dirs = sample_dirs();
    assert!(dirs.len() >= 2, "expected at least the kubenexus and spot-mix samples, found {dirs:?}");
    for dir in dirs {
        let rendered = render(&dir);
        let expected_path = dir.join("expected.yaml");
        if bless {
            std::fs::write(&expected_path, &rendered).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|error| {
            panic!("{}: {error}; run with TIERGATE_BLESS=1 to create it", expected_path.display())
        });
        pretty_assertions::assert_eq!(
            expected,
            rendered,
            "{} differs; TIERGATE_BLESS=1 regenerates it",
            expected_path.display()
        );
    }
}

#[test]
fn the_golden_stream_parses_back_to_the_same_objects() {
    for dir in sample_dirs() {
        let rendered = render(&dir);
        let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&rendered).unwrap();
        let values = plan(&dir).to_values().unwrap();
        let documents: Vec<&serde_json::Value> = documents.iter().filter(|document| !document.is_null()).collect();
        assert_eq!(documents, values.iter().collect::<Vec<_>>(), "{}", dir.display());
    }
}

#[test]
fn every_sample_cluster_queue_offers_exactly_its_tier_quota_summed_over_its_flavors() {
    use tiergate::plan::quota::parse_millis;
    for dir in sample_dirs() {
        let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
        let desired = desired(&policy, &ClusterView::default());
        for tier in &policy.spec.tiers {
            let queue_name = format!("tiergate-{}", tier.name);
            let queue = desired.cluster_queues.iter().find(|queue| queue.metadata.name.as_deref() == Some(&queue_name));
            let group = &queue.unwrap().spec.resource_groups[0];
            for (resource, quota) in &tier.quotas {
                let offered: i128 = group
                    .flavors
                    .iter()
                    .map(|flavor| {
                        let entry = flavor.resources.iter().find(|entry| &entry.name == resource).unwrap();
                        parse_millis(&entry.nominal_quota.0).unwrap()
                    })
                    .sum();
                let total = parse_millis(&quota.nominal.0).unwrap();
                assert_eq!(offered, total, "{}: tier {} {resource}", dir.display(), tier.name);
            }
        }
    }
}

fn fleet_sample() -> Fleet {
    plan(&samples_dir().join("fleet"))
}

fn names_of<T: kube::Resource>(objects: &[T]) -> Vec<String> {
    objects.iter().map(|object| object.meta().name.clone().unwrap_or_default()).collect()
}

fn worker<'f>(fleet: &'f Fleet, name: &str) -> &'f tiergate::plan::Desired {
    &fleet.workers.iter().find(|(worker, _)| worker == name).unwrap().1
}

#[test]
fn the_fleet_management_side_has_one_multikueue_config_per_worker_list_and_one_check_per_dispatching_tier() {
    let fleet = fleet_sample();
    let management = &fleet.management;
    assert_eq!(names_of(&management.multi_kueue_clusters), ["us-east", "eu-west"]);
    let configs = names_of(&management.multi_kueue_configs);
    assert_eq!(configs.len(), 2, "{configs:?}");
    assert!(
        configs[0].starts_with("tiergate-fleet-us-east-eu-west-") && configs[1].starts_with("tiergate-fleet-eu-west-")
    );
    assert_eq!(management.multi_kueue_configs[0].spec.clusters, ["us-east", "eu-west"], "preference order kept");
    assert_eq!(names_of(&management.admission_checks), ["tiergate-gold-multikueue", "tiergate-silver-multikueue"]);
    assert!(management.admission_checks.iter().all(|check| check.spec.controller_name == "kueue.x-k8s.io/multikueue"));
    assert!(management.provisioning_request_configs.is_empty(), "gold's provisioning runs on its workers");
    let checks = |queue: &str| -> Vec<String> {
        let queue = management.cluster_queues.iter().find(|cq| cq.metadata.name.as_deref() == Some(queue)).unwrap();
        let strategy = queue.spec.admission_checks_strategy.as_ref();
        strategy
            .map(|strategy| strategy.admission_checks.iter().map(|rule| rule.name.clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(checks("tiergate-gold"), ["tiergate-gold-multikueue"], "never next to a ProvisioningRequest check");
    assert_eq!(checks("tiergate-silver"), ["tiergate-silver-multikueue"]);
    assert_eq!(checks("tiergate-bronze"), Vec::<String>::new(), "bronze stays local");
}

#[test]
fn each_fleet_worker_gets_the_queues_of_the_tiers_dispatched_to_it_and_no_multikueue_check() {
    let fleet = fleet_sample();
    let east = worker(&fleet, "us-east");
    assert_eq!(names_of(&east.cluster_queues), ["tiergate-gold"]);
    assert_eq!(names_of(&east.resource_flavors), ["h100"]);
    assert_eq!(names_of(&east.namespaces), ["ml-research"]);
    assert_eq!(names_of(&east.admission_checks), ["tiergate-gold-provisioning"]);
    assert_eq!(names_of(&east.provisioning_request_configs), ["tiergate-gold-provisioning"]);
    let west = worker(&fleet, "eu-west");
    assert_eq!(names_of(&west.cluster_queues), ["tiergate-gold", "tiergate-silver"]);
    assert_eq!(names_of(&west.namespaces), ["ml-research", "ml-team-staging"]);
    for (name, desired) in &fleet.workers {
        assert!(desired.multi_kueue_clusters.is_empty() && desired.multi_kueue_configs.is_empty(), "{name}");
        assert!(
            desired.admission_checks.iter().all(|check| check.spec.controller_name != "kueue.x-k8s.io/multikueue"),
            "{name}"
        );
        assert_eq!(desired.notes, Vec::<String>::new(), "{name}: every dispatched class has nodes there");
        for queue in &desired.local_queues {
            let namespace = queue.metadata.namespace.as_deref().unwrap();
            let here =
                fleet.management.local_queues.iter().find(|lq| lq.metadata.namespace.as_deref() == Some(namespace));
            assert_eq!(Some(queue), here, "{name}: the worker's LocalQueue is the management cluster's");
        }
        for queue in &desired.cluster_queues {
            let here =
                fleet.management.cluster_queues.iter().find(|cq| cq.metadata.name == queue.metadata.name).unwrap();
            assert_eq!(queue.spec.resource_groups, here.spec.resource_groups, "{name}: same flavors and quotas");
            assert_eq!(queue.spec.namespace_selector, here.spec.namespace_selector, "{name}");
        }
    }
    let namespace = &west.namespaces[1];
    let labels = namespace.metadata.labels.as_ref().unwrap();
    assert_eq!(labels.get("tenant.kubenexus.io/tier").map(String::as_str), Some("silver"), "tier label carried");
}

#[test]
fn a_worker_missing_the_nodes_of_a_dispatched_class_is_noted() {
    let dir = samples_dir().join("fleet");
    let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
    let view = load_cluster_view(&dir.join("cluster.yaml")).unwrap();
    let workers =
        BTreeMap::from([("eu-west".to_owned(), load_cluster_view(&dir.join("workers/us-east.yaml")).unwrap())]);
    let fleet = build_fleet(&policy, &view, &workers);
    assert_eq!(
        worker(&fleet, "eu-west").notes,
        [
            "worker eu-west has no node of GPU class a100 (tier silver): the tier's workloads dispatched there wait until \
          such nodes join it"
        ]
    );
}

/// Nominal quota per resource a ClusterQueue or Cohort spec offers, summed over its flavors (milli-units).
fn offered(groups: &[tiergate_kueue::ResourceGroup]) -> BTreeMap<String, i128> {
    let mut total = BTreeMap::new();
    for quota in groups.iter().flat_map(|group| group.flavors.iter()).flat_map(|flavor| flavor.resources.iter()) {
        *total.entry(quota.name.clone()).or_insert(0) +=
            tiergate::plan::quota::parse_millis(&quota.nominal_quota.0).unwrap();
    }
    total
}

#[test]
fn every_sample_cohort_holds_exactly_its_pools_and_its_children_and_no_tier_lends_its_floor() {
    use tiergate::plan::cohorts::cohort_nominal;
    use tiergate::plan::quota::parse_millis;
    for dir in sample_dirs() {
        let policy = load_policy(Some(&dir.join("policy.yaml"))).unwrap();
        let desired = desired(&policy, &ClusterView::default());
        // Per cohort, from the rendered objects: its own groups, the queues naming it, and its child cohorts.
        fn subtree(desired: &tiergate::plan::Desired, name: &str) -> BTreeMap<String, i128> {
            let cohort = desired.cohorts.iter().find(|cohort| cohort.metadata.name.as_deref() == Some(name)).unwrap();
            let mut total = offered(&cohort.spec.resource_groups);
            let queues = desired.cluster_queues.iter().filter(|queue| queue.spec.cohort_name.as_deref() == Some(name));
            let children = desired.cohorts.iter().filter(|child| child.spec.parent_name.as_deref() == Some(name));
            let parts = queues
                .map(|queue| offered(&queue.spec.resource_groups))
                .chain(children.map(|child| subtree(desired, child.metadata.name.as_deref().unwrap())));
            for part in parts.collect::<Vec<_>>() {
                for (resource, amount) in part {
                    *total.entry(resource).or_insert(0) += amount;
                }
            }
            total
        }
        for cohort in &policy.spec.cohorts {
            let rendered: BTreeMap<String, i128> =
                subtree(&desired, &cohort.name).into_iter().filter(|(_, amount)| *amount > 0).collect();
            let planned: BTreeMap<String, i128> =
                cohort_nominal(&policy.spec, &cohort.name).into_iter().filter(|(_, amount)| *amount > 0).collect();
            assert_eq!(rendered, planned, "{}: cohort {}", dir.display(), cohort.name);
        }
        for tier in policy.spec.tiers.iter().filter(|tier| tier.sharing.is_some()) {
            let queue = desired
                .cluster_queues
                .iter()
                .find(|queue| queue.metadata.name.as_deref() == Some(&format!("tiergate-{}", tier.name)))
                .unwrap();
            for (resource, floor) in &tier.sharing.as_ref().unwrap().floor {
                let quotas = queue.spec.resource_groups[0].flavors.iter().flat_map(|flavor| flavor.resources.iter());
                let lendable: i128 = quotas
                    .filter(|quota| &quota.name == resource)
                    .map(|quota| parse_millis(&quota.lending_limit.as_ref().unwrap().0).unwrap())
                    .sum();
                let nominal = parse_millis(&tier.quotas[resource].nominal.0).unwrap();
                assert_eq!(
                    lendable,
                    nominal - parse_millis(&floor.0).unwrap(),
                    "{}: tier {} {resource}",
                    dir.display(),
                    tier.name
                );
            }
        }
    }
}
