//! Kueue's Configuration as tiergate sees it: the `deviceClassMappings` and `admissionFairSharing` under key
//! `controller_manager_config.yaml` of ConfigMap `kueue-manager-config` in Kueue's namespace, compared with what the
//! policy's DRA classes (`plan::dra`) and sharing tiers (`plan::tenants`) need, for the `kueue_dra_mapping_missing`
//! and `kueue_fair_sharing_missing` blockers of `tiergate run` and for `tiergate check
//! --kubeconfig`, which reuses it (here, not in `crate::live`, which reaches `reconcile` through `answers`).
//! [`build_kueue_mapping_check`] is pure; [`read_kueue_configuration`] gets that one ConfigMap (I/O).

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use crate::plan::dra::{DeviceClassMapping, kueue_configuration_fragment, mapping_differences, parse_kueue_mappings};
use crate::plan::tenants::{
    LiveFairSharing, fair_sharing_differences, kueue_admission_fair_sharing, parse_kueue_admission_fair_sharing,
};
use crate::policy::TierPolicySpec;

/// The ConfigMap holding Kueue's Configuration, as Kueue's release manifests and chart name it.
pub const KUEUE_CONFIG_MAP: &str = "kueue-manager-config";
/// Its key holding the Configuration document.
pub const KUEUE_CONFIG_KEY: &str = "controller_manager_config.yaml";
/// Longest wait for the ConfigMap: the blocker monitor must not stall on a silent API server.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What one read of Kueue's ConfigMap found.
#[derive(Clone, Debug, PartialEq)]
pub enum KueueConfigRead {
    /// What its Configuration says about what tiergate needs.
    Read {
        /// The mappings (empty when it has none).
        mappings: Vec<DeviceClassMapping>,
        /// The `admissionFairSharing` block (`None`: it has none).
        fair_sharing: Option<LiveFairSharing>,
    },
    /// The ConfigMap does not exist (404; also when the namespace does not).
    MissingConfigMap,
    /// The ConfigMap has no [`KUEUE_CONFIG_KEY`]: Kueue runs with its defaults.
    MissingKey,
    /// The API server refused the read (403): its message.
    Forbidden(String),
    /// The read failed otherwise (unreachable, timed out, another status): what happened.
    Failed(String),
    /// The key's value is not a Configuration: the YAML problem.
    Unparsable(String),
}

/// Whether Kueue charges every DRA class of the policy as the policy needs, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KueueMappingCheck {
    /// `<namespace>/kueue-manager-config`.
    pub location: String,
    /// The mappings the policy needs (`plan::dra::kueue_device_class_mappings`, not empty).
    pub needed: Vec<DeviceClassMapping>,
    /// What the comparison found.
    pub verdict: MappingVerdict,
}

/// What comparing Kueue's Configuration with the policy found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingVerdict {
    /// Kueue charges every DRA class as the policy needs.
    Charged,
    /// One line per DeviceClass unmapped or mapped to another resource (`plan::dra::mapping_differences`).
    Differs(Vec<String>),
    /// The Configuration could not be compared: what is missing or failed, and how to fix it.
    Unknown(String),
}

/// Compares `read` (from Kueue's namespace `namespace`) with the `needed` mappings; `None` when the policy needs
/// none (no DRA class), so nothing is said about Kueue's Configuration.
pub fn build_kueue_mapping_check(
    namespace: &str,
    needed: Vec<DeviceClassMapping>,
    read: &KueueConfigRead,
) -> Option<KueueMappingCheck> {
    if needed.is_empty() {
        return None;
    }
    let location = format!("{namespace}/{KUEUE_CONFIG_MAP}");
    let verdict = match read {
        KueueConfigRead::Read { mappings: live, .. } => {
            let differences = mapping_differences(&needed, live);
            if differences.is_empty() { MappingVerdict::Charged } else { MappingVerdict::Differs(differences) }
        }
        unread => MappingVerdict::Unknown(unread_problem(namespace, unread, "maps no DeviceClass")),
    };
    Some(KueueMappingCheck { location, needed, verdict })
}

impl KueueMappingCheck {
    /// True when Kueue charges every DRA class as the policy needs.
    pub fn passed(&self) -> bool {
        self.verdict == MappingVerdict::Charged
    }

    /// The `tiergate check` section: one line when it passed, else each problem and the fragment to merge (whose
    /// comment says where it goes).
    pub fn to_text(&self) -> String {
        let problems = match &self.verdict {
            MappingVerdict::Charged => {
                let charged: Vec<String> = self
                    .needed
                    .iter()
                    .map(|mapping| format!("{} ({})", mapping.name, mapping.device_class_names.join(", ")))
                    .collect();
                return format!("Kueue deviceClassMappings: every DRA class is charged as {}\n", charged.join(" and "));
            }
            MappingVerdict::Differs(differences) => differences.as_slice(),
            MappingVerdict::Unknown(problem) => std::slice::from_ref(problem),
        };
        let mut text = format!("Kueue deviceClassMappings ({}): FAIL\n", self.location);
        for problem in problems {
            let _ = writeln!(text, "  {problem}");
        }
        let _ = writeln!(text, "  the policy's DRA classes need (`tiergate render --kueue-config` prints the same):");
        for line in kueue_configuration_fragment(&self.needed).unwrap_or_default().lines() {
            let _ = writeln!(text, "    {line}");
        }
        text
    }

    /// The `kueue_dra_mapping_missing` blocker's detail: `None` when it passed.
    pub fn blocker_detail(&self) -> Option<String> {
        match &self.verdict {
            MappingVerdict::Charged => None,
            MappingVerdict::Differs(differences) => Some(format!("{}: {}", self.location, differences.join("; "))),
            MappingVerdict::Unknown(problem) => Some(problem.clone()),
        }
    }
}

/// Why `read` (from `namespace`) says nothing about the Configuration, ending with what Kueue's defaults then do
/// (`defaults`, e.g. "map no DeviceClass"); empty for a read that has it.
fn unread_problem(namespace: &str, read: &KueueConfigRead, defaults: &str) -> String {
    let location = format!("{namespace}/{KUEUE_CONFIG_MAP}");
    match read {
        KueueConfigRead::Read { .. } => String::new(),
        KueueConfigRead::MissingConfigMap => format!(
            "cannot read {location}: the ConfigMap does not exist (is Kueue's namespace {namespace}? see \
             --kueue-namespace); without it Kueue runs with its defaults, which {defaults}"
        ),
        KueueConfigRead::MissingKey => {
            format!("{location} has no key {KUEUE_CONFIG_KEY}, so Kueue runs with its defaults, which {defaults}")
        }
        KueueConfigRead::Forbidden(message) => format!(
            "cannot read {location}: {message}; grant get on it (`kubectl auth can-i get configmap/{KUEUE_CONFIG_MAP} \
             -n {namespace}`; the chart grants it to tiergate with a Role in Kueue's namespace)"
        ),
        KueueConfigRead::Failed(message) => format!("cannot read {location}: {message}"),
        KueueConfigRead::Unparsable(problem) => {
            format!("key {KUEUE_CONFIG_KEY} of {location} is not a Kueue Configuration: {problem}")
        }
    }
}

/// Whether Kueue's `admissionFairSharing` is what the policy's sharing tiers need, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KueueFairSharingCheck {
    /// `<namespace>/kueue-manager-config`.
    pub location: String,
    /// The block the policy needs (`plan::tenants::kueue_admission_fair_sharing`).
    pub needed: String,
    /// Each difference, or why the Configuration could not be compared (empty: it fits).
    pub problems: Vec<String>,
}

/// Compares `read` with what `spec`'s sharing tiers need; `None` when no tier shares among its tenants, so nothing
/// is said about Kueue's fair sharing.
pub fn build_kueue_fair_sharing_check(
    namespace: &str,
    spec: &TierPolicySpec,
    read: &KueueConfigRead,
) -> Option<KueueFairSharingCheck> {
    let needed = kueue_admission_fair_sharing(spec)?;
    let problems = match read {
        KueueConfigRead::Read { fair_sharing, .. } => fair_sharing_differences(spec, fair_sharing.as_ref()),
        unread => vec![unread_problem(namespace, unread, "order every queue first come, first served")],
    };
    Some(KueueFairSharingCheck { location: format!("{namespace}/{KUEUE_CONFIG_MAP}"), needed, problems })
}

impl KueueFairSharingCheck {
    /// True when Kueue shares the tiers among their tenants as the policy says.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }

    /// The `tiergate check` section: one line when it passed, else each problem and the block to add.
    pub fn to_text(&self) -> String {
        if self.passed() {
            return "Kueue admissionFairSharing: the sharing tiers' tenants are ordered by usage as the policy says\n"
                .to_owned();
        }
        let mut text = format!("Kueue admissionFairSharing ({}): FAIL\n", self.location);
        for problem in &self.problems {
            let _ = writeln!(text, "  {problem}");
        }
        let _ = writeln!(text, "  the policy's sharing tiers need (`tiergate render --kueue-config` prints the same):");
        for line in self.needed.lines() {
            let _ = writeln!(text, "    {line}");
        }
        text
    }

    /// The `kueue_fair_sharing_missing` blocker's detail: `None` when it passed.
    pub fn blocker_detail(&self) -> Option<String> {
        (!self.passed()).then(|| format!("{}: {}", self.location, self.problems.join("; ")))
    }
}

/// Gets `kueue-manager-config` from `namespace` and reads its mappings; never fails: every outcome is a
/// [`KueueConfigRead`].
pub async fn read_kueue_configuration(client: &kube::Client, namespace: &str) -> KueueConfigRead {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match tokio::time::timeout(READ_TIMEOUT, api.get_opt(KUEUE_CONFIG_MAP)).await {
        Err(_) => KueueConfigRead::Failed(format!("no answer within {} s", READ_TIMEOUT.as_secs())),
        Ok(Ok(None)) => KueueConfigRead::MissingConfigMap,
        Ok(Ok(Some(config_map))) => build_kueue_config_read(&config_map),
        Ok(Err(kube::Error::Api(status))) => {
            let message = format!("{} ({} {})", status.message, status.code, status.reason);
            if status.is_forbidden() { KueueConfigRead::Forbidden(message) } else { KueueConfigRead::Failed(message) }
        }
        Ok(Err(error)) => KueueConfigRead::Failed(error.to_string()),
    }
}

/// What `config_map` says about Kueue's mappings.
pub fn build_kueue_config_read(config_map: &ConfigMap) -> KueueConfigRead {
    match config_map.data.as_ref().and_then(|data| data.get(KUEUE_CONFIG_KEY)) {
        None => KueueConfigRead::MissingKey,
        Some(configuration) => {
            let parsed = parse_kueue_mappings(configuration)
                .and_then(|mappings| Ok((mappings, parse_kueue_admission_fair_sharing(configuration)?)));
            match parsed {
                Ok((mappings, fair_sharing)) => KueueConfigRead::Read { mappings, fair_sharing },
                Err(problem) => KueueConfigRead::Unparsable(problem),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::parse_policy;
    use crate::plan::dra::kueue_device_class_mappings;

    fn needed() -> Vec<DeviceClassMapping> {
        let text = include_str!("../../../../samples/dra/policy.yaml");
        kueue_device_class_mappings(&parse_policy(text, "samples/dra/policy.yaml").unwrap().spec)
    }

    fn config_map(configuration: Option<&str>) -> ConfigMap {
        let data = configuration.map(|text| [(KUEUE_CONFIG_KEY.to_owned(), text.to_owned())].into());
        ConfigMap { data, ..ConfigMap::default() }
    }

    #[test]
    fn a_configuration_mapping_every_dra_class_passes_in_one_line() {
        let fragment = kueue_configuration_fragment(&needed()).unwrap();
        let read = build_kueue_config_read(&config_map(Some(&fragment)));
        let check = build_kueue_mapping_check("kueue-system", needed(), &read).unwrap();
        assert!(check.passed());
        assert_eq!(
            check.to_text(),
            "Kueue deviceClassMappings: every DRA class is charged as nvidia.com/gpu (h100.tiergate.io, \
             l4.tiergate.io)\n"
        );
        assert_eq!(check.blocker_detail(), None);
    }

    #[test]
    fn a_configuration_without_the_mapping_fails_naming_each_class_and_prints_the_fragment() {
        let configuration = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n  \
                             deviceClassMappings:\n  - name: example.com/gpu\n    deviceClassNames: [h100.tiergate.io]\n";
        let read = build_kueue_config_read(&config_map(Some(configuration)));
        let check = build_kueue_mapping_check("kueue-system", needed(), &read).unwrap();
        assert!(!check.passed());
        let text = check.to_text();
        assert!(text.starts_with("Kueue deviceClassMappings (kueue-system/kueue-manager-config): FAIL\n"), "{text}");
        assert!(text.contains("  DeviceClass h100.tiergate.io is counted as example.com/gpu by Kueue"), "{text}");
        assert!(text.contains("  DeviceClass l4.tiergate.io is not in Kueue's deviceClassMappings"), "{text}");
        assert!(text.contains("    resources:\n      deviceClassMappings:\n        - name: nvidia.com/gpu"), "{text}");
        let detail = check.blocker_detail().unwrap();
        assert!(detail.starts_with("kueue-system/kueue-manager-config: DeviceClass h100"), "{detail}");
        assert!(detail.contains("; DeviceClass l4.tiergate.io is not in"), "{detail}");
    }

    #[test]
    fn an_unreadable_configuration_says_what_is_missing_and_never_passes() {
        let cases = [
            (KueueConfigRead::MissingConfigMap, "cannot read kueue/kueue-manager-config: the ConfigMap does not exist"),
            (build_kueue_config_read(&config_map(None)), "has no key controller_manager_config.yaml"),
            (KueueConfigRead::Forbidden("forbidden (403 Forbidden)".to_owned()), "get configmap/kueue-manager-config"),
            (KueueConfigRead::Failed("no answer within 10 s".to_owned()), "cannot read kueue/kueue-manager-config: no"),
            (build_kueue_config_read(&config_map(Some("resources: ["))), "is not a Kueue Configuration"),
        ];
        for (read, expected) in cases {
            let check = build_kueue_mapping_check("kueue", needed(), &read).unwrap();
            assert!(!check.passed(), "{read:?}");
            let detail = check.blocker_detail().unwrap();
            assert!(detail.contains(expected) && !detail.starts_with("kueue/kueue-manager-config: "), "{detail}");
            assert!(check.to_text().contains("    resources:\n"), "{read:?}: the fix shows the fragment");
        }
    }

    #[test]
    fn a_policy_without_dra_classes_says_nothing_about_kueue() {
        assert_eq!(build_kueue_mapping_check("kueue-system", Vec::new(), &KueueConfigRead::MissingConfigMap), None);
    }

    fn sharing_spec() -> crate::policy::TierPolicySpec {
        let text = include_str!("../../../../samples/tenant-sharing/policy.yaml");
        parse_policy(text, "samples/tenant-sharing/policy.yaml").unwrap().spec
    }

    #[test]
    fn kueues_fair_sharing_is_checked_only_for_a_policy_whose_tiers_share() {
        let read = KueueConfigRead::Read { mappings: Vec::new(), fair_sharing: None };
        let mut spec = sharing_spec();
        let check = build_kueue_fair_sharing_check("kueue-system", &spec, &read).unwrap();
        assert!(!check.passed());
        let text = check.to_text();
        assert!(text.starts_with("Kueue admissionFairSharing (kueue-system/kueue-manager-config): FAIL\n"), "{text}");
        assert!(text.contains("  Kueue's Configuration has no admissionFairSharing, so tiers bronze are first come"));
        assert!(text.contains("    admissionFairSharing:\n      usageHalfLifeTime: 24h\n"), "the fix: {text}");
        assert!(check.blocker_detail().unwrap().starts_with("kueue-system/kueue-manager-config: Kueue's"));
        for tier in &mut spec.tiers {
            tier.tenant_fair_sharing = false;
        }
        assert_eq!(build_kueue_fair_sharing_check("kueue-system", &spec, &read), None);
    }

    #[test]
    fn the_block_render_prints_passes_and_an_unreadable_configuration_never_does() {
        let spec = sharing_spec();
        let block = crate::plan::tenants::kueue_admission_fair_sharing(&spec).unwrap();
        let read =
            build_kueue_config_read(&config_map(Some(&format!("apiVersion: config.kueue.x-k8s.io/v1beta2\n{block}"))));
        let check = build_kueue_fair_sharing_check("kueue-system", &spec, &read).unwrap();
        assert!(check.passed(), "{:?}", check.problems);
        assert_eq!(check.blocker_detail(), None);
        let check = build_kueue_fair_sharing_check("kueue", &spec, &KueueConfigRead::MissingConfigMap).unwrap();
        assert!(check.problems[0].contains("which order every queue first come, first served"));
    }
}
