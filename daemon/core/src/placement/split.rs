//! The base/weight split: which rule an owner's next pod goes to, given how many pods each rule holds now;
//! pure integer arithmetic, no I/O. The rule is documented with worked examples in docs/guides/placement.md.
//!
//! For `n` pods the ideal share of rule `i` is `base·[i = 0]` (capped at `n`) plus `max(n − base, 0)·wᵢ/W`.
//! The next pod goes to the rule with the largest deficit `ideal(n + 1) − count`; ties go to the rule listed
//! last. Scaling up from nothing keeps every rule within `count − ideal < 1` and `ideal − count ≤ 1` at every
//! prefix (the property tests check both); after deletions the next pods refill the rules that are short.

/// A strategy's numbers: the first rule's base and every rule's weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    base: u32,
    weights: Vec<u32>,
}

impl Split {
    /// The split of `weights` (rule order) with `base` pods on the first rule. With no rules, every pod goes to
    /// rule 0 of an empty list, so callers must pass at least one weight.
    pub fn new(base: u32, weights: Vec<u32>) -> Self {
        Self { base, weights }
    }

    /// The common denominator of [`Split::ideal_scaled`]: the sum of the weights, or 1 when they are all zero
    /// (then every pod belongs to the first rule).
    pub fn scale(&self) -> i128 {
        match self.weights.iter().map(|weight| i128::from(*weight)).sum::<i128>() {
            0 => 1,
            sum => sum,
        }
    }

    /// Each rule's ideal number of pods out of `total`, multiplied by [`Split::scale`] so it stays exact.
    pub fn ideal_scaled(&self, total: u64) -> Vec<i128> {
        let total = i128::from(total);
        let base = i128::from(self.base).min(total);
        let rest = total - base;
        let all_zero = self.weights.iter().all(|weight| *weight == 0);
        let scale = self.scale();
        self.weights
            .iter()
            .enumerate()
            .map(|(index, weight)| {
                let first = if index == 0 { base * scale } else { 0 };
                let share = if all_zero { if index == 0 { rest } else { 0 } } else { rest * i128::from(*weight) };
                first + share
            })
            .collect()
    }

    /// The rule the next pod goes to when the rules hold `counts` pods (same order as the weights): the largest
    /// deficit against the ideal for one more pod, ties to the rule listed last.
    pub fn next_rule(&self, counts: &[u32]) -> usize {
        let total: u64 = counts.iter().map(|count| u64::from(*count)).sum::<u64>() + 1;
        let scale = self.scale();
        let mut best: Option<(i128, usize)> = None;
        for (index, ideal) in self.ideal_scaled(total).into_iter().enumerate() {
            let held = counts.get(index).map_or(0, |count| i128::from(*count));
            let deficit = ideal - held * scale;
            if best.is_none_or(|(most, _)| deficit >= most) {
                best = Some((deficit, index));
            }
        }
        best.map_or(0, |(_, index)| index)
    }

    /// The counts per rule after `total` pods are placed one by one from nothing.
    pub fn counts_for(&self, total: u32) -> Vec<u32> {
        let mut counts = vec![0; self.weights.len()];
        for _ in 0..total {
            let rule = self.next_rule(&counts);
            if let Some(count) = counts.get_mut(rule) {
                *count += 1;
            }
        }
        counts
    }

    /// The counts per rule after `total` units are placed one by one from nothing: exactly
    /// [`Split::counts_for`], in O(min(total, W)·rules) instead of O(total·rules). The plan splits a tier's quota
    /// with it (docs/guides/placement.md, "Quota"), so pods and quota are split by one function.
    ///
    /// Why the shortcut is exact: after the base, the deficits are `(m·wᵢ − W·cᵢ)/W` for `m` placed units. After
    /// `W` units every rule holds `cᵢ ≤ wᵢ` (its excess stays below 1, see the module docs) and the counts add up
    /// to `W`, so `cᵢ = wᵢ` and every deficit is back to zero: the sequence repeats with period `W`.
    pub fn shares(&self, total: u64) -> Vec<u64> {
        let rules = self.weights.len();
        let mut shares = vec![0_u64; rules];
        let base = u64::from(self.base).min(total);
        if let Some(first) = shares.first_mut() {
            *first = base;
        }
        let rest = total - base;
        let all_zero = self.weights.iter().all(|weight| *weight == 0);
        if all_zero {
            if let Some(first) = shares.first_mut() {
                *first += rest;
            }
            return shares;
        }
        let period: u64 = self.weights.iter().map(|weight| u64::from(*weight)).sum();
        let cycles = rest / period;
        for (share, weight) in shares.iter_mut().zip(&self.weights) {
            *share += cycles * u64::from(*weight);
        }
        let unbased = Self::new(0, self.weights.clone());
        let mut counts = vec![0_u32; rules];
        for _ in 0..rest % period {
            let rule = unbased.next_rule(&counts);
            if let Some(count) = counts.get_mut(rule) {
                *count += 1;
            }
        }
        for (share, count) in shares.iter_mut().zip(counts) {
            *share += u64::from(count);
        }
        shares
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_003_six_replicas_split_three_ondemand_three_spot() {
        assert_eq!(Split::new(1, vec![1, 2]).counts_for(6), [3, 3]);
    }

    #[test]
    fn seed_004_ten_replicas_split_one_four_five() {
        assert_eq!(Split::new(1, vec![0, 1, 1]).counts_for(10), [1, 4, 5]);
    }

    #[test]
    fn seed_003_example_1_keeps_two_base_pods_before_the_one_to_three_split() {
        let split = Split::new(2, vec![1, 3]);
        assert_eq!(split.counts_for(2), [2, 0]);
        // 2 base + 8 pods at 1:3 -> 2 + 2 on-demand, 6 spot.
        assert_eq!(split.counts_for(10), [4, 6]);
    }

    #[test]
    fn seed_003_example_2_keeps_one_base_pod_then_splits_two_to_one() {
        // 1 base in us-west-1a + 6 pods at 2:1 -> 1 + 4 in us-west-1a, 2 in us-west-1b.
        assert_eq!(Split::new(1, vec![2, 1]).counts_for(7), [5, 2]);
    }

    #[test]
    fn seed_003_example_3_keeps_one_k80_then_prefers_v100_one_to_two() {
        // 1 base on K80 + 9 pods at 1:2 -> 1 + 3 on K80, 6 on V100.
        assert_eq!(Split::new(1, vec![1, 2]).counts_for(10), [4, 6]);
    }

    #[test]
    fn each_scale_up_step_of_seed_004_adds_one_pod_to_the_rule_furthest_behind() {
        let split = Split::new(1, vec![0, 1, 1]);
        let steps: Vec<Vec<u32>> = (1..=5).map(|total| split.counts_for(total)).collect();
        assert_eq!(steps, [vec![1, 0, 0], vec![1, 0, 1], vec![1, 1, 1], vec![1, 1, 2], vec![1, 2, 2]]);
    }

    #[test]
    fn a_rule_short_after_deletions_gets_the_next_pods() {
        let split = Split::new(1, vec![1, 2]);
        // 6 pods were 3/3; two spot pods were deleted.
        assert_eq!(split.next_rule(&[3, 1]), 1);
        assert_eq!(split.next_rule(&[3, 2]), 1);
    }

    #[test]
    fn all_zero_weights_send_every_pod_to_the_first_rule() {
        assert_eq!(Split::new(0, vec![0, 0]).counts_for(3), [3, 0]);
        assert_eq!(Split::new(0, vec![0, 0]).shares(3), [3, 0]);
    }

    #[test]
    fn sixteen_gpus_split_one_to_two_after_a_base_of_one_add_up_to_sixteen() {
        let split = Split::new(1, vec![1, 2]);
        assert_eq!(split.shares(16), [6, 10]);
        assert_eq!(split.shares(16).iter().sum::<u64>(), 16);
    }

    #[test]
    fn shares_equal_the_pod_by_pod_counts_for_every_total_up_to_a_few_periods() {
        for split in [
            Split::new(1, vec![1, 2]),
            Split::new(1, vec![0, 1, 1]),
            Split::new(3, vec![2, 3, 5]),
            Split::new(0, vec![7]),
        ] {
            for total in 0..40 {
                let counts: Vec<u64> = split.counts_for(total).into_iter().map(u64::from).collect();
                assert_eq!(split.shares(u64::from(total)), counts, "{split:?} at {total}");
            }
        }
    }

    #[test]
    fn shares_of_a_huge_total_take_whole_periods_at_once() {
        assert_eq!(Split::new(1, vec![1, 2]).shares(3_000_000_001), [1_000_000_001, 2_000_000_000]);
    }
}
