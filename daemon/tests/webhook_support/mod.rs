//! Shared by the webhook's HTTP, bad-input and fault suites: certificates, a server on a temp dir of kubelet-style
//! symlinked files, reqwest clients and a raw TLS connection for what reqwest cannot send; does I/O.
#![allow(dead_code)] // each test binary uses a different subset
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
use tiergate::view::Snapshot;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
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

/// The sample policy and cluster; `synced: false` as before the caches sync.
pub async fn start(pki: &Pki, synced: bool) -> Server {
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
    let mut snapshot = build_static_snapshot(load_policy(None).unwrap(), view, None);
    snapshot.synced = synced;
    start_with(pki, snapshot).await
}

/// A webhook deciding from `snapshot` (e.g. a policy whose scheduler agent is down).
pub async fn start_with(pki: &Pki, snapshot: Snapshot) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let data = write_generation(dir.path(), 0, pki);
    std::os::unix::fs::symlink(data.file_name().unwrap(), dir.path().join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{file}"), dir.path().join(file)).unwrap();
    }
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

/// A TLS connection to the server for bytes reqwest will not send (slow headers, lying lengths).
pub async fn raw_tls(server: &Server, pki: &Pki) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let port = server.url.trim_start_matches("https://localhost:").parse().unwrap();
    raw_tls_at(port, &pki.ca_pem).await
}

/// A TLS connection to `127.0.0.1:port` (as `localhost`) trusting the CA `ca_pem`.
pub async fn raw_tls_at(port: u16, ca_pem: &str) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
}

/// A reqwest client trusting the PEM CA `ca_pem` (for a server this process did not start).
pub fn client_trusting(ca_pem: &str) -> reqwest::Client {
    let pki = Pki { ca_pem: ca_pem.to_owned(), cert_pem: String::new(), key_pem: String::new() };
    client(&[&pki], false, None)
}

/// Writes `request` on a fresh TLS connection and reads the answer until the server closes or `limit` passes;
/// returns the HTTP status line's code and the whole answer.
pub async fn raw_exchange(server: &Server, pki: &Pki, request: &[u8], limit: std::time::Duration) -> (u16, String) {
    let mut stream = raw_tls(server, pki).await;
    stream.write_all(request).await.unwrap();
    stream.flush().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(limit, stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or_default();
    (status, answer)
}
