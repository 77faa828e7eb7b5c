//! The owner index's inputs: discovery of which owner kinds the API server serves, metadata-only watches of them
//! trimmed to uid, namespace, name and kind, and the tables they fill (no reflector store: its per-object keys
//! doubled the memory); does I/O.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, TryStreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::core::{DynamicObject, ObjectMeta, PartialObjectMeta};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::decode::map_watch_event;
use super::wiring::{Spawner, Trigger};
use crate::owners::{NamespaceNames, OwnerKind, OwnerRecord, OwnerStore, OwnerTable, owner_kinds};

/// Wait before asking discovery again after an error other than "not served".
const DISCOVERY_RETRY: Duration = Duration::from_secs(5);

/// Discovers the served owner kinds, then starts one metadata-only watch per kind into the owner tables (in the
/// background: discovery waits on the API server).
pub(crate) fn start_owner_watches(
    client: &Client,
    spawner: &Spawner,
    config: impl Fn() -> watcher::Config + Send + 'static,
) -> OwnerTables {
    let tables = OwnerTables::default();
    let (client, spawner, started) = (client.clone(), spawner.clone(), tables.clone());
    tokio::spawn(async move {
        let served = discover_owner_kinds(&client, &owner_kinds(), &spawner.shutdown).await;
        started.expect(served.len());
        for (kind, resource) in served {
            let events = owner_events(client.clone(), kind, &resource, config());
            let mut sink = started.sink(kind);
            spawner.watch_into(kind.kind, Trigger::Live, events, move |event| sink.apply(event));
        }
        spawner.signals.changed.notify_one();
    });
    tables
}

/// The owner records of every watched kind: the compact [`OwnerStore`] every snapshot's index reads, one table
/// per kind, each replaced whole when its watch re-lists; plus the bookkeeping of the watches that write it.
#[derive(Clone, Debug, Default)]
pub struct OwnerTables {
    store: Arc<OwnerStore>,
    shared: Arc<Mutex<Tables>>,
    ready: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default)]
struct Tables {
    /// How many kinds discovery found served (`None` until it has answered).
    expected: Option<usize>,
    kinds: Vec<KindState>,
    /// One shared copy of each namespace name the records hold.
    names: NamespaceNames,
}

#[derive(Debug, Default)]
struct KindState {
    /// The re-list in progress (between `Init` and `InitDone`).
    relist: Option<OwnerTable>,
    listed: bool,
}

/// The writer of one kind's table.
#[derive(Debug)]
pub struct OwnerSink {
    tables: OwnerTables,
    slot: usize,
}

impl OwnerTables {
    /// Records how many kinds will be watched (after discovery).
    pub fn expect(&self, kinds: usize) {
        if let Ok(mut tables) = self.shared.lock() {
            tables.expected = Some(kinds);
        }
        self.ready.notify_waiters();
    }

    /// A writer for one more kind's table.
    pub fn sink(&self, kind: OwnerKind) -> OwnerSink {
        let slot = match self.shared.lock() {
            Ok(mut tables) => {
                tables.kinds.push(KindState::default());
                let slot = self.store.add_kind(kind);
                debug_assert_eq!(slot + 1, tables.kinds.len());
                slot
            }
            Err(_) => usize::MAX,
        };
        OwnerSink { tables: self.clone(), slot }
    }

    /// Whether discovery has answered and every served kind has listed once.
    pub fn is_ready(&self) -> bool {
        self.shared.lock().is_ok_and(|tables| {
            tables
                .expected
                .is_some_and(|expected| tables.kinds.len() >= expected && tables.kinds.iter().all(|kind| kind.listed))
        })
    }

    /// Resolves once [`Self::is_ready`]; true then (the watch tasks never give up, so it waits until shutdown).
    pub async fn wait_until_ready(&self) -> bool {
        loop {
            let notified = self.ready.notified();
            if self.is_ready() {
                return true;
            }
            notified.await;
        }
    }

    /// The live store every snapshot's owner index reads (shared, not copied).
    pub fn store(&self) -> Arc<OwnerStore> {
        self.store.clone()
    }
}

impl OwnerSink {
    /// Applies one watch event to this kind's table.
    pub fn apply(&mut self, event: &watcher::Event<OwnerRecord>) {
        let Ok(mut guard) = self.tables.shared.lock() else { return };
        let tables = &mut *guard;
        let Some(state) = tables.kinds.get_mut(self.slot) else { return };
        let store = &self.tables.store;
        match event {
            watcher::Event::Apply(record) => {
                let namespace = tables.names.intern(&record.namespace);
                store.update(self.slot, |table| table.insert(&record.uid, namespace, &record.name));
            }
            watcher::Event::Delete(record) => store.update(self.slot, |table| table.remove(&record.uid)),
            watcher::Event::Init => state.relist = Some(OwnerTable::default()),
            watcher::Event::InitApply(record) => {
                let namespace = tables.names.intern(&record.namespace);
                state.relist.get_or_insert_with(OwnerTable::default).insert(&record.uid, namespace, &record.name);
            }
            watcher::Event::InitDone => {
                if let Some(mut relisted) = state.relist.take() {
                    relisted.shrink_to_fit();
                    store.replace(self.slot, relisted);
                    tables.names.forget_unused();
                }
                state.listed = true;
                drop(guard);
                self.tables.ready.notify_waiters();
            }
        }
    }
}

/// The owner kinds the API server serves and the daemon may list, each with its API resource; a kind it does not
/// serve (its CRD is not installed) or may not list (RBAC) is skipped with one log line. Other errors are retried
/// until `shutdown`.
pub async fn discover_owner_kinds(
    client: &Client,
    kinds: &[OwnerKind],
    shutdown: &CancellationToken,
) -> Vec<(OwnerKind, ApiResource)> {
    let mut served = Vec::new();
    for kind in kinds {
        let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
        loop {
            let found = match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((resource, _)) => readable(client, &resource).await.map(|()| resource),
                Err(error) => Err(error),
            };
            match found {
                Ok(resource) => {
                    served.push((*kind, resource));
                    break;
                }
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    // A kind added to the adapter table before the chart's RBAC grants it: watching it would fail
                    // forever and keep the webhook unready.
                    tracing::warn!(
                        kind = kind.kind,
                        api_version = %kind.api_version(),
                        "no RBAC to list this owner kind; its owner references stay unverified (grant list and watch)"
                    );
                    break;
                }
                Err(error) if not_served(&error) => {
                    tracing::info!(
                        kind = kind.kind,
                        api_version = %kind.api_version(),
                        "the API server does not serve this owner kind; its owner references stay unverified"
                    );
                    break;
                }
                Err(error) => {
                    tracing::warn!(kind = kind.kind, %error, "owner kind discovery failed; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return served,
                        () = tokio::time::sleep(DISCOVERY_RETRY) => {}
                    }
                }
            }
        }
    }
    served
}

/// Whether the daemon may list `resource` (one metadata item).
async fn readable(client: &Client, resource: &ApiResource) -> Result<(), kube::Error> {
    let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), resource);
    api.list_metadata(&kube::api::ListParams::default().limit(1)).await.map(|_| ())
}

fn not_served(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => super::is_not_served(status),
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

/// The metadata-only watch of one owner kind, each object reduced to an [`OwnerRecord`].
pub fn owner_events(
    client: Client,
    kind: OwnerKind,
    resource: &ApiResource,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<OwnerRecord>>> + Send + 'static {
    let api = Api::<OwnerMeta>::all_with(client, resource);
    watcher(api, config).map_ok(move |event| map_watch_event(event, |meta| build_owner_record(kind, meta)))
}

/// The identity of one watched object; everything else of its metadata was never decoded.
pub fn build_owner_record(kind: OwnerKind, meta: OwnerMeta) -> OwnerRecord {
    let metadata = meta.metadata;
    OwnerRecord {
        kind,
        namespace: metadata.namespace.unwrap_or_default(),
        name: metadata.name.unwrap_or_default(),
        uid: metadata.uid.unwrap_or_default().into(),
        controller_uid: None,
    }
}

/// An owner object as its metadata-only watch decodes it: name, namespace, uid and resourceVersion (the watcher
/// resumes from it). Labels, annotations and managedFields (a Job's largest part) are skipped by the parser, never
/// built and dropped: 50,000 Jobs list in 100 pages, and decoding their full metadata was most of the client's
/// share of a restart (issue 31).
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct OwnerMeta {
    /// Name, namespace, uid and resourceVersion only.
    #[serde(default, deserialize_with = "deserialize_owner_meta")]
    pub metadata: ObjectMeta,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerIdentity {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

fn deserialize_owner_meta<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let OwnerIdentity { name, namespace, uid, resource_version } = serde::Deserialize::deserialize(deserializer)?;
    Ok(ObjectMeta { name, namespace, uid, resource_version, ..ObjectMeta::default() })
}

impl kube::Resource for OwnerMeta {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.kind)
    }
    fn group(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.group)
    }
    fn version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.version)
    }
    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.api_version)
    }
    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&resource.plural)
    }
    fn metadata_api() -> bool {
        true
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
