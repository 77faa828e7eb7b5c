//! `tiergate explain` as a tenant runs it: the sample policy and cluster, a workload file, the printed decision
//! and the exit code.

use std::path::PathBuf;
use std::process::Command;

/// Runs `tiergate explain` with the policy and cluster view of `samples/<sample>` on `workload`; returns (exit
/// code, stdout).
#[cfg(test)]
fn explain_in(sample: &str, workload: &std::path::Path) -> (i32, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .arg("explain")
        .arg("--policy")
        .arg(root.join(format!("samples/{sample}/policy.yaml")))
        .arg("--cluster")
        .arg(root.join(format!("samples/{sample}/cluster.yaml")))
        .arg(workload)
        .output()
        .unwrap();
    (output.status.code().unwrap(), String::from_utf8(output.stdout).unwrap())
}

/// Runs `tiergate explain` on a shared workload file with the kubenexus sample; returns (exit code, stdout).
#[cfg(test)]
fn explain(workload: &str) -> (i32, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let workloads = [root.join("../shared/fixtures/workloads"), root.join("../../shared/fixtures/workloads")]
        .into_iter()
        .find(|dir| dir.is_dir())
        .unwrap();
    explain_in("kubenexus", &workloads.join(workload))
}

#[test]
fn explain_shows_the_bronze_job_queue_class_patch_and_object() {
    let (code, out) = explain("job-bronze.yaml");
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("decision: admit with"), "{out}");
    assert!(out.contains("queued in LocalQueue tiergate-bronze"), "{out}");
    assert!(out.contains(r#""path": "/spec/suspend""#), "{out}");
    assert!(out.contains("gpu.nvidia.com/class: l4"), "{out}");
}

#[test]
fn explain_shows_the_run_time_limit_the_tier_gives_and_lowers() {
    let (code, out) = explain("job-bronze.yaml");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("run-time limit 14400s (4h), tier bronze's ceiling"), "{out}");
    assert!(out.contains("kueue.x-k8s.io/max-exec-time-seconds: \"14400\""), "{out}");
    let asking = std::env::temp_dir().join(format!("tiergate-explain-run-time-{}.yaml", std::process::id()));
    std::fs::write(
        &asking,
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: long\n  namespace: ml-team-dev\n  labels:\n    \
         kueue.x-k8s.io/max-exec-time-seconds: \"86400\"\nspec:\n  template:\n    spec:\n      restartPolicy: \
         Never\n      containers:\n      - name: main\n        image: cuda\n        resources:\n          \
         limits:\n            nvidia.com/gpu: \"1\"\n",
    )
    .unwrap();
    let (code, out) = explain_in("kubenexus", &asking);
    std::fs::remove_file(&asking).unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("run-time limit lowered to 14400s (4h): 86400 is above tier bronze's ceiling 4h"), "{out}");
    assert!(out.contains("warnings:") && out.contains("86400 replaced by 14400"), "{out}");
}

#[test]
fn explain_exits_3_and_names_the_fix_when_the_webhook_would_deny() {
    let (code, out) = explain("pod-override.yaml");
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("deny (foreign_gpu_class)") && out.contains("Fix:"), "{out}");
}

#[test]
fn explain_says_why_a_cpu_pod_is_left_alone() {
    let (code, out) = explain("pod-cpu.yaml");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("skip (no_gpu_request)"), "{out}");
}

#[test]
fn explain_queues_every_kind_kueue_manages_from_the_samples_in_the_bronze_queue() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let samples = ["rayjob", "raycluster", "pytorchjob", "trainjob", "mpijob", "lws", "appwrapper", "cronjob"];
    for sample in samples {
        let (code, out) = explain_in("kubenexus", &root.join(format!("samples/workloads/{sample}-bronze.yaml")));
        assert_eq!(code, 0, "{sample}: {out}");
        assert!(out.starts_with("decision: admit with"), "{sample}: {out}");
        assert!(out.contains("queued in LocalQueue tiergate-bronze"), "{sample}: {out}");
    }
}

#[test]
fn explain_shows_the_tiers_topology_rule_applied_to_a_multi_pod_job() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../samples/topology");
    let output = Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .arg("explain")
        .arg("--policy")
        .arg(root.join("policy.yaml"))
        .arg("--cluster")
        .arg(root.join("cluster.yaml"))
        .arg(root.join("job-gold-8.yaml"))
        .output()
        .unwrap();
    let out = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert!(
        out.contains("topology: pod set spec.template (8 pods) gets kueue.x-k8s.io/podset-required-topology=topology.example.com/rack (tier gold's rule: required rack)"),
        "{out}"
    );
    assert!(
        out.contains("kueue.x-k8s.io~1podset-required-topology") || out.contains("podset-required-topology"),
        "{out}"
    );
}

#[test]
fn explain_shows_a_dra_jobs_devices_per_class_and_what_kueue_charges() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let (code, out) = explain_in("dra", &root.join("samples/dra/job-bronze.yaml"));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "resourceClaims[0] (gpu): ResourceClaimTemplate one-l4 asks 1 × l4.tiergate.io (GPU class l4); Kueue \
             charges nvidia.com/gpu 1 per pod"
        ),
        "{out}"
    );
    assert!(out.contains("pinned to GPU class l4") && out.contains("nvidia.com/gpu.product: NVIDIA-L4"), "{out}");
}

#[test]
fn explain_refuses_a_job_whose_template_names_another_tiers_class() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("samples/dra/job-bronze.yaml")).unwrap().replace("one-l4", "old-h100");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, text).unwrap();
    let (code, out) = explain_in("dra", &path);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("deny (foreign_device_class)") && out.contains("ResourceClaimTemplate old-h100"), "{out}");
}

/// `tiergate explain` of the long bronze Job under the sample policy with bronze's budget `budget` (YAML flow).
#[cfg(test)]
fn explain_with_bronze_budget(budget: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let policy = std::fs::read_to_string(root.join("samples/kubenexus/policy.yaml")).unwrap();
    let budgeted = policy.replacen(
        "      maxRunTime: {ceiling: 4h}\n",
        &format!("      maxRunTime: {{ceiling: 4h}}\n      budget: {budget}\n"),
        1,
    );
    assert_ne!(budgeted, policy, "the sample's bronze tier moved: update this test");
    let dir = std::env::temp_dir().join(format!("tiergate-explain-budget-{}-{}", std::process::id(), budget.len()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.yaml"), budgeted).unwrap();
    let job = root.join("samples/workloads/job-bronze-long.yaml");
    let output = Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .arg("explain")
        .arg("--policy")
        .arg(dir.join("policy.yaml"))
        .arg("--cluster")
        .arg(root.join("samples/kubenexus/cluster.yaml"))
        .arg(&job)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let out = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{out}");
    out
}

#[test]
fn explain_names_the_budget_of_the_jobs_tier() {
    let out = explain_with_bronze_budget("{limits: {nvidia.com/gpu: 96h}}");
    assert!(
        out.contains("budget: tier bronze may use 96h of nvidia.com/gpu per month (UTC); while it is spent"),
        "{out}"
    );
}

#[test]
fn explain_names_a_budgets_rolling_window_instead_of_the_period() {
    let out = explain_with_bronze_budget("{window: 720h, limits: {nvidia.com/gpu: 96h}}");
    assert!(
        out.contains(
            "budget: tier bronze may use 96h of nvidia.com/gpu in any 720h (a rolling window); while it is spent, the \
             tier's ClusterQueue is held (stopPolicy Hold) and Kueue admits it only once enough use leaves the window"
        ),
        "{out}"
    );
    assert!(!out.contains("period turns"), "{out}");
}
