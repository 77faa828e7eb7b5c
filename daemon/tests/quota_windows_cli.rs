//! Quota windows as a platform engineer meets them offline: `tiergate render` (base quotas, or `--at` an instant),
//! `tiergate explain` naming the tier's windows, a policy with a bad window refused with its field, and the
//! ClusterQueues rendered with a window in force accepted by Kueue's CRD.

#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The kubenexus sample with bronze's windows `windows` (YAML flow mappings), written to a file of its own.
fn policy_file(test: &str, windows: &[&str]) -> PathBuf {
    let text = std::fs::read_to_string(sample("kubenexus/policy.yaml")).unwrap();
    let marker = "      maxRunTime: {ceiling: 4h}\n";
    assert!(text.contains(marker), "the sample's bronze tier changed");
    let mut list = String::from("      quotaWindows:\n");
    for window in windows {
        list.push_str(&format!("        - {window}\n"));
    }
    let path = std::env::temp_dir().join(format!("tiergate-quota-windows-{test}-{}.yaml", std::process::id()));
    std::fs::write(&path, text.replacen(marker, &format!("{marker}{list}"), 1)).unwrap();
    path
}

fn sample(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples").join(path)
}

fn tiergate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiergate")).args(args).env_clear().output().unwrap()
}

const BURST: &str = r#"{name: burst, once: {begin: "2026-12-02T10:00:00Z", end: "2026-12-02T11:00:00Z"}, quotas: {nvidia.com/gpu: {nominal: "20"}}}"#;
const NIGHTS: &str = r#"{name: nights, recurring: {days: [Mon, Tue, Wed, Thu, Fri], start: "20:00", end: "07:00", timeZone: Europe/Berlin}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#;

/// The GPU nominal quota of ClusterQueue `name` in a rendered JSON list.
fn gpu_nominal(list: &Value, name: &str) -> String {
    let queue = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["kind"] == "ClusterQueue" && item["metadata"]["name"] == name)
        .unwrap();
    let resources = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"].as_array().unwrap();
    resources.iter().find(|resource| resource["name"] == "nvidia.com/gpu").unwrap()["nominalQuota"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn render(policy: &Path, at: Option<&str>) -> (Value, String) {
    let policy = policy.display().to_string();
    let cluster = sample("kubenexus/cluster.yaml").display().to_string();
    let mut args = vec!["render", "--policy", &policy, "--cluster", &cluster, "-o", "json"];
    if let Some(at) = at {
        args.extend(["--at", at]);
    }
    let output = tiergate(&args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (serde_json::from_slice(&output.stdout).unwrap(), stderr)
}

#[test]
fn render_shows_the_base_quota_and_names_the_windows_on_stderr() {
    let policy = policy_file("base", &[NIGHTS, BURST]);
    let (list, stderr) = render(&policy, None);
    assert_eq!(gpu_nominal(&list, "tiergate-bronze"), "16");
    assert!(
        stderr.contains("tier bronze has quota windows [nights, burst]; rendered with its base quotas"),
        "{stderr}"
    );
}

#[test]
fn render_at_an_instant_applies_the_window_in_force_then_and_says_what_comes_next() {
    let policy = policy_file("at", &[NIGHTS, BURST]);
    // Wednesday 2026-12-02 at 10:30 UTC: the one-off window, not the nights.
    let (list, stderr) = render(&policy, Some("2026-12-02T10:30:00Z"));
    assert_eq!(gpu_nominal(&list, "tiergate-bronze"), "20");
    assert_eq!(gpu_nominal(&list, "tiergate-gold"), "64", "other tiers keep their quota");
    assert!(
        stderr.contains("tier bronze has window \"burst\" in force; then its base quotas from 2026-12-02T11:00:00Z"),
        "{stderr}"
    );
    // The same evening at 21:00 in Berlin (20:00 UTC): the nights.
    let (list, stderr) = render(&policy, Some("2026-12-02T21:00:00+01:00"));
    assert_eq!(gpu_nominal(&list, "tiergate-bronze"), "24");
    assert!(stderr.contains("then its base quotas from 2026-12-03T06:00:00Z"), "{stderr}");
}

#[test]
fn render_at_something_that_is_no_instant_fails_naming_the_flag() {
    let policy = policy_file("bad-at", &[BURST]).display().to_string();
    let output = tiergate(&["render", "--policy", &policy, "--at", "tomorrow"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--at \"tomorrow\"") && stderr.contains("RFC 3339"), "{stderr}");
}

#[test]
fn a_window_with_an_unknown_time_zone_is_refused_with_its_field_path() {
    let window = r#"{name: nights, recurring: {days: [Mon], start: "20:00", end: "07:00", timeZone: Europe/Berlinn}, quotas: {nvidia.com/gpu: {nominal: "24"}}}"#;
    let policy = policy_file("bad-zone", &[window]).display().to_string();
    let output = tiergate(&["render", "--policy", &policy]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(".quotaWindows[0].recurring.timeZone: \"Europe/Berlinn\" is not a time zone"), "{stderr}");
    assert!(stderr.contains("fix: name a zone as `Area/City`"), "{stderr}");
}

#[test]
fn explain_lists_the_windows_of_the_workloads_tier() {
    let policy = policy_file("explain", &[NIGHTS, BURST]);
    let job = std::env::temp_dir().join(format!("tiergate-quota-windows-job-{}.yaml", std::process::id()));
    std::fs::write(
        &job,
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\n  namespace: ml-team-dev\nspec:\n  template:\n    \
         spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n        image: cuda\n        \
         resources:\n          limits:\n            nvidia.com/gpu: \"1\"\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .arg("explain")
        .arg("--policy")
        .arg(&policy)
        .arg("--cluster")
        .arg(sample("kubenexus/cluster.yaml"))
        .arg(&job)
        .env_clear()
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("quota windows: tier bronze's quota changes with its windows"), "{out}");
    assert!(
        out.contains("  - nights (Mon,Tue,Wed,Thu,Fri 20:00-07:00 Europe/Berlin: nvidia.com/gpu nominal 24)"),
        "{out}"
    );
    assert!(out.contains("  - burst (once 2026-12-02T10:00:00Z to 2026-12-02T11:00:00Z"), "{out}");
}
