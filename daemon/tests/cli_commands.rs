//! The `render`, `check` and `crd` subcommands as a user runs them: output streams and exit codes.

#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tiergate::cli::Exit;

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
fn check_for_a_kubernetes_version_reports_what_it_serves_and_fails_dra_classes_before_1_34() {
    let dir = tempfile::tempdir().unwrap();
    let pools = dir.path().join("pools.yaml");
    let pool = |name: &str, class: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    \
             metadata:\n      labels: {{nvidia.com/gpu.product: {class}}}\n    spec:\n      nodeClassRef: \
             {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}}\n      requirements: []\n"
        )
    };
    std::fs::write(&pools, [pool("h100", "NVIDIA-H100-80GB-HBM3"), pool("l4", "NVIDIA-L4")].join("---\n")).unwrap();
    let check = |version: &str| {
        let policy = sample("dra/policy.yaml");
        tiergate(&[
            "check",
            "--policy",
            &policy,
            "--nodepools",
            pools.to_str().unwrap(),
            "--kubernetes-version",
            version,
        ])
    };
    let old = check("1.33");
    let report = stdout(&old);
    assert!(!old.status.success(), "{report}");
    assert!(report.contains("What Kubernetes 1.33 serves of the policy:\n  note in-server gate: validating half only"));
    assert!(report.contains("  FAIL DRA GPU classes: resource.k8s.io/v1 deviceclasses is not served"), "{report}");
    let newest = check("1.36");
    let report = stdout(&newest);
    assert!(newest.status.success(), "{report}{}", stderr(&newest));
    assert!(report.contains("  ok   in-server gate: ValidatingAdmissionPolicy and MutatingAdmissionPolicy served"));
    assert!(report.contains("  ok   DRA GPU classes: resource.k8s.io/v1 deviceclasses served"), "{report}");
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

fn tiergate_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tiergate"));
    command.args(args).env_clear();
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn code(output: &Output) -> u8 {
    u8::try_from(output.status.code().unwrap()).unwrap()
}

/// The exit status `subcommand`'s table gives `exit`, checked to be listed in its `--help`.
fn listed(subcommand: &str, exit: Exit) -> u8 {
    let help = stdout(&tiergate(&[subcommand, "--help"]));
    let meaning = tiergate::cli::exit_statuses(Some(subcommand))
        .into_iter()
        .find(|(listed, _)| *listed == exit)
        .map(|(_, meaning)| meaning)
        .unwrap_or_else(|| panic!("{subcommand} does not list {exit:?}"));
    assert!(help.contains("Exit status:\n"), "{help}");
    assert!(help.contains(&format!("  {}  {meaning}\n", exit.code())), "{help}");
    exit.code()
}

#[test]
fn a_missing_default_kubeconfig_is_named_once_with_the_flag_or_variable_to_use() {
    let home = tempfile::tempdir().unwrap();
    let output = tiergate_with(&["status"], &[("HOME", home.path().to_str().unwrap())]);
    assert_eq!(code(&output), listed("status", Exit::Failure));
    assert_eq!(
        stderr(&output),
        format!(
            "error: failed to read the kubeconfig {}/.kube/config: No such file or directory (os error 2); pass \
             --kubeconfig PATH or set KUBECONFIG\n",
            home.path().display()
        )
    );
}

#[test]
fn a_missing_kubeconfig_given_by_flag_or_variable_says_to_check_that_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let output = tiergate(&["why", "job/train", "--kubeconfig", missing.to_str().unwrap()]);
    assert_eq!(code(&output), listed("why", Exit::Failure));
    assert_eq!(
        stderr(&output),
        format!(
            "error: failed to read the kubeconfig {}: No such file or directory (os error 2); check the path given to \
             --kubeconfig (or TIERGATE_KUBECONFIG)\n",
            missing.display()
        )
    );
    let output = tiergate_with(&["status"], &[("KUBECONFIG", missing.to_str().unwrap())]);
    assert_eq!(
        stderr(&output),
        format!(
            "error: failed to read the kubeconfig {}: No such file or directory (os error 2); check the files \
             KUBECONFIG names\n",
            missing.display()
        )
    );
    let policy = sample("kubenexus/policy.yaml");
    let output = tiergate(&["check", "--policy", &policy, "--kubeconfig", missing.to_str().unwrap()]);
    assert_eq!(code(&output), listed("check", Exit::Failure));
    assert!(stderr(&output).contains("check the path given to --kubeconfig"), "{}", stderr(&output));
    assert_eq!(stderr(&output).matches("No such file").count(), 1, "{}", stderr(&output));
}

#[test]
fn junk_given_as_a_cluster_view_names_the_file_what_a_view_looks_like_and_a_sample() {
    let junk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let output =
        tiergate(&["render", "--policy", &sample("kubenexus/policy.yaml"), "--cluster", junk.to_str().unwrap()]);
    assert_eq!(code(&output), listed("render", Exit::Failure));
    let error = stderr(&output);
    assert!(
        error.starts_with(&format!("error: failed to parse {} as a cluster view: it is not YAML: ", junk.display())),
        "{error}"
    );
    assert!(error.contains("`namespaces:`") && error.contains("`nodes:`") && error.contains("`kind: List`"), "{error}");
    assert!(error.ends_with("see samples/kubenexus/cluster.yaml\n") && !error.contains("untagged"), "{error}");
    let policy_as_view = tiergate(&[
        "render",
        "--policy",
        &sample("kubenexus/policy.yaml"),
        "--cluster",
        &sample("kubenexus/policy.yaml"),
    ]);
    assert!(stderr(&policy_as_view).contains("found kind \"TierPolicy\""), "{}", stderr(&policy_as_view));
}

#[test]
fn an_invalid_policy_gets_one_error_line_per_problem_with_the_file_field_and_fix_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(sample("kubenexus/policy.yaml"))
        .unwrap()
        .replace("gpuClass: l4", "gpuClass: t4")
        .replace("nominal: \"16\"", "nominal: \"-16\"");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, text).unwrap();
    let file = path.to_str().unwrap();
    let pools = sample("kubenexus/nodepools.yaml");
    let workload = sample("workloads/job-bronze.yaml");
    for (command, args) in [
        ("render", vec!["render", "--policy", file]),
        ("check", vec!["check", "--policy", file, "--nodepools", &pools]),
        ("explain", vec!["explain", "--policy", file, &workload]),
    ] {
        let output = tiergate(&args);
        assert_eq!(code(&output), listed(command, Exit::Failure), "{command}");
        assert!(stdout(&output).is_empty(), "{command}: {}", stdout(&output));
        let lines: Vec<String> = stderr(&output).lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), 2, "{command}: {lines:?}");
        assert!(lines.iter().all(|line| line.starts_with(&format!("error: {file}: spec.tiers[2]."))), "{lines:?}");
        assert!(
            lines[0].starts_with(&format!("error: {file}: spec.tiers[2].gpuClass: unknown GPU class \"t4\"; fix: "))
        );
        assert!(lines[1].contains(".nominal: ") && lines[1].contains("; fix: "), "{lines:?}");
    }
    let unknown = dir.path().join("unknown.yaml");
    let text = std::fs::read_to_string(sample("kubenexus/policy.yaml")).unwrap().replace("tierLabel:", "tierLable:");
    std::fs::write(&unknown, text).unwrap();
    let output = tiergate(&["render", "--policy", unknown.to_str().unwrap()]);
    assert_eq!(code(&output), 1);
    let error = stderr(&output);
    assert!(error.starts_with(&format!("error: {}: spec.tierLable: ", unknown.display())), "{error}");
    assert!(error.contains("tierLabel"), "{error}");
}

#[test]
fn check_without_pools_asks_for_one_of_the_three_sources_as_a_usage_error() {
    let output = tiergate(&["check", "--policy", &sample("kubenexus/policy.yaml")]);
    assert_eq!(code(&output), listed("check", Exit::Usage));
    assert!(
        stderr(&output).starts_with("error: one of --nodepools, --kubeconfig or --fleet is required"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn explain_exits_with_the_denied_status_its_help_lists() {
    let output = tiergate(&[
        "explain",
        "--policy",
        &sample("kubenexus/policy.yaml"),
        "--cluster",
        &sample("kubenexus/cluster.yaml"),
        &sample("workloads/pod-override.yaml"),
    ]);
    assert!(stdout(&output).starts_with("decision: deny"), "{}", stdout(&output));
    assert_eq!(code(&output), listed("explain", Exit::Denied));
    assert_eq!(Exit::Denied.code(), 3);
}

#[test]
fn each_listen_flag_has_its_own_variable_and_keeps_listen_as_an_alias() {
    let webhook = stdout(&tiergate(&["webhook", "--help"]));
    assert!(webhook.contains("--webhook-listen <WEBHOOK_LISTEN>"), "{webhook}");
    assert!(webhook.contains("[env: TIERGATE_WEBHOOK_LISTEN=]") && webhook.contains("[alias: --listen]"), "{webhook}");
    let agent = stdout(&tiergate(&["agent", "--help"]));
    assert!(agent.contains("[env: TIERGATE_AGENT_LISTEN=]") && agent.contains("[alias: --listen]"), "{agent}");
    let why = stdout(&tiergate(&["why", "--help"]));
    assert!(why.contains("-n, --workload-namespace <NAMESPACE>") && why.contains("[alias: --namespace]"), "{why}");
    assert!(why.contains("[env: TIERGATE_WORKLOAD_NAMESPACE=]"), "{why}");
    let crd = stdout(&tiergate(&["crd", "--help"]));
    assert!(crd.contains("TierPolicy and TierGateParameters"), "{crd}");
}

#[test]
fn the_blocklist_reads_the_replaced_systems_variable_only_when_the_tiergate_one_is_unset() {
    let (policy, cluster, job) =
        (sample("kubenexus/policy.yaml"), sample("kubenexus/cluster.yaml"), sample("workloads/job-bronze.yaml"));
    let args = ["explain", "--policy", &policy, "--cluster", &cluster, &job];
    let old = tiergate_with(&args, &[("BLOCKLISTED_NAMESPACE_LIST", "a,,b")]);
    assert_eq!(code(&old), 2, "the old variable is read and parsed as the flag: {}", stderr(&old));
    assert!(stderr(&old).contains("entry 2"), "{}", stderr(&old));
    let both =
        tiergate_with(&args, &[("BLOCKLISTED_NAMESPACE_LIST", "a,,b"), ("TIERGATE_BLOCKLISTED_NAMESPACES", "x")]);
    assert_eq!(code(&both), 0, "the new variable wins: {}", stderr(&both));
    let help = stdout(&tiergate(&["explain", "--help"]));
    assert!(help.contains("[env: TIERGATE_BLOCKLISTED_NAMESPACES=]") && help.contains("BLOCKLISTED_NAMESPACE_LIST"));
}

#[test]
fn logs_written_to_a_pipe_carry_no_colour() {
    // A port in use: `webhook --offline` logs a warning, then fails to bind.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = busy.local_addr().unwrap().to_string();
    let output = tiergate(&[
        "webhook",
        "--offline",
        "--policy",
        &sample("kubenexus/policy.yaml"),
        "--webhook-listen",
        &address,
        "--admin-listen",
        "127.0.0.1:0",
    ]);
    let logs = stderr(&output);
    assert!(logs.contains("WARN") && logs.contains("no --cluster given"), "{logs}");
    assert!(!logs.contains('\u{1b}'), "ANSI escape in piped logs: {logs:?}");
    assert_eq!(code(&output), listed("webhook", Exit::Failure), "{logs}");
}

#[test]
fn render_targets_a_kubernetes_version_rendering_the_mutating_half_from_1_36_only() {
    let policy = sample("kubenexus/policy.yaml");
    let older = tiergate(&["render", "--policy", &policy, "--kubernetes-version", "1.34"]);
    assert_eq!(code(&older), 0, "{}", stderr(&older));
    assert!(!stdout(&older).contains("kind: MutatingAdmissionPolicy"));
    assert!(stdout(&older).contains("kind: ValidatingAdmissionPolicy\n"));
    assert!(!stderr(&older).contains("note: rendering for Kubernetes"), "{}", stderr(&older));
    let same = tiergate(&["render", "--policy", &policy, "--gate", "validate-only"]);
    assert_eq!(stdout(&older), stdout(&same), "1.34 renders as --gate validate-only");
    let newest = tiergate(&["render", "--policy", &policy, "--kubernetes-version", "1.36"]);
    assert!(stdout(&newest).contains("kind: MutatingAdmissionPolicy\n"));
    for outside in ["1.32", "1.37"] {
        let output = tiergate(&["render", "--kubernetes-version", outside]);
        assert_eq!(code(&output), listed("render", Exit::Usage));
        assert!(stderr(&output).contains(&format!("Kubernetes {outside} is not supported")), "{}", stderr(&output));
        assert!(stderr(&output).contains("1.33 to 1.36"), "{}", stderr(&output));
    }
    let contradiction = tiergate(&["render", "--kubernetes-version", "1.35", "--gate", "validate-and-mutate"]);
    assert_eq!(code(&contradiction), 1);
    assert!(stderr(&contradiction).contains("MutatingAdmissionPolicy is served from Kubernetes 1.36"));
}

#[test]
fn render_without_a_version_assumes_the_newest_says_so_on_stderr_and_keeps_stdout_the_golden() {
    let output = tiergate(&["render"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), std::fs::read_to_string(sample("kubenexus/expected.yaml")).unwrap());
    let errors = stderr(&output);
    let notes: Vec<&str> = errors.lines().filter(|line| line.contains("Kubernetes 1.36")).collect();
    assert_eq!(notes.len(), 1, "{}", stderr(&output));
    assert!(notes[0].starts_with("note: rendering for Kubernetes 1.36") && notes[0].contains("--kubernetes-version"));
}

/// Answers `GET /version` as an API server of `minor` (e.g. `34+`, as managed clusters report it), once per
/// connection; returns a kubeconfig pointing at it.
fn fake_version_server(dir: &Path, minor: &str) -> PathBuf {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body =
        format!(r#"{{"major":"1","minor":"{minor}","gitVersion":"v1.{}.2-eks-1"}}"#, minor.trim_end_matches('+'));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|read| read > 2) {
                line.clear();
            }
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let path = dir.join(format!("kubeconfig-{}", minor.trim_end_matches('+')));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\n\
             users:\n- name: me\n  user: {{token: t}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: me}}\n\
             current-context: fake\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn render_with_a_kubeconfig_renders_for_the_version_its_api_server_reports() {
    let dir = tempfile::tempdir().unwrap();
    let policy = sample("kubenexus/policy.yaml");
    let config = fake_version_server(dir.path(), "34+");
    let output = tiergate(&["render", "--policy", &policy, "--kubeconfig", config.to_str().unwrap()]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(!stdout(&output).contains("kind: MutatingAdmissionPolicy"));
    assert!(stderr(&output).contains(&format!("note: the API server of {} runs Kubernetes 1.34", config.display())));
    let newer = fake_version_server(dir.path(), "38");
    let output = tiergate(&["render", "--policy", &policy, "--kubeconfig", newer.to_str().unwrap()]);
    assert_eq!(code(&output), 1);
    assert!(stderr(&output).contains("Kubernetes 1.38 is not supported: tiergate renders for Kubernetes 1.33 to 1.36"));
    let pinned = tiergate(&[
        "render",
        "--policy",
        &policy,
        "--kubeconfig",
        newer.to_str().unwrap(),
        "--kubernetes-version",
        "1.36",
    ]);
    assert_eq!(code(&pinned), 0, "--kubernetes-version wins, no connection: {}", stderr(&pinned));
}
