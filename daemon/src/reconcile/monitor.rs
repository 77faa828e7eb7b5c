//! The blockers nobody reports by failing an action: watches that fail (403, 404, unreachable), the served
//! TierPolicy missing while others exist, unreachable fleet workers, Kueue's Configuration not mapping the policy's
//! DRA classes ([`kueue_config`]), and a missing or expired webhook certificate. The decisions are pure
//! (`build_*`); [`run_blocker_monitor`] polls the cache, the fleet's health, Kueue's ConfigMap (one GET, only for a
//! policy with DRA classes, every 30 s) and the certificate file every 2 s and sets or clears each blocker
//! ([`run_certificate_monitor`]: the file alone, for `tiergate webhook`).

pub mod kueue_config;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio_util::sync::CancellationToken;

use crate::blockers::{BlockedReason, Blockers};
use crate::cache::kinds::KueueKind;
use crate::cache::{ClusterCache, WatchFailure};
use crate::plan::dra::{DeviceClassMapping, kueue_device_class_mappings};
use crate::plan::tenants::{any_tier_shares, kueue_admission_fair_sharing};
use crate::reconcile::fleet::health::FleetHealth;
use crate::reconcile::worker::health::WorkerHealth;
use kueue_config::{build_kueue_fair_sharing_check, build_kueue_mapping_check, read_kueue_configuration};

/// How often the monitor looks.
const PERIOD: Duration = Duration::from_secs(2);
/// How often Kueue's Configuration is read again while the needed mappings stay the same: it changes only when
/// Kueue is restarted, so one GET per replica every 30 s; a policy edit that changes the mappings reads at once.
const KUEUE_CONFIG_PERIOD: Duration = Duration::from_secs(30);

/// The last read of Kueue's Configuration: when, in which namespace, for which needed mappings and fair-sharing block.
pub type KueueLastRead = (tokio::time::Instant, String, (Vec<DeviceClassMapping>, Option<String>));

/// What the monitor watches.
pub struct MonitorInputs {
    /// Where blockers are recorded.
    pub blockers: Arc<Blockers>,
    /// The management cluster's caches.
    pub cache: Arc<ClusterCache>,
    /// The management cluster's client (one GET of Kueue's ConfigMap per look, for a policy with DRA classes).
    pub client: kube::Client,
    /// Kueue's namespace, where its Configuration is (`--kueue-namespace`).
    pub kueue_namespace: String,
    /// The fleet's worker health (empty without a fleet).
    pub fleet: Arc<FleetHealth>,
    /// The served TierPolicy (`--policy-name`, or the one chosen when it was not given).
    pub policy_name: String,
    /// Why that name was chosen, when `--policy-name` was not given (said with a missing policy).
    pub policy_choice: Option<String>,
    /// The webhook's serving certificate file, when this process serves the webhook.
    pub certificate: Option<CertificateFile>,
    /// When Kueue's Configuration was last read, in which namespace and for which mappings (`None`: never).
    pub kueue_last_read: std::sync::Mutex<Option<KueueLastRead>>,
}

impl std::fmt::Debug for MonitorInputs {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("MonitorInputs")
            .field("policy_name", &self.policy_name)
            .field("kueue_namespace", &self.kueue_namespace)
            .field("certificate", &self.certificate)
            .finish_non_exhaustive()
    }
}

/// Polls until `shutdown`.
pub async fn run_blocker_monitor(inputs: MonitorInputs, shutdown: CancellationToken) {
    every_period(&shutdown, || check_once(&inputs)).await;
}

/// Runs `check` every [`PERIOD`] (the first at once) until `shutdown`.
async fn every_period<F: Future<Output = ()>>(shutdown: &CancellationToken, mut check: impl FnMut() -> F) {
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        check().await;
    }
}

/// One look at every source.
pub async fn check_once(inputs: &MonitorInputs) {
    let blockers = &inputs.blockers;
    for (reason, detail) in build_watch_blockers(&inputs.cache.watch_failures()) {
        blockers.update(reason, detail);
    }
    let snapshot = inputs.cache.snapshot.load();
    let served = snapshot.policy.is_some();
    let needed = snapshot.policy.as_ref().map(|policy| kueue_device_class_mappings(&policy.spec)).unwrap_or_default();
    let sharing = snapshot.policy.as_ref().filter(|policy| any_tier_shares(&policy.spec)).cloned();
    let synced = snapshot.synced;
    drop(snapshot);
    if synced {
        let names = inputs.cache.policy_names();
        let detail = build_policy_blocker(&inputs.policy_name, served, &names, inputs.policy_choice.as_deref());
        blockers.update(BlockedReason::PolicyNotFound, detail);
    }
    if !served {
        // Only an existing policy can be invalid or fail to reconcile; a deleted one leaves no stale blocker.
        for reason in [BlockedReason::PolicyInvalid, BlockedReason::WriteForbidden, BlockedReason::ReconcileFailing] {
            blockers.clear(reason);
        }
    }
    blockers.update(BlockedReason::WorkerUnreachable, build_worker_blocker(&inputs.fleet.workers()));
    if let Some(file) = &inputs.certificate {
        check_certificate(blockers, file).await;
    }
    // Last: this read may wait for the API server. Without a DRA class or a tier sharing among its tenants (or a
    // served policy) Kueue's Configuration is not tiergate's concern, and nothing is read.
    let (mappings, fair_sharing) = if needed.is_empty() && sharing.is_none() {
        (None, None)
    } else {
        let wanted = (needed.clone(), sharing.as_ref().and_then(|policy| kueue_admission_fair_sharing(&policy.spec)));
        let due = match inputs.kueue_last_read.lock() {
            Ok(last) => last.as_ref().is_none_or(|(at, namespace, seen)| {
                at.elapsed() >= KUEUE_CONFIG_PERIOD || *namespace != inputs.kueue_namespace || *seen != wanted
            }),
            Err(_) => true,
        };
        if !due {
            return;
        }
        let read = read_kueue_configuration(&inputs.client, &inputs.kueue_namespace).await;
        let mappings =
            build_kueue_mapping_check(&inputs.kueue_namespace, needed, &read).and_then(|check| check.blocker_detail());
        let fair_sharing = sharing
            .and_then(|policy| build_kueue_fair_sharing_check(&inputs.kueue_namespace, &policy.spec, &read))
            .and_then(|check| check.blocker_detail());
        if let Ok(mut last) = inputs.kueue_last_read.lock() {
            *last = Some((tokio::time::Instant::now(), inputs.kueue_namespace.clone(), wanted));
        }
        (mappings, fair_sharing)
    };
    blockers.update(BlockedReason::KueueDraMappingMissing, mappings);
    blockers.update(BlockedReason::KueueFairSharingMissing, fair_sharing);
}

/// The webhook's serving certificate file the monitor watches.
#[derive(Clone, Debug)]
pub struct CertificateFile {
    /// Where it is (`--tls-cert`).
    pub path: PathBuf,
    /// Whether this process issues it (`--self-managed-certs`). Then an absent file is the certificate manager's to
    /// report: it is absent until the manager's first write, and while it is, the manager says why issuing failed
    /// (`certificate_missing`); the monitor reports only what is in the file.
    pub issued_here: bool,
}

/// Reads the serving certificate file and sets or clears `certificate_missing` and `certificate_expired`.
pub async fn check_certificate(blockers: &Blockers, file: &CertificateFile) {
    let pem =
        tokio::fs::read(&file.path).await.map_err(|error| format!("failed to read {}: {error}", file.path.display()));
    if file.issued_here && pem.is_err() {
        blockers.clear(BlockedReason::CertificateExpired);
        return;
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let (missing, expired) = build_certificate_blockers(pem, now);
    blockers.update(BlockedReason::CertificateMissing, missing);
    blockers.update(BlockedReason::CertificateExpired, expired);
}

/// Checks only the certificate file every 2 s until `shutdown` (`tiergate webhook`, which has no reconciler).
pub async fn run_certificate_monitor(blockers: Arc<Blockers>, file: CertificateFile, shutdown: CancellationToken) {
    every_period(&shutdown, || check_certificate(&blockers, &file)).await;
}

/// The three watch blockers from the failing watches: 404 (`CrdMissing`), 403 (`WatchForbidden`), anything else
/// (`ApiUnreachable`); `None` clears one.
pub fn build_watch_blockers(failures: &[(&'static str, WatchFailure)]) -> [(BlockedReason, Option<String>); 3] {
    let labels = |wanted: WatchFailure| -> Vec<&'static str> {
        failures.iter().filter(|(_, failure)| *failure == wanted).map(|(label, _)| *label).collect()
    };
    let missing = labels(WatchFailure::NotServed);
    let missing_detail = (!missing.is_empty()).then(|| {
        let kueue = missing.iter().any(|label| KueueKind::ALL.iter().any(|kind| kind.name() == *label));
        let hint = if kueue { "; the Kueue kinds need Kueue's v1beta2 CRDs (Kueue v0.15 or newer)" } else { "" };
        format!("the API server answers 404 for: {}{hint}", missing.join(", "))
    });
    let forbidden = labels(WatchFailure::Forbidden);
    let forbidden_detail =
        (!forbidden.is_empty()).then(|| format!("list/watch answered 403 for: {}", forbidden.join(", ")));
    let other = labels(WatchFailure::Other);
    let other_detail = (!other.is_empty()).then(|| format!("failing watches: {}", other.join(", ")));
    [
        (BlockedReason::CrdMissing, missing_detail),
        (BlockedReason::WatchForbidden, forbidden_detail),
        (BlockedReason::ApiUnreachable, other_detail),
    ]
}

/// Why the served policy is not reconciled when it does not exist (`None` when it does): the policies that do
/// exist, and which flag serves one of them.
pub fn build_policy_blocker(served: &str, exists: bool, names: &[String], choice: Option<&str>) -> Option<String> {
    if exists {
        return None;
    }
    let choice = choice.map(|choice| format!(" ({choice})")).unwrap_or_default();
    let others: Vec<&str> = names.iter().map(String::as_str).filter(|name| *name != served).collect();
    Some(match others.as_slice() {
        [] => format!(
            "TierPolicy {served:?}{choice} does not exist and the cluster has no TierPolicy: apply one named \
             {served:?}"
        ),
        [only] => format!(
            "no tiergate instance serves TierPolicy {only:?}: this one serves {served:?}{choice}, which does not \
             exist; restart with --policy-name {only}"
        ),
        several => format!(
            "this instance serves TierPolicy {served:?}{choice}, which does not exist; the cluster has {}: restart \
             with --policy-name naming one of them",
            several.join(", ")
        ),
    })
}

/// The fleet's workers that cannot be reached or have no credentials, with what each last pass found.
pub fn build_worker_blocker(workers: &[WorkerHealth]) -> Option<String> {
    let unreachable: Vec<String> =
        workers.iter().filter(|worker| worker.reachable() == Some(false)).map(WorkerHealth::message).collect();
    (!unreachable.is_empty()).then(|| unreachable.join("; "))
}

/// `(missing, expired)` for the certificate file's contents read at `now` (Unix seconds).
pub fn build_certificate_blockers(pem: Result<Vec<u8>, String>, now: i64) -> (Option<String>, Option<String>) {
    let pem = match pem {
        Ok(pem) => pem,
        Err(error) => return (Some(error), None),
    };
    let not_after = CertificateDer::pem_slice_iter(&pem).next().and_then(Result::ok).and_then(|der| {
        x509_parser::parse_x509_certificate(&der).ok().map(|(_, cert)| cert.validity().not_after.timestamp())
    });
    match not_after {
        None => (Some("the certificate file holds no readable CERTIFICATE block".to_owned()), None),
        Some(not_after) if not_after <= now => {
            let when = k8s_openapi::jiff::Timestamp::from_second(not_after)
                .map_or_else(|_| not_after.to_string(), |time| time.to_string());
            (None, Some(format!("the serving certificate expired at {when}")))
        }
        Some(_) => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheScope, CacheSettings};
    use crate::metrics::Metrics;
    use crate::reconcile::worker::health::WorkerState;

    /// A mocked API server: `answer(path)` gives a failing status for a request, `object(path)` the object a GET
    /// finds, else a list holds `items(path)`; every watch is held open (a quiet cluster).
    fn mock_cluster(
        answer: fn(&str) -> Option<(u16, &'static str)>,
        items: fn(&str) -> Vec<serde_json::Value>,
        object: fn(&str) -> Option<serde_json::Value>,
    ) -> kube::Client {
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        tokio::spawn(async move {
            let mut open_watches = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path().to_owned();
                let (code, body) = if let Some((code, reason)) = answer(&path) {
                    let status = serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "reason": reason, "code": code, "message": format!("{reason}: {path}")});
                    (code, status)
                } else if request.uri().query().unwrap_or_default().contains("watch=true") {
                    open_watches.push(send);
                    continue;
                } else if let Some(found) = object(&path) {
                    (200, found)
                } else {
                    let list = serde_json::json!({"apiVersion": "v1", "kind": "List",
                        "metadata": {"resourceVersion": "10"}, "items": items(&path)});
                    (200, list)
                };
                let response = http::Response::builder()
                    .status(code)
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap();
                send.send_response(response);
            }
        });
        kube::Client::new(service, "default")
    }

    /// Discovery finds no owner kind (so no owner watch); `rest` answers everything else.
    fn no_discovery(path: &str, rest: Option<(u16, &'static str)>) -> Option<(u16, &'static str)> {
        if path.starts_with("/apis/") && path.split('/').count() == 4 { Some((404, "NotFound")) } else { rest }
    }

    fn build_inputs(client: &kube::Client, policy_name: &str, shutdown: &CancellationToken) -> MonitorInputs {
        let metrics = Arc::new(Metrics::new());
        let settings = CacheSettings {
            policy_name: policy_name.to_owned(),
            own_namespace: "tiergate-system".to_owned(),
            debounce: Duration::from_millis(10),
            ledger: None,
            scope: CacheScope::Management,
        };
        MonitorInputs {
            blockers: Blockers::new(&metrics),
            cache: Arc::new(ClusterCache::start(client, settings, metrics, shutdown)),
            client: client.clone(),
            kueue_namespace: "kueue-system".to_owned(),
            fleet: Arc::new(FleetHealth::default()),
            policy_name: policy_name.to_owned(),
            policy_choice: None,
            certificate: None,
            kueue_last_read: std::sync::Mutex::new(None),
        }
    }

    /// Runs the monitor's look until `done` holds for the blockers (the watches fail or sync in their own tasks).
    async fn look_until(inputs: &MonitorInputs, done: impl Fn(&Blockers) -> bool) {
        while !done(&inputs.blockers) {
            check_once(inputs).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn an_expired_certificate_file_blocks_until_a_valid_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tls.crt");
        let file = CertificateFile { path: path.clone(), issued_here: false };
        let blockers = Blockers::detached();
        check_certificate(&blockers, &file).await;
        assert!(blockers.is_active(BlockedReason::CertificateMissing));
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["tiergate-webhook".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        std::fs::write(&path, params.self_signed(&key).unwrap().pem()).unwrap();
        check_certificate(&blockers, &file).await;
        assert!(blockers.is_active(BlockedReason::CertificateExpired));
        assert!(!blockers.is_active(BlockedReason::CertificateMissing));
        params.not_after = rcgen::date_time_ymd(2999, 1, 1);
        std::fs::write(&path, params.self_signed(&key).unwrap().pem()).unwrap();
        check_certificate(&blockers, &file).await;
        assert!(blockers.active().is_empty(), "{:?}", blockers.active());
    }

    #[tokio::test]
    async fn a_self_managed_certificate_not_yet_written_is_the_certificate_managers_to_report() {
        let dir = tempfile::tempdir().unwrap();
        let file = CertificateFile { path: dir.path().join("tls.crt"), issued_here: true };
        let blockers = Blockers::detached();
        check_certificate(&blockers, &file).await;
        assert!(blockers.active().is_empty(), "not issued yet is not missing: {:?}", blockers.active());
        // What the certificate manager set (why issuing failed) stays until the file is there.
        blockers.set(BlockedReason::CertificateMissing, "the self-managed certificate is not issued: forbidden");
        check_certificate(&blockers, &file).await;
        assert!(blockers.is_active(BlockedReason::CertificateMissing));
        std::fs::write(&file.path, "not a certificate").unwrap();
        check_certificate(&blockers, &file).await;
        assert!(blockers.is_active(BlockedReason::CertificateMissing), "an unreadable file is reported");
    }

    #[tokio::test]
    async fn a_watch_rbac_forbids_and_a_missing_kueue_crd_are_both_reported_by_name_from_a_mocked_api_server() {
        let client = mock_cluster(
            |path| {
                let rest = match path {
                    "/api/v1/nodes" => Some((403, "Forbidden")),
                    _ if path.starts_with("/apis/kueue.x-k8s.io/") => Some((404, "NotFound")),
                    _ => None,
                };
                no_discovery(path, rest)
            },
            |_| vec![],
            |_| None,
        );
        let shutdown = CancellationToken::new();
        let inputs = build_inputs(&client, "default", &shutdown);
        look_until(&inputs, |blockers| {
            blockers.is_active(BlockedReason::WatchForbidden) && blockers.is_active(BlockedReason::CrdMissing)
        })
        .await;
        let active = inputs.blockers.active();
        let detail =
            |reason| active.iter().find(|blocker| blocker.reason == reason).map(|blocker| blocker.detail.clone());
        assert_eq!(detail(BlockedReason::WatchForbidden).as_deref(), Some("list/watch answered 403 for: Node"));
        let missing = detail(BlockedReason::CrdMissing).unwrap_or_default();
        assert!(missing.contains("ClusterQueue") && missing.contains("LocalQueue"), "{missing}");
        assert!(!inputs.blockers.is_active(BlockedReason::PolicyNotFound), "nothing is judged from unsynced caches");
        shutdown.cancel();
    }

    fn only_fleet(path: &str) -> Vec<serde_json::Value> {
        if path == "/apis/tiergate.io/v1alpha1/tierpolicies" {
            let mut policy = serde_json::to_value(crate::inputs::load_policy(None).unwrap()).unwrap();
            policy["metadata"]["name"] = serde_json::json!("fleet");
            vec![policy]
        } else {
            vec![]
        }
    }

    #[tokio::test]
    async fn a_served_policy_that_does_not_exist_while_another_does_is_reported_naming_both() {
        let client = mock_cluster(|path| no_discovery(path, None), only_fleet, |_| None);
        let shutdown = CancellationToken::new();
        let inputs = build_inputs(&client, "default", &shutdown);
        assert!(inputs.cache.wait_until_synced().await);
        look_until(&inputs, |blockers| blockers.is_active(BlockedReason::PolicyNotFound)).await;
        let detail = inputs.blockers.active()[0].detail.clone();
        assert!(detail.contains("no tiergate instance serves TierPolicy \"fleet\""), "{detail}");
        assert!(detail.contains("--policy-name fleet"), "{detail}");

        // Serving the policy that exists: nothing blocks.
        let served = build_inputs(&client, "fleet", &shutdown);
        assert!(served.cache.wait_until_synced().await);
        check_once(&served).await;
        assert!(served.blockers.active().is_empty(), "{:?}", served.blockers.active());
        shutdown.cancel();
    }

    /// The DRA sample served as `default`.
    fn only_dra(path: &str) -> Vec<serde_json::Value> {
        if path == "/apis/tiergate.io/v1alpha1/tierpolicies" {
            let text = include_str!("../../../samples/dra/policy.yaml");
            let mut policy = serde_json::to_value(crate::inputs::parse_policy(text, "dra").unwrap()).unwrap();
            policy["metadata"]["name"] = serde_json::json!("default");
            vec![policy]
        } else {
            vec![]
        }
    }

    /// Kueue's ConfigMap: in `kueue-system` with the sample's mappings, in `kueue-old` with none.
    fn kueue_config_maps(path: &str) -> Option<serde_json::Value> {
        let mapped = "resources:\n  deviceClassMappings:\n  - name: nvidia.com/gpu\n    deviceClassNames: \
                      [h100.tiergate.io, l4.tiergate.io]\n";
        let configuration = match path {
            "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config" => mapped,
            "/api/v1/namespaces/kueue-old/configmaps/kueue-manager-config" => "kind: Configuration\n",
            _ => return None,
        };
        Some(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": configuration}}))
    }

    #[tokio::test]
    async fn a_dra_policy_is_blocked_while_kueues_configuration_lacks_its_mapping_and_unblocked_once_it_has_it() {
        let client = mock_cluster(
            |path| {
                let rest = match path {
                    "/api/v1/namespaces/kueue-locked/configmaps/kueue-manager-config" => Some((403, "Forbidden")),
                    "/api/v1/namespaces/kueue-none/configmaps/kueue-manager-config" => Some((404, "NotFound")),
                    _ => None,
                };
                no_discovery(path, rest)
            },
            only_dra,
            kueue_config_maps,
        );
        let shutdown = CancellationToken::new();
        let metrics = Metrics::new();
        let mut inputs = build_inputs(&client, "default", &shutdown);
        inputs.blockers = Blockers::new(&metrics);
        assert!(inputs.cache.wait_until_synced().await);
        let reason = BlockedReason::KueueDraMappingMissing;
        let detail = |inputs: &MonitorInputs| {
            inputs.blockers.active().into_iter().find(|blocker| blocker.reason == reason).map(|blocker| blocker.detail)
        };

        inputs.kueue_namespace = "kueue-old".to_owned();
        check_once(&inputs).await;
        let missing = detail(&inputs).unwrap_or_default();
        assert!(
            missing.starts_with("kueue-old/kueue-manager-config: DeviceClass h100.tiergate.io is not"),
            "{missing}"
        );
        assert!(missing.contains("DeviceClass l4.tiergate.io is not in Kueue's deviceClassMappings"), "{missing}");
        let text = metrics.encode().unwrap();
        assert!(text.contains(r#"tiergate_blocked{reason="kueue_dra_mapping_missing"} 1"#), "{text}");
        let body = crate::admin::build_readyz_body(None, &inputs.blockers.active());
        assert!(body.starts_with("ready (the webhook serves), but blocked:"), "{body}");
        assert!(
            body.contains("[-] kueue_dra_mapping_missing: Kueue does not charge") && body.contains("--kueue-config")
        );

        inputs.kueue_namespace = "kueue-locked".to_owned();
        check_once(&inputs).await;
        let forbidden = detail(&inputs).unwrap_or_default();
        assert!(forbidden.starts_with("cannot read kueue-locked/kueue-manager-config: Forbidden: "), "{forbidden}");
        assert!(forbidden.contains("(403 Forbidden)"), "{forbidden}");
        inputs.kueue_namespace = "kueue-none".to_owned();
        check_once(&inputs).await;
        let absent = detail(&inputs).unwrap_or_default();
        assert!(absent.contains("kueue-none/kueue-manager-config: the ConfigMap does not exist"), "{absent}");

        inputs.kueue_namespace = "kueue-system".to_owned();
        check_once(&inputs).await;
        assert!(inputs.blockers.active().is_empty(), "{:?}", inputs.blockers.active());
        assert!(metrics.encode().unwrap().contains(r#"tiergate_blocked{reason="kueue_dra_mapping_missing"} 0"#));
        shutdown.cancel();
    }

    #[test]
    fn failing_watches_are_sorted_into_missing_crds_forbidden_watches_and_an_unreachable_api() {
        let failures = [
            ("ClusterQueue", WatchFailure::NotServed),
            ("Node", WatchFailure::Forbidden),
            ("Namespace", WatchFailure::Other),
        ];
        let [missing, forbidden, other] = build_watch_blockers(&failures);
        assert_eq!(missing.0, BlockedReason::CrdMissing);
        let missing = missing.1.unwrap();
        assert!(missing.contains("ClusterQueue") && missing.contains("Kueue v0.15"), "{missing}");
        assert_eq!(forbidden.1.unwrap(), "list/watch answered 403 for: Node");
        assert_eq!(other.1.unwrap(), "failing watches: Namespace");
        assert!(build_watch_blockers(&[]).iter().all(|(_, detail)| detail.is_none()));
    }

    #[test]
    fn a_missing_served_policy_names_the_policy_that_exists_and_the_flag_that_serves_it() {
        let fleet = ["fleet".to_owned()];
        let detail = build_policy_blocker("default", false, &fleet, None).unwrap();
        assert!(detail.contains("no tiergate instance serves TierPolicy \"fleet\""), "{detail}");
        assert!(detail.contains("this one serves \"default\"") && detail.contains("--policy-name fleet"), "{detail}");
        let several = ["fleet".to_owned(), "spot-mix".to_owned()];
        let detail = build_policy_blocker("default", false, &several, Some("--policy-name not given")).unwrap();
        assert!(detail.contains("fleet, spot-mix") && detail.contains("--policy-name not given"), "{detail}");
        let detail = build_policy_blocker("default", false, &[], None).unwrap();
        assert!(detail.contains("no TierPolicy"), "{detail}");
        assert_eq!(build_policy_blocker("default", true, &several, None), None);
    }

    #[test]
    fn only_workers_that_do_not_answer_block() {
        let down = WorkerHealth {
            cluster: "us-east".to_owned(),
            state: WorkerState::Unreachable { failing_watches: vec!["Namespace"] },
        };
        let pending = WorkerHealth { cluster: "eu-west".to_owned(), state: WorkerState::Pending };
        let detail = build_worker_blocker(&[down, pending.clone()]).unwrap();
        assert!(detail.contains("us-east") && !detail.contains("eu-west"), "{detail}");
        assert_eq!(build_worker_blocker(&[pending]), None);
    }

    #[test]
    fn a_certificate_file_that_is_missing_unreadable_or_expired_blocks_and_a_valid_one_does_not() {
        let (missing, expired) = build_certificate_blockers(Err("failed to read /tls/tls.crt".to_owned()), 0);
        assert_eq!((missing.as_deref(), expired), (Some("failed to read /tls/tls.crt"), None));
        let (missing, _) = build_certificate_blockers(Ok(b"not a pem".to_vec()), 0);
        assert!(missing.is_some());
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["tiergate-webhook".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let pem = params.self_signed(&key).unwrap().pem().into_bytes();
        let before = 1_800_000_000; // 2027
        assert_eq!(build_certificate_blockers(Ok(pem.clone()), before), (None, None));
        let after = 1_900_000_000; // 2030-03
        let (missing, expired) = build_certificate_blockers(Ok(pem), after);
        assert_eq!(missing, None);
        assert!(expired.unwrap().contains("expired at 2030-01-01"));
    }
}
