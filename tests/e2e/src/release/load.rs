//! A tenant's GPU create load on an installed release, and what each create became: mutated (stored confined to
//! the tier), refused (an API error) or stored unconstrained. Does I/O (the API).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};

use super::{create_gpu_job, is_confined};
use crate::{HarnessError, ensure};

/// The time between two creates of the load.
pub const LOAD_PERIOD: Duration = Duration::from_millis(100);

/// How the load's creates are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Creates {
    /// Stored, then deleted once judged.
    Stored,
    /// `dryRun=All`: admitted (every webhook and admission policy runs) but never stored.
    DryRun,
}

/// What the load saw: every create's outcome.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Creates answered.
    pub created: usize,
    /// Answered 201 with the Job confined to the tier.
    pub mutated: usize,
    /// Refused: `(Job name, the API's message)`.
    pub refused: Vec<(String, String)>,
    /// Answered 201 with the Job not confined: each Job as stored, as JSON.
    pub unconstrained: Vec<String>,
    /// The slowest answer.
    pub slowest: Duration,
}

impl LoadReport {
    /// One line: the counts of each outcome and the slowest answer.
    pub fn summary(&self) -> String {
        format!(
            "{} creates: {} mutated, {} refused, {} stored unconstrained; the slowest took {} ms",
            self.created,
            self.mutated,
            self.refused.len(),
            self.unconstrained.len(),
            self.slowest.as_millis()
        )
    }

    /// Each distinct refusal (the Job's name replaced by `<job>`) with how often it was seen.
    pub fn refusal_kinds(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        for (name, message) in &self.refused {
            *kinds.entry(message.replace(&format!("\"{name}\""), "<job>")).or_default() += 1;
        }
        kinds
    }

    /// `Ok` when the load made creates and every one was mutated; else the error names `phase` and the first few
    /// that were not.
    pub fn ensure_clean(&self, phase: &str) -> Result<(), HarnessError> {
        ensure(self.created > 0 && self.refused.is_empty() && self.unconstrained.is_empty(), || {
            format!(
                "{phase}: {}; refused: {:?}; unconstrained: {:?}",
                self.summary(),
                self.refused.iter().take(5).collect::<Vec<_>>(),
                self.unconstrained.iter().take(5).collect::<Vec<_>>()
            )
        })
    }
}

/// A tenant creating a plain bronze GPU Job every [`LOAD_PERIOD`] (each create on its own task, so a slow answer
/// never delays the next) until stopped ([`Load::finish`], or dropped). A Job stored unconstrained is printed whole
/// the moment it is seen.
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    judged: Arc<AtomicUsize>,
    task: Option<tokio::task::JoinHandle<LoadReport>>,
}

impl Load {
    /// Starts creating in `namespace` as `tenant`; a Job is confined when it carries `queue` (and the class's
    /// placement, [`is_confined`]).
    pub fn start(tenant: &Client, namespace: &str, queue: &str, creates: Creates) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let judged = Arc::new(AtomicUsize::new(0));
        let (tenant, namespace, queue, stopping, counted) =
            (tenant.clone(), namespace.to_owned(), queue.to_owned(), Arc::clone(&stop), Arc::clone(&judged));
        let task = tokio::spawn(async move {
            let mut pending = tokio::task::JoinSet::new();
            let mut ticks = tokio::time::interval(LOAD_PERIOD);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut index = 0_usize;
            while !stopping.load(Ordering::Relaxed) {
                ticks.tick().await;
                index += 1;
                let (tenant, namespace, queue, counted) =
                    (tenant.clone(), namespace.clone(), queue.clone(), Arc::clone(&counted));
                pending.spawn(async move {
                    let outcome = create_and_judge(&tenant, &namespace, &queue, index, creates).await;
                    counted.fetch_add(1, Ordering::Relaxed);
                    outcome
                });
            }
            let mut report = LoadReport::default();
            while let Some(outcome) = pending.join_next().await {
                let Ok((name, took, outcome)) = outcome else { continue };
                report.created += 1;
                report.slowest = report.slowest.max(took);
                match outcome {
                    Outcome::Mutated => report.mutated += 1,
                    Outcome::Refused(message) => report.refused.push((name, message)),
                    Outcome::Unconstrained(job) => report.unconstrained.push(job),
                }
            }
            report
        });
        Self { stop, judged, task: Some(task) }
    }

    /// How many creates have been answered so far.
    pub fn judged(&self) -> usize {
        self.judged.load(Ordering::Relaxed)
    }

    /// Stops creating and waits for the answers still due: the report.
    pub async fn finish(mut self) -> Result<LoadReport, HarnessError> {
        self.stop.store(true, Ordering::Relaxed);
        let task = self.task.take().ok_or("the load was already finished")?;
        Ok(task.await?)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What one create became.
enum Outcome {
    Mutated,
    Refused(String),
    Unconstrained(String),
}

/// Creates Job `load-<index>` and judges the answer: the Job's name, how long the answer took, and the outcome.
async fn create_and_judge(
    tenant: &Client,
    namespace: &str,
    queue: &str,
    index: usize,
    creates: Creates,
) -> (String, Duration, Outcome) {
    let name = format!("load-{index}");
    let params = PostParams { dry_run: creates == Creates::DryRun, ..PostParams::default() };
    let began = Instant::now();
    let created = create_gpu_job(tenant, namespace, &name, &params).await;
    let took = began.elapsed();
    if created.is_ok() && creates == Creates::Stored {
        let jobs: Api<Job> = Api::namespaced(tenant.clone(), namespace);
        let _ = jobs.delete(&name, &DeleteParams::background()).await;
    }
    let outcome = match created {
        Ok(job) if is_confined(&job, queue) => Outcome::Mutated,
        Ok(job) => {
            let whole = serde_json::to_string(&job).unwrap_or_else(|error| format!("{job:?} ({error})"));
            println!("UNCONSTRAINED: Job {namespace}/{name} was admitted (201) not confined to {queue}: {whole}");
            Outcome::Unconstrained(whole)
        }
        Err(error) => Outcome::Refused(refusal_message(&error)),
    };
    (name, took, outcome)
}

/// What the API said when it refused a create: its status code, reason and message (not the whole status, which
/// repeats the message), or the client's error when no answer came.
fn refusal_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} {}: {}", status.code, status.reason, status.message),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_grouped_by_message_without_the_job_name() {
        let report = LoadReport {
            refused: vec![
                ("load-1".to_owned(), "jobs.batch \"load-1\" is forbidden: no".to_owned()),
                ("load-2".to_owned(), "jobs.batch \"load-2\" is forbidden: no".to_owned()),
                ("load-3".to_owned(), "timeout".to_owned()),
            ],
            ..LoadReport::default()
        };
        let kinds = report.refusal_kinds();
        assert_eq!(kinds.get("jobs.batch <job> is forbidden: no"), Some(&2));
        assert_eq!(kinds.get("timeout"), Some(&1));
    }
}
