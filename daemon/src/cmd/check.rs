//! `tiergate check`.

use std::process::ExitCode;

use super::CmdError;
use crate::cli::CheckArgs;

/// Runs `tiergate check`.
pub fn run(_args: CheckArgs) -> Result<ExitCode, CmdError> {
    Err("tiergate check is not built yet".into())
}
