//! The webhook half of the e2e harness: where the API server reaches this machine (from the environment), a CA
//! and serving certificate for that address, the real webhook server running in-process, and a
//! MutatingWebhookConfiguration with a URL client config that only selects one run's namespaces; does I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, ObjectMeta};
use tiergate::admission::server::{AdmissionState, ServeError, serve_webhook_on};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::{Cleanup, HarnessError, InProcessDaemon, run_cluster_test, skip};

/// An address of this machine the API server can reach (kind: the docker network's gateway, e.g. `172.18.0.1`).
pub const HOST_ENV: &str = "TIERGATE_E2E_WEBHOOK_HOST";
/// The port the in-process webhook listens on (all interfaces).
pub const PORT_ENV: &str = "TIERGATE_E2E_WEBHOOK_PORT";
/// Port used when [`PORT_ENV`] is unset.
pub const DEFAULT_PORT: u16 = 9443;
/// Namespace label whose value is the run's prefix; the webhook configuration selects only these namespaces.
pub const RUN_LABEL: &str = "e2e.tiergate.io/run";
/// Name of the one webhook in the configuration (a fully qualified name, as the API requires).
pub const WEBHOOK_NAME: &str = "mutate.e2e.tiergate.io";
/// DRA's API group (ResourceClaims, ResourceClaimTemplates).
const CLAIM_GROUP: &str = "resource.k8s.io";
/// Long enough for any run; the CA and certificate exist only in this process and a temporary directory.
const CERTIFICATE_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Where the API server sends admission reviews: `https://host:port/mutate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookEndpoint {
    /// IP address or DNS name of this machine, as the API server reaches it.
    pub host: String,
    /// Listen port.
    pub port: u16,
}

impl WebhookEndpoint {
    /// The endpoint from the values of [`HOST_ENV`] and [`PORT_ENV`]: `None` without a host, an error naming the
    /// variable for a port that is not a number in 1..=65535.
    pub fn from_env_values(host: Option<&str>, port: Option<&str>) -> Result<Option<Self>, String> {
        let Some(host) = host.map(str::trim).filter(|host| !host.is_empty()) else {
            return Ok(None);
        };
        let port =
            match port.map(str::trim).filter(|port| !port.is_empty()) {
                None => DEFAULT_PORT,
                Some(text) => text.parse::<u16>().ok().filter(|port| *port != 0).ok_or_else(|| {
                    format!("failed to read {PORT_ENV}={text:?}: give a port number between 1 and 65535")
                })?,
            };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        Ok(Some(Self { host, port }))
    }

    /// The URL the webhook configuration names.
    pub fn url(&self) -> String {
        match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(address)) => format!("https://[{address}]:{}/mutate", self.port),
            _ => format!("https://{}:{}/mutate", self.host, self.port),
        }
    }

    /// A loopback host itself (the throwaway control plane's API server is on this machine), otherwise every
    /// interface of the host's address family, on the endpoint's port.
    pub fn listen(&self) -> SocketAddr {
        let address = match self.host.parse::<IpAddr>() {
            Ok(address) if address.is_loopback() => address,
            Ok(IpAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        SocketAddr::new(address, self.port)
    }
}

/// The endpoint from the environment, or `None` (after printing why) when [`HOST_ENV`] is unset. A malformed
/// [`PORT_ENV`] is an error, not a skip: somebody meant to run the test.
pub fn webhook_endpoint_or_skip(test: &str) -> Result<Option<WebhookEndpoint>, HarnessError> {
    let host = std::env::var(HOST_ENV).ok();
    let port = std::env::var(PORT_ENV).ok();
    let endpoint = WebhookEndpoint::from_env_values(host.as_deref(), port.as_deref())?;
    if endpoint.is_none() {
        skip(
            test,
            &format!(
                "{HOST_ENV} is not set; set it to an address of this machine the API server can reach (kind: \
                 the IPv4 gateway in `docker network inspect kind`, e.g. 172.18.0.1), and {PORT_ENV} if \
                 {DEFAULT_PORT} is taken"
            ),
        );
    }
    Ok(endpoint)
}

/// A cluster-gated webhook test ([`run_cluster_test`]) that also skips, saying why, without a webhook endpoint.
pub async fn run_webhook_test(
    test: &str,
    scenario: impl AsyncFnOnce(&Client, &Cleanup, &WebhookEndpoint) -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    run_cluster_test(test, async |client: &Client, cleanup: &Cleanup| {
        let Some(endpoint) = webhook_endpoint_or_skip(test)? else { return Ok(()) };
        scenario(client, cleanup, &endpoint).await
    })
    .await
}

/// Serves `daemon`'s webhook at `endpoint` while `checks` run, then cleans up while the webhook still answers
/// (namespace deletion updates pods, and a registered configuration fails closed), and only then stops the
/// webhook and the daemon. The checks' outcome is returned.
pub async fn serve_webhook_while(
    daemon: InProcessDaemon,
    endpoint: &WebhookEndpoint,
    cleanup: &Cleanup,
    checks: impl AsyncFnOnce(&InProcessWebhook) -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    let outcome = match InProcessWebhook::start(endpoint, daemon.admission_state()) {
        Ok(webhook) => {
            let outcome = checks(&webhook).await;
            cleanup.run().await;
            webhook.stop().await;
            outcome
        }
        Err(error) => Err(error),
    };
    daemon.stop().await;
    outcome
}

/// A fresh CA and a serving certificate for `host` (an IP SAN for an address, a DNS SAN for a name), made by
/// tiergate's own certificate code: (CA PEM, certificate PEM, key PEM).
pub fn build_test_certificates(host: &str) -> Result<(String, String, String), HarnessError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let now = i64::try_from(now)?;
    let (ca_pem, ca_key_pem) = tiergate::certs::build_ca(now, CERTIFICATE_LIFETIME)?;
    let (cert_pem, key_pem) = tiergate::certs::build_serving_certificate(
        &ca_pem,
        &ca_key_pem,
        &[host.to_owned()],
        now,
        CERTIFICATE_LIFETIME,
    )?;
    Ok((ca_pem, cert_pem, key_pem))
}

/// The real webhook server (`serve_webhook_on`) running in this process with a certificate for the endpoint's
/// host. Dropping it stops the server; [`InProcessWebhook::stop`] also waits for it.
#[derive(Debug)]
pub struct InProcessWebhook {
    /// The CA that signed the serving certificate (the webhook configuration's `caBundle`).
    pub ca_pem: String,
    /// Where it listens (the bound port, also when the endpoint asked for port 0).
    pub listen: SocketAddr,
    stop_on_drop: DropGuard,
    task: JoinHandle<Result<(), ServeError>>,
    _files: tempfile::TempDir,
}

impl InProcessWebhook {
    /// Writes a new certificate to a temporary directory, binds the endpoint's port (a busy port is an error
    /// here, naming [`PORT_ENV`]) and serves `state` on it. Needs a Tokio runtime.
    pub fn start(endpoint: &WebhookEndpoint, state: AdmissionState) -> Result<Self, HarnessError> {
        let (ca_pem, cert_pem, key_pem) = build_test_certificates(&endpoint.host)?;
        let files = tempfile::tempdir()?;
        let (cert, key) = (files.path().join("tls.crt"), files.path().join("tls.key"));
        std::fs::write(&cert, cert_pem)?;
        std::fs::write(&key, key_pem)?;
        let listen = endpoint.listen();
        let listener = std::net::TcpListener::bind(listen)
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .map_err(|error| format!("failed to listen on {listen}: {error}; set {PORT_ENV} to a free port"))?;
        let listen = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move { serve_webhook_on(listener, &cert, &key, state, token).await });
        Ok(Self { ca_pem, listen, stop_on_drop: shutdown.drop_guard(), task, _files: files })
    }

    /// Whether the server is still serving (it stops early only on an error, which [`Self::stop`] prints).
    pub fn is_serving(&self) -> bool {
        !self.task.is_finished()
    }

    /// Stops the server, waits until in-flight requests are answered, and prints an error it stopped with.
    pub async fn stop(self) {
        let Self { stop_on_drop, task, _files, .. } = self;
        drop(stop_on_drop);
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => println!("the in-process webhook stopped with an error: {error}"),
            Err(error) => println!("the in-process webhook task failed: {error}"),
        }
    }
}

/// What the API server does when it gets no usable answer from the webhook (a refused connection, a timeout, a
/// non-200 status such as the webhook's 429 over budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The request is refused: a webhook the API server cannot reach shows as errors (the suites' default).
    Fail,
    /// The request goes on unmutated, as the chart registers tiergate (`webhook.failurePolicy: Ignore`).
    Ignore,
}

impl FailurePolicy {
    /// The value of the configuration's `failurePolicy` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "Fail",
            Self::Ignore => "Ignore",
        }
    }
}

/// A MutatingWebhookConfiguration sending CREATE and UPDATE of Pods, Jobs, Deployments and StatefulSets, and
/// CREATE of DRA ResourceClaims and ResourceClaimTemplates (as the chart's `claims.tiergate.io`: their spec is
/// immutable), in the namespaces labelled `RUN_LABEL: run` to `endpoint`, trusting `ca_pem`. `failurePolicy:
/// Fail` makes a webhook the API server cannot reach visible as errors instead of silently unmutated objects.
pub fn build_webhook_configuration(
    name: &str,
    endpoint: &WebhookEndpoint,
    ca_pem: &str,
    run: &str,
) -> MutatingWebhookConfiguration {
    build_webhook_configuration_with(name, endpoint, ca_pem, run, FailurePolicy::Fail)
}

/// [`build_webhook_configuration`] with `failure_policy` (the chart's is `Ignore`); the timeout is the chart's 5 s.
pub fn build_webhook_configuration_with(
    name: &str,
    endpoint: &WebhookEndpoint,
    ca_pem: &str,
    run: &str,
    failure_policy: FailurePolicy,
) -> MutatingWebhookConfiguration {
    let rule_for = |group: &str, resources: &[&str], operations: &[&str]| RuleWithOperations {
        api_groups: Some(vec![group.to_owned()]),
        api_versions: Some(vec!["v1".to_owned()]),
        operations: Some(operations.iter().map(|operation| (*operation).to_owned()).collect()),
        resources: Some(resources.iter().map(|resource| (*resource).to_owned()).collect()),
        scope: Some("Namespaced".to_owned()),
    };
    let rule = |group: &str, resources: &[&str]| rule_for(group, resources, &["CREATE", "UPDATE"]);
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(RUN_LABEL.to_owned(), run.to_owned())].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: WEBHOOK_NAME.to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            side_effects: "None".to_owned(),
            failure_policy: Some(failure_policy.as_str().to_owned()),
            timeout_seconds: Some(5),
            reinvocation_policy: Some("IfNeeded".to_owned()),
            client_config: WebhookClientConfig {
                url: Some(endpoint.url()),
                ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
                service: None,
            },
            namespace_selector: Some(LabelSelector {
                match_labels: Some([(RUN_LABEL.to_owned(), run.to_owned())].into()),
                ..LabelSelector::default()
            }),
            rules: Some(vec![
                rule("", &["pods"]),
                rule("batch", &["jobs"]),
                rule("apps", &["deployments", "statefulsets"]),
                // No suite but the DRA one makes claims; a rule for an API the server does not serve matches
                // nothing.
                rule_for(CLAIM_GROUP, &["resourceclaims", "resourceclaimtemplates"], &["CREATE"]),
            ]),
            ..MutatingWebhook::default()
        }]),
    }
}

/// Creates [`build_webhook_configuration`] under a random name, tracked for cleanup; returns the name. Track it
/// after the namespaces so cleanup deletes it first, while the webhook still answers the pod updates that
/// namespace deletion causes.
pub async fn register_webhook(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    ca_pem: &str,
    run: &str,
) -> Result<String, HarnessError> {
    register_webhook_with(client, cleanup, endpoint, ca_pem, run, FailurePolicy::Fail).await
}

/// [`register_webhook`] with `failure_policy`.
pub async fn register_webhook_with(
    client: &Client,
    cleanup: &Cleanup,
    endpoint: &WebhookEndpoint,
    ca_pem: &str,
    run: &str,
    failure_policy: FailurePolicy,
) -> Result<String, HarnessError> {
    let name = crate::random_name("tiergate-e2e");
    let configuration = build_webhook_configuration_with(&name, endpoint, ca_pem, run, failure_policy);
    Api::<MutatingWebhookConfiguration>::all(client.clone()).create(&PostParams::default(), &configuration).await?;
    cleanup.track(ApiResource::erase::<MutatingWebhookConfiguration>(&()), None, &name);
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(host: &str, port: Option<&str>) -> Result<Option<WebhookEndpoint>, String> {
        WebhookEndpoint::from_env_values(Some(host), port)
    }

    #[test]
    fn no_host_means_skip_and_the_port_defaults_to_9443() {
        assert_eq!(WebhookEndpoint::from_env_values(None, Some("1")), Ok(None));
        assert_eq!(WebhookEndpoint::from_env_values(Some("  "), None), Ok(None));
        let found = endpoint("172.18.0.1", None).unwrap().unwrap();
        assert_eq!(
            (found.url(), found.listen()),
            ("https://172.18.0.1:9443/mutate".to_owned(), "0.0.0.0:9443".parse().unwrap())
        );
    }

    #[test]
    fn a_bad_port_is_an_error_naming_the_variable() {
        for bad in ["0", "65536", "https"] {
            let error = endpoint("10.0.0.1", Some(bad)).unwrap_err();
            assert!(error.contains(PORT_ENV) && error.contains(bad), "{error}");
        }
    }

    #[test]
    fn ipv6_hosts_are_bracketed_in_the_url_and_listen_on_every_ipv6_interface() {
        let found = endpoint("[fd00::1]", Some("8443")).unwrap().unwrap();
        assert_eq!(found.url(), "https://[fd00::1]:8443/mutate");
        assert_eq!(found.listen(), "[::]:8443".parse().unwrap());
        let loopback = endpoint("127.0.0.1", Some("8443")).unwrap().unwrap();
        assert_eq!(loopback.listen(), "127.0.0.1:8443".parse().unwrap(), "loopback is never exposed further");
        assert_eq!(
            endpoint("host.docker.internal", None).unwrap().unwrap().url(),
            "https://host.docker.internal:9443/mutate"
        );
    }

    #[test]
    fn the_serving_certificate_names_an_ip_host_as_an_ip_san_and_chains_to_the_ca() {
        use rustls_pki_types::pem::PemObject;
        use x509_parser::extensions::GeneralName;
        let (ca, cert, key) = build_test_certificates("172.18.0.1").unwrap();
        assert!(tiergate::certs::is_signed_by(&cert, &ca));
        assert!(tiergate::certs::key_matches_certificate(&cert, &key));
        let der = rustls_pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        let names = parsed.subject_alternative_name().unwrap().unwrap().value.general_names.clone();
        assert_eq!(names, [GeneralName::IPAddress(&[172, 18, 0, 1])]);
    }

    /// What the API server does, on loopback: TLS verified against the CA bundle at the IP address in the URL,
    /// ALPN h2 offered, an AdmissionReview posted and its uid answered.
    #[tokio::test]
    async fn the_in_process_webhook_answers_over_tls_verified_at_its_ip_with_the_ca_it_hands_out() {
        use rustls_pki_types::pem::PemObject;
        let state = AdmissionState {
            snapshot: std::sync::Arc::default(),
            scorer: std::sync::Arc::default(),
            ledger: std::sync::Arc::default(),
            metrics: std::sync::Arc::new(tiergate::metrics::Metrics::new()),
        };
        let webhook =
            InProcessWebhook::start(&WebhookEndpoint { host: "127.0.0.1".to_owned(), port: 0 }, state).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls_pki_types::CertificateDer::from_pem_slice(webhook.ca_pem.as_bytes()).unwrap()).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let client = reqwest::Client::builder().tls_backend_preconfigured(tls).build().unwrap();
        let url = format!("https://127.0.0.1:{}/mutate", webhook.listen.port());
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "e2e-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "name": "p", "namespace": "n",
                "operation": "CREATE", "userInfo": {"username": "e2e"}, "dryRun": true,
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}
            }
        });
        let mut answer = None;
        for _ in 0..100 {
            match client.post(&url).json(&review).send().await {
                Ok(response) => {
                    answer = Some(response);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let response = answer.expect("the webhook never answered over verified TLS");
        assert_eq!(response.version(), reqwest::Version::HTTP_2);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            (body["response"]["uid"].as_str(), body["response"]["allowed"].as_bool()),
            (Some("e2e-1"), Some(true))
        );
        webhook.stop().await;
    }

    #[test]
    fn the_configuration_sends_only_this_runs_namespaces_and_fails_closed() {
        let found = endpoint("172.18.0.1", None).unwrap().unwrap();
        let configuration = build_webhook_configuration("tg", &found, "PEM", "e2e-1234");
        let webhook = &configuration.webhooks.unwrap()[0];
        let selector = webhook.namespace_selector.as_ref().unwrap();
        assert_eq!(selector.match_labels, Some([(RUN_LABEL.to_owned(), "e2e-1234".to_owned())].into()));
        assert_eq!((webhook.failure_policy.as_deref(), webhook.side_effects.as_str()), (Some("Fail"), "None"));
        assert_eq!(webhook.client_config.url.as_deref(), Some("https://172.18.0.1:9443/mutate"));
        let resources: Vec<String> = webhook
            .rules
            .iter()
            .flatten()
            .flat_map(|rule| {
                rule.resources
                    .iter()
                    .flatten()
                    .map(|resource| format!("{}/{resource}", rule.api_groups.as_ref().unwrap()[0]))
            })
            .collect();
        assert_eq!(
            resources,
            [
                "/pods",
                "batch/jobs",
                "apps/deployments",
                "apps/statefulsets",
                "resource.k8s.io/resourceclaims",
                "resource.k8s.io/resourceclaimtemplates"
            ]
        );
        let claims = webhook.rules.iter().flatten().find(|rule| rule.api_groups == Some(vec![CLAIM_GROUP.to_owned()]));
        assert_eq!(claims.and_then(|rule| rule.operations.clone()), Some(vec!["CREATE".to_owned()]));
    }

    #[test]
    fn the_chart_like_configuration_ignores_failures_within_the_charts_timeout() {
        let found = endpoint("127.0.0.1", None).unwrap().unwrap();
        let configuration = build_webhook_configuration_with("tg", &found, "PEM", "e2e-1", FailurePolicy::Ignore);
        let webhook = &configuration.webhooks.unwrap()[0];
        assert_eq!((webhook.failure_policy.as_deref(), webhook.timeout_seconds), (Some("Ignore"), Some(5)));
    }
}
