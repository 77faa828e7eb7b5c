#!/usr/bin/env bash
# The test command: formatting, lints, every Rust test, and the Python suites (Helm chart, end-to-end).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
python3 -m pytest -q tests
