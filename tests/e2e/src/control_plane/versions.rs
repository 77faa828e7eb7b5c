//! Which Kubernetes and Kueue versions the throwaway control plane runs: the Kubernetes minor its components
//! emulate (`TIERGATE_E2E_KUBERNETES_VERSION`, served by one 1.36 build through `--emulated-version`), and the Kueue
//! manager and CRDs (`TIERGATE_E2E_KUEUE`, `TIERGATE_E2E_KUEUE_CRDS`) of another release than the one found with the
//! other binaries. Pure, but for reading the environment in [`PlaneVersions::from_environment`].

use std::path::PathBuf;

use crate::HarnessError;

/// The Kubernetes minor the control plane emulates, e.g. `1.33` (unset: the binaries' own).
pub const KUBERNETES_VERSION_ENV: &str = "TIERGATE_E2E_KUBERNETES_VERSION";
/// A Kueue manager binary to run instead of the `kueue` found with the other binaries.
pub const KUEUE_BINARY_ENV: &str = "TIERGATE_E2E_KUEUE";
/// A directory of Kueue CRDs to install instead of the shared copy of Kueue v0.19.2's.
pub const KUEUE_CRDS_ENV: &str = "TIERGATE_E2E_KUEUE_CRDS";
/// Feature gates the Kueue manager gets besides the plane's own (`Name=true,...`): an older release may need one
/// that v0.19 has on by default (Kueue v0.17 reads DRA device-class mappings only with `DynamicResourceAllocation`).
pub const KUEUE_FEATURE_GATES_ENV: &str = "TIERGATE_E2E_KUEUE_FEATURE_GATES";

/// The Kueue manager's `--feature-gates` value: the plane's own gates, then those of [`KUEUE_FEATURE_GATES_ENV`].
pub fn kueue_feature_gates(own: &str, extra: Option<&str>) -> String {
    match extra.map(str::trim).filter(|extra| !extra.is_empty()) {
        Some(extra) => format!("{own},{extra}"),
        None => own.to_owned(),
    }
}

/// The Kubernetes minors tiergate supports, which kube-apiserver 1.36's `--emulated-version` serves.
pub const SUPPORTED_MINORS: std::ops::RangeInclusive<u32> = 33..=36;

/// What the plane runs besides the binaries found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlaneVersions {
    /// The Kubernetes minor (of major 1) the API server, controller-manager and scheduler emulate.
    pub emulated_minor: Option<u32>,
    /// The Kueue manager to run instead of the one found.
    pub kueue_binary: Option<PathBuf>,
    /// The Kueue CRDs to install instead of the shared ones.
    pub kueue_crds: Option<PathBuf>,
}

impl PlaneVersions {
    /// From the three variables' values (unset or empty: none).
    pub fn parse(
        kubernetes: Option<&str>,
        kueue_binary: Option<&str>,
        kueue_crds: Option<&str>,
    ) -> Result<Self, HarnessError> {
        fn set(value: Option<&str>) -> Option<&str> {
            value.map(str::trim).filter(|value| !value.is_empty())
        }
        let emulated_minor = set(kubernetes).map(parse_minor).transpose()?;
        Ok(Self {
            emulated_minor,
            kueue_binary: set(kueue_binary).map(PathBuf::from),
            kueue_crds: set(kueue_crds).map(PathBuf::from),
        })
    }

    /// From this process's environment.
    pub fn from_environment() -> Result<Self, HarnessError> {
        let read = |name: &str| std::env::var(name).ok();
        Self::parse(
            read(KUBERNETES_VERSION_ENV).as_deref(),
            read(KUEUE_BINARY_ENV).as_deref(),
            read(KUEUE_CRDS_ENV).as_deref(),
        )
    }

    /// The flag the Kubernetes components get, if any.
    pub fn emulated_version_arg(&self) -> Option<String> {
        self.emulated_minor.map(|minor| format!("--emulated-version=1.{minor}"))
    }
}

/// `1.33` (or `v1.33`, `1.33.4`) -> 33, within [`SUPPORTED_MINORS`].
fn parse_minor(text: &str) -> Result<u32, HarnessError> {
    let invalid = || {
        format!(
            "{KUBERNETES_VERSION_ENV}={text} is not a Kubernetes version tiergate supports: give 1.{} to 1.{} (the \
             control plane's 1.36 binaries emulate it with --emulated-version)",
            SUPPORTED_MINORS.start(),
            SUPPORTED_MINORS.end()
        )
    };
    let mut parts = text.trim_start_matches('v').split('.');
    let (major, minor) = (parts.next(), parts.next());
    let minor: u32 = match (major, minor) {
        (Some("1"), Some(minor)) => minor.parse().map_err(|_| invalid())?,
        _ => return Err(invalid().into()),
    };
    if SUPPORTED_MINORS.contains(&minor) { Ok(minor) } else { Err(invalid().into()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_supported_minor_becomes_the_emulated_version_flag() {
        for (text, minor) in [("1.33", 33), ("v1.34", 34), ("1.35.2", 35), (" 1.36 ", 36)] {
            let versions = PlaneVersions::parse(Some(text), None, None).unwrap();
            assert_eq!(versions.emulated_minor, Some(minor), "{text}");
            assert_eq!(versions.emulated_version_arg(), Some(format!("--emulated-version=1.{minor}")));
        }
        assert_eq!(PlaneVersions::parse(None, Some(""), None).unwrap(), PlaneVersions::default());
    }

    #[test]
    fn versions_outside_the_supported_range_are_refused_naming_it() {
        for text in ["1.32", "1.37", "2.0", "latest", "1"] {
            let error = PlaneVersions::parse(Some(text), None, None).unwrap_err().to_string();
            assert!(error.contains("give 1.33 to 1.36"), "{text}: {error}");
        }
    }

    #[test]
    fn extra_kueue_gates_follow_the_planes_own() {
        assert_eq!(kueue_feature_gates("A=false", None), "A=false");
        assert_eq!(kueue_feature_gates("A=false", Some(" ")), "A=false");
        assert_eq!(kueue_feature_gates("A=false", Some("B=true")), "A=false,B=true");
    }

    #[test]
    fn another_kueue_release_is_named_by_its_binary_and_crds() {
        let versions = PlaneVersions::parse(None, Some("/opt/kueue-0.17/kueue"), Some("/opt/kueue-0.17/crds")).unwrap();
        assert_eq!(versions.kueue_binary, Some(PathBuf::from("/opt/kueue-0.17/kueue")));
        assert_eq!(versions.kueue_crds, Some(PathBuf::from("/opt/kueue-0.17/crds")));
    }
}
