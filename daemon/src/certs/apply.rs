//! Certificate I/O: reads and writes the certificate Secret with optimistic concurrency, publishes the CA bundle into
//! the MutatingWebhookConfiguration and writes the serving certificate to the files the webhook server reloads.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backon::{BackoffBuilder, ExponentialBuilder};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::pki::{certificate_info, material_from_secret_data, secret_data};
use super::rotation::{
    CertAction, ROTATE_CA_ANNOTATION, StoredCertificates, build_ca_bundle_patch, build_next_material, ca_published,
    certificate_action, parse_rotate_ca_before,
};
use super::{CertConfig, CertError, FIELD_MANAGER};
use crate::blockers::{BlockedReason, Blockers};
use crate::metrics::Metrics;

/// What one reconcile did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertOutcome {
    /// The decision taken.
    pub action: CertAction,
    /// Unix time the serving certificate now in the files expires.
    pub serving_not_after: i64,
    /// Whether the webhook configuration's caBundle was patched.
    pub bundle_patched: bool,
    /// Whether the local certificate files changed (the webhook server reloads them).
    pub files_changed: bool,
}

/// Reads the Secret and the webhook configuration, applies the rotation decision for `now` (Secret first, then
/// the caBundle, then the local files) and reports what changed. A Secret written concurrently by another replica
/// yields [`CertError::SecretConflict`]: call again. A failure to read or patch the webhook configuration is
/// returned only after the files are written, so the server can serve the stored certificate meanwhile.
pub async fn reconcile_certificates(client: &Client, config: &CertConfig, now: i64) -> Result<CertOutcome, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let secret = secrets.get_opt(&config.secret_name).await.map_err(|source| CertError::ReadSecret {
        namespace: config.namespace.clone(),
        name: config.secret_name.clone(),
        source,
    })?;
    let stored = stored_certificates(secret.as_ref(), config);
    // An unreadable webhook configuration must not keep the server from its certificate: carry on without it,
    // take the current CA as not yet trusted (so nothing it signed is issued yet), and report the error last.
    let (webhook_config, mut deferred) = match webhooks.get_opt(&config.webhook_config_name).await {
        Ok(webhook_config) => (webhook_config, None),
        Err(source) => {
            (None, Some(CertError::ReadWebhookConfiguration { name: config.webhook_config_name.clone(), source }))
        }
    };
    // Without a webhook configuration nobody trusts any CA yet, so nothing can break.
    let published = match (&webhook_config, &stored) {
        (Some(webhook_config), StoredCertificates::Present(material)) => {
            ca_published(webhook_config, &material.ca_cert_pem)
        }
        _ => deferred.is_none(),
    };
    let dns_names = config.dns_names();
    let rotate_ca_before = requested_ca_rotation(secret.as_ref(), config);
    let action = certificate_action(&stored, &dns_names, now, published, rotate_ca_before);
    let material = match (build_next_material(&stored, action, &dns_names, now, &config.rotation)?, stored) {
        (Some(next), _) => {
            save_certificate_secret(&secrets, secret, config, &next).await?;
            tracing::info!(action = action.reason(), secret = %config.secret_name, "certificate Secret updated");
            next
        }
        (None, StoredCertificates::Present(material)) => material,
        // `certificate_action` decides `Keep` only for present material.
        (None, _) => {
            return Err(CertError::ParseSecret { key: "tls.crt", message: "kept material that is absent".to_owned() });
        }
    };
    let bundle_patched = match webhook_config {
        Some(webhook_config) => match build_ca_bundle_patch(&webhook_config, &material.ca_bundle_pem)? {
            Some(patch) => match patch_ca_bundle(&webhooks, &config.webhook_config_name, patch).await {
                Ok(()) => true,
                Err(error) => {
                    deferred = Some(error);
                    false
                }
            },
            None => false,
        },
        None if deferred.is_none() => {
            tracing::warn!(
                name = %config.webhook_config_name,
                "MutatingWebhookConfiguration not found; its caBundle is set once it exists"
            );
            false
        }
        None => false,
    };
    let files_changed =
        write_certificate_files(&config.tls_cert, &config.tls_key, &material.tls_cert_pem, &material.tls_key_pem)
            .await?;
    if let Some(error) = deferred {
        return Err(error);
    }
    let serving_not_after = certificate_info(&material.tls_cert_pem, "serving certificate")?.not_after;
    Ok(CertOutcome { action, serving_not_after, bundle_patched, files_changed })
}

/// Keeps the certificate current until `shutdown`: reconciles at once, then every `check_interval`, retrying
/// failures and conflicts with capped exponential backoff (from 1 s). Sets the certificate expiry metric. While
/// the serving certificate file is absent, a failure is the `certificate_missing` blocker, with its reason (the
/// blocker monitor leaves an absent self-managed file to this loop; it is absent until the first write).
pub async fn run_certificate_manager(
    client: Client,
    config: CertConfig,
    metrics: Arc<Metrics>,
    blockers: Arc<Blockers>,
    shutdown: CancellationToken,
) {
    let retry = ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(config.check_interval.min(Duration::from_secs(60)))
        .with_jitter()
        .without_max_times();
    let mut backoff = None;
    loop {
        let delay = match reconcile_certificates(&client, &config, unix_now()).await {
            Ok(outcome) => {
                backoff = None;
                metrics.certificate_expiry_timestamp_seconds.set(outcome.serving_not_after);
                if outcome.files_changed || outcome.bundle_patched {
                    tracing::info!(
                        action = outcome.action.reason(),
                        files_changed = outcome.files_changed,
                        bundle_patched = outcome.bundle_patched,
                        "webhook certificate reconciled"
                    );
                }
                config.check_interval
            }
            Err(error @ CertError::SecretConflict { .. }) => {
                // Another replica wrote first: re-read soon (the backoff keeps a persistent writer from spinning us).
                tracing::debug!(%error, "certificate Secret changed concurrently; re-reading");
                backoff.get_or_insert_with(|| retry.build()).next().unwrap_or(config.check_interval)
            }
            Err(error) => {
                tracing::warn!(reason = error.reason(), %error, "webhook certificate reconcile failed");
                if !config.tls_cert.is_file() {
                    let detail = format!("the self-managed certificate is not issued: {error}");
                    blockers.set(BlockedReason::CertificateMissing, detail);
                }
                backoff.get_or_insert_with(|| retry.build()).next().unwrap_or(config.check_interval)
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// Waits until the serving certificate and key files exist and are non-empty (the first reconcile of
/// [`run_certificate_manager`] writes them), so the webhook server can start with them. Returns false when
/// `shutdown` came first.
pub async fn wait_for_certificate_files(config: &CertConfig, shutdown: &CancellationToken) -> bool {
    loop {
        let present = |path: &Path| std::fs::metadata(path).is_ok_and(|metadata| metadata.len() > 0);
        if present(&config.tls_cert) && present(&config.tls_key) {
            return true;
        }
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// Writes the serving certificate and key when they differ from the files, key first and each by rename, so a
/// reload never sees a half-written file. Returns whether anything changed.
pub async fn write_certificate_files(
    cert_path: &Path,
    key_path: &Path,
    cert_pem: &str,
    key_pem: &str,
) -> Result<bool, CertError> {
    let current_cert = tokio::fs::read_to_string(cert_path).await.unwrap_or_default();
    let current_key = tokio::fs::read_to_string(key_path).await.unwrap_or_default();
    if current_cert == cert_pem && current_key == key_pem {
        return Ok(false);
    }
    write_atomically(key_path, key_pem).await?;
    write_atomically(cert_path, cert_pem).await?;
    Ok(true)
}

/// The time the Secret's [`ROTATE_CA_ANNOTATION`] names; an unreadable value is reported (naming the fix) and
/// asks for nothing.
fn requested_ca_rotation(secret: Option<&Secret>, config: &CertConfig) -> Option<i64> {
    let value = secret?.metadata.annotations.as_ref()?.get(ROTATE_CA_ANNOTATION)?;
    match parse_rotate_ca_before(value) {
        Ok(time) => Some(time),
        Err(problem) => {
            tracing::warn!(secret = %config.secret_name, %problem, "CA rotation request ignored");
            None
        }
    }
}

fn stored_certificates(secret: Option<&Secret>, config: &CertConfig) -> StoredCertificates {
    let Some(data) = secret.and_then(|secret| secret.data.as_ref()) else {
        return StoredCertificates::Absent;
    };
    match material_from_secret_data(data) {
        Ok(Some(material)) => StoredCertificates::Present(material),
        Ok(None) => StoredCertificates::Absent,
        Err(error) => {
            tracing::warn!(secret = %config.secret_name, %error, "certificate Secret is unreadable; replacing it");
            StoredCertificates::Unreadable
        }
    }
}

async fn save_certificate_secret(
    secrets: &Api<Secret>,
    existing: Option<Secret>,
    config: &CertConfig,
    material: &super::CertMaterial,
) -> Result<(), CertError> {
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
    let namespace = config.namespace.clone();
    let name = config.secret_name.clone();
    let result = match existing {
        // The existing object keeps its resourceVersion, so a concurrent write fails with 409 instead of winning.
        Some(mut secret) => {
            secret.data = Some(secret_data(material));
            secret.string_data = None;
            secrets.replace(&config.secret_name, &params, &secret).await.map_err(|source| {
                if is_conflict(&source) {
                    CertError::SecretConflict { namespace: namespace.clone(), name: name.clone() }
                } else {
                    CertError::UpdateSecret { namespace: namespace.clone(), name: name.clone(), source }
                }
            })
        }
        None => {
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(config.secret_name.clone()),
                    namespace: Some(config.namespace.clone()),
                    labels: Some([("app.kubernetes.io/managed-by".to_owned(), "tiergate".to_owned())].into()),
                    ..Default::default()
                },
                data: Some(secret_data(material)),
                type_: Some("Opaque".to_owned()),
                ..Default::default()
            };
            secrets.create(&params, &secret).await.map_err(|source| {
                if is_conflict(&source) {
                    CertError::SecretConflict { namespace: namespace.clone(), name: name.clone() }
                } else {
                    CertError::CreateSecret { namespace: namespace.clone(), name: name.clone(), source }
                }
            })
        }
    };
    result.map(|_| ())
}

async fn patch_ca_bundle(
    webhooks: &Api<MutatingWebhookConfiguration>,
    name: &str,
    patch: json_patch::Patch,
) -> Result<(), CertError> {
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    webhooks
        .patch(name, &params, &Patch::<()>::Json(patch))
        .await
        .map(|_| ())
        .map_err(|source| CertError::PatchWebhookConfiguration { name: name.to_owned(), source })
}

async fn write_atomically(path: &Path, contents: &str) -> Result<(), CertError> {
    let error = |source| CertError::WriteFile { path: path.to_path_buf(), source };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = std::path::PathBuf::from(temporary);
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).mode(0o600);
    let mut file = options.open(&temporary).await.map_err(error)?;
    tokio::io::AsyncWriteExt::write_all(&mut file, contents.as_bytes()).await.map_err(error)?;
    file.sync_all().await.map_err(error)?;
    tokio::fs::rename(&temporary, path).await.map_err(error)
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| i64::try_from(elapsed.as_secs()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::test_support::{DAY, NOW};
    use crate::certs::{RotationSettings, bundle_certificates, is_signed_by};
    use http::{Method, Request, Response, StatusCode};
    use k8s_openapi::ByteString;
    use kube::client::Body;
    use tower_test::mock::{Handle, SendResponse};

    const SECRET_PATH: &str = "/api/v1/namespaces/tiergate-system/secrets/tiergate-webhook-tls";
    const SECRETS_PATH: &str = "/api/v1/namespaces/tiergate-system/secrets";
    const WEBHOOK_PATH: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/00-tiergate";

    type ApiHandle = Handle<Request<Body>, Response<Body>>;

    fn config(dir: &Path) -> CertConfig {
        CertConfig {
            namespace: "tiergate-system".into(),
            secret_name: "tiergate-webhook-tls".into(),
            service_name: "tiergate-webhook".into(),
            webhook_config_name: "00-tiergate".into(),
            tls_cert: dir.join("tls.crt"),
            tls_key: dir.join("tls.key"),
            check_interval: Duration::from_secs(60),
            rotation: RotationSettings::default(),
        }
    }

    fn mock_client() -> (Client, ApiHandle) {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(service, "tiergate-system"), handle)
    }

    fn empty_secret() -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("tiergate-webhook-tls".into()),
                namespace: Some("tiergate-system".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            ..Default::default()
        }
    }

    fn webhook_config(bundle: Option<&str>) -> MutatingWebhookConfiguration {
        crate::certs::test_support::webhook_config(&[("pods.tiergate.io", bundle), ("workloads.tiergate.io", bundle)])
    }

    fn json<T: serde::Serialize>(status: StatusCode, body: &T) -> Response<Body> {
        Response::builder().status(status).body(Body::from(serde_json::to_vec(body).unwrap())).unwrap()
    }

    fn status(code: u16, reason: &str) -> Response<Body> {
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": reason,
        });
        json(StatusCode::from_u16(code).unwrap(), &body)
    }

    async fn expect(
        handle: &mut ApiHandle,
        method: Method,
        path: &str,
    ) -> (Request<Body>, SendResponse<Response<Body>>) {
        let (request, send) = handle.next_request().await.expect("the client made no further request");
        assert_eq!((request.method(), request.uri().path()), (&method, path));
        (request, send)
    }

    async fn body_json(request: Request<Body>) -> serde_json::Value {
        serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn first_start_fills_the_chart_secret_publishes_the_bundle_and_writes_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let api = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
            send.send_response(json(StatusCode::OK, &empty_secret()));
            let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
            send.send_response(json(StatusCode::OK, &webhook_config(None)));
            let (request, send) = expect(&mut handle, Method::PUT, SECRET_PATH).await;
            assert!(request.uri().query().unwrap_or_default().contains("fieldManager=tiergate-certs"));
            let written: Secret = serde_json::from_value(body_json(request).await).unwrap();
            assert_eq!(written.metadata.resource_version.as_deref(), Some("7"), "optimistic concurrency");
            send.send_response(json(StatusCode::OK, &written));
            let (request, send) = expect(&mut handle, Method::PATCH, WEBHOOK_PATH).await;
            assert_eq!(request.headers()["content-type"], "application/json-patch+json");
            let patch = body_json(request).await;
            send.send_response(json(StatusCode::OK, &webhook_config(None)));
            (written, patch)
        });
        let outcome = reconcile_certificates(&client, &config(dir.path()), NOW).await.unwrap();
        let (written, patch) = api.await.unwrap();

        assert_eq!(outcome.action, CertAction::Create { reason: "absent" });
        assert!(outcome.bundle_patched && outcome.files_changed);
        let material = material_from_secret_data(written.data.as_ref().unwrap()).unwrap().unwrap();
        let bundle = serde_json::to_value(ByteString(material.ca_bundle_pem.clone().into_bytes())).unwrap();
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/webhooks/0/name", "value": "pods.tiergate.io"},
                {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle},
                {"op": "test", "path": "/webhooks/1/name", "value": "workloads.tiergate.io"},
                {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": bundle},
            ])
        );
        let served = std::fs::read_to_string(dir.path().join("tls.crt")).unwrap();
        assert_eq!(served, material.tls_cert_pem);
        assert_eq!(std::fs::read_to_string(dir.path().join("tls.key")).unwrap(), material.tls_key_pem);
        assert!(is_signed_by(&served, &material.ca_cert_pem));
        assert_eq!(outcome.serving_not_after, certificate_info(&served, "serving").unwrap().not_after);
    }

    #[tokio::test]
    async fn steady_state_reads_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let settings = RotationSettings::default();
        let material = build_next_material(
            &StoredCertificates::Absent,
            CertAction::Create { reason: "absent" },
            &config(dir.path()).dns_names(),
            NOW,
            &settings,
        )
        .unwrap()
        .unwrap();
        write_certificate_files(
            &dir.path().join("tls.crt"),
            &dir.path().join("tls.key"),
            &material.tls_cert_pem,
            &material.tls_key_pem,
        )
        .await
        .unwrap();
        let secret = Secret { data: Some(secret_data(&material)), ..empty_secret() };
        let published = webhook_config(Some(&material.ca_bundle_pem));
        let (client, mut handle) = mock_client();
        let api = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
            send.send_response(json(StatusCode::OK, &secret));
            let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
            send.send_response(json(StatusCode::OK, &published));
            handle
        });
        let outcome = reconcile_certificates(&client, &config(dir.path()), NOW + 3600).await.unwrap();
        let mut handle = api.await.unwrap();
        assert_eq!(outcome.action, CertAction::Keep);
        assert!(!outcome.bundle_patched && !outcome.files_changed);
        drop(client);
        assert!(handle.next_request().await.is_none(), "no write in steady state");
    }

    #[tokio::test]
    async fn a_replica_that_loses_the_race_reports_a_conflict_and_writes_no_files() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let api = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
            send.send_response(json(StatusCode::OK, &empty_secret()));
            let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
            send.send_response(json(StatusCode::OK, &webhook_config(None)));
            let (_, send) = expect(&mut handle, Method::PUT, SECRET_PATH).await;
            send.send_response(status(409, "Conflict"));
        });
        let error = reconcile_certificates(&client, &config(dir.path()), NOW).await.unwrap_err();
        api.await.unwrap();
        assert_eq!(error.reason(), "secret_conflict");
        assert!(!dir.path().join("tls.crt").exists());
    }

    #[tokio::test]
    async fn a_missing_secret_is_created_and_a_missing_webhook_configuration_is_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let api = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
            send.send_response(status(404, "NotFound"));
            let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
            send.send_response(status(404, "NotFound"));
            let (request, send) = expect(&mut handle, Method::POST, SECRETS_PATH).await;
            let created: Secret = serde_json::from_value(body_json(request).await).unwrap();
            send.send_response(json(StatusCode::CREATED, &created));
            created
        });
        let outcome = reconcile_certificates(&client, &config(dir.path()), NOW).await.unwrap();
        let created = api.await.unwrap();
        assert_eq!(created.metadata.name.as_deref(), Some("tiergate-webhook-tls"));
        assert_eq!(created.type_.as_deref(), Some("Opaque"));
        assert!(!outcome.bundle_patched && outcome.files_changed);
    }

    #[tokio::test]
    async fn an_unreadable_webhook_configuration_still_lets_the_server_have_its_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let api = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
            send.send_response(json(StatusCode::OK, &empty_secret()));
            let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
            send.send_response(status(403, "Forbidden"));
            let (request, send) = expect(&mut handle, Method::PUT, SECRET_PATH).await;
            let written: Secret = serde_json::from_value(body_json(request).await).unwrap();
            send.send_response(json(StatusCode::OK, &written));
            handle
        });
        let error = reconcile_certificates(&client, &config(dir.path()), NOW).await.unwrap_err();
        let mut handle = api.await.unwrap();
        assert_eq!(error.reason(), "read_webhook_configuration");
        assert!(dir.path().join("tls.crt").exists() && dir.path().join("tls.key").exists());
        drop(client);
        assert!(handle.next_request().await.is_none(), "no patch without the configuration");
    }

    #[tokio::test]
    async fn a_failed_bundle_patch_is_reported_after_the_files_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let api = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
            send.send_response(json(StatusCode::OK, &empty_secret()));
            let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
            send.send_response(json(StatusCode::OK, &webhook_config(None)));
            let (request, send) = expect(&mut handle, Method::PUT, SECRET_PATH).await;
            let written: Secret = serde_json::from_value(body_json(request).await).unwrap();
            send.send_response(json(StatusCode::OK, &written));
            let (_, send) = expect(&mut handle, Method::PATCH, WEBHOOK_PATH).await;
            send.send_response(status(403, "Forbidden"));
        });
        let error = reconcile_certificates(&client, &config(dir.path()), NOW).await.unwrap_err();
        api.await.unwrap();
        assert_eq!(error.reason(), "patch_webhook_configuration");
        assert!(dir.path().join("tls.crt").exists());
    }

    #[tokio::test]
    async fn forbidden_create_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let api = tokio::spawn(async move {
            let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
            send.send_response(status(404, "NotFound"));
            let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
            send.send_response(status(404, "NotFound"));
            let (_, send) = expect(&mut handle, Method::POST, SECRETS_PATH).await;
            send.send_response(status(403, "Forbidden"));
        });
        let error = reconcile_certificates(&client, &config(dir.path()), NOW).await.unwrap_err();
        api.await.unwrap();
        assert_eq!(error.reason(), "create_secret");
        assert!(error.to_string().contains("kubectl create secret generic tiergate-webhook-tls"), "{error}");
    }

    #[tokio::test]
    async fn waiting_for_the_files_ends_when_they_are_written_or_on_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        assert!(!wait_for_certificate_files(&config, &shutdown).await);
        write_certificate_files(&config.tls_cert, &config.tls_key, "cert", "key").await.unwrap();
        assert!(wait_for_certificate_files(&config, &CancellationToken::new()).await);
    }

    #[tokio::test]
    async fn certificate_files_are_rewritten_only_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        assert!(write_certificate_files(&cert, &key, "cert-1", "key-1").await.unwrap());
        assert!(!write_certificate_files(&cert, &key, "cert-1", "key-1").await.unwrap());
        assert!(write_certificate_files(&cert, &key, "cert-2", "key-2").await.unwrap());
        assert_eq!(std::fs::read_to_string(&cert).unwrap(), "cert-2");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(!dir.path().join("tls.key.tmp").exists());
    }

    /// A tiny API server holding one Secret and one webhook configuration, with resourceVersion checks.
    #[derive(Debug)]
    struct FakeApi {
        secret: Secret,
        webhook_config: MutatingWebhookConfiguration,
    }

    async fn serve_fake_api(mut handle: ApiHandle, state: Arc<std::sync::Mutex<FakeApi>>) {
        while let Some((request, send)) = handle.next_request().await {
            let (method, path) = (request.method().clone(), request.uri().path().to_owned());
            let body = request.into_body().collect_bytes().await.unwrap();
            let mut state = state.lock().unwrap();
            let response = match (method, path.as_str()) {
                (Method::GET, SECRET_PATH) => json(StatusCode::OK, &state.secret),
                (Method::GET, WEBHOOK_PATH) => json(StatusCode::OK, &state.webhook_config),
                (Method::PUT, SECRET_PATH) => {
                    let mut written: Secret = serde_json::from_slice(&body).unwrap();
                    if written.metadata.resource_version != state.secret.metadata.resource_version {
                        status(409, "Conflict")
                    } else {
                        let version: u64 = written.metadata.resource_version.as_deref().unwrap().parse().unwrap();
                        written.metadata.resource_version = Some((version + 1).to_string());
                        state.secret = written;
                        json(StatusCode::OK, &state.secret)
                    }
                }
                (Method::PATCH, WEBHOOK_PATH) => {
                    let patch: json_patch::Patch = serde_json::from_slice(&body).unwrap();
                    let mut document = serde_json::to_value(&state.webhook_config).unwrap();
                    json_patch::patch(&mut document, &patch).unwrap();
                    state.webhook_config = serde_json::from_value(document).unwrap();
                    json(StatusCode::OK, &state.webhook_config)
                }
                (method, path) => panic!("unexpected {method} {path}"),
            };
            send.send_response(response);
        }
    }

    #[tokio::test]
    async fn through_a_ca_rotation_the_served_certificate_always_verifies_against_the_published_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let (client, handle) = mock_client();
        let state =
            Arc::new(std::sync::Mutex::new(FakeApi { secret: empty_secret(), webhook_config: webhook_config(None) }));
        let api = tokio::spawn(serve_fake_api(handle, state.clone()));

        let mut actions = Vec::new();
        let mut served_serials = std::collections::BTreeSet::new();
        // A check every ten days for twenty years: two CA rotations, many serving rotations.
        for day in (0..(20 * 365)).step_by(10) {
            let outcome = reconcile_certificates(&client, &config, NOW + day * DAY).await.unwrap();
            if outcome.action != CertAction::Keep {
                actions.push(outcome.action);
            }
            let served = std::fs::read_to_string(&config.tls_cert).unwrap();
            served_serials.insert(served.clone());
            let published = state.lock().unwrap().webhook_config.clone();
            for webhook in published.webhooks.unwrap() {
                let bundle = String::from_utf8(webhook.client_config.ca_bundle.unwrap().0).unwrap();
                assert!(
                    bundle_certificates(&bundle).iter().any(|ca| is_signed_by(&served, ca)),
                    "day {day}: the served certificate does not verify against {}'s caBundle",
                    webhook.name
                );
            }
            let info = certificate_info(&served, "served").unwrap();
            assert!(
                info.not_before <= NOW + day * DAY && NOW + day * DAY < info.not_after,
                "day {day}: served expired"
            );
        }
        drop(client);
        api.await.unwrap();
        assert_eq!(
            actions.iter().filter(|action| matches!(action, CertAction::RotateCa { .. })).count(),
            2,
            "{actions:?}"
        );
        assert!(actions.contains(&CertAction::ReissueServing { reason: "ca_rotated" }));
        assert!(served_serials.len() > 50, "serving certificates rotate about every 60 days");
    }

    #[tokio::test]
    async fn a_first_issue_that_fails_is_the_certificate_missing_blocker_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let blockers = Blockers::detached();
        let shutdown = CancellationToken::new();
        let manager = tokio::spawn(run_certificate_manager(
            client,
            config(dir.path()),
            Arc::new(Metrics::new()),
            blockers.clone(),
            shutdown.clone(),
        ));
        let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
        send.send_response(status(403, "Forbidden"));
        while !blockers.is_active(BlockedReason::CertificateMissing) {
            tokio::task::yield_now().await;
        }
        let detail = blockers.active().into_iter().map(|blocker| blocker.detail).collect::<Vec<_>>().join("");
        assert!(detail.starts_with("the self-managed certificate is not issued: "), "{detail}");
        shutdown.cancel();
        manager.await.unwrap();
    }

    #[tokio::test]
    async fn the_manager_sets_the_expiry_metric_and_stops_on_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let (client, mut handle) = mock_client();
        let metrics = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        let blockers = Blockers::detached();
        let manager = tokio::spawn(run_certificate_manager(
            client,
            config(dir.path()),
            metrics.clone(),
            blockers.clone(),
            shutdown.clone(),
        ));
        let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
        send.send_response(json(StatusCode::OK, &empty_secret()));
        let (_, send) = expect(&mut handle, Method::GET, WEBHOOK_PATH).await;
        send.send_response(status(404, "NotFound"));
        let (request, send) = expect(&mut handle, Method::PUT, SECRET_PATH).await;
        let written: Secret = serde_json::from_value(body_json(request).await).unwrap();
        send.send_response(json(StatusCode::OK, &written));
        let material = material_from_secret_data(written.data.as_ref().unwrap()).unwrap().unwrap();
        let expiry = certificate_info(&material.tls_cert_pem, "serving").unwrap().not_after;
        // The manager sleeps for check_interval after a success; cancel and wait for it to stop.
        while metrics.certificate_expiry_timestamp_seconds.get() == 0 {
            tokio::task::yield_now().await;
        }
        shutdown.cancel();
        manager.await.unwrap();
        assert_eq!(metrics.certificate_expiry_timestamp_seconds.get(), expiry);
    }
}
