//! Unit tests of `Scorer::score_for` with the built-in scorer and of `build_outcome`; no network.

use super::*;
use crate::scoring::test_support::{fixture_request, sample_snapshot, with_annotations};

fn snapshot_with_policy(edit: impl FnOnce(&mut crate::policy::TierPolicy)) -> Snapshot {
    let mut snapshot = sample_snapshot();
    let mut policy = (*snapshot.policy.clone().unwrap()).clone();
    edit(&mut policy);
    snapshot.policy = Some(Arc::new(policy));
    snapshot
}

#[tokio::test]
async fn recorded_bronze_job_gets_the_builtin_score_and_a_memory_warning() {
    let scorer = Scorer::default();
    let outcome =
        scorer.score_for(&fixture_request("job-create-bronze-gpu-scored.json"), &sample_snapshot()).await.unwrap();
    // 40 GiB does not fit an L4 (24 GiB): no class chosen, score 0, lowest bucket.
    assert_eq!(outcome.source, ScoreSource::BuiltIn);
    assert_eq!(outcome.score, Some(0));
    assert_eq!(outcome.chosen_gpu_class, None);
    assert_eq!(outcome.priority_class, "gpu-default");
    assert!(outcome.warnings.iter().any(|warning| warning.contains("l4: 24 GiB")), "{:?}", outcome.warnings);
}

#[tokio::test]
async fn a_fitting_bronze_job_gets_l4_and_the_bucket_of_its_score_held_to_the_bronze_ceiling() {
    let request = with_annotations(fixture_request("job-create-bronze-gpu-scored.json"), &[("gpu.mem.gi", "24")]);
    let outcome = Scorer::default().score_for(&request, &sample_snapshot()).await.unwrap();
    // 0.6 * 24/24 + 0.4 * 4/4 = 1.0: bucket gpu-ultra, above bronze's maxPriorityClass gpu-high.
    assert_eq!(outcome.score, Some(100));
    assert_eq!(outcome.chosen_gpu_class.as_deref(), Some("l4"));
    assert_eq!(outcome.priority_class, "gpu-high");
    assert_eq!(
        outcome.warnings,
        ["score 100 maps to priority class gpu-ultra, above tier bronze's ceiling; clamped to gpu-high"]
    );
}

#[tokio::test]
async fn without_a_tier_ceiling_a_fitting_bronze_job_gets_the_top_bucket_of_its_score() {
    let snapshot =
        snapshot_with_policy(|policy| policy.spec.tiers.iter_mut().for_each(|tier| tier.max_priority_class = None));
    let request = with_annotations(fixture_request("job-create-bronze-gpu-scored.json"), &[("gpu.mem.gi", "24")]);
    let outcome = Scorer::default().score_for(&request, &snapshot).await.unwrap();
    assert_eq!(outcome.priority_class, "gpu-ultra");
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
}

#[tokio::test]
async fn the_builtin_scorer_never_offers_a_bronze_job_a_class_outside_its_tier() {
    for gib in ["1", "8", "16", "24", "40", "80"] {
        let request = with_annotations(fixture_request("job-create-bronze-gpu-scored.json"), &[("gpu.mem.gi", gib)]);
        let outcome = Scorer::default().score_for(&request, &sample_snapshot()).await.unwrap();
        assert!(matches!(outcome.chosen_gpu_class.as_deref(), None | Some("l4")), "{gib} GiB: {outcome:?}");
    }
}

#[tokio::test]
async fn disabled_scoring_scores_nothing() {
    let snapshot = snapshot_with_policy(|policy| policy.spec.scoring.enabled = false);
    assert_eq!(
        Scorer::default().score_for(&fixture_request("job-create-bronze-gpu-scored.json"), &snapshot).await,
        None
    );
}

#[tokio::test]
async fn no_policy_scores_nothing() {
    let snapshot = Snapshot { policy: None, ..sample_snapshot() };
    assert_eq!(
        Scorer::default().score_for(&fixture_request("job-create-bronze-gpu-scored.json"), &snapshot).await,
        None
    );
}

#[tokio::test]
async fn a_dry_run_is_scored_like_the_real_request() {
    let scorer = Scorer::default();
    let snapshot = sample_snapshot();
    let real = scorer.score_for(&fixture_request("job-create-bronze-gpu-scored.json"), &snapshot).await.unwrap();
    let dry = scorer.score_for(&fixture_request("job-create-bronze-dryrun.json"), &snapshot).await.unwrap();
    assert_eq!((dry.priority_class, dry.score), (real.priority_class, real.score));
}

#[tokio::test]
async fn an_unusable_agent_url_falls_back_to_the_tiers_default_class() {
    let snapshot = snapshot_with_policy(|policy| {
        policy.spec.scoring.url = Some("not a url".to_owned());
        policy.spec.tiers.iter_mut().for_each(|tier| tier.default_priority_class = Some("gpu-medium".to_owned()));
    });
    let outcome =
        Scorer::default().score_for(&fixture_request("job-create-bronze-gpu-scored.json"), &snapshot).await.unwrap();
    assert_eq!(outcome.source, ScoreSource::Fallback { reason: "bad_url" });
    assert_eq!(outcome.priority_class, "gpu-medium");
    assert!(outcome.warnings.iter().any(|warning| warning.contains("spec.scoring.url")), "{:?}", outcome.warnings);
    assert_eq!(outcome.score, None);
}

#[test]
fn fallback_annotations_name_the_reason_and_leave_out_the_missing_score() {
    let outcome = ScoreOutcome {
        priority_class: "gpu-default".to_owned(),
        score: None,
        chosen_gpu_class: None,
        avoid_job_types: vec![],
        source: ScoreSource::Fallback { reason: "timeout" },
        warnings: vec![],
        decided_at_unix: 1_699_123_456,
    };
    let annotations = outcome.annotations();
    assert_eq!(annotations[FALLBACK_REASON_ANNOTATION], "timeout");
    assert_eq!(annotations[SCORE_SOURCE_ANNOTATION], "fallback");
    assert_eq!(annotations[SEED_DECIDED_AT_ANNOTATION], "1699123456");
    assert!(!annotations.contains_key(SEED_SCORE_ANNOTATION) && !annotations.contains_key(CHOSEN_GPU_ANNOTATION));
}

#[test]
fn scored_annotations_carry_the_seed_keys_for_existing_dashboards() {
    let outcome = ScoreOutcome {
        priority_class: "gpu-high".to_owned(),
        score: Some(85),
        chosen_gpu_class: Some("l4".to_owned()),
        avoid_job_types: vec![],
        source: ScoreSource::Agent,
        warnings: vec![],
        decided_at_unix: 1_699_123_456,
    };
    let annotations = outcome.annotations();
    assert_eq!(annotations[SEED_SCORE_ANNOTATION], "85");
    assert_eq!(annotations[SEED_CHOSEN_GPU_ANNOTATION], "l4");
    assert_eq!(annotations[SCORE_ANNOTATION], "85");
    assert_eq!(annotations[SCORE_SOURCE_ANNOTATION], "agent");
    assert!(!annotations.contains_key(FALLBACK_REASON_ANNOTATION));
}

#[test]
fn a_score_below_every_bucket_gets_the_tiers_default_with_a_warning() {
    let snapshot = sample_snapshot();
    let policy = snapshot.policy.clone().unwrap();
    let request = fixture_request("job-create-bronze-gpu-scored.json");
    let job = features::scoring_job(&request, &snapshot, &policy.spec).unwrap();
    let buckets: Vec<_> =
        crate::policy::default_priority_buckets().into_iter().filter(|bucket| bucket.min_score >= 50).collect();
    let answer = AgentAnswer {
        score: 10,
        chosen_gpu_class: None,
        avoid_job_types: vec![],
        warnings: vec![],
        gpu_ignored: false,
    };
    let outcome = build_outcome(&job, Ok(&(answer, ScoreSource::Agent)), &buckets, 0).unwrap();
    assert_eq!(outcome.priority_class, "gpu-medium");
    assert_eq!(outcome.score, Some(10));
    assert!(outcome.warnings.iter().any(|warning| warning.contains("starts at 50")), "{:?}", outcome.warnings);
}

#[test]
fn without_buckets_or_a_tier_default_there_is_no_outcome() {
    let snapshot = sample_snapshot();
    let policy = snapshot.policy.clone().unwrap();
    let request = fixture_request("job-create-bronze-gpu-scored.json");
    let job = features::scoring_job(&request, &snapshot, &policy.spec).unwrap();
    let error = AgentCallError::AcquireCallSlot { limit: 1 };
    assert_eq!(build_outcome(&job, Err(&error), &[], 0), None);
}
