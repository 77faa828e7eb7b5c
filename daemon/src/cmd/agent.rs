//! `tiergate agent`.

use std::process::ExitCode;

use super::CmdError;
use crate::cli::AgentArgs;

/// Runs `tiergate agent` until SIGTERM.
pub async fn run(_args: AgentArgs) -> Result<ExitCode, CmdError> {
    Err("tiergate agent is not built yet".into())
}
