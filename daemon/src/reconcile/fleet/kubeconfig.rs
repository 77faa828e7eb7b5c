//! A worker's kubeconfig Secret: read from Kueue's namespace (the Secret MultiKueue reads, key `kubeconfig`),
//! checked, and turned into a client for that worker; does I/O.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::policy::{KubeConfigLocationType, WorkerCluster};

/// The Secret key holding the kubeconfig (MultiKueue's convention).
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// Builds a client from a worker's kubeconfig (the real one connects over TLS; tests map to mocked servers).
pub type Connector = Arc<dyn Fn(Kubeconfig) -> BoxFuture<'static, Result<Client, String>> + Send + Sync>;

/// The connector `tiergate run` uses: `kube::Config::from_custom_kubeconfig` with the kubeconfig's current
/// context.
pub fn build_kubeconfig_connector() -> Connector {
    Arc::new(|kubeconfig: Kubeconfig| {
        Box::pin(async move {
            let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|error| error.to_string())?;
            Client::try_from(config).map_err(|error| error.to_string())
        })
    })
}

/// Why a worker has no usable kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// `locationType: Path`: a file inside Kueue's pod.
    #[error(
        "failed to read the kubeconfig of worker {cluster}: spec.clusters[].clusterSource.kubeConfig.locationType \
         is Path, a file inside Kueue's own pod that tiergate cannot read; use locationType: Secret with a Secret \
         in {namespace}"
    )]
    PathLocation {
        /// The worker.
        cluster: String,
        /// Kueue's namespace.
        namespace: String,
    },
    /// The Secret does not exist.
    #[error(
        "failed to read kubeconfig Secret {namespace}/{name} of worker {cluster}: it does not exist; create it with \
         the worker's kubeconfig under key `kubeconfig` (the Secret MultiKueue reads, docs/guides/fleet.md), or fix \
         spec.clusters[].clusterSource.kubeConfig.location or --kueue-namespace"
    )]
    Missing {
        /// The worker.
        cluster: String,
        /// Kueue's namespace.
        namespace: String,
        /// The Secret.
        name: String,
    },
    /// The GET failed (forbidden, or the management API server did not answer).
    #[error(
        "failed to read kubeconfig Secret {namespace}/{name} of worker {cluster}: {source}; tiergate needs `get` \
         on it (chart value fleet.kubeconfigSecrets lists the Secrets it may read)"
    )]
    Unreadable {
        /// The worker.
        cluster: String,
        /// Kueue's namespace.
        namespace: String,
        /// The Secret.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Secret has no usable `kubeconfig` key, or its value is not a kubeconfig.
    #[error(
        "failed to use kubeconfig Secret {namespace}/{name} of worker {cluster}: {problem}; put the worker's \
         kubeconfig (a cluster, a user and a current context) under key `kubeconfig`"
    )]
    NotKubeconfig {
        /// The worker.
        cluster: String,
        /// Kueue's namespace.
        namespace: String,
        /// The Secret.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The kubeconfig parsed but no client could be built from it.
    #[error(
        "failed to build a client for worker {cluster} from kubeconfig Secret {namespace}/{name}: {problem}; \
         check its server, certificate authority and credentials (token or client certificate)"
    )]
    Connect {
        /// The worker.
        cluster: String,
        /// Kueue's namespace.
        namespace: String,
        /// The Secret.
        name: String,
        /// The client builder's error.
        problem: String,
    },
}

impl KubeconfigError {
    /// Fixed reason for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::PathLocation { .. } => "kubeconfig_path_location",
            Self::Missing { .. } => "kubeconfig_secret_missing",
            Self::Unreadable { .. } => "kubeconfig_secret_unreadable",
            Self::NotKubeconfig { .. } => "kubeconfig_invalid",
            Self::Connect { .. } => "kubeconfig_client",
        }
    }

    /// Whether the management API server did not answer (the worker keeps its engine; the read is retried),
    /// as opposed to an answer saying the credentials are gone or wrong.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreadable { source, .. } if !matches!(source, kube::Error::Api(_)))
    }
}

/// A worker's kubeconfig as read from its Secret.
#[derive(Clone, Debug)]
pub struct FetchedKubeconfig {
    /// The Secret's resourceVersion (a change means rotated credentials).
    pub version: String,
    /// The parsed kubeconfig.
    pub kubeconfig: Kubeconfig,
}

/// Reads and checks the kubeconfig Secret of `cluster` in `namespace`.
pub async fn read_kubeconfig(
    management: &Client,
    namespace: &str,
    cluster: &WorkerCluster,
) -> Result<FetchedKubeconfig, KubeconfigError> {
    let location = &cluster.cluster_source.kube_config;
    let (name, namespace_owned, cluster_name) = (location.location.clone(), namespace.to_owned(), cluster.name.clone());
    if location.location_type == KubeConfigLocationType::Path {
        return Err(KubeconfigError::PathLocation { cluster: cluster_name, namespace: namespace_owned });
    }
    let api: Api<Secret> = Api::namespaced(management.clone(), namespace);
    let secret = match api.get_opt(&name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(KubeconfigError::Missing { cluster: cluster_name, namespace: namespace_owned, name }),
        Err(source) => {
            return Err(KubeconfigError::Unreadable {
                cluster: cluster_name,
                namespace: namespace_owned,
                name,
                source,
            });
        }
    };
    let version = secret.metadata.resource_version.clone().unwrap_or_default();
    let kubeconfig = parse_kubeconfig_secret(&secret).map_err(|problem| KubeconfigError::NotKubeconfig {
        cluster: cluster_name,
        namespace: namespace_owned,
        name,
        problem,
    })?;
    Ok(FetchedKubeconfig { version, kubeconfig })
}

/// The kubeconfig under key `kubeconfig` of `secret`, or what is wrong with it.
pub fn parse_kubeconfig_secret(secret: &Secret) -> Result<Kubeconfig, String> {
    let text = match (secret.data.as_ref().and_then(|data| data.get(KUBECONFIG_KEY)), secret.string_data.as_ref()) {
        (Some(bytes), _) => {
            String::from_utf8(bytes.0.clone()).map_err(|_| format!("key `{KUBECONFIG_KEY}` is not UTF-8 text"))?
        }
        (None, Some(strings)) if strings.contains_key(KUBECONFIG_KEY) => {
            strings.get(KUBECONFIG_KEY).cloned().unwrap_or_default()
        }
        _ => return Err(format!("it has no key `{KUBECONFIG_KEY}`")),
    };
    let kubeconfig = Kubeconfig::from_yaml(&text)
        .map_err(|error| format!("key `{KUBECONFIG_KEY}` is not a kubeconfig ({error})"))?;
    if kubeconfig.clusters.is_empty() {
        return Err(format!("key `{KUBECONFIG_KEY}` names no cluster"));
    }
    Ok(kubeconfig)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(key: &str, value: &str) -> Secret {
        Secret {
            data: Some(BTreeMap::from([(key.to_owned(), ByteString(value.as_bytes().to_vec()))])),
            ..Secret::default()
        }
    }

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: east\n  cluster: {server: \
                              'https://east.example:6443'}\nusers:\n- name: tiergate\n  user: {token: x}\ncontexts:\n- \
                              name: east\n  context: {cluster: east, user: tiergate}\ncurrent-context: east\n";

    #[test]
    fn a_secret_with_a_kubeconfig_under_the_multikueue_key_is_read() {
        let kubeconfig = parse_kubeconfig_secret(&secret("kubeconfig", KUBECONFIG)).unwrap();
        assert_eq!(kubeconfig.current_context.as_deref(), Some("east"));
    }

    #[test]
    fn a_secret_without_the_key_or_with_something_else_under_it_says_what_is_wrong() {
        assert_eq!(parse_kubeconfig_secret(&secret("config", KUBECONFIG)).unwrap_err(), "it has no key `kubeconfig`");
        let not_yaml = parse_kubeconfig_secret(&secret("kubeconfig", "this is not a kubeconfig")).unwrap_err();
        assert!(not_yaml.contains("is not a kubeconfig"), "{not_yaml}");
        let empty = parse_kubeconfig_secret(&secret("kubeconfig", "apiVersion: v1\nkind: Config\n")).unwrap_err();
        assert!(empty.contains("names no cluster"), "{empty}");
    }
}
