//! `tiergate render`: reads a policy (and a cluster view), validates it and prints the desired Kueue objects as
//! a YAML stream or a JSON `List`. Without `--policy` it renders the embedded sample policy and cluster view.

use std::io::Write;
use std::process::ExitCode;

use super::CmdError;
use crate::cli::{OutputFormat, RenderArgs};
use crate::inputs::{SAMPLE_CLUSTER, load_cluster_view, load_policy, parse_cluster_view};
use crate::plan::desired;
use crate::validation::validate_policy;
use crate::view::ClusterView;

/// Runs `tiergate render`.
pub fn run(args: RenderArgs) -> Result<ExitCode, CmdError> {
    let policy = load_policy(args.policy.as_deref())?;
    let view = match (&args.policy, &args.cluster) {
        (_, Some(path)) => Some(load_cluster_view(path)?),
        (None, None) => Some(parse_cluster_view(SAMPLE_CLUSTER, "embedded sample cluster view")?),
        (Some(_), None) => None,
    };
    if let Err(errors) = validate_policy(&policy) {
        eprintln!("{errors}");
        return Ok(ExitCode::FAILURE);
    }
    let desired = desired(&policy, view.as_ref().unwrap_or(&ClusterView::default()));
    if view.is_none() {
        eprintln!(
            "note: no --cluster given, so only cluster-scoped objects are rendered; LocalQueues need a cluster view \
             (namespaces and their labels): pass --cluster FILE, e.g. from `kubectl get ns,nodes -o yaml`"
        );
    }
    for note in &desired.notes {
        eprintln!("note: {note}");
    }
    // The arithmetic goes to stderr so stdout stays a stream `kubectl apply -f -` accepts.
    eprint!("{}", crate::plan::quota::quota_summary(&policy.spec));
    let text = match args.output {
        OutputFormat::Yaml => desired.to_yaml_stream()?,
        OutputFormat::Json => format!("{}\n", serde_json::to_string_pretty(&desired.to_json_list()?)?),
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
