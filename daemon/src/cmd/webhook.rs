//! `tiergate webhook`.

use std::process::ExitCode;

use super::CmdError;
use crate::cli::WebhookArgs;

/// Runs `tiergate webhook` until SIGTERM.
pub async fn run(_args: WebhookArgs) -> Result<ExitCode, CmdError> {
    Err("tiergate webhook is not built yet".into())
}
