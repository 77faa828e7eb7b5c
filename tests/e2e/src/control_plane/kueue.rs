//! Kueue as the control plane runs it: its manager configuration (the file `kueue --config` reads, with the DRA
//! `deviceClassMappings` it is given, also stored as `kueue-system/kueue-manager-config` as a release install does)
//! and its admission webhooks registered by Service as a release install registers them. A control plane without
//! nodes cannot route to a ClusterIP, so the Service is an ExternalName one naming the loopback address the webhook
//! server listens on: the API server dials it directly, over HTTP/1.1 as in any cluster (it would speak HTTP/2 to a
//! webhook registered by a loopback URL). Pure: builds objects and text.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::ObjectMeta;
use tiergate::plan::dra::DeviceClassMapping;

/// Kueue's namespace, as a release install names it (tests read `kueue-manager-config` there).
pub const KUEUE_NAMESPACE: &str = "kueue-system";
/// The ConfigMap holding the manager configuration, and its key.
pub const MANAGER_CONFIG: (&str, &str) = ("kueue-manager-config", "controller_manager_config.yaml");
/// Names of the two webhook configurations (a release install's, after its name prefix).
pub const WEBHOOK_CONFIGURATIONS: (&str, &str) =
    ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration");

/// The Service Kueue's webhooks are registered with (a release install's name).
pub const WEBHOOK_SERVICE: &str = "kueue-webhook-service";
/// The address Kueue's webhook server listens on, which the Service names.
pub const WEBHOOK_HOST: &str = "127.0.0.1";

/// The name the API server checks Kueue's serving certificate for: `<service>.<namespace>.svc`.
pub fn webhook_service_host() -> String {
    format!("{WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc")
}

/// The ExternalName Service Kueue's webhooks are sent to: [`WEBHOOK_HOST`], at the port each webhook names.
pub fn build_webhook_service() -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(WEBHOOK_SERVICE.to_owned()),
            namespace: Some(KUEUE_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ExternalName".to_owned()),
            external_name: Some(WEBHOOK_HOST.to_owned()),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// A kind Kueue's webhook server handles: controller-runtime serves it at
/// `/{mutate,validate}-<group with dots as dashes>-<version>-<lowercase kind>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookKind {
    /// API group (`""` for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub resource: String,
    /// Operations of the mutating webhook (Kueue mutates most kinds only at CREATE).
    pub mutating: &'static [&'static str],
    /// Whether Kueue validates the kind (at CREATE and UPDATE).
    pub validating: bool,
}

impl WebhookKind {
    /// The path of the mutating or validating handler.
    pub fn path(&self, verb: &str) -> String {
        format!("/{verb}-{}-{}-{}", self.group.replace('.', "-"), self.version, self.kind.to_lowercase())
    }
}

/// Kueue's own kinds with webhooks (v0.19.2 `config/components/webhook/manifests.yaml`).
pub fn kueue_own_webhook_kinds() -> Vec<WebhookKind> {
    let kueue = |kind: &str, resource: &str, mutating: &'static [&'static str]| WebhookKind {
        group: "kueue.x-k8s.io".to_owned(),
        version: "v1beta2".to_owned(),
        kind: kind.to_owned(),
        resource: resource.to_owned(),
        mutating,
        validating: true,
    };
    vec![
        kueue("ClusterQueue", "clusterqueues", &["CREATE"]),
        kueue("ResourceFlavor", "resourceflavors", &["CREATE"]),
        kueue("Workload", "workloads", &["CREATE"]),
        kueue("Cohort", "cohorts", &[]),
    ]
}

/// The framework names Kueue's `integrations.frameworks` uses for a kind: the lowercase kind for the core and
/// `apps` groups (`pod`, `deployment`), `<group>/<lowercase kind>` otherwise (`batch/job`, `ray.io/rayjob`).
pub fn framework_name(group: &str, kind: &str) -> String {
    match group {
        "" | "apps" => kind.to_lowercase(),
        _ => format!("{group}/{}", kind.to_lowercase()),
    }
}

/// Kinds whose workloads Kueue also mutates on UPDATE (its pod-group integrations).
const MUTATED_ON_UPDATE: &[&str] = &["Deployment", "StatefulSet", "LeaderWorkerSet"];

/// The webhook kind of an integrated framework, served as `resource`.
pub fn framework_webhook_kind(group: &str, version: &str, kind: &str, resource: &str) -> WebhookKind {
    WebhookKind {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
        resource: resource.to_owned(),
        mutating: if MUTATED_ON_UPDATE.contains(&kind) { &["CREATE", "UPDATE"] } else { &["CREATE"] },
        validating: true,
    }
}

/// The manager configuration: webhooks served on loopback from `cert_dir`, health on `health_port`, no leader
/// election, no metrics listener, no internal certificate management, the given frameworks, fair sharing on (among
/// ClusterQueues and Cohorts, and among a ClusterQueue's LocalQueues where it asks), and
/// `resources.deviceClassMappings` when `device_class_mappings` has any.
pub fn build_manager_config(
    webhook_port: u16,
    cert_dir: &str,
    health_port: u16,
    frameworks: &[String],
    device_class_mappings: &[DeviceClassMapping],
) -> String {
    let mut config = serde_json::json!({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": format!("127.0.0.1:{health_port}")},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": WEBHOOK_HOST, "port": webhook_port, "certDir": cert_dir},
        "leaderElection": {"leaderElect": false},
        "internalCertManagement": {"enable": false},
        "manageJobsWithoutQueueName": false,
        "integrations": {"frameworks": frameworks},
        // Fair sharing on (v1beta2: the block's presence enables it), so the cohort_tree suite sees tiers' and
        // cohorts' weights at work; Kueue's default strategies. Without cohorts it changes nothing.
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
        // Admission fair sharing among a ClusterQueue's LocalQueues (issue 50), as `tiergate render --kueue-config`
        // prints it, sampled every second so the tenant_sharing suite sees usage within a cycle; it applies only to
        // ClusterQueues with `admissionScope`, so the other suites' queues keep Kueue's default order. The half-life
        // spans at most 693 samples: Kueue before v0.18.5 rounds a one-GPU sample below one milli-unit to zero.
        "admissionFairSharing": {"usageHalfLifeTime": "10m", "usageSamplingInterval": "1s",
            "resourceWeights": {"nvidia.com/gpu": 1, "cpu": 0.01, "memory": 0, "ephemeral-storage": 0}},
    });
    // Kueue charges a DRA claim's devices to the resource its DeviceClass is mapped to, and ignores them otherwise.
    if !device_class_mappings.is_empty()
        && let Some(object) = config.as_object_mut()
    {
        object.insert("resources".to_owned(), serde_json::json!({"deviceClassMappings": device_class_mappings}));
    }
    config.to_string()
}

/// Kueue's namespaces selector for workload webhooks: everything but `kube-system` and Kueue's own namespace.
fn outside_system_namespaces() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".to_owned(),
            operator: "NotIn".to_owned(),
            values: Some(vec!["kube-system".to_owned(), KUEUE_NAMESPACE.to_owned()]),
        }]),
        ..LabelSelector::default()
    }
}

fn client_config(port: i32, path: &str, ca_pem: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        url: None,
        ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
        service: Some(ServiceReference {
            namespace: KUEUE_NAMESPACE.to_owned(),
            name: WEBHOOK_SERVICE.to_owned(),
            path: Some(path.to_owned()),
            port: Some(port),
        }),
    }
}

fn rules(kind: &WebhookKind, operations: &[&str]) -> Vec<RuleWithOperations> {
    vec![RuleWithOperations {
        api_groups: Some(vec![kind.group.clone()]),
        api_versions: Some(vec![kind.version.clone()]),
        operations: Some(operations.iter().map(|operation| (*operation).to_owned()).collect()),
        resources: Some(vec![kind.resource.clone()]),
        scope: None,
    }]
}

fn webhook_name(prefix: char, kind: &WebhookKind) -> String {
    format!("{prefix}{}.kb.io", kind.kind.to_lowercase())
}

/// Kueue's two webhook configurations for `kinds`, calling [`WEBHOOK_SERVICE`] at `port` and trusting `ca_pem`;
/// `failurePolicy: Fail` as a release install registers them.
pub fn build_webhook_configurations(
    kinds: &[WebhookKind],
    port: i32,
    ca_pem: &str,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let workload_namespaces = |kind: &WebhookKind| (kind.group != "kueue.x-k8s.io").then(outside_system_namespaces);
    let mutating = kinds
        .iter()
        .filter(|kind| !kind.mutating.is_empty())
        .map(|kind| MutatingWebhook {
            name: webhook_name('m', kind),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: client_config(port, &kind.path("mutate"), ca_pem),
            failure_policy: Some("Fail".to_owned()),
            side_effects: "None".to_owned(),
            namespace_selector: workload_namespaces(kind),
            rules: Some(rules(kind, kind.mutating)),
            ..MutatingWebhook::default()
        })
        .collect();
    let validating = kinds
        .iter()
        .filter(|kind| kind.validating)
        .map(|kind| ValidatingWebhook {
            name: webhook_name('v', kind),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: client_config(port, &kind.path("validate"), ca_pem),
            failure_policy: Some("Fail".to_owned()),
            side_effects: "None".to_owned(),
            namespace_selector: workload_namespaces(kind),
            rules: Some(rules(kind, &["CREATE", "UPDATE"])),
            ..ValidatingWebhook::default()
        })
        .collect();
    let meta = |name: &str| ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() };
    (
        MutatingWebhookConfiguration { metadata: meta(WEBHOOK_CONFIGURATIONS.0), webhooks: Some(mutating) },
        ValidatingWebhookConfiguration { metadata: meta(WEBHOOK_CONFIGURATIONS.1), webhooks: Some(validating) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_controller_runtimes_convention_including_the_core_group() {
        let job = framework_webhook_kind("batch", "v1", "Job", "jobs");
        assert_eq!(job.path("mutate"), "/mutate-batch-v1-job");
        let pod = framework_webhook_kind("", "v1", "Pod", "pods");
        assert_eq!(pod.path("validate"), "/validate--v1-pod");
        let jobset = framework_webhook_kind("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets");
        assert_eq!(jobset.path("mutate"), "/mutate-jobset-x-k8s-io-v1alpha2-jobset");
    }

    #[test]
    fn framework_names_are_kueues() {
        assert_eq!(framework_name("batch", "Job"), "batch/job");
        assert_eq!(framework_name("", "Pod"), "pod");
        assert_eq!(framework_name("apps", "StatefulSet"), "statefulset");
        assert_eq!(framework_name("kubeflow.org", "MPIJob"), "kubeflow.org/mpijob");
    }

    fn manager_config(device_class_mappings: &[DeviceClassMapping]) -> serde_json::Value {
        let frameworks = ["batch/job".to_owned()];
        let text = build_manager_config(9443, "/certs", 8081, &frameworks, device_class_mappings);
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn the_manager_config_carries_the_device_class_mappings_where_kueue_and_tiergate_check_read_them() {
        let mappings = vec![DeviceClassMapping {
            name: "nvidia.com/gpu".to_owned(),
            device_class_names: vec!["h100.tiergate.io".to_owned(), "l4.tiergate.io".to_owned()],
        }];
        let config = manager_config(&mappings);
        assert_eq!(
            config["resources"],
            serde_json::json!({"deviceClassMappings": [
                {"name": "nvidia.com/gpu", "deviceClassNames": ["h100.tiergate.io", "l4.tiergate.io"]}
            ]})
        );
        let text = config.to_string();
        assert_eq!(tiergate::plan::dra::parse_kueue_mappings(&text).unwrap(), mappings);
        assert_eq!(config["integrations"]["frameworks"], serde_json::json!(["batch/job"]));
    }

    #[test]
    fn the_manager_config_has_no_resources_block_without_mappings() {
        assert!(manager_config(&[]).get("resources").is_none());
    }

    #[test]
    fn the_webhook_service_names_the_address_the_webhook_server_listens_on() {
        let service = build_webhook_service();
        let spec = service.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ExternalName"));
        assert_eq!(spec.external_name.as_deref(), Some(WEBHOOK_HOST));
        let config: serde_json::Value = serde_json::from_str(&build_manager_config(1, "/c", 2, &[], &[])).unwrap();
        assert_eq!(config["webhook"]["host"], WEBHOOK_HOST);
        assert_eq!(webhook_service_host(), "kueue-webhook-service.kueue-system.svc");
    }

    #[test]
    fn workload_webhooks_skip_system_namespaces_and_kueues_own_kinds_do_not() {
        let mut kinds = kueue_own_webhook_kinds();
        kinds.push(framework_webhook_kind("apps", "v1", "Deployment", "deployments"));
        let (mutating, validating) = build_webhook_configurations(&kinds, 1, "ca");
        let mutating = mutating.webhooks.unwrap();
        let deployment = mutating.iter().find(|webhook| webhook.name == "mdeployment.kb.io").unwrap();
        assert!(deployment.namespace_selector.is_some());
        assert_eq!(deployment.rules.as_ref().unwrap()[0].operations.as_ref().unwrap(), &["CREATE", "UPDATE"]);
        let service = deployment.client_config.service.as_ref().unwrap();
        assert_eq!(deployment.client_config.url, None);
        assert_eq!((service.namespace.as_str(), service.name.as_str()), (KUEUE_NAMESPACE, WEBHOOK_SERVICE));
        assert_eq!((service.path.as_deref(), service.port), (Some("/mutate-apps-v1-deployment"), Some(1)));
        let validating = validating.webhooks.unwrap();
        let cohort = validating.iter().find(|webhook| webhook.name == "vcohort.kb.io").unwrap();
        assert!(cohort.namespace_selector.is_none());
        assert!(!mutating.iter().any(|webhook| webhook.name == "mcohort.kb.io"), "Kueue does not mutate cohorts");
    }
}
