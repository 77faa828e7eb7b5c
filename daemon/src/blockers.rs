//! The one place that knows why the daemon is up but not doing its job: a fixed set of [`BlockedReason`]s, each
//! with a message naming the fix, set and cleared by the Lease loop, the controller, the cache and fleet monitor
//! and the certificate check, and read by `/readyz`, the `tiergate_blocked{reason}` gauges, the repeating log
//! ([`log`]) and the served policy's `Blocked` condition. The registry does no I/O; [`log`] logs, and
//! `reconcile::monitor` polls the caches, the fleet, Kueue's Configuration and the certificate file. It imports
//! only `metrics`, so every other module may feed or read it without an import circle.

pub mod log;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use crate::metrics::{Metrics, ReasonLabels};

/// Every reason tiergate can be running yet not reconciling (or not serving). The label of each is fixed: it is
/// the `reason` of `tiergate_blocked`, and in CamelCase the reason of the policy's `Blocked` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockedReason {
    /// The Lease's namespace (`--namespace`) does not exist, so no replica can lead.
    LeaseNamespaceMissing,
    /// RBAC forbids reading or writing the Lease.
    LeaseForbidden,
    /// The Lease is held by a tiergate instance that serves another policy (two instances share `--lease-name`).
    LeaseConflict,
    /// The Lease cannot be read or written for another reason (API server unreachable, ...).
    LeaseUnavailable,
    /// The served TierPolicy does not exist (others may).
    PolicyNotFound,
    /// The served TierPolicy is invalid: the last valid state stays applied.
    PolicyInvalid,
    /// Kueue's API (`kueue.x-k8s.io/v1beta2` and its kinds) is not served: not installed, or too old.
    KueueMissing,
    /// A watched resource is not served by the API server (a CRD is missing).
    CrdMissing,
    /// RBAC forbids a watch.
    WatchForbidden,
    /// Watches fail for another reason (API server unreachable or erroring).
    ApiUnreachable,
    /// RBAC forbids a write the reconciler must make.
    WriteForbidden,
    /// The reconcile fails for another reason and is retried with backoff.
    ReconcileFailing,
    /// A worker cluster of the fleet cannot be reached or has no credentials.
    WorkerUnreachable,
    /// Kueue's Configuration does not map every DRA class's DeviceClass to the class's resource (or cannot be read),
    /// so Kueue does not charge those claims to the tiers' quota.
    KueueDraMappingMissing,
    /// Kueue's Configuration lacks the `admissionFairSharing` the policy's sharing tiers need (or it differs, or
    /// cannot be read), so their tenants are ordered first come, first served.
    KueueFairSharingMissing,
    /// The policy renders Karpenter NodePools, but the API server does not serve `karpenter.sh/v1` NodePools.
    KarpenterMissing,
    /// The API server does not serve ValidatingAdmissionPolicy, so the in-server gate cannot be applied.
    GateNotServed,
    /// The API server does not serve MutatingAdmissionPolicy (before Kubernetes 1.36), so the in-server gate is its
    /// validating half only: a notice, not a fault.
    MutatingGateNotServed,
    /// The policy has DRA GPU classes, but the API server does not serve `resource.k8s.io/v1` DeviceClasses.
    DraNotServed,
    /// The API server dropped fields tiergate applied to Kueue objects (an older Kueue CRD prunes them).
    KueueFieldDropped,
    /// The webhook's serving certificate file is missing or unreadable.
    CertificateMissing,
    /// The webhook's serving certificate has expired.
    CertificateExpired,
}

/// How loudly a blocker is logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Nothing at all is reconciled, or the webhook cannot serve.
    Error,
    /// Part of the job is not done, or the last good state is kept.
    Warn,
    /// The cluster does not serve a feature tiergate would use, and tiergate does without it as designed: logged
    /// once, listed by `/readyz` and `tiergate_not_served{reason}`, never in `tiergate_blocked` or `Blocked`.
    Notice,
}

impl BlockedReason {
    /// Every reason, in a fixed order (the gauges are registered for each, 0 or 1).
    pub const ALL: [Self; 22] = [
        Self::LeaseNamespaceMissing,
        Self::LeaseForbidden,
        Self::LeaseConflict,
        Self::LeaseUnavailable,
        Self::PolicyNotFound,
        Self::PolicyInvalid,
        Self::KueueMissing,
        Self::CrdMissing,
        Self::WatchForbidden,
        Self::ApiUnreachable,
        Self::WriteForbidden,
        Self::ReconcileFailing,
        Self::WorkerUnreachable,
        Self::KueueDraMappingMissing,
        Self::KueueFairSharingMissing,
        Self::KarpenterMissing,
        Self::GateNotServed,
        Self::MutatingGateNotServed,
        Self::DraNotServed,
        Self::KueueFieldDropped,
        Self::CertificateMissing,
        Self::CertificateExpired,
    ];

    /// Fixed snake_case label (`tiergate_blocked{reason}`).
    pub fn label(self) -> &'static str {
        match self {
            Self::LeaseNamespaceMissing => "lease_namespace_missing",
            Self::LeaseForbidden => "lease_forbidden",
            Self::LeaseConflict => "lease_conflict",
            Self::LeaseUnavailable => "lease_unavailable",
            Self::PolicyNotFound => "policy_not_found",
            Self::PolicyInvalid => "policy_invalid",
            Self::KueueMissing => "kueue_missing",
            Self::CrdMissing => "crd_missing",
            Self::WatchForbidden => "watch_forbidden",
            Self::ApiUnreachable => "api_unreachable",
            Self::WriteForbidden => "write_forbidden",
            Self::ReconcileFailing => "reconcile_failing",
            Self::WorkerUnreachable => "worker_unreachable",
            Self::KueueDraMappingMissing => "kueue_dra_mapping_missing",
            Self::KueueFairSharingMissing => "kueue_fair_sharing_missing",
            Self::KarpenterMissing => "karpenter_missing",
            Self::GateNotServed => "gate_not_served",
            Self::MutatingGateNotServed => "mutating_gate_not_served",
            Self::DraNotServed => "dra_not_served",
            Self::KueueFieldDropped => "kueue_field_dropped",
            Self::CertificateMissing => "certificate_missing",
            Self::CertificateExpired => "certificate_expired",
        }
    }

    /// What is wrong, in a few words.
    pub fn summary(self) -> &'static str {
        match self {
            Self::LeaseNamespaceMissing => "no replica can lead: the leader Lease's namespace does not exist",
            Self::LeaseForbidden => "no replica can lead: RBAC forbids the leader Lease",
            Self::LeaseConflict => "not leading: the leader Lease is held by a tiergate serving another policy",
            Self::LeaseUnavailable => "no replica can lead: the leader Lease cannot be read or written",
            Self::PolicyNotFound => "nothing to reconcile: the served TierPolicy does not exist",
            Self::PolicyInvalid => "the TierPolicy is invalid: its last valid state stays applied",
            Self::KueueMissing => "nothing is applied: Kueue's v1beta2 API is not served",
            Self::CrdMissing => "a watched resource is not served (its CRD is missing)",
            Self::WatchForbidden => "RBAC forbids a watch, so the caches never sync",
            Self::ApiUnreachable => "watches fail: the API server is unreachable or erroring",
            Self::WriteForbidden => "RBAC forbids a write the reconciler must make",
            Self::ReconcileFailing => "the reconcile fails and is retried with backoff",
            Self::WorkerUnreachable => "a worker cluster of the fleet is not reconciled",
            Self::KueueDraMappingMissing => {
                "Kueue does not charge the policy's DRA claims to the tiers' quota: its deviceClassMappings lack a DRA \
                 class"
            }
            Self::KueueFairSharingMissing => {
                "a tier shares fairly among its tenants, but Kueue's admissionFairSharing is missing or differs: \
                 its tenants are ordered first come, first served"
            }
            Self::KarpenterMissing => {
                "GPU classes have a karpenter template, but the API server does not serve Karpenter's v1 NodePool: \
                 their NodePools are not applied (everything else is)"
            }
            Self::GateNotServed => {
                "the in-server gate is not applied: the API server does not serve ValidatingAdmissionPolicy \
                 (admissionregistration.k8s.io/v1), so a GPU workload the webhook does not answer for is stored \
                 unconstrained"
            }
            Self::MutatingGateNotServed => {
                "the in-server gate is its validating half only: the API server does not serve \
                 MutatingAdmissionPolicy (Kubernetes 1.36+), so while the webhook does not answer, a GPU workload \
                 without its tier's queue and class is refused instead of given them"
            }
            Self::DraNotServed => {
                "the policy's DRA GPU classes have no DeviceClasses: the API server does not serve resource.k8s.io/v1 \
                 deviceclasses (Kubernetes 1.34+), so no claim can select those classes (everything else is applied)"
            }
            Self::KueueFieldDropped => {
                "the API server dropped fields tiergate applied to Kueue objects (the installed Kueue CRDs do not \
                 know them): those objects run without them, and are not re-applied until the policy changes"
            }
            Self::CertificateMissing => "the webhook cannot serve: its certificate file is missing",
            Self::CertificateExpired => "the webhook's certificate has expired: the API server refuses it",
        }
    }

    /// How to fix it.
    pub fn fix(self) -> &'static str {
        match self {
            Self::LeaseNamespaceMissing => {
                "create it (`kubectl create namespace <namespace>`), run with --create-lease-namespace, or point \
                 --namespace at an existing namespace"
            }
            Self::LeaseForbidden => {
                "grant get, create, update on leases.coordination.k8s.io in --namespace (the chart's Role does; \
                 check `kubectl auth can-i update leases -n <namespace>`)"
            }
            Self::LeaseConflict => {
                "give each tiergate instance its own --lease-name (or serve the same --policy-name from both)"
            }
            Self::LeaseUnavailable => "check the API server's health and this replica's network path to it",
            Self::PolicyNotFound => {
                "apply a TierPolicy with this name, or restart with --policy-name naming an existing one \
                 (`kubectl get tierpolicies`)"
            }
            Self::PolicyInvalid => {
                "fix the fields named (`kubectl describe tierpolicy <name>`; `tiergate render` checks offline)"
            }
            Self::KueueMissing => {
                "install Kueue v0.15 or newer (kubectl apply --server-side -f \
                 https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml)"
            }
            Self::CrdMissing => {
                "install the missing CRDs: Kueue's for Kueue kinds, `tiergate crd | kubectl apply -f -` for TierPolicy"
            }
            Self::WatchForbidden => {
                "grant list and watch on the named resources (the chart's ClusterRole does; see docs/operations.md, RBAC)"
            }
            Self::ApiUnreachable => "check the API server's health, the kubeconfig and the NetworkPolicy egress",
            Self::WriteForbidden => {
                "grant the verbs in docs/operations.md, RBAC (the chart's ClusterRole does; `kubectl auth can-i`)"
            }
            Self::ReconcileFailing => "read the TierPolicy's status.lastError; the error names the failed action",
            Self::WorkerUnreachable => {
                "check the worker's kubeconfig Secret in --kueue-namespace and its API server (the policy's \
                 WorkerReachable-<cluster> condition says which)"
            }
            Self::KueueDraMappingMissing => {
                "merge the mappings `tiergate render --kueue-config` prints into key controller_manager_config.yaml \
                 of ConfigMap kueue-manager-config in Kueue's namespace (--kueue-namespace), then restart Kueue \
                 (`kubectl -n kueue-system rollout restart deployment/kueue-controller-manager`); a read answered \
                 403 needs get on that ConfigMap (the chart's Role grants it)"
            }
            Self::KueueFairSharingMissing => {
                "add the admissionFairSharing block `tiergate render --kueue-config` prints at the top level of key \
                 controller_manager_config.yaml of ConfigMap kueue-manager-config in Kueue's namespace \
                 (--kueue-namespace), then restart Kueue; or set the tiers' tenantFairSharing to false"
            }
            Self::KarpenterMissing => {
                "install Karpenter v1 or newer (its NodePool CRD, karpenter.sh/v1) and restart tiergate, or remove the \
                 classes' `karpenter` templates to manage NodePools yourself"
            }
            Self::GateNotServed => {
                "run Kubernetes 1.33 or newer (ValidatingAdmissionPolicy v1 is served from 1.30), or register the \
                 webhook with failurePolicy Fail (chart value webhook.failurePolicy) so the API server refuses what \
                 the webhook does not answer"
            }
            Self::MutatingGateNotServed => {
                "nothing to do for the boundary (the validating half holds it); on Kubernetes 1.36+ the mutating half \
                 is applied by itself"
            }
            Self::DraNotServed => {
                "run Kubernetes 1.34 or newer (DRA is GA there), or remove the classes' `dra` blocks and use \
                 extended resources (`tiergate check --kubeconfig` lists what the cluster serves)"
            }
            Self::KueueFieldDropped => {
                "upgrade Kueue (its CRDs) to a release that serves the fields named (docs/operations.md, Supported \
                 versions), or remove the policy fields that render them; `tiergate check --kubeconfig` finds them \
                 before an install"
            }
            Self::CertificateMissing => {
                "with cert-manager, check the Certificate (`kubectl describe certificate`); with \
                 --self-managed-certs, read the certificate loop's log lines"
            }
            Self::CertificateExpired => {
                "renew it: check cert-manager's Certificate, or restart with --self-managed-certs to let tiergate rotate it"
            }
        }
    }

    /// How loudly it is logged.
    pub fn severity(self) -> Severity {
        match self {
            Self::PolicyInvalid
            | Self::WorkerUnreachable
            | Self::ReconcileFailing
            | Self::LeaseConflict
            | Self::KueueDraMappingMissing
            | Self::KueueFairSharingMissing
            | Self::KarpenterMissing
            | Self::DraNotServed
            | Self::KueueFieldDropped => Severity::Warn,
            Self::MutatingGateNotServed => Severity::Notice,
            _ => Severity::Error,
        }
    }

    /// Whether it belongs in the served policy's `Blocked` condition: everything about reconciling it, not the
    /// webhook's certificate (a replica's own file, missing for a moment at every start with self-managed
    /// certificates: the condition would flap and a restart would write the status twice).
    pub fn is_about_the_policy(self) -> bool {
        !matches!(self, Self::CertificateMissing | Self::CertificateExpired) && self.severity() != Severity::Notice
    }

    /// Whether `/readyz` turns 503 for it: only when the webhook itself cannot serve. Every other blocker keeps the
    /// replica ready (the webhook still decides from synced caches) and is listed in the body.
    pub fn blocks_readiness(self) -> bool {
        matches!(self, Self::CertificateMissing | Self::CertificateExpired)
    }
}

/// One active blocker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// Why.
    pub reason: BlockedReason,
    /// The specifics (names, the failing watches, the API server's answer).
    pub detail: String,
}

impl Blocker {
    /// One line for people: what, the specifics, the fix.
    pub fn describe(&self) -> String {
        format!("{} ({}). Fix: {}", self.reason.summary(), self.detail, self.reason.fix())
    }
}

/// The active blockers, shared by everything that sets and reads them. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Blockers {
    active: Mutex<BTreeMap<BlockedReason, String>>,
    gauges: Family<ReasonLabels, Gauge>,
    /// The gauges of [`Severity::Notice`] reasons (`tiergate_not_served`).
    notices: Family<ReasonLabels, Gauge>,
    changes: watch::Sender<u64>,
}

impl Blockers {
    /// No blocker, every `tiergate_blocked{reason}` (and, for notices, `tiergate_not_served{reason}`) gauge
    /// registered at 0.
    pub fn new(metrics: &Metrics) -> Arc<Self> {
        let blockers = Self {
            active: Mutex::default(),
            gauges: metrics.blocked.clone(),
            notices: metrics.not_served.clone(),
            changes: watch::channel(0).0,
        };
        for reason in BlockedReason::ALL {
            blockers.gauge(reason).set(0);
        }
        Arc::new(blockers)
    }

    /// A registry whose gauges are not exported (tests, and reconcilers whose blockers nobody reads).
    pub fn detached() -> Arc<Self> {
        Arc::new(Self {
            active: Mutex::default(),
            gauges: Family::default(),
            notices: Family::default(),
            changes: watch::channel(0).0,
        })
    }

    fn gauge(&self, reason: BlockedReason) -> Gauge {
        let family = if reason.severity() == Severity::Notice { &self.notices } else { &self.gauges };
        family.get_or_create(&ReasonLabels { reason: reason.label() }).clone()
    }

    /// Marks `reason` active with `detail` (replacing an earlier detail). Subscribers wake only when the set of
    /// reasons changes, so a detail that varies never re-triggers a reconcile by itself.
    pub fn set(&self, reason: BlockedReason, detail: impl Into<String>) {
        let detail = detail.into();
        let Ok(mut active) = self.active.lock() else { return };
        let added = active.insert(reason, detail).is_none();
        drop(active);
        if added {
            self.gauge(reason).set(1);
            self.changes.send_modify(|version| *version = version.wrapping_add(1));
        }
    }

    /// Clears `reason` if it was active.
    pub fn clear(&self, reason: BlockedReason) {
        let removed = self.active.lock().is_ok_and(|mut active| active.remove(&reason).is_some());
        if removed {
            self.gauge(reason).set(0);
            self.changes.send_modify(|version| *version = version.wrapping_add(1));
        }
    }

    /// Sets `reason` with `detail` when given, else clears it.
    pub fn update(&self, reason: BlockedReason, detail: Option<String>) {
        match detail {
            Some(detail) => self.set(reason, detail),
            None => self.clear(reason),
        }
    }

    /// Whether `reason` is active.
    pub fn is_active(&self, reason: BlockedReason) -> bool {
        self.active.lock().is_ok_and(|active| active.contains_key(&reason))
    }

    /// Every active blocker, in [`BlockedReason::ALL`] order.
    pub fn active(&self) -> Vec<Blocker> {
        self.active
            .lock()
            .map(|active| {
                active.iter().map(|(reason, detail)| Blocker { reason: *reason, detail: detail.clone() }).collect()
            })
            .unwrap_or_default()
    }

    /// Bumped whenever a reason becomes active or is cleared.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

impl BlockedReason {
    /// The fixed condition reason (`lease_namespace_missing` -> `LeaseNamespaceMissing`).
    pub fn condition_reason(self) -> String {
        tiergate_core::syntax::condition_reason(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_a_distinct_label_a_summary_and_a_fix() {
        let labels: std::collections::BTreeSet<&str> = BlockedReason::ALL.iter().map(|reason| reason.label()).collect();
        assert_eq!(labels.len(), BlockedReason::ALL.len());
        for reason in BlockedReason::ALL {
            assert!(!reason.summary().is_empty() && !reason.fix().is_empty(), "{reason:?}");
            assert!(reason.label().chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{reason:?}");
        }
    }

    #[test]
    fn a_blocker_sets_its_gauge_and_wakes_subscribers_only_when_the_set_of_reasons_changes() {
        let metrics = Metrics::new();
        let blockers = Blockers::new(&metrics);
        let mut changes = blockers.subscribe();
        let text = metrics.encode().unwrap();
        assert!(text.contains(r#"tiergate_blocked{reason="lease_namespace_missing"} 0"#), "{text}");
        blockers.set(BlockedReason::LeaseNamespaceMissing, "namespace \"tiergate-system\" not found");
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        blockers.set(BlockedReason::LeaseNamespaceMissing, "another detail");
        assert!(!changes.has_changed().unwrap(), "a new detail alone must not wake anyone");
        let text = metrics.encode().unwrap();
        assert!(text.contains(r#"tiergate_blocked{reason="lease_namespace_missing"} 1"#), "{text}");
        assert_eq!(blockers.active()[0].detail, "another detail");
        blockers.clear(BlockedReason::LeaseNamespaceMissing);
        assert!(changes.has_changed().unwrap());
        assert!(blockers.active().is_empty());
        assert!(metrics.encode().unwrap().contains(r#"tiergate_blocked{reason="lease_namespace_missing"} 0"#));
    }

    #[test]
    fn a_notice_has_its_own_gauge_and_stays_out_of_the_policys_blocked_condition() {
        let metrics = Metrics::new();
        let blockers = Blockers::new(&metrics);
        let reason = BlockedReason::MutatingGateNotServed;
        assert_eq!(reason.severity(), Severity::Notice);
        assert!(!reason.is_about_the_policy() && !reason.blocks_readiness());
        blockers.set(reason, "admissionregistration.k8s.io/v1 lists no mutatingadmissionpolicies");
        let text = metrics.encode().unwrap();
        assert!(text.contains(r#"tiergate_not_served{reason="mutating_gate_not_served"} 1"#), "{text}");
        assert!(!text.contains(r#"tiergate_blocked{reason="mutating_gate_not_served"}"#), "{text}");
        assert!(text.contains(r#"tiergate_blocked{reason="dra_not_served"} 0"#), "{text}");
    }

    #[test]
    fn a_blocker_describes_what_is_wrong_and_the_fix() {
        let blocker = Blocker { reason: BlockedReason::PolicyNotFound, detail: "TierPolicy default".to_owned() };
        let line = blocker.describe();
        assert!(line.contains("does not exist") && line.contains("TierPolicy default") && line.contains("Fix:"));
        assert_eq!(BlockedReason::PolicyNotFound.condition_reason(), "PolicyNotFound");
    }

    #[test]
    fn a_missing_kueue_dra_mapping_warns_in_the_policys_condition_without_blocking_readiness() {
        let reason = BlockedReason::KueueDraMappingMissing;
        assert_eq!(reason.label(), "kueue_dra_mapping_missing");
        assert_eq!(reason.condition_reason(), "KueueDraMappingMissing");
        assert_eq!(reason.severity(), Severity::Warn);
        assert!(reason.is_about_the_policy() && !reason.blocks_readiness());
        let fix = reason.fix();
        assert!(fix.contains("tiergate render --kueue-config") && fix.contains("restart Kueue"), "{fix}");
        assert!(fix.contains("kueue-manager-config") && fix.contains("controller_manager_config.yaml"), "{fix}");
    }
}
