//! `kubectl tiergate status`: lists the TierPolicy, its ClusterQueues and the nodepools (read-only) and prints
//! per tier usage against quota; I/O at this edge, the answer is built by `crate::answers::status`.

use std::process::ExitCode;

use serde::Serialize;

use super::CmdError;
use crate::answers::{StatusInputs, build_status_answer};
use crate::cli::{AnswerFormat, Exit, StatusArgs};
use crate::live::{KubectlConnection, connect, fetch_live_pools, fetch_status_inputs};

/// Runs `status`.
pub async fn run(args: StatusArgs) -> Result<ExitCode, CmdError> {
    let connection = KubectlConnection { kubeconfig: args.kubectl.kubeconfig, context: args.kubectl.context };
    let (client, _) = connect(&connection).await?;
    let fetched = fetch_status_inputs(&client, args.policy_name.as_deref(), args.tier.is_some()).await?;
    if let Some(note) = &fetched.local_queues_note {
        eprintln!("note: {note}");
    }
    // Nodepools name where each flavor lands; without the rights to list them, the class labels stand in.
    let pools = match fetch_live_pools(&client).await {
        Ok(pools) => pools,
        Err(error) => {
            eprintln!("note: {error}; the NODEPOOL column shows the GPU classes' node labels instead");
            Vec::new()
        }
    };
    let answer = build_status_answer(&StatusInputs {
        policy: &fetched.policy,
        other_policies: &fetched.other_policies,
        cluster_queues: &fetched.cluster_queues,
        cohorts: &fetched.cohorts,
        pools: &pools,
        local_queues: &fetched.local_queues,
        tier: args.tier.as_deref(),
    })?;
    super::write_stdout(&render_answer(&answer, args.output, answer.to_table())?)?;
    Ok(Exit::Success.into())
}

/// `table` for people, or the typed answer as YAML or JSON.
pub(super) fn render_answer<T: Serialize>(answer: &T, format: AnswerFormat, table: String) -> Result<String, CmdError> {
    Ok(match format {
        AnswerFormat::Table => table,
        AnswerFormat::Yaml => serde_saphyr::to_string(answer)?,
        AnswerFormat::Json => format!("{}\n", serde_json::to_string_pretty(answer)?),
    })
}
