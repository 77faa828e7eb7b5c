//! `kubectl tiergate status`: lists the TierPolicy, its ClusterQueues and the nodepools (read-only) and prints
//! per tier usage against quota; I/O at this edge, the answer is built by `crate::answers::status`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;

use super::CmdError;
use crate::answers::usage::build_usage_answer;
use crate::answers::{StatusInputs, build_status_answer};
use crate::cli::{AnswerFormat, Exit, StatusArgs};
use crate::live::{KubectlConnection, connect, fetch_live_pools, fetch_status_inputs};

/// Runs `status`.
pub async fn run(args: StatusArgs) -> Result<ExitCode, CmdError> {
    let connection =
        KubectlConnection { kubeconfig: args.kubectl.kubeconfig.clone(), context: args.kubectl.context.clone() };
    let (client, _) = connect(&connection).await?;
    if args.usage {
        return run_usage(&client, &args).await;
    }
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

/// `status --usage`: the policy's counted use, with each tenant's tier read from its namespace's label.
async fn run_usage(client: &kube::Client, args: &StatusArgs) -> Result<ExitCode, CmdError> {
    let fetched = fetch_status_inputs(client, args.policy_name.as_deref(), false).await?;
    let policy = &fetched.policy;
    if let Some(tier) = args.tier.as_deref()
        && policy.spec.tier(tier).is_none()
    {
        let tiers: Vec<&str> = policy.spec.tiers.iter().map(|tier| tier.name.as_str()).collect();
        return Err(crate::answers::status::StatusError::UnknownTier {
            tier: tier.to_owned(),
            policy: kube::ResourceExt::name_any(policy),
            tiers: tiers.join(", "),
        }
        .into());
    }
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let tenant_tiers: BTreeMap<String, String> = match namespaces.list_metadata(&Default::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter_map(|namespace| {
                let labels = namespace.metadata.labels.clone().unwrap_or_default();
                let tier = policy.spec.tier_of(&labels)?;
                Some((namespace.metadata.name.clone()?, tier.name.clone()))
            })
            .collect(),
        Err(error) => {
            eprintln!("note: failed to list namespaces ({error}); the TIER column of tenants is empty");
            BTreeMap::new()
        }
    };
    let answer = build_usage_answer(policy, args.tier.as_deref(), &tenant_tiers);
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
