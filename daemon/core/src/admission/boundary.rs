//! The tenant boundary of one pod template: whether it can reach GPU nodes (a GPU resource, a DRA claim, a
//! toleration of a GPU class's taint, node selection on GPU-class labels, a GPU node by name) and which of its
//! fields point at GPU classes outside the tier; no I/O.
//!
//! The rule is a confinement, not a blocklist: a template that can reach GPU nodes by any route gets the tier's
//! class (selector and tolerations, ANDed with what the user wrote); only fields that name another tier's class
//! or node outright are refused. docs/admission.md "Tenant boundary" lists every route.

use std::collections::BTreeSet;

use serde_json::Value;
pub(super) use tiergate_kueue::HOSTNAME_LABEL;

use super::classes::{Selection, selection};
use super::patch::Lookup;
pub(crate) use super::violation::Violation;
use crate::placement::Entries;
use crate::policy::{GpuClass, Tier, TierPolicySpec};
use crate::view::{NodeView, Snapshot};

/// Extended-resource prefixes that are GPUs whatever the policy says: NVIDIA whole GPUs and their shared or
/// renamed variants (`nvidia.com/gpu`, `nvidia.com/gpu.shared`), MIG slices, AMD GPUs and every Intel GPU resource.
/// A request for one the tier's classes do not count is refused, never admitted unconfined. Other resources of
/// these vendors (NICs, FPGAs) are not GPUs; they reach GPU nodes only through the routes below.
pub const VENDOR_GPU_RESOURCE_PREFIXES: &[&str] =
    &["nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/"];
/// The user-name prefix of kubelets (`system:node:<node>`), which write the mirror pods of their static pods: the
/// node authorizer lets a kubelet name only its own node, and a static pod runs whatever the API server stores.
pub const MIRROR_POD_WRITER_PREFIX: &str = "system:node:";
/// The node field a `matchFields` expression may select on.
const NODE_NAME_FIELD: &str = "metadata.name";

/// How one pod template can reach GPU nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Reach {
    /// GPU resources requested or limited (non-zero): containers, init containers and pod-level `resources`.
    pub(super) gpu_resources: BTreeSet<String>,
    /// The template claims devices through DRA (`spec.resourceClaims`).
    pub(super) dra_claims: bool,
    /// Every route, described for the decision's reasons (empty: the template cannot reach GPU nodes).
    pub(super) routes: Vec<String>,
}

impl Reach {
    pub(super) fn reaches_gpu(&self) -> bool {
        !self.routes.is_empty()
    }
}

/// A field of the template that points at a GPU class outside the tier.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ForeignTarget {
    /// The field and what it says, e.g. `affinity.nodeAffinity (required) gpu.nvidia.com/class In [h100]`.
    pub(super) field: String,
    /// What it reaches, e.g. `GPU class h100`.
    pub(super) target: String,
}

/// Whether the extended resource `name` is a GPU: listed by a class of the policy or of a GPU vendor prefix.
pub(super) fn is_gpu_resource(policy: &TierPolicySpec, name: &str) -> bool {
    VENDOR_GPU_RESOURCE_PREFIXES.iter().any(|prefix| name.starts_with(prefix))
        || policy.gpu_classes.iter().any(|class| class.counts_resource(name))
}

/// Every route by which the pod spec `spec` can reach GPU nodes.
pub(super) fn reach(policy: &TierPolicySpec, snapshot: &Snapshot, spec: &Value) -> Reach {
    let mut reach = Reach::default();
    for name in requested_resources(spec) {
        if is_gpu_resource(policy, &name) {
            reach.routes.push(format!("requests {name}"));
            reach.gpu_resources.insert(name);
        }
    }
    if spec.get("resourceClaims").and_then(Value::as_array).is_some_and(|claims| !claims.is_empty()) {
        reach.dra_claims = true;
        reach.routes.push("claims devices through DRA (resourceClaims)".to_owned());
    }
    if let Some(taint) = tolerated_gpu_taint(policy, spec) {
        reach.routes.push(format!("tolerates the GPU taint {taint}"));
    }
    let keys = class_label_keys(policy);
    for (field, key, _, _) in node_expressions(spec) {
        if keys.contains(key.as_str()) {
            reach.routes.push(format!("selects GPU-class label {key} ({field})"));
        }
    }
    for (field, node) in named_nodes(spec) {
        match find_node(snapshot, &node).map(|view| selection(policy, &view.labels)) {
            Some(Selection::None) => {}
            Some(_) => reach.routes.push(format!("names GPU node {node} ({field})")),
            None => reach.routes.push(format!("names node {node}, which tiergate does not know ({field})")),
        }
    }
    reach
}

/// Fields of `spec` that point at a GPU class outside `in_tier` (or a GPU-class label value of no class): a
/// required node-affinity `In` on a class label, or a node of such a class by name (`nodeName`, hostname,
/// `matchFields metadata.name`). A nodeSelector is judged by the caller (`classes::selection`).
pub(super) fn foreign_targets(
    policy: &TierPolicySpec,
    snapshot: &Snapshot,
    in_tier: &dyn Fn(&str) -> bool,
    spec: &Value,
) -> Vec<ForeignTarget> {
    let mut targets = BTreeSet::new();
    let keys = class_label_keys(policy);
    for (field, key, operator, values) in node_expressions(spec) {
        if !field.contains("required") || operator != "In" || !keys.contains(key.as_str()) {
            continue;
        }
        for value in values {
            let class = policy.gpu_classes.iter().find(|class| class.node_labels.get(&key) == Some(&value));
            let target = match class {
                Some(class) if in_tier(&class.name) => continue,
                Some(class) => format!("GPU class {}", class.name),
                None => format!("{key}={value}, which is no GPU class of the policy"),
            };
            targets.insert(ForeignTarget { field: format!("{field} {key} In [{value}]"), target });
        }
    }
    // A preferred term only ranks nodes; with the tier's selector ANDed it cannot leave the tier.
    for (field, node) in named_nodes(spec).into_iter().filter(|(field, _)| !field.contains("preferred")) {
        let Some(view) = find_node(snapshot, &node) else {
            continue;
        };
        let target = match selection(policy, &view.labels) {
            Selection::None => continue,
            Selection::Class(class) if in_tier(&class.name) => continue,
            Selection::Class(class) => format!("node {node} of GPU class {}", class.name),
            Selection::Unknown(label) => format!("node {node} ({label}, which is no GPU class of the policy)"),
        };
        targets.insert(ForeignTarget { field: format!("{field} {node}"), target });
    }
    targets.into_iter().collect()
}

/// GPU resources of `reach` that no class of the tier counts.
pub(super) fn unprovided_resources<'r>(reach: &'r Reach, classes: &[&GpuClass]) -> Vec<&'r str> {
    reach
        .gpu_resources
        .iter()
        .filter(|name| !classes.iter().any(|class| class.counts_resource(name)))
        .map(String::as_str)
        .collect()
}

/// The names of every non-zero resource requested or limited by a container, an init container or the pod.
fn requested_resources(spec: &Value) -> BTreeSet<String> {
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|field| spec.get(field).and_then(Value::as_array))
        .flatten()
        .filter_map(|container| container.get("resources"));
    containers
        .chain(spec.get("resources"))
        .flat_map(|resources| ["requests", "limits"].map(|kind| resources.get(kind)))
        .flatten()
        .filter_map(Value::as_object)
        .flatten()
        .filter(|(_, quantity)| !is_zero_quantity(quantity))
        .map(|(name, _)| name.clone())
        .collect()
}

/// A quantity whose number is zero (`0`, `0.0`, `0m`); the API server rejects anything that is not a quantity.
fn is_zero_quantity(quantity: &Value) -> bool {
    match quantity {
        Value::String(text) => {
            let number = text.trim().trim_start_matches('+');
            number.chars().take_while(|c| c.is_ascii_digit() || *c == '.').all(|c| matches!(c, '0' | '.'))
        }
        Value::Number(number) => number.as_f64() == Some(0.0),
        _ => true,
    }
}

/// Every label key some GPU class identifies its nodes by.
fn class_label_keys(policy: &TierPolicySpec) -> BTreeSet<&str> {
    policy.gpu_classes.iter().flat_map(|class| class.node_labels.keys().map(String::as_str)).collect()
}

/// A toleration of `spec` that tolerates a taint of some GPU class, as `key=value:effect`.
fn tolerated_gpu_taint(policy: &TierPolicySpec, spec: &Value) -> Option<String> {
    let tolerations = spec.get("tolerations").and_then(Value::as_array)?;
    fn field<'v>(toleration: &'v Value, name: &str) -> &'v str {
        toleration.get(name).and_then(Value::as_str).unwrap_or_default()
    }
    for taint in policy.gpu_classes.iter().flat_map(|class| &class.node_taints) {
        let taint_value = taint.value.as_deref().unwrap_or_default();
        let tolerated = tolerations.iter().any(|toleration| {
            let (key, operator, effect) =
                (field(toleration, "key"), field(toleration, "operator"), field(toleration, "effect"));
            let key_matches = key == taint.key || (key.is_empty() && operator == "Exists");
            let value_matches = operator == "Exists" || field(toleration, "value") == taint_value;
            let effect_matches = effect.is_empty() || effect == taint.effect;
            key_matches && value_matches && effect_matches
        });
        if tolerated {
            return Some(format!("{}={taint_value}:{}", taint.key, taint.effect));
        }
    }
    None
}

/// Every node-selection expression of `spec` as (field, key, operator, values): the nodeSelector (as `In`), the
/// required terms and the preferred terms of node affinity (matchExpressions; matchFields under their field).
fn node_expressions(spec: &Value) -> Vec<(String, String, String, Vec<String>)> {
    let mut expressions = Vec::new();
    if let Some(selector) = spec.get("nodeSelector").and_then(Value::as_object) {
        for (key, value) in selector {
            let values = value.as_str().map(str::to_owned).into_iter().collect();
            expressions.push(("nodeSelector".to_owned(), key.clone(), "In".to_owned(), values));
        }
    }
    let affinity = spec.lookup("/affinity/nodeAffinity");
    let required = affinity
        .and_then(|node| node.lookup("/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|term| ("affinity.nodeAffinity (required)", term));
    let preferred = affinity
        .and_then(|node| node.get("preferredDuringSchedulingIgnoredDuringExecution"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("preference"))
        .map(|term| ("affinity.nodeAffinity (preferred)", term));
    for (field, term) in required.chain(preferred) {
        for list in ["matchExpressions", "matchFields"] {
            for expression in term.get(list).and_then(Value::as_array).into_iter().flatten() {
                let text = |name: &str| expression.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
                let values = expression
                    .get("values")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                let key = match list {
                    "matchFields" => format!("field:{}", text("key")),
                    _ => text("key"),
                };
                expressions.push((field.to_owned(), key, text("operator"), values));
            }
        }
    }
    expressions
}

/// The node the pod spec `spec` is bound to by `nodeName` (skipping the scheduler), if any.
pub(super) fn named_node(spec: &Value) -> Option<&str> {
    spec.get("nodeName").and_then(Value::as_str).filter(|name| !name.is_empty())
}

/// Nodes `spec` names: `nodeName`, and `In` on the hostname label or the `metadata.name` field.
fn named_nodes(spec: &Value) -> Vec<(String, String)> {
    let mut nodes: Vec<(String, String)> = Vec::new();
    if let Some(name) = named_node(spec) {
        nodes.push(("nodeName".to_owned(), name.to_owned()));
    }
    let field_key = format!("field:{NODE_NAME_FIELD}");
    for (field, key, operator, values) in node_expressions(spec) {
        if operator == "In" && (key == HOSTNAME_LABEL || key == field_key) {
            let shown = if key == field_key { format!("{field} matchFields {NODE_NAME_FIELD}") } else { field };
            nodes.extend(values.into_iter().map(|node| (shown.clone(), node)));
        }
    }
    nodes
}

/// The known node called `name`, or whose hostname label is `name` (a node name and its hostname may differ).
fn find_node<'s>(snapshot: &'s Snapshot, name: &str) -> Option<&'s NodeView> {
    snapshot.nodes.get(name).map(AsRef::as_ref).or_else(|| {
        snapshot
            .nodes
            .values()
            .find(|node| node.labels.get(HOSTNAME_LABEL).is_some_and(|host| host == name))
            .map(AsRef::as_ref)
    })
}

/// The tier a template is judged against.
pub(super) struct TierBounds<'a> {
    pub(super) policy: &'a TierPolicySpec,
    pub(super) snapshot: &'a Snapshot,
    pub(super) namespace: &'a str,
    pub(super) tier: &'a Tier,
    pub(super) classes: &'a [&'a GpuClass],
    /// The kind is queued by tiergate (its GPUs are charged to the tier's ClusterQueue).
    pub(super) queued: bool,
}

/// Every violation of the pod spec `spec` (other than a nodeSelector naming a foreign class, which
/// `classes::selection` judges).
pub(super) fn violations(bounds: &TierBounds<'_>, spec: &Value) -> Vec<Violation> {
    let reach = reach(bounds.policy, bounds.snapshot, spec);
    let names: Vec<&str> = bounds.classes.iter().map(|class| class.name.as_str()).collect();
    let in_tier = |class: &str| names.contains(&class);
    let mut found: Vec<Violation> = foreign_targets(bounds.policy, bounds.snapshot, &in_tier, spec)
        .into_iter()
        .map(|foreign| Violation {
            reason: "foreign_gpu_class",
            problem: format!("{} reaches {}", foreign.field, foreign.target),
            fix: format!("remove it (tiergate confines the pods to [{}]) or name one of those", names.join(", ")),
        })
        .collect();
    for name in unprovided_resources(&reach, bounds.classes) {
        let provided: Vec<&str> = bounds.classes.iter().flat_map(|class| class.resource_patterns()).collect();
        found.push(Violation {
            reason: "unprovided_gpu_resource",
            problem: format!("a container or the pod requests {name}, a GPU resource no class of the tier provides"),
            fix: format!("request one of [{}] instead", provided.join(", ")),
        });
    }
    if bounds.queued {
        for name in reach.gpu_resources.iter().filter(|name| !bounds.tier.quotas.contains_key(name.as_str())) {
            if bounds.classes.iter().any(|class| class.counts_resource(name)) {
                found.push(Violation {
                    reason: "gpu_resource_without_quota",
                    problem: format!(
                        "the workload requests {name}, which tier {} has no quota for (Kueue would never admit it)",
                        bounds.tier.name
                    ),
                    fix: format!(
                        "request a resource the tier has quota for, or ask the platform team to add `{name}` under \
                         the tier's quotas in the TierPolicy"
                    ),
                });
            }
        }
    }
    if reach.dra_claims {
        let claims = super::claims::judge_pod_claims(
            bounds.policy,
            bounds.snapshot,
            bounds.namespace,
            &bounds.tier.name,
            bounds.classes,
            spec,
        );
        found.extend(claims.violations);
    }
    found
}

/// Rules of the placement strategies declared by `annotations` and `labels` (any seed format, or a policy strategy
/// by name) whose node selector names a GPU class outside the tier, or a GPU-class label value of no class. Such a
/// strategy would make tiergate itself write another tier's selector on some pod, so the object is refused at
/// once, whichever rule this pod would get.
pub(super) fn foreign_strategy_rules(
    policy: &TierPolicySpec,
    in_tier: &dyn Fn(&str) -> bool,
    annotations: &impl Entries,
    labels: &impl Entries,
) -> Vec<Violation> {
    let declared = crate::placement::declared_strategies(annotations, labels, Some(policy));
    let mut found = Vec::new();
    for strategy in declared.strategies.iter().flatten() {
        for rule in &strategy.rules {
            let target = match selection(policy, &rule.node_selector) {
                Selection::None => continue,
                Selection::Class(class) if in_tier(&class.name) => continue,
                Selection::Class(class) => format!("GPU class {}", class.name),
                Selection::Unknown(label) => format!("{label}, which is no GPU class of the policy"),
            };
            found.push(Violation {
                reason: "foreign_gpu_class",
                problem: format!("placement rule {} of {} selects {target}", rule.name, strategy.source.key()),
                fix: "use a strategy whose rules select no GPU class or only the tier's".to_owned(),
            });
        }
    }
    found
}
