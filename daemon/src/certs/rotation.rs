//! Certificate rotation: decides what the Secret should hold next and builds the JSON patch that publishes the CA
//! bundle into the webhook configuration; no I/O.
//!
//! The rules, in order:
//! 1. nothing stored (or unreadable) -> create a CA and a serving certificate;
//! 2. the CA has less than a third of its lifetime left -> rotate the CA: a new CA signs from now on and joins
//!    the bundle next to the old one, the serving certificate is kept (the API server does not trust the new CA yet);
//! 3. the serving certificate is not signed by the current CA -> reissue it, but only once the webhook
//!    configuration trusts the current CA (`ca_published`), so no replica ever serves a certificate the API
//!    server cannot verify;
//! 4. the serving certificate names other DNS names, or has less than a third of its lifetime left -> reissue;
//! 5. the bundle lacks the current CA or still carries expired CAs -> repair the bundle.
//!
//! An old CA stays in the bundle until it expires, so a replica that has not reloaded yet keeps working.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;

use super::CertError;
use super::pki::{
    CertMaterial, build_ca, build_serving_certificate, bundle_certificates, certificate_info, is_signed_by,
    key_matches_certificate,
};

/// How long generated certificates live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotationSettings {
    /// Lifetime of a generated CA (rotated with a third left).
    pub ca_lifetime: Duration,
    /// Lifetime of a serving certificate (reissued with a third left).
    pub serving_lifetime: Duration,
}

impl Default for RotationSettings {
    fn default() -> Self {
        const DAY: u64 = 86_400;
        Self { ca_lifetime: Duration::from_secs(3650 * DAY), serving_lifetime: Duration::from_secs(90 * DAY) }
    }
}

/// What the certificate Secret holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredCertificates {
    /// No Secret, or the chart's empty one.
    Absent,
    /// Data that cannot be read as certificate material (it is replaced).
    Unreadable,
    /// Readable material.
    Present(CertMaterial),
}

/// The Secret annotation that asks for a CA rotation: an RFC 3339 time; every CA issued before it is rotated once it
/// has come (`kubectl annotate secret <release>-webhook-tls tiergate.io/rotate-ca-before=$(date -u +%FT%TZ)`).
pub const ROTATE_CA_ANNOTATION: &str = "tiergate.io/rotate-ca-before";

/// The time [`ROTATE_CA_ANNOTATION`] names, or why it names none (the value and the fix).
pub fn parse_rotate_ca_before(value: &str) -> Result<i64, String> {
    value.trim().parse::<k8s_openapi::jiff::Timestamp>().map(|time| time.as_second()).map_err(|error| {
        format!(
            "annotation {ROTATE_CA_ANNOTATION}={value:?} is not an RFC 3339 time ({error}); write one such as \
             2026-11-27T18:00:00Z"
        )
    })
}

/// The change the next reconcile makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertAction {
    /// Nothing to change.
    Keep,
    /// A new CA and serving certificate.
    Create {
        /// `absent` or `unreadable`.
        reason: &'static str,
    },
    /// A new CA joins the bundle and signs from now on; the serving certificate waits for the bundle to publish.
    RotateCa {
        /// `ca_expiring`, or `requested` (the Secret's [`ROTATE_CA_ANNOTATION`] names a later time).
        reason: &'static str,
    },
    /// A new serving certificate from the current CA.
    ReissueServing {
        /// `ca_rotated`, `dns_names_changed`, `expiring` or `unreadable`.
        reason: &'static str,
    },
    /// The bundle gains the current CA or drops expired ones.
    RepairBundle,
}

impl CertAction {
    /// Fixed reason for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Create { reason } | Self::ReissueServing { reason } | Self::RotateCa { reason } => reason,
            Self::RepairBundle => "bundle_outdated",
        }
    }
}

/// The change to make to `stored` at `now`; `ca_published` says whether the webhook configuration already trusts
/// the stored current CA; `rotate_ca_before` is the time of the Secret's [`ROTATE_CA_ANNOTATION`], if any: a CA
/// issued before it is rotated once that time has come (the staged rotation, so no replica ever serves a
/// certificate the API server cannot verify), and the new CA, issued after it, is kept.
pub fn certificate_action(
    stored: &StoredCertificates,
    dns_names: &[String],
    now: i64,
    ca_published: bool,
    rotate_ca_before: Option<i64>,
) -> CertAction {
    let material = match stored {
        StoredCertificates::Absent => return CertAction::Create { reason: "absent" },
        StoredCertificates::Unreadable => return CertAction::Create { reason: "unreadable" },
        StoredCertificates::Present(material) => material,
    };
    let ca = match certificate_info(&material.ca_cert_pem, "CA certificate") {
        Ok(ca) if ca.is_ca && key_matches_certificate(&material.ca_cert_pem, &material.ca_key_pem) => ca,
        _ => return CertAction::Create { reason: "unreadable" },
    };
    if ca.is_due_for_rotation(now) {
        return CertAction::RotateCa { reason: "ca_expiring" };
    }
    if rotate_ca_before.is_some_and(|before| before <= now && ca.issued_at() < before) {
        return CertAction::RotateCa { reason: "requested" };
    }
    let serving = match certificate_info(&material.tls_cert_pem, "serving certificate") {
        Ok(serving) if key_matches_certificate(&material.tls_cert_pem, &material.tls_key_pem) => serving,
        _ => return CertAction::ReissueServing { reason: "unreadable" },
    };
    if !is_signed_by(&material.tls_cert_pem, &material.ca_cert_pem) {
        if ca_published || serving.is_expired(now) {
            return CertAction::ReissueServing { reason: "ca_rotated" };
        }
    } else if serving.dns_names != dns_names {
        return CertAction::ReissueServing { reason: "dns_names_changed" };
    } else if serving.is_due_for_rotation(now) {
        return CertAction::ReissueServing { reason: "expiring" };
    }
    if bundle_certificates(&material.ca_bundle_pem) != bundle_certificates(&build_ca_bundle(material, now)) {
        return CertAction::RepairBundle;
    }
    CertAction::Keep
}

/// The material after `action`; `None` for [`CertAction::Keep`].
pub fn build_next_material(
    stored: &StoredCertificates,
    action: CertAction,
    dns_names: &[String],
    now: i64,
    settings: &RotationSettings,
) -> Result<Option<CertMaterial>, CertError> {
    let existing = match stored {
        StoredCertificates::Present(material) => Some(material),
        StoredCertificates::Absent | StoredCertificates::Unreadable => None,
    };
    let next = match (action, existing) {
        (CertAction::Keep, _) => return Ok(None),
        (CertAction::Create { .. }, _) | (_, None) => {
            let (ca_cert_pem, ca_key_pem) = build_ca(now, settings.ca_lifetime)?;
            let (tls_cert_pem, tls_key_pem) =
                build_serving_certificate(&ca_cert_pem, &ca_key_pem, dns_names, now, settings.serving_lifetime)?;
            CertMaterial { ca_bundle_pem: ca_cert_pem.clone(), ca_cert_pem, ca_key_pem, tls_cert_pem, tls_key_pem }
        }
        (CertAction::RotateCa { .. }, Some(old)) => {
            let (ca_cert_pem, ca_key_pem) = build_ca(now, settings.ca_lifetime)?;
            let mut next = CertMaterial {
                ca_bundle_pem: format!("{}{}", old.ca_cert_pem, old.ca_bundle_pem),
                ca_cert_pem,
                ca_key_pem,
                ..old.clone()
            };
            let serving_usable = certificate_info(&next.tls_cert_pem, "serving certificate")
                .is_ok_and(|serving| !serving.is_expired(now))
                && is_signed_by(&next.tls_cert_pem, &old.ca_cert_pem);
            if !serving_usable {
                (next.tls_cert_pem, next.tls_key_pem) = build_serving_certificate(
                    &next.ca_cert_pem,
                    &next.ca_key_pem,
                    dns_names,
                    now,
                    settings.serving_lifetime,
                )?;
            }
            next.ca_bundle_pem = build_ca_bundle(&next, now);
            next
        }
        (CertAction::ReissueServing { .. }, Some(old)) => {
            let (tls_cert_pem, tls_key_pem) = build_serving_certificate(
                &old.ca_cert_pem,
                &old.ca_key_pem,
                dns_names,
                now,
                settings.serving_lifetime,
            )?;
            let mut next = CertMaterial { tls_cert_pem, tls_key_pem, ..old.clone() };
            next.ca_bundle_pem = build_ca_bundle(&next, now);
            next
        }
        (CertAction::RepairBundle, Some(old)) => {
            CertMaterial { ca_bundle_pem: build_ca_bundle(old, now), ..old.clone() }
        }
    };
    Ok(Some(next))
}

/// The bundle `material` should carry at `now`: its current CA first, then every other unexpired CA it already
/// trusts, each once.
pub fn build_ca_bundle(material: &CertMaterial, now: i64) -> String {
    let current = bundle_certificates(&material.ca_cert_pem);
    let mut blocks = current.clone();
    for block in bundle_certificates(&material.ca_bundle_pem) {
        let unexpired = certificate_info(&block, "bundled CA").is_ok_and(|info| !info.is_expired(now));
        if unexpired && !blocks.contains(&block) {
            blocks.push(block);
        }
    }
    blocks.concat()
}

/// Whether every webhook of `config` trusts the CA in `ca_cert_pem`.
pub fn ca_published(config: &MutatingWebhookConfiguration, ca_cert_pem: &str) -> bool {
    let wanted = bundle_certificates(ca_cert_pem);
    config.webhooks.iter().flatten().all(|webhook| {
        let published = webhook.client_config.ca_bundle.as_ref().map(|bundle| String::from_utf8_lossy(&bundle.0));
        let published = bundle_certificates(published.as_deref().unwrap_or_default());
        wanted.iter().all(|block| published.contains(block))
    })
}

/// The JSON patch that sets `webhooks[*].clientConfig.caBundle` to `bundle_pem`, guarded by a `test` of each
/// webhook's name (so a concurrent reorder fails the patch instead of misplacing the bundle); `None` when every
/// webhook already carries it.
pub fn build_ca_bundle_patch(
    config: &MutatingWebhookConfiguration,
    bundle_pem: &str,
) -> Result<Option<json_patch::Patch>, CertError> {
    let bundle = ByteString(bundle_pem.as_bytes().to_vec());
    let mut operations = Vec::new();
    for (index, webhook) in config.webhooks.iter().flatten().enumerate() {
        if webhook.client_config.ca_bundle.as_ref() == Some(&bundle) {
            continue;
        }
        operations
            .push(serde_json::json!({"op": "test", "path": format!("/webhooks/{index}/name"), "value": webhook.name}));
        operations.push(serde_json::json!({
            "op": "add",
            "path": format!("/webhooks/{index}/clientConfig/caBundle"),
            "value": bundle,
        }));
    }
    if operations.is_empty() {
        return Ok(None);
    }
    serde_json::from_value(serde_json::Value::Array(operations))
        .map(Some)
        .map_err(|source| CertError::BuildPatch { message: source.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::pki::serving_dns_names;
    use crate::certs::test_support::{DAY, NOW, names};

    fn settings() -> RotationSettings {
        RotationSettings::default()
    }

    fn created_at(now: i64) -> CertMaterial {
        let next = build_next_material(
            &StoredCertificates::Absent,
            CertAction::Create { reason: "absent" },
            &names(),
            now,
            &settings(),
        );
        next.unwrap().unwrap()
    }

    fn step(material: &CertMaterial, now: i64, published: bool) -> (CertAction, CertMaterial) {
        let stored = StoredCertificates::Present(material.clone());
        let action = certificate_action(&stored, &names(), now, published, None);
        let next = build_next_material(&stored, action, &names(), now, &settings()).unwrap();
        (action, next.unwrap_or_else(|| material.clone()))
    }

    /// A configuration whose webhooks `w0`, `w1`, ... carry these CA bundles.
    fn webhook_config(bundles: &[Option<&str>]) -> MutatingWebhookConfiguration {
        let names: Vec<String> = (0..bundles.len()).map(|index| format!("w{index}.tiergate.io")).collect();
        let webhooks: Vec<(&str, Option<&str>)> =
            names.iter().map(String::as_str).zip(bundles.iter().copied()).collect();
        crate::certs::test_support::webhook_config(&webhooks)
    }

    #[test]
    fn nothing_stored_creates_a_ca_and_a_serving_certificate_it_signed() {
        assert_eq!(
            certificate_action(&StoredCertificates::Absent, &names(), NOW, false, None),
            CertAction::Create { reason: "absent" }
        );
        let material = created_at(NOW);
        assert!(is_signed_by(&material.tls_cert_pem, &material.ca_cert_pem));
        assert_eq!(material.ca_bundle_pem, material.ca_cert_pem);
    }

    #[test]
    fn unreadable_secret_is_replaced() {
        assert_eq!(
            certificate_action(&StoredCertificates::Unreadable, &names(), NOW, true, None),
            CertAction::Create { reason: "unreadable" }
        );
        let mut material = created_at(NOW);
        material.ca_key_pem = created_at(NOW).ca_key_pem;
        let stored = StoredCertificates::Present(material);
        assert_eq!(certificate_action(&stored, &names(), NOW, true, None), CertAction::Create { reason: "unreadable" });
    }

    #[test]
    fn fresh_material_is_kept_until_a_third_of_the_serving_lifetime_is_left() {
        let material = created_at(NOW);
        for day in [0, 1, 30, 59] {
            assert_eq!(step(&material, NOW + day * DAY, true).0, CertAction::Keep, "day {day}");
        }
        let (action, next) = step(&material, NOW + 61 * DAY, true);
        assert_eq!(action, CertAction::ReissueServing { reason: "expiring" });
        assert_eq!(next.ca_cert_pem, material.ca_cert_pem, "the CA (and so the caBundle) survives");
        assert_eq!(next.ca_bundle_pem, material.ca_bundle_pem);
        assert_ne!(next.tls_cert_pem, material.tls_cert_pem);
        let serving = certificate_info(&next.tls_cert_pem, "serving").unwrap();
        assert_eq!(serving.not_after, NOW + 61 * DAY + 90 * DAY);
        assert_eq!(step(&next, NOW + 62 * DAY, true).0, CertAction::Keep);
    }

    #[test]
    fn expired_serving_certificate_is_reissued() {
        let material = created_at(NOW);
        assert_eq!(step(&material, NOW + 200 * DAY, false).0, CertAction::ReissueServing { reason: "expiring" });
    }

    #[test]
    fn a_renamed_service_gets_a_new_serving_certificate() {
        let material = created_at(NOW);
        let stored = StoredCertificates::Present(material);
        let renamed = serving_dns_names("webhook", "tiergate-system");
        assert_eq!(
            certificate_action(&stored, &renamed, NOW, true, None),
            CertAction::ReissueServing { reason: "dns_names_changed" }
        );
    }

    #[test]
    fn ca_rotation_publishes_the_new_ca_before_any_certificate_it_signed_is_served() {
        let material = created_at(NOW);
        let late = NOW + 2440 * DAY; // a third of 3650 days is left after 2433 days
        // Keep the serving certificate fresh so only the CA is due.
        let (_, fresh) = step(&material, late - 10 * DAY, true);
        let (action, rotated) = step(&fresh, late, false);
        assert_eq!(action, CertAction::RotateCa { reason: "ca_expiring" });
        assert_ne!(rotated.ca_cert_pem, fresh.ca_cert_pem);
        assert_eq!(rotated.tls_cert_pem, fresh.tls_cert_pem, "serving certificate kept until the bundle is published");
        assert_eq!(
            bundle_certificates(&rotated.ca_bundle_pem),
            [rotated.ca_cert_pem.clone(), fresh.ca_cert_pem.clone()]
        );

        // Not yet published: wait.
        assert_eq!(step(&rotated, late + 60, false).0, CertAction::Keep);
        // Published: reissue from the new CA; the old CA stays trusted.
        let (action, reissued) = step(&rotated, late + 60, true);
        assert_eq!(action, CertAction::ReissueServing { reason: "ca_rotated" });
        assert!(is_signed_by(&reissued.tls_cert_pem, &rotated.ca_cert_pem));
        assert_eq!(reissued.ca_bundle_pem, rotated.ca_bundle_pem);
        assert_eq!(step(&reissued, late + 120, true).0, CertAction::Keep);

        // Once the old CA expires it leaves the bundle.
        let after_old_expiry = NOW + 3650 * DAY + 1;
        let (action, repaired) = step(&reissued, after_old_expiry, true);
        assert_eq!(action, CertAction::ReissueServing { reason: "expiring" });
        assert_eq!(bundle_certificates(&repaired.ca_bundle_pem), vec![rotated.ca_cert_pem.clone()]);
    }

    /// One reconcile as [`step`], with the Secret's rotation request at `before`.
    fn step_requested(material: &CertMaterial, now: i64, published: bool, before: i64) -> (CertAction, CertMaterial) {
        let stored = StoredCertificates::Present(material.clone());
        let action = certificate_action(&stored, &names(), now, published, Some(before));
        let next = build_next_material(&stored, action, &names(), now, &settings()).unwrap();
        (action, next.unwrap_or_else(|| material.clone()))
    }

    #[test]
    fn a_requested_ca_rotation_is_staged_like_an_expiring_one_and_happens_once() {
        let material = created_at(NOW);
        let before = NOW + 100;
        // Not before its time.
        assert_eq!(step_requested(&material, NOW + 50, true, before).0, CertAction::Keep);
        let (action, rotated) = step_requested(&material, NOW + 100, true, before);
        assert_eq!(action, CertAction::RotateCa { reason: "requested" });
        assert_eq!(
            rotated.tls_cert_pem, material.tls_cert_pem,
            "serving certificate kept until the bundle is published"
        );
        assert_eq!(
            bundle_certificates(&rotated.ca_bundle_pem),
            [rotated.ca_cert_pem.clone(), material.ca_cert_pem.clone()]
        );
        // The new CA was issued after the requested time: it is kept, and the staged rotation goes on.
        assert_eq!(step_requested(&rotated, NOW + 160, false, before).0, CertAction::Keep);
        let (action, reissued) = step_requested(&rotated, NOW + 160, true, before);
        assert_eq!(action, CertAction::ReissueServing { reason: "ca_rotated" });
        assert!(is_signed_by(&reissued.tls_cert_pem, &rotated.ca_cert_pem));
        assert_eq!(step_requested(&reissued, NOW + 220, true, before).0, CertAction::Keep);
    }

    #[test]
    fn the_rotation_request_is_an_rfc_3339_time_and_a_bad_one_names_the_fix() {
        assert_eq!(parse_rotate_ca_before("2026-11-27T18:00:00Z"), Ok(1_795_802_400));
        let problem = parse_rotate_ca_before("yesterday").unwrap_err();
        assert!(problem.contains(ROTATE_CA_ANNOTATION) && problem.contains("2026-11-27T18:00:00Z"), "{problem}");
    }

    #[test]
    fn ca_rotation_with_an_expired_serving_certificate_reissues_it_at_once() {
        let material = created_at(NOW);
        let (action, rotated) = step(&material, NOW + 2500 * DAY, false);
        assert_eq!(action, CertAction::RotateCa { reason: "ca_expiring" });
        assert!(is_signed_by(&rotated.tls_cert_pem, &rotated.ca_cert_pem));
    }

    #[test]
    fn bundle_missing_the_current_ca_is_repaired() {
        let mut material = created_at(NOW);
        material.ca_bundle_pem = String::new();
        let (action, next) = step(&material, NOW, true);
        assert_eq!(action, CertAction::RepairBundle);
        assert_eq!(next.ca_bundle_pem, material.ca_cert_pem);
    }

    #[test]
    fn ca_bundle_patch_sets_every_webhook_that_differs_and_tests_its_name() {
        let bundle = created_at(NOW).ca_bundle_pem;
        let config = webhook_config(&[None, Some(&bundle), Some("stale")]);
        let patch = build_ca_bundle_patch(&config, &bundle).unwrap().unwrap();
        let encoded = serde_json::to_value(ByteString(bundle.as_bytes().to_vec())).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            serde_json::json!([
                {"op": "test", "path": "/webhooks/0/name", "value": "w0.tiergate.io"},
                {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": encoded},
                {"op": "test", "path": "/webhooks/2/name", "value": "w2.tiergate.io"},
                {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": encoded},
            ])
        );
        let mut document = serde_json::to_value(&config).unwrap();
        json_patch::patch(&mut document, &patch).unwrap();
        let patched: MutatingWebhookConfiguration = serde_json::from_value(document).unwrap();
        assert!(build_ca_bundle_patch(&patched, &bundle).unwrap().is_none(), "idempotent");
        assert!(!ca_published(&patched, &created_at(NOW).ca_cert_pem));
    }

    #[test]
    fn ca_is_published_only_when_every_webhook_trusts_it() {
        let material = created_at(NOW);
        let both = format!("{}{}", created_at(NOW).ca_cert_pem, material.ca_cert_pem);
        assert!(ca_published(&webhook_config(&[Some(&both), Some(&material.ca_cert_pem)]), &material.ca_cert_pem));
        assert!(!ca_published(&webhook_config(&[Some(&both), None]), &material.ca_cert_pem));
    }
}
