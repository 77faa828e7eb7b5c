//! The `tiergate` binary: parse the command line, start logging, run the subcommand; exit non-zero on failure.

use clap::Parser;
use tiergate::cli::Cli;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tiergate::telemetry::init(cli.log_format);
    match tiergate::cmd::run(cli.command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            let mut source = std::error::Error::source(&*error);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            std::process::ExitCode::FAILURE
        }
    }
}
