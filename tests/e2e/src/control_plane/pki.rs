//! The throwaway control plane's credentials: one CA, serving certificates for loopback, an admin client
//! certificate (group `system:masters`), the kube-scheduler's client certificate, the service-account signing key,
//! and kubeconfigs. Pure; the caller writes the files.

use std::time::Duration;

use base64::Engine;
use rcgen::{CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

use crate::HarnessError;

/// Long enough for any run; nothing outlives the control plane's temporary directory.
const LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Names every loopback serving certificate carries.
pub const LOOPBACK_NAMES: [&str; 3] = ["127.0.0.1", "localhost", "::1"];

/// Addresses the serving certificate also carries for pods on the optional real node: the CNI bridge's gateway
/// (where the API server is advertised then) and the `kubernetes` Service's ClusterIP.
pub const POD_FACING_ADDRESSES: [&str; 2] = ["10.244.0.1", "10.0.0.1"];

/// A PEM certificate with its PEM key.
#[derive(Clone, Debug)]
pub struct Pem {
    /// Certificate.
    pub cert: String,
    /// PKCS#8 private key.
    pub key: String,
}

/// Everything the processes and clients authenticate with.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// The CA that signs every certificate below (the API server's client CA too).
    pub ca: Pem,
    /// Serving certificate for the loopback names (API servers, Kueue's webhook server) and Kueue's webhook Service.
    pub serving: Pem,
    /// Client certificate of user `tiergate-e2e-admin` in group `system:masters`.
    pub admin: Pem,
    /// Client certificate of user `system:kube-scheduler`, whom the API server's bootstrap RBAC grants exactly what
    /// a scheduler needs (DRA's claims, slices and classes included), as a kubeadm cluster's scheduler has.
    pub scheduler: Pem,
    /// Service-account token signing key (`key`) and its public half (`cert` holds the public key PEM).
    pub service_account: Pem,
}

fn now() -> Result<i64, HarnessError> {
    Ok(i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs())?)
}

/// A fresh CA with its serving, admin and service-account material.
pub fn build_credentials() -> Result<Credentials, HarnessError> {
    let now = now()?;
    let (ca_cert, ca_key) = tiergate::certs::build_ca(now, LIFETIME)?;
    let mut names: Vec<String> =
        LOOPBACK_NAMES.iter().chain(&POD_FACING_ADDRESSES).map(|name| (*name).to_owned()).collect();
    names.push(super::kueue::webhook_service_host());
    let (serving_cert, serving_key) =
        tiergate::certs::build_serving_certificate(&ca_cert, &ca_key, &names, now, LIFETIME)?;
    let admin = build_client_certificate(&ca_cert, &ca_key, "tiergate-e2e-admin", Some("system:masters"))?;
    let scheduler = build_client_certificate(&ca_cert, &ca_key, "system:kube-scheduler", None)?;
    let signing = KeyPair::generate()?;
    let service_account = Pem { cert: signing.public_key_pem(), key: signing.serialize_pem() };
    Ok(Credentials {
        ca: Pem { cert: ca_cert, key: ca_key },
        serving: Pem { cert: serving_cert, key: serving_key },
        admin,
        scheduler,
        service_account,
    })
}

/// A client certificate for `user` (in `group`, when given), signed by the CA.
fn build_client_certificate(ca_cert: &str, ca_key: &str, user: &str, group: Option<&str>) -> Result<Pem, HarnessError> {
    let issuer = Issuer::from_ca_cert_pem(ca_cert, KeyPair::from_pem(ca_key)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, user);
    if let Some(group) = group {
        name.push(DnType::OrganizationName, group);
    }
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pem { cert: cert.pem(), key: key.serialize_pem() })
}

/// A kubeconfig for `server` that trusts `ca_pem` and authenticates with `client`.
pub fn build_kubeconfig(server: &str, ca_pem: &str, client: &Pem) -> String {
    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority-data": encode(ca_pem)}}],
        "users": [{"name": "e2e-admin", "user": {
            "client-certificate-data": encode(&client.cert),
            "client-key-data": encode(&client.key),
        }}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e-admin"}}],
        "current-context": "e2e",
    });
    kubeconfig.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_certificate_is_signed_by_the_one_ca() {
        let credentials = build_credentials().unwrap();
        for pem in [&credentials.serving, &credentials.admin, &credentials.scheduler] {
            assert!(tiergate::certs::is_signed_by(&pem.cert, &credentials.ca.cert));
            assert!(tiergate::certs::key_matches_certificate(&pem.cert, &pem.key));
        }
        assert!(credentials.service_account.cert.contains("BEGIN PUBLIC KEY"));
    }

    #[test]
    fn the_schedulers_certificate_names_the_user_bootstrap_rbac_binds_and_no_group() {
        let credentials = build_credentials().unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(credentials.scheduler.cert.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let subject = cert.subject();
        assert_eq!(subject.iter_common_name().next().unwrap().as_str().unwrap(), "system:kube-scheduler");
        assert_eq!(subject.iter_organization().count(), 0);
    }

    #[test]
    fn the_kubeconfig_is_read_by_kube_with_its_server_and_client_certificate() {
        let credentials = build_credentials().unwrap();
        let text = build_kubeconfig("https://127.0.0.1:6443", &credentials.ca.cert, &credentials.admin);
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kubeconfig.current_context.as_deref(), Some("e2e"));
        let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert!(kubeconfig.auth_infos[0].auth_info.as_ref().unwrap().client_certificate_data.is_some());
    }
}
