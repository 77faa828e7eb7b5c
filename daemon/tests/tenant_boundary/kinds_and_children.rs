//! Workload kinds and children: every kind Kueue manages gets its tier's queue; children of Kueue-managed parents are left to the parent; CronJob templates are checked.
