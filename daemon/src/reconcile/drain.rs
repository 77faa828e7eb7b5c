//! Flavors a tier's ClusterQueue still holds quota on after the policy moved the tier off them (a class whose
//! Topology changed is a new flavor, since Kueue keeps `topologyName` immutable; a fallback class removed): kept in
//! the queue, frozen at what they hold, until they hold nothing; pure, no I/O.
//!
//! Kueue counts quota per flavor, so a renamed flavor starts empty while the workloads admitted on the old one keep
//! running. Dropping the old flavor at once would let the tier take its whole quota again on the new one. Instead,
//! while the live queue's `status.flavorsReservation` shows quota held on a flavor the policy no longer gives it:
//! - the flavor stays in the queue (last in its resource group), its nominal quota exactly what its workloads hold,
//!   with no borrowing or lending (in a cohort); when no queue is given it any more, its ResourceFlavor also gets
//!   the node taint [`DRAINING_TAINT`] (on the flavor only), so Kueue admits nothing new on it;
//! - the same amount is taken from the group's other flavors, the new ones first, so the tier's total stays the
//!   policy's;
//! - its ResourceFlavor, and the Topology it names, stay as they are live (Kueue stops a queue whose flavor or
//!   flavor's Topology is missing), so Kueue's `resource-in-use` finalizer never blocks a prune.
//!
//! Once its workloads finish (the queue's status changes re-run the reconcile), the flavor leaves the queue and,
//! when no other queue names it, is pruned. docs/reconcile.md, "Flavor migrations".

use std::collections::{BTreeMap, BTreeSet};

use kube::core::DynamicObject;
use serde_json::{Value, json};

use super::kinds::KueueKind;
use super::live::LiveObject;
use crate::plan::quota::{format_millis, parse_millis};
use crate::policy::FlavorMigration;

/// The `nodeTaints` key that closes a kept flavor no queue is given any more to new workloads.
pub const DRAINING_TAINT: &str = "tiergate.io/draining";

/// A flavor kept in a ClusterQueue until its workloads finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainingFlavor {
    /// The ClusterQueue.
    pub queue: String,
    /// The flavor the policy no longer gives it.
    pub flavor: String,
    /// What its workloads hold, per resource, in milli-units.
    pub held: BTreeMap<String, i128>,
}

impl DrainingFlavor {
    /// The status entry (`status.flavorMigrations`) of this flavor, quantities in decimal units.
    pub fn to_migration(&self) -> FlavorMigration {
        FlavorMigration {
            cluster_queue: self.queue.clone(),
            flavor: self.flavor.clone(),
            held: self.held.iter().map(|(resource, millis)| (resource.clone(), format_millis(*millis, ""))).collect(),
        }
    }
}

/// Adds to each ClusterQueue of `objects` (the policy's cluster-scoped objects, before stamping) the flavors its live
/// self (`live`, by kind and name) still holds quota on and the policy no longer names, frozen at what they hold, and
/// takes the same amount from the queue's other flavors; adds the live ResourceFlavor of each when the policy no
/// longer has it. Returns what is kept.
pub fn carry_draining_flavors(
    objects: &mut Vec<DynamicObject>,
    live: impl Fn(KueueKind, &str) -> Option<LiveObject>,
) -> Vec<DrainingFlavor> {
    let mut draining = Vec::new();
    for object in objects.iter_mut().filter(|object| KueueKind::of(object) == Some(KueueKind::ClusterQueue)) {
        let Some(name) = object.metadata.name.clone() else { continue };
        let Some(queue) = live(KueueKind::ClusterQueue, &name) else { continue };
        // The steady state: every flavor holding quota is one the policy gives (no live body is parsed).
        let given: BTreeSet<String> = flavor_names(&object.data).collect();
        if queue.reserved.keys().all(|flavor| given.contains(flavor)) {
            continue;
        }
        draining.extend(carry_into_queue(&name, &mut object.data, &queue));
    }
    let flavors: BTreeSet<&str> = draining.iter().map(|drain| drain.flavor.as_str()).collect();
    let kept = keep_live(objects, KueueKind::ResourceFlavor, flavors.iter().copied(), &live);
    let is_kept = |object: &DynamicObject| {
        KueueKind::of(object) == Some(KueueKind::ResourceFlavor)
            && object.metadata.name.as_ref().is_some_and(|name| kept.contains(name))
    };
    for flavor in objects.iter_mut().filter(|object| is_kept(object)) {
        closed_to_new_workloads(flavor);
    }
    let topologies: BTreeSet<String> = objects
        .iter()
        .filter(|object| KueueKind::of(object) == Some(KueueKind::ResourceFlavor))
        .filter(|object| object.metadata.name.as_deref().is_some_and(|name| flavors.contains(name)))
        .filter_map(|object| object.data.pointer("/spec/topologyName").and_then(Value::as_str).map(str::to_owned))
        .collect();
    keep_live(objects, KueueKind::Topology, topologies.iter().map(String::as_str), &live);
    draining
}

/// A ClusterQueue the policy no longer has (its tier renamed or removed) whose workloads still hold quota, counted
/// against the queues its namespaces feed now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetiringQueue {
    /// The retired ClusterQueue (Kueue keeps it, terminating, until its admitted workloads finish).
    pub queue: String,
    /// The policy's ClusterQueues of the tiers its namespaces are in now, each giving up what it holds.
    pub successors: Vec<String>,
    /// What its workloads hold, per flavor and resource, in milli-units.
    pub held: BTreeMap<String, BTreeMap<String, i128>>,
}

/// Takes what each retiring queue's workloads hold from each of its successors in `objects` (the policy's
/// ClusterQueues, before stamping): a renamed tier's new queue does not offer again what the old one's running
/// workloads hold. Each amount comes from the successor's flavor of the same name first, then from its other
/// flavors covering the resource, the last in Kueue's try order first, never below zero.
pub fn count_retiring_queues(objects: &mut [DynamicObject], retiring: &[RetiringQueue]) {
    for retired in retiring {
        for successor in &retired.successors {
            let found = objects.iter_mut().find(|object| {
                KueueKind::of(object) == Some(KueueKind::ClusterQueue)
                    && object.metadata.name.as_deref() == Some(successor.as_str())
            });
            let Some(queue) = found else { continue };
            for (flavor, resources) in &retired.held {
                for (resource, millis) in resources {
                    take_for_retired(&mut queue.data, flavor, resource, *millis);
                }
            }
        }
    }
}

/// Takes `millis` of `resource` from the queue body's flavors covering it: flavor `preferred` first, then the others
/// from the last; never below zero, lending limits lowered to what is left.
fn take_for_retired(queue: &mut Value, preferred: &str, resource: &str, millis: i128) {
    let Some(groups) = queue.pointer_mut("/spec/resourceGroups").and_then(Value::as_array_mut) else { return };
    let Some(group) = groups.iter_mut().find(|group| covered_resources(group).contains(resource)) else { return };
    let Some(flavors) = group.get_mut("flavors").and_then(Value::as_array_mut) else { return };
    let is_preferred = |index: &usize| flavors[*index].get("name").and_then(Value::as_str) == Some(preferred);
    let mut order: Vec<usize> = (0..flavors.len()).filter(is_preferred).collect();
    order.extend((0..flavors.len()).rev().filter(|index| !is_preferred(index)));
    take_in_order(flavors, &order, resource, millis);
}

/// Adds the live object of `kind` for each of `names` that `objects` does not have (a kept flavor, and the Topology
/// a kept flavor names: a flavor whose Topology is gone makes Kueue stop the whole queue); returns the names added.
fn keep_live<'a>(
    objects: &mut Vec<DynamicObject>,
    kind: KueueKind,
    names: impl Iterator<Item = &'a str>,
    live: &impl Fn(KueueKind, &str) -> Option<LiveObject>,
) -> BTreeSet<String> {
    let wanted: BTreeSet<String> = objects
        .iter()
        .filter(|object| KueueKind::of(object) == Some(kind))
        .filter_map(|object| object.metadata.name.clone())
        .collect();
    let mut added = BTreeSet::new();
    for name in names.filter(|name| !wanted.contains(*name)) {
        if let Some(object) = live(kind, name).and_then(|live| rebuild_live(&live)) {
            objects.push(object);
            added.insert(name.to_owned());
        }
    }
    added
}

/// Adds [`DRAINING_TAINT`] to a kept flavor that no queue is given any more: Kueue assigns a flavor only to pods
/// that tolerate its `nodeTaints` (flavor tolerations included), so from then on quota freed on it admits nothing
/// new there, and pending workloads wait for the new flavor. The admitted ones keep running (Kueue does not check
/// them again), and the taint is on the flavor only, never on a node. `nodeTaints` is mutable.
fn closed_to_new_workloads(flavor: &mut DynamicObject) {
    let taint = json!({"key": DRAINING_TAINT, "value": "true", "effect": "NoSchedule"});
    let Some(spec) = flavor.data.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let taints = spec.entry("nodeTaints").or_insert_with(|| json!([]));
    if let Some(taints) = taints.as_array_mut()
        && !taints.iter().any(|existing| existing["key"] == DRAINING_TAINT)
    {
        taints.push(taint);
    }
}

/// The draining flavors of one desired queue body `desired` (`{"spec": ...}`) against its live self.
fn carry_into_queue(name: &str, desired: &mut Value, live: &LiveObject) -> Vec<DrainingFlavor> {
    let live_body = live.body_value();
    let in_cohort = desired.pointer("/spec/cohortName").is_some_and(Value::is_string);
    let desired_flavors: BTreeSet<String> = flavor_names(desired).collect();
    let live_flavors: BTreeSet<String> = flavor_names(&live_body).collect();
    let mut draining = Vec::new();
    let live_groups = live_body.pointer("/spec/resourceGroups").and_then(Value::as_array).cloned().unwrap_or_default();
    for live_group in &live_groups {
        let covered = covered_resources(live_group);
        for live_flavor in live_group.get("flavors").and_then(Value::as_array).into_iter().flatten() {
            let Some(flavor) = live_flavor.get("name").and_then(Value::as_str) else { continue };
            let Some(held) = live.reserved.get(flavor).filter(|_| !desired_flavors.contains(flavor)) else { continue };
            let Some(group) = desired_group_covering(desired, &covered) else { continue };
            let order = covered_order(group);
            let entry = frozen_flavor(flavor, live_flavor, held, &order, in_cohort);
            for (resource, millis) in held {
                take_from_group(group, resource, *millis, &desired_flavors, &live_flavors);
            }
            if let Some(flavors) = group.get_mut("flavors").and_then(Value::as_array_mut) {
                flavors.push(entry);
            }
            draining.push(DrainingFlavor { queue: name.to_owned(), flavor: flavor.to_owned(), held: held.clone() });
        }
    }
    draining
}

/// Every flavor name of a ClusterQueue body.
fn flavor_names(queue: &Value) -> impl Iterator<Item = String> + '_ {
    let groups = queue.pointer("/spec/resourceGroups").and_then(Value::as_array);
    groups
        .into_iter()
        .flatten()
        .flat_map(|group| group.get("flavors").and_then(Value::as_array).into_iter().flatten())
        .filter_map(|flavor| flavor.get("name").and_then(Value::as_str).map(str::to_owned))
}

/// A resource group's `coveredResources`, as a set.
fn covered_resources(group: &Value) -> BTreeSet<String> {
    covered_order(group).into_iter().collect()
}

/// A resource group's `coveredResources`, in order (Kueue wants each flavor's resources in this order).
fn covered_order(group: &Value) -> Vec<String> {
    let covered = group.get("coveredResources").and_then(Value::as_array);
    covered.into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// The desired resource group covering exactly `covered`.
fn desired_group_covering<'a>(desired: &'a mut Value, covered: &BTreeSet<String>) -> Option<&'a mut Value> {
    let groups = desired.pointer_mut("/spec/resourceGroups").and_then(Value::as_array_mut)?;
    groups.iter_mut().find(|group| covered_resources(group) == *covered)
}

/// The flavor entry that keeps `flavor` at what it holds: nominal quota = held, and in a cohort no borrowing and no
/// lending. Quantities are written in the unit the live entry used.
fn frozen_flavor(
    flavor: &str,
    live_entry: &Value,
    held: &BTreeMap<String, i128>,
    order: &[String],
    in_cohort: bool,
) -> Value {
    let resources: Vec<Value> = order
        .iter()
        .map(|resource| {
            let like = nominal_text(live_entry, resource).unwrap_or_default();
            let nominal = format_millis(held.get(resource).copied().unwrap_or(0), &like);
            if in_cohort {
                json!({"name": resource, "nominalQuota": nominal, "borrowingLimit": "0", "lendingLimit": "0"})
            } else {
                json!({"name": resource, "nominalQuota": nominal})
            }
        })
        .collect();
    json!({"name": flavor, "resources": resources})
}

/// A flavor entry's `nominalQuota` of `resource`, as written.
fn nominal_text(entry: &Value, resource: &str) -> Option<String> {
    let resources = entry.get("resources").and_then(Value::as_array)?;
    let found = resources.iter().find(|candidate| candidate.get("name").and_then(Value::as_str) == Some(resource))?;
    found.get("nominalQuota").and_then(quantity_text)
}

/// Takes `millis` of `resource` from the group's flavors the policy gives (`desired`; never from a flavor kept
/// frozen): first those the live queue does not have yet (the new ones), then the rest, each from the last in
/// Kueue's try order; never below zero. A lending limit above what is left is lowered to it.
fn take_from_group(
    group: &mut Value,
    resource: &str,
    millis: i128,
    desired: &BTreeSet<String>,
    live_flavors: &BTreeSet<String>,
) {
    let Some(flavors) = group.get_mut("flavors").and_then(Value::as_array_mut) else { return };
    let name = |flavor: &Value| flavor.get("name").and_then(Value::as_str).map(str::to_owned).unwrap_or_default();
    let given: Vec<usize> =
        (0..flavors.len()).rev().filter(|index| desired.contains(&name(&flavors[*index]))).collect();
    let is_new = |index: &usize| !live_flavors.contains(&name(&flavors[*index]));
    let mut order: Vec<usize> = given.iter().copied().filter(is_new).collect();
    order.extend(given.iter().copied().filter(|index| !is_new(index)));
    take_in_order(flavors, &order, resource, millis);
}

/// Takes `millis` of `resource` from `flavors` in `order`, never below zero; a lending limit above what is left is
/// lowered to it.
fn take_in_order(flavors: &mut [Value], order: &[usize], resource: &str, millis: i128) {
    let mut remaining = millis;
    for &index in order {
        if remaining <= 0 {
            break;
        }
        let entries = flavors[index].get_mut("resources").and_then(Value::as_array_mut);
        let Some(entry) = entries.into_iter().flatten().find(|entry| entry["name"] == resource) else { continue };
        let Some(text) = entry.get("nominalQuota").and_then(quantity_text) else { continue };
        let Some(nominal) = parse_millis(&text) else { continue };
        let taken = nominal.min(remaining);
        let left = nominal - taken;
        remaining -= taken;
        entry["nominalQuota"] = Value::String(format_millis(left, &text));
        let lending = entry.get("lendingLimit").and_then(quantity_text);
        if let Some(lending) = lending.filter(|lending| parse_millis(lending).is_some_and(|limit| limit > left)) {
            entry["lendingLimit"] = Value::String(format_millis(left, &lending));
        }
    }
}

/// A quantity as text (the plan writes strings; a number is read as whole units).
fn quantity_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// A cluster-scoped object as it is live, to apply unchanged while a queue needs it.
fn rebuild_live(live: &LiveObject) -> Option<DynamicObject> {
    let mut body = live.body_value();
    let fields = body.as_object_mut()?;
    fields.insert("apiVersion".to_owned(), json!(live.kind.api_resource().api_version));
    fields.insert("kind".to_owned(), json!(live.kind.name()));
    fields.insert("metadata".to_owned(), json!({"name": live.name}));
    serde_json::from_value(body).ok()
}

#[cfg(test)]
mod tests;
