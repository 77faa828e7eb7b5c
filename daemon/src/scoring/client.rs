//! The scheduler-agent client: `POST {url}/v1/score` with a per-call timeout, behind a TTL cache, a bounded number
//! of calls in flight and a circuit breaker; does network I/O. Every call outcome is counted in `agent_calls`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::metrics::{AgentLabels, Metrics};
use crate::policy::{GpuClass, ScoringSettings};
use crate::scoring::answer::{AgentAnswer, AnswerError, build_answer};
use crate::scoring::breaker::Breaker;
use crate::scoring::wire::{ScoreRequest, ScoreResponse};

/// Most answers kept in the cache.
const CACHE_CAPACITY: u64 = 10_000;

/// Everything that decides how the agent is called; a change rebuilds the client (and resets its breaker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// Base URL; the client posts to `{url}/v1/score`.
    pub url: String,
    /// Per-call timeout, covering connect, send and reading the answer.
    pub timeout: Duration,
    /// Consecutive failures that open the breaker.
    pub breaker_failure_threshold: u32,
    /// How long the open breaker skips calls.
    pub breaker_cooldown: Duration,
    /// How long an answer is reused for an identical request; zero turns the cache off.
    pub cache_ttl: Duration,
    /// Calls in flight at once.
    pub max_concurrent_calls: u32,
}

impl AgentConfig {
    /// The configuration for the agent at `url` with the policy's settings.
    pub fn new(url: String, settings: &ScoringSettings) -> Self {
        Self {
            url,
            timeout: Duration::from_millis(settings.timeout_ms),
            breaker_failure_threshold: settings.breaker_failure_threshold,
            breaker_cooldown: Duration::from_millis(settings.breaker_cooldown_ms),
            cache_ttl: Duration::from_millis(settings.cache_ttl_ms),
            max_concurrent_calls: settings.max_concurrent_calls,
        }
    }
}

/// Why no usable answer came back; each becomes a `Fallback` with the tier's default priority.
#[derive(Debug, thiserror::Error)]
pub enum AgentCallError {
    /// The HTTP client could not be built.
    #[error("failed to build the scheduler agent client: {message}")]
    BuildClient {
        /// Cause.
        message: String,
    },
    /// The agent URL is not an http(s) URL.
    #[error(
        "failed to parse the scheduler agent URL {url:?} (spec.scoring.url or --agent-url): {message}; use e.g. http://scheduler-agent.ml:8080"
    )]
    ParseAgentUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// Every call slot is taken.
    #[error("failed to get a call slot for the scheduler agent: {limit} calls are already in flight")]
    AcquireCallSlot {
        /// `maxConcurrentCalls`.
        limit: u32,
    },
    /// The circuit breaker is open after repeated failures.
    #[error(
        "failed to call the scheduler agent: its circuit breaker is open after repeated failures (next try in {retry_in_ms} ms)"
    )]
    PassBreaker {
        /// Time until a probe call is let through.
        retry_in_ms: u128,
    },
    /// No answer within the timeout.
    #[error("failed to get an answer from the scheduler agent at {url} within {timeout_ms} ms")]
    WaitForAnswer {
        /// Agent URL.
        url: String,
        /// `timeoutMs`.
        timeout_ms: u128,
    },
    /// The connection was refused or could not be made.
    #[error("failed to connect to the scheduler agent at {url}")]
    ConnectToAgent {
        /// Agent URL.
        url: String,
        /// Cause.
        source: reqwest::Error,
    },
    /// Sending the request or reading the answer failed otherwise.
    #[error("failed to exchange a request with the scheduler agent at {url}")]
    ExchangeWithAgent {
        /// Agent URL.
        url: String,
        /// Cause.
        source: reqwest::Error,
    },
    /// The agent answered with a non-success HTTP status.
    #[error("failed to get a score from the scheduler agent at {url}: it answered HTTP {status}")]
    ReceiveSuccess {
        /// Agent URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The answer is not the seed's JSON.
    #[error("failed to parse the scheduler agent's answer as a /v1/score response: {message}")]
    ParseAnswer {
        /// Parser message.
        message: String,
    },
    /// The answer's score is unusable.
    #[error(transparent)]
    CheckAnswer(#[from] AnswerError),
    /// An identical request was already being sent to the agent, and that call failed.
    #[error("failed to get a score from the scheduler agent: an identical request in flight failed: {message}")]
    ShareIdenticalCall {
        /// The reason of the failed call (one of the reasons above).
        reason: &'static str,
        /// Its message.
        message: String,
    },
}

impl AgentCallError {
    /// Fixed reason: the `agent_calls` outcome and the `Fallback` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::BuildClient { .. } => "client_error",
            Self::ParseAgentUrl { .. } => "bad_url",
            Self::AcquireCallSlot { .. } => "busy",
            Self::PassBreaker { .. } => "breaker_open",
            Self::WaitForAnswer { .. } => "timeout",
            Self::ConnectToAgent { .. } => "refused",
            Self::ExchangeWithAgent { .. } => "transport_error",
            Self::ReceiveSuccess { .. } => "http_error",
            Self::ParseAnswer { .. } => "garbage",
            Self::CheckAnswer(error) => error.reason(),
            Self::ShareIdenticalCall { reason, .. } => reason,
        }
    }

    /// Whether this counts against the agent in the circuit breaker (skipped calls do not).
    fn is_agent_failure(&self) -> bool {
        !matches!(
            self,
            Self::BuildClient { .. }
                | Self::ParseAgentUrl { .. }
                | Self::AcquireCallSlot { .. }
                | Self::PassBreaker { .. }
                | Self::ShareIdenticalCall { .. }
        )
    }
}

/// A checked answer and how it was obtained (`ok`, `ignored_gpu` or `cached`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answered {
    /// The checked answer.
    pub answer: AgentAnswer,
    /// The `agent_calls` outcome.
    pub outcome: &'static str,
}

impl Answered {
    /// An answer this request's own agent call produced.
    fn called(answer: AgentAnswer) -> Self {
        let outcome = if answer.gpu_ignored { "ignored_gpu" } else { "ok" };
        Self { answer, outcome }
    }
}

/// What requests waiting on an identical in-flight call learn when it fails.
#[derive(Debug)]
struct SharedFailure {
    reason: &'static str,
    message: String,
}

/// One configured agent: HTTP client, breaker, cache and call slots. Shared by all webhook requests.
#[derive(Debug)]
pub struct AgentClient {
    config: AgentConfig,
    endpoint: String,
    http: reqwest::Client,
    breaker: Mutex<Breaker>,
    /// Answers by (tier, request); identical concurrent requests share one call (moka coalesces them).
    cache: Option<moka::future::Cache<(String, ScoreRequest), AgentAnswer>>,
    slots: Semaphore,
    metrics: Arc<Metrics>,
}

impl AgentClient {
    /// A client for `config`; installs rustls' ring provider as the process default if none is installed yet.
    pub fn new(config: AgentConfig, metrics: Arc<Metrics>) -> Result<Self, AgentCallError> {
        let parse_error = |message: String| AgentCallError::ParseAgentUrl { url: config.url.clone(), message };
        let url = reqwest::Url::parse(&config.url).map_err(|error| parse_error(error.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(parse_error(format!("scheme {:?} is not http or https", url.scheme())));
        }
        // Ignoring the result: an already-installed provider (kube's, the webhook's) is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .no_proxy()
            .build()
            .map_err(|error| AgentCallError::BuildClient { message: error.to_string() })?;
        let cache = (!config.cache_ttl.is_zero()).then(|| {
            moka::future::Cache::builder().max_capacity(CACHE_CAPACITY).time_to_live(config.cache_ttl).build()
        });
        metrics.agent_breaker_open.set(0);
        Ok(Self {
            endpoint: format!("{}/v1/score", config.url.trim_end_matches('/')),
            http,
            breaker: Mutex::new(Breaker::new(config.breaker_failure_threshold, config.breaker_cooldown)),
            cache,
            slots: Semaphore::new(usize::try_from(config.max_concurrent_calls.max(1)).unwrap_or(usize::MAX)),
            config,
            metrics,
        })
    }

    /// The configuration this client was built with.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// A checked answer for a job of `tier` offered `candidates`: from the cache, or from one agent call when a
    /// slot is free and the breaker allows it. Returns within the timeout (plus scheduling slack).
    pub async fn answer(
        &self,
        tier: &str,
        candidates: &[&GpuClass],
        request: &ScoreRequest,
    ) -> Result<Answered, AgentCallError> {
        let result = self.uncounted_answer(tier, candidates, request).await;
        let outcome = match &result {
            Ok(answered) => answered.outcome,
            Err(error) => error.reason(),
        };
        self.metrics.agent_calls.get_or_create(&AgentLabels { outcome }).inc();
        result
    }

    /// The answer from the cache, from an identical call already in flight (its result is shared, success or
    /// failure, so a burst of identical pods makes one call), or from a call of its own.
    async fn uncounted_answer(
        &self,
        tier: &str,
        candidates: &[&GpuClass],
        request: &ScoreRequest,
    ) -> Result<Answered, AgentCallError> {
        let Some(cache) = &self.cache else {
            return self.call_agent(tier, candidates, request).await.map(Answered::called);
        };
        let mut own_failure = None;
        let call = async {
            self.call_agent(tier, candidates, request).await.map_err(|error| {
                let shared = SharedFailure { reason: error.reason(), message: error.to_string() };
                own_failure = Some(error);
                shared
            })
        };
        match cache.entry((tier.to_owned(), request.clone())).or_try_insert_with(call).await {
            Ok(entry) if entry.is_fresh() => Ok(Answered::called(entry.into_value())),
            Ok(entry) => Ok(Answered { answer: entry.into_value(), outcome: "cached" }),
            Err(shared) => Err(own_failure.unwrap_or_else(|| AgentCallError::ShareIdenticalCall {
                reason: shared.reason,
                message: shared.message.clone(),
            })),
        }
    }

    /// One agent call, if a slot is free and the breaker allows it; records the result in the breaker.
    async fn call_agent(
        &self,
        tier: &str,
        candidates: &[&GpuClass],
        request: &ScoreRequest,
    ) -> Result<AgentAnswer, AgentCallError> {
        let _slot = self
            .slots
            .try_acquire()
            .map_err(|_| AgentCallError::AcquireCallSlot { limit: self.config.max_concurrent_calls.max(1) })?;
        self.lock_breaker()
            .permit(Instant::now())
            .map_err(|rejected| AgentCallError::PassBreaker { retry_in_ms: rejected.retry_in.as_millis() })?;
        let started = Instant::now();
        let result = self.post(request).await.and_then(|response| Ok(build_answer(&response, tier, candidates)?));
        self.metrics.agent_latency_seconds.observe(started.elapsed().as_secs_f64());
        {
            let mut breaker = self.lock_breaker();
            let was_open = breaker.is_open();
            match &result {
                Ok(_) => breaker.record_success(),
                Err(error) if error.is_agent_failure() => breaker.record_failure(Instant::now()),
                Err(_) => {}
            }
            let is_open = breaker.is_open();
            self.metrics.agent_breaker_open.set(i64::from(is_open));
            match (was_open, is_open) {
                (false, true) => tracing::warn!(
                    url = %self.config.url,
                    cooldown_ms = self.config.breaker_cooldown.as_millis(),
                    "scheduler agent circuit breaker opened: calls are skipped for the cool-down"
                ),
                (true, false) => tracing::info!(url = %self.config.url, "scheduler agent circuit breaker closed"),
                _ => {}
            }
        }
        result
    }

    async fn post(&self, request: &ScoreRequest) -> Result<ScoreResponse, AgentCallError> {
        let exchange = async {
            let response =
                self.http.post(&self.endpoint).json(request).send().await.map_err(|error| self.transport(error))?;
            let status = response.status();
            if !status.is_success() {
                return Err(AgentCallError::ReceiveSuccess { url: self.config.url.clone(), status: status.as_u16() });
            }
            let body = response.bytes().await.map_err(|error| self.transport(error))?;
            serde_json::from_slice::<ScoreResponse>(&body)
                .map_err(|error| AgentCallError::ParseAnswer { message: error.to_string() })
        };
        // reqwest's own timeout normally fires first; this one also bounds anything reqwest does not cover.
        tokio::time::timeout(self.config.timeout, exchange).await.unwrap_or_else(|_| Err(self.timed_out()))
    }

    fn timed_out(&self) -> AgentCallError {
        AgentCallError::WaitForAnswer { url: self.config.url.clone(), timeout_ms: self.config.timeout.as_millis() }
    }

    fn transport(&self, source: reqwest::Error) -> AgentCallError {
        let url = self.config.url.clone();
        if source.is_timeout() {
            self.timed_out()
        } else if source.is_connect() {
            AgentCallError::ConnectToAgent { url, source }
        } else {
            AgentCallError::ExchangeWithAgent { url, source }
        }
    }

    fn lock_breaker(&self) -> MutexGuard<'_, Breaker> {
        // The breaker holds no invariant a panicking holder could break, so a poisoned lock is still usable.
        self.breaker.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
