//! CEL expression builders over the adapter table's template layouts: every pod spec a kind holds, reached by
//! the same JSON pointers the webhook reads (`tiergate_workloads::TemplateLayout`), as one list of lists; pure
//! string building.
//!
//! The gate reads objects as `dyn` (`dyn(object)`), so one program serves every kind and type-checks against each
//! kind's schema without error. A pointer becomes a field path guarded by a `has()` chain; a `*` maps over a list,
//! or over a map's values where the table says the templates sit in a map (`TemplateAt::ReplicaMap`, the Kubeflow
//! replica specs). Embedded objects (AppWrapper components) are matched on their `apiVersion` and `kind` to that
//! kind's own layout.

use tiergate_workloads::{ADAPTERS, READ_ONLY_TEMPLATE_OWNERS, TemplateAt, TemplateLayout, pointer_tokens};

/// A CEL string literal.
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A CEL list literal of strings.
pub(crate) fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(literal).collect();
    format!("[{}]", items.join(", "))
}

/// CEL: all of `parts` (`true` for none).
pub(crate) fn all_of(parts: impl IntoIterator<Item = String>) -> String {
    let parts: Vec<String> = parts.into_iter().collect();
    if parts.is_empty() { "true".to_owned() } else { format!("({})", parts.join(" && ")) }
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

pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Where one layout's pod specs are, as pointer patterns, and whether each `*` is over a map.
fn spec_patterns(layout: TemplateLayout) -> Vec<(String, bool)> {
    match layout {
        TemplateLayout::Pod => vec![("/spec".to_owned(), false)],
        TemplateLayout::Single(template) => vec![(format!("{template}/spec"), false)],
        TemplateLayout::PerItem { list, item } => vec![(format!("{list}/*{item}/spec"), false)],
        TemplateLayout::Patterns(patterns) => patterns
            .iter()
            .map(|pattern| match pattern {
                TemplateAt::PodTemplate(template) => (format!("{template}/spec"), false),
                TemplateAt::ReplicaMap(template) => (format!("{template}/spec"), true),
                TemplateAt::Flat(at) => ((*at).to_owned(), false),
            })
            .collect(),
        TemplateLayout::Embedded { .. } => Vec::new(),
    }
}

/// CEL: the values of `list` (`in_map`: the values of the map `list`), for `depth`'s iteration variable.
fn values_of(list: String, in_map: bool, depth: usize) -> String {
    if in_map { format!("{list}.map(k{depth}, {list}[k{depth}])") } else { list }
}

/// CEL: one group of specs, the values below the pointer tokens `tokens` of `base` (`[]` where absent); `None` when
/// `tokens` hold more than one `*` (`depth` keeps iteration variables unique).
fn group_of(base: &str, tokens: &[String], in_map: bool, depth: usize) -> Option<String> {
    let Some(star) = tokens.iter().position(|token| token == "*") else {
        let (guard, path) = guarded_path(base, tokens);
        return Some(format!("(({guard}) ? [{path}] : [])"));
    };
    let rest = &tokens[star + 1..];
    if rest.iter().any(|token| token == "*") {
        return None;
    }
    let (guard, collection) = guarded_path(base, &tokens[..star]);
    let item = format!("x{depth}");
    let (leaf_guard, leaf) = guarded_path(&item, rest);
    Some(format!("(({guard}) ? {}.map({item}, {leaf_guard}, {leaf}) : [])", values_of(collection, in_map, depth)))
}

/// CEL: the values below the pointer tokens `tokens` of `base` as groups of specs (a list of lists): one group for
/// at most one `*`, one per element of the outer list for two; `None` past two.
fn groups_below(base: &str, tokens: &[String], in_map: bool, depth: usize) -> Option<String> {
    if let Some(group) = group_of(base, tokens, in_map, depth) {
        return Some(format!("[{group}]"));
    }
    let star = tokens.iter().position(|token| token == "*")?;
    let (guard, collection) = guarded_path(base, &tokens[..star]);
    let item = format!("x{depth}");
    let inner = group_of(&item, &tokens[star + 1..], in_map, depth + 1)?;
    Some(format!("(({guard}) ? {}.map({item}, {inner}) : [])", values_of(collection, in_map, depth)))
}

/// CEL: every pod spec `layout` holds in the object at `base`, as a list of lists (a group per list the specs sit
/// in), or `[]`. An embedded kind with more than one `*` of its own (a TrainJob inside an AppWrapper) contributes
/// none: the webhook checks it (docs/admission.md).
pub(crate) fn spec_groups(layout: TemplateLayout, base: &str) -> String {
    let parts: Vec<String> = match layout {
        TemplateLayout::Embedded { list, item } => {
            let (guard, collection) = guarded_path(base, &pointer_tokens(list));
            let component = "c0";
            let (embedded_guard, embedded) = guarded_path(component, &pointer_tokens(item));
            embedded_layouts()
                .into_iter()
                .flat_map(|(inner, kinds)| {
                    let matches = format!("{embedded_guard} && {}", embedded_is(&embedded, &kinds));
                    let (guard, collection) = (guard.clone(), collection.clone());
                    let embedded = embedded.clone();
                    spec_patterns(inner).into_iter().filter_map(move |(pattern, in_map)| {
                        // One group per component of these kinds.
                        let group = group_of(&embedded, &pointer_tokens(&pattern), in_map, 1)?;
                        Some(format!("(({guard}) ? {collection}.map({component}, {matches}, {group}) : [])"))
                    })
                })
                .collect()
        }
        _ => spec_patterns(layout)
            .into_iter()
            .filter_map(|(pattern, in_map)| groups_below(base, &pointer_tokens(&pattern), in_map, 0))
            .collect(),
    };
    if parts.is_empty() { "[]".to_owned() } else { parts.join(" + ") }
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

/// CEL: the embedded object `embedded` is one of `kinds`, by its `kind` alone: reading a same-named kind of
/// another group as this one only ever checks more specs, never fewer.
fn embedded_is(embedded: &str, kinds: &[(&str, &str)]) -> String {
    let names: std::collections::BTreeSet<&str> = kinds.iter().map(|(_, kind)| *kind).collect();
    format!("has({embedded}.kind) && {embedded}.kind in {}", list(names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_template_is_one_guarded_group() {
        assert_eq!(
            spec_groups(TemplateLayout::Single("/spec/template"), "o"),
            "[((has(o.spec) && has(o.spec.template) && has(o.spec.template.spec)) ? [o.spec.template.spec] : [])]"
        );
    }

    #[test]
    fn a_star_maps_a_replica_map_by_its_values() {
        let groups = spec_groups(
            TemplateLayout::Patterns(&[TemplateAt::ReplicaMap("/spec/pytorchReplicaSpecs/*/template")]),
            "o",
        );
        assert!(
            groups.contains("o.spec.pytorchReplicaSpecs.map(k0, o.spec.pytorchReplicaSpecs[k0]).map(x0,"),
            "{groups}"
        );
        assert!(groups.contains("x0.template.spec) : [])]"), "{groups}");
    }

    #[test]
    fn every_layout_of_the_table_has_groups() {
        for adapter in ADAPTERS {
            assert_ne!(spec_groups(adapter.templates, "o"), "[]", "{}", adapter.kind);
        }
    }

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal(r"a'b\c"), r"'a\'b\\c'");
    }
}
