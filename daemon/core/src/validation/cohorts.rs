//! Checks of the cohort tree (issue 28): `spec.cohorts` (names, parents, cycles, depth, pools, weights) and each
//! tier's `cohort` and `sharing` (floor, weight, reclaim), each problem naming its field and the fix; no I/O.
//!
//! Kueue v0.19.2 accepts a cycle or an unknown parent and then silently stops admitting in that tree (its
//! `hierarchy` package marks the cohorts inactive); refusing them here keeps the last good state instead. Kueue
//! sets no depth limit: tiergate refuses trees deeper than [`MAX_COHORT_DEPTH`], as every level adds a fair-sharing
//! comparison to each scheduling decision and no organisation chart we know needs more. tiergate writes one
//! resource group per Cohort and ClusterQueue, so Kueue's 16-group limit cannot be reached; the 64 flavors and
//! 64 resources of that group are checked.

use tiergate_kueue as kueue;

use super::Problems;
use super::names::{DNS_SUBDOMAIN_RULE, is_dns_subdomain};
use super::quantity::parse_quantity;
use crate::plan::quota::parse_millis;
use crate::policy::{CohortNode, ResourceQuota, Tier, TierPolicySpec};
use crate::scoring::buckets::priority_ceiling;

/// Most cohorts from a tier's cohort up to its root, inclusive (tiergate's bound; Kueue has none).
pub const MAX_COHORT_DEPTH: usize = 6;

/// Every problem of `spec.cohorts` and of the tiers' `cohort` and `sharing`.
pub(super) fn check_cohorts(spec: &TierPolicySpec, problems: &mut Problems) {
    problems.duplicates(
        spec.cohorts
            .iter()
            .enumerate()
            .map(|(index, cohort)| (format!("spec.cohorts[{index}].name"), cohort.name.as_str())),
        "cohort",
    );
    for (index, cohort) in spec.cohorts.iter().enumerate() {
        check_cohort(spec, &format!("spec.cohorts[{index}]"), cohort, problems);
    }
    for (index, tier) in spec.tiers.iter().enumerate() {
        check_tier_sharing(spec, &format!("spec.tiers[{index}]"), tier, problems);
    }
    check_reclaimable(spec, problems);
}

fn check_cohort(spec: &TierPolicySpec, path: &str, cohort: &CohortNode, problems: &mut Problems) {
    if !is_dns_subdomain(&cohort.name) {
        problems.push(
            format!("{path}.name"),
            format!("cohort {:?} is not {DNS_SUBDOMAIN_RULE}", cohort.name),
            "rename the cohort",
        );
    }
    let declared: Vec<&str> = spec.cohorts.iter().map(|cohort| cohort.name.as_str()).collect();
    if let Some(parent) = &cohort.parent {
        if spec.cohort(parent).is_none() {
            problems.push(
                format!("{path}.parent"),
                format!("parent {parent:?} names no cohort of spec.cohorts"),
                format!("use one of {declared:?}, declare {parent:?} under spec.cohorts, or remove parent"),
            );
        } else if in_cycle(spec, &cohort.name) {
            let chain = spec.cohort_chain(&cohort.name).join(" -> ");
            problems.push(
                format!("{path}.parent"),
                format!("cohort {:?} is its own ancestor ({chain} -> {})", cohort.name, cohort.name),
                "break the cycle: one cohort of the loop must have no parent (the root of the organisation)",
            );
        } else if spec.cohort_chain(&cohort.name).len() > MAX_COHORT_DEPTH {
            let chain = spec.cohort_chain(&cohort.name).join(" -> ");
            problems.push(
                format!("{path}.parent"),
                format!(
                    "cohort {:?} is {} levels deep ({chain}); tiergate allows {MAX_COHORT_DEPTH}",
                    cohort.name,
                    spec.cohort_chain(&cohort.name).len()
                ),
                "flatten the tree: merge intermediate cohorts",
            );
        }
    }
    if let Some(weight) = &cohort.weight {
        check_weight(&format!("{path}.weight"), &weight.0, problems);
    }
    if cohort.pools.len() > kueue::MAX_RESOURCE_GROUP_ENTRIES {
        problems.push(format!("{path}.pools"), "more than 64 GPU classes", "pool at most 64 GPU classes per cohort");
    }
    let mut resources: Vec<&String> = cohort.pools.values().flat_map(|pool| pool.keys()).collect();
    resources.sort();
    resources.dedup();
    if resources.len() > kueue::MAX_RESOURCE_GROUP_ENTRIES {
        problems.push(format!("{path}.pools"), "more than 64 resources", "pool at most 64 resources per cohort");
    }
    for (class, pool) in &cohort.pools {
        let pool_path = format!("{path}.pools[{class:?}]");
        if spec.gpu_class(class).is_none() {
            let known: Vec<&str> = spec.gpu_classes.iter().map(|class| class.name.as_str()).collect();
            problems.push(
                pool_path.clone(),
                format!("unknown GPU class {class:?}"),
                format!("use one of the declared classes {known:?} or declare it under spec.gpuClasses"),
            );
        }
        for (resource, quota) in pool {
            check_pool_quota(&format!("{pool_path}[{resource:?}]"), quota, cohort.parent.is_some(), problems);
        }
    }
}

fn check_pool_quota(path: &str, quota: &ResourceQuota, has_parent: bool, problems: &mut Problems) {
    for (field, value) in [
        ("nominal", Some(&quota.nominal)),
        ("borrowingLimit", quota.borrowing_limit.as_ref()),
        ("lendingLimit", quota.lending_limit.as_ref()),
    ] {
        let Some(value) = value else { continue };
        if parse_quantity(&value.0).is_none_or(|parsed| parsed.is_negative()) || value.0.starts_with('-') {
            problems.push(
                format!("{path}.{field}"),
                format!("{:?} is not a quantity of zero or more", value.0),
                "write e.g. \"8\", \"500m\" or \"512Gi\"",
            );
        }
        if field != "nominal" && !has_parent {
            problems.push(
                format!("{path}.{field}"),
                format!("{field} on a cohort without a parent (Kueue refuses it: a root has no one to borrow from or lend to)"),
                format!("give the cohort a parent or remove {field}"),
            );
        }
    }
}

fn in_cycle(spec: &TierPolicySpec, name: &str) -> bool {
    let chain = spec.cohort_chain(name);
    chain
        .last()
        .and_then(|last| spec.cohort(last))
        .and_then(|cohort| cohort.parent.as_deref())
        .is_some_and(|parent| chain.contains(&parent))
}

fn check_weight(path: &str, text: &str, problems: &mut Problems) {
    match parse_millis(text) {
        Some(millis) if millis > 0 => {}
        Some(_) => problems.push(
            path,
            format!(
                "weight {text:?} is not above 0 (a weight of 0 makes every borrowed GPU look infinitely expensive)"
            ),
            "use a weight above 0, e.g. \"1\" (Kueue's default) or \"0.5\"",
        ),
        None => problems.push(
            path,
            format!("weight {text:?} is not a quantity above 0 in milli-units"),
            "write e.g. \"2\" or \"0.5\"",
        ),
    }
}

fn check_tier_sharing(spec: &TierPolicySpec, path: &str, tier: &Tier, problems: &mut Problems) {
    if let Some(cohort) = &tier.cohort
        && !spec.cohorts.is_empty()
        && spec.cohort(cohort).is_none()
    {
        let declared: Vec<&str> = spec.cohorts.iter().map(|cohort| cohort.name.as_str()).collect();
        problems.push(
            format!("{path}.cohort"),
            format!(
                "cohort {cohort:?} is not declared under spec.cohorts (a declared tree makes every cohort explicit)"
            ),
            format!("use one of {declared:?} or declare {cohort:?} under spec.cohorts"),
        );
    }
    let Some(sharing) = &tier.sharing else { return };
    if tier.cohort.is_none() {
        problems.push(
            format!("{path}.sharing"),
            "sharing without a cohort: a tier outside a cohort neither lends, borrows nor reclaims",
            "set the tier's cohort or remove sharing",
        );
    }
    if let Some(weight) = &sharing.weight {
        check_weight(&format!("{path}.sharing.weight"), &weight.0, problems);
    }
    for (resource, floor) in &sharing.floor {
        let floor_path = format!("{path}.sharing.floor[{resource:?}]");
        let Some(quota) = tier.quotas.get(resource) else {
            problems.push(
                floor_path,
                format!("{resource:?} has no quota in this tier"),
                "give a floor only for resources under the tier's quotas",
            );
            continue;
        };
        if quota.lending_limit.is_some() {
            problems.push(
                format!("{path}.quotas[{resource:?}].lendingLimit"),
                "both a lendingLimit and a floor for the same resource (the floor sets lendingLimit = nominal - floor)",
                "keep one: the floor, or the lendingLimit",
            );
        }
        match (parse_millis(&floor.0), parse_millis(&quota.nominal.0)) {
            (Some(floor_millis), Some(nominal)) if floor_millis > nominal => problems.push(
                floor_path,
                format!("floor {:?} is above the nominal quota {:?}", floor.0, quota.nominal.0),
                format!("lower the floor to at most {:?}, or raise the nominal quota", quota.nominal.0),
            ),
            (None, _) if !floor.0.starts_with('-') => problems.push(
                floor_path,
                format!("floor {:?} is not a quantity of zero or more", floor.0),
                "write e.g. \"2\" or \"64Gi\"",
            ),
            (None, _) => problems.push(floor_path, format!("floor {:?} is negative", floor.0), "use zero or more"),
            _ => {}
        }
    }
    if let (Some(_), Some(preemption)) = (sharing.reclaim, &tier.preemption)
        && preemption.reclaim_within_cohort.is_some()
    {
        problems.push(
            format!("{path}.sharing.reclaim"),
            "both sharing.reclaim and preemption.reclaimWithinCohort are set",
            "keep sharing.reclaim and remove preemption.reclaimWithinCohort",
        );
    }
    if let Some(bucket) = &sharing.preempt_while_borrowing_up_to {
        let field = format!("{path}.sharing.preemptWhileBorrowingUpTo");
        if !spec.priority_buckets.iter().any(|candidate| &candidate.name == bucket) {
            let known: Vec<&str> = spec.priority_buckets.iter().map(|bucket| bucket.name.as_str()).collect();
            problems.push(
                field.clone(),
                format!("{bucket:?} is not a priority bucket"),
                format!("name one of {known:?}"),
            );
        }
        if tier.reclaim_value() == "Never" {
            problems.push(
                field,
                "preempting while borrowing needs reclaim other than Never (Kueue's CEL rule on preemption)",
                "set sharing.reclaim to LowerPriority or Always, or remove preemptWhileBorrowingUpTo",
            );
        }
        if tier.preemption.as_ref().is_some_and(|preemption| preemption.borrow_within_cohort.is_some()) {
            problems.push(
                format!("{path}.preemption.borrowWithinCohort"),
                "both sharing.preemptWhileBorrowingUpTo and preemption.borrowWithinCohort are set",
                "keep sharing.preemptWhileBorrowingUpTo and remove preemption.borrowWithinCohort",
            );
        }
    }
}

/// Whether `tier` may borrow GPUs: it has a cohort and the borrowing limit of its GPU class's resource (if any)
/// is not 0.
fn borrows(spec: &TierPolicySpec, tier: &Tier) -> bool {
    let resource =
        spec.gpu_class(&tier.gpu_class).map_or(crate::policy::DEFAULT_GPU_RESOURCE, |class| class.primary_resource());
    tier.cohort.is_some()
        && tier
            .quotas
            .get(resource)
            .is_some_and(|quota| quota.borrowing_limit.as_ref().is_none_or(|limit| parse_millis(&limit.0) != Some(0)))
}

/// Whether `tier` lends something: it has a cohort and some resource's nominal quota is above its floor and
/// lending limit.
fn lends(tier: &Tier) -> bool {
    let floor = |resource: &str| {
        tier.sharing.as_ref().and_then(|sharing| sharing.floor.get(resource)).and_then(|floor| parse_millis(&floor.0))
    };
    tier.cohort.is_some()
        && tier.quotas.iter().any(|(resource, quota)| {
            let nominal = parse_millis(&quota.nominal.0).unwrap_or(0);
            let limit = quota.lending_limit.as_ref().and_then(|limit| parse_millis(&limit.0)).unwrap_or(nominal);
            limit.min(nominal - floor(resource).unwrap_or(0)) > 0
        })
}

/// Whether `lender`'s workloads can preempt every workload of `borrower` to take back lent quota: `Always`
/// (Kueue `Any`) can; `LowerPriority` only when the borrower's priority ceiling is below the lender's (a
/// borrower may label its workloads up to its ceiling, and Kueue preempts strictly lower priorities only).
fn reclaims_from(spec: &TierPolicySpec, lender: &Tier, borrower: &Tier) -> bool {
    let ceiling = |tier: &Tier| priority_ceiling(tier, &spec.priority_buckets).map(|bucket| bucket.value);
    match lender.reclaim_value() {
        "Any" => true,
        "LowerPriority" => matches!((ceiling(borrower), ceiling(lender)), (Some(b), Some(l)) if b < l),
        _ => false,
    }
}

/// In a declared tree, a tier that borrows must be reclaimable: some other tier of its tree that lends quota
/// reclaims from it ([`reclaims_from`]). Otherwise its workloads on borrowed quota could never be preempted,
/// and the lenders would wait for them to finish, however long. Flat cohorts (no `spec.cohorts`) keep today's
/// behaviour and are not checked.
fn check_reclaimable(spec: &TierPolicySpec, problems: &mut Problems) {
    if spec.cohorts.is_empty() {
        return;
    }
    for (index, tier) in spec.tiers.iter().enumerate() {
        let Some(cohort) = tier.cohort.as_deref() else { continue };
        if !borrows(spec, tier) || spec.cohort(cohort).is_none() {
            continue;
        }
        let root = spec.cohort_root(cohort);
        let mut lenders = spec.tiers_under(root).filter(|other| other.name != tier.name && lends(other)).peekable();
        if lenders.peek().is_none() {
            continue;
        }
        let lender_names: Vec<&str> = lenders.map(|lender| lender.name.as_str()).collect();
        let reclaims = spec
            .tiers_under(root)
            .any(|other| other.name != tier.name && lends(other) && reclaims_from(spec, other, tier));
        if !reclaims {
            problems.push(
                format!("spec.tiers[{index}].cohort"),
                format!(
                    "tier {:?} borrows in the tree of cohort {root:?}, but none of the tiers lending there ({lender_names:?}) \
                     reclaims from it (reclaim Never, or LowerPriority with a priority ceiling not above its own): \
                     what it borrows could never be taken back",
                    tier.name
                ),
                format!(
                    "set sharing.reclaim: Always on a lending tier (or LowerPriority with a maxPriorityClass above {:?}'s), \
                     or set the borrowingLimit of {:?} to \"0\"",
                    tier.name, tier.name
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::{CohortNode, TierPolicy};
    use crate::validation::validate;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn org_tree() -> TierPolicy {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/org-tree/policy.yaml"));
        crate::inputs::parse_policy(&text.unwrap(), "org-tree").unwrap()
    }

    fn problems(policy: &TierPolicy) -> Vec<String> {
        validate(&policy.spec)
            .err()
            .map(|errors| errors.0.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    fn cohort_mut<'a>(policy: &'a mut TierPolicy, name: &str) -> &'a mut CohortNode {
        policy.spec.cohorts.iter_mut().find(|cohort| cohort.name == name).unwrap()
    }

    #[test]
    fn the_org_tree_sample_is_valid() {
        assert_eq!(problems(&org_tree()), Vec::<String>::new());
    }

    #[test]
    fn a_cycle_is_refused_at_the_parent_field() {
        let mut policy = org_tree();
        cohort_mut(&mut policy, "org").parent = Some("research".into());
        let found = problems(&policy);
        assert!(
            found.iter().any(|p| p.starts_with("spec.cohorts[0].parent: cohort \"org\" is its own ancestor")),
            "{found:?}"
        );
        assert!(found.iter().any(|p| p.contains("break the cycle")), "{found:?}");
    }

    #[test]
    fn an_unknown_parent_and_an_undeclared_tier_cohort_are_refused() {
        let mut policy = org_tree();
        cohort_mut(&mut policy, "batch").parent = Some("orgg".into());
        policy.spec.tiers[0].cohort = Some("reserch".into());
        let found = problems(&policy);
        assert!(found.iter().any(|p| p.contains(".parent: parent \"orgg\" names no cohort")), "{found:?}");
        assert!(
            found.iter().any(|p| p.starts_with("spec.tiers[0].cohort: cohort \"reserch\" is not declared")),
            "{found:?}"
        );
    }

    #[test]
    fn a_floor_above_nominal_is_refused_naming_the_nominal() {
        let mut policy = org_tree();
        let gold = policy.spec.tiers.iter_mut().find(|tier| tier.name == "gold").unwrap();
        gold.sharing.as_mut().unwrap().floor.insert("nvidia.com/gpu".into(), Quantity("999".into()));
        let found = problems(&policy);
        assert!(
            found
                .iter()
                .any(|p| p.contains("sharing.floor[\"nvidia.com/gpu\"]: floor \"999\" is above the nominal quota")),
            "{found:?}"
        );
    }

    #[test]
    fn sharing_without_a_cohort_is_refused() {
        let mut policy = org_tree();
        let gold = policy.spec.tiers.iter_mut().find(|tier| tier.name == "gold").unwrap();
        gold.cohort = None;
        let found = problems(&policy);
        assert!(found.iter().any(|p| p.contains(".sharing: sharing without a cohort")), "{found:?}");
    }

    #[test]
    fn weights_of_zero_or_below_are_refused_for_cohorts_and_tiers() {
        let mut policy = org_tree();
        cohort_mut(&mut policy, "research").weight = Some(Quantity("0".into()));
        policy.spec.tiers[0].sharing.get_or_insert_with(Default::default).weight = Some(Quantity("-1".into()));
        let found = problems(&policy);
        assert!(found.iter().any(|p| p.contains(".weight: weight \"0\" is not above 0")), "{found:?}");
        assert!(found.iter().any(|p| p.starts_with("spec.tiers[0].sharing.weight")), "{found:?}");
    }

    #[test]
    fn a_tree_deeper_than_the_limit_is_refused() {
        let mut policy = org_tree();
        let mut parent = "research".to_owned();
        for level in 0..super::MAX_COHORT_DEPTH {
            let name = format!("level-{level}");
            policy.spec.cohorts.push(CohortNode {
                name: name.clone(),
                parent: Some(parent),
                pools: Default::default(),
                weight: None,
            });
            parent = name;
        }
        let found = problems(&policy);
        assert!(found.iter().any(|p| p.contains("levels deep") && p.contains("tiergate allows 6")), "{found:?}");
    }

    #[test]
    fn limits_on_a_root_cohort_s_pool_are_refused() {
        let mut policy = org_tree();
        let pool = cohort_mut(&mut policy, "batch").pools.clone();
        let org = cohort_mut(&mut policy, "org");
        org.pools = pool;
        for quota in org.pools.values_mut().flat_map(|pool| pool.values_mut()) {
            quota.lending_limit = Some(Quantity("1".into()));
        }
        let found = problems(&policy);
        assert!(found.iter().any(|p| p.contains("lendingLimit on a cohort without a parent")), "{found:?}");
    }

    #[test]
    fn a_tree_where_no_lender_reclaims_is_refused_naming_the_borrower() {
        let mut policy = org_tree();
        for tier in &mut policy.spec.tiers {
            if let Some(sharing) = tier.sharing.as_mut() {
                sharing.reclaim = Some(crate::policy::Reclaim::Never);
                sharing.preempt_while_borrowing_up_to = None;
            }
        }
        let found = problems(&policy);
        assert!(found.iter().any(|p| p.contains("could never be taken back") && p.contains("\"silver\"")), "{found:?}");
    }

    #[test]
    fn a_lender_reclaiming_only_lower_priorities_cannot_reclaim_from_a_borrower_with_the_same_ceiling() {
        let mut policy = org_tree();
        let gold = policy.spec.tiers.iter_mut().find(|tier| tier.name == "gold").unwrap();
        gold.sharing.as_mut().unwrap().reclaim = Some(crate::policy::Reclaim::LowerPriority);
        // No ceilings: every tier may label its workloads with the top bucket, so gold's cannot outrank silver's.
        let found = problems(&policy);
        assert!(found.iter().any(|p| p.contains("could never be taken back") && p.contains("\"silver\"")), "{found:?}");
        for tier in policy.spec.tiers.iter_mut().filter(|tier| tier.name != "gold") {
            tier.max_priority_class = Some("gpu-high".into());
        }
        assert_eq!(problems(&policy), Vec::<String>::new(), "gold's top bucket is above the others' ceiling");
    }

    #[test]
    fn preempting_while_borrowing_needs_reclaim() {
        let mut policy = org_tree();
        let silver = policy.spec.tiers.iter_mut().find(|tier| tier.name == "silver").unwrap();
        let sharing = silver.sharing.get_or_insert_with(Default::default);
        sharing.reclaim = Some(crate::policy::Reclaim::Never);
        sharing.preempt_while_borrowing_up_to = Some("gpu-default".into());
        let found = problems(&policy);
        assert!(
            found.iter().any(|p| p.contains("preemptWhileBorrowingUpTo: preempting while borrowing needs reclaim")),
            "{found:?}"
        );
    }
}
