//! Subcommand entry points: each reads its inputs, calls the core and prints or serves; the only place that
//! turns errors into exit codes (the statuses of `crate::cli::EXIT_STATUSES`).

mod agent;
mod check;
mod crd;
mod explain;
mod render;
mod run;
mod status;
mod webhook;
mod why;

use std::path::Path;
use std::process::ExitCode;

pub use why::build_live_answer;

use crate::cli::{Command, Exit};
use crate::inputs::{InputError, load_policy};
use crate::policy::TierPolicy;
use crate::validation::{PolicyError, validate_policy};

/// Error type at the command edge: any error, printed with its causes by `main`.
pub type CmdError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A policy file that parses but is not a valid TierPolicy: [`run`] prints each problem on its own line,
/// `error: FILE: FIELD: problem; fix: ...`, as `main` prints any other error.
#[derive(Debug, thiserror::Error)]
#[error("{}", problem_lines(origin, problems).join("\nerror: "))]
pub struct InvalidPolicy {
    /// The file, or `embedded sample policy`.
    pub origin: String,
    /// Every problem, each with its field path and fix.
    pub problems: Vec<PolicyError>,
}

/// `FILE: FIELD: problem; fix: ...`, one per problem.
fn problem_lines(origin: &str, problems: &[PolicyError]) -> Vec<String> {
    problems.iter().map(|problem| format!("{origin}: {problem}")).collect()
}

/// The policy at `path` (the embedded sample when `None`), refused with every problem when it is not valid.
pub(crate) fn load_valid_policy(path: Option<&Path>) -> Result<TierPolicy, CmdError> {
    let policy = load_policy(path)?;
    validate_policy(&policy).map_err(|errors| InvalidPolicy {
        origin: path.map_or_else(|| "embedded sample policy".to_owned(), |path| path.display().to_string()),
        problems: errors.0,
    })?;
    Ok(policy)
}

/// Runs one subcommand to completion. A reader that closed stdout early (`tiergate render | head`) ends it
/// quietly and successfully, as for any Unix filter; a policy's problems are printed one per line.
pub fn run(command: Command) -> Result<ExitCode, CmdError> {
    match run_command(command) {
        Err(error) if is_broken_pipe(&*error) => Ok(Exit::Success.into()),
        Err(error) => match policy_problems(&*error) {
            Some(lines) => {
                for line in lines {
                    eprintln!("error: {line}");
                }
                Ok(Exit::Failure.into())
            }
            None => Err(error),
        },
        outcome => outcome,
    }
}

/// The lines of an invalid policy's or unknown fields' problems, `FILE: FIELD: problem; fix: ...`.
fn policy_problems(error: &(dyn std::error::Error + 'static)) -> Option<Vec<String>> {
    if let Some(invalid) = error.downcast_ref::<InvalidPolicy>() {
        return Some(problem_lines(&invalid.origin, &invalid.problems));
    }
    match error.downcast_ref::<InputError>() {
        Some(InputError::UnknownPolicyFields { origin, errors }) => Some(problem_lines(origin, errors)),
        _ => None,
    }
}

fn run_command(command: Command) -> Result<ExitCode, CmdError> {
    match command {
        Command::Render(args) => render::run(args),
        Command::Check(args) => check::run(args),
        Command::Crd => crd::run(),
        Command::Explain(args) => explain::run(args),
        Command::Run(args) => block_on(run::run(args)),
        Command::Webhook(args) => block_on(webhook::run(args)),
        Command::Agent(args) => block_on(agent::run(args)),
        Command::Status(args) => block_on(status::run(args)),
        Command::Why(args) => block_on(why::run(args)),
    }
}

/// Whether `error` is stdout's reader having gone away.
fn is_broken_pipe(error: &(dyn std::error::Error + 'static)) -> bool {
    error.downcast_ref::<std::io::Error>().is_some_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Writes `text` to stdout; a closed stdout is an error (`run` turns a broken pipe into a quiet success), never the
/// panic of `print!`.
pub(crate) fn write_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

fn block_on<F: std::future::Future<Output = Result<ExitCode, CmdError>>>(future: F) -> Result<ExitCode, CmdError> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(future)
}

/// Completes on SIGTERM (Unix) or ctrl-c; a signal that cannot be listened for is logged and never completes.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "failed to listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "failed to listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

/// A client from `--kubeconfig`, or the default chain (in-cluster, then `KUBECONFIG`).
pub(crate) async fn build_client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, CmdError> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = crate::live::read_kubeconfig(Some(path))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .map_err(|error| format!("failed to find a cluster (in-cluster config or KUBECONFIG): {error}"))?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// The TierPolicy `run`, `webhook`, `status` and `why` serve or read: `--policy-name` (`given`), else as
/// [`choose_policy_name`](crate::cli::choose_policy_name) chooses from the listed policies; and why, when chosen.
pub(crate) async fn resolve_policy_name(client: &kube::Client, given: Option<&str>) -> (String, Option<String>) {
    let existing = match given {
        Some(_) => None,
        None => Some(crate::live::fetch_policy_names(client).await),
    };
    crate::cli::choose_policy_name(given, existing.as_ref())
}

/// Logs which TierPolicy a server serves, and why.
fn log_policy_choice(name: &str, choice: Option<&str>) {
    match choice {
        Some(choice) => tracing::info!(policy = %name, "serving TierPolicy {name:?}: {choice}"),
        None => tracing::info!(policy = %name, "serving TierPolicy {name:?} (--policy-name)"),
    }
}
