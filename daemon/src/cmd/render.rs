//! `tiergate render`.

use std::process::ExitCode;

use super::CmdError;
use crate::cli::RenderArgs;

/// Runs `tiergate render`.
pub fn run(_args: RenderArgs) -> Result<ExitCode, CmdError> {
    Err("tiergate render is not built yet".into())
}
