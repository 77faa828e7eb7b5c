//! The command line: every subcommand and flag, each flag also read from `TIERGATE_<FLAG>` (its long name upper-cased,
//! `-` as `_`), the resolution of `--policy-name`, and the exit statuses every subcommand's `--help` lists; reads
//! only the environment.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use tiergate_compat::namespaces::{NamespaceListError, parse_namespace_blocklist};

use crate::admission::limits::{
    DEFAULT_MAX_INFLIGHT_REQUESTS, DEFAULT_WEBHOOK_TIMEOUT_SECONDS, LimitsError, WebhookLimits, build_limits,
};
use crate::validation::quantity::parse_quantity;

/// tiergate: Kueue tiers, GPU classes and priorities from one TierPolicy.
#[derive(Debug, Parser)]
#[command(name = "tiergate", version, about, long_about = None, after_help = exit_status_help(None))]
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
    #[command(after_help = exit_status_help(Some("render")))]
    Render(RenderArgs),
    /// Check that every tier matches exactly one nodepool (Karpenter NodePools or node-group templates).
    #[command(after_help = exit_status_help(Some("check")))]
    Check(CheckArgs),
    /// Print tiergate's two CustomResourceDefinitions: TierPolicy and TierGateParameters (the in-server gate's
    /// parameters), as one YAML stream.
    #[command(after_help = exit_status_help(Some("crd")))]
    Crd,
    /// Run the webhook's decision offline on a workload and print the result, the patch and each reason; exit 3
    /// when the webhook would deny it.
    #[command(after_help = exit_status_help(Some("explain")))]
    Explain(ExplainArgs),
    /// Run the daemon: reconcile the policy into Kueue objects and serve the webhook.
    #[command(after_help = exit_status_help(Some("run")))]
    Run(RunArgs),
    /// Serve only the admission webhook.
    #[command(after_help = exit_status_help(Some("webhook")))]
    Webhook(WebhookArgs),
    /// Serve the built-in scorer as a scheduler agent (`POST /v1/score`).
    #[command(after_help = exit_status_help(Some("agent")))]
    Agent(AgentArgs),
    /// Per tier, live: ClusterQueue usage against quota per flavor, workload counts, borrowing, nodepools and the
    /// TierPolicy's conditions (`kubectl tiergate status`).
    #[command(after_help = exit_status_help(Some("status")))]
    Status(StatusArgs),
    /// Why a live workload is pending or landed where it did: its tier, tiergate's decision, Kueue's state and
    /// one sentence on what holds it (`kubectl tiergate why job/NAME -n NS`).
    #[command(after_help = exit_status_help(Some("why")))]
    Why(WhyArgs),
}

/// How a command ends. `cmd/` returns these (and `main` [`Exit::Failure`] for an error), clap exits with
/// [`Exit::Usage`] on a bad command line, and `--help` lists each command's from [`EXIT_STATUSES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: the command did what it was asked.
    Success,
    /// 1: it failed, or what it checked does not hold; stderr says why.
    Failure,
    /// 2: the command line is wrong (clap's own exit status for a usage error).
    Usage,
    /// 3: `explain` only: the webhook would deny the workload.
    Denied,
}

impl Exit {
    /// The process exit status.
    pub const fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
            Self::Usage => 2,
            Self::Denied => 3,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit.code())
    }
}

/// What [`Exit::Usage`] means everywhere; added to each command's list.
const USAGE_MEANING: &str = "the command line is wrong (an unknown flag, a missing or bad value)";

/// The exit statuses of the commands that serve until stopped (`run`, `webhook`).
const SERVER_EXIT_STATUSES: &[(Exit, &str)] = &[
    (Exit::Success, "stopped by SIGTERM or ctrl-c"),
    (Exit::Failure, "failed to start, or a server stopped with an error"),
];

/// Each subcommand's exit statuses besides [`Exit::Usage`], and what each means there: the one table `--help`,
/// docs/reference/cli.md and the tests read.
pub const EXIT_STATUSES: &[(&str, &[(Exit, &str)])] = &[
    (
        "render",
        &[
            (Exit::Success, "the objects (or with --kueue-config the Configuration fragment) were printed"),
            (Exit::Failure, "the policy is invalid, an input could not be read, or the API server could not be asked"),
        ],
    ),
    (
        "check",
        &[
            (
                Exit::Success,
                "every tier matches exactly one pool (and Kueue's Configuration has what the policy needs)",
            ),
            (
                Exit::Failure,
                "a tier matches no pool or several, Kueue's Configuration lacks what the policy needs, the policy is \
                 invalid, or an input could not be read",
            ),
        ],
    ),
    ("crd", &[(Exit::Success, "the CRDs were printed"), (Exit::Failure, "stdout could not be written")]),
    (
        "explain",
        &[
            (Exit::Success, "the webhook would admit the workload (patched, unchanged, or left alone)"),
            (Exit::Failure, "the policy is invalid or an input could not be read"),
            (Exit::Denied, "the webhook would deny the workload (a rule, an invalid review, or fail-closed)"),
        ],
    ),
    ("run", SERVER_EXIT_STATUSES),
    ("webhook", SERVER_EXIT_STATUSES),
    ("agent", &[(Exit::Success, "stopped by SIGTERM or ctrl-c"), (Exit::Failure, "failed to start or to serve")]),
    (
        "status",
        &[
            (Exit::Success, "the answer was printed"),
            (Exit::Failure, "the cluster could not be read, or the TierPolicy or tier does not exist"),
        ],
    ),
    (
        "why",
        &[
            (Exit::Success, "the answer was printed"),
            (Exit::Failure, "the cluster could not be read, or the workload does not exist"),
        ],
    ),
];

/// The exit statuses of `subcommand` (`None`: the top-level command, any subcommand), [`Exit::Usage`] included, in
/// the order of their codes.
pub fn exit_statuses(subcommand: Option<&str>) -> Vec<(Exit, &'static str)> {
    let mut statuses: Vec<(Exit, &'static str)> = match subcommand {
        Some(name) => EXIT_STATUSES
            .iter()
            .filter(|(command, _)| *command == name)
            .flat_map(|(_, statuses)| statuses.iter().copied())
            .collect(),
        None => vec![
            (Exit::Success, "the command did what it was asked"),
            (Exit::Failure, "it failed, or what it checked does not hold; stderr says why"),
            (Exit::Denied, "explain: the webhook would deny the workload"),
        ],
    };
    statuses.push((Exit::Usage, USAGE_MEANING));
    statuses.sort_by_key(|(exit, _)| exit.code());
    statuses
}

/// The "Exit status:" section of a command's `--help`.
pub fn exit_status_help(subcommand: Option<&str>) -> String {
    let mut text = "Exit status:".to_owned();
    for (exit, meaning) in exit_statuses(subcommand) {
        text.push_str(&format!("\n  {}  {meaning}", exit.code()));
    }
    text
}

/// `--policy-name`'s help, the same wherever it is taken.
const POLICY_NAME_HELP: &str = "Name of the TierPolicy (default: the only TierPolicy when exactly one exists, else \
                                `default`)";

/// Which TierPolicy a command serves or reads, and why when `--policy-name` was not given (`given`): the only one
/// when exactly one exists, else `default`. `existing`: every TierPolicy's name, or why they could not be listed
/// (`None`: not listed). With several and none named `default`, none, or a failed list, the reason says so (the
/// daemon then reports `policy_not_found` until one named `default` exists).
pub fn choose_policy_name(
    given: Option<&str>,
    existing: Option<&Result<Vec<String>, String>>,
) -> (String, Option<String>) {
    const DEFAULT: &str = "default";
    if let Some(given) = given {
        return (given.to_owned(), None);
    }
    let names = match existing {
        Some(Ok(names)) => names,
        Some(Err(error)) => {
            return (
                DEFAULT.to_owned(),
                Some(format!("--policy-name not given and listing TierPolicies failed: {error}")),
            );
        }
        None => return (DEFAULT.to_owned(), None),
    };
    match names.as_slice() {
        [only] => (only.clone(), Some("--policy-name not given and it is the only TierPolicy".to_owned())),
        [] => (DEFAULT.to_owned(), Some("--policy-name not given and no TierPolicy exists yet".to_owned())),
        several if several.iter().any(|name| name == DEFAULT) => (
            DEFAULT.to_owned(),
            Some("--policy-name not given; several TierPolicies exist, one is named default".to_owned()),
        ),
        several => (
            DEFAULT.to_owned(),
            Some(format!(
                "--policy-name not given and several TierPolicies exist ({}), none named default: pass --policy-name",
                several.join(", ")
            )),
        ),
    }
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
    let mut command = with_blocklist_compatibility(Cli::command());
    if args.first().is_some_and(|argv0| is_plugin_invocation(Path::new(argv0))) {
        command = command.name(PLUGIN_BINARY).bin_name("kubectl tiergate").display_name("kubectl tiergate");
    }
    let matches = command.try_get_matches_from_mut(args).map_err(|error| name_missing_pools(&mut command, error))?;
    Cli::from_arg_matches(&matches)
}

/// clap names a missing required group by its usage (`<--nodepools <NODEPOOLS>|--kubeconfig ...|--fleet>`); `check`
/// says in words that any one of them will do.
fn name_missing_pools(command: &mut clap::Command, error: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let pools_missing = error.kind() == ErrorKind::MissingRequiredArgument
        && matches!(
            error.get(ContextKind::InvalidArg),
            Some(ContextValue::Strings(missing))
                if missing.iter().any(|arg| arg.contains("--nodepools") && arg.contains("--fleet"))
        );
    match command.find_subcommand_mut("check") {
        Some(check) if pools_missing => check.error(
            ErrorKind::MissingRequiredArgument,
            "one of --nodepools, --kubeconfig or --fleet is required: the pools to check the tiers against",
        ),
        _ => error,
    }
}

/// The variable of the system `--blocklisted-namespaces` replaces (custom-kube-scheduler-webhook), still read when
/// `TIERGATE_BLOCKLISTED_NAMESPACES` is unset.
pub const BLOCKLIST_COMPATIBILITY_ENV: &str = "BLOCKLISTED_NAMESPACE_LIST";

/// `command` with `--blocklisted-namespaces` read from [`BLOCKLIST_COMPATIBILITY_ENV`] when only that variable is
/// set: the one place the old name is honoured, with the same parsing and errors as the new one.
fn with_blocklist_compatibility(command: clap::Command) -> clap::Command {
    const ID: &str = "blocklisted_namespaces";
    if std::env::var_os("TIERGATE_BLOCKLISTED_NAMESPACES").is_some()
        || std::env::var_os(BLOCKLIST_COMPATIBILITY_ENV).is_none()
    {
        return command;
    }
    let names: Vec<String> = command
        .get_subcommands()
        .filter(|sub| sub.get_arguments().any(|arg| arg.get_id() == ID))
        .map(|sub| sub.get_name().to_owned())
        .collect();
    names.into_iter().fold(command, |command, name| {
        command.mut_subcommand(name, |sub| sub.mut_arg(ID, |arg| arg.env(BLOCKLIST_COMPATIBILITY_ENV)))
    })
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
    #[arg(long, env = "TIERGATE_POLICY_NAME", help = POLICY_NAME_HELP)]
    pub policy_name: Option<String>,
    /// Show the counted use instead: per tier and tenant namespace, this period and the last, in hours of one
    /// unit (GPU-hours), with each budget's limit and when it resets.
    #[arg(long, env = "TIERGATE_USAGE", default_value_t = false)]
    pub usage: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", env = "TIERGATE_OUTPUT", value_enum, default_value_t = AnswerFormat::Table)]
    pub output: AnswerFormat,
}

/// `tiergate why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The workload, `KIND/NAME`: a kind tiergate handles (Job, JobSet, Pod, Deployment, StatefulSet), any case,
    /// singular or plural, e.g. `job/train`.
    pub target: String,
    /// Its namespace (default: the kubeconfig context's namespace); `--namespace` as in kubectl.
    #[arg(
        short = 'n',
        long = "workload-namespace",
        visible_alias = "namespace",
        env = "TIERGATE_WORKLOAD_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub namespace: Option<String>,
    /// Connection.
    #[command(flatten)]
    pub kubectl: KubectlArgs,
    #[arg(long, env = "TIERGATE_POLICY_NAME", help = POLICY_NAME_HELP)]
    pub policy_name: Option<String>,
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
    /// A worker cluster's own view (its nodes), as NAME=FILE (repeatable or comma-separated), for the policy's
    /// `spec.clusters`; a worker without one is rendered from the `--cluster` view, with a note.
    #[arg(
        long = "worker-view",
        env = "TIERGATE_WORKER_VIEW",
        value_name = "NAME=FILE",
        value_delimiter = ',',
        value_parser = parse_named_path
    )]
    pub worker_views: Vec<(String, PathBuf)>,
    /// The in-server gate to render: `validate-and-mutate` for Kubernetes 1.36+ (ValidatingAdmissionPolicies and
    /// MutatingAdmissionPolicies), `validate-only` for older API servers, which do not serve MutatingAdmissionPolicy
    /// (default: the one the Kubernetes version serves).
    #[arg(long = "gate", env = "TIERGATE_GATE", value_enum)]
    pub gate: Option<GateArg>,
    /// The Kubernetes version of the API server the objects are for, MAJOR.MINOR from 1.33 to 1.36: before 1.36
    /// only the gate's ValidatingAdmissionPolicies are rendered (as `--gate validate-only`), from 1.36 also its
    /// MutatingAdmissionPolicies (default: the version of `--kubeconfig`'s API server, else 1.36, said on stderr).
    #[arg(
        long,
        env = "TIERGATE_KUBERNETES_VERSION",
        value_name = "MAJOR.MINOR",
        value_parser = KubernetesVersion::parse_supported
    )]
    pub kubernetes_version: Option<KubernetesVersion>,
    /// Read the Kubernetes version from this kubeconfig's API server (`GET /version`) when `--kubernetes-version`
    /// is not given.
    #[arg(long, env = "TIERGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for `--kubeconfig` (default: its current context).
    #[arg(long, env = "TIERGATE_CONTEXT")]
    pub context: Option<String>,
    /// Print only what Kueue's Configuration needs from the policy, instead of the objects: the DRA classes'
    /// `resources.deviceClassMappings` and, where tiers share fairly among their tenants, `admissionFairSharing`.
    /// Without it these go to stderr.
    #[arg(long = "kueue-config", env = "TIERGATE_KUEUE_CONFIG")]
    pub kueue_config: bool,
    /// Render the quotas in force at this instant, RFC 3339 (e.g. `2026-12-24T20:00:00+01:00`) or `now`: each tier's
    /// quota window in force then applied, as the daemon would apply it (default: the base `quotas`; the tiers'
    /// windows are named on stderr).
    #[arg(long = "at", env = "TIERGATE_AT", value_name = "INSTANT")]
    pub at: Option<String>,
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

/// A Kubernetes release, `MAJOR.MINOR`: what `render --kubernetes-version` takes and an API server reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubernetesVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl KubernetesVersion {
    /// The oldest release `render` renders for.
    pub const OLDEST: Self = Self { major: 1, minor: 33 };
    /// The newest release `render` renders for.
    pub const NEWEST: Self = Self { major: 1, minor: 36 };
    /// The first release that serves MutatingAdmissionPolicy (`admissionregistration.k8s.io/v1`).
    pub const MUTATING_POLICIES: Self = Self { major: 1, minor: 36 };

    /// Parses `1.34`, `v1.34` or `1.34.2` (the patch release is ignored).
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let mut parts = trimmed.strip_prefix('v').unwrap_or(trimmed).splitn(3, '.');
        let number = |part: Option<&str>| part.and_then(|part| part.parse::<u32>().ok());
        match (number(parts.next()), number(parts.next())) {
            (Some(major), Some(minor)) => Ok(Self { major, minor }),
            _ => Err(format!("{text:?} is not a Kubernetes version; write MAJOR.MINOR, e.g. 1.34")),
        }
    }

    /// Parses a version and refuses one outside [`Self::OLDEST`]..=[`Self::NEWEST`], naming the range.
    pub fn parse_supported(text: &str) -> Result<Self, String> {
        Self::parse(text)?.supported()
    }

    /// The version, or why `render` cannot render for it.
    pub fn supported(self) -> Result<Self, String> {
        if (Self::OLDEST..=Self::NEWEST).contains(&self) {
            Ok(self)
        } else {
            Err(format!(
                "Kubernetes {self} is not supported: tiergate renders for Kubernetes {} to {}",
                Self::OLDEST,
                Self::NEWEST
            ))
        }
    }

    /// The in-server gate an API server of this version can serve.
    pub fn gate(self) -> GateArg {
        if self >= Self::MUTATING_POLICIES { GateArg::ValidateAndMutate } else { GateArg::ValidateOnly }
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}.{}", self.major, self.minor)
    }
}

/// `NAME=PATH`, as `--worker-view` and `--worker-nodepools` take it.
fn parse_named_path(value: &str) -> Result<(String, PathBuf), String> {
    match value.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok((name.to_owned(), PathBuf::from(path))),
        _ => Err(format!("{value:?} is not NAME=FILE; write the worker's name from spec.clusters, `=`, and a file")),
    }
}

/// `tiergate check`: the pools come from `--nodepools`, `--kubeconfig` or `--fleet` (one or more of them).
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("pools").args(["nodepools", "kubeconfig", "fleet"]).required(true).multiple(true)))]
pub struct CheckArgs {
    /// TierPolicy YAML file.
    #[arg(long, env = "TIERGATE_POLICY")]
    pub policy: PathBuf,
    /// Karpenter NodePools (karpenter.sh/v1) and/or cluster-autoscaler node-group templates.
    #[arg(long, env = "TIERGATE_NODEPOOLS")]
    pub nodepools: Option<PathBuf>,
    /// Also check the live cluster: its Karpenter NodePools (when karpenter.sh/v1 is served) and node groups, and
    /// what it serves of the policy (the in-server gate's halves, DRA, Karpenter, and every field of the policy's
    /// Kueue objects, by a server-side dry-run apply that stores nothing and needs patch on them).
    #[arg(long, env = "TIERGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for `--kubeconfig` (default: its current context).
    #[arg(long, env = "TIERGATE_CONTEXT", requires = "kubeconfig")]
    pub context: Option<String>,
    /// Without `--kubeconfig`: also report what this Kubernetes version (MAJOR.MINOR, 1.33 to 1.36) serves of the
    /// policy, as `--kubeconfig` does for a live cluster (the in-server gate's halves, DRA from 1.34).
    #[arg(
        long,
        env = "TIERGATE_KUBERNETES_VERSION",
        value_name = "MAJOR.MINOR",
        value_parser = KubernetesVersion::parse_supported,
        conflicts_with = "kubeconfig"
    )]
    pub kubernetes_version: Option<KubernetesVersion>,
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
    #[arg(long, env = "TIERGATE_POLICY_NAME", help = POLICY_NAME_HELP)]
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
    /// How often the leader checkpoints the GPU-hour counts into the policy's `status.usage`, a duration such as
    /// `60s` or `5m`: a restart of every replica loses at most the use of workloads deleted within one interval
    /// (docs/guides/gpu-budgets.md).
    #[arg(long, env = "TIERGATE_USAGE_CHECKPOINT_INTERVAL", default_value = "60s", value_parser = parse_interval)]
    pub usage_checkpoint_interval: std::time::Duration,
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
    #[arg(long, env = "TIERGATE_POLICY_NAME", help = POLICY_NAME_HELP)]
    pub policy_name: Option<String>,
    /// The webhook's own namespace (always excluded from mutation) when not offline.
    #[arg(long, env = "TIERGATE_NAMESPACE", default_value = "tiergate-system")]
    pub namespace: String,
    /// HTTPS address of the admission webhook.
    #[arg(long, visible_alias = "listen", env = "TIERGATE_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
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
}

/// A duration such as `60s`, `5m` or `1m30s`, at least one second.
fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    let duration: k8s_openapi::jiff::SignedDuration =
        text.trim().parse().map_err(|_| format!("{text:?} is not a duration such as 60s or 5m"))?;
    std::time::Duration::try_from(duration)
        .ok()
        .filter(|interval| interval.as_secs() >= 1)
        .ok_or_else(|| format!("{text:?} is shorter than a second"))
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
    /// policy's exclusions, e.g. `kube-system,kube-public,default`; also read from custom-kube-scheduler-webhook's
    /// `BLOCKLISTED_NAMESPACE_LIST` when `TIERGATE_BLOCKLISTED_NAMESPACES` is unset.
    #[arg(long, env = "TIERGATE_BLOCKLISTED_NAMESPACES", value_parser = parse_namespace_list)]
    pub blocklisted_namespaces: Option<NamespaceList>,
}

impl PlacementArgs {
    /// The namespaces to pass to `PlacementLedger::with_excluded_namespaces`.
    pub fn excluded_namespaces(&self) -> Vec<String> {
        self.blocklisted_namespaces.clone().unwrap_or_default().0
    }
}

/// Namespace names from custom-kube-scheduler-webhook's `BLOCKLISTED_NAMESPACE_LIST` format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceList(pub Vec<String>);

fn parse_namespace_list(value: &str) -> Result<NamespaceList, NamespaceListError> {
    parse_namespace_blocklist(value).map(NamespaceList)
}

/// `tiergate agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// HTTP address of `POST /v1/score`.
    #[arg(long, visible_alias = "listen", env = "TIERGATE_AGENT_LISTEN", default_value = "0.0.0.0:8090")]
    pub agent_listen: SocketAddr,
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

    /// Every argument of every command, with the path of the command that takes it (global ones once, at the top).
    fn arguments() -> Vec<(String, clap::Arg)> {
        fn walk(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
            for arg in command.get_arguments() {
                if !matches!(arg.get_id().as_str(), "help" | "version") && (path == "tiergate" || !arg.is_global_set())
                {
                    out.push((path.to_owned(), arg.clone()));
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut out = Vec::new();
        walk(&Cli::command(), "tiergate", &mut out);
        out
    }

    /// `TIERGATE_<FLAG>`: the long name upper-cased, `-` as `_`.
    fn env_for(long: &str) -> String {
        format!("TIERGATE_{}", long.to_uppercase().replace('-', "_"))
    }

    #[test]
    fn every_flag_reads_exactly_the_environment_variable_its_long_name_gives() {
        let mut wrong = Vec::new();
        for (path, arg) in arguments() {
            let env = arg.get_env().map(|env| env.to_string_lossy().into_owned());
            match arg.get_long() {
                Some(long) if env.as_deref() != Some(env_for(long).as_str()) => {
                    wrong.push(format!("{path} --{long}: {env:?}, not {}", env_for(long)));
                }
                None if env.is_some() => wrong.push(format!("{path} <{}>: a positional reads {env:?}", arg.get_id())),
                _ => {}
            }
        }
        assert!(wrong.is_empty(), "every flag reads TIERGATE_<FLAG> and nothing else:\n{}", wrong.join("\n"));
    }

    /// The variables more than one command reads, each with its one meaning. A flag of the same long name in
    /// another command means the same; a new entry here is a decision that it does.
    const SHARED: &[(&str, &str)] = &[
        ("TIERGATE_POLICY", "a TierPolicy YAML file"),
        ("TIERGATE_CLUSTER", "a cluster view file"),
        ("TIERGATE_KUBECONFIG", "the kubeconfig file of the cluster to read"),
        ("TIERGATE_CONTEXT", "the kubeconfig context"),
        ("TIERGATE_KUBERNETES_VERSION", "the Kubernetes version the policy is rendered or checked for"),
        ("TIERGATE_OUTPUT", "the output format of the command"),
        ("TIERGATE_POLICY_NAME", "the TierPolicy served or read, resolved by choose_policy_name"),
        ("TIERGATE_NAMESPACE", "tiergate's own namespace"),
        ("TIERGATE_WEBHOOK_LISTEN", "the webhook's HTTPS address"),
        ("TIERGATE_ADMIN_LISTEN", "the admin server's address"),
        ("TIERGATE_TLS_CERT", "the webhook's certificate chain"),
        ("TIERGATE_TLS_KEY", "the webhook's private key"),
        ("TIERGATE_AGENT_URL", "the scheduler agent's base URL"),
        ("TIERGATE_KUEUE_NAMESPACE", "Kueue's namespace"),
        ("TIERGATE_BLOCKLISTED_NAMESPACES", "namespaces placement leaves alone"),
        ("TIERGATE_WEBHOOK_TIMEOUT_SECONDS", "the webhook limits (LimitsArgs)"),
        ("TIERGATE_DECISION_TIMEOUT_MS", "the webhook limits (LimitsArgs)"),
        ("TIERGATE_MAX_INFLIGHT_BYTES", "the webhook limits (LimitsArgs)"),
        ("TIERGATE_MAX_INFLIGHT_REQUESTS", "the webhook limits (LimitsArgs)"),
    ];

    #[test]
    fn no_two_commands_share_a_variable_unless_it_means_the_same_in_both() {
        let mut by_env: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
        for (path, arg) in arguments() {
            if let Some(env) = arg.get_env() {
                by_env.entry(env.to_string_lossy().into_owned()).or_default().push(path);
            }
        }
        let mut unexplained = Vec::new();
        for (env, commands) in &by_env {
            let mut distinct = commands.clone();
            distinct.dedup();
            assert_eq!(distinct.len(), commands.len(), "{env} is read twice by one command: {commands:?}");
            if commands.len() > 1 && !SHARED.iter().any(|(shared, _)| shared == env) {
                unexplained.push(format!("{env}: {}", commands.join(", ")));
            }
        }
        assert!(
            unexplained.is_empty(),
            "these variables are read by several commands; rename the flags if they mean different things, else add \
             them to SHARED with their one meaning:\n{}",
            unexplained.join("\n")
        );
        for (env, _) in SHARED {
            assert!(by_env.get(*env).is_some_and(|commands| commands.len() > 1), "{env} is no longer shared");
        }
    }

    #[test]
    fn every_command_lists_its_exit_statuses_in_its_help_from_the_table() {
        let mut command = Cli::command();
        for sub in command.get_subcommands_mut() {
            let name = sub.get_name().to_owned();
            assert!(EXIT_STATUSES.iter().any(|(listed, _)| *listed == name), "{name} has no exit statuses");
            let help = sub.render_help().to_string();
            let section = help.split_once("Exit status:").map(|(_, section)| section).unwrap_or_default();
            for (exit, meaning) in exit_statuses(Some(&name)) {
                assert!(section.contains(&format!("  {}  {meaning}", exit.code())), "{name}: {help}");
            }
        }
        let explain = exit_status_help(Some("explain"));
        assert!(explain.contains("  3  the webhook would deny"), "{explain}");
        assert_eq!((Exit::Success.code(), Exit::Failure.code(), Exit::Usage.code()), (0, 1, 2));
    }

    #[test]
    fn the_policy_name_has_one_help_text_wherever_it_is_taken() {
        let helps: Vec<(String, String)> = arguments()
            .into_iter()
            .filter(|(_, arg)| arg.get_long() == Some("policy-name"))
            .map(|(path, arg)| (path, arg.get_help().map(ToString::to_string).unwrap_or_default()))
            .collect();
        let paths: Vec<&str> = helps.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(paths, ["tiergate run", "tiergate webhook", "tiergate status", "tiergate why"]);
        assert!(helps.iter().all(|(_, help)| help == POLICY_NAME_HELP), "{helps:?}");
    }

    #[test]
    fn check_needs_one_of_nodepools_kubeconfig_or_fleet_and_takes_any_of_them() {
        let error = try_parse_cli(["tiergate", "check", "--policy", "p.yaml"]).unwrap_err().to_string();
        assert!(error.contains("one of --nodepools, --kubeconfig or --fleet is required"), "{error}");
        for flag in [&["--nodepools", "n.yaml"][..], &["--kubeconfig", "k"], &["--fleet"]] {
            Cli::try_parse_from([&["tiergate", "check", "--policy", "p.yaml"][..], flag].concat()).unwrap();
        }
        Cli::try_parse_from(["tiergate", "check", "--policy", "p", "--nodepools", "n", "--kubeconfig", "k"]).unwrap();
    }

    #[test]
    fn kubernetes_versions_parse_and_outside_the_supported_range_name_it() {
        assert_eq!(KubernetesVersion::parse("1.34").unwrap(), KubernetesVersion { major: 1, minor: 34 });
        assert_eq!(KubernetesVersion::parse("v1.33.2").unwrap(), KubernetesVersion { major: 1, minor: 33 });
        assert!(KubernetesVersion::parse("latest").unwrap_err().contains("MAJOR.MINOR"));
        let error = KubernetesVersion::parse_supported("1.32").unwrap_err();
        assert!(error.contains("1.33 to 1.36"), "{error}");
        assert!(KubernetesVersion::parse_supported("1.37").is_err());
        assert_eq!(KubernetesVersion::parse("1.35").unwrap().gate(), GateArg::ValidateOnly);
        assert_eq!(KubernetesVersion::parse("1.36").unwrap().gate(), GateArg::ValidateAndMutate);
    }

    #[test]
    fn a_given_policy_name_is_served_as_given() {
        let names = Ok(vec!["default".to_owned()]);
        assert_eq!(choose_policy_name(Some("fleet"), Some(&names)), ("fleet".to_owned(), None));
    }

    #[test]
    fn without_a_policy_name_the_only_tier_policy_is_chosen_and_several_choose_default_or_name_them_all() {
        let names =
            |names: &[&str]| -> Result<Vec<String>, String> { Ok(names.iter().map(|n| (*n).to_owned()).collect()) };
        let (name, why) = choose_policy_name(None, Some(&names(&["spot-mix"])));
        assert_eq!(name, "spot-mix");
        assert!(why.unwrap().contains("the only TierPolicy"));
        let (name, _) = choose_policy_name(None, Some(&names(&["default", "fleet"])));
        assert_eq!(name, "default");
        let (name, why) = choose_policy_name(None, Some(&names(&["fleet", "spot-mix"])));
        assert_eq!(name, "default");
        assert!(why.unwrap().contains("(fleet, spot-mix), none named default"));
        let (name, why) = choose_policy_name(None, Some(&names(&[])));
        assert_eq!(name, "default");
        assert!(why.unwrap().contains("no TierPolicy exists yet"));
        let (name, why) = choose_policy_name(None, Some(&Err("forbidden".to_owned())));
        assert_eq!(name, "default");
        assert!(why.unwrap().contains("forbidden"));
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
