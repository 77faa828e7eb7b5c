//! What the queue-name label of a queued workload ends as, on CREATE and across UPDATE sequences: the tier's
//! queue when missing, empty or another tier's, the previous queue restored when an update drops it, and a refusal
//! when an update would unsuspend a workload that has no usable queue; pure, no I/O.
//!
//! Kueue lets the queue name change only while the workload is suspended (jobframework's update validation), so
//! tiergate adds or replaces the label only on a suspended object; on a running one it can only restore the old
//! value (which Kueue accepts, being no change).

/// The facts the queue decision is made from.
#[derive(Clone, Copy, Debug)]
pub struct QueueFacts<'a> {
    /// An UPDATE (else CREATE).
    pub update: bool,
    /// The label on the incoming object.
    pub current: Option<&'a str>,
    /// The label on the old object (UPDATE only).
    pub old: Option<&'a str>,
    /// The incoming object is suspended (before tiergate's own `suspend: true` on CREATE).
    pub suspended: bool,
    /// The old object was suspended (UPDATE only).
    pub old_suspended: bool,
    /// The tier's LocalQueue.
    pub tier_queue: &'a str,
}

/// The queue decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueOutcome {
    /// The object's own queue stays.
    Keep(String),
    /// The label is set to `queue`.
    Set {
        /// The queue written.
        queue: String,
        /// Why.
        why: String,
    },
    /// A running workload with no usable queue: tiergate cannot queue it (Kueue refuses a queue change while it
    /// runs), so it is left as it is with a warning.
    Running {
        /// The warning.
        warning: String,
    },
    /// The update unsuspends a workload without a usable queue.
    Refuse {
        /// What is missing (the message's middle part).
        missing: String,
    },
}

/// Decides the queue label. `foreign_tier` names the tier whose LocalQueue `queue` is, when it is another tier's.
pub fn queue_outcome(facts: QueueFacts<'_>, foreign_tier: impl Fn(&str) -> Option<String>) -> QueueOutcome {
    let unusable = |queue: Option<&str>| -> Option<String> {
        match queue {
            None => Some("no label kueue.x-k8s.io/queue-name".to_owned()),
            Some("") => Some("an empty kueue.x-k8s.io/queue-name".to_owned()),
            Some(queue) => foreign_tier(queue).map(|tier| format!("queue {queue}, the LocalQueue of tier {tier}")),
        }
    };
    if let (Some(queue), None) = (facts.current, unusable(facts.current)) {
        return QueueOutcome::Keep(queue.to_owned());
    }
    let problem = unusable(facts.current).unwrap_or_default();
    if !facts.update {
        let why = match facts.current {
            None => "set to the tier's queue".to_owned(),
            Some(_) => format!("the object had {problem}; set to the tier's queue"),
        };
        return QueueOutcome::Set { queue: facts.tier_queue.to_owned(), why };
    }
    if let (Some(old), None) = (facts.old, unusable(facts.old)) {
        return QueueOutcome::Set {
            queue: old.to_owned(),
            why: format!("UPDATE: restored (the update left {problem})"),
        };
    }
    if facts.suspended {
        return QueueOutcome::Set {
            queue: facts.tier_queue.to_owned(),
            why: format!("UPDATE: the object had {problem}; set to the tier's queue while it is suspended"),
        };
    }
    if facts.old_suspended {
        return QueueOutcome::Refuse { missing: problem };
    }
    QueueOutcome::Running {
        warning: format!(
            "the workload runs with {problem}, outside the tier's quota; Kueue refuses a queue change while it runs, \
             so tiergate leaves it (suspend it and set kueue.x-k8s.io/queue-name: {} to bring it into the tier)",
            facts.tier_queue
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(
        current: Option<&'a str>,
        old: Option<&'a str>,
        suspended: bool,
        old_suspended: bool,
    ) -> QueueFacts<'a> {
        QueueFacts { update: true, current, old, suspended, old_suspended, tier_queue: "tiergate-bronze" }
    }

    fn gold(queue: &str) -> Option<String> {
        (queue == "tiergate-gold").then(|| "gold".to_owned())
    }

    #[test]
    fn an_update_dropping_the_queue_restores_the_old_one_even_when_it_unsuspends() {
        let outcome = queue_outcome(facts(None, Some("tiergate-bronze"), false, true), gold);
        assert!(matches!(outcome, QueueOutcome::Set { queue, .. } if queue == "tiergate-bronze"));
    }

    #[test]
    fn an_update_unsuspending_without_any_usable_queue_is_refused() {
        let outcome = queue_outcome(facts(Some("tiergate-gold"), Some("tiergate-gold"), false, true), gold);
        assert!(matches!(outcome, QueueOutcome::Refuse { missing } if missing.contains("tier gold")));
    }

    #[test]
    fn a_running_workload_without_a_queue_is_left_with_a_warning_not_a_patch_kueue_would_refuse() {
        assert!(matches!(queue_outcome(facts(None, None, false, false), gold), QueueOutcome::Running { .. }));
    }

    #[test]
    fn create_with_an_empty_or_foreign_queue_gets_the_tier_queue() {
        for current in [Some(""), Some("tiergate-gold"), None] {
            let facts = QueueFacts { update: false, ..facts(current, None, false, false) };
            assert!(
                matches!(queue_outcome(facts, gold), QueueOutcome::Set { queue, .. } if queue == "tiergate-bronze")
            );
        }
    }
}
