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
            preemption: None,
            local_queue_name: None,
            placement: None,
            default_priority_class: default_priority_class.map(str::to_owned),
            provisioning: None,
            quota_shares: Default::default(),
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
}
