//! `kubectl tiergate why KIND/NAME -n NS`: gets the workload and lists what surrounds it (read-only), re-runs
//! tiergate's decision on it the way `tiergate explain` does, and prints the answer; I/O at this edge, the answer
//! is built by `crate::answers::why`.

use std::process::ExitCode;

use super::CmdError;
use super::status::render_answer;
use crate::admission::{Decision, build_request, decide_review};
use crate::answers::why::{build_live_snapshot, parse_target};
use crate::answers::{WhyAnswer, WhyInputs, build_why_answer};
use crate::cli::{Exit, WhyArgs};
use crate::live::{KubectlConnection, WhyFetched, connect, fetch_why_inputs};
use crate::placement::PlacementLedger;
use crate::scoring::Scorer;
use crate::view::index_claim_templates;

/// Runs `why`.
pub async fn run(args: WhyArgs) -> Result<ExitCode, CmdError> {
    // A target no adapter handles is refused before any connection is made.
    parse_target(&args.target)?;
    let connection = KubectlConnection { kubeconfig: args.kubectl.kubeconfig, context: args.kubectl.context };
    let (client, default_namespace) = connect(&connection).await?;
    let namespace = args.namespace.unwrap_or(default_namespace);
    let (policy_name, _) = super::resolve_policy_name(&client, args.policy_name.as_deref()).await;
    let answer = build_live_answer(&client, &args.target, &namespace, &policy_name).await?;
    super::write_stdout(&render_answer(&answer, args.output, answer.to_table())?)?;
    Ok(Exit::Success.into())
}

/// The answer to `why TARGET -n NAMESPACE` (`KIND/NAME`) for TierPolicy `policy_name`: the live objects read, the
/// decision re-run on them, and the answer built from both (what the plugin prints; the e2e suites call it too).
pub async fn build_live_answer(
    client: &kube::Client,
    target: &str,
    namespace: &str,
    policy_name: &str,
) -> Result<WhyAnswer, CmdError> {
    let (adapter, name) = parse_target(target)?;
    let fetched = fetch_why_inputs(client, adapter, namespace, &name, policy_name).await?;
    for note in [&fetched.tier_local_queues_note, &fetched.karpenter_note].into_iter().flatten() {
        eprintln!("note: {note}");
    }
    let decision = decide_live(&fetched, namespace).await?;
    Ok(build_why_answer(&WhyInputs {
        adapter,
        object: &fetched.object,
        policy: fetched.policy.as_ref(),
        policy_name,
        namespace_labels: &fetched.namespace_labels,
        local_queues: &fetched.local_queues,
        decision: decision.as_ref(),
        workloads: &fetched.workloads,
        provisioning_requests: &fetched.provisioning_requests,
        tier_local_queues: &fetched.tier_local_queues,
        karpenter: &fetched.karpenter,
    }))
}

/// tiergate's decision on the live object, as if it were created now: the `explain` path on a snapshot of the
/// live policy, namespace and LocalQueues.
pub async fn decide_live(fetched: &WhyFetched, namespace: &str) -> Result<Option<Decision>, CmdError> {
    let Some(policy) = fetched.policy.clone() else { return Ok(None) };
    let mut snapshot = build_live_snapshot(policy, namespace, &fetched.namespace_labels, &fetched.local_queues);
    snapshot.claim_templates = index_claim_templates(fetched.claim_templates.iter().cloned());
    let request = build_request(fetched.object.clone())?;
    let ledger = PlacementLedger::default();
    Ok(Some(decide_review(&request, &snapshot, &ledger, &Scorer::default()).await))
}
