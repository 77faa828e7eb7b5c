//! Subcommand entry points: each reads its inputs, calls the core and prints or serves; the only place that
//! turns errors into exit codes.

mod agent;
mod check;
mod crd;
mod explain;
mod render;
mod run;
mod status;
mod webhook;
mod why;

use std::process::ExitCode;

pub use why::build_live_answer;

use crate::cli::Command;

/// Error type at the command edge: any error, printed with its causes by `main`.
pub type CmdError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Runs one subcommand to completion. A reader that closed stdout early (`tiergate render | head`) ends it
/// quietly and successfully, as for any Unix filter.
pub fn run(command: Command) -> Result<ExitCode, CmdError> {
    match run_command(command) {
        Err(error) if is_broken_pipe(&*error) => Ok(ExitCode::SUCCESS),
        outcome => outcome,
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
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|error| format!("failed to read kubeconfig {}: {error}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .map_err(|error| format!("failed to find a cluster (in-cluster config or KUBECONFIG): {error}"))?,
    };
    Ok(kube::Client::try_from(config)?)
}
