//! Faults around the real webhook: SIGTERM under load against the built binary, and a dead scheduler agent. Certificate
//! rotation under load is `certificate_reload_under_concurrent_requests_has_zero_failures` in webhook_http.rs. The
//! outcomes are documented in docs/admission.md ("Fault behaviour").
#![cfg(test)]

mod webhook_support;

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tiergate::admission::build_static_snapshot;
use tiergate::admission::server::DECISION_TIMEOUT;
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::scoring::FALLBACK_REASON_ANNOTATION;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use webhook_support::*;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `tiergate webhook --offline` on the sample policy and cluster with a generated certificate; returns the child
/// and the generated CA (PEM).
fn spawn_webhook(port: u16, admin_port: u16) -> (Child, String) {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiergate"))
        .args(["webhook", "--offline", "--log-format", "text"])
        .arg("--policy")
        .arg(repo.join("samples/kubenexus/policy.yaml"))
        .arg("--cluster")
        .arg(repo.join("samples/kubenexus/cluster.yaml"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    // "self-signed certificate: CERT (key KEY, CA CA)"
    let ca = line.trim().rsplit_once("CA ").unwrap().1.trim_end_matches(')');
    (child, std::fs::read_to_string(ca).unwrap())
}

async fn readyz(admin_port: u16) -> Option<u16> {
    // reqwest is built without a default TLS provider, even for plain HTTP.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new().get(format!("http://127.0.0.1:{admin_port}/readyz")).send().await;
    response.ok().map(|response| response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_drops_readiness_finishes_in_flight_requests_and_exits_zero() {
    let (port, admin_port) = (free_port(), free_port());
    let (mut child, ca_pem) = spawn_webhook(port, admin_port);
    let probe = client_trusting(&ca_pem);
    let mut serving = false;
    for _ in 0..200 {
        if probe.get(format!("https://localhost:{port}/mutate")).send().await.is_ok() {
            serving = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(serving, "the webhook never started serving");
    assert_eq!(readyz(admin_port).await, Some(200), "/readyz must be 200 while serving from a static snapshot");
    let url = format!("https://localhost:{port}/mutate");

    // Load: keep-alive clients posting the bronze Job until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, wrong) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let client = client_trusting(&ca_pem);
        let (url, stop, answered, wrong) = (url.clone(), stop.clone(), answered.clone(), wrong.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let sent = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(fixture("job-create-bronze-gpu-scored.json"))
                    .send()
                    .await;
                match sent {
                    // Refused or closed connections are expected once the listener closes; an HTTP answer must be
                    // a complete, allowed review.
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    Ok(response) => {
                        let review: Option<serde_json::Value> = response.json().await.ok();
                        let allowed = review.is_some_and(|review| review["response"]["allowed"] == true);
                        let counter = if allowed { &answered } else { &wrong };
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    while answered.load(Ordering::SeqCst) < 50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // An in-flight request: headers and half the body sent before SIGTERM, the rest after.
    let body = fixture("job-create-bronze-gpu-scored.json");
    let (first, rest) = body.split_at(body.len() / 2);
    let mut in_flight = raw_tls_at(port, &ca_pem).await;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    in_flight.write_all(first).await.unwrap();
    in_flight.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let mut readiness_dropped = false;
    for _ in 0..100 {
        if readyz(admin_port).await != Some(200) {
            readiness_dropped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    in_flight.write_all(rest).await.unwrap();
    in_flight.flush().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), in_flight.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);

    let exited = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }

    assert!(readiness_dropped, "/readyz still answered 200 after SIGTERM");
    assert!(answer.starts_with("HTTP/1.1 200"), "the in-flight request did not finish: {answer}");
    assert!(answer.contains(r#""allowed":true"#), "{answer}");
    assert_eq!(wrong.load(Ordering::SeqCst), 0, "an answer during shutdown was not a complete allowed review");
    let exited = exited.expect("the webhook did not exit after SIGTERM");
    assert!(exited.success(), "the webhook exited with {exited}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_scheduler_agent_falls_back_within_the_decision_budget() {
    // Two kinds of dead: a closed port (refused at once) and a listener that never accepts (calls time out).
    let closed = free_port();
    let black_hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let black_hole_port = black_hole.local_addr().unwrap().port();
    for port in [closed, black_hole_port] {
        let mut policy = load_policy(None).unwrap();
        policy.spec.scoring.url = Some(format!("http://127.0.0.1:{port}"));
        policy.spec.scoring.timeout_ms = 300;
        policy.spec.scoring.cache_ttl_ms = 0;
        let snapshot = build_static_snapshot(policy, parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap(), None);
        let pki = pki();
        let server = start_with(&pki, snapshot).await;
        let client = client(&[&pki], false, None);
        for _ in 0..8 {
            let started = Instant::now();
            let answer = post_review(&client, &server, fixture("job-create-bronze-gpu-scored.json")).await.unwrap();
            let took = started.elapsed();
            // Correctness, not speed: the answer comes before the webhook's own decision deadline (and so before
            // the API server's timeout), admitted with the tier's default priority.
            assert!(took < DECISION_TIMEOUT, "answer took {took:?} with the agent on port {port} dead");
            assert!(answer.allowed, "{answer:?}");
            let review: serde_json::Value =
                serde_json::from_slice(&fixture("job-create-bronze-gpu-scored.json")).unwrap();
            let mut job = review["request"]["object"].clone();
            json_patch::patch(&mut job, &answer.patch.unwrap()).unwrap();
            assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "tiergate-bronze");
            assert!(
                job["metadata"]["annotations"][FALLBACK_REASON_ANNOTATION].is_string(),
                "no fallback annotation: {}",
                job["metadata"]["annotations"]
            );
        }
    }
    drop(black_hole);
}
