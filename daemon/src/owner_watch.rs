//! The owner index's inputs: discovery of which owner kinds the API server serves, and metadata-only watches of
//! them trimmed to uid, namespace, name and kind; does I/O.

use std::borrow::Cow;
use std::time::Duration;

use futures::{Stream, TryStreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::cluster::map_watch_event;
use crate::owners::{OwnerKind, OwnerRecord};

/// Wait before asking discovery again after an error other than "not served".
const DISCOVERY_RETRY: Duration = Duration::from_secs(5);

impl Lookup for OwnerRecord {
    type DynamicType = OwnerKind;

    fn kind(dyntype: &OwnerKind) -> Cow<'_, str> {
        Cow::Borrowed(dyntype.kind)
    }
    fn group(dyntype: &OwnerKind) -> Cow<'_, str> {
        Cow::Borrowed(dyntype.group)
    }
    fn version(dyntype: &OwnerKind) -> Cow<'_, str> {
        Cow::Borrowed(dyntype.version)
    }
    fn plural(dyntype: &OwnerKind) -> Cow<'_, str> {
        Cow::Owned(format!("{}s", dyntype.kind.to_ascii_lowercase()))
    }
    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.name.as_str()))
    }
    fn namespace(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.namespace.as_str()))
    }
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }
    fn uid(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.uid))
    }
}

/// The owner kinds the API server serves, each with its API resource; a kind it does not serve (its CRD is not
/// installed) is skipped with one log line. Other discovery errors are retried until `shutdown`.
pub async fn discover_owner_kinds(
    client: &Client,
    kinds: &[OwnerKind],
    shutdown: &CancellationToken,
) -> Vec<(OwnerKind, ApiResource)> {
    let mut served = Vec::new();
    for kind in kinds {
        let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
        loop {
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((resource, _)) => {
                    served.push((*kind, resource));
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

fn not_served(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 404,
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
    // `Api<PartialObjectMeta<_>>` makes metadata-only list and watch requests (the old `metadata_watcher`).
    let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client, resource);
    watcher(api, config).map_ok(move |event| map_watch_event(event, |meta| build_owner_record(kind, meta)))
}

/// The identity of one watched object; everything else of its metadata is dropped here.
pub fn build_owner_record(kind: OwnerKind, meta: PartialObjectMeta<DynamicObject>) -> OwnerRecord {
    let metadata = meta.metadata;
    OwnerRecord {
        kind,
        namespace: metadata.namespace.unwrap_or_default(),
        name: metadata.name.unwrap_or_default(),
        uid: metadata.uid.unwrap_or_default().into(),
        controller_uid: None,
    }
}
