//! CEL expression builders over the adapter table's template layouts: every pod template a kind holds, reached
//! by the same JSON pointers the webhook reads (`tiergate_workloads::TemplateLayout`); pure string building.
//!
//! A pointer becomes a field path guarded by a `has()` chain; a `*` becomes `all`/`exists` over a list, or over a
//! map's values (`x.map(k, x[k])`) where the table says the templates sit in a map (`TemplateAt::ReplicaMap`, the
//! Kubeflow replica specs). Embedded objects (AppWrapper components) dispatch on the embedded `apiVersion` and `kind` to
//! that kind's own layout.

use tiergate_workloads::{ADAPTERS, READ_ONLY_TEMPLATE_OWNERS, TemplateAt, TemplateLayout, pointer_tokens};

/// How a predicate is combined over the templates of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quantifier {
    /// True when the predicate holds for every template (and when there is none).
    All,
    /// True when the predicate holds for some template.
    Any,
}

/// A CEL string literal.
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A CEL list literal of strings.
pub(crate) fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(literal).collect();
    format!("[{}]", items.join(", "))
}

/// `base.field` (a pointer token as CEL field selection; every token in the adapter table is an identifier).
fn select(base: &str, token: &str) -> String {
    if token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !token.is_empty() {
        format!("{base}.{token}")
    } else {
        format!("{base}[{}]", literal(token))
    }
}

/// The path `base` + `tokens` and the `has()` chain that guards it (`true` for no tokens).
pub(crate) fn guarded_path(base: &str, tokens: &[String]) -> (String, String) {
    let mut path = base.to_owned();
    let mut guards = Vec::new();
    for token in tokens {
        let next = select(&path, token);
        guards.push(if next.ends_with(']') { format!("{} in {path}", literal(token)) } else { format!("has({next})") });
        path = next;
    }
    let guard = if guards.is_empty() { "true".to_owned() } else { guards.join(" && ") };
    (guard, path)
}

/// The pointer `pointer` below `base`: its guard and path.
pub(crate) fn pointer_path(base: &str, pointer: &str) -> (String, String) {
    guarded_path(base, &pointer_tokens(pointer))
}

/// `predicate` combined with `quantifier` over every value matching the pointer `pattern` below `base` (`*` =
/// every list element or map value); `depth` keeps iteration variables unique.
fn over_pattern(
    base: &str,
    pattern: &str,
    in_map: bool,
    quantifier: Quantifier,
    depth: usize,
    predicate: &dyn Fn(&str, usize) -> String,
) -> String {
    let tokens = pointer_tokens(pattern);
    let Some(star) = tokens.iter().position(|token| token == "*") else {
        let (guard, path) = guarded_path(base, &tokens);
        let inner = predicate(&path, depth);
        return match quantifier {
            Quantifier::All => format!("(!({guard}) || ({inner}))"),
            Quantifier::Any => format!("(({guard}) && ({inner}))"),
        };
    };
    let (guard, collection) = guarded_path(base, &tokens[..star]);
    let rest: String = tokens[star + 1..].iter().map(|token| format!("/{}", escape(token))).collect();
    let (key, item) = (format!("k{depth}"), format!("t{depth}"));
    let values = if in_map { format!("{collection}.map({key}, {collection}[{key}])") } else { collection };
    let inner = over_pattern(&item, &rest, in_map, quantifier, depth + 1, predicate);
    match quantifier {
        Quantifier::All => format!("(!({guard}) || {values}.all({item}, {inner}))"),
        Quantifier::Any => format!("(({guard}) && {values}.exists({item}, {inner}))"),
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Where one layout's pod specs are, as pointer patterns: whether each `*` is over a map, and whether the spec is
/// a flat SparkPodSpec.
fn spec_patterns(layout: TemplateLayout) -> Vec<(String, bool, bool)> {
    match layout {
        TemplateLayout::Pod => vec![("/spec".to_owned(), false, false)],
        TemplateLayout::Single(template) => vec![(format!("{template}/spec"), false, false)],
        TemplateLayout::PerItem { list, item } => vec![(format!("{list}/*{item}/spec"), false, false)],
        TemplateLayout::Patterns(patterns) => patterns
            .iter()
            .map(|pattern| match pattern {
                TemplateAt::PodTemplate(template) => (format!("{template}/spec"), false, false),
                TemplateAt::ReplicaMap(template) => (format!("{template}/spec"), true, false),
                TemplateAt::Flat(at) => ((*at).to_owned(), false, true),
            })
            .collect(),
        TemplateLayout::Embedded { .. } => Vec::new(),
    }
}

/// A pod-spec predicate: given the CEL expression of a pod spec, whether it is flat, and a depth for variables.
pub(crate) type SpecPredicate<'a> = &'a dyn Fn(&str, bool, usize) -> String;

/// `predicate` combined with `quantifier` over every pod spec `layout` holds in the object at `base`.
pub(crate) fn over_templates(
    layout: TemplateLayout,
    base: &str,
    quantifier: Quantifier,
    depth: usize,
    predicate: SpecPredicate<'_>,
) -> String {
    if let TemplateLayout::Embedded { list, item } = layout {
        let pattern = format!("{list}/*{item}");
        return over_pattern(base, &pattern, false, quantifier, depth, &|embedded, depth| {
            embedded_dispatch(embedded, quantifier, depth, predicate)
        });
    }
    let parts: Vec<String> = spec_patterns(layout)
        .into_iter()
        .map(|(pattern, in_map, flat)| {
            over_pattern(base, &pattern, in_map, quantifier, depth, &|spec, depth| predicate(spec, flat, depth))
        })
        .collect();
    match (parts.is_empty(), quantifier) {
        (true, Quantifier::All) => "true".to_owned(),
        (true, Quantifier::Any) => "false".to_owned(),
        (false, Quantifier::All) => parts.join(" && "),
        (false, Quantifier::Any) => parts.join(" || "),
    }
}

/// `predicate` over every pod spec of `layout` as one expression per part, all of which must hold: for an
/// embedded layout one part per embedded kind's layout (a single expression over every kind would pass cel-go's
/// 100,000-code-point limit), else the one expression of [`over_templates`] with [`Quantifier::All`].
pub(crate) fn all_templates_split(layout: TemplateLayout, base: &str, predicate: SpecPredicate<'_>) -> Vec<String> {
    let TemplateLayout::Embedded { list, item } = layout else {
        return vec![over_templates(layout, base, Quantifier::All, 0, predicate)];
    };
    let pattern = format!("{list}/*{item}");
    embedded_layouts()
        .into_iter()
        .map(|(layout, kinds)| {
            over_pattern(base, &pattern, false, Quantifier::All, 0, &|embedded, depth| {
                let inner = over_templates(layout, embedded, Quantifier::All, depth, predicate);
                format!("(!({}) || ({inner}))", embedded_is(embedded, &kinds))
            })
        })
        .collect()
}

/// The kinds an embedded object may be, grouped by layout (Job, Deployment, StatefulSet and ReplicaSet share
/// one), in table order.
fn embedded_layouts() -> Vec<(TemplateLayout, Vec<(&'static str, &'static str)>)> {
    let mut by_layout: Vec<(TemplateLayout, Vec<(&str, &str)>)> = Vec::new();
    let known = ADAPTERS
        .iter()
        .filter(|adapter| !matches!(adapter.templates, TemplateLayout::Embedded { .. }))
        .map(|adapter| (adapter.group, adapter.kind, adapter.templates))
        .chain(READ_ONLY_TEMPLATE_OWNERS.iter().map(|owner| (owner.group, owner.kind, owner.templates)));
    for (group, kind, layout) in known {
        match by_layout.iter_mut().find(|(known, _)| *known == layout) {
            Some((_, kinds)) => kinds.push((group, kind)),
            None => by_layout.push((layout, vec![(group, kind)])),
        }
    }
    by_layout
}

/// CEL: the embedded object `embedded` is one of `kinds` (its `kind`, and its `apiVersion` in the kind's group).
fn embedded_is(embedded: &str, kinds: &[(&str, &str)]) -> String {
    let kinds: Vec<String> = kinds
        .iter()
        .map(|(group, kind)| {
            let api_version = if group.is_empty() {
                format!("{embedded}.apiVersion == 'v1'")
            } else {
                format!("{embedded}.apiVersion.startsWith({})", literal(&format!("{group}/")))
            };
            format!("({embedded}.kind == {} && {api_version})", literal(kind))
        })
        .collect();
    format!("has({embedded}.apiVersion) && has({embedded}.kind) && ({})", kinds.join(" || "))
}

/// An embedded object's templates through its own kind's layout; a kind tiergate does not know has none here
/// (CEL cannot search an object of unknown shape; the webhook does, see docs/admission.md).
fn embedded_dispatch(embedded: &str, quantifier: Quantifier, depth: usize, predicate: SpecPredicate<'_>) -> String {
    let otherwise = match quantifier {
        Quantifier::All => "true",
        Quantifier::Any => "false",
    };
    let mut expression = otherwise.to_owned();
    for (layout, kinds) in embedded_layouts().into_iter().rev() {
        let matches = embedded_is(embedded, &kinds);
        let inner = over_templates(layout, embedded, quantifier, depth, predicate);
        expression = format!("(({matches}) ? ({inner}) : {expression})");
    }
    expression
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_template_is_guarded_by_a_has_chain() {
        let expression =
            over_templates(TemplateLayout::Single("/spec/template"), "object", Quantifier::Any, 0, &|s, _, _| {
                format!("P({s})")
            });
        assert_eq!(
            expression,
            "((has(object.spec) && has(object.spec.template) && has(object.spec.template.spec)) && \
             (P(object.spec.template.spec)))"
        );
    }

    #[test]
    fn a_star_iterates_a_replica_map_by_its_values() {
        let expression = over_templates(
            TemplateLayout::Patterns(&[TemplateAt::ReplicaMap("/spec/pytorchReplicaSpecs/*/template")]),
            "object",
            Quantifier::All,
            0,
            &|s, _, _| format!("P({s})"),
        );
        assert!(
            expression.contains("object.spec.pytorchReplicaSpecs.map(k0, object.spec.pytorchReplicaSpecs[k0]).all(t0,")
        );
        assert!(expression.contains("P(t0.template.spec)"), "{expression}");
    }

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal(r"a'b\c"), r"'a\'b\\c'");
    }
}
