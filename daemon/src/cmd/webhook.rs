//! `tiergate webhook`: serves the admission webhook alone — from the cluster's caches (no reconciler), or from
//! files with `--offline` — with the admin server, until SIGTERM or ctrl-c; does I/O.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio_util::sync::CancellationToken;

use super::{CmdError, shutdown_signal};
use crate::admin::{AdminState, serve_admin};
use crate::admission::build_static_snapshot;
use crate::admission::server::{AdmissionState, WebhookConfig, serve_webhook};
use crate::blockers::Blockers;
use crate::blockers::log::run_blocker_log;
use crate::cache::{CacheScope, CacheSettings, ClusterCache};
use crate::cli::{Exit, WebhookArgs};
use crate::inputs::load_cluster_view;
use crate::metrics::Metrics;
use crate::placement::PlacementLedger;
use crate::reconcile::monitor::{CertificateFile, run_certificate_monitor};
use crate::scoring::Scorer;
use crate::view::ClusterView;

/// Quiet time before the snapshot is rebuilt after a watch event.
const SNAPSHOT_DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs `tiergate webhook` until SIGTERM.
pub async fn run(args: WebhookArgs) -> Result<ExitCode, CmdError> {
    let limits = args.limits.limits()?;
    let metrics = Arc::new(Metrics::new());
    let draining = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let excluded = args.placement.excluded_namespaces();
    if !excluded.is_empty() {
        tracing::info!(namespaces = ?excluded, "placement leaves these namespaces alone (--blocklisted-namespaces)");
    }
    let ledger = Arc::new(PlacementLedger::new(metrics.clone()).with_excluded_namespaces(excluded));
    let snapshot = if args.offline {
        let policy = super::load_valid_policy(args.policy.as_deref())?;
        let view = match &args.cluster {
            Some(path) => load_cluster_view(path)?,
            None => {
                tracing::warn!("no --cluster given: no namespace has a tier, so only placement applies");
                ClusterView::default()
            }
        };
        Arc::new(ArcSwap::from_pointee(build_static_snapshot(policy, view, None)))
    } else {
        let client = super::build_client(args.kubeconfig.as_deref()).await?;
        let (policy_name, choice) = super::resolve_policy_name(&client, args.policy_name.as_deref()).await;
        super::log_policy_choice(&policy_name, choice.as_deref());
        let settings = CacheSettings {
            policy_name,
            own_namespace: args.namespace.clone(),
            debounce: SNAPSHOT_DEBOUNCE,
            ledger: Some(ledger.clone()),
            scope: CacheScope::Management,
        };
        ClusterCache::start(&client, settings, metrics.clone(), &shutdown).snapshot
    };
    let _generated; // keeps a generated certificate's directory alive while serving
    let (tls_cert, tls_key) = match (args.tls.tls_cert, args.tls.tls_key) {
        (Some(cert), Some(key)) => (cert, key),
        _ => {
            let dir = tempfile::Builder::new().prefix("tiergate-webhook-tls-").tempdir()?;
            let (cert, key, ca) = write_self_signed(dir.path(), &args.webhook_listen)?;
            super::write_stdout(&format!(
                "self-signed certificate: {} (key {}, CA {})\n",
                cert.display(),
                key.display(),
                ca.display()
            ))?;
            _generated = dir;
            (cert, key)
        }
    };
    tokio::spawn(cancel_on_signal(shutdown.clone(), draining.clone()));

    let state = AdmissionState {
        snapshot: snapshot.clone(),
        scorer: Arc::new(Scorer::new(args.agent_url, metrics.clone()).with_timeout_cap(limits.scoring_timeout_cap)),
        ledger,
        metrics: metrics.clone(),
    };
    let config = WebhookConfig { listen: args.webhook_listen, tls_cert, tls_key, limits };
    let blockers = Blockers::new(&metrics);
    let file = CertificateFile { path: config.tls_cert.clone(), issued_here: false };
    tokio::spawn(run_certificate_monitor(blockers.clone(), file, shutdown.clone()));
    tokio::spawn(run_blocker_log(blockers.clone(), shutdown.clone()));
    // The certificate is given (`--tls-cert`): the webhook serves as soon as it starts.
    let webhook_serving = Arc::new(AtomicBool::new(true));
    let admin = AdminState { blockers, metrics, snapshot, draining, webhook_serving };
    let webhook = async { serve_webhook(config, state, shutdown.clone()).await.map_err(CmdError::from) };
    let admin = async { serve_admin(args.admin_listen, admin, shutdown.clone()).await.map_err(CmdError::from) };
    // A server that fails ends the command (the other is dropped), rather than leaving it serving alone.
    tokio::try_join!(webhook, admin)?;
    Ok(Exit::Success.into())
}

/// Waits for SIGTERM or ctrl-c, marks the process draining (so `/readyz` turns false) and cancels `shutdown`.
async fn cancel_on_signal(shutdown: CancellationToken, draining: Arc<AtomicBool>) {
    tokio::select! {
        () = shutdown_signal() => {}
        () = shutdown.cancelled() => return,
    }
    draining.store(true, Ordering::SeqCst);
    shutdown.cancel();
}

/// Writes a CA and a serving certificate for localhost (and the listen address) into `dir`.
fn write_self_signed(dir: &Path, listen: &std::net::SocketAddr) -> Result<(PathBuf, PathBuf, PathBuf), CmdError> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "tiergate offline webhook CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if !listen.ip().is_unspecified() {
        names.push(listen.ip().to_string());
    }
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(names)?.signed_by(&key, &ca)?;
    let paths = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
    std::fs::write(&paths.0, cert.pem())?;
    std::fs::write(&paths.1, key.serialize_pem())?;
    std::fs::write(&paths.2, ca.pem())?;
    Ok(paths)
}
