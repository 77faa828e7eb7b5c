//! Policy mistakes a platform team makes that would silently open the boundary: unknown fields, odd quotas.
//! Each is refused with the field path and the fix, by the library (`parse_policy`, `validate_policy`) and by the
//! `render`, `check`, `explain` and `webhook --offline` commands; messages never leak parser internals.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tiergate::inputs::{SAMPLE_POLICY, parse_policy};
use tiergate::validation::validate_policy;

/// The sample policy with `from` replaced by `to` (exactly once).
fn sample_with(from: &str, to: &str) -> String {
    assert_eq!(SAMPLE_POLICY.matches(from).count(), 1, "{from:?} must occur once in the sample");
    SAMPLE_POLICY.replacen(from, to, 1)
}

/// The sample with an extra line inserted after the `spec:` line.
fn sample_with_spec_line(line: &str) -> String {
    sample_with("spec:\n", &format!("spec:\n  {line}\n"))
}

/// The message of parsing `text` (which must fail).
fn parse_error(text: &str) -> String {
    parse_policy(text, "policy.yaml").expect_err("the policy should be refused").to_string()
}

/// The validation message of `text` (which must parse, then fail validation).
fn validation_error(text: &str) -> String {
    let policy = parse_policy(text, "policy.yaml").unwrap();
    validate_policy(&policy).expect_err("the policy should be refused").to_string()
}

const BRONZE_GPU: &str = r#"nvidia.com/gpu: {nominal: "16"}"#;

// --- unknown fields ---------------------------------------------------------------------------------------

#[test]
fn a_typo_in_admin_groups_is_refused_naming_the_path_and_the_field_meant() {
    let text = sample_with_spec_line("admission: {adminGroup: [tenant-admins]}");
    let message = parse_error(&text);
    assert!(message.contains("spec.admission.adminGroup: unknown field; fix: did you mean adminGroups?"), "{message}");
}

#[test]
fn a_typo_in_excluded_namespaces_is_refused_naming_the_path_and_the_field_meant() {
    let message = parse_error(&sample_with_spec_line("excludedNamespace: [ml-platform]"));
    assert!(
        message.contains("spec.excludedNamespace: unknown field; fix: did you mean excludedNamespaces?"),
        "{message}"
    );
}

#[test]
fn an_unknown_field_inside_a_tier_is_refused_with_its_index() {
    let memory = "memory: {nominal: 512Gi}";
    let text = sample_with(memory, &format!("{memory}\n      defaultPriorityClas: gpu-ultra"));
    let message = parse_error(&text);
    assert!(message.contains("spec.tiers[2].defaultPriorityClas: unknown field; fix: did you mean"), "{message}");
}

#[test]
fn an_unknown_field_inside_a_quota_is_refused_with_the_resource_named() {
    let message = parse_error(&sample_with(BRONZE_GPU, r#"nvidia.com/gpu: {nominal: "16", borrowLimit: "64"}"#));
    assert!(
        message.contains(
            r#"spec.tiers[2].quotas["nvidia.com/gpu"].borrowLimit: unknown field; fix: did you mean borrowingLimit?"#
        ),
        "{message}"
    );
}

#[test]
fn every_unknown_field_is_listed_at_once() {
    let text = sample_with_spec_line("excludedNamespace: [a]\n  adminUser: [b]");
    let message = parse_error(&text);
    assert!(message.contains("2 unknown field(s)"), "{message}");
    assert!(message.contains("spec.excludedNamespace") && message.contains("spec.adminUser"), "{message}");
}

// --- quotas -----------------------------------------------------------------------------------------------

#[test]
fn a_quota_of_1e30_gpus_is_refused_as_beyond_what_kubernetes_stores() {
    let message = validation_error(&sample_with(BRONZE_GPU, r#"nvidia.com/gpu: {nominal: "1e30"}"#));
    assert!(
        message.contains(r#"spec.tiers[2].quotas["nvidia.com/gpu"].nominal: "1e30" is beyond the largest quantity"#),
        "{message}"
    );
}

#[test]
fn a_quota_of_minus_zero_is_refused_as_negative() {
    let message = validation_error(&sample_with(BRONZE_GPU, r#"nvidia.com/gpu: {nominal: "-0"}"#));
    assert!(
        message.contains(
            r#"spec.tiers[2].quotas["nvidia.com/gpu"].nominal: "-0" is negative; fix: use zero or more, without a sign"#
        ),
        "{message}"
    );
}

#[test]
fn a_negative_memory_quota_is_refused_as_negative() {
    let message = validation_error(&sample_with("memory: {nominal: 512Gi}", "memory: {nominal: -512Gi}"));
    assert!(message.contains(r#"spec.tiers[2].quotas["memory"].nominal: "-512Gi" is negative"#), "{message}");
}

#[test]
fn one_and_a_half_gpus_are_refused_as_not_a_whole_number() {
    let message = validation_error(&sample_with(BRONZE_GPU, r#"nvidia.com/gpu: {nominal: "1.5"}"#));
    assert!(
        message.contains(r#"spec.tiers[2].quotas["nvidia.com/gpu"].nominal: "1.5" is not a whole number; nvidia.com/gpu is an extended resource"#),
        "{message}"
    );
}

#[test]
fn a_fractional_gpu_written_in_milli_units_is_refused_too() {
    let message = validation_error(&sample_with(BRONZE_GPU, r#"nvidia.com/gpu: {nominal: "1500m"}"#));
    assert!(message.contains(r#"quotas["nvidia.com/gpu"].nominal: "1500m" is not a whole number"#), "{message}");
}

#[test]
fn fractional_cpu_stays_allowed_because_cpu_is_not_an_extended_resource() {
    let policy = parse_policy(&sample_with(r#"cpu: {nominal: "128"}"#, r#"cpu: {nominal: "127.5"}"#), "p").unwrap();
    validate_policy(&policy).unwrap();
}

// --- messages that leaked internals -----------------------------------------------------------------------

#[test]
fn an_out_of_range_scoring_timeout_states_the_real_range() {
    let message = validation_error(&sample_with_spec_line("scoring: {timeoutMs: 5000}"));
    assert!(message.contains("spec.scoring.timeoutMs: 5000 ms is not between 1 and 4999 ms"), "{message}");
    assert!(!message.contains("1..5000"), "{message}");
}

#[test]
fn a_policy_file_with_two_documents_says_so_without_naming_a_library_call() {
    let message = parse_error(&format!("{SAMPLE_POLICY}\n---\n{SAMPLE_POLICY}"));
    assert!(message.contains("more than one YAML document"), "{message}");
    assert!(!message.contains("from_str"), "{message}");
}

#[test]
fn a_huge_policy_breaching_the_parser_budget_is_refused_without_debug_output() {
    let huge = format!("{SAMPLE_POLICY}  excludedNamespaces:\n{}", "    - a\n".repeat(300_000));
    let message = parse_error(&huge);
    assert!(message.contains("larger than a policy or cluster view can be (too many YAML nodes)"), "{message}");
    assert!(!message.contains("Nodes {") && !message.contains("budget breached"), "{message}");
}

// --- the commands -----------------------------------------------------------------------------------------

fn tiergate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiergate")).args(args).env_clear().output().unwrap()
}

fn samples(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples").join(path).display().to_string()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The sample with an `adminGroup` typo, written to a temp file.
fn typo_policy_file(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, sample_with_spec_line("admission: {adminGroup: [tenant-admins]}")).unwrap();
    path
}

const TYPO: &str = "spec.admission.adminGroup: unknown field; fix: did you mean adminGroups?";

#[test]
fn render_check_and_explain_refuse_a_policy_with_an_unknown_field_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let policy = typo_policy_file(&dir);
    let policy = policy.to_str().unwrap();
    let workload = dir.path().join("job.yaml");
    std::fs::write(&workload, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml-team-dev}\n")
        .unwrap();
    for args in [
        vec!["render", "--policy", policy],
        vec!["check", "--policy", policy, "--nodepools", &samples("kubenexus/nodepools.yaml")],
        vec!["explain", "--policy", policy, workload.to_str().unwrap()],
    ] {
        let output = tiergate(&args);
        assert!(!output.status.success(), "{args:?} accepted the typo");
        assert!(stderr(&output).contains(TYPO), "{args:?}: {}", stderr(&output));
    }
}

#[test]
fn the_offline_webhook_refuses_a_policy_with_an_unknown_field_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let policy = typo_policy_file(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .args(["webhook", "--offline", "--policy", policy.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env_clear()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It must exit on its own; a webhook that started serving is killed after 10 s and the test fails.
    let mut status = None;
    for _ in 0..200 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if status.is_none() {
        child.kill().unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(status.is_some_and(|status| !status.success()), "the webhook served a policy with a typo");
    assert!(stderr(&output).contains(TYPO), "{}", stderr(&output));
}

#[test]
fn a_missing_policy_file_prints_the_os_error_once() {
    let output = tiergate(&["render", "--policy", "/nonexistent/policy.yaml"]);
    assert!(!output.status.success());
    let text = stderr(&output);
    assert!(text.contains("failed to read /nonexistent/policy.yaml: No such file or directory"), "{text}");
    assert_eq!(text.matches("No such file or directory").count(), 1, "{text}");
}
