//! Typed Kueue `kueue.x-k8s.io/v1beta2` objects tiergate generates, built from Kueue v0.19.2's CRDs; no I/O.
