//! The draining rule on hand-built desired and live ClusterQueues.

use serde_json::json;

use super::*;

const GPU: &str = "nvidia.com/gpu";

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// A ClusterQueue body with one resource group over `covered`, flavors as `(name, [nominal per resource])`.
fn queue(name: &str, cohort: Option<&str>, covered: &[&str], flavors: &[(&str, &[&str])], status: Value) -> Value {
    let flavors: Vec<Value> = flavors
        .iter()
        .map(|(flavor, nominal)| {
            let resources: Vec<Value> = covered
                .iter()
                .zip(nominal.iter())
                .map(|(resource, quota)| json!({"name": resource, "nominalQuota": quota}))
                .collect();
            json!({"name": flavor, "resources": resources})
        })
        .collect();
    let mut spec = json!({"resourceGroups": [{"coveredResources": covered, "flavors": flavors}]});
    if let Some(cohort) = cohort {
        spec["cohortName"] = json!(cohort);
    }
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
           "spec": spec, "status": status})
}

fn flavor(name: &str, topology: &str) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name},
           "spec": {"nodeLabels": {"gpu-class": "h100"}, "topologyName": topology}})
}

fn reservation(flavor: &str, totals: &[(&str, &str)]) -> Value {
    let resources: Vec<Value> =
        totals.iter().map(|(resource, total)| json!({"name": resource, "total": total, "borrowed": "0"})).collect();
    json!({"flavorsReservation": [{"name": flavor, "resources": resources}]})
}

/// `live` objects as the caches would show them, looked up by kind and name.
fn lookup(live: Vec<(KueueKind, Value)>) -> impl Fn(KueueKind, &str) -> Option<LiveObject> {
    let live: Vec<LiveObject> =
        live.into_iter().map(|(kind, value)| LiveObject::from_dynamic(kind, object(value))).collect();
    move |kind, name| live.iter().find(|candidate| candidate.kind == kind && candidate.name == name).cloned()
}

fn flavors_of(queue: &DynamicObject) -> Vec<Value> {
    queue.data["spec"]["resourceGroups"][0]["flavors"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_renamed_flavor_with_running_workloads_stays_frozen_at_what_they_hold_and_the_new_one_gives_it_up() {
    let desired_queue = queue("tiergate-gold", Some("org"), &[GPU], &[("h100-new", &["8"])], json!({}));
    let mut objects = vec![object(flavor("h100-new", "tiergate-block-rack-1")), object(desired_queue)];
    let live_queue =
        queue("tiergate-gold", Some("org"), &[GPU], &[("h100-old", &["8"])], reservation("h100-old", &[(GPU, "3")]));
    let topology = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
                          "metadata": {"name": "tiergate-rack-2"}, "spec": {"levels": [{"nodeLabel": "rack"}]}});
    let live = lookup(vec![
        (KueueKind::ClusterQueue, live_queue),
        (KueueKind::ResourceFlavor, flavor("h100-old", "tiergate-rack-2")),
        (KueueKind::Topology, topology),
    ]);

    let draining = carry_draining_flavors(&mut objects, live);

    assert_eq!(
        draining,
        vec![DrainingFlavor {
            queue: "tiergate-gold".into(),
            flavor: "h100-old".into(),
            held: [(GPU.to_owned(), 3000)].into()
        }]
    );
    assert_eq!(
        draining[0].to_migration(),
        FlavorMigration {
            cluster_queue: "tiergate-gold".into(),
            flavor: "h100-old".into(),
            held: [(GPU.to_owned(), "3".to_owned())].into()
        }
    );
    assert_eq!(
        flavors_of(&objects[1]),
        vec![
            json!({"name": "h100-new", "resources": [{"name": GPU, "nominalQuota": "5"}]}),
            json!({"name": "h100-old", "resources": [{"name": GPU, "nominalQuota": "3", "borrowingLimit": "0", "lendingLimit": "0"}]}),
        ],
        "the tier's total stays 8, and nothing new fits on the old flavor"
    );
    let kept = objects.iter().find(|object| object.metadata.name.as_deref() == Some("h100-old")).unwrap();
    assert_eq!(kept.data["spec"]["topologyName"], "tiergate-rack-2", "the old flavor is kept as it is live");
    assert_eq!(
        kept.data["spec"]["nodeTaints"],
        json!([{"key": DRAINING_TAINT, "value": "true", "effect": "NoSchedule"}]),
        "and closed to new workloads"
    );
    assert_eq!(KueueKind::of(kept), Some(KueueKind::ResourceFlavor));
    let topology = objects.iter().find(|object| object.metadata.name.as_deref() == Some("tiergate-rack-2")).unwrap();
    assert_eq!(KueueKind::of(topology), Some(KueueKind::Topology), "and so is the Topology it names");
    assert_eq!(topology.data["spec"]["levels"], json!([{"nodeLabel": "rack"}]));
    assert_eq!(objects.len(), 4);
}

#[test]
fn a_flavor_that_holds_nothing_or_is_still_wanted_is_not_carried() {
    let desired = || queue("tiergate-gold", None, &[GPU], &[("h100-new", &["8"])], json!({}));
    let idle = queue("tiergate-gold", None, &[GPU], &[("h100-old", &["8"])], reservation("h100-old", &[(GPU, "0")]));
    let mut objects = vec![object(desired())];
    assert!(carry_draining_flavors(&mut objects, lookup(vec![(KueueKind::ClusterQueue, idle)])).is_empty());
    assert_eq!(objects, vec![object(desired())]);

    let same = queue("tiergate-gold", None, &[GPU], &[("h100-new", &["8"])], reservation("h100-new", &[(GPU, "8")]));
    let mut objects = vec![object(desired())];
    assert!(carry_draining_flavors(&mut objects, lookup(vec![(KueueKind::ClusterQueue, same)])).is_empty());
    assert_eq!(objects, vec![object(desired())]);
}

#[test]
fn what_is_held_is_taken_from_the_new_flavors_first_then_from_the_last_never_below_zero() {
    // l4 stays, a100 is new, h100 (a fallback) was removed holding 5 GPUs and 40Gi.
    let covered = [GPU, "memory"];
    let desired =
        queue("tiergate-silver", Some("org"), &covered, &[("l4", &["4", "64Gi"]), ("a100", &["3", "32Gi"])], json!({}));
    let mut desired_object = object(desired);
    desired_object.data["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = json!("4");
    let live_queue = queue(
        "tiergate-silver",
        Some("org"),
        &covered,
        &[("l4", &["4", "64Gi"]), ("h100", &["0", "0Gi"])],
        reservation("h100", &[(GPU, "5"), ("memory", "40Gi")]),
    );
    let mut objects = vec![desired_object];
    let draining = carry_draining_flavors(&mut objects, lookup(vec![(KueueKind::ClusterQueue, live_queue)]));

    assert_eq!(draining.len(), 1);
    let flavors = flavors_of(&objects[0]);
    assert_eq!(flavors[1]["resources"][0]["nominalQuota"], "0", "a100 is new: it gives up all 3 GPUs first");
    assert_eq!(flavors[1]["resources"][1]["nominalQuota"], "0Gi");
    assert_eq!(flavors[0]["resources"][0]["nominalQuota"], "2", "then l4 gives up the other 2");
    assert_eq!(flavors[0]["resources"][0]["lendingLimit"], "2", "and lends no more than it has left");
    assert_eq!(flavors[0]["resources"][1]["nominalQuota"], "56Gi");
    assert_eq!(flavors[2]["name"], "h100");
    assert_eq!(flavors[2]["resources"][1]["nominalQuota"], "40Gi", "written in the unit the live queue used");
    assert!(objects.len() == 1, "h100 is no owned flavor in the caches here: nothing to keep");
}

#[test]
fn outside_a_cohort_the_kept_flavor_sets_no_borrowing_or_lending_limit() {
    let desired = queue("tiergate-gold", None, &[GPU], &[("h100-new", &["2"])], json!({}));
    let live_queue =
        queue("tiergate-gold", None, &[GPU], &[("h100-old", &["2"])], reservation("h100-old", &[(GPU, "2")]));
    let mut objects = vec![object(desired)];
    carry_draining_flavors(&mut objects, lookup(vec![(KueueKind::ClusterQueue, live_queue)]));
    assert_eq!(
        flavors_of(&objects[0]),
        vec![
            json!({"name": "h100-new", "resources": [{"name": GPU, "nominalQuota": "0"}]}),
            json!({"name": "h100-old", "resources": [{"name": GPU, "nominalQuota": "2"}]}),
        ]
    );
}

#[test]
fn only_the_kept_flavor_is_closed_even_when_a_queue_shares_its_name() {
    // A class may be called like a ClusterQueue: the taint goes on the ResourceFlavor only.
    let desired = queue("tiergate-gold", None, &[GPU], &[("h100-new", &["4"])], json!({}));
    let other = queue("tiergate-old", None, &[GPU], &[("h100-new", &["0"])], json!({}));
    let live_queue =
        queue("tiergate-gold", None, &[GPU], &[("tiergate-old", &["4"])], reservation("tiergate-old", &[(GPU, "1")]));
    let mut objects = vec![object(desired), object(other)];
    let live = lookup(vec![
        (KueueKind::ClusterQueue, live_queue),
        (KueueKind::ResourceFlavor, flavor("tiergate-old", "tiergate-rack-2")),
    ]);
    carry_draining_flavors(&mut objects, live);
    let queue = objects
        .iter()
        .find(|object| {
            KueueKind::of(object) == Some(KueueKind::ClusterQueue)
                && object.metadata.name.as_deref() == Some("tiergate-old")
        })
        .unwrap();
    assert!(queue.data["spec"].get("nodeTaints").is_none(), "{}", queue.data);
    let kept = objects.iter().find(|object| KueueKind::of(object) == Some(KueueKind::ResourceFlavor)).unwrap();
    assert_eq!(kept.data["spec"]["nodeTaints"][0]["key"], DRAINING_TAINT);
}

#[test]
fn a_second_draining_flavor_never_takes_from_the_first_ones_frozen_quota() {
    // The new flavor has 3; two old flavors hold 2 each. The new one gives up all 3 and the rest stays over (the
    // tier held more than its quota before the edit); the frozen entries keep exactly what they hold.
    let desired = queue("tiergate-gold", Some("org"), &[GPU], &[("h100-c", &["3"])], json!({}));
    let mut status = reservation("h100-a", &[(GPU, "2")]);
    status["flavorsReservation"]
        .as_array_mut()
        .unwrap()
        .push(reservation("h100-b", &[(GPU, "2")])["flavorsReservation"][0].clone());
    let live_queue = queue("tiergate-gold", Some("org"), &[GPU], &[("h100-b", &["3"]), ("h100-a", &["2"])], status);
    let mut objects = vec![object(desired)];
    let draining = carry_draining_flavors(&mut objects, lookup(vec![(KueueKind::ClusterQueue, live_queue)]));
    assert_eq!(draining.len(), 2);
    let nominal: Vec<(String, String)> = flavors_of(&objects[0])
        .iter()
        .map(|flavor| {
            (
                flavor["name"].as_str().unwrap().to_owned(),
                flavor["resources"][0]["nominalQuota"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        nominal,
        vec![("h100-c".into(), "0".into()), ("h100-b".into(), "2".into()), ("h100-a".into(), "2".into())]
    );
}

#[test]
fn a_renamed_tiers_new_queue_gives_up_what_the_retired_queues_workloads_hold() {
    // gold was renamed gold2: tiergate-gold (retired, terminating) holds 3 on h100 and 1 on l4; tiergate-gold2 has
    // h100 4 and l4 2. Other queues are untouched.
    let renamed = queue("tiergate-gold2", Some("org"), &[GPU], &[("h100", &["4"]), ("l4", &["2"])], json!({}));
    let other = queue("tiergate-bronze", Some("org"), &[GPU], &[("l4", &["2"])], json!({}));
    let mut objects = vec![object(renamed), object(other.clone())];
    let retiring = RetiringQueue {
        queue: "tiergate-gold".into(),
        successors: vec!["tiergate-gold2".into()],
        held: [
            ("h100".to_owned(), [(GPU.to_owned(), 3000)].into()),
            ("l4".to_owned(), [(GPU.to_owned(), 1000)].into()),
        ]
        .into(),
    };
    count_retiring_queues(&mut objects, &[retiring]);
    let nominal = |object: &DynamicObject| -> Vec<String> {
        flavors_of(object)
            .iter()
            .map(|flavor| flavor["resources"][0]["nominalQuota"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(nominal(&objects[0]), vec!["1", "1"], "each flavor gives up what the retired queue holds on it");
    assert_eq!(objects[1], object(other));

    // More held on h100 than the new queue has there: the rest comes from its other flavors, never below zero.
    let renamed = queue("tiergate-gold2", Some("org"), &[GPU], &[("h100", &["2"]), ("l4", &["2"])], json!({}));
    let mut objects = vec![object(renamed)];
    let retiring = RetiringQueue {
        queue: "tiergate-gold".into(),
        successors: vec!["tiergate-gold2".into()],
        held: [("h100".to_owned(), [(GPU.to_owned(), 5000)].into())].into(),
    };
    count_retiring_queues(&mut objects, &[retiring]);
    assert_eq!(nominal(&objects[0]), vec!["0", "0"]);
}
