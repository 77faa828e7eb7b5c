//! The in-server gate evaluated offline: the generated ValidatingAdmissionPolicy and its bindings run on an
//! AdmissionRequest as kube-apiserver runs them (binding namespace selector, the binding's parameter object as
//! `params`, resource rules, `matchConditions` in order, the variables, every validation, `failurePolicy: Fail`),
//! and the MutatingAdmissionPolicy's JSON patch (its removal and addition variables, evaluated, then applied as the
//! fixed mutation expression says), with the `cel` crate kube-cel builds on; no I/O.
#![cfg(test)]
#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_cel::cel::{Context, Program, Value as CelValue};
use serde_json::Value;
use tiergate::plan::gate::{Gate, build_gate, mutate};
use tiergate::plan::owned_labels;
use tiergate::policy::TierPolicy;
use tiergate_workloads::ADAPTERS;

/// The outcome's condition for an object that asks no GPU (`variables.gpu` false: every validation holds).
pub const NO_GPU: &str = "asks-for-a-gpu";
/// How every validation judging GPU objects only begins.
const GPU_SCOPED: &str = "!variables.gpu ||";
/// The identity check that leaves trusted controllers' writes of workload kinds alone.
pub const NOT_TRUSTED: &str = tiergate::plan::gate::program::NOT_TRUSTED;
/// The validating policy's match condition: some validation fails.
const BREAKS_A_RULE: &str = tiergate::plan::gate::validate::BREAKS_A_RULE;

/// What the gate does with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateOutcome {
    /// No binding selects the namespace, or no policy's resource rules match the kind.
    NotBound,
    /// A `matchCondition` is false: the request never reaches the validations.
    NotMatched {
        /// The first condition that was false.
        condition: String,
    },
    /// Every validation passed.
    Admitted,
    /// Refused: each failed validation's message (or the evaluation error, `failurePolicy: Fail`).
    Denied(Vec<String>),
}

impl GateOutcome {
    pub fn is_denied(&self) -> bool {
        matches!(self, Self::Denied(_))
    }
}

/// The gate of `policy`.
pub fn gate_of(policy: &TierPolicy) -> Gate {
    build_gate(policy, &owned_labels(policy))
}

/// Whether `selector` selects a namespace with `labels` (matchLabels, In, NotIn, Exists, DoesNotExist).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector.match_labels.iter().flatten().all(|(key, value)| labels.get(key) == Some(value));
    let by_expressions = selector.match_expressions.iter().flatten().all(|requirement| {
        let values = requirement.values.clone().unwrap_or_default();
        let value = labels.get(&requirement.key);
        match requirement.operator.as_str() {
            "In" => value.is_some_and(|value| values.contains(value)),
            "NotIn" => value.is_none_or(|value| !values.contains(value)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => panic!("operator {other}"),
        }
    });
    by_labels && by_expressions
}

fn to_cel(value: &Value) -> CelValue {
    kube_cel::cel::to_value(value).unwrap_or_else(|error| panic!("{error}"))
}

/// A gate whose expressions are compiled once, on first use (parsing the generated expressions dominates a debug
/// run; a request of one kind in one tier evaluates only that tier's policy).
pub struct CompiledGate {
    pub gate: Gate,
    programs: std::cell::RefCell<std::collections::HashMap<String, std::rc::Rc<Result<Program, String>>>>,
}

impl CompiledGate {
    pub fn new(gate: Gate) -> Self {
        Self { gate, programs: std::cell::RefCell::default() }
    }

    fn program(&self, expression: &str) -> std::rc::Rc<Result<Program, String>> {
        let cached = self.programs.borrow().get(expression).cloned();
        cached.unwrap_or_else(|| {
            let program = std::rc::Rc::new(Program::compile(expression).map_err(|error| format!("compile: {error}")));
            self.programs.borrow_mut().insert(expression.to_owned(), program.clone());
            program
        })
    }

    fn evaluate(&self, context: &Context<'_>, expression: &str) -> Result<bool, String> {
        match self.program(expression).as_ref() {
            Ok(program) => execute(program, context),
            Err(error) => Err(error.clone()),
        }
    }

    fn value(&self, context: &Context<'_>, expression: &str) -> Result<Value, String> {
        match self.program(expression).as_ref() {
            Ok(program) => json_of(program, context),
            Err(error) => Err(error.clone()),
        }
    }

    /// [`run_mutating`] with the compiled programs.
    pub fn run_mutating(&self, request: &Value, namespace_labels: &BTreeMap<String, String>) -> Option<Value> {
        let evaluate = |context: &Context<'_>, expression: &str| self.evaluate(context, expression);
        let value = |context: &Context<'_>, expression: &str| self.value(context, expression);
        run_mutating_with(&self.gate, request, namespace_labels, &evaluate, &value)
    }

    /// [`run_gate`] with the compiled programs.
    pub fn run(&self, request: &Value, namespace_labels: &BTreeMap<String, String>) -> GateOutcome {
        let evaluate = |context: &Context<'_>, expression: &str| self.evaluate(context, expression);
        let value = |context: &Context<'_>, expression: &str| self.value(context, expression);
        run_with(&self.gate, request, namespace_labels, &evaluate, &value)
    }
}

fn execute(program: &Program, context: &Context<'_>) -> Result<bool, String> {
    match program.execute(context) {
        Ok(CelValue::Bool(value)) => Ok(value),
        Ok(other) => Err(format!("not a boolean: {other:?}")),
        Err(error) => Err(format!("evaluation: {error}")),
    }
}

/// Evaluates `expression` in `context` to a boolean; an error or a non-boolean is an `Err` with the reason.
pub fn evaluate(context: &Context<'_>, expression: &str) -> Result<bool, String> {
    let program = Program::compile(expression).map_err(|error| format!("compile: {error}"))?;
    match program.execute(context) {
        Ok(CelValue::Bool(value)) => Ok(value),
        Ok(other) => Err(format!("not a boolean: {other:?}")),
        Err(error) => Err(format!("evaluation: {error}")),
    }
}

/// The CEL context of a request: `object`, `oldObject`, `request` and `params` (as the API server binds them).
pub fn context_of(request: &Value, params: &Value) -> Context<'static> {
    let mut context = Context::default();
    // kube-apiserver's `dyn()` only widens a type for its checker; the value passes through.
    context.add_function("dyn", passthrough);
    let operation = request["operation"].as_str().unwrap_or_default();
    let object = if operation == "DELETE" { Value::Null } else { request["object"].clone() };
    let old = if operation == "UPDATE" { request["oldObject"].clone() } else { Value::Null };
    let mut bound = request.clone();
    if let Some(map) = bound.as_object_mut() {
        map.remove("object");
        map.remove("oldObject");
    }
    context.add_variable_from_value("object", to_cel(&object));
    context.add_variable_from_value("oldObject", to_cel(&old));
    context.add_variable_from_value("request", to_cel(&bound));
    context.add_variable_from_value("params", to_cel(params));
    context
}

/// Binds each of `variables` in order, each seeing those before it as `variables`; one that fails to evaluate is
/// left unbound (the API server evaluates a variable only when read: an expression reading it then fails).
fn bind_variables(
    context: &mut Context<'_>,
    variables: &[k8s_openapi::api::admissionregistration::v1::Variable],
    value: ValueEvaluator<'_>,
) -> serde_json::Map<String, Value> {
    let mut bound = serde_json::Map::new();
    context.add_variable_from_value("variables", to_cel(&Value::Object(bound.clone())));
    for variable in variables {
        if let Ok(result) = value(context, &variable.expression) {
            bound.insert(variable.name.clone(), result);
            context.add_variable_from_value("variables", to_cel(&Value::Object(bound.clone())));
        }
    }
    bound
}

/// The parameter object a binding names, as JSON.
fn parameters_named(gate: &Gate, name: Option<&str>) -> Value {
    let found = gate.parameters.iter().find(|parameters| parameters.metadata.name.as_deref() == name);
    found.map(|parameters| serde_json::to_value(parameters).unwrap()).unwrap_or(Value::Null)
}

/// The object after the gate's MutatingAdmissionPolicy, or `None` when no binding selects the request's namespace
/// or its `matchConditions` keep it out (a CEL error skips the policy: `failurePolicy: Ignore`, as the API server
/// does).
pub fn run_mutating(gate: &Gate, request: &Value, namespace_labels: &BTreeMap<String, String>) -> Option<Value> {
    run_mutating_with(gate, request, namespace_labels, &evaluate, &value_of)
}

/// `expression`'s value in `context`, as JSON (compiled each time).
fn value_of(context: &Context<'_>, expression: &str) -> Result<Value, String> {
    let program = Program::compile(expression).map_err(|error| format!("compile: {error}"))?;
    json_of(&program, context)
}

/// `program`'s value in `context`, as JSON.
fn json_of(program: &Program, context: &Context<'_>) -> Result<Value, String> {
    let value = program.execute(context).map_err(|error| format!("evaluation: {error}"))?;
    value.json().map_err(|error| format!("as JSON: {error:?}"))
}

type ValueEvaluator<'e> = &'e dyn Fn(&Context<'_>, &str) -> Result<Value, String>;

fn run_mutating_with(
    gate: &Gate,
    request: &Value,
    namespace_labels: &BTreeMap<String, String>,
    evaluate: Evaluator<'_>,
    value: ValueEvaluator<'_>,
) -> Option<Value> {
    let namespace = request["namespace"].as_str().unwrap_or_default();
    let mut labels = namespace_labels.clone();
    labels.insert("kubernetes.io/metadata.name".to_owned(), namespace.to_owned());
    let group = request["kind"]["group"].as_str().unwrap_or_default();
    let kind = request["kind"]["kind"].as_str().unwrap_or_default();
    let adapter = ADAPTERS.iter().find(|adapter| adapter.group == group && adapter.kind == kind)?;
    let mut object = request["object"].clone();
    let mut edited = false;
    for binding in gate.mutating_bindings.iter().filter(|binding| mutating_binding_selects(binding, &labels)) {
        let binding_spec = binding.spec.as_ref()?;
        let name = binding_spec.policy_name.as_deref()?;
        let Some(policy) = gate.mutating_policies.iter().find(|policy| policy.metadata.name.as_deref() == Some(name))
        else {
            continue;
        };
        let params = parameters_named(gate, binding_spec.param_ref.as_ref().and_then(|param| param.name.as_deref()));
        let spec = policy.spec.as_ref().unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Ignore"));
        let rules = spec.match_constraints.as_ref().and_then(|constraints| constraints.resource_rules.as_ref());
        let operation = request["operation"].as_str().unwrap_or_default();
        let matches_rules = rules.into_iter().flatten().any(|rule| {
            let has = |list: &Option<Vec<String>>, item: &str| list.iter().flatten().any(|entry| entry == item);
            has(&rule.api_groups, group) && has(&rule.resources, &adapter.plural()) && has(&rule.operations, operation)
        });
        if !matches_rules {
            continue;
        }
        let mut current = request.clone();
        current["object"] = object.clone();
        let mut context = context_of(&current, &params);
        let matched = spec
            .match_conditions
            .iter()
            .flatten()
            .all(|condition| evaluate(&context, &condition.expression) == Ok(true));
        if !matched {
            continue;
        }
        let expressions: Vec<Option<&str>> = spec
            .mutations
            .iter()
            .flatten()
            .map(|mutation| mutation.json_patch.as_ref().and_then(|patch| patch.expression.as_deref()))
            .collect();
        assert_eq!(
            expressions,
            [Some(mutate::MUTATION_EXPRESSION)],
            "{kind}: the policy's one mutation is not the fixed expression over its variables"
        );
        let bound = bind_variables(&mut context, spec.variables.as_deref().unwrap_or_default(), value);
        let (Some(removals), Some(additions)) = (bound.get("removals").cloned(), bound.get("additions").cloned())
        else {
            continue;
        };
        let mut operations: Vec<Value> =
            removals.as_array().unwrap().iter().map(|path| serde_json::json!({"op": "remove", "path": path})).collect();
        operations.extend(
            additions
                .as_array()
                .unwrap()
                .iter()
                .map(|addition| serde_json::json!({"op": "add", "path": addition["path"], "value": addition["value"]})),
        );
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(operations)).unwrap();
        json_patch::patch(&mut object, &patch)
            .unwrap_or_else(|error| panic!("{kind}: the policy's patch fails: {error}"));
        edited = true;
    }
    edited.then_some(object)
}

fn mutating_binding_selects(binding: &MutatingAdmissionPolicyBinding, labels: &BTreeMap<String, String>) -> bool {
    let selector = binding
        .spec
        .as_ref()
        .and_then(|spec| spec.match_resources.as_ref())
        .and_then(|resources| resources.namespace_selector.as_ref());
    selector.is_none_or(|selector| selects(selector, labels))
}

/// `dyn(x)`: `x`.
fn passthrough(value: CelValue) -> kube_cel::cel::ResolveResult {
    Ok(value)
}

/// Runs `gate` on `request` (the AdmissionRequest as JSON) for a namespace with `namespace_labels`.
pub fn run_gate(gate: &Gate, request: &Value, namespace_labels: &BTreeMap<String, String>) -> GateOutcome {
    run_with(gate, request, namespace_labels, &evaluate, &value_of)
}

type Evaluator<'e> = &'e dyn Fn(&Context<'_>, &str) -> Result<bool, String>;

fn run_with(
    gate: &Gate,
    request: &Value,
    namespace_labels: &BTreeMap<String, String>,
    evaluate: Evaluator<'_>,
    value: ValueEvaluator<'_>,
) -> GateOutcome {
    let namespace = request["namespace"].as_str().unwrap_or_default();
    let mut labels = namespace_labels.clone();
    labels.insert("kubernetes.io/metadata.name".to_owned(), namespace.to_owned());
    let group = request["kind"]["group"].as_str().unwrap_or_default();
    let kind = request["kind"]["kind"].as_str().unwrap_or_default();
    let claim_plural = match (group, kind) {
        ("resource.k8s.io", "ResourceClaim") => Some("resourceclaims".to_owned()),
        ("resource.k8s.io", "ResourceClaimTemplate") => Some("resourceclaimtemplates".to_owned()),
        _ => None,
    };
    let plural = match ADAPTERS.iter().find(|adapter| adapter.group == group && adapter.kind == kind) {
        Some(adapter) => adapter.plural(),
        None => match &claim_plural {
            Some(plural) => plural.clone(),
            None => return GateOutcome::NotBound,
        },
    };
    let bound: Vec<(&ValidatingAdmissionPolicy, Value, Option<String>)> = gate
        .bindings
        .iter()
        .filter(|binding| binding_selects(binding, &labels))
        .filter_map(|binding| {
            let policy = gate
                .policies
                .iter()
                .find(|policy| policy.metadata.name.as_deref() == Some(&binding.spec.policy_name))?;
            let params =
                parameters_named(gate, binding.spec.param_ref.as_ref().and_then(|param| param.name.as_deref()));
            Some((policy, params, binding.metadata.name.clone()))
        })
        .filter(|(policy, _, _)| policy_matches(policy, group, &plural, request))
        .collect();
    if bound.is_empty() {
        return GateOutcome::NotBound;
    }
    let mut denials = Vec::new();
    let mut not_matched = None;
    for (policy, params, binding_name) in bound {
        if params.is_null() {
            denials.push("the binding's parameter object does not exist (parameterNotFoundAction: Deny)".to_owned());
            continue;
        }
        let mut context = context_of(request, &params);
        let spec = policy.spec.as_ref().unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let mut matched = true;
        let mut breaks = None;
        for condition in spec.match_conditions.iter().flatten() {
            if condition.name == BREAKS_A_RULE {
                // Checked against the validations below, which run whatever it says, so that every fixture proves
                // that it skips exactly the requests every validation admits.
                match evaluate(&context, &condition.expression) {
                    Ok(verdict) => breaks = Some(verdict),
                    Err(error) => {
                        denials.push(format!("matchCondition {} failed: {error}", condition.name));
                        matched = false;
                        break;
                    }
                }
                continue;
            }
            match evaluate(&context, &condition.expression) {
                Ok(true) => {}
                Ok(false) => {
                    not_matched.get_or_insert_with(|| condition.name.clone());
                    matched = false;
                    break;
                }
                Err(error) => {
                    denials.push(format!("matchCondition {} failed: {error}", condition.name));
                    matched = false;
                    break;
                }
            }
        }
        if !matched {
            continue;
        }
        let bound = bind_variables(&mut context, spec.variables.as_deref().unwrap_or_default(), value);
        // The GPU validations are `!variables.gpu || ...`, and `gpu` starts with the identity checks: an exempt or
        // trusted writer, or an object asking no GPU, is out of their scope. A DRA claim asks no GPU through a pod
        // spec: only the claim rule speaks for it. The rules not behind `gpu` (the claim rule, the node-name rule)
        // are evaluated whatever `gpu` says.
        let out_of_gpu_scope = claim_plural.is_none() && bound.get("gpu") == Some(&Value::Bool(false));
        let binding = binding_name.as_deref().unwrap_or_default();
        let policy_name = policy.metadata.name.as_deref().unwrap_or_default();
        let as_api_server = |message: String| {
            format!("ValidatingAdmissionPolicy '{policy_name}' with binding '{binding}' denied request: {message}")
        };
        let denied_before = denials.len();
        for validation in spec.validations.iter().flatten() {
            if out_of_gpu_scope && validation.expression.starts_with(GPU_SCOPED) {
                continue;
            }
            match evaluate(&context, &validation.expression) {
                Ok(true) => {}
                Ok(false) => denials.push(as_api_server(
                    validation
                        .message_expression
                        .as_deref()
                        .and_then(|expression| value(&context, expression).ok())
                        .and_then(|message| message.as_str().map(str::to_owned))
                        .unwrap_or_else(|| validation.message.clone().unwrap_or_default()),
                )),
                Err(error) => denials
                    .push(as_api_server(format!("validation failed to evaluate ({error}): {:?}", validation.message))),
            }
        }
        if let Some(breaks) = breaks {
            assert_eq!(
                breaks,
                denials.len() > denied_before,
                "the match condition {BREAKS_A_RULE} says {breaks}, the validations {:?}, for {request}",
                &denials[denied_before..]
            );
        }
        if out_of_gpu_scope && denials.len() == denied_before {
            let failed = tiergate::plan::gate::program::identity_checks()
                .into_iter()
                .find(|(_, expression)| evaluate(&context, expression) == Ok(false))
                .map_or(NO_GPU, |(name, _)| name);
            not_matched.get_or_insert_with(|| failed.to_owned());
            continue;
        }
        if denials.is_empty() {
            return GateOutcome::Admitted;
        }
    }
    if !denials.is_empty() {
        return GateOutcome::Denied(denials);
    }
    GateOutcome::NotMatched { condition: not_matched.unwrap_or_default() }
}

fn binding_selects(binding: &ValidatingAdmissionPolicyBinding, labels: &BTreeMap<String, String>) -> bool {
    let selector = binding.spec.match_resources.as_ref().and_then(|resources| resources.namespace_selector.as_ref());
    selector.is_none_or(|selector| selects(selector, labels))
}

fn policy_matches(policy: &ValidatingAdmissionPolicy, group: &str, plural: &str, request: &Value) -> bool {
    let operation = request["operation"].as_str().unwrap_or_default();
    let constraints = policy.spec.as_ref().and_then(|spec| spec.match_constraints.as_ref());
    constraints.and_then(|constraints| constraints.resource_rules.as_ref()).into_iter().flatten().any(|rule| {
        let has =
            |list: &Option<Vec<String>>, item: &str| list.iter().flatten().any(|entry| entry == item || entry == "*");
        has(&rule.api_groups, group) && has(&rule.resources, plural) && has(&rule.operations, operation)
    })
}

/// Runs `work` on a thread with a large stack: the `cel` crate parses and evaluates recursively, and the generated
/// expressions nest deeper than a debug build's default 2 MiB test stack holds (kube-apiserver's own limits are
/// checked by `generated_expressions_stay_inside_the_api_servers_limits`).
pub fn with_big_stack<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(work)
        .unwrap()
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The deepest parenthesis, bracket or call nesting of `expression` (string literals skipped).
pub fn nesting_depth(expression: &str) -> usize {
    let (mut depth, mut deepest, mut quoted, mut escaped) = (0usize, 0usize, false, false);
    for c in expression.chars() {
        if quoted {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '\'') => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '\'' => quoted = true,
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}
