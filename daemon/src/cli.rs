//! The command line: every subcommand and flag, each also readable from `TIERGATE_<FLAG>`; no I/O.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use tiergate_compat::namespaces::{NamespaceListError, parse_namespace_blocklist};

use crate::admission::limits::{
    DEFAULT_MAX_INFLIGHT_REQUESTS, DEFAULT_WEBHOOK_TIMEOUT_SECONDS, LimitsError, WebhookLimits, build_limits,
};
use crate::validation::quantity::parse_quantity;

/// tiergate: Kueue tiers, GPU classes and priorities from one TierPolicy.
#[derive(Debug, Parser)]
#[command(name = "tiergate", version, about, long_about = None)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "TIERGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Output format of `render`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Multi-document YAML.
    Yaml,
    /// A JSON `List`.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the Kueue objects a policy implies (a stream `kubectl apply -f -` accepts).
    Render(RenderArgs),
    /// Check that every tier matches exactly one nodepool (Karpenter NodePools or node-group templates).
    Check(CheckArgs),
    /// Print the TierPolicy CustomResourceDefinition.
    Crd,
    /// Run the webhook's decision offline on a workload and print the result, the patch and each reason.
    Explain(ExplainArgs),
    /// Run the daemon: reconcile the policy into Kueue objects and serve the webhook.
    Run(RunArgs),
    /// Serve only the admission webhook.
    Webhook(WebhookArgs),
    /// Serve the built-in scorer as a scheduler agent (`POST /v1/score`).
    Agent(AgentArgs),
    /// Per tier, live: ClusterQueue usage against quota per flavor, workload counts, borrowing, nodepools and the
    /// TierPolicy's conditions (`kubectl tiergate status`).
    Status(StatusArgs),
    /// Why a live workload is pending or landed where it did: its tier, tiergate's decision, Kueue's state and
    /// one sentence on what holds it (`kubectl tiergate why job/NAME -n NS`).
    Why(WhyArgs),
}

/// The name the binary answers to as a kubectl plugin (`kubectl tiergate ...`).
pub const PLUGIN_BINARY: &str = "kubectl-tiergate";

/// Whether `argv0` is the plugin binary (`kubectl-tiergate`, any directory, any extension).
pub fn is_plugin_invocation(argv0: &Path) -> bool {
    argv0.file_stem().is_some_and(|stem| stem == PLUGIN_BINARY)
}

/// Parses the command line; run as `kubectl-tiergate` (argv[0]), help and errors name `kubectl tiergate`.
pub fn try_parse_cli<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let mut command = Cli::command();
    if args.first().is_some_and(|argv0| is_plugin_invocation(Path::new(argv0))) {
        command = command.name(PLUGIN_BINARY).bin_name("kubectl tiergate").display_name("kubectl tiergate");
    }
    let matches = command.try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// Output format of `status` and `why`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AnswerFormat {
    /// Aligned tables and one sentence, for people.
    Table,
    /// The typed answer as YAML.
    Yaml,
    /// The typed answer as JSON.
    Json,
}

/// How `status`, `why` and `check` reach a live cluster: kubectl's flags.
#[derive(Debug, Args, Clone, Default)]
pub struct KubectlArgs {
    /// Kubeconfig file (default: `KUBECONFIG`, several files merged, else `~/.kube/config`; never in-cluster).
    #[arg(long, env = "TIERGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long, env = "TIERGATE_CONTEXT")]
    pub context: Option<String>,
}

/// `tiergate status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Connection.
    #[command(flatten)]
    pub kubectl: KubectlArgs,
    /// Only this tier.
    #[arg(long, env = "TIERGATE_TIER")]
    pub tier: Option<String>,
    /// Name of the TierPolicy (default: the only one when exactly one exists, else `default`).
    #[arg(long, env = "TIERGATE_POLICY_NAME")]
    pub policy_name: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", env = "TIERGATE_OUTPUT", value_enum, default_value_t = AnswerFormat::Table)]
    pub output: AnswerFormat,
}

/// `tiergate why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The workload, `KIND/NAME`: a kind tiergate handles (Job, JobSet, Pod, Deployment, StatefulSet), any case,
    /// singular or plural, e.g. `job/train`.
    #[arg(env = "TIERGATE_WHY_TARGET")]
    pub target: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long = "namespace", env = "TIERGATE_WHY_NAMESPACE")]
    pub namespace: Option<String>,
    /// Connection.
    #[command(flatten)]
    pub kubectl: KubectlArgs,
    /// Name of the TierPolicy.
    #[arg(long, env = "TIERGATE_POLICY_NAME", default_value = "default")]
    pub policy_name: String,
    /// Output format.
    #[arg(short = 'o', long = "output", env = "TIERGATE_OUTPUT", value_enum, default_value_t = AnswerFormat::Table)]
    pub output: AnswerFormat,
}

/// `tiergate render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// TierPolicy YAML file (default: the embedded sample policy and sample cluster view).
    #[arg(long, env = "TIERGATE_POLICY")]
    pub policy: Option<PathBuf>,
    /// Cluster view: a YAML list of namespaces and nodes, or a `kubectl get ns,nodes -o yaml` dump.
    #[arg(long, env = "TIERGATE_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", env = "TIERGATE_OUTPUT", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// A worker cluster's own view (its nodes), as NAME=FILE (repeatable or comma-separated), for the policy's `spec.clusters`; a
    /// worker without one is rendered from the `--cluster` view, with a note.
    #[arg(
        long = "worker-view",
        env = "TIERGATE_WORKER_VIEWS",
        value_name = "NAME=FILE",
        value_delimiter = ',',
        value_parser = parse_named_path
    )]
    pub worker_views: Vec<(String, PathBuf)>,
    /// The in-server gate to render: `validate-and-mutate` for Kubernetes 1.36+ (ValidatingAdmissionPolicies and
    /// MutatingAdmissionPolicies), `validate-only` for older API servers, which do not serve MutatingAdmissionPolicy.
    #[arg(long = "gate", env = "TIERGATE_GATE", value_enum, default_value_t = GateArg::ValidateAndMutate)]
    pub gate: GateArg,
    /// Print only what Kueue's Configuration needs from the policy, instead of the objects: the DRA classes'
    /// `resources.deviceClassMappings` and, where tiers share fairly among their tenants, `admissionFairSharing`.
    /// Without it these go to stderr.
    #[arg(long = "kueue-config", env = "TIERGATE_KUEUE_CONFIG")]
    pub kueue_config: bool,
}

/// `tiergate render --gate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GateArg {
    /// ValidatingAdmissionPolicies only (Kubernetes before 1.36).
    ValidateOnly,
    /// ValidatingAdmissionPolicies and MutatingAdmissionPolicies (Kubernetes 1.36+).
    ValidateAndMutate,
}

impl GateArg {
    /// The gate mode this argument names.
    pub fn mode(self) -> crate::plan::gate::GateMode {
        match self {
            Self::ValidateOnly => crate::plan::gate::GateMode::ValidateOnly,
            Self::ValidateAndMutate => crate::plan::gate::GateMode::ValidateAndMutate,
        }
    }
}

/// `NAME=PATH`, as `--worker-view` and `--worker-nodepools` take it.
fn parse_named_path(value: &str) -> Result<(String, PathBuf), String> {
    match value.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok((name.to_owned(), PathBuf::from(path))),
        _ => Err(format!("{value:?} is not NAME=FILE; write the worker's name from spec.clusters, `=`, and a file")),
    }
}

/// `tiergate check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// TierPolicy YAML file.
    #[arg(long, env = "TIERGATE_POLICY")]
    pub policy: PathBuf,
    /// Karpenter NodePools (karpenter.sh/v1) and/or cluster-autoscaler node-group templates.
    #[arg(long, env = "TIERGATE_NODEPOOLS", required_unless_present_any = ["kubeconfig", "fleet"])]
    pub nodepools: Option<PathBuf>,
    /// Also check the live cluster: its Karpenter NodePools (when karpenter.sh/v1 is served) and node groups.
    #[arg(long, env = "TIERGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for `--kubeconfig` (default: its current context).
    #[arg(long, env = "TIERGATE_CONTEXT", requires = "kubeconfig")]
    pub context: Option<String>,
    /// Check a fleet: each tier with `dispatch` against the pools of each of its workers (`--worker-nodepools`),
    /// the other tiers against `--nodepools`/`--kubeconfig` when given.
    #[arg(long, env = "TIERGATE_FLEET")]
    pub fleet: bool,
    /// A worker's nodepools file, as NAME=FILE (repeatable or comma-separated; with `--fleet`).
    #[arg(
        long = "worker-nodepools",
        env = "TIERGATE_WORKER_NODEPOOLS",
        value_name = "NAME=FILE",
        value_delimiter = ',',
        value_parser = parse_named_path,
        requires = "fleet"
    )]
    pub worker_nodepools: Vec<(String, PathBuf)>,
    /// Kueue's namespace: where its Configuration is (ConfigMap `kueue-manager-config`), read with `--kubeconfig`
    /// when the policy has DRA classes, to check Kueue charges each one (`resources.deviceClassMappings`).
    #[arg(long, env = "TIERGATE_KUEUE_NAMESPACE", default_value = "kueue-system")]
    pub kueue_namespace: String,
}

/// `tiergate explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// TierPolicy YAML file.
    #[arg(long, env = "TIERGATE_POLICY")]
    pub policy: PathBuf,
    /// Cluster view (namespaces and their labels, nodes).
    #[arg(long, env = "TIERGATE_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// The workload (YAML or JSON) to decide on, or an AdmissionReview.
    #[arg(env = "TIERGATE_WORKLOAD")]
    pub workload: PathBuf,
    /// Placement flags.
    #[command(flatten)]
    pub placement: PlacementArgs,
}

/// TLS serving flags shared by `run` and `webhook`.
#[derive(Debug, Args, Clone)]
pub struct TlsArgs {
    /// PEM certificate chain; reloaded when the file changes.
    #[arg(long, env = "TIERGATE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key; reloaded when the file changes.
    #[arg(long, env = "TIERGATE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// `tiergate run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file (default: in-cluster config, then `KUBECONFIG`).
    #[arg(long, env = "TIERGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// HTTPS address of the admission webhook.
    #[arg(long, env = "TIERGATE_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub webhook_listen: SocketAddr,
    /// Plain-HTTP address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "TIERGATE_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,
    /// TLS files.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Scheduler agent base URL; overrides the policy's `spec.scoring.url`.
    #[arg(long, env = "TIERGATE_AGENT_URL")]
    pub agent_url: Option<String>,
    /// Placement flags.
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Webhook limits.
    #[command(flatten)]
    pub limits: LimitsArgs,
    /// The daemon's own namespace (always excluded from mutation).
    #[arg(long, env = "TIERGATE_NAMESPACE", default_value = "tiergate-system")]
    pub namespace: String,
    /// Name of the TierPolicy to reconcile. When not given: the only TierPolicy if exactly one exists at start,
    /// else `default` (with several and none called `default`, nothing is reconciled and the log, `/readyz` and
    /// `tiergate_blocked{reason="policy_not_found"}` list them).
    #[arg(long, env = "TIERGATE_POLICY_NAME")]
    pub policy_name: Option<String>,
    /// Create `--namespace` when it does not exist (the Lease lives there; the chart creates it, a
    /// `tiergate run --kubeconfig` from a laptop may not find it). Needs `create` on namespaces.
    #[arg(long, env = "TIERGATE_CREATE_LEASE_NAMESPACE", default_value_t = false)]
    pub create_lease_namespace: bool,
    /// Also apply the in-server gate's MutatingAdmissionPolicy where the API server serves it (Kubernetes 1.36+):
    /// with the webhook down, plain GPU workloads are then stored in their tier instead of refused, at the price of
    /// a JSON patch of every GPU create inside the API server, webhook up or down (docs/admission.md, "The
    /// in-server gate"). Off: the validating half alone holds the gate (GPU workloads refused while the webhook is
    /// down), which keeps it within a millisecond per create.
    #[arg(
        long,
        env = "TIERGATE_MUTATING_GATE",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "true|false"
    )]
    pub mutating_gate: bool,
    /// The MutatingWebhookConfiguration that owns the in-server gate (the chart passes its own registration): the
    /// gate's policies, bindings and parameters carry an owner reference to it, so Kubernetes' garbage collector
    /// removes them with it (`helm uninstall`); while it does not exist no gate is applied (one left is pruned),
    /// and the gate is pruned when the served TierPolicy is deleted. Unset: the TierPolicy owns the gate like every
    /// other object it makes, and the gate stays until the policy is deleted.
    #[arg(long, env = "TIERGATE_GATE_OWNER")]
    pub gate_owner: Option<String>,
    /// Name of the leader-election Lease in `--namespace`.
    #[arg(long, env = "TIERGATE_LEASE_NAME", default_value = "tiergate-leader")]
    pub lease_name: String,
    /// Kueue's namespace: where the kubeconfig Secrets of `spec.clusters[]` are (MultiKueue reads them there;
    /// tiergate reads them to reconcile each worker), and Kueue's Configuration (ConfigMap `kueue-manager-config`,
    /// whose `deviceClassMappings` the policy's DRA classes need).
    #[arg(long, env = "TIERGATE_KUEUE_NAMESPACE", default_value = "kueue-system")]
    pub kueue_namespace: String,
    /// Manage the webhook certificate: a CA and serving certificate in this Secret, the CA bundle in the
    /// MutatingWebhookConfiguration `--webhook-config-name`. Off when cert-manager provides the certificate.
    #[arg(long, env = "TIERGATE_SELF_MANAGED_CERTS", default_value_t = false)]
    pub self_managed_certs: bool,
    /// Secret holding the self-managed CA and serving certificate.
    #[arg(long, env = "TIERGATE_CERT_SECRET", default_value = "tiergate-webhook-tls")]
    pub cert_secret: String,
    /// Service name the serving certificate is issued for.
    #[arg(long, env = "TIERGATE_SERVICE_NAME", default_value = "tiergate-webhook")]
    pub service_name: String,
    /// MutatingWebhookConfiguration whose CA bundle tiergate keeps current.
    #[arg(long, env = "TIERGATE_WEBHOOK_CONFIG_NAME", default_value = "tiergate")]
    pub webhook_config_name: String,
}

/// `tiergate webhook`.
#[derive(Debug, Args)]
pub struct WebhookArgs {
    /// Decide from a policy file (and an optional cluster view) instead of a cluster's caches.
    #[arg(long, env = "TIERGATE_OFFLINE", requires = "policy")]
    pub offline: bool,
    /// TierPolicy YAML file (with `--offline`).
    #[arg(long, env = "TIERGATE_POLICY")]
    pub policy: Option<PathBuf>,
    /// Cluster view (with `--offline`).
    #[arg(long, env = "TIERGATE_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// Kubeconfig file when not offline.
    #[arg(long, env = "TIERGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Name of the TierPolicy to decide from when not offline.
    #[arg(long, env = "TIERGATE_POLICY_NAME", default_value = "default")]
    pub policy_name: String,
    /// The webhook's own namespace (always excluded from mutation) when not offline.
    #[arg(long, env = "TIERGATE_NAMESPACE", default_value = "tiergate-system")]
    pub namespace: String,
    /// HTTPS address.
    #[arg(long, env = "TIERGATE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Plain-HTTP address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "TIERGATE_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,
    /// TLS files.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Scheduler agent base URL; overrides the policy's `spec.scoring.url`.
    #[arg(long, env = "TIERGATE_AGENT_URL")]
    pub agent_url: Option<String>,
    /// Placement flags.
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Webhook limits.
    #[command(flatten)]
    pub limits: LimitsArgs,
}

/// The webhook's limits, shared by `run` and `webhook` (docs/operations.md has the memory arithmetic).
#[derive(Debug, Args, Clone)]
pub struct LimitsArgs {
    /// The MutatingWebhookConfiguration's `timeoutSeconds` (the chart passes `webhook.timeoutSeconds`); the
    /// decision deadline is 4/5 of it and scheduler-agent calls get at most 3/4 of that.
    #[arg(long, env = "TIERGATE_WEBHOOK_TIMEOUT_SECONDS", default_value_t = DEFAULT_WEBHOOK_TIMEOUT_SECONDS)]
    pub webhook_timeout_seconds: u64,
    /// Decision deadline in milliseconds instead of the derived one; must leave 500 ms of the webhook timeout.
    #[arg(long, env = "TIERGATE_DECISION_TIMEOUT_MS")]
    pub decision_timeout_ms: Option<u64>,
    /// Request bytes in flight over all connections, a quantity such as `32Mi`; past it requests get 429.
    #[arg(long, env = "TIERGATE_MAX_INFLIGHT_BYTES", default_value = "32Mi", value_parser = parse_byte_quantity)]
    pub max_inflight_bytes: usize,
    /// Requests in flight over all connections; past it requests get 429.
    #[arg(long, env = "TIERGATE_MAX_INFLIGHT_REQUESTS", default_value_t = DEFAULT_MAX_INFLIGHT_REQUESTS)]
    pub max_inflight_requests: usize,
}

impl LimitsArgs {
    /// The limits, or why the combination cannot work (naming the flag).
    pub fn limits(&self) -> Result<WebhookLimits, LimitsError> {
        build_limits(
            self.webhook_timeout_seconds,
            self.decision_timeout_ms,
            self.max_inflight_bytes,
            self.max_inflight_requests,
        )
    }
}

/// A whole, positive number of bytes written as a Kubernetes quantity (`33554432`, `32Mi`).
fn parse_byte_quantity(value: &str) -> Result<usize, String> {
    let parsed = parse_quantity(value.trim())
        .ok_or_else(|| format!("{value:?} is not a quantity; use bytes such as 33554432 or 32Mi"))?;
    let whole = parsed.value.fract() == 0.0 && parsed.value > 0.0 && parsed.value <= u32::MAX as f64;
    if !whole {
        return Err(format!("{value:?} must be a whole number of bytes between 1 and 4Gi"));
    }
    Ok(parsed.value as usize)
}

/// Placement flags shared by `run`, `webhook` and `explain`.
#[derive(Debug, Args, Clone, Default)]
pub struct PlacementArgs {
    /// Namespaces placement (base/weight strategies, GPU pinning) leaves alone, comma-separated, on top of the
    /// policy's exclusions; seed 004's variable, e.g. `kube-system,kube-public,default`.
    #[arg(long, env = "BLOCKLISTED_NAMESPACE_LIST", value_parser = parse_namespace_list)]
    pub blocklisted_namespaces: Option<NamespaceList>,
}

impl PlacementArgs {
    /// The namespaces to pass to `PlacementLedger::with_excluded_namespaces`.
    pub fn excluded_namespaces(&self) -> Vec<String> {
        self.blocklisted_namespaces.clone().unwrap_or_default().0
    }
}

/// Namespace names from seed 004's `BLOCKLISTED_NAMESPACE_LIST` format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceList(pub Vec<String>);

fn parse_namespace_list(value: &str) -> Result<NamespaceList, NamespaceListError> {
    parse_namespace_blocklist(value).map(NamespaceList)
}

/// `tiergate agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// HTTP address of `POST /v1/score`.
    #[arg(long, env = "TIERGATE_LISTEN", default_value = "0.0.0.0:8090")]
    pub listen: SocketAddr,
    /// TierPolicy whose GPU classes (and memory sizes) the built-in scorer knows.
    #[arg(long, env = "TIERGATE_POLICY")]
    pub policy: Option<PathBuf>,
    /// Cluster view whose nodes give the GPU inventory.
    #[arg(long, env = "TIERGATE_CLUSTER")]
    pub cluster: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_seed_004_blocklist_feeds_the_webhooks_placement_and_a_bad_entry_is_named() {
        let parsed = Cli::try_parse_from([
            "tiergate",
            "webhook",
            "--offline",
            "--policy",
            "policy.yaml",
            "--blocklisted-namespaces",
            "kube-public, default",
        ])
        .unwrap();
        let Command::Webhook(args) = parsed.command else { panic!("not the webhook command") };
        assert_eq!(args.placement.excluded_namespaces(), ["kube-public", "default"]);
        let error =
            Cli::try_parse_from(["tiergate", "explain", "--policy", "p", "w.yaml", "--blocklisted-namespaces", "a,,b"])
                .unwrap_err()
                .to_string();
        assert!(error.contains("entry 2"), "{error}");
    }

    #[test]
    fn every_flag_can_come_from_the_environment() {
        fn check(command: &clap::Command, path: &str) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                assert!(arg.get_env().is_some(), "{path} --{id} has no TIERGATE_ environment variable");
            }
            for sub in command.get_subcommands() {
                check(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        check(&Cli::command(), "tiergate");
    }

    #[test]
    fn webhook_limits_parse_from_quantities_and_a_bad_combination_names_the_flag() {
        let parsed = Cli::try_parse_from([
            "tiergate",
            "webhook",
            "--max-inflight-bytes",
            "48Mi",
            "--webhook-timeout-seconds",
            "10",
        ])
        .unwrap();
        let Command::Webhook(args) = parsed.command else { panic!("not the webhook command") };
        let limits = args.limits.limits().unwrap();
        assert_eq!(limits.max_inflight_bytes, 48 * 1024 * 1024);
        assert_eq!(limits.decision_timeout, std::time::Duration::from_secs(8));
        let parsed = Cli::try_parse_from(["tiergate", "webhook", "--decision-timeout-ms", "8000"]).unwrap();
        let Command::Webhook(args) = parsed.command else { panic!("not the webhook command") };
        let error = args.limits.limits().unwrap_err().to_string();
        assert!(error.contains("--decision-timeout-ms 8000") && error.contains("--webhook-timeout-seconds"), "{error}");
        let error = Cli::try_parse_from(["tiergate", "webhook", "--max-inflight-bytes", "100m"]).unwrap_err();
        assert!(error.to_string().contains("whole number of bytes"), "{error}");
    }
}
