//! What the `--kubeconfig` cluster serves of what a policy renders, for `tiergate check`: the in-server gate's
//! admission policies, DRA's DeviceClasses, Karpenter's NodePools, and the Kueue fields its CRDs keep (found by a
//! server-side dry-run apply of each cluster-scoped Kueue object). [`fetch_served_facts`] asks (I/O, no writes);
//! [`build_served_report`] judges (pure), in the terms the running daemon reports them (`gate_not_served`,
//! `mutating_gate_not_served`, `dra_not_served`, `karpenter_missing`, `kueue_field_dropped`).

use std::fmt::Write as _;

use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};

use crate::reconcile::diff::build_missing_paths;
use crate::reconcile::discovery::{
    AdmissionPolicies, discover_admission_policies, discover_device_classes, discover_node_pools,
};
use crate::reconcile::kinds::KueueKind;

/// The field manager of `check`'s dry-run applies (never stored: every apply is a dry run).
const CHECK_FIELD_MANAGER: &str = "tiergate-check";

/// What the cluster answered; `None` where discovery failed or the policy does not need the answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServedFacts {
    /// Whether a cluster answered (`--kubeconfig`); from a version alone, Karpenter and the Kueue fields are unknown
    /// and left out of the report.
    pub from_cluster: bool,
    /// Which halves of the in-server gate are served (`None`: discovery failed).
    pub admission: Option<AdmissionPolicies>,
    /// Whether `resource.k8s.io/v1` DeviceClasses are served (asked only when the policy renders some).
    pub device_classes: Option<bool>,
    /// Whether `karpenter.sh/v1` NodePools are served (asked only when the policy renders some).
    pub node_pools: Option<bool>,
    /// Each Kueue object whose dry-run apply came back without some fields, with their paths.
    pub dropped: Vec<(String, Vec<String>)>,
    /// Each Kueue object whose dry-run apply failed, with the API server's answer, and whether it was refused
    /// (true) rather than not allowed to be tried (403: `check`'s credentials may not patch Kueue objects).
    pub unchecked: Vec<(String, String, bool)>,
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Served.
    Served(String),
    /// Not served, and tiergate does without it as designed.
    Note(String),
    /// Not served or refused: part of the policy would not take effect.
    Fail(String),
}

/// The report: one verdict per feature the policy uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedReport {
    /// Whose answers: "this cluster", or "Kubernetes 1.33" from a version alone.
    source: String,
    verdicts: Vec<Verdict>,
}

/// What Kubernetes `minor` (1.MINOR) serves, without asking a cluster: ValidatingAdmissionPolicy from 1.30,
/// MutatingAdmissionPolicy from 1.36, DRA's `resource.k8s.io/v1` from 1.34 (asked only when `objects` render
/// DeviceClasses); Karpenter and the Kueue fields are the cluster's, not the version's, and stay unknown.
pub fn served_facts_of_version(minor: u32, objects: &[DynamicObject]) -> ServedFacts {
    ServedFacts {
        admission: Some(AdmissionPolicies { validating: minor >= 30, mutating: minor >= 36 }),
        device_classes: renders(objects, KueueKind::DeviceClass).then_some(minor >= 34),
        ..ServedFacts::default()
    }
}

/// Whether `objects` hold one of `kind`.
fn renders(objects: &[DynamicObject], kind: KueueKind) -> bool {
    objects.iter().any(|object| KueueKind::of(object) == Some(kind))
}

/// The kind of `object` when it is one whose fields the dry-run apply checks: a cluster-scoped Kueue kind.
fn dry_run_kind(object: &DynamicObject) -> Option<KueueKind> {
    KueueKind::of(object).filter(|kind| kind.is_kueue() && !kind.namespaced())
}

/// Asks the cluster behind `client` about each feature `objects` (the policy's rendered cluster-scoped objects)
/// use; the Kueue objects are applied with `dryRun=All`, so nothing is stored.
pub async fn fetch_served_facts(client: &Client, objects: &[DynamicObject]) -> ServedFacts {
    let mut facts = ServedFacts {
        from_cluster: true,
        admission: discover_admission_policies(client).await,
        device_classes: None,
        node_pools: None,
        dropped: Vec::new(),
        unchecked: Vec::new(),
    };
    if renders(objects, KueueKind::DeviceClass) {
        facts.device_classes = discover_device_classes(client).await;
    }
    if renders(objects, KueueKind::NodePool) {
        facts.node_pools = discover_node_pools(client).await;
    }
    let params = PatchParams::apply(CHECK_FIELD_MANAGER).force().dry_run();
    for object in objects {
        let Some(kind) = dry_run_kind(object) else { continue };
        let name = format!("{} {}", kind.name(), object.name_any());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
        match api.patch(&object.name_any(), &params, &Patch::Apply(object)).await {
            Ok(returned) => {
                let missing = build_missing_paths(&object.data, &returned.data);
                if !missing.is_empty() {
                    facts.dropped.push((name, missing));
                }
            }
            Err(kube::Error::Api(status)) => {
                facts.unchecked.push((name, status.message.clone(), status.code != 403));
            }
            Err(error) => facts.unchecked.push((name, error.to_string(), false)),
        }
    }
    facts
}

/// Judges `facts`, the answers of `source` ("this cluster", "Kubernetes 1.34"), for a policy that renders `objects`.
pub fn build_served_report(source: &str, objects: &[DynamicObject], facts: &ServedFacts) -> ServedReport {
    let mut verdicts = Vec::new();
    verdicts.push(match facts.admission {
        Some(AdmissionPolicies { validating: true, mutating: true }) => Verdict::Served(
            "in-server gate: ValidatingAdmissionPolicy and MutatingAdmissionPolicy served (both halves)".to_owned(),
        ),
        Some(AdmissionPolicies { validating: true, mutating: false }) => Verdict::Note(
            "in-server gate: validating half only; MutatingAdmissionPolicy is not served (Kubernetes 1.36+), so with \
             the webhook down a GPU workload without its tier's queue and class is refused rather than given them \
             (mutating_gate_not_served)"
                .to_owned(),
        ),
        Some(AdmissionPolicies { validating: false, .. }) => Verdict::Fail(
            "in-server gate: ValidatingAdmissionPolicy v1 is not served, so no gate holds the tier boundary while \
             the webhook does not answer (gate_not_served); run Kubernetes 1.30+ or register the webhook with \
             failurePolicy Fail"
                .to_owned(),
        ),
        None => Verdict::Note(
            "in-server gate: could not list admissionregistration.k8s.io/v1 (see the log line above)".to_owned(),
        ),
    });
    if renders(objects, KueueKind::DeviceClass) {
        verdicts.push(match facts.device_classes {
            Some(true) => Verdict::Served("DRA GPU classes: resource.k8s.io/v1 deviceclasses served".to_owned()),
            Some(false) => Verdict::Fail(
                "DRA GPU classes: resource.k8s.io/v1 deviceclasses is not served (Kubernetes 1.34+), so their \
                 DeviceClasses are not applied and no claim can select them (dra_not_served)"
                    .to_owned(),
            ),
            None => Verdict::Note("DRA GPU classes: could not list resource.k8s.io/v1".to_owned()),
        });
    }
    if renders(objects, KueueKind::NodePool) && facts.from_cluster {
        verdicts.push(match facts.node_pools {
            Some(true) => Verdict::Served("Karpenter templates: karpenter.sh/v1 nodepools served".to_owned()),
            Some(false) => Verdict::Fail(
                "Karpenter templates: karpenter.sh/v1 nodepools is not served, so the classes' NodePools are not \
                 applied (karpenter_missing)"
                    .to_owned(),
            ),
            None => Verdict::Note("Karpenter templates: could not list karpenter.sh/v1".to_owned()),
        });
    }
    for (object, paths) in &facts.dropped {
        verdicts.push(Verdict::Fail(format!(
            "{object}: the installed Kueue CRD drops {} (kueue_field_dropped); upgrade Kueue or remove the policy \
             fields that render them",
            paths.join(", ")
        )));
    }
    for (object, answer, refused) in &facts.unchecked {
        verdicts.push(if *refused {
            Verdict::Fail(format!("{object}: the dry-run apply was refused: {answer}"))
        } else {
            Verdict::Note(format!("{object}: not checked, the dry-run apply failed: {answer}"))
        });
    }
    let checked = objects.iter().filter_map(dry_run_kind).count();
    if facts.dropped.is_empty() && facts.unchecked.is_empty() && checked > 0 && facts.from_cluster {
        verdicts.push(Verdict::Served(format!(
            "Kueue objects: the installed CRDs keep every field of the {checked} cluster-scoped objects (dry-run apply)"
        )));
    }
    ServedReport { source: source.to_owned(), verdicts }
}

/// The source of a report from `--kubeconfig`.
pub const THIS_CLUSTER: &str = "this cluster";

impl ServedReport {
    /// Whether everything the policy uses is served (notes do not fail).
    pub fn passed(&self) -> bool {
        !self.verdicts.iter().any(|verdict| matches!(verdict, Verdict::Fail(_)))
    }

    /// The report for people: a heading, then one `ok`, `note` or `FAIL` line per feature.
    pub fn to_text(&self) -> String {
        let mut text = format!("What {} serves of the policy:\n", self.source);
        for verdict in &self.verdicts {
            let (mark, line) = match verdict {
                Verdict::Served(line) => ("ok  ", line),
                Verdict::Note(line) => ("note", line),
                Verdict::Fail(line) => ("FAIL", line),
            };
            let _ = writeln!(text, "  {mark} {line}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(api_version: &str, kind: &str, name: &str) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})).unwrap()
    }

    fn rendered() -> Vec<DynamicObject> {
        vec![
            object("kueue.x-k8s.io/v1beta2", "ClusterQueue", "tiergate-gold"),
            object("resource.k8s.io/v1", "DeviceClass", "h100.tiergate.io"),
        ]
    }

    #[test]
    fn a_cluster_before_1_34_notes_the_mutating_half_and_fails_dra_classes() {
        let facts = ServedFacts {
            from_cluster: true,
            admission: Some(AdmissionPolicies { validating: true, mutating: false }),
            device_classes: Some(false),
            ..ServedFacts::default()
        };
        let report = build_served_report(THIS_CLUSTER, &rendered(), &facts);
        let text = report.to_text();
        assert!(!report.passed(), "{text}");
        assert_eq!(
            build_served_report("Kubernetes 1.33", &rendered(), &served_facts_of_version(33, &rendered())).to_text(),
            "What Kubernetes 1.33 serves of the policy:\n  note in-server gate: validating half only; \
             MutatingAdmissionPolicy is not served (Kubernetes 1.36+), so with the webhook down a GPU workload \
             without its tier's queue and class is refused rather than given them (mutating_gate_not_served)\n  \
             FAIL DRA GPU classes: resource.k8s.io/v1 deviceclasses is not served (Kubernetes 1.34+), so their \
             DeviceClasses are not applied and no claim can select them (dra_not_served)\n"
        );
        assert!(
            build_served_report("Kubernetes 1.34", &rendered(), &served_facts_of_version(34, &rendered())).passed()
        );
        assert!(text.contains("  note in-server gate: validating half only"), "{text}");
        assert!(text.contains("  FAIL DRA GPU classes: resource.k8s.io/v1 deviceclasses is not served"), "{text}");
        assert!(text.contains("  ok   Kueue objects: the installed CRDs keep every field of the 1 "), "{text}");
        assert!(!text.contains("Karpenter"), "the policy renders no NodePool: {text}");
    }

    #[test]
    fn a_field_the_kueue_crd_drops_fails_naming_the_object_and_path_and_a_forbidden_dry_run_is_a_note() {
        let facts = ServedFacts {
            from_cluster: true,
            admission: Some(AdmissionPolicies { validating: true, mutating: true }),
            device_classes: Some(true),
            dropped: vec![("ClusterQueue tiergate-gold".to_owned(), vec!["spec.admissionScope".to_owned()])],
            ..ServedFacts::default()
        };
        let report = build_served_report(THIS_CLUSTER, &rendered(), &facts);
        assert!(!report.passed());
        let text = report.to_text();
        assert!(text.contains("FAIL ClusterQueue tiergate-gold: the installed Kueue CRD drops spec.admissionScope"));
        let forbidden = ServedFacts {
            from_cluster: true,
            admission: Some(AdmissionPolicies { validating: true, mutating: true }),
            device_classes: Some(true),
            unchecked: vec![("ClusterQueue tiergate-gold".to_owned(), "forbidden".to_owned(), false)],
            ..ServedFacts::default()
        };
        let report = build_served_report(THIS_CLUSTER, &rendered(), &forbidden);
        assert!(report.passed(), "{}", report.to_text());
        assert!(report.to_text().contains("note ClusterQueue tiergate-gold: not checked"));
    }
}
