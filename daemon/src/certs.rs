//! Webhook serving certificates: self-managed CA and serving certificate, CA bundle injection, rotation; I/O at the edge.
