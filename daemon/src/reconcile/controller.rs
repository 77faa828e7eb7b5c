//! Controller wiring: the TierPolicy watch re-run on snapshot changes (throttled, never starved), started and
//! stopped with the leadership; does I/O.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Context, error_policy, reconcile};
use crate::policy::TierPolicy;

/// The shortest time between two reconciles triggered by snapshot changes. The first change after a quiet spell
/// triggers at once; changes arriving within the interval coalesce into one trigger at its end. Not kube's
/// controller debounce: that postpones the reconcile for as long as changes keep arriving, and while 1,000 nodes
/// were being tainted by the node lifecycle controller it held back 4,000 new namespaces' LocalQueues for 27 s
/// (issue 31).
const MIN_RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

/// Runs the controller until `shutdown`: the policy watch plus a reconcile of every policy whenever `changes`
/// reports a new snapshot (namespaces, nodes, owned Kueue objects), at most once per [`MIN_RECONCILE_INTERVAL`].
pub async fn run_controller(ctx: Arc<Context>, changes: watch::Receiver<u64>, shutdown: CancellationToken) {
    let gate_pruner = prune_gate_of_a_deleted_policy(ctx.clone(), changes.clone(), shutdown.clone());
    let policies: Api<TierPolicy> = Api::all(ctx.client.clone());
    let controller = Controller::new(policies, watcher::Config::default().any_semantic())
        .with_config(controller::Config::default().concurrency(1))
        .reconcile_all_on(throttled_changes(changes, MIN_RECONCILE_INTERVAL))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) | Err(controller::Error::ReconcilerFailed(..) | controller::Error::ObjectNotFound(_)) => {}
                Err(error) => tracing::warn!(%error, "the TierPolicy watch failed; retrying with backoff"),
            }
        });
    tokio::join!(controller, gate_pruner);
}

/// Under `--gate-owner`, prunes the in-server gate after each snapshot change that finds the served policy gone
/// (the controller reconciles only policies that exist); returns at once without `--gate-owner`.
async fn prune_gate_of_a_deleted_policy(ctx: Arc<Context>, changes: watch::Receiver<u64>, shutdown: CancellationToken) {
    if ctx.settings.gate_owner.is_none() {
        return;
    }
    let triggers = throttled_changes(changes, MIN_RECONCILE_INTERVAL);
    tokio::pin!(triggers);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            next = triggers.next() => if next.is_none() { return },
        }
        if let Err(error) = super::gate_owner::prune_gate_without_policy(&ctx).await {
            tracing::warn!(%error, reason = error.reason(), "failed to prune the in-server gate of a deleted policy");
        }
    }
}

/// One item per change of `changes`, at most one per `interval`: a change after a quiet spell at once, the changes
/// within an interval as one item at its end (the watch channel keeps only the latest version, so nothing queues).
fn throttled_changes(changes: watch::Receiver<u64>, interval: Duration) -> impl futures::Stream<Item = ()> {
    futures::stream::unfold((changes, None), move |(mut changes, last): (_, Option<Instant>)| async move {
        if let Some(last) = last {
            tokio::time::sleep_until(last + interval).await;
        }
        changes.changed().await.ok()?;
        Some(((), (changes, Some(Instant::now()))))
    })
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::sync::watch;

    use super::throttled_changes;

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_changes_still_triggers_once_per_interval() {
        let (sender, changes) = watch::channel(0_u64);
        let interval = Duration::from_secs(1);
        let triggers = throttled_changes(changes, interval);
        tokio::pin!(triggers);
        // A change every 100 ms for 5 s: kube's debounce would never fire; the throttle fires every second.
        let churn = tokio::spawn(async move {
            for version in 1..=50 {
                sender.send_replace(version);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            sender
        });
        let started = tokio::time::Instant::now();
        let mut fired = Vec::new();
        while fired.len() < 5 {
            triggers.next().await.unwrap();
            fired.push(started.elapsed());
        }
        assert_eq!(fired[0], Duration::ZERO, "the first change triggers at once");
        for pair in fired.windows(2) {
            assert_eq!(pair[1] - pair[0], interval, "{fired:?}");
        }
        let sender = churn.await.unwrap();
        drop(sender);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_after_a_quiet_spell_triggers_without_waiting() {
        let (sender, changes) = watch::channel(0_u64);
        let triggers = throttled_changes(changes, Duration::from_secs(1));
        tokio::pin!(triggers);
        sender.send_replace(1);
        triggers.next().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let before = tokio::time::Instant::now();
        sender.send_replace(2);
        triggers.next().await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO);
        drop(sender);
        assert!(triggers.next().await.is_none(), "ends when the caches stop");
    }
}
