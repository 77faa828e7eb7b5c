//! Scheduler-agent scores: which workloads are scored, the `/v1/score` client (timeout, breaker, cache, bounded
//! concurrency), priority buckets and the built-in scorer. Network I/O only in [`client`]; the rest is pure.
//!
//! See docs/guides/scoring.md for the wire format, the outcome of every failure mode and the built-in formula.

pub mod agent_server;
pub mod breaker;
pub mod client;

pub use tiergate_core::scoring::*;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::metrics::{AgentLabels, Metrics};
use crate::policy::PriorityBucket;
use crate::request::Request;
use crate::view::Snapshot;
use answer::{AgentAnswer, build_answer};
use client::{AgentCallError, AgentClient, AgentConfig};
use features::ScoringJob;

/// Scores workloads with the agent or the built-in scorer; shared by all webhook requests.
///
/// Settings are read from `snapshot.policy.spec.scoring` on every call, so a policy change takes effect on the
/// next request (a changed agent configuration rebuilds the client, resetting its breaker and cache).
#[derive(Debug)]
pub struct Scorer {
    agent_url: Option<String>,
    metrics: Arc<Metrics>,
    client: Mutex<Option<Arc<AgentClient>>>,
    timeout_cap: Option<Duration>,
}

impl Default for Scorer {
    /// No `--agent-url` override and private metrics: the policy's `spec.scoring.url`, else the built-in scorer.
    fn default() -> Self {
        Self::new(None, Arc::new(Metrics::default()))
    }
}

impl Scorer {
    /// A scorer reporting to `metrics`; `agent_url` (`--agent-url`) beats the policy's `spec.scoring.url`.
    pub fn new(agent_url: Option<String>, metrics: Arc<Metrics>) -> Self {
        let agent_url = agent_url.filter(|url| !url.trim().is_empty());
        Self { agent_url, metrics, client: Mutex::new(None), timeout_cap: None }
    }

    /// Caps every agent call at `cap` whatever the policy's `spec.scoring.timeoutMs` says, so scoring always ends
    /// before the webhook's decision deadline.
    pub fn with_timeout_cap(self, cap: Duration) -> Self {
        Self { timeout_cap: Some(cap), ..self }
    }

    /// The score for a scorable workload (a GPU job with a job type in a tiered namespace), `None` otherwise.
    /// Never fails: agent problems become a `Fallback` outcome.
    pub async fn score_for(&self, request: &Request, snapshot: &Snapshot) -> Option<ScoreOutcome> {
        let policy = snapshot.policy.as_deref()?;
        let settings = &policy.spec.scoring;
        if !settings.enabled {
            return None;
        }
        let job = features::scoring_job(request, snapshot, &policy.spec)?;
        let url = self.agent_url.clone().or_else(|| settings.url.clone().filter(|url| !url.trim().is_empty()));
        let result = match url {
            None => {
                let response = builtin::builtin_response(
                    &job.request,
                    &policy.spec.gpu_classes,
                    &snapshot.gpu_class_digest().inventory,
                );
                let answer = build_answer(&response, &job.tier.name, &job.candidates).map_err(AgentCallError::from);
                self.metrics.agent_calls.get_or_create(&AgentLabels { outcome: "builtin" }).inc();
                answer.map(|answer| (answer, ScoreSource::BuiltIn))
            }
            Some(url) => match self.client_for(self.capped(AgentConfig::new(url, settings))) {
                Ok(client) => client
                    .answer(&job.tier.name, &job.candidates, &job.request)
                    .await
                    .map(|answered| (answered.answer, ScoreSource::Agent)),
                Err(error) => {
                    self.metrics.agent_calls.get_or_create(&AgentLabels { outcome: error.reason() }).inc();
                    Err(error)
                }
            },
        };
        match &result {
            // Expected while the breaker is open or the slots are full; the breaker logs its own transitions.
            Err(error) if matches!(error.reason(), "breaker_open" | "busy") => {
                tracing::debug!(reason = error.reason(), %error, "scoring fell back to the tier's default priority");
            }
            Err(error) => {
                let cause = std::error::Error::source(error).map(ToString::to_string).unwrap_or_default();
                tracing::warn!(reason = error.reason(), %error, cause, tier = %job.tier.name, "scoring fell back to the tier's default priority");
            }
            Ok(_) => {}
        }
        let outcome = build_outcome(&job, result.as_ref(), &policy.spec.priority_buckets, unix_now());
        if outcome.is_none() {
            tracing::warn!(tier = %job.tier.name, "no priority class for a scored job: the policy has no priority buckets");
        }
        outcome
    }

    fn capped(&self, config: AgentConfig) -> AgentConfig {
        match self.timeout_cap {
            Some(cap) if config.timeout > cap => AgentConfig { timeout: cap, ..config },
            _ => config,
        }
    }

    /// The client for `config`, reusing the current one while the configuration is unchanged.
    fn client_for(&self, config: AgentConfig) -> Result<Arc<AgentClient>, AgentCallError> {
        let mut slot = self.client.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = slot.as_ref().filter(|client| client.config() == &config) {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(AgentClient::new(config, Arc::clone(&self.metrics))?);
        *slot = Some(Arc::clone(&client));
        Ok(client)
    }
}

/// The outcome for a scored job: the answer's bucket, or the tier's default priority with the failure's reason
/// and message. `None` only when the policy has no bucket to fall back to.
pub fn build_outcome(
    job: &ScoringJob<'_>,
    result: Result<&(AgentAnswer, ScoreSource), &AgentCallError>,
    buckets: &[PriorityBucket],
    decided_at_unix: i64,
) -> Option<ScoreOutcome> {
    let default_class = buckets::default_priority_class(job.tier, buckets);
    let mut warnings = job.warnings.clone();
    warnings.extend(builtin::memory_shortfall_warning(
        job.request.features.gpu_mem_gb,
        &job.tier.name,
        &job.candidates,
    ));
    match result {
        Ok((answer, source)) => {
            warnings.extend(answer.warnings.iter().cloned());
            let mut priority_class = match buckets::bucket_for(answer.score, buckets) {
                Ok(bucket) => bucket.name.clone(),
                Err(error) => {
                    let class = default_class?;
                    warnings.push(format!("{error}; using {class}, the default of tier {}", job.tier.name));
                    class
                }
            };
            if let Some(Some(ceiling)) =
                buckets::check_priority_ceiling(&priority_class, job.tier, buckets).replacement()
            {
                warnings.push(format!(
                    "score {} maps to priority class {priority_class}, above tier {}'s ceiling; clamped to {ceiling}",
                    answer.score, job.tier.name
                ));
                priority_class = ceiling.to_owned();
            }
            Some(ScoreOutcome {
                priority_class,
                score: Some(answer.score),
                chosen_gpu_class: answer.chosen_gpu_class.clone(),
                avoid_job_types: answer.avoid_job_types.clone(),
                source: source.clone(),
                warnings,
                decided_at_unix,
            })
        }
        Err(error) => {
            let class = default_class?;
            warnings
                .push(format!("{error}; admitted with priority class {class}, the default of tier {}", job.tier.name));
            Some(ScoreOutcome {
                priority_class: class,
                score: None,
                chosen_gpu_class: None,
                avoid_job_types: vec![],
                source: ScoreSource::Fallback { reason: error.reason() },
                warnings,
                decided_at_unix,
            })
        }
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
#[path = "../../core/src/scoring/test_support.rs"]
#[allow(dead_code, reason = "shared with the core's scoring tests, which use the builders this crate's tests do not")]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;
