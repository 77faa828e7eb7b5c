//! The Karpenter part of `tiergate check` (issue 51): which NodePool a target lands on when several can host it
//! (Karpenter's pick by weight), the warnings about lower-weight pools that can also host a tier's pods, and about a
//! NodePool whose `spec.limits` hold fewer GPUs than Kueue can admit onto it; pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{NodePool, PoolSource, TierReport, pool_rejection};
use crate::plan::names::node_pool_name;
use crate::plan::nodepools::flavor_class_name;
use crate::plan::quota::{format_millis, parse_millis, tier_quota};
use crate::plan::{FlavorSelector, flavor_for_gpu_class};
use crate::policy::{GpuClass, Tier, TierPolicySpec};

/// The Karpenter warnings of one cluster's pools: each lower-weight NodePool that can also host a target of
/// `reports` (see [`WeightPick`]), and each NodePool whose limits hold fewer GPUs than the tiers `running` there
/// (and the cohorts' own pools) can admit onto it (see [`limit_warnings`]). They never fail the check.
pub fn build_nodepool_warnings(
    spec: &TierPolicySpec,
    reports: &[TierReport],
    running: &[&Tier],
    pools: &[NodePool],
) -> Vec<String> {
    let mut warnings = lower_weight_warnings(reports);
    warnings.extend(limit_warnings(spec, running, pools));
    warnings
}

/// One warning per target Karpenter's weights decided, naming the lower-weight NodePools that can host it too:
/// Karpenter launches from them when its pick cannot, so the tier's pods may land on their nodes.
fn lower_weight_warnings(tiers: &[TierReport]) -> Vec<String> {
    let mut warnings = Vec::new();
    for tier in tiers {
        for target in &tier.targets {
            let (Some(pick), [chosen]) = (&target.weight_pick, target.matches.as_slice()) else { continue };
            let listed: Vec<String> =
                pick.lower.iter().map(|(name, weight)| format!("{name} (weight {weight})")).collect();
            let names: Vec<&str> = pick.lower.iter().map(|(name, _)| name.as_str()).collect();
            let names = names.join(", ");
            let (launches_from, land_on, give) = match pick.lower.len() {
                1 => (names.clone(), format!("nodes of {names}"), names.clone()),
                _ => (format!("{names} (by weight)"), "their nodes".to_owned(), format!("each of {names}")),
            };
            let example = target
                .selector
                .iter()
                .next()
                .map(|(key, value)| {
                    format!(", e.g. the requirement {{key: {key}, operator: NotIn, values: [{value}]}}")
                })
                .unwrap_or_default();
            warnings.push(format!(
                "tier {}, {}: {} can also host these pods. Karpenter picks {chosen} (weight {}) first, but launches \
                 from {launches_from} whenever {chosen} cannot (its limits reached, no capacity), so the tier's pods \
                 may land on {land_on}. Fix: give {give} requirements or a taint these pods do not meet{example}",
                tier.tier,
                target.target,
                listed.join(", "),
                pick.weight,
            ));
        }
    }
    warnings
}

/// The GPUs Kueue can admit onto one pool in one resource, and whose quota they are.
#[derive(Default)]
struct PoolLoad<'a> {
    millis: i128,
    /// `tier gold`, `cohort research`, in policy order.
    holders: Vec<String>,
    /// The GPU classes whose flavors land on the pool, in policy order.
    classes: Vec<&'a GpuClass>,
}

/// Karpenter NodePools whose `spec.limits` hold fewer GPUs than Kueue can admit onto them.
///
/// What Kueue can admit onto a pool: Kueue puts a flavor's node labels and tolerations on every pod it admits to
/// the flavor, so those pods land on the pool the flavor's selector resolves to (the one pool that can host it,
/// or Karpenter's pick by weight; the very rule a target passes by, and for every target the same pool, since a
/// target's selector is its flavor's). So every flavor of every tier of `running` (those whose pods run in this
/// cluster: without `dispatch` here, the dispatched ones on their worker) adds its nominal quota of its GPU
/// class's whole-GPU resource ([`GpuClass::primary_resource`]; a rule flavor's class is its tier's primary class)
/// to that pool, and so does every cohort's own pool of a class (`spec.cohorts[].pools`, charged to the class's
/// flavor). Borrowing moves quota between queues but never adds to what a flavor can admit in all, so the sum
/// covers it; this is the arithmetic of `plan::nodepools::class_gpu_limit`, counted per pool instead of per
/// class. A flavor no single pool hosts counts nowhere (its target fails the check; the class flavor of a
/// placement tier, which has no target of its own, holds GPUs only through `quotaShares`). A pool without a limit
/// of the resource, or with one that is not an exact quantity, is not warned about.
pub(super) fn limit_warnings(spec: &TierPolicySpec, running: &[&Tier], pools: &[NodePool]) -> Vec<String> {
    let mut loads: PoolLoads = BTreeMap::new();
    for tier in running {
        for flavor in tier_quota(spec, tier).flavors {
            let Some(class) = spec.gpu_class(flavor_class_name(tier, &flavor)) else { continue };
            let resource = class.primary_resource();
            let nominal = flavor.nominal.iter().find(|(name, _)| name == resource).map(|(_, quantity)| quantity);
            charge_pool(&mut loads, pools, &flavor.selector, class, nominal, format!("tier {}", tier.name));
        }
    }
    for cohort in &spec.cohorts {
        for (class_name, quotas) in &cohort.pools {
            let (Some(class), Some(selector)) = (spec.gpu_class(class_name), flavor_for_gpu_class(spec, class_name))
            else {
                continue;
            };
            let nominal = quotas.get(class.primary_resource()).map(|quota| &quota.nominal);
            charge_pool(&mut loads, pools, &selector, class, nominal, format!("cohort {}", cohort.name));
        }
    }
    loads
        .into_iter()
        .filter_map(|((index, resource), load)| {
            let pool = pools.get(index)?;
            let limit = pool.limits.get(resource)?;
            (parse_millis(&limit.0)? < load.millis).then(|| build_limit_warning(spec, pool, resource, limit, &load))
        })
        .collect()
}

/// What Kueue can admit per pool (index in the pools) and resource.
type PoolLoads<'a> = BTreeMap<(usize, &'a str), PoolLoad<'a>>;

/// Adds `nominal` of `class`'s whole-GPU resource, held by `holder`, to the pool pods of `selector` land on.
fn charge_pool<'a>(
    loads: &mut PoolLoads<'a>,
    pools: &[NodePool],
    selector: &FlavorSelector,
    class: &'a GpuClass,
    nominal: Option<&Quantity>,
    holder: String,
) {
    let millis = nominal.and_then(|quantity| parse_millis(&quantity.0)).unwrap_or(0);
    if millis == 0 {
        return;
    }
    let Some(index) = hosting_pool(pools, &selector.node_labels, &selector.tolerations) else { return };
    let load = loads.entry((index, class.primary_resource())).or_default();
    load.millis += millis;
    if !load.holders.contains(&holder) {
        load.holders.push(holder);
    }
    if !load.classes.iter().any(|seen| seen.name == class.name) {
        load.classes.push(class);
    }
}

fn build_limit_warning(
    spec: &TierPolicySpec,
    pool: &NodePool,
    resource: &str,
    limit: &Quantity,
    load: &PoolLoad,
) -> String {
    let admitted = format_millis(load.millis, &limit.0);
    let renders: Vec<String> = load
        .classes
        .iter()
        .map(|class| {
            let rendered = node_pool_name(&class.name);
            match (&class.karpenter, spec.gpu_classes.iter().position(|candidate| candidate.name == class.name)) {
                (Some(_), _) if rendered == pool.name => format!(
                    "let tiergate apply NodePool {rendered} again: it renders it from GPU class {}'s `karpenter` \
                     template with a limit that follows the quota",
                    class.name
                ),
                (Some(_), _) => format!(
                    "use NodePool {rendered}, which tiergate renders from GPU class {}'s `karpenter` template with a \
                     limit that follows the quota, in place of this one",
                    class.name
                ),
                (None, index) => format!(
                    "give GPU class {} a `karpenter` template (spec.gpuClasses[{}].karpenter) so tiergate renders \
                     its NodePool with a limit that follows the quota",
                    class.name,
                    index.map_or_else(|| "?".to_owned(), |index| index.to_string())
                ),
            }
        })
        .collect();
    format!(
        "{} limits {resource} to {}, below the {admitted} Kueue can admit onto it (the nominal quota of {} on the \
         flavors it hosts): Kueue admits workloads Karpenter will never get nodes for, and they hold quota while \
         their pods stay Pending. Fix: raise the limit to {admitted} (spec.limits: {{{resource}: \"{admitted}\"}}), \
         or lower the quota; or {}",
        pool.display_name(),
        limit.0,
        load.holders.join(", "),
        renders.join("; or ")
    )
}

/// Karpenter's pick among `hosts` (indices into `pools` of the pools that can host one kind of pod): when there
/// are several, all Karpenter NodePools, and one has a strictly higher weight than every other, that one and the
/// others by descending weight (input order among equals). `None` otherwise: one host needs no pick, and a tie at
/// the top or a pool of another autoscaler leaves the choice open.
pub(super) fn karpenter_pick(pools: &[NodePool], hosts: &[usize]) -> Option<(usize, Vec<usize>)> {
    let mut ordered: Vec<(usize, &NodePool)> =
        hosts.iter().map(|index| pools.get(*index).map(|pool| (*index, pool))).collect::<Option<_>>()?;
    if ordered.len() < 2 || ordered.iter().any(|(_, pool)| pool.source != PoolSource::Karpenter) {
        return None;
    }
    ordered.sort_by_key(|(_, pool)| std::cmp::Reverse(pool.effective_weight()));
    let (first, rest) = ordered.split_first()?;
    let runner_up = rest.first()?;
    (runner_up.1.effective_weight() < first.1.effective_weight())
        .then(|| (first.0, rest.iter().map(|(index, _)| *index).collect()))
}

/// The index in `pools` of the one pool pods with `selector` and `tolerations` land on: the only pool that can
/// host them, or Karpenter's pick by weight; `None` when no pool or several can.
fn hosting_pool(pools: &[NodePool], selector: &BTreeMap<String, String>, tolerations: &[Toleration]) -> Option<usize> {
    let hosts: Vec<usize> = pools
        .iter()
        .enumerate()
        .filter(|(_, pool)| pool_rejection(pool, selector, tolerations).is_none())
        .map(|(index, _)| index)
        .collect();
    match hosts.as_slice() {
        [only] => Some(*only),
        _ => karpenter_pick(pools, &hosts).map(|(chosen, _)| chosen),
    }
}
