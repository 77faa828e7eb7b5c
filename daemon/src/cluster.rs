//! Reflector stores for policies, namespaces, nodes, LocalQueues and pods, folded into the shared `Snapshot`; does I/O.
