//! `control-plane up --env-file FILE`: starts the e2e suite's throwaway control plane, writes the environment the
//! suites read (`KUBECONFIG`, the worker's kubeconfig, the webhook host) to FILE, and stops it, removing its
//! directory, on SIGTERM, SIGINT or when its parent exits. Without the binaries it writes `TIERGATE_E2E_SKIP`
//! with the reason instead and exits 0; without the optional kube-scheduler it starts the rest and writes
//! `TIERGATE_E2E_SCHEDULER_SKIP` with the reason; with a real node it writes `TIERGATE_E2E_NODE` (its name),
//! without one `TIERGATE_E2E_NODE_SKIP` with the reason. Does I/O.

use std::path::PathBuf;
use std::time::Duration;

use tiergate_e2e::control_plane::ControlPlane;
use tiergate_e2e::control_plane::assets::Assets;
use tiergate_e2e::control_plane::node::{CONTAINERD_SOCKET_ENV, NODE_ENV, NODE_SKIP_ENV};
use tiergate_e2e::{HarnessError, SCHEDULER_SKIP_ENV, SKIP_ENV, WORKER_KUBECONFIG_ENV, WORKER_SKIP_ENV};

fn usage() -> HarnessError {
    "usage: control-plane up --env-file FILE".into()
}

fn parse_env_file() -> Result<PathBuf, HarnessError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [command, flag, file] if command == "up" && flag == "--env-file" => Ok(PathBuf::from(file)),
        _ => Err(usage()),
    }
}

/// `KEY='value'` for a POSIX shell's `.` (a quote inside the value closes, escapes and reopens).
fn shell_assignment(key: &str, value: &str) -> String {
    format!("{key}='{}'", value.replace('\'', "'\\''"))
}

/// Writes `lines` to `file` whole (through a sibling and a rename), so a reader never sees half of it.
fn write_env(file: &PathBuf, lines: &[String]) -> Result<(), HarnessError> {
    let partial = file.with_extension("partial");
    std::fs::write(&partial, lines.join("\n") + "\n")?;
    std::fs::rename(&partial, file)?;
    Ok(())
}

/// Resolves when SIGTERM or SIGINT arrives or the parent process is gone (this process was re-parented).
async fn stopped() {
    let parent = std::os::unix::process::parent_id();
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(error) => {
            println!("control plane: failed to watch SIGTERM ({error}); stopping");
            return;
        }
    };
    let orphaned = async {
        while std::os::unix::process::parent_id() == parent {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        () = orphaned => println!("control plane: its parent exited"),
    }
}

async fn up(env_file: PathBuf) -> Result<(), HarnessError> {
    let assets = match Assets::find() {
        Ok(assets) => assets,
        Err(missing) => {
            println!("control plane: not started: {missing}");
            return write_env(&env_file, &[shell_assignment(SKIP_ENV, &format!("no control plane: {missing}"))]);
        }
    };
    println!(
        "control plane: starting from {}",
        assets.kube_apiserver.parent().map_or_else(String::new, |dir| dir.display().to_string())
    );
    let stop = stopped();
    tokio::pin!(stop);
    // A stop during start-up drops the half-started plane, which stops what it started and removes its directory.
    let plane = tokio::select! {
        started = ControlPlane::start(&assets) => started?,
        () = &mut stop => {
            println!("control plane: stopped during start-up");
            return Ok(());
        }
    };
    for version in &plane.versions {
        println!("control plane: {version}");
    }
    println!(
        "control plane: ready in {:.1} s (processes {:?}, directory {})",
        plane.started_in.as_secs_f64(),
        plane.pids(),
        plane.dir().display()
    );
    for mapping in &plane.device_class_mappings {
        println!("control plane: Kueue counts DeviceClasses {:?} as {}", mapping.device_class_names, mapping.name);
    }
    let mut env = vec![
        shell_assignment("KUBECONFIG", &plane.kubeconfig.display().to_string()),
        shell_assignment("TIERGATE_E2E_WEBHOOK_HOST", "127.0.0.1"),
        shell_assignment("TIERGATE_E2E_WEBHOOK_PORT", &plane.webhook_port.to_string()),
    ];
    match &plane.worker {
        Ok(kubeconfig) => env.push(shell_assignment(WORKER_KUBECONFIG_ENV, &kubeconfig.display().to_string())),
        Err(reason) => {
            println!("control plane: {reason}");
            env.push(shell_assignment(WORKER_SKIP_ENV, reason));
        }
    }
    match &plane.scheduler {
        Ok(port) => println!("control plane: kube-scheduler ready on https://127.0.0.1:{port}"),
        Err(reason) => {
            println!("control plane: {reason}");
            env.push(shell_assignment(SCHEDULER_SKIP_ENV, reason));
        }
    }
    match &plane.node {
        Ok(name) => {
            let took = plane.node_started_in().map_or(0.0, |took| took.as_secs_f64());
            println!("control plane: real node {name} Ready in {took:.1} s (pods on it run)");
            env.push(shell_assignment(NODE_ENV, name));
            if let Some(socket) = plane.containerd_socket() {
                env.push(shell_assignment(CONTAINERD_SOCKET_ENV, &socket.display().to_string()));
            }
        }
        Err(reason) => {
            println!("control plane: {reason}");
            env.push(shell_assignment(NODE_SKIP_ENV, reason));
        }
    }
    write_env(&env_file, &env)?;
    stop.await;
    let dir = plane.dir().to_owned();
    let count = plane.pids().len();
    plane.stop();
    println!("control plane: stopped {count} processes and removed {}", dir.display());
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let result = match parse_env_file() {
        Ok(env_file) => up(env_file).await,
        Err(error) => Err(error),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("control plane: failed: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
