//! The `tiergate` binary: parse the command line, start logging, run the subcommand; exit non-zero on failure.

/// jemalloc, purging freed pages in a background thread after a second (the options are built in by
/// `.cargo/config.toml`; `_RJEM_MALLOC_CONF` overrides them at run time). glibc kept the pages the initial lists'
/// decoding touched for the life of the process.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // Installed or linked as `kubectl-tiergate`, the binary is the kubectl plugin (`kubectl tiergate ...`).
    let cli = match tiergate::cli::try_parse_cli(std::env::args_os()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
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
