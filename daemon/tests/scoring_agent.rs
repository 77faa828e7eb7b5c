//! `Scorer::score_for` against real HTTP agents on loopback: a fake agent per failure mode, and the standalone
//! built-in agent. Each mode gives the outcome documented in docs/guides/scoring.md.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use tiergate::admission::Request;
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::metrics::{AgentLabels, Metrics};
use tiergate::policy::ScoringSettings;
use tiergate::scoring::agent_server::{BuiltinAgent, serve_agent};
use tiergate::scoring::{ScoreOutcome, ScoreSource, Scorer};
use tiergate::view::Snapshot;
use tokio::sync::Semaphore;

/// The fake agent and the snapshot builders (a `cfg(test)` module so clippy treats them as test code).
#[cfg(test)]
mod support {
    use super::*;

    /// How the fake agent answers.
    #[derive(Clone, Copy, Debug)]
    pub(super) enum Mode {
        /// Score 85 on l4, avoid `train-llama`.
        Normal,
        /// Answers normally after 5 s.
        Slow,
        /// HTTP 500.
        ServerError,
        /// 200 with a body that is not JSON.
        Garbage,
        /// A score outside 0..=100.
        OutOfRange(f64),
        /// Score 95 on h100, which bronze may not use.
        UnknownGpu,
        /// Answers normally once the test releases the gate.
        Gated,
        /// HTTP 500 while `failing` is set, else normal.
        Flaky,
    }

    #[derive(Clone)]
    struct FakeState {
        mode: Mode,
        calls: Arc<AtomicUsize>,
        bodies: Arc<Mutex<Vec<Value>>>,
        gate: Arc<Semaphore>,
        failing: Arc<AtomicBool>,
    }

    pub(super) struct FakeAgent {
        pub(super) url: String,
        pub(super) calls: Arc<AtomicUsize>,
        pub(super) bodies: Arc<Mutex<Vec<Value>>>,
        pub(super) gate: Arc<Semaphore>,
        pub(super) failing: Arc<AtomicBool>,
    }

    impl FakeAgent {
        pub(super) fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    fn normal_answer() -> Value {
        json!({
            "priority_score": 85,
            "gpu_selector": {"nodeSelector": {"gpu.nvidia.com/class": "l4"}},
            "avoid_co_locate_with": ["train-llama"],
            "terms": {"chosen_gpu": "l4"}
        })
    }

    async fn handle_fake_score(State(state): State<FakeState>, Json(body): Json<Value>) -> Response {
        state.calls.fetch_add(1, Ordering::SeqCst);
        state.bodies.lock().unwrap().push(body);
        match state.mode {
            Mode::Normal => Json(normal_answer()).into_response(),
            Mode::Slow => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Json(normal_answer()).into_response()
            }
            Mode::ServerError => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
            Mode::Garbage => {
                (StatusCode::OK, [("content-type", "application/json")], "{\"priority_score\": oops").into_response()
            }
            Mode::OutOfRange(score) => {
                Json(json!({"priority_score": score, "terms": {"chosen_gpu": "l4"}})).into_response()
            }
            Mode::UnknownGpu => Json(json!({
                "priority_score": 95,
                "gpu_selector": {"nodeSelector": {"gpu.nvidia.com/class": "h100"}},
                "avoid_co_locate_with": [],
                "terms": {"chosen_gpu": "h100"}
            }))
            .into_response(),
            Mode::Flaky if state.failing.load(Ordering::SeqCst) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response()
            }
            Mode::Flaky => Json(normal_answer()).into_response(),
            Mode::Gated => {
                let _permit = state.gate.acquire().await.unwrap();
                Json(normal_answer()).into_response()
            }
        }
    }

    pub(super) async fn start_fake_agent(mode: Mode) -> FakeAgent {
        let state = FakeState {
            mode,
            calls: Arc::default(),
            bodies: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
            failing: Arc::new(AtomicBool::new(true)),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let agent = FakeAgent {
            url,
            calls: Arc::clone(&state.calls),
            bodies: Arc::clone(&state.bodies),
            gate: Arc::clone(&state.gate),
            failing: Arc::clone(&state.failing),
        };
        let router = Router::new().route("/v1/score", post(handle_fake_score)).with_state(state);
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        agent
    }

    /// A loopback URL nobody listens on.
    pub(super) fn refused_url() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        url
    }

    pub(super) fn fixture_request(name: &str) -> Request {
        let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = manifest.ancestors().map(|dir| dir.join("shared/fixtures/admission")).find(|dir| dir.is_dir());
        let path = dir.unwrap().join(name);
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        request.into()
    }

    pub(super) fn bronze_job() -> Request {
        fixture_request("job-create-bronze-gpu-scored.json")
    }

    pub(super) fn bronze_job_needing(gib: &str) -> Request {
        let mut request = bronze_job();
        request.object.as_mut().unwrap()["metadata"]["annotations"]["gpu.mem.gi"] = gib.into();
        request
    }

    /// The sample policy and cluster, with these scoring settings.
    pub(super) fn snapshot_with(scoring: ScoringSettings) -> Snapshot {
        let mut policy = load_policy(None).unwrap();
        policy.spec.scoring = scoring;
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
        Snapshot {
            policy: Some(Arc::new(policy)),
            namespaces: view.namespaces.into_iter().map(|ns| (ns.name.clone(), ns)).collect(),
            nodes: view.nodes.into_iter().map(|node| (node.name.clone(), node)).collect(),
            own_namespace: Some("tiergate-system".to_owned()),
            synced: true,
            ..Snapshot::default()
        }
    }

    pub(super) fn agent_settings(url: &str) -> ScoringSettings {
        ScoringSettings { url: Some(url.to_owned()), timeout_ms: 200, ..ScoringSettings::default() }
    }

    pub(super) fn scorer() -> (Scorer, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::default());
        (Scorer::new(None, Arc::clone(&metrics)), metrics)
    }

    pub(super) fn calls_with_outcome(metrics: &Metrics, outcome: &'static str) -> u64 {
        metrics.agent_calls.get_or_create(&AgentLabels { outcome }).get()
    }

    pub(super) fn assert_fallback(outcome: &ScoreOutcome, reason: &'static str) {
        assert_eq!(outcome.source, ScoreSource::Fallback { reason }, "{outcome:?}");
        assert_eq!(outcome.priority_class, "gpu-default", "bronze has no default class: the lowest bucket");
        assert_eq!((outcome.score, outcome.chosen_gpu_class.as_deref()), (None, None));
        assert!(outcome.warnings.iter().any(|warning| warning.contains("admitted with priority class gpu-default")));
    }

    /// A correctness bound (the call gave up rather than waited for the agent), not a performance claim.
    pub(super) fn assert_within_budget(started: Instant, timeout_ms: u64) {
        let budget = Duration::from_millis(timeout_ms) + Duration::from_secs(1);
        assert!(started.elapsed() < budget, "took {:?}, budget {budget:?}", started.elapsed());
    }
}

use support::*;

#[tokio::test]
async fn normal_agent_score_becomes_its_bucket_with_seed_000s_exact_request() {
    let agent = start_fake_agent(Mode::Normal).await;
    let (scorer, metrics) = scorer();
    let outcome = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&agent.url))).await.unwrap();
    assert_eq!(outcome.source, ScoreSource::Agent);
    assert_eq!(outcome.priority_class, "gpu-high");
    assert_eq!(outcome.score, Some(85));
    assert_eq!(outcome.chosen_gpu_class.as_deref(), Some("l4"));
    assert_eq!(outcome.avoid_job_types, ["train-llama"]);
    assert_eq!(calls_with_outcome(&metrics, "ok"), 1);
    let sent = agent.bodies.lock().unwrap().clone();
    assert_eq!(
        sent,
        [json!({
            "job_type": "train-bert",
            "features": {"gpu_mem_gb": 40, "batch_size": 16, "tenant": "team-a"},
            "candidate_gpu_types": ["l4"],
            "colocated_job_types": []
        })]
    );
}

#[tokio::test]
async fn slow_agent_times_out_within_the_budget_and_falls_back() {
    let agent = start_fake_agent(Mode::Slow).await;
    let (scorer, metrics) = scorer();
    let snapshot = snapshot_with(ScoringSettings { timeout_ms: 100, ..agent_settings(&agent.url) });
    let started = Instant::now();
    let outcome = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    assert_within_budget(started, 100);
    assert_fallback(&outcome, "timeout");
    assert!(outcome.warnings.iter().any(|warning| warning.contains("within 100 ms")), "{:?}", outcome.warnings);
    assert_eq!(calls_with_outcome(&metrics, "timeout"), 1);
    let exposition = metrics.encode().unwrap();
    assert!(exposition.contains("tiergate_agent_latency_seconds_count 1"), "{exposition}");
}

#[tokio::test]
async fn agent_answering_500_falls_back_with_http_error() {
    let agent = start_fake_agent(Mode::ServerError).await;
    let (scorer, metrics) = scorer();
    let outcome = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&agent.url))).await.unwrap();
    assert_fallback(&outcome, "http_error");
    assert!(outcome.warnings.iter().any(|warning| warning.contains("HTTP 500")), "{:?}", outcome.warnings);
    assert_eq!(calls_with_outcome(&metrics, "http_error"), 1);
}

#[tokio::test]
async fn garbage_json_falls_back_with_garbage() {
    let agent = start_fake_agent(Mode::Garbage).await;
    let (scorer, metrics) = scorer();
    let outcome = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&agent.url))).await.unwrap();
    assert_fallback(&outcome, "garbage");
    assert_eq!(calls_with_outcome(&metrics, "garbage"), 1);
}

#[tokio::test]
async fn scores_above_100_or_below_0_fall_back_with_out_of_range() {
    for score in [150.0, -5.0, 100.5] {
        let agent = start_fake_agent(Mode::OutOfRange(score)).await;
        let (scorer, metrics) = scorer();
        let outcome = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&agent.url))).await.unwrap();
        assert_fallback(&outcome, "out_of_range");
        assert_eq!(calls_with_outcome(&metrics, "out_of_range"), 1, "score {score}");
    }
}

#[tokio::test]
async fn a_gpu_outside_the_tier_is_ignored_and_the_score_still_used() {
    let agent = start_fake_agent(Mode::UnknownGpu).await;
    let (scorer, metrics) = scorer();
    let outcome = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&agent.url))).await.unwrap();
    assert_eq!(outcome.source, ScoreSource::Agent);
    // 95 is bucket gpu-ultra, above bronze's maxPriorityClass (gpu-high): the agent's score is clamped too.
    assert_eq!(outcome.priority_class, "gpu-high");
    assert_eq!(outcome.score, Some(95));
    assert_eq!(outcome.chosen_gpu_class, None);
    assert!(outcome.warnings.iter().any(|warning| warning.contains("\"h100\"")), "{:?}", outcome.warnings);
    assert!(outcome.warnings.iter().any(|warning| warning.contains("clamped to gpu-high")), "{:?}", outcome.warnings);
    assert_eq!(calls_with_outcome(&metrics, "ignored_gpu"), 1);
}

#[tokio::test]
async fn refused_connection_falls_back_within_the_budget() {
    let (scorer, metrics) = scorer();
    let started = Instant::now();
    let outcome = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&refused_url()))).await.unwrap();
    assert_within_budget(started, 200);
    assert_fallback(&outcome, "refused");
    assert_eq!(calls_with_outcome(&metrics, "refused"), 1);
}

#[tokio::test]
async fn breaker_opens_after_consecutive_failures_and_skips_the_agent() {
    let agent = start_fake_agent(Mode::ServerError).await;
    let (scorer, metrics) = scorer();
    let snapshot = snapshot_with(ScoringSettings {
        breaker_failure_threshold: 3,
        breaker_cooldown_ms: 600_000,
        ..agent_settings(&agent.url)
    });
    let mut reasons = Vec::new();
    for _ in 0..5 {
        let outcome = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
        reasons.push(outcome.source);
    }
    let fallback = |reason| ScoreSource::Fallback { reason };
    assert_eq!(
        reasons,
        [
            fallback("http_error"),
            fallback("http_error"),
            fallback("http_error"),
            fallback("breaker_open"),
            fallback("breaker_open")
        ]
    );
    assert_eq!(agent.calls(), 3);
    assert_eq!(metrics.agent_breaker_open.get(), 1);
    assert_eq!(calls_with_outcome(&metrics, "breaker_open"), 2);
}

#[tokio::test]
async fn after_the_cooldown_one_probe_reaches_the_recovered_agent_and_closes_the_breaker() {
    let agent = start_fake_agent(Mode::Flaky).await;
    let (scorer, metrics) = scorer();
    let snapshot = snapshot_with(ScoringSettings {
        breaker_failure_threshold: 1,
        breaker_cooldown_ms: 50,
        cache_ttl_ms: 0,
        ..agent_settings(&agent.url)
    });
    let failed = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    let skipped = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    assert_eq!(failed.source, ScoreSource::Fallback { reason: "http_error" });
    assert_eq!(skipped.source, ScoreSource::Fallback { reason: "breaker_open" });
    assert_eq!(metrics.agent_breaker_open.get(), 1);
    agent.failing.store(false, Ordering::SeqCst);
    // Waiting past the cool-down (a precondition, not a timing assertion).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let probe = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    let after = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    assert_eq!((probe.source, after.source), (ScoreSource::Agent, ScoreSource::Agent));
    assert_eq!(metrics.agent_breaker_open.get(), 0);
    assert_eq!(agent.calls(), 3, "the failure, the probe and the next call; the skipped call never reached the agent");
}

#[tokio::test]
async fn an_identical_request_within_the_ttl_is_answered_from_the_cache() {
    let agent = start_fake_agent(Mode::Normal).await;
    let (scorer, metrics) = scorer();
    let snapshot = snapshot_with(agent_settings(&agent.url));
    let first = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    let second = scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    assert_eq!(agent.calls(), 1);
    assert_eq!(calls_with_outcome(&metrics, "cached"), 1);
    assert_eq!((second.priority_class, second.score, second.source), (first.priority_class, first.score, first.source));
    scorer.score_for(&bronze_job_needing("20"), &snapshot).await.unwrap();
    assert_eq!(agent.calls(), 2, "a different request is not a cache hit");
}

/// Scores `count` copies of `request` at once (a burst of identical pods).
async fn score_concurrently(
    scorer: &Arc<Scorer>,
    snapshot: &Snapshot,
    request: &Request,
    count: usize,
) -> Vec<tokio::task::JoinHandle<Option<ScoreOutcome>>> {
    (0..count)
        .map(|_| {
            let (scorer, snapshot, request) = (Arc::clone(scorer), snapshot.clone(), request.clone());
            tokio::spawn(async move { scorer.score_for(&request, &snapshot).await })
        })
        .collect()
}

#[tokio::test]
async fn identical_concurrent_requests_share_one_agent_call() {
    let agent = start_fake_agent(Mode::Gated).await;
    let (scorer, metrics) = scorer();
    let scorer = Arc::new(scorer);
    let snapshot = snapshot_with(ScoringSettings { timeout_ms: 30_000, ..agent_settings(&agent.url) });
    let waiting = score_concurrently(&scorer, &snapshot, &bronze_job(), 8).await;
    while agent.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    agent.gate.add_permits(8);
    for outcome in waiting {
        let outcome = outcome.await.unwrap().unwrap();
        assert_eq!((outcome.source, outcome.score), (ScoreSource::Agent, Some(85)));
    }
    assert_eq!(agent.calls(), 1, "one call for eight identical requests");
    assert_eq!((calls_with_outcome(&metrics, "ok"), calls_with_outcome(&metrics, "cached")), (1, 7));
    assert_eq!(calls_with_outcome(&metrics, "busy"), 0, "waiting requests take no call slot");
}

#[tokio::test]
async fn when_a_shared_call_fails_every_waiting_request_falls_back_with_its_reason() {
    let agent = start_fake_agent(Mode::Slow).await;
    let (scorer, metrics) = scorer();
    let scorer = Arc::new(scorer);
    let snapshot = snapshot_with(ScoringSettings { timeout_ms: 300, ..agent_settings(&agent.url) });
    let started = Instant::now();
    for outcome in score_concurrently(&scorer, &snapshot, &bronze_job(), 4).await {
        assert_fallback(&outcome.await.unwrap().unwrap(), "timeout");
    }
    assert_within_budget(started, 300);
    assert_eq!(agent.calls(), 1);
    assert_eq!(calls_with_outcome(&metrics, "timeout"), 4);
    // A failure is not cached: the next request calls again.
    scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    assert_eq!(agent.calls(), 2);
}

#[tokio::test]
async fn a_zero_ttl_turns_the_cache_off() {
    let agent = start_fake_agent(Mode::Normal).await;
    let (scorer, _metrics) = scorer();
    let snapshot = snapshot_with(ScoringSettings { cache_ttl_ms: 0, ..agent_settings(&agent.url) });
    scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    scorer.score_for(&bronze_job(), &snapshot).await.unwrap();
    assert_eq!(agent.calls(), 2);
}

#[tokio::test]
async fn when_every_call_slot_is_taken_the_next_request_falls_back_at_once() {
    let agent = start_fake_agent(Mode::Gated).await;
    let (scorer, metrics) = scorer();
    let scorer = Arc::new(scorer);
    let snapshot =
        snapshot_with(ScoringSettings { max_concurrent_calls: 1, timeout_ms: 30_000, ..agent_settings(&agent.url) });
    let first = tokio::spawn({
        let (scorer, snapshot) = (Arc::clone(&scorer), snapshot.clone());
        async move { scorer.score_for(&bronze_job(), &snapshot).await }
    });
    while agent.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = scorer.score_for(&bronze_job_needing("20"), &snapshot).await.unwrap();
    assert_eq!(second.source, ScoreSource::Fallback { reason: "busy" });
    assert_eq!(agent.calls(), 1, "the second request never reached the agent");
    agent.gate.add_permits(1);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.source, ScoreSource::Agent);
    assert_eq!(calls_with_outcome(&metrics, "busy"), 1);
}

#[tokio::test]
async fn agent_url_flag_beats_the_policys_url() {
    let agent = start_fake_agent(Mode::Normal).await;
    let scorer = Scorer::new(Some(agent.url.clone()), Arc::new(Metrics::default()));
    let outcome = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&refused_url()))).await.unwrap();
    assert_eq!(outcome.source, ScoreSource::Agent);
    assert_eq!(agent.calls(), 1);
}

#[tokio::test]
async fn a_policy_change_of_the_agent_url_takes_effect_on_the_next_request() {
    let failing = start_fake_agent(Mode::ServerError).await;
    let working = start_fake_agent(Mode::Normal).await;
    let (scorer, _metrics) = scorer();
    let before = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&failing.url))).await.unwrap();
    let after = scorer.score_for(&bronze_job(), &snapshot_with(agent_settings(&working.url))).await.unwrap();
    assert_eq!(before.source, ScoreSource::Fallback { reason: "http_error" });
    assert_eq!(after.source, ScoreSource::Agent);
}

#[tokio::test]
async fn the_standalone_builtin_agent_answers_like_the_embedded_builtin_scorer() {
    let policy = load_policy(None).unwrap();
    let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = Arc::new(tokio::sync::Notify::new());
    let server = tokio::spawn({
        let agent = Arc::new(BuiltinAgent::new(&policy.spec, &view));
        let shutdown = Arc::clone(&shutdown);
        async move { serve_agent(listener, agent, async move { shutdown.notified().await }).await }
    });
    for gib in ["8", "24", "40"] {
        let request = bronze_job_needing(gib);
        let (remote_scorer, _) = scorer();
        let remote = remote_scorer.score_for(&request, &snapshot_with(agent_settings(&url))).await.unwrap();
        let embedded = Scorer::default().score_for(&request, &snapshot_with(ScoringSettings::default())).await.unwrap();
        assert_eq!(remote.source, ScoreSource::Agent, "{gib} GiB");
        assert_eq!(embedded.source, ScoreSource::BuiltIn, "{gib} GiB");
        assert_eq!(
            (remote.priority_class, remote.score, remote.chosen_gpu_class),
            (embedded.priority_class, embedded.score, embedded.chosen_gpu_class),
            "{gib} GiB"
        );
    }
    shutdown.notify_one();
    server.await.unwrap().unwrap();
}
