//! The generated references under docs/reference/ match their one source each: `policy.md` the TierPolicy CRD's
//! schema (what `tiergate crd` prints), `cli.md` the clap definition `main` parses with, `chart-values.md`
//! charts/tiergate/values.yaml and its `# --` comments. After changing a source, regenerate with
//! `TIERGATE_BLESS=1 cargo test -p tiergate --test reference_docs` and review the diff.

#![cfg(test)]

#[path = "reference_docs/chart_values.rs"]
mod chart_values;
#[path = "reference_docs/cli.rs"]
mod cli;
#[path = "reference_docs/markdown.rs"]
mod markdown;
#[path = "reference_docs/policy.rs"]
mod policy;

use std::path::{Path, PathBuf};

/// The command that regenerates every file here.
pub const REGENERATE: &str = "TIERGATE_BLESS=1 cargo test -p tiergate --test reference_docs";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Writes `generated` to `docs/reference/<name>` under `TIERGATE_BLESS=1`, else fails unless the file holds it.
fn check_or_bless(name: &str, generated: &str) {
    let path = repository().join("docs/reference").join(name);
    if std::env::var_os("TIERGATE_BLESS").is_some_and(|value| value == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}; generate it with `{REGENERATE}`", path.display()));
    pretty_assertions::assert_eq!(
        committed,
        generated,
        "docs/reference/{name} is stale; regenerate with `{REGENERATE}`"
    );
}

#[test]
fn the_policy_reference_is_the_tierpolicy_crds_schema() {
    check_or_bless("policy.md", &policy::build_policy_reference());
}

#[test]
fn the_cli_reference_is_the_command_line_main_parses() {
    check_or_bless("cli.md", &cli::build_cli_reference());
}

#[test]
fn the_chart_values_reference_is_values_yaml_with_every_value_described() {
    let text = std::fs::read_to_string(repository().join("charts/tiergate/values.yaml")).unwrap();
    let values = chart_values::parse_values(&text);
    let undescribed: Vec<&str> =
        values.iter().filter(|value| value.description.is_empty()).map(|value| value.path.as_str()).collect();
    assert!(undescribed.is_empty(), "values.yaml: give these values a `# -- ` comment: {undescribed:?}");
    assert_eq!(
        values.len(),
        text.lines().filter(|line| line.trim_start().starts_with("# -- ")).count(),
        "every `# -- ` comment documents exactly one row (none under an already documented value)"
    );
    check_or_bless("chart-values.md", &chart_values::build_values_reference(&values));
}

#[test]
fn every_generated_file_starts_by_saying_so_and_how_to_regenerate_it() {
    let text = std::fs::read_to_string(repository().join("charts/tiergate/values.yaml")).unwrap();
    for generated in [
        policy::build_policy_reference(),
        cli::build_cli_reference(),
        chart_values::build_values_reference(&chart_values::parse_values(&text)),
    ] {
        let first = generated.lines().next().unwrap_or_default();
        assert!(first.starts_with("_Generated from ") && first.contains(REGENERATE), "{first}");
    }
}
