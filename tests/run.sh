#!/usr/bin/env bash
# The test command: formatting, lints, every Rust test, and the Python suites (Helm chart, end-to-end).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --exclude tiergate-e2e
# The end-to-end suite runs against the cluster in KUBECONFIG (with Kueue installed); without one each test
# prints why it skipped, which --nocapture keeps visible.
cargo test --locked -p tiergate-e2e -- --nocapture
python3 -m pytest -q tests
