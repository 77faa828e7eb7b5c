//! Shared builders for the certificate tests: a fixed clock, the chart's DNS names, webhook configurations.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration, WebhookClientConfig};

use super::pki::serving_dns_names;

/// A fixed "now" (Unix seconds) for every certificate test.
pub const NOW: i64 = 1_800_000_000;
/// One day in seconds.
pub const DAY: i64 = 86_400;

/// The serving names of the chart's default Service in its default namespace.
pub fn names() -> Vec<String> {
    serving_dns_names("tiergate-webhook", "tiergate-system")
}

/// A configuration named `00-tiergate` whose webhooks (named as given) carry these CA bundles.
pub fn webhook_config(webhooks: &[(&str, Option<&str>)]) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: kube::api::ObjectMeta { name: Some("00-tiergate".into()), ..Default::default() },
        webhooks: Some(
            webhooks
                .iter()
                .map(|(name, bundle)| MutatingWebhook {
                    name: (*name).into(),
                    client_config: WebhookClientConfig {
                        ca_bundle: bundle.map(|pem| ByteString(pem.as_bytes().to_vec())),
                        ..Default::default()
                    },
                    admission_review_versions: vec!["v1".into()],
                    side_effects: "None".into(),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}
