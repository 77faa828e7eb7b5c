//! Read-only fetches for `why` and `status`: gets and lists only, so the commands run with the get/list
//! ClusterRoles in charts/tiergate/files/live-rbac.yaml; I/O.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tiergate_workloads::WorkloadAdapter;

use super::LiveError;
use crate::admission::claims::claim_template_view;
use crate::answers::karpenter::{
    KarpenterRead, MAX_PODS_READ, PodQuery, build_pod_query, nominated_node_claims, waiting_pods,
};
use crate::answers::kueue::{KueueClusterQueue, KueueCohort, KueueLocalQueue, KueueWorkload};
use crate::answers::provisioning::ProvisioningRequestRead;
use crate::answers::why::waits_for_nodes;
use crate::cache::kinds::{KueueKind, build_ownership_selector, claim_template_resource};
pub use crate::cache::kinds::{adapter_resource, provisioning_request_resource, workload_resource};
use crate::policy::TierPolicy;
use crate::view::ClaimTemplateView;

/// The live objects `why` reads.
#[derive(Debug)]
pub struct WhyFetched {
    /// The workload as the API server returns it.
    pub object: Value,
    /// The TierPolicy, `None` when it does not exist.
    pub policy: Option<TierPolicy>,
    /// The namespace's labels.
    pub namespace_labels: BTreeMap<String, String>,
    /// LocalQueue names in the namespace.
    pub local_queues: Vec<String>,
    /// Kueue Workloads in the namespace.
    pub workloads: Vec<KueueWorkload>,
    /// ResourceClaimTemplates in the namespace, when the workload's pods reference one (else empty).
    pub claim_templates: Vec<Arc<ClaimTemplateView>>,
    /// ProvisioningRequests in the namespace, when a Workload there has an admission check (else empty).
    pub provisioning_requests: Vec<ProvisioningRequestRead>,
    /// The policy's LocalQueues in every namespace, when the namespace's tier shares its quota among its tenants
    /// (else empty): the other tenants a pending workload waits behind.
    pub tier_local_queues: Vec<KueueLocalQueue>,
    /// Why they could not be listed (no right to list LocalQueues across namespaces, say).
    pub tier_local_queues_note: Option<String>,
    /// The pods waiting for a node and what Karpenter said about them, when Kueue admitted the workload or does not
    /// queue its kind (else empty).
    pub karpenter: KarpenterRead,
    /// Why they could not be read (no right to list pods or events, or to get NodeClaims).
    pub karpenter_note: Option<String>,
}

/// The live objects `status` reads.
#[derive(Debug)]
pub struct StatusFetched {
    /// The TierPolicy.
    pub policy: TierPolicy,
    /// Every other TierPolicy (empty when they could not be listed): which of them an instance serves.
    pub other_policies: Vec<TierPolicy>,
    /// The policy's ClusterQueues.
    pub cluster_queues: Vec<KueueClusterQueue>,
    /// The policy's Cohorts (selected by the ownership labels, like the ClusterQueues).
    pub cohorts: Vec<KueueCohort>,
    /// The policy's LocalQueues, one per tenant namespace (listed only when asked: `status --tier`).
    pub local_queues: Vec<KueueLocalQueue>,
    /// Why the LocalQueues could not be listed (no right to list them across namespaces, say): the tenant rows are
    /// left out and the rest of the answer stands.
    pub local_queues_note: Option<String>,
}

/// Gets the workload, its namespace, the TierPolicy, and lists the namespace's LocalQueues and Workloads.
pub async fn fetch_why_inputs(
    client: &kube::Client,
    adapter: &WorkloadAdapter,
    namespace: &str,
    name: &str,
    policy_name: &str,
) -> Result<WhyFetched, LiveError> {
    let what = format!("{} {namespace}/{name}", adapter.kind);
    let objects: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &adapter_resource(adapter));
    let object = objects
        .get_opt(name)
        .await
        .map_err(|source| LiveError::Get { what: what.clone(), error: source })?
        .ok_or_else(|| LiveError::NotFound {
            what: what.clone(),
            hint: format!("check the name and pass the namespace with -n (looked in {namespace})"),
        })?;
    let object = serde_json::to_value(&object).map_err(|source| LiveError::Decode { what, error: source })?;
    let policy = Api::<TierPolicy>::all(client.clone())
        .get_opt(policy_name)
        .await
        .map_err(|source| LiveError::Get { what: format!("TierPolicy {policy_name}"), error: source })?;
    let namespace_object = Api::<Namespace>::all(client.clone())
        .get(namespace)
        .await
        .map_err(|source| LiveError::Get { what: format!("Namespace {namespace}"), error: source })?;
    let local_queues: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &KueueKind::LocalQueue.api_resource());
    let local_queues = local_queues
        .list(&ListParams::default())
        .await
        .map_err(|source| LiveError::List { what: format!("LocalQueues in {namespace}"), error: source })?
        .items
        .into_iter()
        .filter_map(|queue| queue.metadata.name)
        .collect();
    let workloads: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &workload_resource());
    let workloads = workloads
        .list(&ListParams::default())
        .await
        .map_err(|source| LiveError::List { what: format!("Workloads in {namespace}"), error: source })?;
    let workloads: Vec<KueueWorkload> = decode_all(workloads.items, "Workload")?;
    let claim_templates = if object.to_string().contains("\"resourceClaimTemplateName\"") {
        fetch_claim_templates(client, namespace).await?
    } else {
        Vec::new()
    };
    let provisioning_requests = if workloads.iter().any(|workload| !workload.status.admission_checks.is_empty()) {
        fetch_provisioning_requests(client, namespace).await?
    } else {
        Vec::new()
    };
    let labels = namespace_object.metadata.labels.clone().unwrap_or_default();
    let sharing =
        policy.as_ref().and_then(|policy| policy.spec.tier_of(&labels)).is_some_and(|tier| tier.tenant_fair_sharing);
    let (tier_local_queues, tier_local_queues_note) =
        if sharing { fetch_policy_local_queues(client, policy_name).await? } else { (Vec::new(), None) };
    let (karpenter, karpenter_note) = if waits_for_nodes(adapter, &object, &workloads) {
        fetch_karpenter(client, adapter, namespace, &object).await?
    } else {
        (KarpenterRead::default(), None)
    };
    Ok(WhyFetched {
        object,
        policy,
        namespace_labels: labels,
        local_queues,
        workloads,
        claim_templates,
        provisioning_requests,
        tier_local_queues,
        tier_local_queues_note,
        karpenter,
        karpenter_note,
    })
}

/// Karpenter's `NodeClaim` (`karpenter.sh/v1`, cluster-scoped).
fn node_claim_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(tiergate_karpenter::GROUP, tiergate_karpenter::VERSION, "NodeClaim"),
        "nodeclaims",
    )
}

/// The HTTP status of an API error (`None` for a transport error).
fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// What is known when a read is refused: nothing, and a note saying which right is missing.
fn refused(what: &str, right: &str, error: &kube::Error) -> (KarpenterRead, Option<String>) {
    let cause = match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    };
    let note = format!(
        "failed to read {what} ({cause}), so what Karpenter says about the workload's pods is not shown; that \
         needs {right}"
    );
    (KarpenterRead::default(), Some(note))
}

/// The object's pods that wait for a node (by its selector, or the pods it controls), the Events of the first
/// [`MAX_PODS_READ`] of them (one LIST each, by `involvedObject.name`) and, when Karpenter nominated them to
/// NodeClaims, those NodeClaims (one GET each). Nothing, and no error, where Karpenter is not installed (its API
/// is not served: 404) or a read is refused (403, with a note).
async fn fetch_karpenter(
    client: &kube::Client,
    adapter: &WorkloadAdapter,
    namespace: &str,
    object: &Value,
) -> Result<(KarpenterRead, Option<String>), LiveError> {
    let nothing = || Ok((KarpenterRead::default(), None));
    let Some(query) = build_pod_query(adapter, object) else { return nothing() };
    let params = match &query {
        PodQuery::Itself => None,
        PodQuery::Selector(selector) => Some(ListParams::default().labels(selector)),
        PodQuery::ControlledBy(_) => Some(ListParams::default()),
    };
    let listed = match params {
        None => {
            let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            let what = format!("Pod {namespace}/{name}");
            vec![serde_json::from_value(object.clone()).map_err(|source| LiveError::Decode { what, error: source })?]
        }
        Some(params) => match Api::<Pod>::namespaced(client.clone(), namespace).list(&params).await {
            Ok(list) => list.items,
            Err(error) => match status_code(&error) {
                Some(403) => return Ok(refused(&format!("the pods in {namespace}"), "list on pods", &error)),
                Some(404) => return nothing(),
                _ => return Err(LiveError::List { what: format!("Pods in {namespace}"), error }),
            },
        },
    };
    let waiting = waiting_pods(&query, &listed);
    let events_api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let mut events = Vec::new();
    for pod in waiting.iter().take(MAX_PODS_READ) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let params = ListParams::default().fields(&format!("involvedObject.kind=Pod,involvedObject.name={name}"));
        match events_api.list(&params).await {
            Ok(list) => events.extend(list.items),
            Err(error) => match status_code(&error) {
                Some(403) => return Ok(refused(&format!("the Events in {namespace}"), "list on events", &error)),
                Some(404) => {}
                _ => {
                    let what = format!("Events of Pod {namespace}/{name}");
                    return Err(LiveError::List { what, error });
                }
            },
        }
    }
    let claims: Api<DynamicObject> = Api::all_with(client.clone(), &node_claim_resource());
    let (mut node_claims, mut gone_node_claims) = (Vec::new(), Vec::new());
    for name in nominated_node_claims(&waiting, &events) {
        let what = format!("NodeClaim {name}");
        match claims.get(&name).await {
            Ok(claim) => node_claims.push(
                serde_json::to_value(claim)
                    .and_then(serde_json::from_value)
                    .map_err(|source| LiveError::Decode { what, error: source })?,
            ),
            // The NodeClaim's own NotFound (a JSON Status naming it): Karpenter deleted it. A bare 404 (`404 page
            // not found`) is karpenter.sh/v1 not served: no Karpenter.
            Err(kube::Error::Api(status)) if status.code == 404 && status.reason == "NotFound" => {
                gone_node_claims.push(name);
            }
            Err(error) => match status_code(&error) {
                Some(404) => return nothing(),
                Some(403) => return Ok(refused(&what, "get on nodeclaims.karpenter.sh", &error)),
                _ => return Err(LiveError::Get { what, error }),
            },
        }
    }
    Ok((KarpenterRead { pods: waiting, events, node_claims, gone_node_claims }, None))
}

/// The LocalQueues of TierPolicy `policy_name` in every namespace (one LIST, by its ownership labels), or, where
/// they cannot be listed, none and why (a namespaced plugin role answers 403; the answers leave the tenants out).
async fn fetch_policy_local_queues(
    client: &kube::Client,
    policy_name: &str,
) -> Result<(Vec<KueueLocalQueue>, Option<String>), LiveError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::LocalQueue.api_resource());
    let params = ListParams::default().labels(&build_ownership_selector(policy_name));
    match api.list(&params).await {
        Ok(list) => Ok((decode_all(list.items, "LocalQueue")?, None)),
        Err(error) => Ok((
            Vec::new(),
            Some(format!(
                "failed to list the policy's LocalQueues across namespaces ({error}), so the tier's tenants are not \
                 shown; that needs list on localqueues.kueue.x-k8s.io in every namespace"
            )),
        )),
    }
}

/// The ProvisioningRequests of `namespace`; none where the API server serves no `autoscaling.x-k8s.io/v1` (404:
/// no cluster-autoscaler CRD, so Kueue made none) or the caller may not list them (403: a role bound before
/// `why` read them; the answer then falls back to the check's message).
async fn fetch_provisioning_requests(
    client: &kube::Client,
    namespace: &str,
) -> Result<Vec<ProvisioningRequestRead>, LiveError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &provisioning_request_resource());
    match api.list(&ListParams::default()).await {
        Ok(list) => decode_all(list.items, "ProvisioningRequest"),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => Ok(Vec::new()),
        Err(source) => Err(LiveError::List { what: format!("ProvisioningRequests in {namespace}"), error: source }),
    }
}

/// The ResourceClaimTemplates of `namespace`, reduced to their device requests; none where the API server serves
/// no `resource.k8s.io/v1` (404).
async fn fetch_claim_templates(
    client: &kube::Client,
    namespace: &str,
) -> Result<Vec<Arc<ClaimTemplateView>>, LiveError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &claim_template_resource());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list
            .items
            .iter()
            .filter_map(|template| serde_json::to_value(template).ok())
            .map(|template| Arc::new(claim_template_view(&template)))
            .collect()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(source) => Err(LiveError::List { what: format!("ResourceClaimTemplates in {namespace}"), error: source }),
    }
}

/// The names of every TierPolicy, sorted, or why they could not be listed (what
/// [`choose_policy_name`](crate::cli::choose_policy_name) chooses from).
pub async fn fetch_policy_names(client: &kube::Client) -> Result<Vec<String>, String> {
    let api: Api<TierPolicy> = Api::all(client.clone());
    let list = api.list_metadata(&ListParams::default()).await.map_err(|error| error.to_string())?;
    let mut names: Vec<String> = list.items.iter().filter_map(|policy| policy.metadata.name.clone()).collect();
    names.sort();
    Ok(names)
}

/// Lists the TierPolicies (when allowed), gets the one asked for (`--policy-name`, else as
/// [`choose_policy_name`](crate::cli::choose_policy_name) chooses: the only one, else `default`) and lists its
/// ClusterQueues (selected by tiergate's ownership labels), and its LocalQueues when `tenants` (one LIST across
/// namespaces, by the same labels).
pub async fn fetch_status_inputs(
    client: &kube::Client,
    policy_name: Option<&str>,
    tenants: bool,
) -> Result<StatusFetched, LiveError> {
    let api = Api::<TierPolicy>::all(client.clone());
    // Listing is optional (the `get`-only role of older charts): without it there is no "only one" and no note
    // naming the served policy.
    let listed = api.list(&ListParams::default()).await.map(|list| list.items).map_err(|error| error.to_string());
    let names = listed.as_ref().map_err(Clone::clone).map(|all| {
        let mut names: Vec<String> = all.iter().filter_map(|policy| policy.metadata.name.clone()).collect();
        names.sort();
        names
    });
    let (policy_name, _) = crate::cli::choose_policy_name(policy_name, Some(&names));
    let all = listed.unwrap_or_default();
    let what = format!("TierPolicy {policy_name}");
    let names: Vec<String> = all.iter().filter_map(|policy| policy.metadata.name.clone()).collect();
    let hint = if names.is_empty() {
        "apply a TierPolicy, or name it with --policy-name (kubectl get tierpolicies)".to_owned()
    } else {
        format!("the cluster has {}: name one with --policy-name", names.join(", "))
    };
    let policy = api
        .get_opt(&policy_name)
        .await
        .map_err(|source| LiveError::Get { what: what.clone(), error: source })?
        .ok_or_else(|| LiveError::NotFound { what, hint })?;
    let other_policies = all.into_iter().filter(|other| other.metadata.name.as_deref() != Some(&policy_name)).collect();
    let queues: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::ClusterQueue.api_resource());
    let params = ListParams::default().labels(&build_ownership_selector(&policy_name));
    let queues = queues
        .list(&params)
        .await
        .map_err(|source| LiveError::List { what: "ClusterQueues".to_owned(), error: source })?;
    // Cohorts only when the policy declares them: a policy without a tree needs no `cohorts` read access.
    let cohorts = if policy.spec.cohorts.is_empty() {
        Vec::new()
    } else {
        let cohorts: Api<DynamicObject> = Api::all_with(client.clone(), &KueueKind::Cohort.api_resource());
        let cohorts = cohorts
            .list(&params)
            .await
            .map_err(|source| LiveError::List { what: "Cohorts".to_owned(), error: source })?;
        decode_all(cohorts.items, "Cohort")?
    };
    let (local_queues, local_queues_note) =
        if tenants { fetch_policy_local_queues(client, &policy_name).await? } else { (Vec::new(), None) };
    Ok(StatusFetched {
        policy,
        other_policies,
        cluster_queues: decode_all(queues.items, "ClusterQueue")?,
        cohorts,
        local_queues,
        local_queues_note,
    })
}

fn decode_all<T: DeserializeOwned>(items: Vec<DynamicObject>, kind: &str) -> Result<Vec<T>, LiveError> {
    items
        .into_iter()
        .map(|item| {
            let what = format!("{kind} {}", item.metadata.name.clone().unwrap_or_default());
            serde_json::to_value(item)
                .and_then(serde_json::from_value)
                .map_err(|source| LiveError::Decode { what, error: source })
        })
        .collect()
}
