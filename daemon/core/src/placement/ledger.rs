//! The in-memory half of the placement ledger: rules given to pods this replica admitted that the caches have
//! not shown yet (keyed by admission request UID), sharded by owner behind short mutexes; no I/O.
//!
//! The other half is the pods themselves: each placed pod carries its rule label, owner annotation and request
//! annotation, so the snapshot's pods are counted directly and a restart loses nothing but in-flight entries.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{OWNER_ANNOTATION, REQUEST_ANNOTATION, RULE_LABEL};
use crate::view::Snapshot;

const SHARDS: usize = 16;

/// How long entries live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerTimings {
    /// An admitted pod the caches never show (denied later by another admission step) stops counting after this.
    pub in_flight_ttl: Duration,
    /// Once the caches have shown a pod, its entry still counts this long while a snapshot does not show it: a
    /// request may still be deciding from an older snapshot. No request outlives the webhook timeout (5 s).
    pub observed_grace: Duration,
}

impl Default for LedgerTimings {
    fn default() -> Self {
        Self { in_flight_ttl: Duration::from_secs(60), observed_grace: Duration::from_secs(5) }
    }
}

/// What the snapshot says about one owner's placed pods (borrowed from the snapshot: no allocation per pod).
#[derive(Debug, Default)]
pub(crate) struct Observed<'a> {
    /// Pods per rule name.
    pub counts: HashMap<&'a str, u32>,
    /// Admission request UIDs those pods were placed under.
    pub requests: HashSet<&'a str>,
}

/// Counts the snapshot's pods of `owner` in `namespace` by their rule label.
pub(crate) fn observed_pods<'a>(snapshot: &'a Snapshot, namespace: &str, owner: &str) -> Observed<'a> {
    let mut observed = Observed::default();
    let owned =
        snapshot.pods_in(namespace).filter(|pod| pod.annotations.get(OWNER_ANNOTATION).is_some_and(|key| key == owner));
    for pod in owned {
        if let Some(rule) = pod.labels.get(RULE_LABEL) {
            *observed.counts.entry(rule).or_default() += 1;
        }
        if let Some(request) = pod.annotations.get(REQUEST_ANNOTATION) {
            observed.requests.insert(request.as_str());
        }
    }
    observed
}

#[derive(Debug)]
struct Entry {
    rule: String,
    created: Instant,
    observed: Option<Instant>,
}

impl Entry {
    fn expired(&self, now: Instant, timings: LedgerTimings) -> bool {
        match self.observed {
            Some(seen) => now.saturating_duration_since(seen) >= timings.observed_grace,
            None => now.saturating_duration_since(self.created) >= timings.in_flight_ttl,
        }
    }
}

#[derive(Debug, Default)]
struct Shard {
    /// Owner key -> request UID -> entry.
    owners: HashMap<String, HashMap<String, Entry>>,
    last_sweep: Option<Instant>,
}

impl Shard {
    fn sweep(&mut self, now: Instant, timings: LedgerTimings) {
        if self.last_sweep.is_some_and(|last| now.saturating_duration_since(last) < timings.in_flight_ttl) {
            return;
        }
        self.last_sweep = Some(now);
        for entries in self.owners.values_mut() {
            entries.retain(|_, entry| !entry.expired(now, timings));
        }
        self.owners.retain(|_, entries| !entries.is_empty());
    }
}

/// In-flight entries of every owner.
#[derive(Debug)]
pub(crate) struct InFlight {
    shards: Box<[Mutex<Shard>]>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self { shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect() }
    }
}

impl InFlight {
    /// Under `owner`'s lock: reconciles its entries with `observed`, hands `choose` the pods per rule (observed
    /// plus in flight), and records the chosen rule under `record` (a request UID) unless it is `None`.
    pub(crate) fn decide(
        &self,
        owner: &str,
        observed: &Observed<'_>,
        now: Instant,
        timings: LedgerTimings,
        record: Option<&str>,
        choose: impl FnOnce(&BTreeMap<&str, u32>) -> Option<String>,
    ) -> Option<String> {
        let mut shard = self.shard(owner).lock().unwrap_or_else(PoisonError::into_inner);
        shard.sweep(now, timings);
        let entries = shard.owners.entry(owner.to_owned()).or_default();
        entries.retain(|request, entry| {
            if observed.requests.contains(request.as_str()) {
                entry.observed.get_or_insert(now);
            }
            !entry.expired(now, timings)
        });
        let mut counts: BTreeMap<&str, u32> = observed.counts.iter().map(|(rule, count)| (*rule, *count)).collect();
        for (request, entry) in entries.iter() {
            if !observed.requests.contains(request.as_str()) {
                *counts.entry(entry.rule.as_str()).or_default() += 1;
            }
        }
        let chosen = choose(&counts);
        if let (Some(rule), Some(request)) = (&chosen, record) {
            entries.insert(request.to_owned(), Entry { rule: rule.clone(), created: now, observed: None });
        }
        if entries.is_empty() {
            shard.owners.remove(owner);
        }
        chosen
    }

    /// Marks the entries whose pods `snapshot` shows as observed, so a pod deleted soon after stops counting
    /// once the grace has passed instead of at the end of its TTL.
    pub(crate) fn observe(&self, snapshot: &Snapshot, now: Instant) {
        for pod in &snapshot.pods {
            let (Some(owner), Some(request)) =
                (pod.annotations.get(OWNER_ANNOTATION), pod.annotations.get(REQUEST_ANNOTATION))
            else {
                continue;
            };
            let mut shard = self.shard(owner).lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = shard.owners.get_mut(owner).and_then(|entries| entries.get_mut(request)) {
                entry.observed.get_or_insert(now);
            }
        }
    }

    /// Entries held across all owners (for tests and diagnostics).
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard.lock().unwrap_or_else(PoisonError::into_inner).owners.values().map(HashMap::len).sum::<usize>()
            })
            .sum()
    }

    fn shard(&self, owner: &str) -> &Mutex<Shard> {
        let mut hasher = DefaultHasher::new();
        owner.hash(&mut hasher);
        let index = usize::try_from(hasher.finish() % SHARDS as u64).unwrap_or_default();
        &self.shards[index % self.shards.len()]
    }
}
