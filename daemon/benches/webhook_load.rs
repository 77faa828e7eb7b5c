//! Loopback HTTPS load test of the webhook with the recorded fixtures: keep-alive with 8 connections and with 1,
//! and a new TLS connection per request; then ~1 MiB and ~1.4 MiB Jobs of long env lists in turn over 8 keep-alive
//! connections (issue 15). Prints requests/s and latency percentiles; client and server share the
//! machine, so the numbers are a lower bound. `TIERGATE_LOAD_SECONDS` sets each scenario's length (default 5).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tiergate::admission::build_static_snapshot;
use tiergate::admission::server::{AdmissionState, serve_webhook_on};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::metrics::Metrics;
use tokio_util::sync::CancellationToken;

#[allow(dead_code)]
mod support;

type BenchError = Box<dyn std::error::Error + Send + Sync>;

fn fixtures() -> Result<Vec<Vec<u8>>, BenchError> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dirs = [root.join("../shared/fixtures/admission"), root.join("../../shared/fixtures/admission")];
    let dir = dirs.into_iter().find(|dir| dir.is_dir()).ok_or("shared/fixtures/admission not found")?;
    let mut bodies = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "json") {
            bodies.push(std::fs::read(path)?);
        }
    }
    Ok(bodies)
}

struct Scenario {
    name: &'static str,
    connections: usize,
    fresh: bool,
}

fn client(ca_pem: &str, fresh: bool) -> Result<reqwest::Client, BenchError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes())?)?;
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let builder = reqwest::Client::builder().tls_backend_preconfigured(tls).http1_only();
    let builder = if fresh { builder.pool_max_idle_per_host(0) } else { builder.pool_max_idle_per_host(1) };
    Ok(builder.build()?)
}

async fn run(
    url: &str,
    ca_pem: &str,
    scenario: &Scenario,
    bodies: &Arc<Vec<Vec<u8>>>,
    length: Duration,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + length;
    let mut workers = Vec::new();
    for worker in 0..scenario.connections {
        let client = client(ca_pem, scenario.fresh)?;
        let (url, bodies) = (url.to_owned(), bodies.clone());
        workers.push(tokio::spawn(async move {
            let (mut latencies, mut errors) = (Vec::new(), 0usize);
            let mut index = worker;
            while Instant::now() < deadline {
                let body = bodies[index % bodies.len()].clone();
                index += 1;
                let started = Instant::now();
                let sent = client.post(&url).header("content-type", "application/json").body(body).send().await;
                let ok = match sent {
                    Ok(response) => response.status().is_success() && response.bytes().await.is_ok(),
                    Err(_) => false,
                };
                if ok {
                    latencies.push(started.elapsed());
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }));
    }
    let (mut latencies, mut errors) = (Vec::new(), 0);
    for worker in workers {
        let (worker_latencies, worker_errors) = worker.await?;
        latencies.extend(worker_latencies);
        errors += worker_errors;
    }
    latencies.sort();
    let percentile = |p: f64| {
        let index = ((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
        latencies.get(index).map_or(0.0, |latency| latency.as_secs_f64() * 1000.0)
    };
    println!(
        "{:<34} {:>9.0} req/s  p50 {:>6.3} ms  p99 {:>6.3} ms  max {:>7.3} ms  errors {}",
        scenario.name,
        latencies.len() as f64 / length.as_secs_f64(),
        percentile(0.50),
        percentile(0.99),
        percentile(1.0),
        errors
    );
    Ok(())
}

fn main() -> Result<(), BenchError> {
    let seconds: u64 = std::env::var("TIERGATE_LOAD_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let key = KeyPair::generate()?;
        let cert = CertificateParams::new(vec!["localhost".to_owned()])?.signed_by(&key, &ca)?;
        let dir = tempfile::tempdir()?;
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_path, cert.pem())?;
        std::fs::write(&key_path, key.serialize_pem())?;

        let snapshot = build_static_snapshot(load_policy(None)?, parse_cluster_view(SAMPLE_CLUSTER, "sample")?, None);
        let state = AdmissionState {
            snapshot: Arc::new(ArcSwap::from_pointee(snapshot)),
            scorer: Arc::default(),
            ledger: Arc::default(),
            metrics: Arc::new(Metrics::new()),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("https://localhost:{}/mutate", listener.local_addr()?.port());
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let server = tokio::spawn(async move { serve_webhook_on(listener, &cert_path, &key_path, state, token).await });
        tokio::time::sleep(Duration::from_millis(300)).await;

        let bodies = Arc::new(fixtures()?);
        println!("{} recorded fixtures, {seconds} s per scenario", bodies.len());
        let scenarios = [
            Scenario { name: "keep-alive, 8 connections", connections: 8, fresh: false },
            Scenario { name: "keep-alive, 1 connection", connections: 1, fresh: false },
            Scenario { name: "new TLS connection per request (x8)", connections: 8, fresh: true },
        ];
        for scenario in &scenarios {
            run(&url, &ca.pem(), scenario, &bodies, Duration::from_secs(seconds)).await?;
        }
        let large = Arc::new(vec![support::grown_job(1024 * 1024), support::grown_job(1400 * 1024)]);
        let scenario = Scenario { name: "1 MiB reviews, keep-alive, 8 conn.", connections: 8, fresh: false };
        run(&url, &ca.pem(), &scenario, &large, Duration::from_secs(seconds)).await?;
        shutdown.cancel();
        server.await??;
        Ok(())
    })
}
