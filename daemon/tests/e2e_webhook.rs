//! End-to-end against a real API server (cluster-gated, `--ignored`): the webhook runs in this process, is
//! registered with a URL client config, and the sample workloads are created with server-side dry-run, so the
//! answers are the stored objects the API server would keep, without Kueue or GPU nodes.
//!
//! ```bash
//! TIERGATE_E2E_WEBHOOK_HOST=172.18.0.1 cargo test -p tiergate --test e2e_webhook -- --ignored
//! ```
//! `TIERGATE_E2E_WEBHOOK_HOST` is an address of this machine the API server can reach (kind: the docker bridge
//! gateway); `TIERGATE_E2E_WEBHOOK_PORT` defaults to 9443; the cluster comes from `KUBECONFIG`.

use support::*;

/// Cluster setup and teardown (a `cfg(test)` module so the test lints apply).
#[cfg(test)]
mod support {
    pub use std::sync::Arc;
    pub use std::time::Duration;

    pub use arc_swap::ArcSwap;
    pub use k8s_openapi::ByteString;
    pub use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
    };
    pub use k8s_openapi::api::batch::v1::Job;
    pub use k8s_openapi::api::core::v1::{Namespace, Pod};
    pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    pub use kube::Client;
    pub use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
    pub use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    pub use tiergate::admission::build_static_snapshot;
    pub use tiergate::admission::server::{AdmissionState, WebhookConfig, serve_webhook};
    pub use tiergate::inputs::load_policy;
    pub use tiergate::metrics::Metrics;
    pub use tiergate::view::{ClusterView, NamespaceView};
    pub use tokio_util::sync::CancellationToken;

    pub const BRONZE: &str = "tiergate-e2e-bronze";
    pub const GOLD: &str = "tiergate-e2e-gold";
    pub const WEBHOOK_CONFIG: &str = "tiergate-e2e";
    pub const E2E_LABEL: &str = "tiergate.io/e2e";

    pub fn namespace_labels(tier: &str) -> std::collections::BTreeMap<String, String> {
        [("tenant.kubenexus.io/tier", tier), (E2E_LABEL, "true")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect()
    }

    /// Starts the webhook for the e2e namespaces; returns the CA PEM and the shutdown token.
    pub async fn start_webhook(host: &str, port: u16, dir: &std::path::Path) -> (String, CancellationToken) {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![host.to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
        let (tls_cert, tls_key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&tls_cert, cert.pem()).unwrap();
        std::fs::write(&tls_key, key.serialize_pem()).unwrap();
        let view = ClusterView {
            namespaces: [(BRONZE, "bronze"), (GOLD, "gold")]
                .into_iter()
                .map(|(name, tier)| NamespaceView { name: name.to_owned(), labels: namespace_labels(tier) })
                .collect(),
            nodes: Vec::new(),
        };
        let state = AdmissionState {
            snapshot: Arc::new(ArcSwap::from_pointee(build_static_snapshot(load_policy(None).unwrap(), view, None))),
            scorer: Arc::default(),
            ledger: Arc::default(),
            metrics: Arc::new(Metrics::new()),
        };
        let shutdown = CancellationToken::new();
        let config = WebhookConfig { listen: ([0, 0, 0, 0], port).into(), tls_cert, tls_key };
        tokio::spawn(serve_webhook(config, state, shutdown.clone()));
        (ca.pem(), shutdown)
    }

    pub async fn register(client: &Client, host: &str, port: u16, ca_pem: &str) {
        let rule = |group: &str, resource: &str| RuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec!["v1".to_owned()]),
            operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
            resources: Some(vec![resource.to_owned()]),
            scope: Some("Namespaced".to_owned()),
        };
        let config = MutatingWebhookConfiguration {
            metadata: ObjectMeta { name: Some(WEBHOOK_CONFIG.to_owned()), ..ObjectMeta::default() },
            webhooks: Some(vec![MutatingWebhook {
                name: "mutate.tiergate.io".to_owned(),
                admission_review_versions: vec!["v1".to_owned()],
                side_effects: "None".to_owned(),
                failure_policy: Some("Fail".to_owned()),
                timeout_seconds: Some(10),
                client_config: WebhookClientConfig {
                    url: Some(format!("https://{host}:{port}/mutate")),
                    ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
                    service: None,
                },
                namespace_selector: Some(LabelSelector {
                    match_labels: Some([(E2E_LABEL.to_owned(), "true".to_owned())].into()),
                    ..LabelSelector::default()
                }),
                rules: Some(vec![
                    rule("", "pods"),
                    rule("batch", "jobs"),
                    rule("apps", "deployments"),
                    rule("apps", "statefulsets"),
                ]),
                ..MutatingWebhook::default()
            }]),
        };
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let _ = api.delete(WEBHOOK_CONFIG, &DeleteParams::default()).await;
        api.create(&PostParams::default(), &config).await.unwrap();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for (name, tier) in [(BRONZE, "bronze"), (GOLD, "gold")] {
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some(namespace_labels(tier)),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            match namespaces.create(&PostParams::default(), &namespace).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => panic!("failed to create namespace {name}: {error}"),
            }
        }
    }

    pub async fn cleanup(client: &Client) {
        let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(WEBHOOK_CONFIG, &DeleteParams::default())
            .await;
        for name in [BRONZE, GOLD] {
            let _ = Api::<Namespace>::all(client.clone()).delete(name, &DeleteParams::default()).await;
        }
    }

    pub fn workload<T: serde::de::DeserializeOwned>(file: &str, namespace: &str) -> T {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = [root.join("../shared/fixtures/workloads"), root.join("../../shared/fixtures/workloads")]
            .into_iter()
            .find(|dir| dir.is_dir())
            .unwrap();
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let mut value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        value["metadata"]["namespace"] = namespace.into();
        serde_json::from_value(value).unwrap()
    }

    pub fn dry_run() -> PostParams {
        PostParams { dry_run: true, ..PostParams::default() }
    }
}

#[tokio::test]
#[ignore = "needs a cluster: set TIERGATE_E2E_WEBHOOK_HOST (and KUBECONFIG), run with --ignored"]
async fn sample_workloads_are_mutated_and_bronze_cannot_get_a_gold_class_gpu() {
    let host = std::env::var("TIERGATE_E2E_WEBHOOK_HOST").expect("TIERGATE_E2E_WEBHOOK_HOST");
    let port: u16 = std::env::var("TIERGATE_E2E_WEBHOOK_PORT").ok().and_then(|port| port.parse().ok()).unwrap_or(9443);
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, shutdown) = start_webhook(&host, port, dir.path()).await;
    let client = Client::try_default().await.unwrap();
    register(&client, &host, port, &ca_pem).await;

    // The API server picks up a new webhook configuration within seconds; retry until the Job is mutated.
    let jobs: Api<Job> = Api::namespaced(client.clone(), BRONZE);
    let mut stored = None;
    for _ in 0..60 {
        let job = jobs.create(&dry_run(), &workload::<Job>("job-bronze.yaml", BRONZE)).await.unwrap();
        if job.metadata.labels.as_ref().is_some_and(|labels| labels.contains_key("kueue.x-k8s.io/queue-name")) {
            stored = Some(job);
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let job = stored.expect("the Job was never mutated: is the webhook reachable from the API server?");
    let labels = job.metadata.labels.unwrap_or_default();
    assert_eq!(labels["kueue.x-k8s.io/queue-name"], "tiergate-bronze");
    let spec = job.spec.unwrap();
    assert_eq!(spec.suspend, Some(true));
    let pod_spec = spec.template.spec.unwrap();
    assert_eq!(pod_spec.node_selector.unwrap()["gpu.nvidia.com/class"], "l4");
    assert_eq!(job.metadata.annotations.unwrap_or_default()["tiergate.io/tier"], "bronze");

    let gold: Api<Job> = Api::namespaced(client.clone(), GOLD);
    let gold_job = gold.create(&dry_run(), &workload::<Job>("job-gold.yaml", GOLD)).await.unwrap();
    assert_eq!(gold_job.spec.unwrap().template.spec.unwrap().node_selector.unwrap()["gpu.nvidia.com/class"], "h100");

    let pods: Api<Pod> = Api::namespaced(client.clone(), BRONZE);
    let mut override_pod: Pod = workload("pod-override.yaml", BRONZE);
    override_pod.spec.as_mut().unwrap().node_selector =
        Some([("gpu.nvidia.com/class".to_owned(), "h100".to_owned())].into());
    let denied = pods.create(&dry_run(), &override_pod).await.unwrap_err();
    assert!(denied.to_string().contains("tier bronze"), "{denied}");

    cleanup(&client).await;
    shutdown.cancel();
}
