#!/usr/bin/env bash
# The test command: formatting, lints, every Rust test, and the Python suites (Helm chart, end-to-end).
# It sets itself up: the Python test dependencies go into a virtual environment under target/ (made once, and
# again whenever tests/requirements.txt changes), so a machine with only Rust and Python passes with this command.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/test-venv
if ! cmp -s tests/requirements.txt "$venv/installed-requirements.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
  cp tests/requirements.txt "$venv/installed-requirements.txt"
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --exclude tiergate-e2e
# The end-to-end suite runs against the cluster in KUBECONFIG (with Kueue installed); without one each test
# prints why it skipped, which --nocapture keeps visible.
cargo test --locked -p tiergate-e2e -- --nocapture
"$venv/bin/python" -m pytest -q tests
