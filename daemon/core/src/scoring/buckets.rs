//! Score -> priority bucket: the WorkloadPriorityClass a score maps to, and the tier's default when there is no
//! usable score; pure, no I/O.

use crate::policy::{PriorityBucket, Tier};

/// Lowest valid score.
pub const MIN_SCORE: i64 = 0;
/// Highest valid score.
pub const MAX_SCORE: i64 = 100;

/// A score that maps to no bucket.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    /// The score is below 0 or above 100.
    #[error("failed to map score {score} to a priority bucket: scores must be within 0..=100")]
    MapOutOfRangeScore {
        /// The score.
        score: i64,
    },
    /// Every bucket's `minScore` is above the score.
    #[error("failed to map score {score} to a priority bucket: the lowest bucket starts at {lowest}")]
    MapScoreBelowBuckets {
        /// The score.
        score: i64,
        /// The lowest `minScore` (none when the policy has no buckets).
        lowest: String,
    },
}

impl BucketError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MapOutOfRangeScore { .. } => "out_of_range",
            Self::MapScoreBelowBuckets { .. } => "below_buckets",
        }
    }
}

/// The bucket a score falls in: the one with the highest `minScore` that is <= `score`.
pub fn bucket_for(score: i64, buckets: &[PriorityBucket]) -> Result<&PriorityBucket, BucketError> {
    if !(MIN_SCORE..=MAX_SCORE).contains(&score) {
        return Err(BucketError::MapOutOfRangeScore { score });
    }
    buckets
        .iter()
        .filter(|bucket| i64::from(bucket.min_score) <= score)
        .max_by_key(|bucket| bucket.min_score)
        .ok_or_else(|| BucketError::MapScoreBelowBuckets {
            score,
            lowest: buckets
                .iter()
                .map(|bucket| bucket.min_score)
                .min()
                .map_or_else(|| "nowhere (no buckets)".to_owned(), |lowest| lowest.to_string()),
        })
}

/// The priority class of a workload without a usable score: the tier's `defaultPriorityClass`, else the bucket
/// with the lowest `minScore`; `None` only when the policy has neither.
pub fn default_priority_class(tier: &Tier, buckets: &[PriorityBucket]) -> Option<String> {
    tier.default_priority_class
        .clone()
        .or_else(|| buckets.iter().min_by_key(|bucket| bucket.min_score).map(|bucket| bucket.name.clone()))
}

/// The highest bucket `tier` may use: its `maxPriorityClass`, else the bucket with the highest `minScore`.
pub fn priority_ceiling<'p>(tier: &Tier, buckets: &'p [PriorityBucket]) -> Option<&'p PriorityBucket> {
    let top = || buckets.iter().max_by_key(|bucket| (bucket.min_score, bucket.value));
    match &tier.max_priority_class {
        Some(name) => buckets.iter().find(|bucket| &bucket.name == name).or_else(top),
        None => top(),
    }
}

/// Where a priority class stands against a tier's ceiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CeilingCheck {
    /// A bucket at or below the ceiling.
    Within,
    /// A bucket above the ceiling (by WorkloadPriorityClass value).
    Above {
        /// The ceiling's name.
        ceiling: String,
    },
    /// No bucket of the policy: some other WorkloadPriorityClass, which a tenant must not pick.
    NotABucket {
        /// The ceiling's name (`None` when the policy has no buckets).
        ceiling: Option<String>,
    },
}

impl CeilingCheck {
    /// The class to use instead: `None` when `class` may stay, `Some(None)` when there is no ceiling at all.
    pub fn replacement(&self) -> Option<Option<&str>> {
        match self {
            Self::Within => None,
            Self::Above { ceiling } => Some(Some(ceiling)),
            Self::NotABucket { ceiling } => Some(ceiling.as_deref()),
        }
    }
}

/// Checks `class` (a priority-class label or a score's bucket) against `tier`'s ceiling.
pub fn check_priority_ceiling(class: &str, tier: &Tier, buckets: &[PriorityBucket]) -> CeilingCheck {
    let ceiling = priority_ceiling(tier, buckets);
    let Some(bucket) = buckets.iter().find(|bucket| bucket.name == class) else {
        return CeilingCheck::NotABucket { ceiling: ceiling.map(|ceiling| ceiling.name.clone()) };
    };
    match ceiling {
        Some(ceiling) if bucket.value > ceiling.value => CeilingCheck::Above { ceiling: ceiling.name.clone() },
        _ => CeilingCheck::Within,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::default_priority_buckets;

    fn bucket_name(score: i64) -> Result<String, BucketError> {
        bucket_for(score, &default_priority_buckets()).map(|bucket| bucket.name.clone())
    }

    fn tier(default_priority_class: Option<&str>) -> Tier {
        Tier {
            name: "bronze".to_owned(),
            gpu_class: "l4".to_owned(),
            fallback_gpu_classes: vec![],
            quotas: Default::default(),
            cohort: None,
            sharing: None,
            preemption: None,
            local_queue_name: None,
            placement: None,
            default_priority_class: default_priority_class.map(str::to_owned),
            max_priority_class: None,
            max_run_time: None,
            budget: None,
            provisioning: None,
            quota_shares: Default::default(),
            quota_windows: Vec::new(),
            dispatch: None,
            topology: None,
            tenant_fair_sharing: false,
        }
    }

    #[test]
    fn exact_thresholds_belong_to_the_bucket_they_start() {
        assert_eq!(bucket_name(90).unwrap(), "gpu-ultra");
        assert_eq!(bucket_name(70).unwrap(), "gpu-high");
        assert_eq!(bucket_name(50).unwrap(), "gpu-medium");
        assert_eq!(bucket_name(0).unwrap(), "gpu-default");
    }

    #[test]
    fn one_below_a_threshold_falls_to_the_bucket_beneath() {
        assert_eq!(bucket_name(89).unwrap(), "gpu-high");
        assert_eq!(bucket_name(69).unwrap(), "gpu-medium");
        assert_eq!(bucket_name(49).unwrap(), "gpu-default");
    }

    #[test]
    fn the_ends_of_the_range_are_valid() {
        assert_eq!(bucket_name(100).unwrap(), "gpu-ultra");
        assert_eq!(bucket_name(MIN_SCORE).unwrap(), "gpu-default");
    }

    #[test]
    fn negative_and_above_100_scores_are_out_of_range() {
        for score in [-1, -100, 101, 1000] {
            let error = bucket_name(score).unwrap_err();
            assert_eq!(error, BucketError::MapOutOfRangeScore { score });
            assert_eq!(error.reason(), "out_of_range");
        }
    }

    #[test]
    fn bucket_order_in_the_policy_does_not_matter() {
        let mut buckets = default_priority_buckets();
        buckets.reverse();
        assert_eq!(bucket_for(75, &buckets).unwrap().name, "gpu-high");
    }

    #[test]
    fn a_score_below_every_bucket_says_where_the_lowest_starts() {
        let buckets: Vec<_> = default_priority_buckets().into_iter().filter(|bucket| bucket.min_score >= 50).collect();
        let error = bucket_for(10, &buckets).unwrap_err();
        assert_eq!(error.reason(), "below_buckets");
        assert!(error.to_string().contains("starts at 50"), "{error}");
    }

    #[test]
    fn default_class_is_the_tiers_own_else_the_lowest_bucket() {
        let buckets = default_priority_buckets();
        assert_eq!(default_priority_class(&tier(Some("gpu-medium")), &buckets).as_deref(), Some("gpu-medium"));
        assert_eq!(default_priority_class(&tier(None), &buckets).as_deref(), Some("gpu-default"));
        assert_eq!(default_priority_class(&tier(None), &[]), None);
    }

    #[test]
    fn a_class_above_the_tier_ceiling_is_clamped_to_the_ceiling_and_an_unknown_class_too() {
        let buckets = default_priority_buckets();
        let mut bronze = tier(None);
        bronze.max_priority_class = Some("gpu-medium".to_owned());
        assert_eq!(check_priority_ceiling("gpu-medium", &bronze, &buckets), CeilingCheck::Within);
        assert_eq!(check_priority_ceiling("gpu-default", &bronze, &buckets), CeilingCheck::Within);
        let above = check_priority_ceiling("gpu-ultra", &bronze, &buckets);
        assert_eq!(above, CeilingCheck::Above { ceiling: "gpu-medium".to_owned() });
        assert_eq!(above.replacement(), Some(Some("gpu-medium")));
        let unknown = check_priority_ceiling("system-critical", &bronze, &buckets);
        assert_eq!(unknown, CeilingCheck::NotABucket { ceiling: Some("gpu-medium".to_owned()) });
    }

    #[test]
    fn without_a_ceiling_the_top_bucket_is_the_ceiling() {
        let buckets = default_priority_buckets();
        assert_eq!(priority_ceiling(&tier(None), &buckets).map(|bucket| bucket.name.as_str()), Some("gpu-ultra"));
        assert_eq!(check_priority_ceiling("gpu-ultra", &tier(None), &buckets), CeilingCheck::Within);
        assert_eq!(priority_ceiling(&tier(None), &[]), None);
    }
}
