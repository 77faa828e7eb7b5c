//! The tier rules as CEL over one pod spec (`dyn`) and the tier's parameter object (`params.spec`): what reaches a
//! GPU, what confines a spec to the tier's classes, which resources it may ask; pure string building.
//!
//! Each rule mirrors the webhook's (`admission::boundary`: `reach`, `is_gpu_resource`, `tolerated_gpu_taint`; the
//! class and resource checks of `admission::classes`) with the facts read from [`super::params`], never written
//! into the program; `depth` keeps iteration variables unique where rules nest.

use super::cel::literal;

/// The parameter object's spec.
pub(crate) const P: &str = "params.spec";
/// The tier's facts in it.
pub(crate) const F: &str = "params.spec.tier";
/// A quantity whose leading number is zero, as `tiergate_workloads::requests_any` reads it.
const ZERO_QUANTITY: &str = r"^\s*\+*[0.]*([^0-9.].*)?$";

/// `field` of `base` or the empty string.
pub(crate) fn or_empty(base: &str, field: &str) -> String {
    format!("(has({base}.{field}) ? {base}.{field} : '')")
}

/// CEL: the quantity `quantity` is not zero.
fn nonzero(quantity: &str) -> String {
    format!("!string({quantity}).matches({})", literal(ZERO_QUANTITY))
}

/// CEL: the resource `name` is a GPU (`boundary::is_gpu_resource`: a vendor prefix or any class's pattern).
pub(crate) fn is_gpu_resource(name: &str, depth: usize) -> String {
    format!("({name} in {P}.gpuResourceNames || {P}.gpuResourcePrefixes.exists(p{depth}, {name}.startsWith(p{depth})))")
}

/// CEL: the resource `name` may be asked in the tier: a class of the tier counts it and, on a queued kind
/// (`queued`, a CEL bool), the tier has quota for it.
fn is_provided(name: &str, queued: &str, depth: usize) -> String {
    format!(
        "(({name} in {F}.resourceNames || {F}.resourcePrefixes.exists(q{depth}, {name}.startsWith(q{depth}))) && \
         (!{queued} || {name} in {F}.quotaResources))"
    )
}

/// CEL: some resource of the requirements `requirements` matches `test` with a non-zero quantity.
pub(crate) fn requirements_any(requirements: &str, depth: usize, test: &dyn Fn(&str) -> String) -> String {
    let name = format!("r{depth}");
    let parts = ["requests", "limits"].map(|kind| {
        let map = format!("{requirements}.{kind}");
        format!("(has({map}) && {map}.exists({name}, {} && {}))", test(&name), nonzero(&format!("{map}[{name}]")))
    });
    format!("({})", parts.join(" || "))
}

/// CEL: some container of the spec `spec` (containers, init containers, SparkPodSpec sidecars), the pod itself, or
/// a SparkPodSpec's `gpu` asks a resource matching `test` (`requests_any` and `requested_resources`).
pub(crate) fn asks(spec: &str, depth: usize, test: &dyn Fn(&str) -> String) -> String {
    let container = format!("c{depth}");
    let lists: Vec<String> = ["containers", "initContainers", "sidecars"]
        .iter()
        .map(|field| format!("(has({spec}.{field}) ? {spec}.{field} : [])"))
        .collect();
    let resources = format!("{container}.resources");
    let gpu = format!("{spec}.gpu");
    format!(
        "(({}).exists({container}, has({resources}) && {}) || (has({spec}.resources) && {}) || (has({gpu}) && \
         has({gpu}.name) && has({gpu}.quantity) && {} && {}))",
        lists.join(" + "),
        requirements_any(&resources, depth, test),
        requirements_any(&format!("{spec}.resources"), depth, test),
        test(&format!("{gpu}.name")),
        nonzero(&format!("{gpu}.quantity"))
    )
}

/// CEL: the spec claims devices through DRA.
pub(crate) fn claims(spec: &str) -> String {
    format!("(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0)")
}

/// CEL: the spec can reach GPU nodes (`boundary::reach` without the node-name route, which needs the node list):
/// a GPU resource, a DRA claim, a toleration of a GPU class's taint, a GPU-class label key in its nodeSelector or
/// node affinity.
pub(crate) fn reaches_gpu(spec: &str, depth: usize) -> String {
    let resources = asks(spec, depth, &|name| is_gpu_resource(name, depth));
    let selector =
        format!("(has({spec}.nodeSelector) && {spec}.nodeSelector.exists(s{depth}, s{depth} in {P}.classLabelKeys))");
    let affinity = affinity_any(spec, depth, &|expression| format!("{expression}.key in {P}.classLabelKeys"));
    format!("({resources} || {} || {} || {selector} || {affinity})", claims(spec), tolerates_gpu_taint(spec, depth))
}

/// CEL: a toleration of the spec tolerates a GPU class's taint (`boundary::tolerated_gpu_taint`).
fn tolerates_gpu_taint(spec: &str, depth: usize) -> String {
    let (toleration, taint) = (format!("l{depth}"), format!("g{depth}"));
    let (key, operator, value, effect) = (
        or_empty(&toleration, "key"),
        or_empty(&toleration, "operator"),
        or_empty(&toleration, "value"),
        or_empty(&toleration, "effect"),
    );
    format!(
        "(has({spec}.tolerations) && {spec}.tolerations.exists({toleration}, {P}.gpuTaints.exists({taint}, \
         ({key} == {taint}.key || ({key} == '' && {operator} == 'Exists')) && ({operator} == 'Exists' || \
         {value} == {taint}.value) && ({effect} == '' || {effect} == {taint}.effect))))"
    )
}

/// The spec's required node-affinity terms and the guard that they exist.
fn required_terms(spec: &str) -> (String, String) {
    let node = format!("{spec}.affinity.nodeAffinity");
    let required = format!("{node}.requiredDuringSchedulingIgnoredDuringExecution");
    let guard = format!("has({spec}.affinity) && has({node}) && has({required}) && has({required}.nodeSelectorTerms)");
    (guard, format!("{required}.nodeSelectorTerms"))
}

/// CEL: `test` holds for some matchExpression of the spec's node affinity (required or preferred).
fn affinity_any(spec: &str, depth: usize, test: &dyn Fn(&str) -> String) -> String {
    let (guard, terms) = required_terms(spec);
    let node = format!("{spec}.affinity.nodeAffinity");
    let preferred = format!("{node}.preferredDuringSchedulingIgnoredDuringExecution");
    let (term, expression) = (format!("n{depth}"), format!("e{depth}"));
    let test = test(&expression);
    format!(
        "(({guard} && {terms}.exists({term}, has({term}.matchExpressions) && {term}.matchExpressions.exists(\
         {expression}, {test}))) || (has({spec}.affinity) && has({node}) && has({preferred}) && {preferred}.exists(\
         {term}, has({term}.preference) && has({term}.preference.matchExpressions) && \
         {term}.preference.matchExpressions.exists({expression}, {test}))))"
    )
}

/// CEL: the label `key` with value `value` (CEL expressions) selects a class of the tier, or is no class label.
fn value_in_tier(key: &str, value: &str) -> String {
    format!("(!({key} in {P}.classLabelKeys) || {value} in {F}.classValues[{key}])")
}

/// CEL: the spec selects no GPU class outside the tier by nodeSelector or a required node-affinity `In`
/// (`true` when the policy allows foreign classes).
pub(crate) fn no_foreign_class(spec: &str, depth: usize) -> String {
    let key = format!("s{depth}");
    let selector = format!(
        "(!has({spec}.nodeSelector) || {spec}.nodeSelector.all({key}, {}))",
        value_in_tier(&key, &format!("{spec}.nodeSelector[{key}]"))
    );
    let (guard, terms) = required_terms(spec);
    let (term, expression, value) = (format!("n{depth}"), format!("e{depth}"), format!("v{depth}"));
    let affinity = format!(
        "(!({guard}) || {terms}.all({term}, !has({term}.matchExpressions) || {term}.matchExpressions.all({expression}, \
         {expression}.operator != 'In' || !has({expression}.values) || {expression}.values.all({value}, {}))))",
        value_in_tier(&format!("{expression}.key"), &value)
    );
    format!("({P}.foreignClassesAllowed || ({selector} && {affinity}))")
}

/// CEL: the spec is confined to the tier's classes: no foreign choice, and a class of the tier selected (every label
/// of one class in its nodeSelector, or every required term `In` the tier's values), or `free` (a CEL bool: a queued
/// kind of a tier with fallbacks, where Kueue picks the flavor).
pub(crate) fn confined(spec: &str, depth: usize, free: &str) -> String {
    let class = format!("k{depth}");
    let selects = format!(
        "(has({spec}.nodeSelector) && {F}.classes.exists(m{depth}, m{depth}.all({class}, {class} in {spec}.nodeSelector \
         && {spec}.nodeSelector[{class}] == m{depth}[{class}])))"
    );
    let (guard, terms) = required_terms(spec);
    let (term, expression, value) = (format!("n{depth}"), format!("e{depth}"), format!("v{depth}"));
    let affinity = format!(
        "({guard} && size({terms}) > 0 && {terms}.all({term}, has({term}.matchExpressions) && \
         {term}.matchExpressions.exists({expression}, {expression}.key in {P}.classLabelKeys && {expression}.operator \
         == 'In' && has({expression}.values) && {expression}.values.all({value}, {value} in \
         {F}.classValues[{expression}.key]))))"
    );
    format!("({P}.foreignClassesAllowed || ({} && ({selects} || {affinity} || {free})))", no_foreign_class(spec, depth))
}

/// CEL: the spec asks no GPU resource the tier lacks and, under `draClaims: Deny`, names no ResourceClaim directly
/// (its claims come from templates, which the claim rule judges when the claims are made).
pub(crate) fn asks_only_tier_resources(spec: &str, depth: usize, queued: &str) -> String {
    let foreign =
        asks(spec, depth, &|name| format!("{} && !{}", is_gpu_resource(name, depth), is_provided(name, queued, depth)));
    let direct = format!(
        "(has({spec}.resourceClaims) && {spec}.resourceClaims.exists(d{depth}, has(d{depth}.resourceClaimName)))"
    );
    format!("(!{foreign} && (!{P}.claimsDenied || !{direct}))")
}

/// CEL: the DeviceClass name `class` may be claimed in the tier (`admission::claims::judge_requests`): one of the
/// tier's, or, under `draClaims: Confine`, one tiergate does not know.
fn claimable(class: &str) -> String {
    format!("({class} in {F}.deviceClasses || (!{P}.claimsDenied && !({class} in {P}.knownDeviceClasses)))")
}

/// CEL: every device request of the ResourceClaimSpec `claim` names a DeviceClass the tier may claim, without
/// `adminAccess` or `allocationMode: All` (`exactly`, and each `firstAvailable` alternative).
pub(crate) fn claim_within_tier(claim: &str) -> String {
    let all_mode = |request: &str| format!("(has({request}.allocationMode) && {request}.allocationMode == 'All')");
    let exactly = "r.exactly";
    format!(
        "(!has({claim}.devices) || !has({claim}.devices.requests) || {claim}.devices.requests.all(r,          (!has({exactly}) || ({} && !(has({exactly}.adminAccess) && {exactly}.adminAccess == true) && !{})) &&          (!has(r.firstAvailable) || r.firstAvailable.all(a, {} && !{}))))",
        claimable(&format!("{exactly}.deviceClassName")),
        all_mode(exactly),
        claimable("a.deviceClassName"),
        all_mode("a"),
    )
}

/// CEL: the spec names a GPU-class label key in its nodeSelector or a required node-affinity term (a choice the
/// webhook judges; the mutating half adds nothing then).
pub(crate) fn chooses_class(spec: &str, depth: usize) -> String {
    let selector =
        format!("(has({spec}.nodeSelector) && {spec}.nodeSelector.exists(s{depth}, s{depth} in {P}.classLabelKeys))");
    let affinity = affinity_any(spec, depth, &|expression| format!("{expression}.key in {P}.classLabelKeys"));
    format!("({selector} || {affinity})")
}

/// CEL: the spec names a pod `priorityClassName`.
pub(crate) fn names_priority_class(spec: &str) -> String {
    format!("(has({spec}.priorityClassName) && {spec}.priorityClassName != '')")
}

/// CEL: the spec names its node in `nodeName` (`admission::boundary::named_node`).
pub(crate) fn names_node(spec: &str) -> String {
    format!("(has({spec}.nodeName) && {spec}.nodeName != '')")
}
