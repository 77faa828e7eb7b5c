//! One process of the control plane: started with its output in a log file, stopped by its own PID, and its log's
//! last lines quoted when it fails. Does I/O.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use crate::HarnessError;

/// A child process this harness started, stopped when dropped.
#[derive(Debug)]
pub struct Process {
    /// What it is (`etcd`, `kube-apiserver`, ...), for messages.
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program` with `args` and `env`, its standard output and error appended to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &Path)],
        log: PathBuf,
    ) -> Result<Self, HarnessError> {
        let output = File::create(&log).map_err(|error| format!("failed to create {}: {error}", log.display()))?;
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(key, value)| (*key, *value)))
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()
            .map_err(|error| format!("failed to start {name} ({}): {error}", program.display()))?;
        Ok(Self { name: name.to_owned(), child, log })
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its PID.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The last `count` lines of its log.
    pub fn log_tail(&self, count: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(count)..].join("\n")
    }

    /// An error saying it failed to become ready, with how it exited (if it did) and its log's last lines.
    pub fn failure(&mut self, what: &str) -> HarnessError {
        let status = self.exited().map_or_else(|| "still running".to_owned(), |status| format!("exited: {status}"));
        format!(
            "{} failed to {what} ({status}); last lines of {}:\n{}",
            self.name,
            self.log.display(),
            self.log_tail(25)
        )
        .into()
    }

    /// Kills it (SIGKILL: a throwaway control plane keeps nothing) and reaps it.
    pub fn stop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}
