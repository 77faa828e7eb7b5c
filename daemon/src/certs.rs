//! Webhook serving certificates: self-managed CA and serving certificate, CA bundle injection, rotation; I/O at the edge.
//!
//! [`pki`] generates and inspects certificates and [`rotation`] decides what changes (both pure); [`apply`] reads
//! and writes the Secret, patches the MutatingWebhookConfiguration's CA bundle and writes the serving certificate
//! to the files the webhook server reloads. Every replica runs the loop: writes carry the Secret's
//! `resourceVersion`, so when two replicas decide the same rotation one wins and the other re-reads and keeps it.

mod apply;
mod pki;
mod rotation;
#[cfg(test)]
mod test_support;

use std::path::PathBuf;
use std::time::Duration;

pub use apply::{
    CertOutcome, reconcile_certificates, run_certificate_manager, wait_for_certificate_files, write_certificate_files,
};
pub use pki::{
    CertInfo, CertMaterial, SECRET_CA_BUNDLE, SECRET_CA_CERT, SECRET_CA_KEY, SECRET_TLS_CERT, SECRET_TLS_KEY, build_ca,
    build_serving_certificate, bundle_certificates, certificate_info, is_signed_by, key_matches_certificate,
    material_from_secret_data, secret_data, serving_dns_names,
};
pub use rotation::{
    CertAction, ROTATE_CA_ANNOTATION, RotationSettings, StoredCertificates, build_ca_bundle, build_ca_bundle_patch,
    build_next_material, ca_published, certificate_action,
};

use crate::cli::RunArgs;

/// Field manager of every write the certificate manager makes.
pub const FIELD_MANAGER: &str = "tiergate-certs";

/// Where the self-managed certificate lives and how often it is checked.
#[derive(Clone, Debug)]
pub struct CertConfig {
    /// Namespace of the Secret and the Service (the release namespace).
    pub namespace: String,
    /// Secret holding the CA and serving certificate.
    pub secret_name: String,
    /// Service the serving certificate is issued for.
    pub service_name: String,
    /// MutatingWebhookConfiguration whose `webhooks[*].clientConfig.caBundle` is kept current.
    pub webhook_config_name: String,
    /// File the serving certificate is written to (the webhook server's `--tls-cert`).
    pub tls_cert: PathBuf,
    /// File the serving key is written to (the webhook server's `--tls-key`).
    pub tls_key: PathBuf,
    /// Time between checks when nothing failed.
    pub check_interval: Duration,
    /// Certificate lifetimes.
    pub rotation: RotationSettings,
}

impl CertConfig {
    /// Default time between checks: a rotated certificate reaches every replica within this.
    pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(60);

    /// The configuration `tiergate run --self-managed-certs` implies.
    pub fn from_run_args(args: &RunArgs) -> Result<Self, CertError> {
        let (Some(tls_cert), Some(tls_key)) = (args.tls.tls_cert.clone(), args.tls.tls_key.clone()) else {
            return Err(CertError::MissingTlsFiles);
        };
        Ok(Self {
            namespace: args.namespace.clone(),
            secret_name: args.cert_secret.clone(),
            service_name: args.service_name.clone(),
            webhook_config_name: args.webhook_config_name.clone(),
            tls_cert,
            tls_key,
            check_interval: Self::DEFAULT_CHECK_INTERVAL,
            rotation: RotationSettings::default(),
        })
    }

    /// The DNS names of the serving certificate.
    pub fn dns_names(&self) -> Vec<String> {
        serving_dns_names(&self.service_name, &self.namespace)
    }
}

/// A certificate step failed.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// `--self-managed-certs` without the files to write.
    #[error(
        "failed to configure self-managed certificates: --tls-cert and --tls-key must name the files the serving \
         certificate is written to (e.g. /tls/tls.crt and /tls/tls.key on an emptyDir)"
    )]
    MissingTlsFiles,
    /// rcgen could not build a key or certificate.
    #[error("failed to generate the {what}: {source}")]
    GenerateCertificate {
        /// What was being generated.
        what: &'static str,
        /// Cause.
        source: rcgen::Error,
    },
    /// A PEM private key could not be read.
    #[error("failed to parse the {what}: {source}")]
    ParseKey {
        /// Which key.
        what: &'static str,
        /// Cause.
        source: rcgen::Error,
    },
    /// A PEM certificate could not be read.
    #[error("failed to parse the {what}: {message}")]
    ParseCertificate {
        /// Which certificate.
        what: &'static str,
        /// Cause.
        message: String,
    },
    /// The Secret holds partial or non-PEM data.
    #[error("failed to read key {key} of the certificate Secret: {message}")]
    ParseSecret {
        /// Secret data key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The CA bundle patch could not be built.
    #[error("failed to build the caBundle patch: {message}")]
    BuildPatch {
        /// Cause.
        message: String,
    },
    /// GET of the Secret failed.
    #[error("failed to read Secret {namespace}/{name}: {source}")]
    ReadSecret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// POST of the Secret failed (other than a conflict).
    #[error(
        "failed to create Secret {namespace}/{name} (the chart creates it empty and grants no create; reinstall the \
         chart or create it with `kubectl create secret generic {name} -n {namespace}`): {source}"
    )]
    CreateSecret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// PUT of the Secret failed (other than a conflict).
    #[error("failed to update Secret {namespace}/{name}: {source}")]
    UpdateSecret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Another replica wrote the Secret first; re-read and decide again.
    #[error("failed to write Secret {namespace}/{name}: another replica changed it first (will re-read)")]
    SecretConflict {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// GET of the webhook configuration failed.
    #[error("failed to read MutatingWebhookConfiguration {name}: {source}")]
    ReadWebhookConfiguration {
        /// Name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// PATCH of the webhook configuration failed.
    #[error("failed to patch the caBundle of MutatingWebhookConfiguration {name}: {source}")]
    PatchWebhookConfiguration {
        /// Name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// The serving certificate or key could not be written locally.
    #[error("failed to write {path}: {source}")]
    WriteFile {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

impl CertError {
    /// Fixed reason for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingTlsFiles => "missing_tls_files",
            Self::GenerateCertificate { .. } => "generate_certificate",
            Self::ParseKey { .. } => "parse_key",
            Self::ParseCertificate { .. } => "parse_certificate",
            Self::ParseSecret { .. } => "parse_secret",
            Self::BuildPatch { .. } => "build_patch",
            Self::ReadSecret { .. } => "read_secret",
            Self::CreateSecret { .. } => "create_secret",
            Self::UpdateSecret { .. } => "update_secret",
            Self::SecretConflict { .. } => "secret_conflict",
            Self::ReadWebhookConfiguration { .. } => "read_webhook_configuration",
            Self::PatchWebhookConfiguration { .. } => "patch_webhook_configuration",
            Self::WriteFile { .. } => "write_file",
        }
    }
}
