//! Workload-kind adapters: where each kind keeps its pod template(s) and how it is suspended; no I/O.
