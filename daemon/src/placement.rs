//! Base/weight placement strategies and GPU pinning: which rule each new pod gets, from a per-owner ledger kept
//! in memory (rebuilt from the pods themselves); no network I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

use crate::view::Snapshot;

/// The rule a pod was given.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementAssignment {
    /// Rule name (recorded on the pod so the ledger can be rebuilt).
    pub rule: String,
    /// Ledger key of the owning workload, e.g. `Deployment/ns/name`.
    pub owner: String,
    /// Node selector of the rule (exactly the labels of its ResourceFlavor).
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the rule.
    pub tolerations: Vec<Toleration>,
}

/// A StatefulSet pod pinned to a node and GPU list (seed 002 `gpu-scheduling-map`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuPinning {
    /// Node name for required node affinity on `kubernetes.io/hostname`.
    pub node: String,
    /// Value for `CUDA_VISIBLE_DEVICES`, e.g. `0,1`.
    pub cuda_visible_devices: String,
}

/// Everything placement decided for one request; the admission mutation applies it as given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlacementOutcome {
    /// The base/weight rule for a pod.
    pub assignment: Option<PlacementAssignment>,
    /// The GPU pinning for a StatefulSet pod.
    pub pinning: Option<GpuPinning>,
    /// Labels to set on the admitted object's metadata (e.g. the rule, so ledgers can be rebuilt).
    pub metadata_labels: BTreeMap<String, String>,
    /// Annotations to set on the admitted object's metadata.
    pub metadata_annotations: BTreeMap<String, String>,
    /// Annotations to set on every pod template of an owner (e.g. a normalized strategy its pods will carry).
    pub template_annotations: BTreeMap<String, String>,
    /// Warnings for the AdmissionResponse.
    pub warnings: Vec<String>,
}

/// A strategy or map that cannot be parsed; the owner's admission is denied with this message.
#[derive(Debug, thiserror::Error)]
#[error("failed to parse placement annotation {annotation}: {message}")]
pub struct PlacementError {
    /// The annotation key.
    pub annotation: String,
    /// What is wrong, quoting the bad part, and the fix.
    pub message: String,
}

/// Per-owner ledgers of which rule each live pod holds; shared by all webhook requests.
#[derive(Debug, Default)]
pub struct PlacementLedger {}

impl PlacementLedger {
    /// Decides placement for one request: validates strategies and maps on owners (Err denies the owner),
    /// assigns a rule to a pod CREATE (dry-run: decided, not recorded). Requests without placement get a default.
    pub fn assign_for(
        &self,
        _request: &AdmissionRequest<DynamicObject>,
        _snapshot: &Snapshot,
    ) -> Result<PlacementOutcome, PlacementError> {
        Ok(PlacementOutcome::default())
    }
}
