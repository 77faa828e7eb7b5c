//! `tiergate check`: reads a policy and nodepools, prints which pools can host each tier, and exits non-zero
//! unless every tier matches exactly one pool per GPU class (and placement rule).

use std::process::ExitCode;

use super::CmdError;
use crate::check::build_check_report;
use crate::cli::CheckArgs;
use crate::inputs::load_policy;
use crate::validation::validate_policy;

/// Runs `tiergate check`.
pub fn run(args: CheckArgs) -> Result<ExitCode, CmdError> {
    let policy = load_policy(Some(&args.policy))?;
    if let Err(errors) = validate_policy(&policy) {
        eprintln!("{errors}");
        return Ok(ExitCode::FAILURE);
    }
    let pools = crate::live::pools::load_check_pools(&args)?;
    let report = build_check_report(&policy.spec, &pools);
    print!("{}", report.to_text());
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
