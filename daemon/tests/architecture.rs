//! The layout's promises, checked: the core crate has no runtime or client dependency, and neither crate has an
//! import circle between its modules. Reads Cargo metadata and the source files; no network.
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates that bring a network client, a server or an async runtime. The core must reach none of them.
const RUNTIME_CRATES: &[&str] = &[
    "tokio",
    "kube-client",
    "kube-runtime",
    "kube",
    "axum",
    "axum-server",
    "hyper",
    "hyper-util",
    "reqwest",
    "tower",
    "rustls",
    "futures",
    "async-trait",
    "mio",
];

fn daemon_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crates `tiergate-core` reaches through normal (non-dev, non-build) dependencies, from `cargo tree`.
fn core_dependency_names() -> BTreeSet<String> {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-p", "tiergate-core", "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .current_dir(daemon_dir())
        .output()
        .unwrap();
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_core_crate_reaches_no_runtime_client_or_server_crate() {
    let names = core_dependency_names();
    assert!(names.contains("tiergate-core") && names.contains("serde"), "cargo tree listed the core: {names:?}");
    let runtime: Vec<&str> = RUNTIME_CRATES.iter().copied().filter(|name| names.contains(*name)).collect();
    assert!(runtime.is_empty(), "tiergate-core must stay pure, but it now depends on {runtime:?}");
}

/// One crate's modules (`a::b`, by file) and which other modules each one names.
#[derive(Debug, Default)]
struct ModuleGraph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl ModuleGraph {
    fn of_crate(src: &Path) -> Self {
        let mut files = Vec::new();
        collect_rust_files(src, &mut files);
        let modules: BTreeMap<String, PathBuf> =
            files.into_iter().filter_map(|file| Some((module_path(src, &file)?, file))).collect();
        let known: BTreeSet<String> = modules.keys().cloned().collect();
        let mut graph = Self::default();
        for (module, file) in &modules {
            let text = std::fs::read_to_string(file).unwrap();
            let targets = graph.edges.entry(module.clone()).or_default();
            for path in referenced_paths(&production_part(&text)) {
                let Some(absolute) = resolve(module, &path) else { continue };
                let Some(target) = deepest_module(&known, &absolute) else { continue };
                if !is_ancestor_or_descendant(module, &target) {
                    targets.insert(target);
                }
            }
        }
        graph
    }

    /// The same graph between top-level modules (`cache::live` -> `reconcile` becomes `cache` -> `reconcile`).
    fn top_level(&self) -> Self {
        let top = |module: &str| module.split("::").next().unwrap_or(module).to_owned();
        let mut graph = Self::default();
        for (module, targets) in &self.edges {
            let entry = graph.edges.entry(top(module)).or_default();
            entry.extend(targets.iter().map(|target| top(target)).filter(|target| *target != top(module)));
        }
        graph
    }

    /// A circle of modules, if there is one.
    fn find_circle(&self) -> Option<Vec<String>> {
        let mut done = BTreeSet::new();
        for start in self.edges.keys() {
            let mut stack = Vec::new();
            if let Some(circle) = self.visit(start, &mut stack, &mut done) {
                return Some(circle);
            }
        }
        None
    }

    fn visit(&self, module: &str, stack: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(position) = stack.iter().position(|entry| entry == module) {
            let mut circle = stack[position..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        stack.push(module.to_owned());
        for next in self.edges.get(module).into_iter().flatten() {
            if let Some(circle) = self.visit(next, stack, done) {
                return Some(circle);
            }
        }
        stack.pop();
        done.insert(module.to_owned());
        None
    }
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// `admission/mutate.rs` -> `admission::mutate`; `admission/mod.rs` -> `admission`; the crate root and test-only
/// files (`tests.rs`, `test_support.rs`) are not modules of the graph.
fn module_path(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    let last = parts.last()?;
    if parts.len() == 1 && (last == "lib" || last == "main") || last == "tests" || last == "test_support" {
        return None;
    }
    Some(parts.join("::"))
}

/// The file without its `#[cfg(test)]` tail: test-only imports do not make a production circle.
fn production_part(text: &str) -> String {
    text.find("#[cfg(test)]").map_or(text, |start| &text[..start]).to_owned()
}

/// Every `crate::`, `super::` and `self::` path the text names, with `use` groups (`a::{b, c::{d}}`) expanded.
fn referenced_paths(text: &str) -> Vec<String> {
    let code: String = text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let mut paths = Vec::new();
    let mut statement: Option<String> = None;
    for line in code.lines() {
        let trimmed = line.trim_start();
        if statement.is_none() {
            let visibility_free = trimmed
                .strip_prefix("pub ")
                .or_else(|| trimmed.strip_prefix("pub(").and_then(|rest| rest.split_once(") ")).map(|(_, rest)| rest));
            if let Some(tree) = visibility_free.unwrap_or(trimmed).strip_prefix("use ") {
                statement = Some(tree.to_owned());
            } else {
                continue;
            }
        } else if let Some(text) = statement.as_mut() {
            text.push_str(trimmed);
        }
        if let Some(text) = statement.take_if(|text| text.contains(';')) {
            let tree: String =
                text.split(';').next().unwrap_or("").chars().filter(|char| !char.is_whitespace()).collect();
            expand_use_tree("", &tree, &mut paths);
        }
    }
    let bytes: Vec<char> = code.chars().collect();
    let mut index = 0;
    while index < bytes.len() {
        let rest: String = bytes[index..bytes.len().min(index + 7)].iter().collect();
        let starts_root = ["crate::", "super::", "self::"].iter().any(|root| rest.starts_with(root));
        let boundary = index == 0 || !(bytes[index - 1].is_alphanumeric() || bytes[index - 1] == '_');
        if starts_root && boundary {
            let path: String = bytes[index..]
                .iter()
                .take_while(|char| char.is_alphanumeric() || **char == '_' || **char == ':')
                .collect();
            index += path.len().max(1);
            paths.push(path.trim_end_matches(':').to_owned());
        } else {
            index += 1;
        }
    }
    paths
}

fn expand_use_tree(prefix: &str, tree: &str, paths: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        paths.push(format!("{prefix}{tree}"));
        return;
    };
    let head = &tree[..open];
    let Some(close) = tree.rfind('}') else { return };
    let mut depth = 0;
    let mut item = String::new();
    for char in tree[open + 1..close].chars() {
        match char {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_use_tree(&format!("{prefix}{head}"), &std::mem::take(&mut item), paths);
                continue;
            }
            _ => {}
        }
        item.push(char);
    }
    if !item.is_empty() {
        expand_use_tree(&format!("{prefix}{head}"), &item, paths);
    }
}

/// The path as `crate`-relative segments, from the module that names it (`self` is the module, `super` its parent).
fn resolve(module: &str, path: &str) -> Option<Vec<String>> {
    let mut segments = path.split("::").filter(|segment| !segment.is_empty()).peekable();
    let mut base: Vec<String> = module.split("::").map(str::to_owned).collect();
    match *segments.peek()? {
        "crate" => {
            segments.next();
            base.clear();
        }
        "super" | "self" => {
            while let Some(&segment) = segments.peek() {
                match segment {
                    "self" => {}
                    "super" => {
                        base.pop();
                    }
                    _ => break,
                }
                segments.next();
            }
        }
        _ => return None,
    }
    base.extend(segments.map(str::to_owned));
    Some(base)
}

fn deepest_module(known: &BTreeSet<String>, segments: &[String]) -> Option<String> {
    (1..=segments.len()).rev().map(|length| segments[..length].join("::")).find(|candidate| known.contains(candidate))
}

fn is_ancestor_or_descendant(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

#[test]
fn the_core_crate_has_no_import_circle() {
    let graph = ModuleGraph::of_crate(&daemon_dir().join("core/src"));
    assert!(graph.edges["admission::mutate"].contains("admission::classes"), "{graph:?}");
    assert_eq!(graph.find_circle(), None, "modules of tiergate-core import each other in a circle");
    assert_eq!(graph.top_level().find_circle(), None, "top-level modules of tiergate-core form a circle");
}

#[test]
fn the_circle_finder_reports_a_circle_it_is_shown() {
    let mut graph = ModuleGraph::default();
    graph.edges.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    graph.edges.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
    graph.edges.insert("c".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(graph.find_circle(), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let mut nested = ModuleGraph::default();
    nested.edges.insert("cmd::check".to_owned(), BTreeSet::from(["live::pools".to_owned()]));
    nested.edges.insert("live::pools".to_owned(), BTreeSet::from(["cmd".to_owned()]));
    assert_eq!(nested.find_circle(), None, "a child naming its own parent is not a circle between files");
    assert_eq!(nested.top_level().find_circle(), Some(vec!["cmd".into(), "live".into(), "cmd".into()]));
}

#[test]
fn use_groups_and_super_paths_resolve_to_the_modules_they_name() {
    let mut paths = Vec::new();
    expand_use_tree("", "super::{boundary::{self,Reach},classes::Selection}", &mut paths);
    assert_eq!(paths, ["super::boundary::self", "super::boundary::Reach", "super::classes::Selection"]);
    assert_eq!(
        resolve("admission::mutate", "super::classes::Selection").unwrap(),
        ["admission", "classes", "Selection"]
    );
    assert_eq!(resolve("admission", "super::x").unwrap(), ["x"]);
    assert_eq!(resolve("admission", "self::limits").unwrap(), ["admission", "limits"]);
    assert_eq!(resolve("a::b::c", "crate::d::e").unwrap(), ["d", "e"]);
}
#[test]
fn the_binary_crate_has_no_import_circle() {
    let graph = ModuleGraph::of_crate(&daemon_dir().join("src"));
    assert!(graph.edges.contains_key("admission::server") && graph.edges.contains_key("reconcile"), "{graph:?}");
    assert_eq!(graph.find_circle(), None, "modules of the tiergate crate import each other in a circle");
    assert_eq!(graph.top_level().find_circle(), None, "top-level modules of the tiergate crate form a circle");
    assert!(graph.top_level().edges["reconcile"].contains("cache"), "reconcile reads the caches");
}
