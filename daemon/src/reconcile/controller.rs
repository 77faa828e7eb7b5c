//! Controller wiring: the TierPolicy watch re-run on every snapshot change, started and stopped with the
//! leadership; does I/O.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Context, error_policy, reconcile};
use crate::policy::TierPolicy;

/// Runs the controller until `shutdown`: the policy watch plus a reconcile of every policy whenever `changes`
/// reports a new snapshot (namespaces, nodes, owned Kueue objects).
pub async fn run_controller(ctx: Arc<Context>, changes: watch::Receiver<u64>, shutdown: CancellationToken) {
    let policies: Api<TierPolicy> = Api::all(ctx.client.clone());
    let snapshot_changes = futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        Some(((), changes))
    });
    Controller::new(policies, watcher::Config::default().any_semantic())
        .with_config(controller::Config::default().debounce(Duration::from_millis(200)).concurrency(1))
        .reconcile_all_on(snapshot_changes)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) | Err(controller::Error::ReconcilerFailed(..) | controller::Error::ObjectNotFound(_)) => {}
                Err(error) => tracing::warn!(%error, "the TierPolicy watch failed; retrying with backoff"),
            }
        })
        .await;
}

/// Runs the controller only while `gate` says this replica leads; stops it the moment leadership is lost.
pub async fn run_while_leading(ctx: Arc<Context>, changes: watch::Receiver<u64>, shutdown: CancellationToken) {
    let mut leading = ctx.gate.subscribe();
    loop {
        // `biased`: a shutdown wins over anything else that is ready at the same time.
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            leads = async { leading.wait_for(|leading| *leading).await.is_ok() } => if !leads { return },
        }
        tracing::info!("leading: starting the controller");
        let stop = shutdown.child_token();
        let controller = run_controller(ctx.clone(), changes.clone(), stop.clone());
        tokio::pin!(controller);
        tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                controller.await;
                return;
            }
            lost = async { leading.wait_for(|leading| !*leading).await.is_ok() } => {
                if lost {
                    tracing::warn!("leadership lost: stopping the controller");
                }
                stop.cancel();
                controller.await;
            }
            () = &mut controller => {
                if shutdown.is_cancelled() {
                    return;
                }
                tracing::warn!("the controller stopped by itself; restarting it");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
