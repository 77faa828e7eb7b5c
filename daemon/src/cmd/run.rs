//! `tiergate run`.

use std::process::ExitCode;

use super::CmdError;
use crate::cli::RunArgs;

/// Runs `tiergate run` until SIGTERM.
pub async fn run(_args: RunArgs) -> Result<ExitCode, CmdError> {
    Err("tiergate run is not built yet".into())
}
