//! Prometheus metrics: every family tiergate exports, registered in one place and encoded for `/metrics`; no I/O.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label set naming a fixed reason (an error's `reason()`, never its text).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Fixed reason string.
    pub reason: &'static str,
}

/// Label set naming a Kubernetes kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Kind, e.g. `ClusterQueue`.
    pub kind: &'static str,
}

/// Label set of admission requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// Workload kind, or `unknown`.
    pub kind: &'static str,
    /// Decision: [`DecisionLabel::as_str`] (`Skipped`, `Mutated`, `Denied`, `Invalid`, `FailedOpen`,
    /// `FailedClosed`).
    pub decision: &'static str,
}

/// Outcome of a scheduler-agent call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabels {
    /// `ok`, `ignored_gpu`, `cached`, `builtin`, `timeout`, `refused`, `transport_error`, `http_error`, `garbage`,
    /// `out_of_range`, `breaker_open`, `busy`, `bad_url`, `client_error` (see docs/guides/scoring.md).
    pub outcome: &'static str,
}

/// Label set of a tier's counted use of one resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierResourceLabels {
    /// Tier name.
    pub tier: String,
    /// Resource name, e.g. `nvidia.com/gpu`.
    pub resource: String,
}

/// Label set of a tenant namespace's counted use of one resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceResourceLabels {
    /// Namespace.
    pub namespace: String,
    /// Resource name, e.g. `nvidia.com/gpu`.
    pub resource: String,
}

/// A counter of resource-seconds (fractional: a pod set may hold half a CPU).
pub type SecondsCounter = Counter<f64, std::sync::atomic::AtomicU64>;
/// A gauge of resource-seconds.
pub type SecondsGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Every metric family tiergate exports. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconcile errors by reason.
    pub reconcile_errors: Family<ReasonLabels, Counter>,
    /// API writes (apply, delete, status) made by the reconciler, by kind.
    pub api_writes: Family<KindLabels, Counter>,
    /// Owned objects by kind, as last applied.
    pub owned_objects: Family<KindLabels, Gauge>,
    /// Reconcile requests waiting.
    pub queue_depth: Gauge,
    /// 1 while this replica holds the leader Lease.
    pub lease_held: Gauge,
    /// Leader Lease transitions lost by this replica.
    pub lease_lost: Counter,
    /// Seconds since the caches last heard from the API server.
    pub cache_staleness_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Admission requests by kind and decision.
    pub admission_requests: Family<AdmissionLabels, Counter>,
    /// Admission denials by reason.
    pub admission_denials: Family<ReasonLabels, Counter>,
    /// Admissions answered unchanged because of an internal error, by reason.
    pub admission_fail_open: Family<ReasonLabels, Counter>,
    /// Requests refused before their body was read (`inflight_bytes`, `inflight_requests`, `body_too_large`).
    pub admission_refused: Family<ReasonLabels, Counter>,
    /// Seconds spent deciding one admission request (server side, including scoring).
    pub admission_latency_seconds: Histogram,
    /// Scheduler-agent calls by outcome.
    pub agent_calls: Family<AgentLabels, Counter>,
    /// Seconds per scheduler-agent call.
    pub agent_latency_seconds: Histogram,
    /// 1 while the agent's circuit breaker is open.
    pub agent_breaker_open: Gauge,
    /// Pods given a placement rule, by fixed outcome.
    pub placement_assignments: Family<ReasonLabels, Counter>,
    /// Unix time the serving certificate expires.
    pub certificate_expiry_timestamp_seconds: Gauge,
    /// Serving certificate reloads, by outcome.
    pub certificate_reloads: Family<ReasonLabels, Counter>,
    /// 1 while a reason keeps the daemon from doing its job, by fixed reason (`crate::blockers::BlockedReason`).
    pub blocked: Family<ReasonLabels, Gauge>,
    /// 1 while the cluster does not serve a feature tiergate does without as designed, by fixed reason.
    pub not_served: Family<ReasonLabels, Gauge>,
    /// Resource-seconds counted per tier, as the leading replica's checkpoints add them.
    pub usage_tier_seconds: Family<TierResourceLabels, SecondsCounter>,
    /// Resource-seconds counted per tenant namespace.
    pub usage_namespace_seconds: Family<NamespaceResourceLabels, SecondsCounter>,
    /// A budgeted tier's use of a limited resource this period (or in its budget's rolling window), resource-seconds,
    /// as of the last checkpoint.
    pub budget_used_seconds: Family<TierResourceLabels, SecondsGauge>,
    /// A budgeted tier's limit of that resource per period (or window), resource-seconds.
    pub budget_limit_seconds: Family<TierResourceLabels, SecondsGauge>,
    /// When the last usage checkpoint was written (Unix seconds; 0 before the first).
    pub usage_checkpoint_timestamp_seconds: Gauge,
    /// Usage checkpoints written to the policy status (each one of `api_writes`, kind TierPolicy).
    pub usage_checkpoints: Counter,
    /// Usage checkpoints that failed, by reason.
    pub usage_checkpoint_errors: Family<ReasonLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every family registered under the `tiergate_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tiergate");
        let latency_buckets = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
        let metrics = Self {
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            api_writes: Family::default(),
            owned_objects: Family::default(),
            queue_depth: Gauge::default(),
            lease_held: Gauge::default(),
            lease_lost: Counter::default(),
            cache_staleness_seconds: Gauge::default(),
            admission_requests: Family::default(),
            admission_denials: Family::default(),
            admission_fail_open: Family::default(),
            admission_refused: Family::default(),
            admission_latency_seconds: Histogram::new(latency_buckets),
            agent_calls: Family::default(),
            agent_latency_seconds: Histogram::new(latency_buckets),
            agent_breaker_open: Gauge::default(),
            placement_assignments: Family::default(),
            certificate_expiry_timestamp_seconds: Gauge::default(),
            certificate_reloads: Family::default(),
            blocked: Family::default(),
            not_served: Family::default(),
            usage_tier_seconds: Family::default(),
            usage_namespace_seconds: Family::default(),
            budget_used_seconds: Family::default(),
            budget_limit_seconds: Family::default(),
            usage_checkpoint_timestamp_seconds: Gauge::default(),
            usage_checkpoints: Counter::default(),
            usage_checkpoint_errors: Family::default(),
            registry: Registry::default(),
        };
        registry.register("reconciles", "Reconciles run", metrics.reconciles.clone());
        registry.register("reconcile_errors", "Reconcile errors by reason", metrics.reconcile_errors.clone());
        registry.register("api_writes", "API writes by kind", metrics.api_writes.clone());
        registry.register("owned_objects", "Owned objects by kind", metrics.owned_objects.clone());
        registry.register("queue_depth", "Reconcile requests waiting", metrics.queue_depth.clone());
        registry.register("lease_held", "1 while this replica holds the leader lease", metrics.lease_held.clone());
        registry.register("lease_lost", "Leader leases lost", metrics.lease_lost.clone());
        registry.register(
            "cache_staleness_seconds",
            "Seconds since the caches last heard from the API server",
            metrics.cache_staleness_seconds.clone(),
        );
        registry.register(
            "admission_requests",
            "Admission requests by kind and decision",
            metrics.admission_requests.clone(),
        );
        registry.register("admission_denials", "Admission denials by reason", metrics.admission_denials.clone());
        registry.register(
            "admission_fail_open",
            "Admissions answered unchanged after an internal error",
            metrics.admission_fail_open.clone(),
        );
        registry.register(
            "admission_refused",
            "Admission requests refused over the webhook's limits (429, 413) by reason",
            metrics.admission_refused.clone(),
        );
        registry.register(
            "admission_latency_seconds",
            "Seconds spent deciding one admission request",
            metrics.admission_latency_seconds.clone(),
        );
        registry.register("agent_calls", "Scheduler-agent calls by outcome", metrics.agent_calls.clone());
        registry.register(
            "agent_latency_seconds",
            "Seconds per scheduler-agent call",
            metrics.agent_latency_seconds.clone(),
        );
        registry.register(
            "agent_breaker_open",
            "1 while the agent circuit breaker is open",
            metrics.agent_breaker_open.clone(),
        );
        registry.register(
            "placement_assignments",
            "Pods given a placement rule",
            metrics.placement_assignments.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "Unix time the serving certificate expires",
            metrics.certificate_expiry_timestamp_seconds.clone(),
        );
        registry.register(
            "certificate_reloads",
            "Serving certificate reloads by outcome",
            metrics.certificate_reloads.clone(),
        );
        registry.register(
            "blocked",
            "1 while a reason keeps tiergate from reconciling or serving, by reason",
            metrics.blocked.clone(),
        );
        registry.register(
            "not_served",
            "1 while the cluster does not serve a feature tiergate then does without, by reason",
            metrics.not_served.clone(),
        );
        registry.register(
            "usage_tier_resource_seconds",
            "Resource-seconds admitted workloads used, per tier and resource (counted by the leader)",
            metrics.usage_tier_seconds.clone(),
        );
        registry.register(
            "usage_namespace_resource_seconds",
            "Resource-seconds admitted workloads used, per tenant namespace and resource (counted by the leader)",
            metrics.usage_namespace_seconds.clone(),
        );
        registry.register(
            "budget_used_resource_seconds",
            "A budgeted tier's use of a limited resource this period (or in its budget's rolling window), as of the last \
             checkpoint",
            metrics.budget_used_seconds.clone(),
        );
        registry.register(
            "budget_limit_resource_seconds",
            "A budgeted tier's limit of a resource per period (or window)",
            metrics.budget_limit_seconds.clone(),
        );
        registry.register(
            "usage_checkpoint_timestamp_seconds",
            "When the last usage checkpoint was written (Unix seconds)",
            metrics.usage_checkpoint_timestamp_seconds.clone(),
        );
        registry.register(
            "usage_checkpoints",
            "Usage checkpoints written to the policy status (also counted in api_writes)",
            metrics.usage_checkpoints.clone(),
        );
        registry.register(
            "usage_checkpoint_errors",
            "Usage checkpoints that failed, by reason",
            metrics.usage_checkpoint_errors.clone(),
        );
        Self { registry, ..metrics }
    }

    /// The Prometheus text exposition of every family.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl tiergate_core::placement::AssignmentCounter for Metrics {
    fn count_assignment(&self, reason: &'static str) {
        self.placement_assignments.get_or_create(&ReasonLabels { reason }).inc();
    }
}
