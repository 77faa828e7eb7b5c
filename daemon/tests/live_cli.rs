//! `kubectl tiergate status`, `why` and `tiergate check --kubeconfig` as a user runs them: plugin mode through
//! argv[0], kubectl's flags, exit codes and the `-o json|yaml` shapes, against a small fake API server on
//! 127.0.0.1 (plain HTTP, canned get/list answers from daemon/tests/fixtures/live/, and Kueue's ConfigMap in a
//! few namespaces: mapped, unmapped, without its key, forbidden).

#![cfg(test)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/live").join(name);
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn sample_policy() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/kubenexus/policy.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}

fn gpu_node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "eks.amazonaws.com/nodegroup": "gpu-l4", "gpu.nvidia.com/class": "l4", "kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}})
}

/// The canned answer for one GET path, or `None` for 404.
fn answer(path: &str) -> Option<Value> {
    Some(match path {
        "/apis/batch/v1/namespaces/ml-team-dev/jobs/train-bert" => fixture("job-train-bert.yaml"),
        "/apis/tiergate.io/v1alpha1/tierpolicies/default" => sample_policy(),
        "/api/v1/namespaces/ml-team-dev" => json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ml-team-dev", "labels": {"tenant.kubenexus.io/tier": "bronze"}}}),
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml-team-dev/localqueues" => list(vec![json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "tiergate-bronze", "namespace": "ml-team-dev"}, "spec": {"clusterQueue": "tiergate-bronze"}})]),
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml-team-dev/workloads" => {
            list(vec![fixture("workload-admitted.yaml")])
        }
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues" => list(vec![fixture("clusterqueue-bronze.yaml")]),
        "/api/v1/nodes" => list(vec![gpu_node("gpu-a"), gpu_node("gpu-b")]),
        "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config" => kueue_config_map(Some(
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n  deviceClassMappings:\n  \
             - name: nvidia.com/gpu\n    deviceClassNames: [h100.tiergate.io, l4.tiergate.io]\n",
        )),
        "/api/v1/namespaces/kueue-unmapped/configmaps/kueue-manager-config" => {
            kueue_config_map(Some("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"))
        }
        "/api/v1/namespaces/kueue-keyless/configmaps/kueue-manager-config" => kueue_config_map(None),
        "/apis/admissionregistration.k8s.io/v1" => resource_list(
            "admissionregistration.k8s.io/v1",
            &["validatingadmissionpolicies", "validatingadmissionpolicybindings", "mutatingadmissionpolicies"],
        ),
        "/apis/resource.k8s.io/v1" => resource_list("resource.k8s.io/v1", &["deviceclasses", "resourceclaims"]),
        _ => return None,
    })
}

/// Discovery's answer for `group_version`, listing `names`.
fn resource_list(group_version: &str, names: &[&str]) -> Value {
    let resources: Vec<Value> = names
        .iter()
        .map(|name| json!({"name": name, "singularName": "", "namespaced": false, "kind": "X", "verbs": []}))
        .collect();
    json!({"kind": "APIResourceList", "groupVersion": group_version, "resources": resources})
}

/// Kueue's ConfigMap with `configuration` under its key (`None`: without the key).
fn kueue_config_map(configuration: Option<&str>) -> Value {
    let data = configuration.map(|text| json!({"controller_manager_config.yaml": text}));
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config"}, "data": data})
}

/// Paths the fake API server refuses with 403, as RBAC would.
const FORBIDDEN: &[&str] = &["/api/v1/namespaces/kueue-locked/configmaps/kueue-manager-config"];

/// Serves `answer` over plain HTTP/1.1 on a free port; records each request as `METHOD PATH`.
fn start_fake_api() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let recorded = recorded.clone();
            std::thread::spawn(move || serve_connection(stream, &recorded));
        }
    });
    (port, requests)
}

fn serve_connection(stream: TcpStream, recorded: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut content_length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                content_length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; content_length];
        reader.read_exact(&mut body).unwrap();
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let target = parts.next().unwrap_or_default();
        let path = target.split('?').next().unwrap_or_default().to_owned();
        recorded.lock().unwrap().push(format!("{method} {path}"));
        let dry_run_apply = method == "PATCH" && target.contains("dryRun=All");
        let (status, reply) = match answer(&path).filter(|_| method == "GET") {
            // `check --kubeconfig`'s dry-run applies: the API server answers with the object as it would store it.
            _ if dry_run_apply => ("200 OK", serde_json::from_slice(&body).unwrap_or_default()),
            _ if FORBIDDEN.contains(&path.as_str()) => (
                "403 Forbidden",
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                    "message": "configmaps \"kueue-manager-config\" is forbidden: User \"tenant\" cannot get resource"}),
            ),
            Some(reply) => ("200 OK", reply),
            None => (
                "404 Not Found",
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
            ),
        };
        let body = serde_json::to_vec(&reply).unwrap();
        let head =
            format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
        if stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body)).is_err() {
            return;
        }
    }
}

fn kubeconfig(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\n\
         users:\n- name: tenant\n  user: {{token: t}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: tenant, \
         namespace: ml-team-dev}}\n- name: elsewhere\n  context: {{cluster: fake, user: tenant, namespace: other}}\n\
         current-context: fake\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The binary linked as `kubectl-tiergate` in `dir`, as kubectl finds plugins on PATH.
fn plugin(dir: &Path) -> PathBuf {
    let link = dir.join("kubectl-tiergate");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tiergate"), &link).unwrap();
    }
    link
}

fn run(binary: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(binary);
    command.args(args).env_clear();
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn linked_as_kubectl_tiergate_the_binary_is_the_kubectl_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&plugin(dir.path()), &["--help"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let help = text(&output.stdout);
    assert!(help.contains("Usage: kubectl tiergate"), "{help}");
    assert!(help.contains("status") && help.contains("why"), "{help}");
    let plain = run(Path::new(env!("CARGO_BIN_EXE_tiergate")), &["--help"], &[]);
    assert!(text(&plain.stdout).contains("Usage: tiergate"), "{}", text(&plain.stdout));
}

#[test]
fn why_uses_the_kubeconfig_from_kubeconfig_and_the_contexts_namespace_and_prints_json() {
    let (port, requests) = start_fake_api();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), port);
    let output = run(&plugin(dir.path()), &["why", "job/train-bert", "-o", "json"], &[("KUBECONFIG", &config)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["namespace"], "ml-team-dev");
    assert_eq!(answer["tier"]["localQueue"], "tiergate-bronze");
    assert_eq!(answer["hold"]["state"], "admitted");
    assert_eq!(answer["workload"]["clusterQueue"], "tiergate-bronze");
    assert_eq!(
        answer["summary"],
        "Admitted by Kueue in ClusterQueue tiergate-bronze (tier bronze) on flavor l4: nothing is holding it."
    );
    let requests = requests.lock().unwrap().clone();
    assert!(requests.iter().all(|request| request.starts_with("GET ")), "{requests:?}");
}

#[test]
fn why_prints_a_table_ending_with_the_sentence_and_honours_context_and_namespace_flags() {
    let (port, _) = start_fake_api();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), port);
    let args = ["why", "Job/train-bert", "--kubeconfig", config.to_str().unwrap(), "--context", "elsewhere"];
    let output = run(&plugin(dir.path()), &args, &[]);
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("Job other/train-bert"), "{}", text(&output.stderr));
    let output = run(&plugin(dir.path()), &[&args[..], &["-n", "ml-team-dev"]].concat(), &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    assert!(table.starts_with("Job ml-team-dev/train-bert\n"), "{table}");
    assert!(table.ends_with("on flavor l4: nothing is holding it.\n"), "{table}");
}

#[test]
fn status_prints_usage_per_tier_and_flavor_with_the_live_nodepool_and_as_yaml() {
    let (port, _) = start_fake_api();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), port);
    let output = run(&plugin(dir.path()), &["status", "--tier", "bronze"], &[("KUBECONFIG", &config)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    assert!(table.contains("bronze   tiergate-bronze"), "{table}");
    assert!(
        table.contains("bronze   l4       nvidia.com/gpu   14      14         16      0          -              0      eks.amazonaws.com/nodegroup=gpu-l4 (2 nodes)"),
        "{table}"
    );
    let output = run(&plugin(dir.path()), &["status", "-o", "yaml"], &[("KUBECONFIG", &config)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let answer: Value = serde_saphyr::from_str(&text(&output.stdout)).unwrap();
    assert_eq!(answer["tiers"].as_array().map(Vec::len), Some(3));
    assert_eq!(answer["tiers"][2]["admittedWorkloads"], 7);
}

#[test]
fn status_with_an_unknown_tier_fails_naming_the_tiers() {
    let (port, _) = start_fake_api();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), port);
    let output = run(&plugin(dir.path()), &["status", "--tier", "platinum"], &[("KUBECONFIG", &config)]);
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("gold, silver, bronze"), "{}", text(&output.stderr));
}

#[test]
fn why_refuses_a_kind_tiergate_does_not_handle_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let output = run(&plugin(dir.path()), &["why", "daemonset/nightly"], &[("KUBECONFIG", &missing)]);
    assert!(!output.status.success());
    let error = text(&output.stderr);
    assert!(error.contains("Job, JobSet, Pod, Deployment, StatefulSet") && !error.contains("kubeconfig"), "{error}");
    let output = run(&plugin(dir.path()), &["why", "job/train"], &[("KUBECONFIG", &missing)]);
    assert!(text(&output.stderr).contains("failed to read the kubeconfig"), "{}", text(&output.stderr));
}

#[test]
fn check_with_a_kubeconfig_matches_tiers_against_the_live_node_groups() {
    let (port, _) = start_fake_api();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), port);
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/kubenexus/policy.yaml");
    let binary = Path::new(env!("CARGO_BIN_EXE_tiergate"));
    let args = ["check", "--policy", policy.to_str().unwrap(), "--kubeconfig", config.to_str().unwrap()];
    let output = run(binary, &args, &[]);
    let report = text(&output.stdout);
    assert!(report.contains("tier bronze: OK"), "{report}{}", text(&output.stderr));
    assert!(report.contains("-> node group eks.amazonaws.com/nodegroup=gpu-l4 (2 nodes)"), "{report}");
    assert!(report.contains("tier gold: FAIL"), "{report}");
    assert!(!output.status.success(), "gold and silver have no pool, so check fails");
    let neither = run(binary, &["check", "--policy", policy.to_str().unwrap()], &[]);
    assert!(text(&neither.stderr).contains("--nodepools"), "{}", text(&neither.stderr));
}

/// The DRA sample's two classes as Karpenter NodePools, so only Kueue's Configuration decides the exit code.
fn dra_nodepools(dir: &Path) -> PathBuf {
    let pool = |name: &str, product: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    \
             metadata:\n      labels: {{nvidia.com/gpu.product: {product}}}\n    spec:\n      nodeClassRef: \
             {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}}\n      requirements: []\n"
        )
    };
    let path = dir.join("dra-nodepools.yaml");
    let text = [pool("dra-h100", "NVIDIA-H100-80GB-HBM3"), pool("dra-l4", "NVIDIA-L4")].join("---\n");
    std::fs::write(&path, text).unwrap();
    path
}

/// `tiergate check` of the DRA sample against the fake cluster, Kueue's ConfigMap read from `kueue_namespace`.
fn check_dra(kueue_namespace: &str) -> Output {
    let (port, _) = start_fake_api();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), port);
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/dra/policy.yaml");
    let pools = dra_nodepools(dir.path());
    let args = [
        "check",
        "--policy",
        policy.to_str().unwrap(),
        "--nodepools",
        pools.to_str().unwrap(),
        "--kubeconfig",
        config.to_str().unwrap(),
        "--kueue-namespace",
        kueue_namespace,
    ];
    run(Path::new(env!("CARGO_BIN_EXE_tiergate")), &args, &[])
}

#[test]
fn check_with_a_kubeconfig_passes_when_kueue_maps_every_dra_class() {
    let output = check_dra("kueue-system");
    let report = text(&output.stdout);
    assert!(output.status.success(), "{report}{}", text(&output.stderr));
    assert!(report.contains("tier gold: OK") && report.contains("tier bronze: OK"), "{report}");
    assert!(
        report.contains(
            "Kueue deviceClassMappings: every DRA class is charged as nvidia.com/gpu (h100.tiergate.io, l4.tiergate.io)\n"
        ),
        "{report}"
    );
    assert!(
        report.ends_with(
            "What this cluster serves of the policy:\n  \
             ok   in-server gate: ValidatingAdmissionPolicy and MutatingAdmissionPolicy served (both halves)\n  \
             ok   DRA GPU classes: resource.k8s.io/v1 deviceclasses served\n  \
             ok   Kueue objects: the installed CRDs keep every field of the 6 cluster-scoped objects (dry-run apply)\n"
        ),
        "{report}"
    );
}

#[test]
fn check_with_a_kubeconfig_fails_when_kueues_configuration_lacks_the_dra_mapping_and_prints_the_fragment() {
    let output = check_dra("kueue-unmapped");
    let report = text(&output.stdout);
    assert!(!output.status.success(), "{report}");
    assert!(report.contains("tier gold: OK") && report.contains("tier bronze: OK"), "{report}");
    assert!(report.contains("Kueue deviceClassMappings (kueue-unmapped/kueue-manager-config): FAIL\n"), "{report}");
    assert!(report.contains("  DeviceClass h100.tiergate.io is not in Kueue's deviceClassMappings"), "{report}");
    assert!(report.contains("  DeviceClass l4.tiergate.io is not in Kueue's deviceClassMappings"), "{report}");
    assert!(report.contains("  the policy's DRA classes need (`tiergate render --kueue-config` prints the same):\n"));
    assert!(report.contains("    # Kueue's Configuration (ConfigMap kueue-manager-config, key"), "{report}");
    assert!(
        report.contains("    resources:\n      deviceClassMappings:\n        - name: nvidia.com/gpu\n"),
        "{report}"
    );
}

#[test]
fn check_with_a_kubeconfig_names_a_missing_configmap_or_key_and_a_forbidden_read_with_the_fix() {
    for (namespace, expected) in [
        ("kueue-elsewhere", "cannot read kueue-elsewhere/kueue-manager-config: the ConfigMap does not exist"),
        ("kueue-keyless", "kueue-keyless/kueue-manager-config has no key controller_manager_config.yaml"),
        (
            "kueue-locked",
            "cannot read kueue-locked/kueue-manager-config: configmaps \"kueue-manager-config\" is forbidden",
        ),
    ] {
        let output = check_dra(namespace);
        let report = text(&output.stdout);
        assert!(!output.status.success(), "{namespace}: {report}");
        assert!(report.contains(expected), "{namespace}: {report}{}", text(&output.stderr));
        assert!(report.contains("    resources:\n"), "{namespace}: {report}");
    }
    let locked = text(&check_dra("kueue-locked").stdout);
    assert!(locked.contains("kubectl auth can-i get configmap/kueue-manager-config -n kueue-locked"), "{locked}");
}

#[test]
fn check_with_a_kubeconfig_says_nothing_about_kueue_without_dra_classes() {
    let (port, requests) = start_fake_api();
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), port);
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/kubenexus/policy.yaml");
    let args = ["check", "--policy", policy.to_str().unwrap(), "--kubeconfig", config.to_str().unwrap()];
    let output = run(Path::new(env!("CARGO_BIN_EXE_tiergate")), &args, &[]);
    assert!(!text(&output.stdout).contains("Kueue deviceClassMappings"), "{}", text(&output.stdout));
    let requests = requests.lock().unwrap().clone();
    assert!(requests.iter().all(|request| !request.contains("configmaps")), "{requests:?}");
}
