//! `tiergate run`: caches, leader-elected reconciler, admin server and webhook server in one process; SIGTERM
//! turns `/readyz` false, waits a grace period, then stops everything and releases the Lease.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::CmdError;
use crate::admin::{AdminState, serve_admin};
use crate::admission::server::{AdmissionState, WebhookConfig, bind_webhook_listener, serve_webhook_draining};
use crate::certs::{CertConfig, run_certificate_manager, wait_for_certificate_files};
use crate::cli::{Exit, RunArgs};
use crate::metrics::Metrics;
use crate::placement::PlacementLedger;
use crate::reconcile::monitor::CertificateFile;
use crate::reconcile::runtime::{ReconcilerOptions, build_identity, start_reconciler};
use crate::scoring::Scorer;

/// Time between `/readyz` turning false and the servers stopping, so endpoints drop this replica first.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// Quiet time before the snapshot is rebuilt after a watch event.
const SNAPSHOT_DEBOUNCE: Duration = Duration::from_millis(100);

/// Runs `tiergate run` until SIGTERM.
pub async fn run(args: RunArgs) -> Result<ExitCode, CmdError> {
    let webhook = build_webhook_config(&args)?;
    let certificates = args.self_managed_certs.then(|| CertConfig::from_run_args(&args)).transpose()?;
    let client = super::build_client(args.kubeconfig.as_deref()).await?;
    let metrics = Arc::new(Metrics::new());
    let ledger =
        Arc::new(PlacementLedger::new(metrics.clone()).with_excluded_namespaces(args.placement.excluded_namespaces()));
    let draining = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let identity = build_identity();
    let (policy_name, policy_choice) = super::resolve_policy_name(&client, args.policy_name.as_deref()).await;
    super::log_policy_choice(&policy_name, policy_choice.as_deref());
    tracing::info!(%identity, policy = %policy_name, namespace = %args.namespace, "starting tiergate run");

    let reconciler = start_reconciler(
        &client,
        ReconcilerOptions {
            policy_name,
            namespace: args.namespace.clone(),
            lease_name: args.lease_name.clone(),
            identity,
            debounce: SNAPSHOT_DEBOUNCE,
            ledger: Some(ledger.clone()),
            kueue_namespace: args.kueue_namespace.clone(),
            create_lease_namespace: args.create_lease_namespace,
            mutating_gate: args.mutating_gate,
            policy_choice,
            certificate: Some(CertificateFile { path: webhook.tls_cert.clone(), issued_here: certificates.is_some() }),
            gate_owner: args.gate_owner.clone(),
            usage_checkpoint_interval: args.usage_checkpoint_interval,
        },
        metrics.clone(),
        &shutdown,
    );
    let webhook_serving = Arc::new(AtomicBool::new(false));
    let admin_state = AdminState {
        metrics: metrics.clone(),
        snapshot: reconciler.snapshot.clone(),
        draining: draining.clone(),
        blockers: reconciler.blockers.clone(),
        webhook_serving: webhook_serving.clone(),
    };
    let admission_state = AdmissionState {
        snapshot: reconciler.snapshot.clone(),
        scorer: Arc::new(
            Scorer::new(args.agent_url.clone(), metrics.clone()).with_timeout_cap(webhook.limits.scoring_timeout_cap),
        ),
        ledger,
        metrics: metrics.clone(),
    };
    let mut admin = tokio::spawn(serve_admin(args.admin_listen, admin_state, shutdown.clone()));
    if let Some(certificates) = certificates {
        tokio::spawn(run_certificate_manager(
            client.clone(),
            certificates.clone(),
            metrics.clone(),
            reconciler.blockers.clone(),
            shutdown.clone(),
        ));
        tracing::info!(cert = %certificates.tls_cert.display(), "waiting for the self-managed serving certificate");
        if !wait_for_certificate_files(&certificates, &shutdown).await {
            return Ok(Exit::Success.into());
        }
    }
    // Ready (for the Service) only from here: with a self-managed certificate the caches may sync before it exists.
    let listener = bind_webhook_listener(webhook.listen)?;
    let (serving, closing) = (shutdown.clone(), draining.clone());
    let mut webhook = tokio::spawn(async move {
        let files = (webhook.tls_cert.as_path(), webhook.tls_key.as_path());
        serve_webhook_draining(listener, files, admission_state, webhook.limits, closing, serving).await
    });
    webhook_serving.store(true, Ordering::Relaxed);

    let failure: Option<CmdError> = tokio::select! {
        signal = wait_for_signal() => {
            tracing::info!(signal = signal?, "shutting down: /readyz is now false");
            None
        }
        result = &mut admin => Some(match result {
            Ok(Ok(())) => "the admin server stopped unexpectedly".into(),
            Ok(Err(error)) => format!("failed to serve the admin endpoints on {}: {error}", args.admin_listen).into(),
            Err(error) => error.into(),
        }),
        result = &mut webhook => Some(match result {
            Ok(Ok(())) => "the webhook server stopped unexpectedly".into(),
            Ok(Err(error)) => error.into(),
            Err(error) => error.into(),
        }),
    };
    draining.store(true, Ordering::Relaxed);
    // Leadership goes first: the next replica reconciles while this one still answers reviews during the drain.
    reconciler.step_down();
    if failure.is_none() {
        tokio::time::sleep(DRAIN_GRACE).await;
    }
    shutdown.cancel();
    reconciler.stopped().await;
    if !admin.is_finished() {
        let _ = admin.await;
    }
    if !webhook.is_finished() {
        let _ = webhook.await;
    }
    match failure {
        None => Ok(Exit::Success.into()),
        Some(error) => Err(error),
    }
}

/// The webhook's certificate files: cert-manager's, or where `--self-managed-certs` writes its own.
fn build_webhook_config(args: &RunArgs) -> Result<WebhookConfig, CmdError> {
    match (&args.tls.tls_cert, &args.tls.tls_key) {
        (Some(cert), Some(key)) => {
            let limits = args.limits.limits()?;
            Ok(WebhookConfig { listen: args.webhook_listen, tls_cert: cert.clone(), tls_key: key.clone(), limits })
        }
        _ => Err("failed to set up the webhook certificate: pass --tls-cert and --tls-key (TIERGATE_TLS_CERT / \
                  TIERGATE_TLS_KEY): cert-manager's files, or with --self-managed-certs the paths tiergate writes its \
                  own certificate to"
            .into()),
    }
}

/// Resolves on SIGTERM or SIGINT with the signal's name.
async fn wait_for_signal() -> Result<&'static str, std::io::Error> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = terminate.recv() => Ok("SIGTERM"),
        result = tokio::signal::ctrl_c() => result.map(|()| "SIGINT"),
    }
}
