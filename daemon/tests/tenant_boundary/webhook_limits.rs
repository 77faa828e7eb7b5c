//! Exhausting the webhook: concurrent large bodies, HTTP/2 oversize bodies, timeouts that disagree with the chart.
//! Each attack must get a fast, defined answer (429, 413, or a denial for a body too complex to decide) while memory
//! stays inside the global budget; does network I/O on loopback.
#![cfg(test)]

#[path = "../webhook_support/mod.rs"]
mod webhook_support;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tiergate::admission::build_static_snapshot;
use tiergate::admission::limits::{
    DEFAULT_WEBHOOK_TIMEOUT_SECONDS, MAX_BODY_BYTES, REQUEST_OVERHEAD_BYTES, WebhookLimits, build_limits,
};
use tiergate::admission::server::{AdmissionState, serve_webhook_with};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::metrics::Metrics;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;
use webhook_support::{Pki, client_with_alpn, fixture, pki, raw_tls_at};

/// A webhook on loopback serving the sample policy with `limits`.
struct Limited {
    port: u16,
    url: String,
    metrics: Arc<Metrics>,
    _dir: tempfile::TempDir,
    shutdown: CancellationToken,
}

impl Drop for Limited {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start_limited(pki: &Pki, limits: WebhookLimits) -> Limited {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &pki.cert_pem).unwrap();
    std::fs::write(&key, &pki.key_pem).unwrap();
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
    let metrics = Arc::new(Metrics::new());
    let state = AdmissionState {
        snapshot: Arc::new(ArcSwap::from_pointee(build_static_snapshot(load_policy(None).unwrap(), view, None))),
        scorer: Arc::default(),
        ledger: Arc::default(),
        metrics: metrics.clone(),
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move { serve_webhook_with(listener, (&cert, &key), state, limits, token).await });
    let server = Limited { port, url: format!("https://localhost:{port}/mutate"), metrics, _dir: dir, shutdown };
    let client = client_with_alpn(&[pki], true, None, Vec::new());
    for _ in 0..200 {
        if client.get(&server.url).send().await.is_ok() {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("webhook did not start");
}

/// The smallest budget allowed: one largest review.
fn one_review_budget() -> WebhookLimits {
    WebhookLimits { max_inflight_bytes: MAX_BODY_BYTES + REQUEST_OVERHEAD_BYTES, ..WebhookLimits::default() }
}

/// A recorded review padded with trailing whitespace (still valid JSON) to `size` bytes.
fn padded_review(size: usize) -> Vec<u8> {
    let mut body = fixture("job-create-bronze-gpu-scored.json");
    body.resize(size, b' ');
    body
}

fn head(length: usize) -> String {
    format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

/// Reads one HTTP/1.1 answer until the server closes or 10 s pass; returns its text.
async fn read_answer(stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 64 * 1024];
    let reading = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
            }
            let text = String::from_utf8_lossy(&answer);
            if let Some((headers, body)) = text.split_once("\r\n\r\n") {
                let length = headers
                    .lines()
                    .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                    .and_then(|value| value.trim().parse::<usize>().ok());
                if length.is_some_and(|length| body.len() >= length) {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), reading).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn refused(metrics: &Metrics, reason: &str) -> bool {
    let text = metrics.encode().unwrap();
    text.lines().any(|line| line.starts_with(&format!("tiergate_admission_refused_total{{reason=\"{reason}\"}} ")))
}

#[tokio::test]
async fn a_large_body_arriving_while_the_byte_budget_is_spent_gets_429_with_retry_after() {
    let pki = pki();
    let server = start_limited(&pki, one_review_budget()).await;
    // The attacker's first review announces 3 MiB and sends half: its whole length is charged at once.
    let first = padded_review(3 * 1024 * 1024);
    let mut holder = raw_tls_at(server.port, &pki.ca_pem).await;
    holder.write_all(head(first.len()).as_bytes()).await.unwrap();
    holder.write_all(&first[..first.len() / 2]).await.unwrap();
    holder.flush().await.unwrap();
    // A second 2 MiB review no longer fits: refused from its headers, before a byte of it is buffered.
    let second = padded_review(2 * 1024 * 1024);
    let mut stream = raw_tls_at(server.port, &pki.ca_pem).await;
    stream.write_all(head(second.len()).as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    let answer = read_answer(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("--max-inflight-bytes"), "{answer}");
    assert!(refused(&server.metrics, "inflight_bytes"));
    // The first review still completes, and once answered its bytes are free again.
    holder.write_all(&first[first.len() / 2..]).await.unwrap();
    holder.flush().await.unwrap();
    let answer = read_answer(&mut holder).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut stream = raw_tls_at(server.port, &pki.ca_pem).await;
    stream.write_all(head(second.len()).as_bytes()).await.unwrap();
    stream.write_all(&second).await.unwrap();
    let answer = read_answer(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\"allowed\":true"), "{answer}");
}

#[tokio::test]
async fn a_chunked_body_without_length_is_charged_as_it_arrives_and_refused_past_the_budget() {
    let pki = pki();
    let server = start_limited(&pki, one_review_budget()).await;
    let first = padded_review(3 * 1024 * 1024);
    let mut holder = raw_tls_at(server.port, &pki.ca_pem).await;
    holder.write_all(head(first.len()).as_bytes()).await.unwrap();
    holder.write_all(&first[..1024]).await.unwrap();
    holder.flush().await.unwrap();
    // No Content-Length: nothing to charge up front, so it gets in, and is refused once 1 MiB more has arrived.
    let mut stream = raw_tls_at(server.port, &pki.ca_pem).await;
    let head = "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = [format!("{:x}\r\n", 64 * 1024).into_bytes(), vec![b' '; 64 * 1024], b"\r\n".to_vec()].concat();
    let writing = async {
        for _ in 0..32 {
            if stream.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), writing).await;
    let answer = read_answer(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(refused(&server.metrics, "inflight_bytes"));
}

#[tokio::test]
async fn requests_past_the_in_flight_request_limit_get_429_even_when_small() {
    let pki = pki();
    let server = start_limited(&pki, WebhookLimits { max_inflight_requests: 1, ..WebhookLimits::default() }).await;
    let body = fixture("job-create-bronze-gpu-scored.json");
    let mut holder = raw_tls_at(server.port, &pki.ca_pem).await;
    holder.write_all(head(body.len()).as_bytes()).await.unwrap();
    holder.write_all(&body[..10]).await.unwrap();
    holder.flush().await.unwrap();
    let client = client_with_alpn(&[&pki], true, None, vec![b"h2".to_vec()]);
    let response =
        client.post(&server.url).header("content-type", "application/json").body(body.clone()).send().await.unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(response.text().await.unwrap().contains("--max-inflight-requests"));
    assert!(refused(&server.metrics, "inflight_requests"));
}

#[tokio::test]
async fn a_gpu_job_padded_with_many_small_objects_is_denied_not_admitted_unchecked() {
    let pki = pki();
    let server = start_limited(&pki, WebhookLimits::default()).await;
    // 3.9 MiB of tiny env objects: each becomes a map when parsed (~2.4 KiB each, ~300 MiB in all).
    let mut review: serde_json::Value = serde_json::from_slice(&fixture("job-create-bronze-gpu-scored.json")).unwrap();
    let env: Vec<serde_json::Value> =
        (0..130_000).map(|i| serde_json::json!({"name": format!("E{i:06}"), "value": "v"})).collect();
    review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["env"] = env.into();
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() < MAX_BODY_BYTES);
    let client = client_with_alpn(&[&pki], true, None, vec![b"h2".to_vec()]);
    let response = client.post(&server.url).header("content-type", "application/json").body(body).send().await.unwrap();
    // A denial, not a bare 413: under failurePolicy Ignore a 413 would admit the padded workload unchecked.
    let message = assert_denied_as_too_complex(response, &review).await;
    assert!(message.contains("JSON objects, arrays and elements") && message.contains("ConfigMap"), "{message}");
    assert!(refused(&server.metrics, "body_too_complex"));
}

/// The bronze GPU fixture as the API server sends it for a Job of ~600 KiB of env entries (issue 33): the entries
/// in the container and once more in `metadata.managedFields` (four objects each), the pods selecting `selector`
/// and asking a GPU when `gpu`.
fn api_server_job_of_long_env(selector: serde_json::Value, gpu: bool) -> serde_json::Value {
    let mut review: serde_json::Value = serde_json::from_slice(&fixture("job-create-bronze-gpu-scored.json")).unwrap();
    let names: Vec<String> = (0..5_000).map(|index| format!("FLOOD_VAR_{index:05}")).collect();
    let value = "x".repeat(80);
    let object = &mut review["request"]["object"];
    let container = &mut object["spec"]["template"]["spec"]["containers"][0];
    container["env"] = names.iter().map(|name| serde_json::json!({"name": name, "value": value})).collect();
    if !gpu {
        container["resources"] = serde_json::json!({"requests": {"cpu": "10m"}});
    }
    object["spec"]["template"]["spec"]["nodeSelector"] = selector;
    let fields: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .map(|name| (format!("k:{{\"name\":\"{name}\"}}"), serde_json::json!({".": {}, "f:name": {}, "f:value": {}})))
        .collect();
    object["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"trainer\"}"]
        ["f:env"] = fields.into();
    review
}

#[tokio::test]
async fn a_flood_sized_job_selecting_a_foreign_class_is_decided_and_denied_not_refused_as_too_complex() {
    let pki = pki();
    let server = start_limited(&pki, WebhookLimits::default()).await;
    let client = client_with_alpn(&[&pki], true, None, vec![b"h2".to_vec()]);
    let gpu = api_server_job_of_long_env(serde_json::json!({"gpu.nvidia.com/class": "h100"}), true);
    let cpu = api_server_job_of_long_env(serde_json::json!({}), false);
    let mut answers = Vec::new();
    for review in [&gpu, &cpu] {
        let body = serde_json::to_vec(review).unwrap();
        assert!(body.len() > 850_000, "{}", body.len());
        let response =
            client.post(&server.url).header("content-type", "application/json").body(body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let answer: serde_json::Value = response.json().await.unwrap();
        answers.push(answer["response"].clone());
    }
    // Before, the managedFields were charged as if built (~48 MiB, past the whole 32 MiB budget): both were
    // refused as too complex, the CPU Job with them, whatever they asked for.
    let message = answers[0]["status"]["message"].as_str().unwrap_or_default();
    assert_eq!(answers[0]["allowed"], false, "{message}");
    assert!(message.contains("h100") && !message.contains("cannot check this object"), "{message}");
    assert_eq!(answers[1]["allowed"], true, "{}", answers[1]);
    assert!(!refused(&server.metrics, "body_too_complex"));
}

/// The answer is an AdmissionReview for `review`'s uid that denies it with code 413; returns its message.
async fn assert_denied_as_too_complex(response: reqwest::Response, review: &serde_json::Value) -> String {
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 413);
    answer["response"]["status"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_gpu_job_padded_with_a_million_one_letter_args_is_denied_not_admitted_unchecked() {
    let pki = pki();
    let server = start_limited(&pki, WebhookLimits::default()).await;
    // No objects, just elements: ~190 bytes each once parsed, ~190 MiB for this one review.
    let mut review: serde_json::Value = serde_json::from_slice(&fixture("job-create-bronze-gpu-scored.json")).unwrap();
    review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["args"] = vec!["a"; 1_000_000].into();
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() < MAX_BODY_BYTES);
    let client = client_with_alpn(&[&pki], true, None, Vec::new());
    let response = client.post(&server.url).header("content-type", "application/json").body(body).send().await.unwrap();
    let message = assert_denied_as_too_complex(response, &review).await;
    assert!(message.contains("--max-inflight-bytes"), "{message}");
    assert!(refused(&server.metrics, "body_too_complex"));
}

/// Posts `size` bytes of padded review with the client's protocol; returns the status and the protocol used.
async fn post_oversize(server: &Limited, pki: &Pki, alpn: &[u8], stream_body: bool) -> (u16, reqwest::Version) {
    let client = client_with_alpn(&[pki], true, None, vec![alpn.to_vec()]);
    let body = padded_review(MAX_BODY_BYTES + 512 * 1024);
    let body = if stream_body {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
        reqwest::Body::wrap_stream(futures::stream::iter(chunks))
    } else {
        reqwest::Body::from(body)
    };
    let response = client.post(&server.url).header("content-type", "application/json").body(body).send().await;
    let response = response.unwrap_or_else(|error| panic!("no answer over {alpn:?}: {error:?}"));
    (response.status().as_u16(), response.version())
}

/// Posts an oversize review with curl, whose HTTP/2 client (unlike reqwest's) fails with "stream was not closed
/// cleanly" when the server resets the stream after answering; returns curl's `%{http_code} %{http_version}`.
async fn curl_oversize(server: &Limited, protocol: &'static str, chunked: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, padded_review(MAX_BODY_BYTES + 512 * 1024)).unwrap();
    let mut command = std::process::Command::new("curl");
    // `-k`: OpenSSL takes the test PKI's leaf for self-signed (same default subject as its CA); this test is about
    // HTTP framing, and the trust chain is covered by the reqwest-based suites.
    command.args(["-sSk", protocol, "-o", "/dev/null", "-w", "%{http_code} %{http_version}"]);
    command.args(["-H", "content-type: application/json"]);
    if chunked {
        command.args(["-H", "transfer-encoding: chunked"]);
    }
    command.arg("--data-binary").arg(format!("@{}", body.display())).arg(&server.url);
    let output = tokio::task::spawn_blocking(move || command.output()).await.unwrap().unwrap();
    assert!(output.status.success(), "curl {protocol} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn an_oversize_body_over_http2_gets_413_not_a_stream_reset() {
    let pki = pki();
    let server = start_limited(&pki, WebhookLimits::default()).await;
    assert_eq!(curl_oversize(&server, "--http2", false).await, "413 2");
    assert_eq!(post_oversize(&server, &pki, b"h2", false).await, (413, reqwest::Version::HTTP_2));
    assert!(refused(&server.metrics, "body_too_large"));
}

#[tokio::test]
async fn an_oversize_streamed_body_without_length_over_http2_gets_413_not_a_stream_reset() {
    let pki = pki();
    let server = start_limited(&pki, WebhookLimits::default()).await;
    assert_eq!(curl_oversize(&server, "--http2", true).await, "413 2");
    assert_eq!(post_oversize(&server, &pki, b"h2", true).await, (413, reqwest::Version::HTTP_2));
}

#[tokio::test]
async fn an_oversize_body_over_http1_gets_413() {
    let pki = pki();
    let server = start_limited(&pki, WebhookLimits::default()).await;
    assert_eq!(curl_oversize(&server, "--http1.1", false).await, "413 1.1");
    assert_eq!(post_oversize(&server, &pki, b"http/1.1", false).await, (413, reqwest::Version::HTTP_11));
}

#[test]
fn the_decision_deadline_ends_before_the_charts_webhook_timeout() {
    let values =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/tiergate/values.yaml")).unwrap();
    let values: serde_json::Value = serde_saphyr::from_str(&values).unwrap();
    let chart_timeout = values["webhook"]["timeoutSeconds"].as_u64().unwrap();
    assert_eq!(chart_timeout, DEFAULT_WEBHOOK_TIMEOUT_SECONDS, "the binary's default and the chart's value differ");
    let limits = WebhookLimits::default();
    let api_server_gives_up = Duration::from_secs(chart_timeout);
    assert!(limits.decision_timeout + Duration::from_millis(500) <= api_server_gives_up, "{limits:?}");
    assert!(limits.scoring_timeout_cap < limits.decision_timeout, "{limits:?}");
}

#[test]
fn a_decision_deadline_longer_than_the_webhook_timeout_is_refused_at_start_naming_the_flag() {
    let error = build_limits(5, Some(8000), 64 * 1024 * 1024, 128).unwrap_err().to_string();
    assert!(error.contains("--decision-timeout-ms 8000"), "{error}");
    assert!(error.contains("--webhook-timeout-seconds"), "{error}");
    for seconds in 1..=30 {
        let limits = build_limits(seconds, None, 64 * 1024 * 1024, 128).unwrap();
        assert!(limits.decision_timeout < Duration::from_secs(seconds), "{seconds} s: {limits:?}");
    }
}
