//! The `render`, `check` and `crd` subcommands as a user runs them: output streams and exit codes.

#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tiergate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiergate")).args(args).env_clear().output().unwrap()
}

fn sample(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples").join(path).display().to_string()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn render_without_flags_shows_the_sample_with_its_local_queues() {
    let output = tiergate(&["render"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("kind: LocalQueue") && text.contains("namespace: ml-team-dev"), "{text}");
    assert_eq!(text, std::fs::read_to_string(sample("kubenexus/expected.yaml")).unwrap());
}

#[test]
fn render_without_a_cluster_view_prints_cluster_scoped_objects_and_a_note() {
    let output = tiergate(&["render", "--policy", &sample("kubenexus/policy.yaml")]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!stdout(&output).contains("kind: LocalQueue"));
    assert!(stdout(&output).contains("kind: ClusterQueue"));
    assert!(stderr(&output).contains("LocalQueues need a cluster view"), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "in-server gate: validate and mutate (Validating- and MutatingAdmissionPolicy tiergate-gate-default, bound once \
             per tier with its TierGateParameters: gold, silver, bronze)"
        ),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).contains("kind: MutatingAdmissionPolicy\n"));
    let older = tiergate(&["render", "--policy", &sample("kubenexus/policy.yaml"), "--gate", "validate-only"]);
    assert!(older.status.success(), "{}", stderr(&older));
    assert!(!stdout(&older).contains("kind: MutatingAdmissionPolicy"));
    assert!(stdout(&older).contains("kind: ValidatingAdmissionPolicy\n"));
    assert!(
        stderr(&older).contains(
            "in-server gate: validate only (ValidatingAdmissionPolicy tiergate-gate-default, bound once per tier"
        ),
        "{}",
        stderr(&older)
    );
}

#[test]
fn render_as_json_is_a_v1_list() {
    let output = tiergate(&[
        "render",
        "-o",
        "json",
        "--policy",
        &sample("spot-mix/policy.yaml"),
        "--cluster",
        &sample("spot-mix/cluster.yaml"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert!(list["items"].as_array().unwrap().iter().any(|item| item["kind"] == "AdmissionCheck"));
}

#[test]
fn render_refuses_a_bad_policy_listing_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let policy = std::fs::read_to_string(sample("kubenexus/policy.yaml"))
        .unwrap()
        .replace("gpuClass: l4", "gpuClass: t4")
        .replace("nominal: \"16\"", "nominal: \"-16\"");
    let path: PathBuf = dir.path().join("policy.yaml");
    std::fs::write(&path, policy).unwrap();
    let output = tiergate(&["render", "--policy", path.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(stdout(&output).is_empty());
    let errors = stderr(&output);
    assert!(
        errors.contains("spec.tiers[2].gpuClass")
            && errors.contains("spec.tiers[2].quotas[\"nvidia.com/gpu\"].nominal"),
        "{errors}"
    );
}

#[test]
fn check_passes_on_the_samples_and_fails_when_a_tier_has_no_pool() {
    for name in ["kubenexus", "spot-mix"] {
        let output = tiergate(&[
            "check",
            "--policy",
            &sample(&format!("{name}/policy.yaml")),
            "--nodepools",
            &sample(&format!("{name}/nodepools.yaml")),
        ]);
        assert!(output.status.success(), "{name}: {}", stdout(&output));
    }
    let dir = tempfile::tempdir().unwrap();
    let pools =
        std::fs::read_to_string(sample("kubenexus/nodepools.yaml")).unwrap().replace("values: [l4]", "values: [t4]");
    let path = dir.path().join("pools.yaml");
    std::fs::write(&path, pools).unwrap();
    let output =
        tiergate(&["check", "--policy", &sample("kubenexus/policy.yaml"), "--nodepools", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let report = stdout(&output);
    assert!(report.contains("tier bronze: FAIL") && report.contains("no pool can host these pods"), "{report}");
    assert!(report.contains("requirement gpu.nvidia.com/class In [\"t4\"] excludes l4"), "{report}");
}

#[test]
fn check_warns_of_a_karpenter_limit_below_the_quota_and_of_a_lower_weight_catch_all_but_passes() {
    let output = tiergate(&[
        "check",
        "--policy",
        &sample("karpenter/policy.yaml"),
        "--nodepools",
        &sample("karpenter/nodepools.yaml"),
    ]);
    let report = stdout(&output);
    assert!(output.status.success(), "warnings do not fail the check: {report}{}", stderr(&output));
    assert!(report.contains("tier gold: OK\n") && report.contains("tier bronze: OK\n"), "{report}");
    assert!(
        report.contains(
            "  h100 [gpu.nvidia.com/class=h100,karpenter.k8s.aws/instance-family=p5]: -> NodePool platform-h100 \
             (Karpenter's pick by weight: 50, above NodePool gpu-any at 10)\n"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "warning: tier gold, h100: NodePool gpu-any (weight 10) can also host these pods. Karpenter picks \
             NodePool platform-h100 (weight 50) first, but launches from NodePool gpu-any whenever NodePool \
             platform-h100 cannot (its limits reached, no capacity), so the tier's pods may land on nodes of NodePool \
             gpu-any. Fix: give NodePool gpu-any requirements or a taint these pods do not meet, e.g. the requirement \
             {key: gpu.nvidia.com/class, operator: NotIn, values: [h100]}\n"
        ),
        "{report}"
    );
    assert_eq!(report.matches("warning: tier ").count(), 4, "gold h100, silver l4 and h100, bronze l4: {report}");
    assert!(
        report.contains(
            "warning: NodePool platform-h100 limits nvidia.com/gpu to 8, below the 16 Kueue can admit onto it (the \
             nominal quota of tier gold on the flavors it hosts): Kueue admits workloads Karpenter will never get \
             nodes for, and they hold quota while their pods stay Pending. Fix: raise the limit to 16 (spec.limits: \
             {nvidia.com/gpu: \"16\"}), or lower the quota; or use NodePool tiergate-h100, which tiergate renders \
             from GPU class h100's `karpenter` template with a limit that follows the quota, in place of this one\n"
        ),
        "{report}"
    );
    assert_eq!(report.matches("warning: NodePool ").count(), 1, "platform-l4's limit is its quota: {report}");
}

#[test]
fn check_fleet_warns_of_a_workers_karpenter_limit_below_the_quota_dispatched_there() {
    let dir = tempfile::tempdir().unwrap();
    let east_pools = dir.path().join("us-east.yaml");
    std::fs::write(
        &east_pools,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: east-h100}\nspec:\n  limits: {nvidia.com/gpu: \
         32}\n  template:\n    metadata: {labels: {gpu.nvidia.com/class: h100}}\n    spec:\n      taints: [{key: \
         nvidia.com/gpu, value: present, effect: NoSchedule}]\n",
    )
    .unwrap();
    let east = format!("us-east={}", east_pools.display());
    let west = format!("eu-west={}", sample("fleet/workers/eu-west-nodepools.yaml"));
    let policy = sample("fleet/policy.yaml");
    let output =
        tiergate(&["check", "--policy", &policy, "--fleet", "--worker-nodepools", &east, "--worker-nodepools", &west]);
    let report = stdout(&output);
    assert!(output.status.success(), "{report}{}", stderr(&output));
    assert!(
        report.contains(
            "warning: worker us-east: NodePool east-h100 limits nvidia.com/gpu to 32, below the 64 Kueue can admit \
             onto it (the nominal quota of tier gold on the flavors it hosts)"
        ),
        "{report}"
    );
    assert_eq!(report.matches("warning: ").count(), 1, "{report}");
}

#[test]
fn crd_prints_the_chart_copy() {
    let output = tiergate(&["crd"]);
    assert!(output.status.success());
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/tiergate/crds");
    let read = |name: &str| std::fs::read_to_string(chart.join(name)).unwrap();
    let expected =
        format!("{}---\n{}", read("tierpolicies.tiergate.io.yaml"), read("tiergateparameters.tiergate.io.yaml"));
    assert_eq!(stdout(&output), expected);
}

#[test]
fn render_of_a_fleet_prints_both_sides_with_a_header_per_worker_as_the_golden() {
    let output = tiergate(&[
        "render",
        "--policy",
        &sample("fleet/policy.yaml"),
        "--cluster",
        &sample("fleet/cluster.yaml"),
        "--worker-view",
        &format!("us-east={}", sample("fleet/workers/us-east.yaml")),
        "--worker-view",
        &format!("eu-west={}", sample("fleet/workers/eu-west.yaml")),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert_eq!(text, std::fs::read_to_string(sample("fleet/expected.yaml")).unwrap());
    let east = text.find("# cluster: us-east\n").unwrap();
    let west = text.find("# cluster: eu-west\n").unwrap();
    assert!(text.find("kind: MultiKueueConfig").unwrap() < east && east < west, "management first, then workers");
}

#[test]
fn render_of_a_fleet_without_worker_views_uses_this_clusters_view_and_says_so() {
    let output =
        tiergate(&["render", "--policy", &sample("fleet/policy.yaml"), "--cluster", &sample("fleet/cluster.yaml")]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("no --worker-view us-east=FILE given"), "{}", stderr(&output));
    assert!(stderr(&output).contains("worker us-east has no node of GPU class h100"), "{}", stderr(&output));
    assert!(stdout(&output).contains("# cluster: eu-west\n"));
}

#[test]
fn render_refuses_a_worker_view_for_an_undeclared_worker() {
    let view = format!("mars={}", sample("fleet/workers/us-east.yaml"));
    let output = tiergate(&["render", "--policy", &sample("fleet/policy.yaml"), "--worker-view", &view]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("declares no worker \"mars\" (spec.clusters: us-east, eu-west)"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn check_of_dra_classes_without_a_kubeconfig_reads_no_kueue_configuration_and_says_nothing_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let pools = dir.path().join("pools.yaml");
    let pool = |name: &str, product: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    \
             metadata:\n      labels: {{nvidia.com/gpu.product: {product}}}\n    spec:\n      requirements: []\n"
        )
    };
    std::fs::write(&pools, [pool("h100", "NVIDIA-H100-80GB-HBM3"), pool("l4", "NVIDIA-L4")].join("---\n")).unwrap();
    let output = tiergate(&["check", "--policy", &sample("dra/policy.yaml"), "--nodepools", pools.to_str().unwrap()]);
    assert!(output.status.success(), "{}{}", stdout(&output), stderr(&output));
    assert!(!stdout(&output).contains("Kueue") && !stderr(&output).contains("Kueue"), "{}", stdout(&output));
}

#[test]
fn check_fleet_passes_on_the_sample_and_fails_when_a_worker_lacks_a_pool() {
    let east = format!("us-east={}", sample("fleet/workers/us-east-nodepools.yaml"));
    let west = format!("eu-west={}", sample("fleet/workers/eu-west-nodepools.yaml"));
    let policy = sample("fleet/policy.yaml");
    let output =
        tiergate(&["check", "--policy", &policy, "--fleet", "--worker-nodepools", &east, "--worker-nodepools", &west]);
    assert!(output.status.success(), "{}{}", stdout(&output), stderr(&output));
    assert!(
        stdout(&output).contains("worker eu-west:\n  tier gold: OK\n    h100: -> NodeGroupTemplate gpu-h100"),
        "{}",
        stdout(&output)
    );
    let west_without_a100 = format!("eu-west={}", sample("fleet/workers/us-east-nodepools.yaml"));
    let output = tiergate(&[
        "check",
        "--policy",
        &policy,
        "--fleet",
        "--worker-nodepools",
        &east,
        "--worker-nodepools",
        &west_without_a100,
    ]);
    assert!(!output.status.success());
    assert!(stdout(&output).contains("tier silver: FAIL"), "{}", stdout(&output));
}

#[test]
fn a_reader_closing_stdout_early_ends_render_quietly_and_successfully() {
    // As `tiergate render | head -1`: the reader is gone before the first write, which then fails with EPIPE.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .arg("render")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "exit {:?}: {}", output.status, stderr(&output));
    assert!(!stderr(&output).contains("error"), "{}", stderr(&output));
}
