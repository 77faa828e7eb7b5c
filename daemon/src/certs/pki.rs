//! Certificate material: generates the CA and the serving certificate, inspects PEM certificates and maps the
//! material to and from the Secret's data; no I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::CertError;

/// Secret key of the current (signing) CA certificate.
pub const SECRET_CA_CERT: &str = "ca.crt";
/// Secret key of the current CA's private key.
pub const SECRET_CA_KEY: &str = "ca.key";
/// Secret key of the CA bundle the API server trusts: the current CA and, during a CA rotation, the previous one.
pub const SECRET_CA_BUNDLE: &str = "ca-bundle.crt";
/// Secret key of the serving certificate.
pub const SECRET_TLS_CERT: &str = "tls.crt";
/// Secret key of the serving certificate's private key.
pub const SECRET_TLS_KEY: &str = "tls.key";

/// Serving certificates are issued from this long before "now", so a skewed API server clock still accepts them.
const CLOCK_SKEW_SECONDS: i64 = 5 * 60;
const PEM_BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const PEM_END: &str = "-----END CERTIFICATE-----";

/// Everything the certificate Secret holds, as PEM text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertMaterial {
    /// The CA that signs new serving certificates.
    pub ca_cert_pem: String,
    /// Its private key (PKCS#8).
    pub ca_key_pem: String,
    /// Every CA the webhook configuration trusts (the current one first).
    pub ca_bundle_pem: String,
    /// The serving certificate.
    pub tls_cert_pem: String,
    /// Its private key (PKCS#8).
    pub tls_key_pem: String,
}

/// What rotation needs to know about one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Subject, RFC 4514 text.
    pub subject: String,
    /// Unix time the certificate becomes valid.
    pub not_before: i64,
    /// Unix time the certificate expires.
    pub not_after: i64,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// Whether basic constraints mark it as a CA.
    pub is_ca: bool,
}

impl CertInfo {
    /// Unix time the certificate was issued: tiergate makes them valid [`CLOCK_SKEW_SECONDS`] earlier, for skewed
    /// clocks.
    pub fn issued_at(&self) -> i64 {
        self.not_before.saturating_add(CLOCK_SKEW_SECONDS)
    }

    /// Whether less than a third of the certificate's lifetime is left at `now` (or it is not yet valid).
    pub fn is_due_for_rotation(&self, now: i64) -> bool {
        let lifetime = self.not_after.saturating_sub(self.not_before);
        let remaining = self.not_after.saturating_sub(now);
        now < self.not_before || remaining.saturating_mul(3) < lifetime
    }

    /// Whether the certificate has expired at `now`.
    pub fn is_expired(&self, now: i64) -> bool {
        now >= self.not_after
    }
}

/// The DNS names the API server may use for `<service>.<namespace>.svc`, short forms first.
pub fn serving_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A new self-signed CA valid from shortly before `now` until `now + lifetime`: (certificate PEM, key PEM).
pub fn build_ca(now: i64, lifetime: Duration) -> Result<(String, String), CertError> {
    let key = KeyPair::generate().map_err(|source| CertError::GenerateCertificate { what: "CA key", source })?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    // A timestamped common name, as kube-apiserver's own self-signed CAs do, tells rotated CAs apart.
    name.push(DnType::CommonName, format!("tiergate-webhook-ca@{now}"));
    name.push(DnType::OrganizationName, "tiergate");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.not_before = offset_date_time(now.saturating_sub(CLOCK_SKEW_SECONDS))?;
    params.not_after = offset_date_time(now.saturating_add(seconds(lifetime)))?;
    let cert =
        params.self_signed(&key).map_err(|source| CertError::GenerateCertificate { what: "CA certificate", source })?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `dns_names` signed by the given CA, valid from shortly before `now` for `lifetime`
/// but never past the CA's own expiry: (certificate PEM, key PEM).
pub fn build_serving_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    dns_names: &[String],
    now: i64,
    lifetime: Duration,
) -> Result<(String, String), CertError> {
    let ca_info = certificate_info(ca_cert_pem, "CA certificate")?;
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|source| CertError::ParseKey { what: "CA key", source })?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)
        .map_err(|source| CertError::GenerateCertificate { what: "CA issuer", source })?;
    let key = KeyPair::generate().map_err(|source| CertError::GenerateCertificate { what: "serving key", source })?;
    let mut params = CertificateParams::new(dns_names.to_vec())
        .map_err(|source| CertError::GenerateCertificate { what: "serving certificate names", source })?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, dns_names.iter().find(|dns| dns.ends_with(".svc")).cloned().unwrap_or_default());
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    // ECDSA keys sign the handshake; key encipherment is an RSA key-exchange usage.
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = offset_date_time(now.saturating_sub(CLOCK_SKEW_SECONDS).max(ca_info.not_before))?;
    params.not_after = offset_date_time(now.saturating_add(seconds(lifetime)).min(ca_info.not_after))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|source| CertError::GenerateCertificate { what: "serving certificate", source })?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Parses the first PEM certificate in `pem`; `what` names it in the error.
pub fn certificate_info(pem: &str, what: &'static str) -> Result<CertInfo, CertError> {
    let der = first_certificate_der(pem, what)?;
    let cert = parse_der(&der, what)?;
    let dns_names = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                _ => None,
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(error) => return Err(CertError::ParseCertificate { what, message: error.to_string() }),
    };
    Ok(CertInfo {
        subject: cert.subject().to_string(),
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        dns_names,
        is_ca: cert.is_ca(),
    })
}

/// Whether the first certificate in `cert_pem` carries a valid signature of the CA in `ca_pem`.
pub fn is_signed_by(cert_pem: &str, ca_pem: &str) -> bool {
    let (Ok(cert_der), Ok(ca_der)) =
        (first_certificate_der(cert_pem, "certificate"), first_certificate_der(ca_pem, "CA certificate"))
    else {
        return false;
    };
    let (Ok(cert), Ok(ca)) = (parse_der(&cert_der, "certificate"), parse_der(&ca_der, "CA certificate")) else {
        return false;
    };
    cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// Whether `key_pem` is the private key of the first certificate in `cert_pem`.
pub fn key_matches_certificate(cert_pem: &str, key_pem: &str) -> bool {
    let (Ok(der), Ok(key)) = (first_certificate_der(cert_pem, "certificate"), KeyPair::from_pem(key_pem)) else {
        return false;
    };
    parse_der(&der, "certificate").is_ok_and(|cert| cert.public_key().subject_public_key.data == key.public_key_raw())
}

/// The PEM certificate blocks of a bundle, each normalised to `BEGIN..END` with a trailing newline.
pub fn bundle_certificates(bundle_pem: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = bundle_pem;
    while let Some(start) = rest.find(PEM_BEGIN) {
        let Some(len) = rest[start..].find(PEM_END) else { break };
        let end = start + len + PEM_END.len();
        blocks.push(format!("{}\n", rest[start..end].trim()));
        rest = &rest[end..];
    }
    blocks
}

/// The material in a Secret's data; `None` when the Secret holds none of it yet (e.g. the chart's empty Secret).
pub fn material_from_secret_data(data: &BTreeMap<String, ByteString>) -> Result<Option<CertMaterial>, CertError> {
    let keys = [SECRET_CA_CERT, SECRET_CA_KEY, SECRET_CA_BUNDLE, SECRET_TLS_CERT, SECRET_TLS_KEY];
    if keys.iter().all(|key| data.get(*key).is_none_or(|value| value.0.is_empty())) {
        return Ok(None);
    }
    let text = |key: &'static str| -> Result<String, CertError> {
        let value = data
            .get(key)
            .filter(|value| !value.0.is_empty())
            .ok_or(CertError::ParseSecret { key, message: "the key is missing or empty".to_owned() })?;
        String::from_utf8(value.0.clone())
            .map_err(|_| CertError::ParseSecret { key, message: "the value is not UTF-8 PEM text".to_owned() })
    };
    Ok(Some(CertMaterial {
        ca_cert_pem: text(SECRET_CA_CERT)?,
        ca_key_pem: text(SECRET_CA_KEY)?,
        ca_bundle_pem: text(SECRET_CA_BUNDLE)?,
        tls_cert_pem: text(SECRET_TLS_CERT)?,
        tls_key_pem: text(SECRET_TLS_KEY)?,
    }))
}

/// The Secret data holding `material`.
pub fn secret_data(material: &CertMaterial) -> BTreeMap<String, ByteString> {
    [
        (SECRET_CA_CERT, &material.ca_cert_pem),
        (SECRET_CA_KEY, &material.ca_key_pem),
        (SECRET_CA_BUNDLE, &material.ca_bundle_pem),
        (SECRET_TLS_CERT, &material.tls_cert_pem),
        (SECRET_TLS_KEY, &material.tls_key_pem),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), ByteString(value.as_bytes().to_vec())))
    .collect()
}

fn first_certificate_der(pem: &str, what: &'static str) -> Result<Vec<u8>, CertError> {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|error| CertError::ParseCertificate { what, message: format!("not a PEM certificate: {error}") })?;
    if parsed.label != "CERTIFICATE" {
        return Err(CertError::ParseCertificate {
            what,
            message: format!("found a PEM block labelled {:?}, expected CERTIFICATE", parsed.label),
        });
    }
    Ok(parsed.contents)
}

fn parse_der<'a>(der: &'a [u8], what: &'static str) -> Result<X509Certificate<'a>, CertError> {
    X509Certificate::from_der(der)
        .map(|(_, cert)| cert)
        .map_err(|error| CertError::ParseCertificate { what, message: error.to_string() })
}

fn offset_date_time(unix: i64) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(|_| CertError::ParseCertificate {
        what: "validity period",
        message: format!("unix time {unix} is out of range"),
    })
}

fn seconds(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::test_support::{DAY, NOW, names};

    #[test]
    fn ca_is_a_ca_with_the_requested_validity() {
        let (cert, key) = build_ca(NOW, Duration::from_secs(3650 * DAY as u64)).unwrap();
        let info = certificate_info(&cert, "ca").unwrap();
        assert!(info.is_ca);
        assert_eq!(info.not_before, NOW - CLOCK_SKEW_SECONDS, "valid a little earlier for skewed clocks");
        assert_eq!(info.not_after, NOW + 3650 * DAY);
        assert!(info.subject.contains(&format!("tiergate-webhook-ca@{NOW}")), "{}", info.subject);
        assert!(key.contains("PRIVATE KEY"));
        assert!(is_signed_by(&cert, &cert), "a CA is self-signed");
    }

    #[test]
    fn serving_certificate_names_the_service_and_is_signed_by_the_ca() {
        let (ca, ca_key) = build_ca(NOW, Duration::from_secs(3650 * DAY as u64)).unwrap();
        let (cert, key) =
            build_serving_certificate(&ca, &ca_key, &names(), NOW, Duration::from_secs(90 * DAY as u64)).unwrap();
        let info = certificate_info(&cert, "serving").unwrap();
        assert!(!info.is_ca);
        assert_eq!(
            info.dns_names,
            vec![
                "tiergate-webhook",
                "tiergate-webhook.tiergate-system",
                "tiergate-webhook.tiergate-system.svc",
                "tiergate-webhook.tiergate-system.svc.cluster.local"
            ]
        );
        assert!(info.subject.contains("tiergate-webhook.tiergate-system.svc"), "{}", info.subject);
        assert_eq!(info.not_after, NOW + 90 * DAY);
        assert_eq!(info.not_before, NOW - CLOCK_SKEW_SECONDS, "valid a little earlier for skewed clocks");
        assert!(is_signed_by(&cert, &ca));
        let (other_ca, _) = build_ca(NOW, Duration::from_secs(DAY as u64)).unwrap();
        assert!(!is_signed_by(&cert, &other_ca));
        assert!(KeyPair::from_pem(&key).is_ok());
    }

    #[test]
    fn serving_certificate_never_outlives_its_ca() {
        let (ca, ca_key) = build_ca(NOW, Duration::from_secs(10 * DAY as u64)).unwrap();
        let (cert, _) =
            build_serving_certificate(&ca, &ca_key, &names(), NOW, Duration::from_secs(90 * DAY as u64)).unwrap();
        assert_eq!(certificate_info(&cert, "serving").unwrap().not_after, NOW + 10 * DAY);
    }

    #[test]
    fn serving_certificate_is_accepted_by_rustls_for_the_service_name() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
        let (ca, ca_key) = build_ca(NOW, Duration::from_secs(3650 * DAY as u64)).unwrap();
        let (cert, _) =
            build_serving_certificate(&ca, &ca_key, &names(), NOW, Duration::from_secs(90 * DAY as u64)).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider).build().unwrap();
        let leaf = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        let at = UnixTime::since_unix_epoch(Duration::from_secs((NOW + DAY) as u64));
        for name in ["tiergate-webhook.tiergate-system.svc", "tiergate-webhook.tiergate-system.svc.cluster.local"] {
            let server = ServerName::try_from(name).unwrap();
            verifier.verify_server_cert(&leaf, &[], &server, &[], at).unwrap();
        }
        let wrong = ServerName::try_from("other.tiergate-system.svc").unwrap();
        assert!(verifier.verify_server_cert(&leaf, &[], &wrong, &[], at).is_err());
    }

    #[test]
    fn due_for_rotation_when_less_than_a_third_of_the_lifetime_is_left() {
        let info = CertInfo {
            subject: String::new(),
            not_before: NOW,
            not_after: NOW + 90 * DAY,
            dns_names: vec![],
            is_ca: false,
        };
        assert!(!info.is_due_for_rotation(NOW));
        assert!(!info.is_due_for_rotation(NOW + 59 * DAY));
        assert!(info.is_due_for_rotation(NOW + 61 * DAY));
        assert!(info.is_due_for_rotation(NOW - DAY), "not yet valid");
        assert!(!info.is_expired(NOW + 90 * DAY - 1));
        assert!(info.is_expired(NOW + 90 * DAY));
    }

    #[test]
    fn bundle_is_split_into_normalised_blocks() {
        let (a, _) = build_ca(NOW, Duration::from_secs(DAY as u64)).unwrap();
        let (b, _) = build_ca(NOW + 1, Duration::from_secs(DAY as u64)).unwrap();
        let bundle = format!("junk\n{a}\n\n  {b}trailing");
        assert_eq!(bundle_certificates(&bundle), vec![a.clone(), b.clone()]);
        assert!(bundle_certificates("no certificates").is_empty());
    }

    #[test]
    fn secret_data_round_trips() {
        let material = CertMaterial {
            ca_cert_pem: "ca".into(),
            ca_key_pem: "cakey".into(),
            ca_bundle_pem: "bundle".into(),
            tls_cert_pem: "tls".into(),
            tls_key_pem: "tlskey".into(),
        };
        let data = secret_data(&material);
        assert_eq!(data.len(), 5);
        assert_eq!(material_from_secret_data(&data).unwrap(), Some(material));
    }

    #[test]
    fn empty_secret_holds_no_material() {
        assert_eq!(material_from_secret_data(&BTreeMap::new()).unwrap(), None);
    }

    #[test]
    fn partial_secret_names_the_missing_key() {
        let mut data = BTreeMap::new();
        data.insert(SECRET_TLS_CERT.to_owned(), ByteString(b"x".to_vec()));
        let error = material_from_secret_data(&data).unwrap_err();
        assert!(error.to_string().contains(SECRET_CA_CERT), "{error}");
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        let error = certificate_info("not pem", "serving certificate").unwrap_err();
        assert!(error.to_string().starts_with("failed to parse the serving certificate"), "{error}");
        assert_eq!(error.reason(), "parse_certificate");
    }
}
