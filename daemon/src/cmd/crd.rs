//! `tiergate crd`: prints tiergate's CustomResourceDefinitions as YAML: the TierPolicy, and the in-server gate's
//! TierGateParameters.

use std::process::ExitCode;

use kube::CustomResourceExt;

use super::CmdError;
use crate::cli::Exit;
use crate::plan::gate::params::TierGateParameters;
use crate::policy::TierPolicy;

/// Runs `tiergate crd`.
pub fn run() -> Result<ExitCode, CmdError> {
    super::write_stdout(&serde_saphyr::to_string(&TierPolicy::crd())?)?;
    super::write_stdout(&format!("---\n{}", serde_saphyr::to_string(&TierGateParameters::crd())?))?;
    Ok(Exit::Success.into())
}
