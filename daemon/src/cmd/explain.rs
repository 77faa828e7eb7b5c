//! `tiergate explain`: runs the webhook's decision offline on one workload and prints the result, the patch and
//! each reason; reads files, writes stdout.

use std::process::ExitCode;

use serde_json::Value;

use super::CmdError;
use crate::admission::{Decision, TIER_ANNOTATION, Verdict, build_request, build_static_snapshot, decide_review};
use crate::cli::{Exit, ExplainArgs};
use crate::inputs::{load_cluster_view, read_file, yaml_message};
use crate::placement::PlacementLedger;
use crate::plan::quota_windows::describe_window;
use crate::policy::budget::{format_unit_hours, spent_budgets};
use crate::policy::{TierPolicy, TierPolicySpec};
use crate::scoring::Scorer;
use crate::view::ClusterView;

/// Runs `tiergate explain`: [`Exit::Success`] when the workload would be admitted, [`Exit::Denied`] when denied
/// (or the review is invalid, or the decision fails closed). The policy must be valid, as the webhook's is.
pub fn run(args: ExplainArgs) -> Result<ExitCode, CmdError> {
    let policy = super::load_valid_policy(Some(&args.policy))?;
    let view = match &args.cluster {
        Some(path) => load_cluster_view(path)?,
        None => ClusterView::default(),
    };
    let text = read_file(&args.workload)?;
    let object: Value = serde_saphyr::from_str(&text).map_err(|error| {
        format!("failed to parse {} as YAML or JSON: {}", args.workload.display(), yaml_message(&error))
    })?;
    // The full object (the request holds its lean view): what the patch is applied to for the report.
    let original = match object.get("kind").and_then(Value::as_str) {
        Some("AdmissionReview") => object.pointer("/request/object").filter(|object| !object.is_null()).cloned(),
        _ => Some(object.clone()),
    };
    let request = build_request(object).map_err(|error| format!("{}: {error}", args.workload.display()))?;
    // The snapshot takes the policy; the report names the tier's budget and quota windows from this copy.
    let reported = policy.clone();
    let snapshot = build_static_snapshot(policy, view, None);
    if args.cluster.is_none() {
        eprintln!("note: no --cluster given, so no namespace has a tier; pass the cluster view to see tier decisions");
    }
    let excluded = args.placement.excluded_namespaces();
    let ledger = PlacementLedger::default().with_excluded_namespaces(excluded);
    let scorer = Scorer::default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let decision = runtime.block_on(decide_review(&request, &snapshot, &ledger, &scorer));
    let mut report = render(&decision, original.as_ref(), &reported)?;
    if let Some(note) = decision.object.as_ref().and_then(|object| build_quota_window_note(&reported.spec, object)) {
        report.push_str(&note);
    }
    super::write_stdout(&report)?;
    Ok(match decision.verdict {
        Verdict::Deny { .. } | Verdict::Invalid { .. } | Verdict::Failed { closed: true, .. } => Exit::Denied.into(),
        _ => Exit::Success.into(),
    })
}

/// When the workload's tier (its `tiergate.io/tier` annotation after the decision) has quota windows: which, and that
/// whether Kueue admits it at once depends on the quota in force.
fn build_quota_window_note(spec: &TierPolicySpec, object: &Value) -> Option<String> {
    let tier = object
        .pointer("/metadata/annotations")
        .and_then(|annotations| annotations.get(TIER_ANNOTATION))
        .and_then(Value::as_str)?;
    let tier = spec.tier(tier).filter(|tier| !tier.quota_windows.is_empty())?;
    let mut note = format!(
        "quota windows: tier {}'s quota changes with its windows (a one-off window wins over a recurring one, then \
         the later entry); whether Kueue admits the workload at once depends on the quota in force \
         (`kubectl tiergate status --tier {}`):\n",
        tier.name, tier.name
    );
    for window in &tier.quota_windows {
        note.push_str(&format!("  - {}\n", describe_window(window)));
    }
    Some(note)
}

/// What a budget of `tier` means for the workload, when the tier has one: its limits per period (or in any rolling
/// window), and whether the policy's `status.usage` (if the file carries one) shows it spent.
fn budget_line(policy: &TierPolicy, tier: &str) -> Option<String> {
    let budget = policy.spec.tier(tier)?.budget.as_ref()?;
    let accounting = policy.spec.accounting.clone().unwrap_or_default();
    let limits: Vec<String> = budget.limits.iter().map(|(resource, limit)| format!("{limit} of {resource}")).collect();
    let usage = policy.status.as_ref().and_then(|status| status.usage.as_ref());
    let spent = spent_budgets(&policy.spec, usage).into_iter().find(|spent| spent.tier == tier);
    let window = budget.window.as_deref().map(str::trim);
    let state = match (spent, window) {
        (Some(spent), Some(window)) => format!(
            "spent ({} used in the last {window}), so Kueue admits it only once enough use leaves the window (at {} \
             if nothing more runs) or the budget is raised",
            format_unit_hours(spent.used),
            spent.resets_at
        ),
        (Some(spent), None) => format!(
            "spent ({} used), so Kueue admits it only after {} or once the budget is raised",
            format_unit_hours(spent.used),
            spent.resets_at
        ),
        (None, Some(_)) => "while it is spent, the tier's ClusterQueue is held (stopPolicy Hold) and Kueue admits it \
            only once enough use leaves the window or the budget is raised"
            .to_owned(),
        (None, None) => {
            "while it is spent, the tier's ClusterQueue is held (stopPolicy Hold) and Kueue admits it only \
            once the period turns or the budget is raised"
                .to_owned()
        }
    };
    let per = match window {
        Some(window) => format!("in any {window} (a rolling window)"),
        None => format!("per {} ({})", accounting.period().name().to_lowercase(), accounting.time_zone_name()),
    };
    Some(format!("tier {tier} may use {} {per}; {state}", limits.join(" and ")))
}

/// The report: verdict, reasons, warnings, the JSON patch and the resulting object as YAML.
fn render(decision: &Decision, original: Option<&Value>, budget: &TierPolicy) -> Result<String, CmdError> {
    let verdict = match &decision.verdict {
        Verdict::Skip { reason } => format!("skip ({reason}): admitted unchanged"),
        Verdict::Allow if decision.patch.0.is_empty() => "admit: already carries every mutation".to_owned(),
        Verdict::Allow => format!("admit with {} patch operation(s)", decision.patch.0.len()),
        Verdict::Deny { reason, message } => format!("deny ({reason}): {message}"),
        Verdict::Invalid { message } => format!("invalid: {message}"),
        Verdict::Failed { reason, message, closed } => {
            format!(
                "{} ({reason}): {message}",
                if *closed { "deny, fail-closed" } else { "admit unchanged, fail-open" }
            )
        }
    };
    let mut out = format!("decision: {verdict}\n");
    out.push_str("reasons:\n");
    for reason in &decision.reasons {
        out.push_str(&format!("  - {reason}\n"));
    }
    if !decision.warnings.is_empty() {
        out.push_str("warnings:\n");
        for warning in &decision.warnings {
            out.push_str(&format!("  - {warning}\n"));
        }
    }
    out.push_str(&format!("patch: {}\n", serde_json::to_string_pretty(&decision.patch)?));
    if let Some(original) = original {
        let mut object = original.clone();
        if let Err(error) = json_patch::patch(&mut object, &decision.patch) {
            out.push_str(&format!("note: failed to apply the patch to the workload ({error}); shown unchanged\n"));
            object = original.clone();
        }
        let tier =
            object.pointer("/metadata/annotations").and_then(|map| map.get(TIER_ANNOTATION)).and_then(Value::as_str);
        if let Some(line) = tier.and_then(|tier| budget_line(budget, tier)) {
            out.push_str(&format!("budget: {line}\n"));
        }
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&object)?);
    }
    Ok(out)
}
