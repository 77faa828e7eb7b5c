//! The admission server over real TLS on loopback: answers, HTTP errors, limits, certificate reload under load and
//! graceful shutdown.
#![cfg(test)]

mod webhook_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use webhook_support::*;

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
    // Issue 52: the pod template's edits travel as one `replace /spec` (admission::fold), cheaper for the API
    // server to apply; nothing else under /spec is sent.
    let spec_paths: Vec<String> =
        patch.0.iter().map(|op| op.path().to_string()).filter(|path| path.starts_with("/spec")).collect();
    assert_eq!(spec_paths, ["/spec"]);
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
