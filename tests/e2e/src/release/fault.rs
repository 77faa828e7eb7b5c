//! Faults injected into a replica on the real node. The node is this machine, so a container's process is a local
//! process: found by its pod's UID in `/proc/<pid>/cgroup` (as the kubelet's cgroupfs or systemd driver writes it)
//! and its command, then sent SIGKILL, or SIGSTOP and later SIGCONT. Does I/O (`/proc`, signals).

use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::HarnessError;

/// The process running `command` (its `comm`, or its executable's file name) in a cgroup of the pod with UID
/// `pod_uid`: exactly one, else an error saying what was found there.
pub fn find_pod_process(pod_uid: &str, command: &str) -> Result<Pid, HarnessError> {
    let mut in_pod = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        let dir = entry.path();
        // A process that exits meanwhile is simply not a candidate.
        let Ok(cgroup) = std::fs::read_to_string(dir.join("cgroup")) else { continue };
        if !cgroup_names_pod(&cgroup, pod_uid) || is_zombie(&dir) {
            continue;
        }
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim().to_owned();
        let exe = std::fs::read_link(dir.join("exe")).ok();
        let runs = comm == command || exe.as_deref().and_then(Path::file_name).is_some_and(|name| name == command);
        in_pod.push((pid, comm, runs));
    }
    let found: Vec<i32> = in_pod.iter().filter(|(_, _, runs)| *runs).map(|(pid, _, _)| *pid).collect();
    match found.as_slice() {
        [pid] => Ok(Pid::from_raw(*pid)),
        [] => Err(format!(
            "failed to find a `{command}` process of pod {pod_uid} on this machine: the processes in its cgroups are \
             {:?} (is the real node this machine, and is its container running?)",
            in_pod.iter().map(|(pid, comm, _)| format!("{pid} {comm}")).collect::<Vec<_>>()
        )
        .into()),
        many => Err(format!("failed to choose among the `{command}` processes {many:?} of pod {pod_uid}").into()),
    }
}

/// Whether a `/proc/<pid>/cgroup` text places the process in the pod with UID `uid`: a path naming `pod<uid>`
/// (cgroupfs: `/kubepods/burstable/pod<uid>/<container>`) or `pod<uid with '_' for '-'>` (systemd:
/// `kubepods-burstable-pod<uid_>.slice`).
pub fn cgroup_names_pod(cgroup: &str, uid: &str) -> bool {
    if uid.is_empty() {
        return false;
    }
    let variants = [format!("pod{uid}"), format!("pod{}", uid.replace('-', "_"))];
    cgroup.lines().filter_map(|line| line.splitn(3, ':').nth(2)).any(|path| {
        path.split('/').any(|part| {
            variants.iter().any(|variant| {
                part == variant
                    || part.strip_suffix(".slice").is_some_and(|slice| slice.ends_with(&format!("-{variant}")))
            })
        })
    })
}

/// Whether the process of `/proc/<pid>` has exited and waits to be reaped.
fn is_zombie(dir: &Path) -> bool {
    let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
    // `pid (comm) state ...`: the comm may hold spaces and parentheses, the state follows the last ')'.
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
}

/// Sends `signal` to `pid`.
pub fn send_signal(pid: Pid, signal: Signal) -> Result<(), HarnessError> {
    kill(pid, signal).map_err(|error| format!("failed to send {signal} to process {pid}: {error}").into())
}

/// A process stopped with SIGSTOP; SIGCONT resumes it on [`Stopped::resume`] or, whatever happens meanwhile, on
/// drop.
#[derive(Debug)]
pub struct Stopped {
    pid: Option<Pid>,
}

impl Stopped {
    /// Sends `pid` SIGSTOP.
    pub fn stop(pid: Pid) -> Result<Self, HarnessError> {
        send_signal(pid, Signal::SIGSTOP)?;
        Ok(Self { pid: Some(pid) })
    }

    /// Sends SIGCONT. A process that is gone already (the kubelet restarted its container) is fine: `false`.
    pub fn resume(mut self) -> Result<bool, HarnessError> {
        let Some(pid) = self.pid.take() else { return Ok(false) };
        match kill(pid, Signal::SIGCONT) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::ESRCH) => Ok(false),
            Err(error) => Err(format!("failed to send SIGCONT to process {pid}: {error}").into()),
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take()
            && let Err(error) = kill(pid, Signal::SIGCONT)
            && error != nix::errno::Errno::ESRCH
        {
            println!("cleanup: failed to send SIGCONT to process {pid}: {error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b6f3a2e-1c4d-4e5f-8a9b-0c1d2e3f4a5b";

    #[test]
    fn a_cgroupfs_v1_path_names_its_pod() {
        let cgroup = format!("4:memory:/kubepods/burstable/pod{UID}/3f2a\n1:cpu:/kubepods/burstable/pod{UID}/3f2a\n");
        assert!(cgroup_names_pod(&cgroup, UID));
    }

    #[test]
    fn a_cgroup_v2_path_names_its_pod() {
        assert!(cgroup_names_pod(&format!("0::/kubepods/besteffort/pod{UID}/abc\n"), UID));
        assert!(cgroup_names_pod(&format!("0::/kubepods/pod{UID}/abc\n"), UID));
    }

    #[test]
    fn a_systemd_slice_names_its_pod_with_underscores() {
        let slice = UID.replace('-', "_");
        let cgroup = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice}.slice/cri-containerd-ab.scope\n"
        );
        assert!(cgroup_names_pod(&cgroup, UID));
    }

    #[test]
    fn another_pod_or_no_pod_is_not_named() {
        let other = "0b6f3a2e-1c4d-4e5f-8a9b-0c1d2e3f4a5c";
        assert!(!cgroup_names_pod(&format!("0::/kubepods/burstable/pod{other}/abc\n"), UID));
        assert!(!cgroup_names_pod(&format!("0::/kubepods/burstable/pod{UID}x/abc\n"), UID));
        assert!(!cgroup_names_pod("0::/\n4:memory:/user.slice\n", UID));
        assert!(!cgroup_names_pod("0::/kubepods/burstable/pod/abc\n", ""));
    }

    #[test]
    fn this_process_is_not_in_a_pod() {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        assert!(!cgroup_names_pod(&own, UID));
        assert!(find_pod_process(UID, "tiergate").is_err());
    }
}
