//! The admission server over real TLS on loopback: answers, HTTP errors, limits, certificate reload under load and
//! graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use support::*;

/// Certificates, a server on a temp dir of kubelet-style symlinked files, and clients (a `cfg(test)` module so the
/// test lints apply).
#[cfg(test)]
mod support {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use arc_swap::ArcSwap;
    use base64::Engine as _;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    use tempfile::TempDir;
    use tiergate::admission::build_static_snapshot;
    use tiergate::admission::server::{AdmissionState, serve_webhook_on};
    use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
    use tiergate::metrics::Metrics;
    use tokio_util::sync::CancellationToken;

    /// A CA and a serving certificate for localhost signed by it.
    pub struct Pki {
        pub ca_pem: String,
        pub cert_pem: String,
        pub key_pem: String,
    }

    pub fn pki() -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        Pki { ca_pem: ca.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    /// A running webhook.
    pub struct Server {
        pub url: String,
        pub dir: TempDir,
        pub metrics: Arc<Metrics>,
        pub shutdown: CancellationToken,
        pub task: tokio::task::JoinHandle<Result<(), tiergate::admission::server::ServeError>>,
        generation: std::sync::atomic::AtomicUsize,
    }

    impl Server {
        /// Swaps the served files the way kubelet updates a mounted Secret: a new directory, then one atomic
        /// rename of the `..data` symlink.
        pub fn rotate(&self, pki: &Pki) {
            let generation = self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let data = write_generation(self.dir.path(), generation, pki);
            let staged = self.dir.path().join("..data_tmp");
            std::os::unix::fs::symlink(data.file_name().unwrap(), &staged).unwrap();
            std::fs::rename(&staged, self.dir.path().join("..data")).unwrap();
        }
    }

    fn write_generation(dir: &Path, generation: usize, pki: &Pki) -> PathBuf {
        let data = dir.join(format!("..data-{generation}"));
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("tls.crt"), &pki.cert_pem).unwrap();
        std::fs::write(data.join("tls.key"), &pki.key_pem).unwrap();
        data
    }

    pub async fn start(pki: &Pki, synced: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let data = write_generation(dir.path(), 0, pki);
        std::os::unix::fs::symlink(data.file_name().unwrap(), dir.path().join("..data")).unwrap();
        for file in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{file}"), dir.path().join(file)).unwrap();
        }
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        let mut snapshot = build_static_snapshot(load_policy(None).unwrap(), view, None);
        snapshot.synced = synced;
        let metrics = Arc::new(Metrics::new());
        let state = AdmissionState {
            snapshot: Arc::new(ArcSwap::from_pointee(snapshot)),
            scorer: Arc::default(),
            ledger: Arc::default(),
            metrics: metrics.clone(),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("https://localhost:{}", listener.local_addr().unwrap().port());
        let shutdown = CancellationToken::new();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let token = shutdown.clone();
        let task = tokio::spawn(async move { serve_webhook_on(listener, &cert, &key, state, token).await });
        let server = Server { url, dir, metrics, shutdown, task, generation: Default::default() };
        wait_until_serving(&server, pki).await;
        server
    }

    async fn wait_until_serving(server: &Server, pki: &Pki) {
        let client = client(&[pki], true, None);
        for _ in 0..200 {
            if client.get(format!("{}/mutate", server.url)).send().await.is_ok() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("webhook did not start");
    }

    /// A client trusting `cas`; `fresh` opens a new TLS connection per request.
    pub fn client(
        cas: &[&Pki],
        fresh: bool,
        version: Option<&'static rustls::SupportedProtocolVersion>,
    ) -> reqwest::Client {
        client_with_alpn(cas, fresh, version, Vec::new())
    }

    /// A client offering `alpn` (e.g. `h2`, as the API server's Go client does).
    pub fn client_with_alpn(
        cas: &[&Pki],
        fresh: bool,
        version: Option<&'static rustls::SupportedProtocolVersion>,
        alpn: Vec<Vec<u8>>,
    ) -> reqwest::Client {
        let mut roots = rustls::RootCertStore::empty();
        for pki in cas {
            roots.add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap()).unwrap();
        }
        let versions = version.map_or_else(|| rustls::DEFAULT_VERSIONS.to_vec(), |version| vec![version]);
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut tls = tls;
        tls.alpn_protocols = alpn;
        let builder = reqwest::Client::builder().tls_backend_preconfigured(tls);
        let builder = if fresh { builder.pool_max_idle_per_host(0) } else { builder };
        builder.build().unwrap()
    }

    pub fn fixture(name: &str) -> Vec<u8> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = [root.join("../shared/fixtures/admission"), root.join("../../shared/fixtures/admission")]
            .into_iter()
            .find(|dir| dir.is_dir())
            .unwrap();
        std::fs::read(dir.join(name)).unwrap()
    }

    /// The parts of an AdmissionReview answer the tests look at, read from the wire JSON.
    #[derive(Debug)]
    pub struct Answer {
        pub uid: String,
        pub allowed: bool,
        pub code: u64,
        pub message: String,
        pub patch: Option<json_patch::Patch>,
        pub warnings: Vec<String>,
    }

    pub async fn post_review(client: &reqwest::Client, server: &Server, body: Vec<u8>) -> reqwest::Result<Answer> {
        let response = client
            .post(format!("{}/mutate", server.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?
            .error_for_status()?;
        let review: serde_json::Value = response.json().await?;
        let answer = &review["response"];
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        let patch = answer["patch"].as_str().map(|patch| {
            assert_eq!(answer["patchType"], "JSONPatch");
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch).unwrap()).unwrap()
        });
        Ok(Answer {
            uid: answer["uid"].as_str().unwrap().to_owned(),
            allowed: answer["allowed"].as_bool().unwrap(),
            code: answer["status"]["code"].as_u64().unwrap_or_default(),
            message: answer["status"]["message"].as_str().unwrap_or_default().to_owned(),
            patch,
            warnings: serde_json::from_value(answer["warnings"].clone()).unwrap_or_default(),
        })
    }
}

#[tokio::test]
async fn valid_review_gets_the_bronze_patch_over_tls() {
    let pki = pki();
    let server = start(&pki, true).await;
    let response = post_review(&client(&[&pki], false, None), &server, fixture("job-create-bronze-gpu-scored.json"))
        .await
        .unwrap();
    assert!(response.allowed);
    assert_eq!(response.uid, "8e0e7a8b-014d-4461-b2a6-f236c413a5e4");
    let patch = response.patch.unwrap();
    let review: serde_json::Value = serde_json::from_slice(&fixture("job-create-bronze-gpu-scored.json")).unwrap();
    let mut job = review["request"]["object"].clone();
    json_patch::patch(&mut job, &patch).unwrap();
    assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-bronze");
    assert_eq!(job["spec"]["suspend"], true);
    assert_eq!(job["spec"]["template"]["spec"]["nodeSelector"]["gpu.nvidia.com/class"], "l4");
}

#[tokio::test]
async fn denial_names_the_tier_and_counts_a_denial() {
    let pki = pki();
    let server = start(&pki, true).await;
    let body = fixture("pod-create-bronze-user-override-a100.json");
    let response = post_review(&client(&[&pki], false, None), &server, body).await.unwrap();
    assert!(!response.allowed);
    assert!(response.message.contains("tier bronze"), "{}", response.message);
    let metrics = server.metrics.encode().unwrap();
    assert!(metrics.contains(r#"tiergate_admission_denials_total{reason="foreign_gpu_class"} 1"#), "{metrics}");
}

#[tokio::test]
async fn tls12_only_clients_are_served_too() {
    let pki = pki();
    let server = start(&pki, true).await;
    let client = client(&[&pki], true, Some(&rustls::version::TLS12));
    let response = post_review(&client, &server, fixture("pod-create-kube-system.json")).await.unwrap();
    assert!(response.allowed);
}

#[tokio::test]
async fn http2_clients_are_served_like_the_api_server() {
    let pki = pki();
    let server = start(&pki, true).await;
    let client = client_with_alpn(&[&pki], false, None, vec![b"h2".to_vec()]);
    let response = client
        .post(format!("{}/mutate", server.url))
        .header("content-type", "application/json")
        .body(fixture("job-create-gold-8gpu-suspended.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    let review: serde_json::Value = response.json().await.unwrap();
    assert_eq!(review["response"]["allowed"], true);
    assert_eq!(review["response"]["patchType"], "JSONPatch");
}

#[tokio::test]
async fn malformed_body_gets_an_invalid_review_not_a_server_error() {
    let pki = pki();
    let server = start(&pki, true).await;
    let client = client(&[&pki], false, None);
    let response = post_review(&client, &server, b"{\"kind\": \"AdmissionReview\", oops".to_vec()).await.unwrap();
    assert!(!response.allowed);
    assert_eq!(response.code, 400);
    assert!(response.message.contains("failed to parse the body as JSON"), "{}", response.message);

    let wrong_version =
        br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u-7"}}"#;
    let response = post_review(&client, &server, wrong_version.to_vec()).await.unwrap();
    assert_eq!((response.allowed, response.uid.as_str()), (false, "u-7"));
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let pki = pki();
    let server = start(&pki, true).await;
    let response = client(&[&pki], false, None)
        .post(format!("{}/mutate", server.url))
        .header("content-type", "text/plain")
        .body(fixture("pod-create-kube-system.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let pki = pki();
    let server = start(&pki, true).await;
    let huge = vec![b' '; tiergate::admission::server::MAX_BODY_BYTES + 1];
    let response = client(&[&pki], true, None)
        .post(format!("{}/mutate", server.url))
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
}

#[tokio::test]
async fn other_methods_and_paths_are_405_and_404() {
    let pki = pki();
    let server = start(&pki, true).await;
    let client = client(&[&pki], false, None);
    assert_eq!(client.get(format!("{}/mutate", server.url)).send().await.unwrap().status(), 405);
    let other = client.post(format!("{}/validate", server.url)).header("content-type", "application/json");
    assert_eq!(other.body("{}").send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn unsynced_caches_fail_open_with_a_warning() {
    let pki = pki();
    let server = start(&pki, false).await;
    let body = fixture("pod-create-bronze-user-override-a100.json");
    let response = post_review(&client(&[&pki], false, None), &server, body).await.unwrap();
    assert!(response.allowed);
    assert!(response.patch.is_none());
    assert!(response.warnings.iter().any(|warning| warning.contains("have not synced")));
    let metrics = server.metrics.encode().unwrap();
    assert!(metrics.contains(r#"tiergate_admission_fail_open_total{reason="not_synced"} 1"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_reload_under_concurrent_requests_has_zero_failures() {
    let (old, new) = (pki(), pki());
    let server = Arc::new(start(&old, true).await);
    let stop = Arc::new(AtomicBool::new(false));
    let (succeeded, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let client = client(&[&old, &new], worker % 2 == 0, None);
        let (server, stop, succeeded, failed) = (server.clone(), stop.clone(), succeeded.clone(), failed.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match post_review(&client, &server, fixture("job-create-bronze-gpu-scored.json")).await {
                    Ok(response) if response.allowed => succeeded.fetch_add(1, Ordering::SeqCst),
                    _ => failed.fetch_add(1, Ordering::SeqCst),
                };
            }
        }));
    }
    let before = succeeded.load(Ordering::SeqCst);
    server.rotate(&new);
    let only_new = client(&[&new], true, None);
    let mut served_new = false;
    for _ in 0..400 {
        if post_review(&only_new, &server, fixture("pod-create-kube-system.json")).await.is_ok() {
            served_new = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Keep the load running a little past the switch so requests on connections from both certificates overlap.
    let switched = succeeded.load(Ordering::SeqCst);
    while succeeded.load(Ordering::SeqCst) < switched + 50 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }
    assert!(served_new, "the new certificate was never served");
    assert!(switched > before, "no requests ran during the reload");
    assert_eq!(failed.load(Ordering::SeqCst), 0, "requests failed during the reload");
    let metrics = server.metrics.encode().unwrap();
    assert!(metrics.contains(r#"tiergate_certificate_reloads_total{reason="reloaded"} 1"#), "{metrics}");
    let expiry: i64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("tiergate_certificate_expiry_timestamp_seconds "))
        .and_then(|value| value.parse().ok())
        .unwrap_or_default();
    assert!(expiry > 1_700_000_000, "expiry metric not set from the certificate: {expiry}");
}

#[tokio::test]
async fn shutdown_drains_and_the_server_returns_ok() {
    let pki = pki();
    let server = start(&pki, true).await;
    let response = post_review(&client(&[&pki], false, None), &server, fixture("pod-create-kube-system.json")).await;
    assert!(response.unwrap().allowed);
    server.shutdown.cancel();
    assert!(server.task.await.unwrap().is_ok());
}
