//! An optional real node for the throwaway control plane: containerd with its own sockets and directories, a CNI
//! bridge of its own, busybox images built here as OCI archives (no registry), a kubelet registering as `localhost`
//! and kube-proxy in iptables mode, so a suite's pods really run. Started only when every piece is found (and this
//! process is root); otherwise the reason is kept. Every exit path stops what it started and undoes what it set up
//! (processes, containers, mounts, the bridge, kube-proxy's rules, the kubelet's cgroups). Does I/O.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use super::assets::find_in_environment;
pub use super::images::{BUSYBOX_IMAGE, PAUSE_IMAGE};
use super::images::{build_image_archive, import_image_archive, node_images};
use super::process::Process;
use super::{START_TIMEOUT, arg, free_port, write};
use crate::{HarnessError, wait_for};

/// Set in the env file when the plane runs a real node: its name.
pub const NODE_ENV: &str = "TIERGATE_E2E_NODE";
/// Set in the env file when the plane runs no real node: why.
pub const NODE_SKIP_ENV: &str = "TIERGATE_E2E_NODE_SKIP";
/// Set in the env file when the plane runs a real node: its containerd's socket, where a suite imports the images
/// it builds (tiergate's own, for the Helm install).
pub const CONTAINERD_SOCKET_ENV: &str = "TIERGATE_E2E_CONTAINERD_SOCKET";
/// When set (non-empty), the plane starts no node even when every piece is found.
pub const NO_NODE_ENV: &str = "TIERGATE_E2E_NO_NODE";
/// The node's name: the kubelet registers as `localhost`, which the API server resolves to reach it (a loopback
/// `--node-ip` is refused, so the API server prefers the `Hostname` address).
pub const NODE_NAME: &str = "localhost";
/// The label (value `true`) the real node carries, for a pod's node selector.
pub const REAL_NODE_LABEL: &str = "tiergate-e2e/real-node";
/// The taint (`NoSchedule`, value `true`) that keeps every other suite's pods off the real node: a pod meant to run
/// there tolerates it.
pub const REAL_NODE_TAINT: &str = "tiergate-e2e/real-node";
/// The fake GPUs the node advertises (an extended resource in its status, no device plugin).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// How many [`GPU_RESOURCE`] the node advertises.
pub const ADVERTISED_GPUS: &str = "4";
/// The bridge the pods' network hangs off (created here, deleted at stop).
pub const BRIDGE: &str = "tg-e2e0";
/// The bridge's address: the pods' gateway, and the address the API server advertises to them.
pub const BRIDGE_GATEWAY: &str = "10.244.0.1";
/// The pods' subnet on the node.
pub const POD_SUBNET: &str = "10.244.0.0/24";
/// The API server's `--service-cluster-ip-range`: the only range pods have a route to beyond their own subnet.
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The cluster's pod range, as kube-proxy sees it.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The `kubernetes` Service's ClusterIP: the first address of the API server's `--service-cluster-ip-range`.
pub const KUBERNETES_SERVICE_IP: &str = "10.0.0.1";
/// The CNI network's name (its cached results under `/var/lib/cni` start with it).
const NETWORK_NAME: &str = "tg-e2e";
/// Where the Debian package and the upstream release put the CNI plugins.
const CNI_BIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];
const CNI_PLUGINS: [&str; 3] = ["bridge", "host-local", "loopback"];
/// The chains the kubelet itself writes (`kube-proxy --cleanup` leaves them): `(table, chain)`.
const KUBELET_CHAINS: [(&str, &str); 5] = [
    ("filter", "KUBE-FIREWALL"),
    ("filter", "KUBE-KUBELET-CANARY"),
    ("nat", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-IPTABLES-HINT"),
];
/// How long one cleanup command may take before it is abandoned.
const CLEANUP_COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// Every binary the node needs, found.
#[derive(Clone, Debug)]
pub struct NodeBinaries {
    kubelet: PathBuf,
    kube_proxy: PathBuf,
    containerd: PathBuf,
    ctr: PathBuf,
    runc: PathBuf,
    ip: PathBuf,
    /// `iptables`, and `ip6tables` when found (the kubelet writes chains with both).
    iptables: Vec<PathBuf>,
    busybox: PathBuf,
    cni_bin_dir: PathBuf,
}

impl NodeBinaries {
    /// The binaries whose `--version` the plane reports: `(name, path)`.
    pub fn reported(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("kubelet", self.kubelet.clone()),
            ("kube-proxy", self.kube_proxy.clone()),
            ("containerd", self.containerd.clone()),
            ("runc", self.runc.clone()),
        ]
    }
}

/// Every piece the node needs, or why it cannot start (the first piece missing).
pub fn find_node_binaries() -> Result<NodeBinaries, String> {
    let prefix = "the throwaway control plane runs no real node, so no pod runs";
    if std::env::var_os(NO_NODE_ENV).is_some_and(|value| !value.is_empty()) {
        return Err(format!("{prefix}: {NO_NODE_ENV} is set"));
    }
    let find = |binary: &'static str| find_in_environment(binary).map_err(|missing| format!("{prefix}: {missing}"));
    let binaries = NodeBinaries {
        kubelet: find("kubelet")?,
        kube_proxy: find("kube-proxy")?,
        containerd: find("containerd")?,
        ctr: find("ctr")?,
        runc: find("runc")?,
        ip: find("ip")?,
        iptables: std::iter::once(find("iptables")?).chain(find_in_environment("ip6tables").ok()).collect(),
        busybox: find("busybox")?,
        cni_bin_dir: CNI_BIN_DIRS
            .iter()
            .map(PathBuf::from)
            .find(|dir| CNI_PLUGINS.iter().all(|plugin| dir.join(plugin).is_file()))
            .ok_or_else(|| {
                format!("{prefix}: no directory of {CNI_BIN_DIRS:?} holds the CNI plugins {CNI_PLUGINS:?}")
            })?,
    };
    find("containerd-shim-runc-v2")?;
    if !is_statically_linked(&binaries.busybox) {
        return Err(format!(
            "{prefix}: {} is not statically linked (the images need busybox-static's)",
            binaries.busybox.display()
        ));
    }
    if !runs_as_root() {
        return Err(format!("{prefix}: containerd, the kubelet and kube-proxy need root, and this process is not"));
    }
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        return Err(format!("{prefix}: the bridge {BRIDGE} exists already (another plane's node holds it)"));
    }
    Ok(binaries)
}

/// Whether this process runs as root (it owns `/proc/self`).
fn runs_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|metadata| metadata.uid() == 0)
}

/// Whether the ELF file at `path` has no program interpreter (no `PT_INTERP` header), so it runs in an empty image.
fn is_statically_linked(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else { return false };
    let read_u16 = |at: usize| bytes.get(at..at + 2).map(|slice| u16::from_le_bytes([slice[0], slice[1]]) as usize);
    let read_u64 = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|slice| slice.try_into().ok())
            .map(u64::from_le_bytes)
            .map(|value| value as usize)
    };
    // 64-bit little-endian ELF only (the only kind this harness runs on).
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(offset), Some(entry_size), Some(count)) = (read_u64(0x20), read_u16(0x36), read_u16(0x38)) else {
        return false;
    };
    const PT_INTERP: u32 = 3;
    (0..count).all(|index| {
        let at = offset + index * entry_size;
        bytes
            .get(at..at + 4)
            .is_some_and(|slice| u32::from_le_bytes([slice[0], slice[1], slice[2], slice[3]]) != PT_INTERP)
    })
}

/// A running node. Dropping it stops everything it started and undoes what it set up.
#[derive(Debug)]
pub struct RealNode {
    binaries: NodeBinaries,
    dir: PathBuf,
    socket: PathBuf,
    kubelet_root: PathBuf,
    processes: Vec<Process>,
    bridge_created: bool,
    /// The cgroup directories (`/sys/fs/cgroup/<controller>/kubepods`) that did not exist before the kubelet ran.
    kubelet_cgroups: Vec<PathBuf>,
    /// The kubelet's chains that did not exist before it ran: `(iptables binary, table, chain)`.
    kubelet_chains: Vec<(PathBuf, &'static str, &'static str)>,
    /// How long start-up took.
    pub started_in: Duration,
}

impl RealNode {
    /// Starts containerd, imports the images, starts the kubelet and kube-proxy (under `plane_dir/node`) against
    /// the API server of `kubeconfig_text` (an admin's; the kubelet trusts client certificates of `ca_file`), waits until the node is Ready, then lifts its
    /// not-ready taint, taints and labels it as the real node and advertises [`ADVERTISED_GPUS`] fake GPUs.
    pub async fn start(
        binaries: NodeBinaries,
        plane_dir: &Path,
        kubeconfig_text: &str,
        ca_file: &Path,
        client: &Client,
    ) -> Result<Self, HarnessError> {
        let began = Instant::now();
        let dir = plane_dir.join("node");
        std::fs::create_dir_all(&dir)?;
        let kubelet_cgroups = std::fs::read_dir("/sys/fs/cgroup")
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok().map(|entry| entry.path().join("kubepods")))
                    .filter(|path| path.parent().is_some_and(Path::is_dir) && !path.exists())
                    .collect()
            })
            .unwrap_or_default();
        let kubelet_chains = binaries
            .iptables
            .iter()
            .flat_map(|iptables| KUBELET_CHAINS.iter().map(move |(table, chain)| (iptables.clone(), *table, *chain)))
            .filter(|(iptables, table, chain)| run(iptables, &["-t", table, "-S", chain]).is_err())
            .collect();
        let mut node = Self {
            socket: dir.join("containerd.sock"),
            kubelet_root: dir.join("kubelet"),
            binaries,
            dir,
            processes: Vec::new(),
            bridge_created: false,
            kubelet_cgroups,
            kubelet_chains,
            started_in: Duration::ZERO,
        };
        node.create_bridge()?;
        node.start_containerd().await?;
        node.import_images().await?;
        let kubeconfig = write(&node.dir, "node.kubeconfig", kubeconfig_text)?;
        node.start_kubelet(&kubeconfig, ca_file)?;
        let kube_proxy_health = node.start_kube_proxy(&kubeconfig)?;
        node.wait_until_ready(client).await?;
        node.wait_for_kube_proxy(kube_proxy_health).await?;
        prepare_node_object(client).await?;
        node.started_in = began.elapsed();
        Ok(node)
    }

    /// The PIDs of the processes it started.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(Process::id).collect()
    }

    fn spawn(&mut self, name: &str, program: &Path, args: &[String]) -> Result<(), HarnessError> {
        let log = self.dir.join(format!("{name}.log"));
        self.processes.push(Process::spawn(name, program, args, &[], log)?);
        Ok(())
    }

    fn failure_of(&mut self, name: &str, what: &str) -> HarnessError {
        let process = self.processes.iter_mut().find(|process| process.name == name);
        process.map_or_else(|| format!("no {name} was started").into(), |process| process.failure(what))
    }

    /// The bridge with the gateway address, so the API server's advertised address exists before the first pod.
    fn create_bridge(&mut self) -> Result<(), HarnessError> {
        run(&self.binaries.ip, &["link", "add", BRIDGE, "type", "bridge"])?;
        self.bridge_created = true;
        run(&self.binaries.ip, &["addr", "add", &format!("{BRIDGE_GATEWAY}/24"), "dev", BRIDGE])?;
        run(&self.binaries.ip, &["link", "set", BRIDGE, "up"])?;
        Ok(())
    }

    /// containerd with its CRI plugin on the node's own socket and directories and the bridge network, once it
    /// answers `ctr version`.
    async fn start_containerd(&mut self) -> Result<(), HarnessError> {
        let cni_conf_dir = self.dir.join("cni-conf");
        std::fs::create_dir_all(&cni_conf_dir)?;
        let cni = build_cni_conflist(&self.dir.join("cni-ipam"));
        write(&cni_conf_dir, "10-tg-e2e.conflist", &cni)?;
        let config = build_containerd_config(&self.dir, &self.socket, &cni_conf_dir, &self.binaries);
        let config_file = write(&self.dir, "containerd.toml", &config)?;
        let containerd = self.binaries.containerd.clone();
        self.spawn("containerd", &containerd, &[arg("config", config_file.display())])?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.socket.exists() && self.ctr(&["version"]).await.is_ok() {
                return Ok(());
            }
            let exited = self.processes.last_mut().and_then(Process::exited).is_some();
            if exited || Instant::now() > deadline {
                return Err(self.failure_of("containerd", "answer on its socket"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `ctr` against the node's containerd in the CRI's namespace.
    async fn ctr(&self, args: &[&str]) -> Result<String, HarnessError> {
        let socket = self.socket.display().to_string();
        let mut all = vec!["--address", socket.as_str(), "--namespace", "k8s.io"];
        all.extend_from_slice(args);
        let ctr = self.binaries.ctr.clone();
        let owned: Vec<String> = all.iter().map(|arg| (*arg).to_owned()).collect();
        tokio::task::spawn_blocking(move || run(&ctr, &owned)).await?
    }

    /// Builds the pause and busybox images as one OCI archive and imports it.
    async fn import_images(&mut self) -> Result<(), HarnessError> {
        let busybox = std::fs::read(&self.binaries.busybox)?;
        let archive = build_image_archive(&node_images(&busybox))?;
        let (ctr, socket, dir) = (self.binaries.ctr.clone(), self.socket.clone(), self.dir.clone());
        tokio::task::spawn_blocking(move || import_image_archive(&ctr, &socket, &dir, &archive)).await?
    }

    /// containerd's socket: where more images are imported (`ctr --address <socket> -n k8s.io images import`).
    pub fn containerd_socket(&self) -> &Path {
        &self.socket
    }

    fn start_kubelet(&mut self, kubeconfig: &Path, ca_file: &Path) -> Result<(), HarnessError> {
        std::fs::create_dir_all(&self.kubelet_root)?;
        let config =
            build_kubelet_config(&self.socket, ca_file, &self.dir.join("pod-logs"), free_port()?, free_port()?);
        let config_file = write(&self.dir, "kubelet.yaml", &config)?;
        let args = vec![
            arg("config", config_file.display()),
            arg("kubeconfig", kubeconfig.display()),
            arg("hostname-override", NODE_NAME),
            arg("root-dir", self.kubelet_root.display()),
            arg("v", 2),
        ];
        let kubelet = self.binaries.kubelet.clone();
        self.spawn("kubelet", &kubelet, &args)
    }

    /// kube-proxy; returns its health port, which answers 200 once its rules are synced.
    fn start_kube_proxy(&mut self, kubeconfig: &Path) -> Result<u16, HarnessError> {
        let healthz_port = free_port()?;
        let config = build_kube_proxy_config(kubeconfig, healthz_port, free_port()?);
        let config_file = write(&self.dir, "kube-proxy.yaml", &config)?;
        let kube_proxy = self.binaries.kube_proxy.clone();
        self.spawn("kube-proxy", &kube_proxy, &[arg("config", config_file.display())])?;
        Ok(healthz_port)
    }

    /// Waits until kube-proxy on `healthz_port` reports its rules synced (no pod reaches a Service before).
    async fn wait_for_kube_proxy(&mut self, healthz_port: u16) -> Result<(), HarnessError> {
        let probe = format!("http://127.0.0.1:{healthz_port}/healthz");
        let http = reqwest::Client::new();
        let healthy = wait_for("kube-proxy to sync its rules", START_TIMEOUT, || {
            let (http, probe) = (http.clone(), probe.clone());
            async move { http.get(&probe).send().await.ok().filter(|response| response.status().is_success()) }
        })
        .await;
        match healthy {
            Ok(_) => Ok(()),
            Err(_) => Err(self.failure_of("kube-proxy", "sync its rules")),
        }
    }

    /// Waits until the kubelet's node is Ready; fails at once when the kubelet, containerd or kube-proxy exits.
    async fn wait_until_ready(&mut self, client: &Client) -> Result<(), HarnessError> {
        let nodes: Api<Node> = Api::all(client.clone());
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if nodes.get_opt(NODE_NAME).await.ok().flatten().is_some_and(|node| is_ready(&node)) {
                return Ok(());
            }
            let exited = self.processes.iter_mut().find_map(|process| process.exited().map(|_| process.name.clone()));
            if let Some(name) = exited {
                return Err(self.failure_of(&name, "keep running while the node registers"));
            }
            if Instant::now() > deadline {
                return Err(self.failure_of("kubelet", "register a Ready node"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops everything and undoes the set-up, each step whatever the others did.
    fn stop(&mut self) {
        // The kubelet first, so it starts no new pod while the rest goes.
        for name in ["kubelet", "kube-proxy"] {
            if let Some(process) = self.processes.iter_mut().find(|process| process.name == name) {
                process.stop();
            }
        }
        let socket = self.socket.display().to_string();
        let ctr = |args: &[&str]| {
            let mut all = vec!["--address", socket.as_str(), "--namespace", "k8s.io"];
            all.extend_from_slice(args);
            let owned: Vec<String> = all.iter().map(|arg| (*arg).to_owned()).collect();
            run(&self.binaries.ctr, &owned)
        };
        if let Ok(tasks) = ctr(&["tasks", "list", "--quiet"]) {
            for task in tasks.lines().map(str::trim).filter(|task| !task.is_empty()) {
                let _ = ctr(&["tasks", "kill", "--signal", "SIGKILL", task]);
            }
            for task in tasks.lines().map(str::trim).filter(|task| !task.is_empty()) {
                let _ = ctr(&["tasks", "delete", "--force", task]);
            }
        }
        for pid in shim_pids(&socket) {
            let _ = run(Path::new("kill"), &["-KILL".to_owned(), pid.to_string()]);
        }
        while let Some(mut process) = self.processes.pop() {
            process.stop();
        }
        let _ = run(&self.binaries.kube_proxy, &["--cleanup".to_owned()]);
        for (iptables, table, chain) in std::mem::take(&mut self.kubelet_chains) {
            remove_chain(&iptables, table, chain);
        }
        for mount in mounts_under(&self.dir) {
            let _ = run(Path::new("umount"), &["--lazy".to_owned(), mount]);
        }
        if self.bridge_created {
            let _ = run(&self.binaries.ip, &["link", "delete", BRIDGE]);
            self.bridge_created = false;
        }
        for cgroup in std::mem::take(&mut self.kubelet_cgroups) {
            remove_cgroup_tree(&cgroup);
        }
        if let Ok(entries) = std::fs::read_dir("/var/lib/cni/results") {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&format!("{NETWORK_NAME}-")) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        // The directory (its logs, named in a start-up failure) goes with the plane's, now that nothing is
        // mounted under it.
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether the node's `Ready` condition is `True`.
fn is_ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|status| status.conditions.as_ref());
    conditions.into_iter().flatten().any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

/// Lifts the not-ready taint (no node-lifecycle controller runs), adds the real-node taint and label, and
/// advertises the fake GPUs in the node's status (as the Kubernetes docs advertise an extended resource).
async fn prepare_node_object(client: &Client) -> Result<(), HarnessError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(NODE_NAME).await?;
    let mut taints: Vec<serde_json::Value> = node
        .spec
        .and_then(|spec| spec.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|taint| taint.key != "node.kubernetes.io/not-ready" && taint.key != REAL_NODE_TAINT)
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    taints.push(serde_json::json!({"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}));
    let patch = serde_json::json!({
        "metadata": {"labels": {REAL_NODE_LABEL: "true"}},
        "spec": {"taints": taints},
    });
    nodes.patch(NODE_NAME, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let status = serde_json::json!({
        "status": {
            "capacity": {GPU_RESOURCE: ADVERTISED_GPUS},
            "allocatable": {GPU_RESOURCE: ADVERTISED_GPUS},
        }
    });
    nodes.patch_status(NODE_NAME, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

/// Runs `program` with `args`, killed after [`CLEANUP_COMMAND_TIMEOUT`]; its standard output, or an error with
/// its standard error.
fn run<S: AsRef<std::ffi::OsStr>>(program: &Path, args: &[S]) -> Result<String, HarnessError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("failed to run {}: {error}", program.display()))?;
    let deadline = Instant::now() + CLEANUP_COMMAND_TIMEOUT;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} did not finish within {CLEANUP_COMMAND_TIMEOUT:?}", program.display()).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output()?;
    let shown: Vec<String> = args.iter().map(|arg| arg.as_ref().to_string_lossy().into_owned()).collect();
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{} {}` failed ({}): {}",
            program.display(),
            shown.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into())
    }
}

/// Removes `chain` of `table` with the rules jumping to it (one rule per line of `-S`, none with quoted parts).
fn remove_chain(iptables: &Path, table: &str, chain: &str) {
    let Ok(rules) = run(iptables, &["-t", table, "-S"]) else { return };
    let jump = format!("-j {chain}");
    for rule in rules.lines().filter(|rule| rule.starts_with("-A ") && rule.trim_end().ends_with(&jump)) {
        let mut args = vec!["-t", table, "-D"];
        args.extend(rule.split_whitespace().skip(1));
        let _ = run(iptables, &args);
    }
    let _ = run(iptables, &["-t", table, "-F", chain]);
    let _ = run(iptables, &["-t", table, "-X", chain]);
}

/// The PIDs of the containerd shims serving the containerd on `socket` (each names it in its command line).
fn shim_pids(socket: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
            let is_shim = args.first().is_some_and(|program| program.ends_with(b"containerd-shim-runc-v2"));
            (is_shim && args.contains(&socket.as_bytes())).then_some(pid)
        })
        .collect()
}

/// The mount points at or under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = text
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| point.replace("\\040", " "))
        .filter(|point| point == &prefix || point.starts_with(&format!("{prefix}/")))
        .collect();
    mounts.sort_by_key(|point| std::cmp::Reverse(point.len()));
    mounts.dedup();
    mounts
}

/// Removes a cgroup directory and its children, deepest first (a cgroup directory is removed with `rmdir`).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The CNI network: the node's bridge as the pods' gateway to the Services only, host-local addresses from
/// [`POD_SUBNET`] kept under `ipam_dir`, no masquerading (pods talk only to the node and to each other).
fn build_cni_conflist(ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": NETWORK_NAME,
        "plugins": [{
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "dataDir": ipam_dir.display().to_string(),
                "ranges": [[{"subnet": POD_SUBNET, "gateway": BRIDGE_GATEWAY}]],
                // No default route: a pod's packets reach its own subnet and the Services only, never another
                // address (this machine forwards).
                "routes": [{"dst": SERVICE_CIDR}],
            },
        }, {"type": "loopback"}],
    })
    .to_string()
}

/// containerd's configuration: everything under `dir`, its own socket, the CRI plugin with the pause image, the
/// CNI network of `cni_conf_dir`, cgroupfs, and `restrict_oom_score_adj` (the sandbox lacks `CAP_SYS_RESOURCE`;
/// without it runc fails every pod sandbox). Network namespaces are mounted under its state directory too.
fn build_containerd_config(dir: &Path, socket: &Path, cni_conf_dir: &Path, binaries: &NodeBinaries) -> String {
    let path = |name: &str| dir.join(name).display().to_string();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{cni_bin}"
  conf_dir = "{cni_conf}"
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{runc}"
"#,
        root = path("containerd/root"),
        state = path("containerd/state"),
        opt = path("containerd/opt"),
        socket = socket.display(),
        cni_bin = binaries.cni_bin_dir.display(),
        cni_conf = cni_conf_dir.display(),
        runc = binaries.runc.display(),
    )
}

/// The kubelet's configuration: cgroupfs on cgroup v1, the node's containerd, its endpoints on loopback ports
/// `port` and `healthz_port` (anonymous, always allowed: the API server asks it for logs), pod logs in
/// `pod_logs_dir`, lenient eviction and no image garbage collection (the disks here are big and busy), no DNS, and
/// a crash-loop back-off capped at 2 s.
fn build_kubelet_config(socket: &Path, ca_file: &Path, pod_logs_dir: &Path, port: u16, healthz_port: u16) -> String {
    let endpoint = format!("unix://{}", socket.display());
    serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": false,
        // A container that exits is restarted after at most 2 s, not a back-off doubling to 5 min: the chaos suite
        // kills the same replicas dozens of times in a row (Kubernetes 1.36's KubeletCrashLoopBackOffMax, on by
        // default; a production kubelet keeps its default back-off).
        "crashLoopBackOff": {"maxContainerRestartPeriod": "2s"},
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": true},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": ca_file.display().to_string()},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "registerNode": true,
        "maxPods": 16,
        "podCIDR": POD_SUBNET,
        "failSwapOn": false,
        "resolvConf": "",
        "podLogsDir": pod_logs_dir.display().to_string(),
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
    })
    .to_string()
}

/// kube-proxy's configuration: iptables mode for [`CLUSTER_CIDR`], its endpoints on loopback ports, and no
/// change to the machine's conntrack or `route_localnet` settings.
fn build_kube_proxy_config(kubeconfig: &Path, healthz_port: u16, metrics_port: u16) -> String {
    serde_json::json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "hostnameOverride": NODE_NAME,
        "clientConnection": {"kubeconfig": kubeconfig.display().to_string()},
        "healthzBindAddress": format!("127.0.0.1:{healthz_port}"),
        "metricsBindAddress": format!("127.0.0.1:{metrics_port}"),
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": false},
        // NodePorts (if a suite makes any) only on the bridge, never on the machine's own addresses.
        "nodePortAddresses": [format!("{BRIDGE_GATEWAY}/32")],
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configs_name_the_nodes_socket_bridge_and_pause_image() {
        let binaries = NodeBinaries {
            kubelet: "/bin/kubelet".into(),
            kube_proxy: "/bin/kube-proxy".into(),
            containerd: "/bin/containerd".into(),
            ctr: "/bin/ctr".into(),
            runc: "/sbin/runc".into(),
            ip: "/sbin/ip".into(),
            iptables: vec!["/sbin/iptables".into()],
            busybox: "/bin/busybox".into(),
            cni_bin_dir: "/usr/lib/cni".into(),
        };
        let config = build_containerd_config(
            Path::new("/tmp/n"),
            Path::new("/tmp/n/containerd.sock"),
            Path::new("/tmp/n/cni"),
            &binaries,
        );
        assert!(config.contains("restrict_oom_score_adj = true"));
        assert!(config.contains(r#"address = "/tmp/n/containerd.sock""#));
        assert!(config.contains(&format!(r#"sandbox_image = "{PAUSE_IMAGE}""#)));
        let cni: serde_json::Value = serde_json::from_str(&build_cni_conflist(Path::new("/tmp/n/ipam"))).unwrap();
        assert_eq!(cni["plugins"][0]["bridge"], BRIDGE);
        assert_eq!(cni["plugins"][0]["ipMasq"], false);
        let kubelet: serde_json::Value = serde_json::from_str(&build_kubelet_config(
            Path::new("/tmp/n/containerd.sock"),
            Path::new("/tmp/ca.crt"),
            Path::new("/tmp/n/logs"),
            1,
            2,
        ))
        .unwrap();
        assert_eq!(kubelet["failCgroupV1"], false);
        assert_eq!(kubelet["crashLoopBackOff"]["maxContainerRestartPeriod"], "2s");
        assert_eq!(kubelet["containerRuntimeEndpoint"], "unix:///tmp/n/containerd.sock");
    }

    #[test]
    fn a_dynamically_linked_binary_or_a_missing_file_is_not_taken_for_a_static_busybox() {
        assert!(!is_statically_linked(&std::env::current_exe().unwrap()));
        assert!(!is_statically_linked(Path::new("/nonexistent")));
    }
}
