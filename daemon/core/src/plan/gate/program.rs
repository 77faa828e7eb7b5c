//! What both halves of the gate compute about the request before any rule: its kind's pod specs, whether it asks
//! for a GPU, whether Kueue queues it; the variables and match conditions both policies share; pure.
//!
//! Kind-specific parts dispatch on `request.kind` in one chain ([`by_kind`]); the API server evaluates a variable
//! only when first read, and a chain only down to the request's kind.

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, Variable};
use tiergate_workloads::{ADAPTERS, QUEUE_NAME_LABEL, TemplateLayout, WorkloadAdapter};

use super::cel::{list, literal, pointer_path, spec_groups};
use super::rules::{F, P, is_gpu_resource, reaches_gpu, requirements_any};

/// The object, read as `dyn` so that one program type-checks against every kind's schema (written out each time,
/// not a variable: the API server evaluates each variable as a program of its own, and reading one costs a lookup).
pub(crate) const OBJECT: &str = "dyn(object)";
/// The old object on UPDATE, as `dyn`.
pub(crate) const OLD_OBJECT: &str = "dyn(oldObject)";

/// CEL: `request.kind` is the adapter's kind.
pub(crate) fn is_kind(adapter: &WorkloadAdapter) -> String {
    format!("(request.kind.group == {} && request.kind.kind == {})", literal(adapter.group), literal(adapter.kind))
}

/// CEL: `part` of the request's kind (`None` kinds and unknown kinds get `otherwise`); kinds with the same part
/// share one branch.
pub(crate) fn by_kind(part: &dyn Fn(&'static WorkloadAdapter) -> Option<String>, otherwise: &str) -> String {
    let mut branches: Vec<(String, Vec<&'static WorkloadAdapter>)> = Vec::new();
    for adapter in ADAPTERS {
        let Some(expression) = part(adapter) else { continue };
        match branches.iter_mut().find(|(known, _)| *known == expression) {
            Some((_, adapters)) => adapters.push(adapter),
            None => branches.push((expression, vec![adapter])),
        }
    }
    let chain: String =
        branches.iter().map(|(expression, adapters)| format!("{} ? {expression} : ", is_one_of(adapters))).collect();
    format!("({chain}{otherwise})")
}

/// CEL: `request.kind` is one of `adapters`' kinds.
fn is_one_of(adapters: &[&WorkloadAdapter]) -> String {
    match adapters {
        [adapter] => is_kind(adapter),
        _ => {
            let kinds: Vec<String> =
                adapters.iter().map(|adapter| format!("{}/{}", adapter.group, adapter.kind)).collect();
            format!("{REQUEST_KIND} in {}", list(kinds.iter().map(String::as_str)))
        }
    }
}

/// CEL: the request's `group/kind`.
const REQUEST_KIND: &str = "(request.kind.group + '/' + request.kind.kind)";

/// Which kinds a program serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kinds {
    /// Every kind of the adapter table (the validating half).
    All,
    /// Every kind but AppWrapper (the mutating half: an AppWrapper's templates sit in components of any kind, with
    /// no fixed JSON-patch path, and walking them is most of a program's size; the validating half refuses a GPU
    /// AppWrapper outside its tier with its message).
    Mutated,
}

impl Kinds {
    /// Whether `adapter` is served.
    pub(crate) fn serves(self, adapter: &WorkloadAdapter) -> bool {
        self == Self::All || !matches!(adapter.templates, TemplateLayout::Embedded { .. })
    }
}

/// CEL: every pod spec of the request's kind, as groups (`base`: the object).
pub(crate) fn spec_groups_by_kind(base: &str, kinds: Kinds) -> String {
    by_kind(&|adapter| kinds.serves(adapter).then(|| spec_groups(adapter.templates, base)), "[]")
}

/// CEL: a requirement outside the templates of the request's kind asks a GPU (TrainJob `resourcesPerNode`).
pub(crate) fn outside_asks_gpu(base: &str) -> String {
    by_kind(
        &|adapter| {
            let parts: Vec<String> = adapter
                .resources_outside_templates
                .iter()
                .map(|pointer| {
                    let (guard, path) = pointer_path(base, pointer);
                    let requirements = asks_requirements(&path);
                    format!("({guard} && {requirements})")
                })
                .collect();
            (!parts.is_empty()).then(|| format!("({})", parts.join(" || ")))
        },
        "false",
    )
}

/// CEL: the `ResourceRequirements` at `path` ask a GPU.
fn asks_requirements(path: &str) -> String {
    requirements_any(path, 0, &|name| is_gpu_resource(name, 0))
}

/// CEL: some pod spec of the groups `groups` reaches a GPU, or `outside`.
pub(crate) fn asks_gpu(groups: &str, outside: &str) -> String {
    format!("({outside} || {groups}.exists(g, g.exists(s, {})))", reaches_gpu("s", 1))
}

/// CEL: Kueue queues the request's kind (a queue label and `suspend`, or pod groups).
pub(crate) fn queued() -> String {
    let kinds: Vec<String> = ADAPTERS
        .iter()
        .filter(|adapter| adapter.is_queued())
        .map(|adapter| format!("{}/{}", adapter.group, adapter.kind))
        .collect();
    format!("{REQUEST_KIND} in {}", list(kinds.iter().map(String::as_str)))
}

/// The variables every program starts with: the specs, whether a requirement outside them asks a GPU, whether the
/// kind is queued.
pub(crate) fn common_variables(kinds: Kinds) -> Vec<Variable> {
    vec![
        variable("specs", spec_groups_by_kind(OBJECT, kinds)),
        variable("outside", outside_asks_gpu(OBJECT)),
        variable("queued", queued()),
    ]
}

/// A variable.
pub(crate) fn variable(name: &str, expression: String) -> Variable {
    Variable { name: name.to_owned(), expression }
}

/// The name and CEL of the identity checks both halves start with: the policy's exempt users and groups (admins,
/// MultiKueue) are left alone; trusted controllers (`trustedControllers`) write any kind but a Pod unchecked. A Pod
/// is checked whoever writes it: it is where GPU reach becomes real.
pub fn identity_checks() -> [(&'static str, String); 2] {
    [
        (
            NOT_EXEMPT,
            format!(
                "!(request.userInfo.username in {P}.exemptUsers) && (!has(request.userInfo.groups) || \
                 !request.userInfo.groups.exists(u, u in {P}.exemptGroups))"
            ),
        ),
        (
            NOT_TRUSTED,
            format!(
                "(request.kind.group == '' && request.kind.kind == 'Pod') || !(request.userInfo.username in \
                 {P}.trustedControllers)"
            ),
        ),
    ]
}

/// The identity check passed by everyone but the exempt users and groups.
pub const NOT_EXEMPT: &str = "not-an-exempt-user-or-group";
/// The identity check passed by everyone but trusted controllers writing a kind other than a Pod.
pub const NOT_TRUSTED: &str = "a-pod-or-not-a-trusted-controller";

/// The identity checks as match conditions (the mutating half: a request it leaves alone costs no patch).
pub(crate) fn identity_conditions() -> Vec<MatchCondition> {
    identity_checks()
        .into_iter()
        .map(|(name, expression)| MatchCondition { name: name.to_owned(), expression })
        .collect()
}

/// CEL: the labels at the metadata pointer `at` of `root` carry a usable queue (non-empty, no other tier's
/// LocalQueue).
pub(crate) fn usable_queue(root: &str, at: &str) -> String {
    let (guard, path) = pointer_path(root, &format!("{at}/labels"));
    let label = literal(QUEUE_NAME_LABEL);
    format!(
        "(({guard}) && {label} in {path} && {path}[{label}] != '' && (!({path}[{label}] in {P}.tierQueues) || \
         {path}[{label}] == {F}.queue))"
    )
}
