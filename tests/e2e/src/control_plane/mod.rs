//! A throwaway Kubernetes control plane on loopback for the end-to-end suites, started from plain binaries as
//! controller-runtime's envtest does: etcd, kube-apiserver, kube-controller-manager (Jobs make pods, namespaces
//! finalize, garbage is collected), kube-scheduler when found (pods bind, DRA claims are allocated) and the Kueue
//! manager with its CRDs (and a ProvisioningRequest CRD, so its provisioning admission checks run), its webhooks
//! registered by URL and the DRA sample policy's `deviceClassMappings`, plus a second API server with its own Kueue
//! as a fleet's worker. Its own temporary directory, CA, certificates and free ports; only processes it started,
//! each stopped by PID. With every piece of a real node found (kubelet, kube-proxy, containerd, runc, the CNI
//! plugins, root), it also runs one (`node`), and only then is its API server reachable from pods. Does I/O
//! (processes, files, the API).

pub mod assets;
pub mod images;
pub mod kueue;
pub mod node;
pub mod pki;
pub mod process;
pub mod provisioning;
pub mod versions;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ObjectMeta;
use kube::{Client, Config};
use tiergate::plan::dra::DeviceClassMapping;

use self::assets::{Assets, MissingBinary};
use self::kueue::{
    KUEUE_NAMESPACE, MANAGER_CONFIG, WebhookKind, build_manager_config, build_webhook_configurations,
    build_webhook_service, framework_name, framework_webhook_kind, kueue_own_webhook_kinds,
};
use self::node::{NodeBinaries, RealNode};
use self::pki::{Credentials, build_credentials, build_kubeconfig};
use self::process::Process;
use crate::{HARNESS_MANAGER, HarnessError, wait_for, wait_for_crd_established};

/// How long each process may take to become ready (a cold start on a small, busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The repository's DRA sample policy, whose DeviceClasses the control plane's Kueue managers map.
pub const DRA_SAMPLE_POLICY: &str = "samples/dra/policy.yaml";

/// The Kueue integrations the control plane enables, when the API server serves their kind: a release install's
/// defaults plus the Kubeflow training-operator kinds whose CRDs the suites install.
const FRAMEWORKS: &[&str] = &[
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/mpijob",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "kubeflow.org/paddlejob",
    "kubeflow.org/jaxjob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "ray.io/rayservice",
    "workload.codeflare.dev/appwrapper",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "pod",
    "deployment",
    "statefulset",
];

/// A running control plane. Dropping it stops every process (in reverse start order) and removes its directory.
#[derive(Debug)]
pub struct ControlPlane {
    /// The management cluster's admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The worker cluster's admin kubeconfig (a second API server with Kueue's and the workload kinds' CRDs and its
    /// own Kueue manager; no controller-manager), or why there is none.
    pub worker: Result<PathBuf, String>,
    /// The management cluster's kube-scheduler: its secure port on loopback (`/readyz` answered), or why there is
    /// none.
    pub scheduler: Result<u16, String>,
    /// The `resources.deviceClassMappings` every Kueue manager runs with (and its stored configuration carries).
    pub device_class_mappings: Vec<DeviceClassMapping>,
    /// A free loopback port for the suites' in-process tiergate webhook (`TIERGATE_E2E_WEBHOOK_PORT`).
    pub webhook_port: u16,
    /// `binary: version` of each binary, as it reports itself.
    pub versions: Vec<String>,
    /// The real node's name, when one runs (pods there really run), or why there is none.
    pub node: Result<String, String>,
    /// How long start-up took.
    pub started_in: Duration,
    /// `--emulated-version=1.<minor>` for the API servers, controller-manager and scheduler, when the plane runs an
    /// older Kubernetes minor than its binaries ([`versions::KUBERNETES_VERSION_ENV`]).
    emulated_version: Option<String>,
    real_node: Option<RealNode>,
    processes: Vec<Process>,
    dir: tempfile::TempDir,
}

/// Where the CRDs are: `shared/` beside the repository (also from a worktree one level deeper).
pub fn shared_dir() -> Result<PathBuf, HarnessError> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found = manifest.ancestors().map(|dir| dir.join("shared")).find(|dir| dir.join("kueue/crds").is_dir());
    Ok(found.ok_or_else(|| format!("no shared/kueue/crds above {}", manifest.display()))?)
}

/// The `deviceClassMappings` tiergate needs of Kueue for the repository's [`DRA_SAMPLE_POLICY`] (found above this
/// crate, also from a worktree), so the plane's Kueue charges DRA claims as `tiergate check` expects it to.
pub fn sample_device_class_mappings() -> Result<Vec<DeviceClassMapping>, HarnessError> {
    let policy = tiergate::inputs::load_policy(Some(&crate::repository_file(DRA_SAMPLE_POLICY)?))?;
    Ok(tiergate::plan::dra::kueue_device_class_mappings(&policy.spec))
}

/// A free TCP port on loopback (bound, read and released).
fn free_port() -> Result<u16, HarnessError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf, HarnessError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|error| format!("failed to write {}: {error}", path.display()))?;
    Ok(path)
}

fn arg(flag: &str, value: impl std::fmt::Display) -> String {
    format!("--{flag}={value}")
}

/// `binary --version`'s first line, or why there is none (a binary that does not answer within 10 s is killed).
fn version_of(binary: &Path, flag: &str) -> String {
    let spawned = std::process::Command::new(binary)
        .arg(flag)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return format!("unknown ({error})"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return format!("unknown ({flag} did not answer within 10 s)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    match child.wait_with_output() {
        Ok(output) => {
            let text =
                format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
            text.lines().next().unwrap_or("unknown").trim().to_owned()
        }
        Err(error) => format!("unknown ({error})"),
    }
}

/// Which API server to start.
struct ApiServerRole<'a> {
    /// What it is called (its log, directory and kubeconfig are named after it).
    name: &'a str,
    /// Where it stores in etcd.
    prefix: &'a str,
    /// Whether pods on the real node reach it (through the `kubernetes` Service).
    reachable_from_pods: bool,
}

/// An API server the control plane started.
struct ApiServer {
    /// `https://127.0.0.1:<port>`.
    url: String,
    /// Its admin kubeconfig.
    kubeconfig: PathBuf,
    /// An admin client.
    client: Client,
}

/// A client of `server` that trusts the CA and authenticates as the admin, with the kubeconfig text it was built
/// from.
async fn admin_client(server: &str, credentials: &Credentials) -> Result<(String, Client), HarnessError> {
    let text = build_kubeconfig(server, &credentials.ca.cert, &credentials.admin);
    let config = Config::from_custom_kubeconfig(Kubeconfig::from_yaml(&text)?, &KubeConfigOptions::default()).await?;
    Ok((text, Client::try_from(config)?))
}

/// Polls `path` of `client`'s server until it answers `ok`.
async fn wait_for_ok(what: &str, client: &Client, path: &str) -> Result<(), HarnessError> {
    wait_for(what, START_TIMEOUT, || {
        let client = client.clone();
        async move {
            let request = http::Request::get(path).body(Vec::new()).ok()?;
            client.request_text(request).await.ok().filter(|body| body.trim() == "ok")
        }
    })
    .await
    .map(|_| ())
}

/// Why the control plane has no kube-scheduler.
fn no_scheduler_reason(missing: &MissingBinary) -> String {
    format!(
        "the throwaway control plane runs no kube-scheduler, so its pods stay unbound and their DRA claims \
         unallocated: {missing}"
    )
}

/// The files every process reads.
struct Files {
    ca: PathBuf,
    ca_key: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    service_account_public: PathBuf,
    service_account_key: PathBuf,
}

impl Files {
    fn write(dir: &Path, credentials: &Credentials) -> Result<Self, HarnessError> {
        Ok(Self {
            ca: write(dir, "ca.crt", &credentials.ca.cert)?,
            ca_key: write(dir, "ca.key", &credentials.ca.key)?,
            serving_cert: write(dir, "serving.crt", &credentials.serving.cert)?,
            serving_key: write(dir, "serving.key", &credentials.serving.key)?,
            service_account_public: write(dir, "service-account.pub", &credentials.service_account.cert)?,
            service_account_key: write(dir, "service-account.key", &credentials.service_account.key)?,
        })
    }
}

impl ControlPlane {
    /// Starts everything and waits until it is ready: the API servers answer `/readyz`, the CRDs are established,
    /// Kueue answers its readiness probe and its webhooks are registered, the kube-scheduler (when found) answers
    /// `/readyz`, and the controller-manager has made the `default` ServiceAccount.
    pub async fn start(assets: &Assets) -> Result<Self, HarnessError> {
        let began = Instant::now();
        let chosen = versions::PlaneVersions::from_environment()?;
        let mut assets = assets.clone();
        if let Some(kueue) = &chosen.kueue_binary {
            assets.kueue = kueue.clone();
        }
        let assets = &assets;
        let dir = tempfile::Builder::new().prefix("tiergate-e2e-control-plane-").tempdir()?;
        let device_class_mappings = sample_device_class_mappings()?;
        let mut binaries = vec![
            ("etcd", assets.etcd.clone()),
            ("kube-apiserver", assets.kube_apiserver.clone()),
            ("kube-controller-manager", assets.kube_controller_manager.clone()),
        ];
        binaries.extend(assets.kube_scheduler.clone().ok().map(|binary| ("kube-scheduler", binary)));
        let mut versions = Vec::new();
        for (name, binary) in binaries {
            let version = tokio::task::spawn_blocking(move || version_of(&binary, "--version")).await?;
            versions.push(format!("{name}: {version}"));
        }
        if assets.kube_scheduler.is_err() {
            versions.push("kube-scheduler: not found, not started".to_owned());
        }
        versions.push(format!("kueue: {} (version unknown until it starts)", assets.kueue.display()));
        if let Some(minor) = chosen.emulated_minor {
            versions.push(format!("kubernetes: emulating 1.{minor} ({})", versions::KUBERNETES_VERSION_ENV));
        }
        let node_binaries = node::find_node_binaries();
        if let Ok(node_binaries) = &node_binaries {
            for (name, binary) in node_binaries.reported() {
                let version = tokio::task::spawn_blocking(move || version_of(&binary, "--version")).await?;
                versions.push(format!("{name}: {version}"));
            }
        }
        let etcd_reports_watch_progress = reports_watch_progress(plane_etcd_line(&versions));
        let credentials = build_credentials()?;
        let files = Files::write(dir.path(), &credentials)?;
        let mut plane = Self {
            kubeconfig: PathBuf::new(),
            worker: Err(no_worker_reason(plane_etcd_line(&versions))),
            scheduler: Err(match &assets.kube_scheduler {
                Ok(_) => "kube-scheduler has not become ready yet".to_owned(),
                Err(missing) => no_scheduler_reason(missing),
            }),
            device_class_mappings,
            webhook_port: free_port()?,
            versions,
            node: Err("the real node has not started yet".to_owned()),
            started_in: Duration::ZERO,
            emulated_version: chosen.emulated_version_arg(),
            real_node: None,
            processes: Vec::new(),
            dir,
        };
        let etcd = plane.start_etcd(assets).await?;
        let reachable_from_pods = node_binaries.is_ok();
        let role = ApiServerRole { name: "kube-apiserver", prefix: "/registry", reachable_from_pods };
        let management = plane.start_apiserver(assets, &files, &credentials, &etcd, role).await?;
        plane.kubeconfig = management.kubeconfig.clone();
        plane.start_controller_manager(assets, &files)?;
        // Started now and awaited last: it syncs its caches while the CRDs are installed and Kueue starts.
        let scheduler_port = match &assets.kube_scheduler {
            Ok(binary) => Some(plane.start_scheduler(binary, &files, &credentials, &management.url)?),
            Err(_) => None,
        };
        let shared = shared_dir()?;
        let kueue_crds = chosen.kueue_crds.clone().unwrap_or_else(|| shared.join("kueue/crds"));
        let all_crds = [kueue_crds, shared.join("workload-crds")];
        // The ProvisioningRequest CRD goes in with the others: Kueue runs its provisioning admission checks only when
        // ProvisioningRequests are served as it starts.
        let provisioning_request = provisioning::build_provisioning_request_crd();
        install_crds(&management.client, &all_crds, &[provisioning_request]).await?;
        plane.start_kueue("kueue", assets, &management.client, &management.kubeconfig, &credentials).await?;
        if etcd_reports_watch_progress {
            let role = ApiServerRole { name: "worker-kube-apiserver", prefix: "/worker", reachable_from_pods: false };
            let worker = plane.start_apiserver(assets, &files, &credentials, &etcd, role).await?;
            // MultiKueue connects to a worker only when it serves every kind of the manager's enabled integrations,
            // and the worker's own Kueue admits MultiKueue's copies; only then does the manager create the Job there.
            install_crds(&worker.client, &all_crds, &[]).await?;
            plane.start_kueue("worker-kueue", assets, &worker.client, &worker.kubeconfig, &credentials).await?;
            plane.worker = Ok(worker.kubeconfig);
        }
        if let Some(port) = scheduler_port {
            plane.wait_for_scheduler(port, &credentials).await?;
            plane.scheduler = Ok(port);
        }
        plane.wait_for_default_service_account(&management.client).await?;
        plane.node = match node_binaries {
            Ok(binaries) => plane.start_node(binaries, &management, &files.ca).await,
            Err(reason) => Err(reason),
        };
        plane.started_in = began.elapsed();
        Ok(plane)
    }

    /// Stops every process, last started first, and removes the directory.
    pub fn stop(mut self) {
        self.stop_processes();
    }

    fn stop_processes(&mut self) {
        drop(self.real_node.take());
        while let Some(mut process) = self.processes.pop() {
            process.stop();
        }
    }

    /// The PIDs of the processes it started (the real node's too).
    pub fn pids(&self) -> Vec<u32> {
        let node = self.real_node.iter().flat_map(RealNode::pids);
        self.processes.iter().map(Process::id).chain(node).collect()
    }

    /// The real node's containerd socket, where images are imported, when one runs.
    pub fn containerd_socket(&self) -> Option<&Path> {
        self.real_node.as_ref().map(RealNode::containerd_socket)
    }

    /// How long the real node took to start, when one runs.
    pub fn node_started_in(&self) -> Option<Duration> {
        self.real_node.as_ref().map(|node| node.started_in)
    }

    /// Starts the real node against the management API server: its name, or why it failed (the plane goes on
    /// without it; the node has undone what it set up).
    async fn start_node(
        &mut self,
        binaries: NodeBinaries,
        management: &ApiServer,
        ca_file: &Path,
    ) -> Result<String, String> {
        let kubeconfig = std::fs::read_to_string(&management.kubeconfig).map_err(|error| error.to_string())?;
        match RealNode::start(binaries, self.dir.path(), &kubeconfig, ca_file, &management.client).await {
            Ok(real_node) => {
                self.real_node = Some(real_node);
                Ok(node::NODE_NAME.to_owned())
            }
            Err(error) => Err(format!("the throwaway control plane's real node failed to start: {error}")),
        }
    }

    /// Its temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &Path)],
    ) -> Result<(), HarnessError> {
        let log = self.dir.path().join(format!("{name}.log"));
        self.processes.push(Process::spawn(name, program, args, env, log)?);
        Ok(())
    }

    fn last_process(&mut self) -> Result<&mut Process, HarnessError> {
        Ok(self.processes.last_mut().ok_or("no process was started")?)
    }

    /// The error of the process called `name` failing to do `what`, with its log's last lines.
    fn failure_of(&mut self, name: &str, what: &str) -> HarnessError {
        let process = self.processes.iter_mut().find(|process| process.name == name);
        process.map_or_else(|| format!("no {name} was started").into(), |process| process.failure(what))
    }

    /// etcd on two free loopback ports; returns its client URL once it accepts connections.
    async fn start_etcd(&mut self, assets: &Assets) -> Result<String, HarnessError> {
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let data = self.dir.path().join("etcd");
        let args = vec![
            arg("name", "e2e"),
            arg("data-dir", data.display()),
            arg("listen-client-urls", &client_url),
            arg("advertise-client-urls", &client_url),
            arg("listen-peer-urls", &peer_url),
            arg("initial-advertise-peer-urls", &peer_url),
            arg("initial-cluster", format!("e2e={peer_url}")),
        ];
        self.spawn("etcd", &assets.etcd, &args, &[])?;
        let deadline = Instant::now() + START_TIMEOUT;
        while tokio::net::TcpStream::connect(("127.0.0.1", client_port)).await.is_err() {
            let etcd = self.last_process()?;
            if etcd.exited().is_some() || Instant::now() > deadline {
                return Err(etcd.failure("accept connections"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(client_url)
    }

    /// A kube-apiserver as `role` says, once `/readyz` answers. One reachable from pods (a real node runs) listens
    /// on every address and advertises the CNI bridge's gateway (its `kubernetes` Service's endpoint, kept by the
    /// lease reconciler), and reaches the kubelet by its `localhost` node name; otherwise it stays on loopback with no
    /// endpoint.
    async fn start_apiserver(
        &mut self,
        assets: &Assets,
        files: &Files,
        credentials: &Credentials,
        etcd: &str,
        role: ApiServerRole<'_>,
    ) -> Result<ApiServer, HarnessError> {
        let ApiServerRole { name, prefix, reachable_from_pods } = role;
        let port = free_port()?;
        let (bind_address, advertise_address, endpoint_reconciler) = if reachable_from_pods {
            ("0.0.0.0", node::BRIDGE_GATEWAY, "lease")
        } else {
            ("127.0.0.1", "127.0.0.1", "none")
        };
        let mut args = vec![
            arg("etcd-servers", etcd),
            arg("etcd-prefix", prefix),
            arg("bind-address", bind_address),
            arg("advertise-address", advertise_address),
            arg("secure-port", port),
            arg("cert-dir", self.dir.path().join(name).display()),
            arg("tls-cert-file", files.serving_cert.display()),
            arg("tls-private-key-file", files.serving_key.display()),
            arg("client-ca-file", files.ca.display()),
            arg("service-account-issuer", "https://kubernetes.default.svc.cluster.local"),
            arg("service-account-key-file", files.service_account_public.display()),
            arg("service-account-signing-key-file", files.service_account_key.display()),
            arg("service-cluster-ip-range", "10.0.0.0/24"),
            arg("authorization-mode", "RBAC"),
            arg("allow-privileged", true),
            arg("endpoint-reconciler-type", endpoint_reconciler),
        ];
        if reachable_from_pods {
            args.push(arg("kubelet-preferred-address-types", "Hostname"));
        }
        args.extend(self.emulated_version.clone());
        self.spawn(name, &assets.kube_apiserver, &args, &[])?;
        let url = format!("https://127.0.0.1:{port}");
        let (text, client) = admin_client(&url, credentials).await?;
        let kubeconfig = write(self.dir.path(), &format!("{name}.kubeconfig"), &text)?;
        if wait_for_ok(&format!("{name} to answer /readyz"), &client, "/readyz").await.is_err() {
            return Err(self.last_process()?.failure("become ready"));
        }
        Ok(ApiServer { url, kubeconfig, client })
    }

    /// kube-controller-manager against the management API server, with the controllers the suites rely on
    /// (node lifecycle is off: the suites' Node objects have no kubelet to keep them Ready).
    fn start_controller_manager(&mut self, assets: &Assets, files: &Files) -> Result<(), HarnessError> {
        let mut args = vec![
            arg("kubeconfig", self.kubeconfig.display()),
            arg("leader-elect", false),
            arg("secure-port", 0),
            arg("controllers", "*,-node-lifecycle-controller"),
            arg("service-account-private-key-file", files.service_account_key.display()),
            arg("root-ca-file", files.ca.display()),
            arg("cluster-signing-cert-file", files.ca.display()),
            arg("cluster-signing-key-file", files.ca_key.display()),
        ];
        args.extend(self.emulated_version.clone());
        let program = assets.kube_controller_manager.clone();
        self.spawn("kube-controller-manager", &program, &args, &[])
    }

    /// kube-scheduler `program` against the management API server at `server`, as kubeadm runs it: its own
    /// kubeconfig as user `system:kube-scheduler` (also for delegated authorization of its endpoints), the serving
    /// certificate on a free loopback port, no leader election. Clients of its endpoints are authenticated by the CA
    /// directly: delegated authentication would also look up the request-header CA, which this API server has none
    /// of, and log that forever. Its default profile has the DynamicResources plugin (DRA is GA and on by default
    /// since Kubernetes 1.34), so it allocates claims without flags. A suite's Node must drop the
    /// `node.kubernetes.io/not-ready` taint the API server's admission gives it (no node-lifecycle controller here
    /// removes it) before pods bind there. Returns the port; [`Self::wait_for_scheduler`] waits for it.
    fn start_scheduler(
        &mut self,
        program: &Path,
        files: &Files,
        credentials: &Credentials,
        server: &str,
    ) -> Result<u16, HarnessError> {
        let port = free_port()?;
        let text = build_kubeconfig(server, &credentials.ca.cert, &credentials.scheduler);
        let kubeconfig = write(self.dir.path(), "kube-scheduler.kubeconfig", &text)?;
        let mut args = vec![
            arg("kubeconfig", kubeconfig.display()),
            arg("client-ca-file", files.ca.display()),
            arg("authorization-kubeconfig", kubeconfig.display()),
            arg("leader-elect", false),
            arg("bind-address", "127.0.0.1"),
            arg("secure-port", port),
            arg("tls-cert-file", files.serving_cert.display()),
            arg("tls-private-key-file", files.serving_key.display()),
        ];
        args.extend(self.emulated_version.clone());
        self.spawn("kube-scheduler", program, &args, &[])?;
        Ok(port)
    }

    /// Waits until the kube-scheduler on `port` answers `/readyz` (its caches synced), over TLS verified against
    /// the CA.
    async fn wait_for_scheduler(&mut self, port: u16, credentials: &Credentials) -> Result<(), HarnessError> {
        let (_, client) = admin_client(&format!("https://127.0.0.1:{port}"), credentials).await?;
        if wait_for_ok("kube-scheduler to answer /readyz", &client, "/readyz").await.is_err() {
            return Err(self.failure_of("kube-scheduler", "become ready"));
        }
        Ok(())
    }

    /// A Kueue manager called `name` for the API server of `client` (admin `kubeconfig`), with the frameworks that
    /// server serves, its configuration stored as a release install stores it, and its webhooks registered by URL
    /// once it is ready.
    async fn start_kueue(
        &mut self,
        name: &str,
        assets: &Assets,
        client: &Client,
        kubeconfig: &Path,
        credentials: &Credentials,
    ) -> Result<(), HarnessError> {
        let webhook_kinds = served_framework_kinds(client).await?;
        let frameworks: Vec<String> =
            webhook_kinds.iter().map(|kind| framework_name(&kind.group, &kind.kind)).collect();
        let dir = self.dir.path().join(name);
        let certs = dir.join("webhook-certs");
        std::fs::create_dir_all(&certs)?;
        write(&certs, "tls.crt", &credentials.serving.cert)?;
        write(&certs, "tls.key", &credentials.serving.key)?;
        let (webhook_port, health_port) = (free_port()?, free_port()?);
        let config = build_manager_config(
            webhook_port,
            &certs.display().to_string(),
            health_port,
            &frameworks,
            &self.device_class_mappings,
        );
        let config_file = write(&dir, "config.yaml", &config)?;
        store_manager_config(client, &config).await?;
        let metrics_certs = dir.join("etc-overlay/kueue/metrics/certs");
        std::fs::create_dir_all(&metrics_certs)?;
        write(&metrics_certs, "tls.crt", &credentials.serving.cert)?;
        write(&metrics_certs, "tls.key", &credentials.serving.key)?;
        let overlay_work = dir.join("etc-overlay-work");
        std::fs::create_dir_all(&overlay_work)?;
        let mut kueue_args = vec![
            arg("config", config_file.display()),
            arg(
                "feature-gates",
                versions::kueue_feature_gates(
                    "VisibilityOnDemand=false",
                    std::env::var(versions::KUEUE_FEATURE_GATES_ENV).ok().as_deref(),
                ),
            ),
        ];
        if let Ok(level) = std::env::var(KUEUE_LOG_LEVEL_ENV) {
            kueue_args.push(arg("zap-log-level", level));
        }
        let args = with_private_etc_overlay(&dir.join("etc-overlay"), &overlay_work, &assets.kueue, &kueue_args);
        self.spawn(name, Path::new("unshare"), &args, &[("KUBECONFIG", kubeconfig)])?;
        let probe = format!("http://127.0.0.1:{health_port}/readyz");
        let http = reqwest::Client::new();
        let ready = wait_for(&format!("{name} to answer /readyz"), START_TIMEOUT, || {
            let (http, probe) = (http.clone(), probe.clone());
            async move { http.get(&probe).send().await.ok().filter(|response| response.status().is_success()) }
        })
        .await;
        if ready.is_err() {
            return Err(self.last_process()?.failure("become ready"));
        }
        let log = std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default();
        if let Some(version) = logged_git_version(&log) {
            self.versions.retain(|line| !line.starts_with("kueue:"));
            self.versions.push(format!("kueue: {version}"));
        }
        let mut kinds = kueue_own_webhook_kinds();
        kinds.extend(webhook_kinds);
        let port = i32::from(webhook_port);
        let (mutating, validating) = build_webhook_configurations(&kinds, port, &credentials.ca.cert);
        apply(&Api::<Service>::namespaced(client.clone(), KUEUE_NAMESPACE), &build_webhook_service()).await?;
        apply(&Api::<MutatingWebhookConfiguration>::all(client.clone()), &mutating).await?;
        apply(&Api::<ValidatingWebhookConfiguration>::all(client.clone()), &validating).await?;
        Ok(())
    }

    async fn wait_for_default_service_account(&mut self, client: &Client) -> Result<(), HarnessError> {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let made = wait_for("the controller-manager to make the default ServiceAccount", START_TIMEOUT, || {
            let accounts = accounts.clone();
            async move { accounts.get_opt("default").await.ok().flatten() }
        })
        .await;
        match made {
            Ok(_) => Ok(()),
            Err(_) => Err(self.failure_of("kube-controller-manager", "start")),
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop_processes();
    }
}

/// Kueue's log verbosity (`--zap-log-level`, e.g. `5`) when set; Kueue's default otherwise.
pub const KUEUE_LOG_LEVEL_ENV: &str = "TIERGATE_E2E_KUEUE_LOG_LEVEL";

/// The etcd line of the versions (`etcd: etcd Version: 3.5.16`).
fn plane_etcd_line(versions: &[String]) -> &str {
    versions.iter().find(|line| line.starts_with("etcd:")).map_or("", String::as_str)
}

/// Why the control plane has no worker cluster over the etcd of `etcd_version_line`.
fn no_worker_reason(etcd_version_line: &str) -> String {
    format!(
        "the throwaway control plane starts no worker cluster: its etcd ({etcd_version_line}) does not answer watch \
         progress requests, and MultiKueue's watches of a worker need them (etcd 3.4.31+, 3.5.13+ or 3.6+; Debian \
         13's etcd-server is 3.5.16)"
    )
}

/// Whether the etcd whose `--version` line this is answers watch progress requests (etcd 3.4.31+, 3.5.13+, 3.6+).
///
/// kube-apiserver serves streaming watches (`sendInitialEvents`) only over such an etcd and otherwise refuses them
/// ("the required storage feature RequestWatchProgress is disabled"). Kueue's MultiKueue watches a worker that
/// way and never connects to it otherwise; Debian 12's `etcd-server` (3.4.23) is older.
fn reports_watch_progress(etcd_version_line: &str) -> bool {
    let version = etcd_version_line.rsplit(' ').next().unwrap_or_default();
    let numbers: Vec<u32> = version.trim_start_matches('v').split('.').map_while(|part| part.parse().ok()).collect();
    match numbers.as_slice() {
        [3, 4, patch, ..] => *patch >= 31,
        [3, 5, patch, ..] => *patch >= 13,
        [3, minor, ..] => *minor >= 6,
        [major, ..] => *major > 3,
        [] => false,
    }
}

/// The `gitVersion` Kueue's manager logs as it starts (it has no `--version` flag).
fn logged_git_version(log: &str) -> Option<&str> {
    let (_, rest) = log.split_once("\"gitVersion\":\"")?;
    rest.split('"').next()
}

/// `unshare` arguments running `program` with `args` in a private mount namespace where `upper` lies over `/etc`.
///
/// Kueue's manager without its internal certificate management reads its metrics serving certificate from the
/// fixed path `/etc/kueue/metrics/certs` (v0.19 `cmd/kueue/main.go`), even with metrics off. The overlay hands it
/// the control plane's certificate there without writing the machine's `/etc`; `unshare` execs the shell, which
/// execs Kueue, so the PID stopped is Kueue's. Needs root (or unprivileged user and mount namespaces).
fn with_private_etc_overlay(upper: &Path, work: &Path, program: &Path, args: &[String]) -> Vec<String> {
    let mount = format!(
        "mount -t overlay overlay -o lowerdir=/etc,upperdir={},workdir={} /etc && exec \"$0\" \"$@\"",
        upper.display(),
        work.display()
    );
    let mut all = vec!["--mount".to_owned(), "--propagation=private".to_owned(), "sh".to_owned(), "-c".to_owned()];
    all.push(mount);
    all.push(program.display().to_string());
    all.extend(args.iter().cloned());
    all
}

/// Server-side applies `object` as the harness's field manager.
async fn apply<K>(api: &Api<K>, object: &K) -> Result<(), HarnessError>
where
    K: kube::Resource + serde::Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(&name, &PatchParams::apply(HARNESS_MANAGER).force(), &Patch::Apply(object)).await?;
    Ok(())
}

/// Applies every CRD in the YAML files of `dirs` and `extra`, and waits until each is established.
async fn install_crds(
    client: &Client,
    dirs: &[PathBuf],
    extra: &[CustomResourceDefinition],
) -> Result<(), HarnessError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for crd in extra {
        let name = crd.metadata.name.clone().unwrap_or_default();
        apply(&crds, crd).await.map_err(|error| format!("failed to apply CRD {name}: {error}"))?;
        names.push(name);
    }
    for dir in dirs {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|error| format!("failed to read {}: {error}", dir.display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|extension| extension == "yaml"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path)?;
            let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
                .map_err(|error| format!("failed to parse {}: {error}", path.display()))?;
            apply(&crds, &crd).await.map_err(|error| format!("failed to apply {}: {error}", path.display()))?;
            names.push(crd.metadata.name.unwrap_or_default());
        }
    }
    for name in names {
        wait_for_crd_established(client, &name, START_TIMEOUT).await?;
    }
    Ok(())
}

/// The webhook kinds of [`FRAMEWORKS`] the API server serves: the workload kinds tiergate's adapter table knows
/// (their group, version and kind), with the plural from discovery.
async fn served_framework_kinds(client: &Client) -> Result<Vec<WebhookKind>, HarnessError> {
    let mut kinds = Vec::new();
    for adapter in tiergate_workloads::ADAPTERS {
        if !FRAMEWORKS.contains(&framework_name(adapter.group, adapter.kind).as_str()) {
            continue;
        }
        let gvk = kube::core::GroupVersionKind::gvk(adapter.group, adapter.version, adapter.kind);
        if let Ok((resource, _)) = kube::discovery::pinned_kind(client, &gvk).await {
            kinds.push(framework_webhook_kind(adapter.group, adapter.version, adapter.kind, &resource.plural));
        }
    }
    Ok(kinds)
}

/// `kueue-system` and its `kueue-manager-config` ConfigMap, as a release install has them.
async fn store_manager_config(client: &Client, config: &str) -> Result<(), HarnessError> {
    let namespace = Namespace {
        metadata: ObjectMeta { name: Some(KUEUE_NAMESPACE.to_owned()), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    apply(&Api::<Namespace>::all(client.clone()), &namespace).await?;
    let (name, key) = MANAGER_CONFIG;
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(KUEUE_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([(key.to_owned(), config.to_owned())].into()),
        ..ConfigMap::default()
    };
    apply(&Api::<ConfigMap>::namespaced(client.clone(), KUEUE_NAMESPACE), &map).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dra_sample_policy_maps_its_device_classes_to_whole_gpus() {
        let mappings = sample_device_class_mappings().unwrap();
        assert_eq!(
            mappings,
            [DeviceClassMapping {
                name: "nvidia.com/gpu".to_owned(),
                device_class_names: vec!["h100.tiergate.io".to_owned(), "l4.tiergate.io".to_owned()],
            }]
        );
    }

    #[test]
    fn only_etcd_releases_with_progress_requests_report_watch_progress() {
        assert!(!reports_watch_progress("etcd: etcd Version: 3.4.23"));
        assert!(reports_watch_progress("etcd: etcd Version: 3.4.31"));
        assert!(!reports_watch_progress("etcd: etcd Version: 3.5.1"));
        assert!(reports_watch_progress("etcd: etcd Version: 3.5.21"));
        assert!(reports_watch_progress("etcd: etcd Version: 3.6.4"));
        assert!(!reports_watch_progress("etcd: unknown (boom)"));
    }

    #[test]
    fn kueues_version_is_read_from_its_start_up_line() {
        let log = r#"{"level":"info","msg":"Initializing","gitVersion":"v0.19.2","gitCommit":"8eab687"}"#;
        assert_eq!(logged_git_version(log), Some("v0.19.2"));
        assert_eq!(logged_git_version("nothing logged yet"), None);
    }

    #[test]
    fn kueue_runs_under_a_private_etc_overlay_and_keeps_its_own_arguments() {
        let args = with_private_etc_overlay(
            Path::new("/tmp/x/etc-overlay"),
            Path::new("/tmp/x/work"),
            Path::new("/bin/kueue"),
            &["--config=/tmp/x/config.yaml".to_owned()],
        );
        assert_eq!(&args[..4], ["--mount", "--propagation=private", "sh", "-c"]);
        assert!(args[4].starts_with("mount -t overlay overlay -o lowerdir=/etc,upperdir=/tmp/x/etc-overlay,"));
        assert!(args[4].ends_with(r#"/etc && exec "$0" "$@""#));
        assert_eq!(&args[5..], ["/bin/kueue", "--config=/tmp/x/config.yaml"]);
    }
}
