//! The import graph of the `tiergate` crate's top-level modules (`crate::X` and `super::` paths in the non-test
//! code under daemon/src) has no circle beyond the known ones listed here, and `reconcile/` depends on `cache/`,
//! never the reverse; reads the source tree, no other I/O.

#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles that predate this check, each with who removes it. A new circle, or one of these growing by a module,
/// fails the test; when one disappears, delete its line.
const KNOWN_CIRCLES: &[(&[&str], &str)] = &[
    (&["plan", "validation"], "pure modules moving into the core crate (issue 14, the lead)"),
    (&["cmd", "live"], "live/pools.rs returns cmd::CmdError (issue 14; not the cache unit's)"),
];

/// An edge `from -> to` between top-level modules, with one place that makes it (`file:line`).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules `lib.rs` declares.
fn top_level_modules(root: &Path) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    lib.lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod").or_else(|| line.trim().strip_prefix("mod")))
        .map(|rest| rest.trim().trim_end_matches(';').to_owned())
        .collect()
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

/// The module path of a source file: `reconcile/live.rs` -> `[reconcile, live]`, `cache/mod.rs` -> `[cache]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    parts
}

/// Files declared as `#[cfg(test)] mod NAME;` (test-only, with everything under them).
fn test_only_files(root: &Path, files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut test_only = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let dir = if file.file_name().is_some_and(|name| name == "mod.rs" || name == "lib.rs") {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            if pair[0] == "#[cfg(test)]"
                && let Some(name) = pair[1].strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';'))
            {
                test_only.insert(dir.join(format!("{name}.rs")));
                test_only.insert(dir.join(name).join("mod.rs"));
            }
        }
    }
    test_only.into_iter().filter(|path| path.starts_with(root)).collect()
}

/// `text` without line comments and without inline `#[cfg(test)] mod … { … }` blocks.
fn production_code(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" && lines.peek().is_some_and(|next| next.trim_start().starts_with("mod ")) {
            let mut depth = 0_i64;
            let mut opened = false;
            for inner in lines.by_ref() {
                depth += inner.matches('{').count() as i64 - inner.matches('}').count() as i64;
                opened |= inner.contains('{');
                if opened && depth <= 0 {
                    break;
                }
            }
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        kept.push_str(code);
        kept.push('\n');
    }
    kept
}

/// The top-level module each `crate::`/`super::` path in `code` (of the module at `path`) starts in.
fn referenced_modules(path: &[String], code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let bytes = line.as_bytes();
        for (start, _) in line.match_indices("crate::").chain(line.match_indices("super::")) {
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || matches!(bytes[start - 1], b'_' | b':')) {
                continue;
            }
            let mut rest = &line[start..];
            let mut base: Vec<String> = if rest.starts_with("crate::") {
                rest = &rest["crate::".len()..];
                vec![]
            } else {
                let mut base = path.to_vec();
                while let Some(after) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = after;
                }
                base
            };
            let segment: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if base.is_empty() {
                base.push(segment);
            }
            found.push((number + 1, base.remove(0)));
        }
    }
    found
}

fn import_graph() -> Graph {
    let root = source_root();
    let modules = top_level_modules(&root);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let test_only = test_only_files(&root, &files);
    let mut graph = Graph::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap();
        let path = module_path(relative);
        let Some(from) = path.first().filter(|from| modules.contains(*from)) else { continue };
        if test_only.iter().any(|test_file| file == test_file || file.starts_with(test_file.with_extension(""))) {
            continue;
        }
        let code = production_code(&std::fs::read_to_string(file).unwrap());
        for (line, to) in referenced_modules(&path, &code) {
            if &to != from && modules.contains(&to) {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| format!("{}:{line}", relative.display()));
            }
        }
    }
    graph
}

/// The strongly connected components with more than one module (Tarjan), each sorted.
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let next = state.index.len();
        state.index.insert(node, next);
        state.low.insert(node, next);
        state.stack.push(node);
        let graph = state.graph;
        for target in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            let target = target.as_str();
            if !state.index.contains_key(target) {
                visit(state, target);
                let low = state.low[node].min(state.low[target]);
                state.low.insert(node, low);
            } else if state.stack.contains(&target) {
                let low = state.low[node].min(state.index[target]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    let nodes: BTreeSet<&str> = graph
        .iter()
        .flat_map(|(from, targets)| std::iter::once(from.as_str()).chain(targets.keys().map(String::as_str)))
        .collect();
    for node in nodes {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found.sort();
    state.found
}

/// One concrete circle through `component`, as `a -> b (file:line) -> a (file:line)`.
fn describe_circle(graph: &Graph, component: &[String]) -> String {
    let start = &component[0];
    let mut previous: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for target in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if !component.contains(target) {
                continue;
            }
            if target == start {
                let mut hops = vec![(node, target)];
                let mut at = node;
                while at != start {
                    let before = previous[at];
                    hops.push((before, at));
                    at = before;
                }
                hops.reverse();
                let mut text = start.clone();
                for (from, to) in hops {
                    text.push_str(&format!(" -> {to} ({})", graph[from][to]));
                }
                return text;
            }
            if !previous.contains_key(target) {
                previous.insert(target, node);
                queue.push_back(target);
            }
        }
    }
    component.join(", ")
}

/// The circles of `graph` that are not known (with one concrete path each).
fn unknown_circles(graph: &Graph) -> Vec<String> {
    circles(graph)
        .iter()
        .filter(|component| !KNOWN_CIRCLES.iter().any(|(known, _)| known.iter().eq(component.iter())))
        .map(|component| format!("[{}]: {}", component.join(", "), describe_circle(graph, component)))
        .collect()
}

#[test]
fn top_level_modules_import_each_other_in_no_new_circle() {
    let graph = import_graph();
    assert!(graph.contains_key("reconcile") && graph.contains_key("cmd"), "the scan found the crate's modules");
    let unknown = unknown_circles(&graph);
    assert!(
        unknown.is_empty(),
        "import circles between top-level modules of the tiergate crate:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn reconcile_depends_on_cache_and_cache_never_on_reconcile() {
    let graph = import_graph();
    assert!(graph.get("reconcile").is_some_and(|targets| targets.contains_key("cache")), "reconcile reads cache");
    let reverse = graph.get("cache").and_then(|targets| targets.get("reconcile"));
    assert!(reverse.is_none(), "cache imports reconcile at {}", reverse.map_or("", String::as_str));
}

#[test]
fn the_checker_names_a_planted_circle_with_the_lines_that_make_it() {
    let mut graph = Graph::new();
    graph.entry("cache".to_owned()).or_default().insert("reconcile".to_owned(), "cache/mod.rs:3".to_owned());
    graph.entry("reconcile".to_owned()).or_default().insert("cache".to_owned(), "reconcile/mod.rs:7".to_owned());
    graph.entry("reconcile".to_owned()).or_default().insert("view".to_owned(), "reconcile/mod.rs:9".to_owned());
    assert_eq!(
        unknown_circles(&graph),
        vec!["[cache, reconcile]: cache -> reconcile (cache/mod.rs:3) -> cache (reconcile/mod.rs:7)".to_owned()]
    );
}

#[test]
fn super_paths_resolve_to_the_top_level_module_they_land_in() {
    let path = vec!["reconcile".to_owned(), "writes".to_owned()];
    let code = "use super::kinds::X;\nuse super::super::cache::Y;\nlet z = crate::view::Snapshot::default();";
    let found: Vec<String> = referenced_modules(&path, code).into_iter().map(|(_, module)| module).collect();
    assert_eq!(found, vec!["reconcile", "cache", "view"]);
    let stripped =
        production_code("use crate::a; // crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\nuse crate::d;");
    let found: Vec<String> = referenced_modules(&[], &stripped).into_iter().map(|(_, module)| module).collect();
    assert_eq!(found, vec!["a", "d"], "comments and inline test modules are not imports");
}
