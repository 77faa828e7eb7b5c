//! End-to-end: README's offline pipeline, `tiergate render … | kubectl apply -f -`, against the cluster's own API
//! server: the objects `render` writes for the Kubernetes version the cluster runs (asked with `--kubeconfig`, and
//! named with `--kubernetes-version` where the plane emulates an older minor) are all accepted, by a server-side
//! dry run of each. On an API server that serves no MutatingAdmissionPolicy (before 1.36) the render must hold
//! none, or the apply fails on it. The installed Kueue CRDs must keep every field of every sample policy's Kueue
//! objects (an older CRD would prune one silently), and `tiergate check --kubeconfig` must say what the cluster
//! serves as discovery does. Skipped (and passing) without a cluster, Kueue's v1beta2 CRDs, or the tiergate
//! binary (`TIERGATE_E2E_IMAGE_BINARY`, which tests/run.sh sets).

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::Discovery;
use kube::{Client, ResourceExt};
use tiergate::reconcile::diff::build_missing_paths;
use tiergate_e2e::control_plane::versions::KUBERNETES_VERSION_ENV;
use tiergate_e2e::{
    Cleanup, HarnessError, create_namespace, install_tierpolicy_crd, kueue_served_or_skip, random_name,
    repository_file, run_cluster_test, skip,
};

const TEST: &str = "readmes_render_pipeline_is_accepted_by_the_clusters_api_server";
/// The binary tests/run.sh builds and names.
const BINARY_ENV: &str = "TIERGATE_E2E_IMAGE_BINARY";
/// The sample policy's tier label.
const TIER_LABEL: &str = "tenant.kubenexus.io/tier";
/// The other sample policies whose cluster-scoped objects must apply whole (each exercises other Kueue fields).
const MORE_SAMPLES: [&str; 7] = ["org-tree", "shared-quota", "spot-mix", "tenant-sharing", "topology", "dra", "fleet"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readmes_render_pipeline_is_accepted_by_the_clusters_api_server() {
    let Some(binary) = std::env::var_os(BINARY_ENV).map(PathBuf::from).filter(|binary| binary.is_file()) else {
        skip(TEST, &format!("{BINARY_ENV} names no tiergate binary (tests/run.sh builds and names it)"));
        return;
    };
    let scenario = async |client: &Client, cleanup: &Cleanup| {
        if !kueue_served_or_skip(client, TEST).await {
            return Ok(());
        }
        install_tierpolicy_crd(client, cleanup).await?;
        let (gold, bronze) = (random_name("e2e-render-gold"), random_name("e2e-render-bronze"));
        create_namespace(client, cleanup, &gold, &[(TIER_LABEL, "gold")]).await?;
        create_namespace(client, cleanup, &bronze, &[(TIER_LABEL, "bronze")]).await?;
        let view = tempfile::NamedTempFile::new()?;
        std::fs::write(view.path(), cluster_view(&[(&gold, "gold"), (&bronze, "bronze")]))?;
        let kubeconfig = std::env::var_os("KUBECONFIG").map(PathBuf::from).ok_or("KUBECONFIG is not set")?;
        let mut targets = vec![vec!["--kubeconfig".to_owned(), kubeconfig.display().to_string()]];
        if let Ok(version) = std::env::var(KUBERNETES_VERSION_ENV) {
            targets.push(vec!["--kubernetes-version".to_owned(), version]);
        }
        let discovery = Discovery::new(client.clone()).run().await?;
        let kubenexus = repository_file("samples/kubenexus/policy.yaml")?;
        for target in targets {
            let objects = render(&binary, &kubenexus, Some(view.path()), &target)?;
            let mutating = objects.iter().filter(|object| kind_of(object) == "MutatingAdmissionPolicy").count();
            println!(
                "render_apply: render {} wrote {} objects, {mutating} MutatingAdmissionPolicies",
                target.join(" "),
                objects.len()
            );
            for object in &objects {
                dry_run_apply(client, &discovery, object).await.map_err(|error| {
                    format!(
                        "render {}: the API server refused {} {}: {error}",
                        target.join(" "),
                        kind_of(object),
                        object.name_any()
                    )
                })?;
            }
        }
        let kubeconfig = ["--kubeconfig".to_owned(), kubeconfig.display().to_string()];
        for sample in MORE_SAMPLES {
            let policy = repository_file(&format!("samples/{sample}/policy.yaml"))?;
            let objects = render(&binary, &policy, None, &kubeconfig)?;
            let mut applied = 0;
            for object in objects.iter().filter(|object| object.namespace().is_none()) {
                if discovery_lacks(&discovery, object) {
                    println!("render_apply: {sample}: {} is not served here; not applied", kind_of(object));
                    continue;
                }
                dry_run_apply(client, &discovery, object).await.map_err(|error| {
                    format!(
                        "samples/{sample}: the API server refused {} {}: {error}",
                        kind_of(object),
                        object.name_any()
                    )
                })?;
                applied += 1;
            }
            println!("render_apply: samples/{sample}: {applied} cluster-scoped objects applied whole (dry run)");
        }
        check_reports_what_is_served(&binary, client, &kubenexus, &kubeconfig).await
    };
    if let Err(error) = run_cluster_test(TEST, scenario).await {
        panic!("{error}");
    }
}

/// A `kubectl get ns -o yaml`-style view of `namespaces` (name, tier), the cluster `render` translates.
fn cluster_view(namespaces: &[(&str, &str)]) -> String {
    let items: Vec<serde_json::Value> = namespaces
        .iter()
        .map(|(name, tier)| {
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": {TIER_LABEL: tier, "kubernetes.io/metadata.name": name}}})
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// `tiergate check --kubeconfig` of the kubenexus sample (with its nodepools file, as a cluster without nodes has no
/// live pool) must report the in-server gate's halves as discovery lists them, and every Kueue object kept whole.
async fn check_reports_what_is_served(
    binary: &Path,
    client: &Client,
    policy: &Path,
    kubeconfig: &[String],
) -> Result<(), HarnessError> {
    let nodepools = repository_file("samples/kubenexus/nodepools.yaml")?;
    let output = Command::new(binary)
        .arg("check")
        .arg("--policy")
        .arg(policy)
        .arg("--nodepools")
        .arg(&nodepools)
        .args(kubeconfig)
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let served = client.list_api_group_resources("admissionregistration.k8s.io/v1").await?;
    let mutating = served.resources.iter().any(|resource| resource.name == "mutatingadmissionpolicies");
    let gate = if mutating {
        "  ok   in-server gate: ValidatingAdmissionPolicy and MutatingAdmissionPolicy served (both halves)"
    } else {
        "  note in-server gate: validating half only"
    };
    let kept = "  ok   Kueue objects: the installed CRDs keep every field of the";
    if !text.contains("What this cluster serves of the policy:") || !text.contains(gate) || !text.contains(kept) {
        return Err(format!(
            "tiergate check --kubeconfig should report {gate:?} and {kept:?}; it wrote:\n{text}{}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    println!("render_apply: tiergate check --kubeconfig reports what is served:\n{text}");
    Ok(())
}

/// Whether the API server serves no resource for `object`'s kind (DRA's DeviceClass before 1.34).
fn discovery_lacks(discovery: &Discovery, object: &DynamicObject) -> bool {
    let Some(types) = object.types.as_ref() else { return false };
    let (group, version) = types.api_version.split_once('/').unwrap_or(("", types.api_version.as_str()));
    discovery.resolve_gvk(&kube::api::GroupVersionKind::gvk(group, version, &types.kind)).is_none()
}

/// `tiergate render` of `policy` (over `view` when given), for `target`, parsed from its JSON List.
fn render(
    binary: &Path,
    policy: &Path,
    view: Option<&Path>,
    target: &[String],
) -> Result<Vec<DynamicObject>, HarnessError> {
    let mut command = Command::new(binary);
    command.arg("render").arg("--policy").arg(policy);
    if let Some(view) = view {
        command.arg("--cluster").arg(view);
    }
    let output = command.args(["--output", "json"]).args(target).output()?;
    if !output.status.success() {
        return Err(format!(
            "tiergate render {} failed: {}",
            target.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let list: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    // A fleet's render is the management cluster's List and one per worker; the management one is applied here.
    let list = list.get("management").unwrap_or(&list);
    let items = list["items"].as_array().ok_or("render --output json wrote no List")?;
    Ok(items.iter().map(|item| serde_json::from_value(item.clone())).collect::<Result<_, _>>()?)
}

fn kind_of(object: &DynamicObject) -> String {
    object.types.as_ref().map(|types| types.kind.clone()).unwrap_or_default()
}

/// A server-side apply of `object` with `dryRun=All`: every admission step and schema check, nothing stored. The
/// answer must hold every field sent: a field the installed CRD does not know is pruned without an error.
async fn dry_run_apply(client: &Client, discovery: &Discovery, object: &DynamicObject) -> Result<(), HarnessError> {
    let types = object.types.as_ref().ok_or("an object without apiVersion and kind")?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", types.api_version.as_str()),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, capabilities) =
        discovery.resolve_gvk(&gvk).ok_or_else(|| format!("{} {} is not served", types.api_version, types.kind))?;
    let api: Api<DynamicObject> = match (&capabilities.scope, object.namespace()) {
        (kube::discovery::Scope::Namespaced, Some(namespace)) => {
            Api::namespaced_with(client.clone(), &namespace, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply("tiergate-e2e-render").force().dry_run();
    let returned = api.patch(&object.name_any(), &params, &Patch::Apply(object)).await?;
    let dropped = build_missing_paths(&object.data, &returned.data);
    if dropped.is_empty() {
        Ok(())
    } else {
        Err(format!("the installed CRD dropped {} (the answer lacks them)", dropped.join(", ")).into())
    }
}
