//! Watch wiring shared by every cache: the reflector tasks that record each watch's health, mark the reconcile
//! dirty and wake the snapshot loop, plus the small event and metadata helpers they use; does I/O (spawns tasks).

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::{Stream, StreamExt};
use kube::core::ObjectMeta;
use kube::runtime::reflector::{Lookup, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use super::decode::LAST_APPLIED_ANNOTATION;
use super::health::{Signals, classify_watch_error};

/// A stateful filter over one watch's events.
pub(crate) type EventFilter<K> = Box<dyn FnMut(&watcher::Event<K>) -> bool + Send>;

/// Which watch events re-run the reconcile (every event still rebuilds the snapshot, but a live store's).
pub(crate) enum Trigger<K> {
    /// None (pods, ReplicaSets: the webhook's inputs only).
    Never,
    /// None, and only a finished list rebuilds the snapshot: the store is read live by every snapshot (the owner
    /// tables), so rebuilding it for each of 50,000 Jobs' status updates would only burn the webhook's CPU.
    Live,
    /// Every change.
    Always,
    /// Events the filter accepts (it also sees the initial list, to remember state).
    When(EventFilter<K>),
}

/// Spawns reflector tasks that record health and signal changes.
#[derive(Clone)]
pub(crate) struct Spawner {
    pub(crate) signals: Arc<Signals>,
    pub(crate) shutdown: CancellationToken,
}

impl Spawner {
    pub(crate) fn watch<K, S>(
        &self,
        label: &'static str,
        trigger: Trigger<K>,
        mut writer: Writer<K>,
        stream: S,
    ) -> Store<K>
    where
        K: Lookup + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Send + Sync,
        S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    {
        let reader = writer.as_reader();
        self.watch_into(label, trigger, stream, move |event| writer.apply_watcher_event(event));
        reader
    }

    /// Runs one watch, handing every event to `sink` (a reflector writer, or the owner table).
    pub(crate) fn watch_into<K, S>(
        &self,
        label: &'static str,
        mut trigger: Trigger<K>,
        stream: S,
        mut sink: impl FnMut(&watcher::Event<K>) + Send + 'static,
    ) where
        K: Send + 'static,
        S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    {
        let signals = self.signals.clone();
        let shutdown = self.shutdown.clone();
        let index = signals.register(label);
        tokio::spawn(async move {
            let events = stream.default_backoff().for_each(|event| {
                if let Ok(event) = &event {
                    sink(event);
                }
                signals.record(index, event.as_ref().err().map(classify_watch_error));
                match &event {
                    Ok(event) => {
                        let changed = matches!(
                            event,
                            watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
                        );
                        let rebuild = match &trigger {
                            Trigger::Live => matches!(event, watcher::Event::InitDone),
                            _ => changed,
                        };
                        let relevant = match &mut trigger {
                            Trigger::Never | Trigger::Live => false,
                            Trigger::Always => changed,
                            Trigger::When(filter) => filter(event),
                        };
                        if relevant {
                            signals.reconcile_dirty.store(true, Ordering::Relaxed);
                        }
                        if rebuild {
                            signals.changed.notify_one();
                        }
                    }
                    Err(error) => tracing::warn!(watch = label, %error, "watch failed; retrying with backoff"),
                }
                futures::future::ready(())
            });
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = events => {}
            }
        });
    }
}

/// Drops managedFields and kubectl's last-applied copy from any object's metadata.
pub(crate) fn strip_metadata<K: kube::Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// Keeps only identity and labels.
pub(crate) fn strip_to_labels(meta: &mut ObjectMeta) {
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        uid: meta.uid.take(),
        resource_version: meta.resource_version.take(),
        labels: meta.labels.take(),
        ..ObjectMeta::default()
    };
}
