//! `tiergate crd`: prints the TierPolicy CustomResourceDefinition as YAML.

use std::process::ExitCode;

use kube::CustomResourceExt;

use super::CmdError;
use crate::policy::TierPolicy;

/// Runs `tiergate crd`.
pub fn run() -> Result<ExitCode, CmdError> {
    print!("{}", serde_saphyr::to_string(&TierPolicy::crd())?);
    Ok(ExitCode::SUCCESS)
}
