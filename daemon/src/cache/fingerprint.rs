//! The LocalQueue fingerprint: which LocalQueue watch events re-run the reconcile (label, spec and deletion
//! changes, and workload counts of stopped queues only); no I/O.

use kube::runtime::watcher;

use super::live::LiveObject;

/// LocalQueue events that matter to the reconciler: label or spec changes, deletes, and workload counts of
/// stopped (retiring) queues. Workload-count updates of active queues, the busiest stream, are ignored.
pub(crate) fn build_local_queue_trigger() -> impl FnMut(&watcher::Event<LiveObject>) -> bool + Send {
    let mut seen: std::collections::HashMap<(Option<String>, String), u64> = std::collections::HashMap::new();
    move |event| match event {
        watcher::Event::Apply(queue) => {
            let fingerprint = build_local_queue_fingerprint(queue);
            seen.insert((queue.namespace.clone(), queue.name.clone()), fingerprint) != Some(fingerprint)
        }
        watcher::Event::Delete(queue) => {
            seen.remove(&(queue.namespace.clone(), queue.name.clone()));
            true
        }
        watcher::Event::Init => {
            seen.clear();
            false
        }
        watcher::Event::InitApply(queue) => {
            seen.insert((queue.namespace.clone(), queue.name.clone()), build_local_queue_fingerprint(queue));
            false
        }
        watcher::Event::InitDone => true,
    }
}

/// A hash of what the reconciler reads from a LocalQueue (labels, owners, body, deletion, and the workload
/// counts only once the queue is stopped).
pub fn build_local_queue_fingerprint(queue: &LiveObject) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = fnv::FnvHasher::default();
    let stopped = queue.stop_policy().is_some_and(|policy| policy != "None");
    (queue.metadata_text(), &queue.annotations, &queue.body, queue.deleting).hash(&mut hasher);
    stopped.then_some(queue.workloads).hash(&mut hasher);
    hasher.finish()
}
