//! Where the throwaway control plane's binaries are: `TIERGATE_TEST_ASSETS`, then `KUBEBUILDER_ASSETS` (the envtest
//! convention), then `PATH`; a missing one is named with every place searched, and an optional one's absence is
//! kept as that reason instead of failing. Reads the file system only.

use std::fmt;
use std::path::{Path, PathBuf};

/// Directory searched first for the binaries.
pub const ASSETS_ENV: &str = "TIERGATE_TEST_ASSETS";
/// Directory searched second (controller-runtime's envtest convention).
pub const KUBEBUILDER_ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";

/// The binaries a control plane is made of, in start order.
pub const BINARIES: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kueue"];
/// The binaries a control plane starts when they are found and goes without otherwise (found the same way).
pub const OPTIONAL_BINARIES: [&str; 1] = ["kube-scheduler"];

/// Every binary, found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assets {
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `kube-controller-manager`.
    pub kube_controller_manager: PathBuf,
    /// `kueue` (the Kueue manager, `cmd/kueue`).
    pub kueue: PathBuf,
    /// `kube-scheduler`, or where it was looked for: without it the control plane binds no pod.
    pub kube_scheduler: Result<PathBuf, MissingBinary>,
}

/// A binary that is nowhere to be found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingBinary {
    /// Its name.
    pub binary: &'static str,
    /// Every directory looked in, in order.
    pub searched: Vec<PathBuf>,
}

impl fmt::Display for MissingBinary {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let searched: Vec<String> = self.searched.iter().map(|dir| dir.display().to_string()).collect();
        write!(
            formatter,
            "no `{}` binary in {ASSETS_ENV}, {KUBEBUILDER_ASSETS_ENV} or PATH (looked in: {}); see docs/contributing.md, \
             \"End-to-end tests\", for where the control-plane binaries come from",
            self.binary,
            if searched.is_empty() { "nothing: all three are unset".to_owned() } else { searched.join(", ") },
        )
    }
}

impl std::error::Error for MissingBinary {}

/// The directories searched, in order, from the values of the three variables.
pub fn search_path(assets: Option<&str>, kubebuilder_assets: Option<&str>, path: Option<&str>) -> Vec<PathBuf> {
    let single = |value: Option<&str>| value.filter(|dir| !dir.is_empty()).map(PathBuf::from);
    let mut dirs: Vec<PathBuf> = single(assets).into_iter().chain(single(kubebuilder_assets)).collect();
    dirs.extend(
        path.map(|path| std::env::split_paths(path).filter(|dir| !dir.as_os_str().is_empty())).into_iter().flatten(),
    );
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|dir| seen.insert(dir.clone()));
    dirs
}

/// The first executable file called `binary` in `dirs`.
pub fn find_binary(binary: &'static str, dirs: &[PathBuf]) -> Result<PathBuf, MissingBinary> {
    dirs.iter()
        .map(|dir| dir.join(binary))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| MissingBinary { binary, searched: dirs.to_vec() })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

impl Assets {
    /// Every binary from the directories of `dirs` (an optional one may be missing), or the first required one
    /// missing.
    pub fn find_in(dirs: &[PathBuf]) -> Result<Self, MissingBinary> {
        let [etcd, kube_apiserver, kube_controller_manager, kueue] = BINARIES;
        let [kube_scheduler] = OPTIONAL_BINARIES;
        Ok(Self {
            etcd: find_binary(etcd, dirs)?,
            kube_apiserver: find_binary(kube_apiserver, dirs)?,
            kube_controller_manager: find_binary(kube_controller_manager, dirs)?,
            kueue: find_binary(kueue, dirs)?,
            kube_scheduler: find_binary(kube_scheduler, dirs),
        })
    }

    /// Every binary from this process's environment (an optional one may be missing), or the first required one
    /// missing.
    pub fn find() -> Result<Self, MissingBinary> {
        Self::find_in(&environment_search_path())
    }
}

/// The directories searched, in order, from this process's environment.
pub fn environment_search_path() -> Vec<PathBuf> {
    let read = |name: &str| std::env::var(name).ok();
    search_path(read(ASSETS_ENV).as_deref(), read(KUBEBUILDER_ASSETS_ENV).as_deref(), read("PATH").as_deref())
}

/// `binary` (e.g. `cluster-autoscaler`, which a suite starts itself) found as the control plane's binaries are.
pub fn find_in_environment(binary: &'static str) -> Result<PathBuf, MissingBinary> {
    find_binary(binary, &environment_search_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_executable(dir: &Path, name: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_assets_directory_comes_before_kubebuilder_assets_and_path() {
        let dirs = search_path(Some("/assets"), Some("/kb"), Some("/usr/bin:/bin::/kb"));
        assert_eq!(dirs, ["/assets", "/kb", "/usr/bin", "/bin"].map(PathBuf::from));
    }

    #[test]
    fn a_binary_is_taken_from_the_first_directory_holding_it() {
        let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for binary in BINARIES {
            make_executable(second.path(), binary);
        }
        make_executable(first.path(), "etcd");
        let assets = Assets::find_in(&[first.path().to_owned(), second.path().to_owned()]).unwrap();
        assert_eq!(assets.etcd, first.path().join("etcd"));
        assert_eq!(assets.kueue, second.path().join("kueue"));
    }

    #[test]
    fn an_optional_binary_is_found_the_same_way_and_its_absence_says_where_it_looked() {
        let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for binary in BINARIES {
            make_executable(first.path(), binary);
        }
        let dirs = [first.path().to_owned(), second.path().to_owned()];
        let missing = Assets::find_in(&dirs).unwrap().kube_scheduler.unwrap_err();
        assert_eq!(missing.binary, "kube-scheduler");
        assert_eq!(missing.searched, dirs);
        let message = missing.to_string();
        assert!(message.contains("no `kube-scheduler` binary"), "{message}");
        assert!(message.contains(&second.path().display().to_string()), "{message}");
        make_executable(second.path(), "kube-scheduler");
        assert_eq!(Assets::find_in(&dirs).unwrap().kube_scheduler, Ok(second.path().join("kube-scheduler")));
    }

    #[test]
    fn a_missing_binary_is_named_with_every_directory_searched() {
        let dir = tempfile::tempdir().unwrap();
        make_executable(dir.path(), "etcd");
        std::fs::write(dir.path().join("kube-apiserver"), "not executable").unwrap();
        let missing = Assets::find_in(&[dir.path().to_owned()]).unwrap_err();
        assert_eq!(missing.binary, "kube-apiserver");
        let message = missing.to_string();
        assert!(message.contains("no `kube-apiserver` binary"), "{message}");
        assert!(message.contains(&dir.path().display().to_string()), "{message}");
    }
}
