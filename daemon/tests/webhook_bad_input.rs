//! Bad input against the running HTTPS server: every case gets a defined answer (HTTP status, review `allowed` and
//! message) and the server keeps serving. The table of outcomes is in docs/admission.md ("Bad input").
#![cfg(test)]

mod webhook_support;

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use webhook_support::*;

/// A recorded review as JSON, for variants.
fn review(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// Asserts the server still answers a valid review (no panic took it down) and its task is still running.
async fn assert_still_serving(server: &Server, pki: &Pki) {
    let client = client(&[pki], true, None);
    let answer = post_review(&client, server, fixture("job-create-bronze-gpu-scored.json")).await.unwrap();
    assert!(answer.allowed && answer.patch.is_some(), "{answer:?}");
    assert!(!server.task.is_finished(), "the server stopped");
}

/// Posts `body` as JSON and returns the review answer (HTTP 200 is asserted by `post_review`).
async fn answer_to(server: &Server, pki: &Pki, body: Vec<u8>) -> Answer {
    post_review(&client(&[pki], false, None), server, body).await.unwrap()
}

#[tokio::test]
async fn an_empty_body_is_an_invalid_review() {
    let pki = pki();
    let server = start(&pki, true).await;
    let answer = answer_to(&server, &pki, Vec::new()).await;
    assert_eq!((answer.allowed, answer.code, answer.uid.as_str()), (false, 400, ""));
    assert!(answer.message.contains("failed to parse the body as JSON"), "{}", answer.message);
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn truncated_json_is_an_invalid_review() {
    let pki = pki();
    let server = start(&pki, true).await;
    let mut body = fixture("job-create-bronze-gpu-scored.json");
    body.truncate(body.len() / 2);
    let answer = answer_to(&server, &pki, body).await;
    assert_eq!((answer.allowed, answer.code), (false, 400));
    assert!(answer.message.contains("EOF while parsing"), "{}", answer.message);
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn a_wrong_api_version_or_kind_is_invalid_and_keeps_the_uid() {
    let pki = pki();
    let server = start(&pki, true).await;
    for (field, value, found) in
        [("apiVersion", "admission.k8s.io/v1beta1", "admission.k8s.io/v1beta1"), ("kind", "ConfigMap", "ConfigMap")]
    {
        let mut body = review("pod-create-kube-system.json");
        body[field] = json!(value);
        let uid = body["request"]["uid"].as_str().unwrap().to_owned();
        let answer = answer_to(&server, &pki, bytes(&body)).await;
        assert_eq!((answer.allowed, answer.code, answer.uid), (false, 400, uid));
        assert!(answer.message.contains(found), "{}", answer.message);
    }
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn a_review_without_request_is_invalid() {
    let pki = pki();
    let server = start(&pki, true).await;
    let answer =
        answer_to(&server, &pki, br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec()).await;
    assert_eq!((answer.allowed, answer.code), (false, 400));
    assert!(answer.message.contains("no `request`"), "{}", answer.message);
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn a_delete_without_object_is_allowed_unchanged() {
    let pki = pki();
    let server = start(&pki, true).await;
    let mut body = review("job-create-bronze-gpu-scored.json");
    body["request"]["oldObject"] = body["request"]["object"].take();
    body["request"]["operation"] = json!("DELETE");
    let answer = answer_to(&server, &pki, bytes(&body)).await;
    assert!(answer.allowed, "{answer:?}");
    assert!(answer.patch.is_none());
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn a_create_without_object_is_refused_as_invalid() {
    let pki = pki();
    let server = start(&pki, true).await;
    let mut body = review("job-create-bronze-gpu-scored.json");
    body["request"]["object"] = Value::Null;
    let answer = answer_to(&server, &pki, bytes(&body)).await;
    assert!(!answer.allowed);
    assert!(answer.message.contains("request.object is missing"), "{}", answer.message);
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn an_unknown_kind_is_allowed_unchanged() {
    let pki = pki();
    let server = start(&pki, true).await;
    let mut body = review("job-create-bronze-gpu-scored.json");
    let gvk = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    body["request"]["kind"] = gvk.clone();
    body["request"]["requestKind"] = gvk;
    body["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "configmaps"});
    body["request"]["object"] = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ml-team-dev"}, "data": {"a": "b"}});
    let answer = answer_to(&server, &pki, bytes(&body)).await;
    assert!(answer.allowed, "{answer:?}");
    assert!(answer.patch.is_none());
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn methods_other_than_post_are_405() {
    let pki = pki();
    let server = start(&pki, true).await;
    let client = client(&[&pki], false, None);
    let url = format!("{}/mutate", server.url);
    for method in [reqwest::Method::GET, reqwest::Method::PUT, reqwest::Method::DELETE, reqwest::Method::PATCH] {
        let response = client.request(method.clone(), &url).header("content-type", "application/json");
        assert_eq!(response.body("{}").send().await.unwrap().status(), 405, "{method}");
    }
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn unknown_paths_are_404() {
    let pki = pki();
    let server = start(&pki, true).await;
    let client = client(&[&pki], false, None);
    for path in ["/", "/validate", "/mutate/extra", "/metrics"] {
        let response = client.post(format!("{}{path}", server.url)).header("content-type", "application/json");
        let response = response.body(fixture("pod-create-kube-system.json")).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_before_the_body_is_sent() {
    let pki = pki();
    let server = start(&pki, true).await;
    // One gigabyte announced, nothing sent: the answer can only come from the headers.
    let request = "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                   Content-Length: 1073741824\r\n\r\n";
    let (status, answer) = raw_exchange(&server, &pki, request.as_bytes(), Duration::from_secs(30)).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer.contains("at most 4194304 bytes"), "{answer}");
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_413_and_reading_stops_at_the_limit() {
    let pki = pki();
    let server = start(&pki, true).await;
    let mut stream = raw_tls(&server, &pki).await;
    let head = "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = [format!("{:x}\r\n", 64 * 1024).into_bytes(), vec![b' '; 64 * 1024], b"\r\n".to_vec()].concat();
    // Offer 64 MiB; the server stops reading at 4 MiB, so the writes stall or fail long before the end.
    let mut sent = 0usize;
    let writing = async {
        for _ in 0..1024 {
            if stream.write_all(&chunk).await.is_err() {
                break;
            }
            sent += chunk.len();
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), writing).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(sent < 64 * 1024 * 1024, "the server read the whole 64 MiB body");
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn json_nested_ten_thousand_deep_is_invalid_without_overflowing_the_stack() {
    let pki = pki();
    let server = start(&pki, true).await;
    for (open, close) in [("[", "]"), (r#"{"a":"#, "}")] {
        let deep = format!("{}{}", open.repeat(10_000), close.repeat(10_000));
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"deep","object":{deep}}}}}"#
        );
        let answer = answer_to(&server, &pki, body.into_bytes()).await;
        assert_eq!((answer.allowed, answer.code), (false, 400));
        assert!(answer.message.contains("recursion limit exceeded"), "{}", answer.message);
    }
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn invalid_utf8_is_an_invalid_review() {
    let pki = pki();
    let server = start(&pki, true).await;
    let body = fixture("job-create-bronze-gpu-scored.json");
    let name = body.windows(6).position(|window| window == b"\"name\"").unwrap();
    let mut body = body;
    body.splice(name + 1..name + 1, [0xff, 0xfe]);
    let answer = answer_to(&server, &pki, body).await;
    assert_eq!((answer.allowed, answer.code), (false, 400));
    assert!(answer.message.contains("invalid unicode code point"), "{}", answer.message);
    assert_still_serving(&server, &pki).await;
}

#[tokio::test]
async fn duplicate_keys_keep_the_last_value_like_go() {
    let pki = pki();
    let server = start(&pki, true).await;
    // Two `request` members: the kube-system pod first, the bronze Job last. The Job is decided.
    let first = serde_json::to_string(&review("pod-create-kube-system.json")["request"]).unwrap();
    let last = serde_json::to_string(&review("job-create-bronze-gpu-scored.json")["request"]).unwrap();
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{first},"request":{last}}}"#
    );
    let answer = answer_to(&server, &pki, body.into_bytes()).await;
    assert_eq!(answer.uid, "8e0e7a8b-014d-4461-b2a6-f236c413a5e4");
    assert!(answer.allowed && answer.patch.is_some(), "{answer:?}");
    assert_still_serving(&server, &pki).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_headers_slowly_is_cut_off_while_others_are_served() {
    let pki = pki();
    let server = start(&pki, true).await;
    let slow = raw_tls(&server, &pki).await;
    let (mut reader, mut writer) = tokio::io::split(slow);
    let head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Slow: ";
    writer.write_all(head).await.unwrap();
    let slow_client = async {
        let reading = async {
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest).await;
            Some(rest)
        };
        // One header byte every 250 ms, for up to 60 s: far past HEADER_READ_TIMEOUT (10 s).
        let trickling = async {
            for _ in 0..240 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if writer.write_all(b"a").await.is_err() || writer.flush().await.is_err() {
                    // Closed by the server: the reader sees the end.
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            rest = reading => rest,
            () = trickling => None,
        }
    };
    let others = async {
        let client = client(&[&pki], false, None);
        let mut served = 0;
        for _ in 0..20 {
            let answer = post_review(&client, &server, fixture("pod-create-kube-system.json")).await.unwrap();
            served += usize::from(answer.allowed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        served
    };
    let (rest, served) = tokio::join!(slow_client, others);
    assert_eq!(served, 20, "other clients were not served while the slow one trickled");
    let rest = rest.expect("the server never closed the slow connection");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.is_empty() || rest.starts_with("HTTP/1.1 408"), "{rest}");
    assert_still_serving(&server, &pki).await;
}
