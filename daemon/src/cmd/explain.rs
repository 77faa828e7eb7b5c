//! `tiergate explain`.

use std::process::ExitCode;

use super::CmdError;
use crate::cli::ExplainArgs;

/// Runs `tiergate explain`.
pub fn run(_args: ExplainArgs) -> Result<ExitCode, CmdError> {
    Err("tiergate explain is not built yet".into())
}
