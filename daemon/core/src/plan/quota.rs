//! The quota arithmetic of a tier: how its quota is shared by its flavors (GPU classes and placement rules) so
//! that together they never offer more than the policy's number; pure, no I/O.
//!
//! GPUs (the primary class's resource) are split first, in whole GPUs: explicit `quotaShares`, 0 for a fallback
//! class without one, and the rest over the rules without a share by [`Split::shares`] (the very function the
//! webhook places pods with), or to the primary class when the tier has no placement strategy. Every other
//! resource follows the GPU shares in proportion, by the same function, in the largest unit that divides the
//! total (`Gi`, `Mi`, `Ki` for binary quantities, else whole units, else milli-units). The rounding never loses
//! or adds a unit: each resource's flavor quotas add up to exactly its total (or less, when explicit shares
//! leave GPUs unassigned). Documented in docs/guides/placement.md, "Quota".

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::FlavorSelector;
use crate::placement::split::Split;
use crate::policy::{DEFAULT_GPU_RESOURCE, Tier, TierPolicySpec};

/// Most whole GPUs a tier's quota may hold when it is split over several flavors (the split is O(GPUs)).
pub const MAX_SPLIT_GPUS: u64 = 1_000_000;
/// Largest sum of a strategy's weights the split handles (its period).
pub const MAX_SPLIT_WEIGHT_SUM: u64 = 1_000_000;

/// Where a flavor of a tier comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlavorRole {
    /// The tier's `gpuClass`.
    Class,
    /// One of `fallbackGpuClasses`.
    Fallback,
    /// A rule of the tier's placement strategy.
    Rule,
}

/// One flavor of a tier's ClusterQueue with its share of the tier's quota.
#[derive(Clone, Debug, PartialEq)]
pub struct FlavorShare {
    /// The flavor's name, labels and tolerations.
    pub selector: FlavorSelector,
    /// Class, fallback or rule.
    pub role: FlavorRole,
    /// The GPU class or rule name (the key of `quotaShares`).
    pub source: String,
    /// The rule's base and weight (0 for classes).
    pub base: u32,
    /// The rule's weight (0 for classes).
    pub weight: u32,
    /// Whole GPUs of the tier's GPU resource on this flavor.
    pub gpus: u64,
    /// Whether `gpus` was written in `quotaShares`.
    pub explicit: bool,
    /// Nominal quota per resource, in the tier's `quotas` order.
    pub nominal: Vec<(String, Quantity)>,
    /// Lending limit per resource with one (split like the nominal quota, never above it).
    pub lending_limits: BTreeMap<String, Quantity>,
    /// Set when the flavor may not borrow: the primary class of a placement tier that has no share, so rule
    /// pods are charged to their rule's flavor, never to the class flavor on borrowed quota.
    pub no_borrowing: bool,
}

/// A tier's quota, shared by its flavors.
#[derive(Clone, Debug, PartialEq)]
pub struct TierQuota {
    /// The tier.
    pub tier: String,
    /// The resource shares are counted in (the primary class's resource).
    pub gpu_resource: String,
    /// Flavors in the ClusterQueue's order.
    pub flavors: Vec<FlavorShare>,
}

impl TierQuota {
    /// The sum of every flavor's nominal quota of `resource`, in milli-units (`None` when a quantity is not
    /// exact in milli-units, which only an invalid policy has).
    pub fn total_millis(&self, resource: &str) -> Option<i128> {
        self.flavors.iter().try_fold(0_i128, |sum, flavor| {
            let quantity = flavor.nominal.iter().find(|(name, _)| name == resource).map(|(_, quantity)| quantity)?;
            Some(sum + parse_millis(&quantity.0)?)
        })
    }
}

/// A flavor of a tier before the arithmetic: what [`super::tier_flavor_sources`] yields.
#[derive(Clone, Debug, PartialEq)]
pub struct FlavorSource {
    /// The flavor's name, labels and tolerations.
    pub selector: FlavorSelector,
    /// Class, fallback or rule.
    pub role: FlavorRole,
    /// The GPU class or rule name.
    pub source: String,
    /// The rule's base (0 for classes).
    pub base: u32,
    /// The rule's weight (0 for classes).
    pub weight: u32,
}

/// The flavors of `tier` in the ClusterQueue's order, each with its share of the tier's quota.
pub fn tier_quota(spec: &TierPolicySpec, tier: &Tier) -> TierQuota {
    let gpu_resource =
        spec.gpu_class(&tier.gpu_class).map_or(DEFAULT_GPU_RESOURCE, |class| class.resource_name.as_str()).to_owned();
    let mut flavors: Vec<FlavorShare> = super::tier_flavor_sources(spec, tier)
        .into_iter()
        .map(|flavor| FlavorShare {
            explicit: tier.quota_shares.contains_key(&flavor.source),
            gpus: 0,
            selector: flavor.selector,
            role: flavor.role,
            source: flavor.source,
            base: flavor.base,
            weight: flavor.weight,
            nominal: Vec::new(),
            lending_limits: BTreeMap::new(),
            no_borrowing: false,
        })
        .collect();
    let total_gpus = tier
        .quotas
        .get(&gpu_resource)
        .and_then(|quota| whole_units(&quota.nominal.0))
        .filter(|gpus| *gpus <= MAX_SPLIT_GPUS);
    if let Some(total) = total_gpus {
        assign_gpus(tier, &mut flavors, total);
    }
    let has_rules = flavors.iter().any(|flavor| flavor.role == FlavorRole::Rule);
    let weights: Vec<u32> = flavors.iter().map(|flavor| u32::try_from(flavor.gpus).unwrap_or(u32::MAX)).collect();
    let proportional = Split::new(0, weights);
    let count = flavors.len();
    for (resource, quota) in &tier.quotas {
        let nominal: Vec<Quantity> = match total_gpus {
            Some(total) if resource == &gpu_resource => {
                flavors.iter().map(|flavor| whole_or_original(flavor.gpus, total, &quota.nominal)).collect()
            }
            _ => split_quantity(&quota.nominal, &proportional, count),
        };
        let lending: Option<Vec<Quantity>> = quota.lending_limit.as_ref().map(|limit| match total_gpus {
            Some(_) if resource == &gpu_resource => {
                let total = whole_units(&limit.0).unwrap_or(0);
                proportional.shares(total).into_iter().map(|share| Quantity(share.to_string())).collect()
            }
            _ => split_quantity(limit, &proportional, count),
        });
        for (index, (flavor, quantity)) in flavors.iter_mut().zip(nominal).enumerate() {
            if let Some(limit) = lending.as_ref().and_then(|limits| limits.get(index)) {
                flavor.lending_limits.insert(resource.clone(), at_most(limit, &quantity));
            }
            flavor.nominal.push((resource.clone(), quantity));
        }
    }
    for flavor in &mut flavors {
        flavor.no_borrowing = has_rules && flavor.role == FlavorRole::Class && !flavor.explicit;
    }
    TierQuota { tier: tier.name.clone(), gpu_resource, flavors }
}

/// The arithmetic of every tier as text for people (`tiergate check`, and `tiergate render` on stderr): each
/// flavor's quota per resource, where its GPUs come from, and the total against the policy's number.
pub fn quota_summary(spec: &TierPolicySpec) -> String {
    let mut text = String::new();
    for tier in &spec.tiers {
        let quota = tier_quota(spec, tier);
        let resources: Vec<&String> = tier.quotas.keys().collect();
        let mut rows: Vec<Vec<String>> = vec![
            std::iter::once("flavor".to_owned())
                .chain(std::iter::once("GPUs from".to_owned()))
                .chain(resources.iter().map(|resource| (*resource).clone()))
                .collect(),
        ];
        for flavor in &quota.flavors {
            let from = match (flavor.role, flavor.explicit) {
                (_, true) => "quotaShares",
                (FlavorRole::Fallback, false) => "none (borrows)",
                (FlavorRole::Rule, false) => "base/weight split",
                (FlavorRole::Class, false) if flavor.no_borrowing => "none (rules split it)",
                (FlavorRole::Class, false) => "the rest",
            };
            let cells = resources.iter().map(|resource| {
                flavor.nominal.iter().find(|(name, _)| name == *resource).map_or_else(String::new, |(_, q)| q.0.clone())
            });
            rows.push(
                std::iter::once(flavor.selector.flavor.clone())
                    .chain(std::iter::once(from.to_owned()))
                    .chain(cells)
                    .collect(),
            );
        }
        let totals = resources.iter().map(|resource| {
            let policy = tier.quotas.get(*resource).map_or("", |quota| quota.nominal.0.as_str());
            match (quota.total_millis(resource), parse_millis(policy)) {
                (Some(sum), Some(total)) if sum == total => format!("{policy} = policy"),
                (Some(sum), Some(_)) => format!("{} of {policy}", format_millis(sum, policy)),
                _ => format!("? of {policy}"),
            }
        });
        rows.push(std::iter::once("total".to_owned()).chain(std::iter::once(String::new())).chain(totals).collect());
        let count = quota.flavors.len();
        let flavors = if count == 1 { "flavor" } else { "flavors" };
        let _ = writeln!(text, "quota of tier {} ({count} {flavors}):", tier.name);
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|column| rows.iter().map(|row| row.get(column).map_or(0, String::len)).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
            let _ = writeln!(text, "  {}", cells.join("  ").trim_end());
        }
    }
    text
}

/// Nominal quota per resource a ClusterQueue offers, summed over every flavor of every resource group, in
/// milli-units, read from its JSON (`{"spec": {"resourceGroups": ...}}`, as the live cache keeps it).
/// Quantities that are not exact in milli-units are left out.
pub fn offered_by_queue(queue: &serde_json::Value) -> BTreeMap<String, i128> {
    let mut offered = BTreeMap::new();
    let groups = queue.pointer("/spec/resourceGroups").and_then(serde_json::Value::as_array);
    for group in groups.into_iter().flatten() {
        let flavors = group.get("flavors").and_then(serde_json::Value::as_array);
        for flavor in flavors.into_iter().flatten() {
            let resources = flavor.get("resources").and_then(serde_json::Value::as_array);
            for resource in resources.into_iter().flatten() {
                let name = resource.get("name").and_then(serde_json::Value::as_str);
                let nominal = resource.get("nominalQuota").and_then(quantity_millis);
                if let (Some(name), Some(nominal)) = (name, nominal) {
                    *offered.entry(name.to_owned()).or_insert(0) += nominal;
                }
            }
        }
    }
    offered
}

/// A quantity as a Kueue object's JSON holds it (a string, or a number of whole units), in milli-units.
pub fn quantity_millis(quantity: &serde_json::Value) -> Option<i128> {
    match quantity {
        serde_json::Value::String(text) => parse_millis(text),
        serde_json::Value::Number(number) => number.as_i64().map(|units| i128::from(units) * 1000),
        _ => None,
    }
}

/// The tiers whose ClusterQueue, as `live` shows it (by ClusterQueue name, as JSON), offers more of some
/// resource than `spec` now gives it: applying the policy shrinks their effective quota (e.g. the first apply
/// after the upgrade that made a tier's quota a cap). Tiers without a live ClusterQueue are not named.
pub fn shrunk_tiers(spec: &TierPolicySpec, live: impl Fn(&str) -> Option<serde_json::Value>) -> Vec<String> {
    spec.tiers
        .iter()
        .filter(|tier| {
            let Some(queue) = live(&super::names::cluster_queue_name(&tier.name)) else { return false };
            let quota = tier_quota(spec, tier);
            offered_by_queue(&queue)
                .into_iter()
                .any(|(resource, was)| quota.total_millis(&resource).is_some_and(|now| was > now))
        })
        .map(|tier| tier.name.clone())
        .collect()
}

/// `millis` in the unit `like` is written in (binary suffixes as `Gi`/`Mi`/`Ki`), for the summary.
pub fn format_millis(millis: i128, like: &str) -> String {
    let binary = BINARY_SUFFIXES.iter().any(|(suffix, _)| like.ends_with(suffix));
    let units: &[(&str, i128)] = if binary { &BINARY_UNITS } else { &DECIMAL_UNITS };
    let (suffix, unit) = units.iter().copied().find(|(_, unit)| millis % unit == 0).unwrap_or(("m", 1));
    format!("{}{suffix}", millis / unit)
}

/// `limit`, or `nominal` when the limit is larger (Kueue lends at most the nominal quota).
fn at_most(limit: &Quantity, nominal: &Quantity) -> Quantity {
    match (parse_millis(&limit.0), parse_millis(&nominal.0)) {
        (Some(limit_millis), Some(nominal_millis)) if limit_millis > nominal_millis => nominal.clone(),
        _ => limit.clone(),
    }
}

/// The nominal quota as written when the flavor has all of it (a one-flavor tier renders exactly the policy).
fn whole_or_original(gpus: u64, total: u64, original: &Quantity) -> Quantity {
    if gpus == total { original.clone() } else { Quantity(gpus.to_string()) }
}

/// Explicit shares, 0 for fallbacks, and the rest over the rules without a share (or the primary class).
fn assign_gpus(tier: &Tier, flavors: &mut [FlavorShare], total: u64) {
    let mut explicit = 0_u64;
    for flavor in flavors.iter_mut() {
        if let Some(share) = tier.quota_shares.get(&flavor.source) {
            flavor.gpus = u64::from(*share);
            explicit += u64::from(*share);
        }
    }
    let rest = total.saturating_sub(explicit);
    let open_rules: Vec<usize> = flavors
        .iter()
        .enumerate()
        .filter(|(_, flavor)| flavor.role == FlavorRole::Rule && !flavor.explicit)
        .map(|(index, _)| index)
        .collect();
    if open_rules.is_empty() {
        if let Some(primary) = flavors.iter_mut().find(|flavor| flavor.role == FlavorRole::Class && !flavor.explicit) {
            primary.gpus = rest;
        }
        return;
    }
    // The base belongs to the strategy's first rule; it applies only while that rule takes part in the split.
    let first_rule = flavors.iter().position(|flavor| flavor.role == FlavorRole::Rule);
    let base = match (first_rule, open_rules.first()) {
        (Some(first), Some(open)) if first == *open => flavors.get(first).map_or(0, |flavor| flavor.base),
        _ => 0,
    };
    let weights: Vec<u32> = open_rules.iter().filter_map(|index| flavors.get(*index)).map(|f| f.weight).collect();
    let shares = Split::new(base, weights).shares(rest);
    for (index, share) in open_rules.into_iter().zip(shares) {
        if let Some(flavor) = flavors.get_mut(index) {
            flavor.gpus = share;
        }
    }
}

/// Splits `quantity` over `count` flavors in proportion to `split`'s weights, in the largest unit dividing it.
/// A quantity that is not exact in milli-units (an invalid policy) goes whole to the first flavor.
fn split_quantity(quantity: &Quantity, split: &Split, count: usize) -> Vec<Quantity> {
    let Some(millis) = parse_millis(&quantity.0) else {
        return (0..count).map(|index| Quantity(if index == 0 { quantity.0.clone() } else { "0".into() })).collect();
    };
    let binary = BINARY_SUFFIXES.iter().any(|(suffix, _)| quantity.0.ends_with(suffix));
    let units: &[(&str, i128)] = if binary { &BINARY_UNITS } else { &DECIMAL_UNITS };
    let (suffix, unit) = units.iter().copied().find(|(_, unit)| millis % unit == 0).unwrap_or(("m", 1));
    let total = u64::try_from(millis / unit).unwrap_or(u64::MAX);
    split
        .shares(total)
        .into_iter()
        .map(|share| {
            if i128::from(share) * unit == millis {
                quantity.clone()
            } else if share == 0 {
                Quantity("0".into())
            } else {
                Quantity(format!("{share}{suffix}"))
            }
        })
        .collect()
}

const KIB_MILLIS: i128 = 1024 * 1000;
const BINARY_SUFFIXES: [(&str, u32); 6] = [("Ki", 1), ("Mi", 2), ("Gi", 3), ("Ti", 4), ("Pi", 5), ("Ei", 6)];
const BINARY_UNITS: [(&str, i128); 5] =
    [("Gi", KIB_MILLIS * 1024 * 1024), ("Mi", KIB_MILLIS * 1024), ("Ki", KIB_MILLIS), ("", 1000), ("m", 1)];
const DECIMAL_UNITS: [(&str, i128); 2] = [("", 1000), ("m", 1)];

/// `text` as a whole number of units, when it is one (e.g. `16`, `1k`; not `1.5` or `500m`).
pub fn whole_units(text: &str) -> Option<u64> {
    let millis = parse_millis(text)?;
    (millis % 1000 == 0).then(|| u64::try_from(millis / 1000).ok()).flatten()
}

/// `text` (a Kubernetes quantity, not negative) in exact milli-units; `None` when it is not a quantity, is
/// negative, or is not a whole number of milli-units (`1n`).
pub fn parse_millis(text: &str) -> Option<i128> {
    let rest = text.strip_prefix('+').unwrap_or(text);
    let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if !digits_only(whole) || !digits_only(fraction) || (whole.is_empty() && fraction.is_empty()) {
        return None;
    }
    if whole.len() + fraction.len() > 30 {
        return None;
    }
    let digits: i128 = format!("{whole}{fraction}").trim_start_matches('0').parse().unwrap_or(0);
    let fraction_digits = u32::try_from(fraction.len()).ok()?;
    // value = digits · multiplier / 10^fraction_digits, in milli-units: multiplier includes the 1000.
    let (numerator, exponent): (i128, i32) =
        if let Some((_, power)) = BINARY_SUFFIXES.iter().find(|(name, _)| *name == suffix) {
            (digits.checked_mul(1024_i128.checked_pow(*power)?)?, 3)
        } else {
            let exponent = match suffix {
                "" => 0,
                "n" => -9,
                "u" => -6,
                "m" => -3,
                "k" => 3,
                "M" => 6,
                "G" => 9,
                "T" => 12,
                "P" => 15,
                "E" => 18,
                other => other.strip_prefix(['e', 'E'])?.parse::<i32>().ok()?,
            };
            (digits, exponent.checked_add(3)?)
        };
    let shift = exponent.checked_sub(i32::try_from(fraction_digits).ok()?)?;
    if shift >= 0 {
        numerator.checked_mul(10_i128.checked_pow(u32::try_from(shift).ok()?)?)
    } else {
        let divisor = 10_i128.checked_pow(u32::try_from(-shift).ok()?)?;
        (numerator % divisor == 0).then_some(numerator / divisor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_exact_milli_units() {
        assert_eq!(parse_millis("16"), Some(16_000));
        assert_eq!(parse_millis("500m"), Some(500));
        assert_eq!(parse_millis("1.5"), Some(1_500));
        assert_eq!(parse_millis("512Gi"), Some(512 * 1024 * 1024 * 1024 * 1000));
        assert_eq!(parse_millis("1k"), Some(1_000_000));
        assert_eq!(parse_millis("2e3"), Some(2_000_000));
        assert_eq!(parse_millis("1n"), None);
        assert_eq!(parse_millis("-1"), None);
        assert_eq!(parse_millis("1e40"), None);
        assert_eq!(whole_units("1e30"), None);
        assert_eq!(whole_units("1.5"), None);
        assert_eq!(whole_units("32"), Some(32));
    }

    #[test]
    fn memory_is_split_in_gibibytes_and_adds_up_exactly() {
        let split = Split::new(0, vec![1, 2]);
        let parts = split_quantity(&Quantity("512Gi".into()), &split, 2);
        assert_eq!(parts, [Quantity("171Gi".into()), Quantity("341Gi".into())]);
        let parts = split_quantity(&Quantity("3".into()), &Split::new(0, vec![1, 1]), 2);
        assert_eq!(parts, [Quantity("1".into()), Quantity("2".into())]);
    }

    #[test]
    fn the_summary_shows_each_flavor_s_share_and_the_total_against_the_policy() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/spot-mix/policy.yaml"));
        let policy = crate::inputs::parse_policy(&text.unwrap(), "spot-mix").unwrap();
        let summary = quota_summary(&policy.spec);
        assert!(summary.contains("quota of tier bronze (3 flavors):"), "{summary}");
        let bronze = summary.split("quota of tier bronze").nth(1).unwrap();
        let line = |flavor: &str| bronze.lines().find(|line| line.trim_start().starts_with(flavor)).unwrap().to_owned();
        let words = |flavor: &str| line(flavor).split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(words("l4-od-spot-spot"), ["l4-od-spot-spot", "base/weight", "split", "80", "320Gi", "10"]);
        assert_eq!(words("total"), ["total", "128", "=", "policy", "512Gi", "=", "policy", "16", "=", "policy"]);
        let silver = summary.split("quota of tier silver").nth(1).unwrap();
        let h100 = silver.lines().find(|line| line.trim_start().starts_with("h100")).unwrap();
        assert_eq!(h100.split_whitespace().collect::<Vec<_>>(), ["h100", "none", "(borrows)", "0", "0", "0"]);
    }

    #[test]
    fn a_live_queue_giving_every_flavor_the_full_quota_names_its_tier_as_shrunk() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/spot-mix/policy.yaml"));
        let policy = crate::inputs::parse_policy(&text.unwrap(), "spot-mix").unwrap();
        let full = |flavors: &[&str], gpus: &str| {
            let flavors: Vec<serde_json::Value> = flavors
                .iter()
                .map(|name| serde_json::json!({"name": name, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}))
                .collect();
            serde_json::json!({"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}]}})
        };
        // Before issue 19: bronze 16 on l4 and 16 on each rule flavor; silver 32 on a100 and on h100; gold one flavor.
        let live = |name: &str| match name {
            "tiergate-bronze" => Some(full(&["l4", "od-spot-ondemand", "od-spot-spot"], "16")),
            "tiergate-silver" => Some(full(&["a100", "h100"], "32")),
            "tiergate-gold" => Some(full(&["h100"], "64")),
            _ => None,
        };
        assert_eq!(shrunk_tiers(&policy.spec, live), ["silver", "bronze"]);
        assert_eq!(offered_by_queue(&full(&["a", "b"], "16"))["nvidia.com/gpu"], 32_000);
        let converged = |name: &str| match name {
            "tiergate-bronze" => Some(full(&["l4", "l4-od-spot-ondemand", "l4-od-spot-spot"], "0")),
            _ => None,
        };
        assert!(shrunk_tiers(&policy.spec, converged).is_empty());
    }

    #[test]
    fn a_total_short_of_the_policy_is_shown_as_part_of_it() {
        assert_eq!(format_millis(parse_millis("12Gi").unwrap_or(0), "16Gi"), "12Gi");
        assert_eq!(format_millis(12_000, "16"), "12");
    }

    #[test]
    fn a_quantity_a_flavor_gets_whole_keeps_its_policy_spelling() {
        let parts = split_quantity(&Quantity("4Ti".into()), &Split::new(0, vec![5, 0]), 2);
        assert_eq!(parts, [Quantity("4Ti".into()), Quantity("0".into())]);
    }
}
