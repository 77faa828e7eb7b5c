//! Jobs that Kueue MultiKueue copied into this (worker) cluster: recognised by Kueue's own marks and trusted only
//! from the identity MultiKueue writes as here; pure, no I/O.
//!
//! Kueue v0.19.2 marks every object it copies into a worker with the label `kueue.x-k8s.io/multikueue-origin`
//! (`kueue.MultiKueueOriginLabel`, value: the manager's `multiKueue.origin`) and a Job also with
//! `kueue.x-k8s.io/prebuilt-workload-name` (`constants.PrebuiltWorkloadLabel`, the Workload MultiKueue created
//! for it first): see the adapters' `SyncJob` in `pkg/controller/jobs/job/job_multikueue_adapter.go` and
//! `pkg/controller/jobframework` (and `cloneForCreate` in `pkg/controller/admissionchecks/multikueue/workload.go`
//! for the Workload). The copy already carries the management cluster's decision (queue name, GPU class,
//! priority), so it passes unchanged: a second queue label or a re-suspension would fight MultiKueue.
//!
//! Labels are the tenant's to write, so the marks alone prove nothing. A marked object is a copy only when the
//! request comes from one of `spec.admission.multiKueueUsers` (the user the management cluster's kubeconfig
//! Secret authenticates as here) and that user is not a service account of the request's namespace. From anyone
//! else, adding a mark is refused: Kueue trusts the marks (a prebuilt-workload label makes a Job wait for that
//! Workload instead of its own; some integrations, e.g. LeaderWorkerSet, create no Workload for an origin-marked
//! object), so a forged mark could walk a workload around its queue. An UPDATE that keeps the marks the old
//! object already had (Kueue unsuspending the copy, a tenant editing it) is decided like any other object.

use kube_core::admission::Operation;
use serde_json::Value;
use tiergate_kueue::{MULTIKUEUE_ORIGIN_LABEL, PREBUILT_WORKLOAD_LABEL};

use super::podspec;
use crate::policy::TierPolicySpec;
use crate::request::Request;

/// Kueue's MultiKueue marks on a copied object.
pub const MULTIKUEUE_MARKS: [&str; 2] = [MULTIKUEUE_ORIGIN_LABEL, PREBUILT_WORKLOAD_LABEL];

/// What the marks on a request's object turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyCheck {
    /// No mark, or the marks an UPDATE kept from the old object: decided like any other object.
    Unmarked,
    /// A copy MultiKueue dispatched: left exactly as written.
    Dispatched {
        /// Why, for the decision's reasons.
        why: String,
    },
    /// A mark from someone who is not MultiKueue: refused.
    Forged {
        /// What is wrong and the fix, for the user.
        message: String,
    },
}

/// Checks the MultiKueue marks of the object of `request` in `namespace`.
pub fn check_copy(request: &Request, spec: &TierPolicySpec, namespace: &str) -> CopyCheck {
    let marks = |object: Option<&Value>| -> Vec<(&'static str, String)> {
        let metadata = object.and_then(|object| object.get("metadata"));
        MULTIKUEUE_MARKS
            .into_iter()
            .filter_map(|key| Some((key, podspec::string_entry(metadata?, "labels", key)?.to_owned())))
            .collect()
    };
    let marked = marks(request.object.as_ref());
    if marked.is_empty() {
        return CopyCheck::Unmarked;
    }
    let user = request.user_info.username.as_deref().unwrap_or_default();
    let own_account = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|account| account.split(':').next())
        .is_some_and(|account_namespace| account_namespace == namespace);
    if !own_account && spec.admission.multi_kueue_users.iter().any(|trusted| trusted == user) {
        let origin = marked.iter().find(|(key, _)| *key == MULTIKUEUE_ORIGIN_LABEL).map(|(_, value)| value.as_str());
        return CopyCheck::Dispatched {
            why: format!(
                "a copy Kueue MultiKueue dispatched here (origin {}), written by {user} (spec.admission.\
                 multiKueueUsers): left as the management cluster decided it",
                origin.unwrap_or("unnamed")
            ),
        };
    }
    if request.operation == Operation::Update {
        let old = marks(request.old_object.as_ref());
        if marked.iter().all(|mark| old.contains(mark)) {
            return CopyCheck::Unmarked;
        }
    }
    let keys: Vec<&str> = marked.iter().map(|(key, _)| *key).collect();
    let who = if user.is_empty() { "an unnamed user" } else { user };
    CopyCheck::Forged {
        message: format!(
            "label {} marks an object Kueue MultiKueue copied from a management cluster, and only MultiKueue may \
             set it ({who} is not one of spec.admission.multiKueueUsers); remove the label and submit the workload \
             to your namespace's queue",
            keys.join(" and ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(operation: &str, user: &str, labels: serde_json::Value, old: Option<serde_json::Value>) -> Request {
        let job = |labels: serde_json::Value| json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "team", "labels": labels}});
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "1", "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                "name": "j", "namespace": "team", "operation": operation,
                "userInfo": {"username": user}, "object": job(labels), "oldObject": old.map(job),
            }
        });
        crate::admission::lean_request(&serde_json::to_vec(&review).unwrap(), "admission.k8s.io/v1").unwrap()
    }

    fn spec() -> TierPolicySpec {
        let mut policy = crate::inputs::load_policy(None).unwrap();
        policy.spec.admission.multi_kueue_users = vec!["system:serviceaccount:kueue-system:multikueue".to_owned()];
        policy.spec
    }

    const MULTIKUEUE: &str = "system:serviceaccount:kueue-system:multikueue";

    #[test]
    fn a_marked_job_from_multikueue_is_a_dispatched_copy() {
        let marks = json!({MULTIKUEUE_ORIGIN_LABEL: "multikueue", PREBUILT_WORKLOAD_LABEL: "job-j-1"});
        let check = check_copy(&request("CREATE", MULTIKUEUE, marks, None), &spec(), "team");
        assert!(matches!(check, CopyCheck::Dispatched { ref why } if why.contains("origin multikueue")), "{check:?}");
    }

    #[test]
    fn the_same_marks_from_anyone_else_are_forged() {
        let marks = json!({MULTIKUEUE_ORIGIN_LABEL: "multikueue"});
        for user in ["alice", "system:serviceaccount:team:multikueue", ""] {
            let check = check_copy(&request("CREATE", user, marks.clone(), None), &spec(), "team");
            assert!(matches!(check, CopyCheck::Forged { .. }), "{user}: {check:?}");
        }
    }

    #[test]
    fn a_tenants_service_account_named_as_multikueue_is_still_not_trusted() {
        let mut spec = spec();
        spec.admission.multi_kueue_users.push("system:serviceaccount:team:bot".to_owned());
        let marks = json!({MULTIKUEUE_ORIGIN_LABEL: "multikueue"});
        let check = check_copy(&request("CREATE", "system:serviceaccount:team:bot", marks, None), &spec, "team");
        assert!(matches!(check, CopyCheck::Forged { .. }), "{check:?}");
    }

    #[test]
    fn an_update_keeping_the_old_marks_is_decided_normally_and_one_adding_them_is_forged() {
        let marks = json!({MULTIKUEUE_ORIGIN_LABEL: "multikueue"});
        let kept = request("UPDATE", "alice", marks.clone(), Some(marks.clone()));
        assert_eq!(check_copy(&kept, &spec(), "team"), CopyCheck::Unmarked);
        let added = request("UPDATE", "alice", marks, Some(json!({})));
        assert!(matches!(check_copy(&added, &spec(), "team"), CopyCheck::Forged { .. }));
    }
}
