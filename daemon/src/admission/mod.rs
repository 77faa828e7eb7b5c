//! The admission webhook: `mutate()` (pure decision and JSON patch) and the HTTPS server that feeds it.
pub mod server;
