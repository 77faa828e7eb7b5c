//! Which admission requests are scored, and the `/v1/score` request built for them from the workload's
//! annotations, its tier's GPU classes and the pod cache; pure, no I/O.
//!
//! A workload is scored when all of these hold:
//! - the operation is CREATE (an UPDATE is never rescored, so a priority never changes under a running job);
//! - its kind passes [`is_scored_kind`] (Job, JobSet, and Pods without a controlling owner: a Job's own pods are
//!   not queued by Kueue, their Job is);
//! - its namespace is not excluded and has a tier;
//! - some container (or init container) requests or limits the GPU resource of one of the tier's classes;
//! - its metadata annotations name a job type (`tiergate.io/job-type` or `app.kubernetes.io/job-type`).

use std::collections::BTreeMap;

use kube_core::admission::Operation;
use tiergate_compat::scoring_annotations::scoring_inputs;
use tiergate_workloads::{TemplateLayout, WorkloadAdapter, adapter_for, controller_of};

use crate::policy::{GpuClass, Tier, TierPolicySpec};
use crate::request::{Request, metadata_of};
use crate::scoring::wire::{ScoreFeatures, ScoreRequest};
use crate::view::Snapshot;

/// Pod label whose value names a running pod's job type (read for `colocated_job_types`).
pub const JOB_TYPE_LABEL: &str = tiergate_compat::scoring_annotations::SEED_JOB_TYPE;

/// Whether objects of this kind are scored: kinds tiergate queues in Kueue itself (Job, JobSet: their
/// `kueue.x-k8s.io/priority-class` label sets the Workload's priority), and Pods without a controlling owner
/// (`owned` false). A Job's own pods are not queued by Kueue; their Job is.
pub fn is_scored_kind(adapter: &WorkloadAdapter, owned: bool) -> bool {
    adapter.is_queued() || (adapter.templates == TemplateLayout::Pod && !owned)
}

/// A workload that will be scored: its tier, the classes it may be offered and the request to send.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoringJob<'a> {
    /// The namespace's tier.
    pub tier: &'a Tier,
    /// The tier's GPU classes, primary first (only those the policy defines).
    pub candidates: Vec<&'a GpuClass>,
    /// The `/v1/score` body.
    pub request: ScoreRequest,
    /// Annotation problems, for the AdmissionResponse.
    pub warnings: Vec<String>,
}

/// The scoring job for an admission request, or `None` when the workload is not scored (see the module docs).
pub fn scoring_job<'a>(request: &Request, snapshot: &Snapshot, policy: &'a TierPolicySpec) -> Option<ScoringJob<'a>> {
    if request.operation != Operation::Create {
        return None;
    }
    let object = request.object.as_ref()?;
    let adapter = adapter_for(&request.kind.group, &request.kind.version, &request.kind.kind)?;
    // Malformed metadata is not scored; the decision answers it (`mutate` names the field).
    let metadata = metadata_of(object).ok()?;
    if !is_scored_kind(adapter, controller_of(&metadata).is_some()) {
        return None;
    }
    let namespace = request.namespace.as_deref().or(metadata.namespace.as_deref())?;
    if policy.is_excluded(namespace, snapshot.own_namespace.as_deref()) {
        return None;
    }
    let tier = policy.tier_of(&snapshot.namespaces.get(namespace)?.labels)?;
    let candidates: Vec<&GpuClass> = tier.gpu_class_names().filter_map(|name| policy.gpu_class(name)).collect();
    let gpu_resources: Vec<&str> = candidates.iter().map(|class| class.primary_resource()).collect();
    if !adapter.templates.requests_any(object, &gpu_resources) {
        return None;
    }
    let empty = BTreeMap::new();
    let inputs = scoring_inputs(metadata.annotations.as_ref().unwrap_or(&empty));
    let job_type = inputs.job_type?;
    let request = ScoreRequest {
        job_type,
        features: ScoreFeatures {
            gpu_mem_gb: inputs.gpu_mem_gib,
            batch_size: inputs.batch_size,
            tenant: inputs.tenant,
        },
        candidate_gpu_types: candidates.iter().map(|class| class.name.clone()).collect(),
        colocated_job_types: colocated_job_types(snapshot, &candidates),
    };
    let warnings = inputs.problems.iter().map(ToString::to_string).collect();
    Some(ScoringJob { tier, candidates, request, warnings })
}

/// Job types (the `app.kubernetes.io/job-type` label) of cached pods running on nodes of the candidate classes,
/// sorted and deduplicated so identical situations give identical requests (and cache hits).
pub fn colocated_job_types(snapshot: &Snapshot, candidates: &[&GpuClass]) -> Vec<String> {
    snapshot.gpu_class_digest().job_types_on(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::test_support::{
        fixture_request, sample_snapshot, with_annotations, with_operation, without_annotation,
    };
    use crate::view::PodView;

    fn job_for(request: &Request, snapshot: &Snapshot) -> Option<ScoreRequest> {
        let policy = snapshot.policy.clone().unwrap();
        scoring_job(request, snapshot, &policy.spec).map(|job| job.request)
    }

    #[test]
    fn recorded_bronze_job_is_offered_only_l4() {
        let snapshot = sample_snapshot();
        let policy = snapshot.policy.clone().unwrap();
        let request = fixture_request("job-create-bronze-gpu-scored.json");
        let job = scoring_job(&request, &snapshot, &policy.spec).unwrap();
        assert_eq!(job.tier.name, "bronze");
        assert_eq!(
            job.request,
            ScoreRequest {
                job_type: "train-bert".to_owned(),
                features: ScoreFeatures {
                    gpu_mem_gb: Some(40),
                    batch_size: Some(16),
                    tenant: Some("team-a".to_owned())
                },
                candidate_gpu_types: vec!["l4".to_owned()],
                colocated_job_types: vec![],
            }
        );
        assert!(job.warnings.is_empty());
    }

    #[test]
    fn an_update_is_never_scored() {
        let request = with_operation(fixture_request("job-create-bronze-gpu-scored.json"), Operation::Update);
        assert_eq!(job_for(&request, &sample_snapshot()), None);
    }

    #[test]
    fn a_job_without_a_job_type_is_not_scored() {
        let request =
            without_annotation(fixture_request("job-create-bronze-gpu-scored.json"), "app.kubernetes.io/job-type");
        assert_eq!(job_for(&request, &sample_snapshot()), None);
    }

    #[test]
    fn a_cpu_only_pod_is_not_scored() {
        let request = with_annotations(
            fixture_request("pod-create-bronze-cpu-only.json"),
            &[("app.kubernetes.io/job-type", "train-bert")],
        );
        assert_eq!(job_for(&request, &sample_snapshot()), None);
    }

    #[test]
    fn pods_created_by_a_job_are_left_to_their_job() {
        let request = with_annotations(
            fixture_request("pod-create-from-job-1.json"),
            &[("app.kubernetes.io/job-type", "train-bert")],
        );
        assert_eq!(job_for(&request, &sample_snapshot()), None);
    }

    #[test]
    fn kube_system_and_the_daemons_own_namespace_are_not_scored() {
        let request = with_annotations(
            fixture_request("pod-create-kube-system.json"),
            &[("app.kubernetes.io/job-type", "train-bert")],
        );
        assert_eq!(job_for(&request, &sample_snapshot()), None);
        let mut snapshot = sample_snapshot();
        snapshot.own_namespace = Some("ml-team-dev".to_owned());
        assert_eq!(job_for(&fixture_request("job-create-bronze-gpu-scored.json"), &snapshot), None);
    }

    #[test]
    fn a_gold_job_is_offered_its_primary_then_its_fallbacks() {
        let mut snapshot = sample_snapshot();
        let mut policy = (*snapshot.policy.clone().unwrap()).clone();
        policy.spec.tiers.iter_mut().filter(|tier| tier.name == "gold").for_each(|tier| {
            tier.fallback_gpu_classes = vec!["a100".to_owned()];
        });
        snapshot.policy = Some(std::sync::Arc::new(policy));
        let request = with_annotations(
            fixture_request("job-create-gold-8gpu-suspended.json"),
            &[("tiergate.io/job-type", "train-llama")],
        );
        let job = job_for(&request, &snapshot).unwrap();
        assert_eq!(job.candidate_gpu_types, ["h100", "a100"]);
        assert_eq!(job.job_type, "train-llama");
    }

    #[test]
    fn colocated_job_types_come_from_pods_on_the_candidate_classes_nodes() {
        let mut snapshot = sample_snapshot();
        let pod = |name: &str, node: Option<&str>, job_type: &str| {
            std::sync::Arc::new(PodView {
                namespace: "other".to_owned(),
                name: name.to_owned(),
                node_name: node.map(str::to_owned),
                labels: [(JOB_TYPE_LABEL.to_owned(), job_type.to_owned())].into(),
                ..PodView::default()
            })
        };
        snapshot.pods = vec![
            pod("a", Some("gpu-l4-node-1"), "infer-llama"),
            pod("b", Some("gpu-l4-node-1"), "infer-llama"),
            pod("c", Some("gpu-l4-node-1"), "etl"),
            pod("d", Some("gpu-h100-node-1"), "train-gpt"),
            pod("e", None, "pending-job"),
        ];
        let job = job_for(&fixture_request("job-create-bronze-gpu-scored.json"), &snapshot).unwrap();
        assert_eq!(job.colocated_job_types, ["etl", "infer-llama"]);
    }

    #[test]
    fn a_bad_annotation_becomes_a_warning_and_the_job_is_still_scored() {
        let snapshot = sample_snapshot();
        let policy = snapshot.policy.clone().unwrap();
        let request =
            with_annotations(fixture_request("job-create-bronze-gpu-scored.json"), &[("gpu.mem.gi", "forty")]);
        let job = scoring_job(&request, &snapshot, &policy.spec).unwrap();
        assert_eq!(job.request.features.gpu_mem_gb, None);
        assert_eq!(job.warnings.len(), 1);
        assert!(
            job.warnings[0].contains("gpu.mem.gi") && job.warnings[0].contains("whole number"),
            "{:?}",
            job.warnings
        );
    }
}
