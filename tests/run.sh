#!/usr/bin/env bash
# The test command: formatting, lints, every Rust test, and the Python suites (Helm chart, end-to-end).
# It sets itself up: the Python test dependencies go into a virtual environment under target/ (made once, and
# again whenever tests/requirements.txt changes), so a machine with only Rust and Python passes with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
# A test run builds each crate once and keeps no more on disk than it must (CI runs on a machine whose free disk
# varies; a clean clone's run wrote 8.7 GB with these two unset): no incremental state, and test binaries stripped of
# debug info (about 45 % of each of some 60 binaries of 50-150 MB; a panic still prints its file:line, a backtrace
# names functions only).
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_STRIP=debuginfo

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
# The end-to-end suite runs against the cluster in KUBECONFIG (with Kueue installed). Without KUBECONFIG it starts a
# throwaway control plane on loopback (etcd, kube-apiserver, kube-controller-manager and kueue, found in
# TIERGATE_TEST_ASSETS, KUBEBUILDER_ASSETS or PATH; tests/e2e/src/control_plane/) and stops it on every exit path;
# without the binaries each suite prints a skip line naming the missing one, which --nocapture keeps visible.
# kube-scheduler, found the same way, is optional: without it the plane starts anyway and exports
# TIERGATE_E2E_SCHEDULER_SKIP saying why, for the suites that need pods bound. cluster-autoscaler (kwok provider),
# found the same way, is optional too: autoscaled_pools starts its own and is skipped, saying so, without it; so is
# karpenter-kwok (Karpenter's kwok provider, its CRDs in karpenter-crds/ beside it or TIERGATE_E2E_KARPENTER_CRDS)
# for karpenter_pools.
# A real node (kubelet, kube-proxy, containerd, runc, the CNI plugins, busybox-static; root) is optional as well:
# with it the plane exports TIERGATE_E2E_NODE=localhost and the real_node suite runs a GPU Job's pod there;
# without it the plane exports TIERGATE_E2E_NODE_SKIP saying why (TIERGATE_E2E_NO_NODE=1 turns it off).
# With the node, the helm_install suite also installs charts/tiergate with the real Helm library (the venv above)
# from an image it builds around the tiergate binary named in TIERGATE_E2E_IMAGE_BINARY (default: the debug build
# made here; name target/release/tiergate to measure the release binary).
# The Python suites below (the chart's RBAC end-to-end test) run against the same control plane.
e2e_log=$(mktemp)
# shellcheck source=tests/lib/plane.sh
. tests/lib/plane.sh
trap 'stop_plane; rm -f "$e2e_log"' EXIT
started_plane=false
if [ -z "${KUBECONFIG:-}" ]; then
  start_plane
  # The plane writes KUBECONFIG only when it found its binaries and started.
  if [ -n "${KUBECONFIG:-}" ]; then started_plane=true; fi
fi
if [ -n "${KUBECONFIG:-}" ]; then
  cargo build --locked -q -p tiergate --bin tiergate
  export TIERGATE_E2E_IMAGE_BINARY="${TIERGATE_E2E_IMAGE_BINARY:-$(realpath "${CARGO_TARGET_DIR:-target}")/debug/tiergate}"
  cargo test --locked -p tiergate-e2e -- --nocapture 2>&1 | tee "$e2e_log"
  e2e_skipped=$(grep -c '^skipped: ' "$e2e_log" || true)
  echo "e2e: against $KUBECONFIG, $e2e_skipped test(s) skipped (each says why above)"
else
  # No cluster: every suite would only print the skip line above. Clippy has type-checked them; the harness's own
  # tests run, and the suites' test binaries (some 30 of ~130 MB) are not linked.
  cargo test --locked -p tiergate-e2e --lib --bins
  echo "e2e: skipped: no cluster (KUBECONFIG is unset and the throwaway control plane did not start; its line above says why)"
fi
"$venv/bin/python" -m pytest -q tests
# The plane above is the newest supported cell (Kubernetes 1.36, the Kueue found). Where it started, the core suites
# also run on the oldest: Kubernetes 1.33 emulated, with the Kueue release TIERGATE_E2E_OLDEST_KUEUE names as
# tests/matrix.sh takes it (e.g. 0.17=/opt/kueue-0.17; default: the Kueue found). The full matrix is tests/matrix.sh.
if $started_plane; then
  stop_plane
  bash tests/matrix.sh --kubernetes 1.33 --kueue "${TIERGATE_E2E_OLDEST_KUEUE:-0.19=found}" \
    --suites render_apply,webhook,webhook_down,gate_holes,tenant_boundary_gpu,quota_cap,cohort_tree,tenant_sharing,topology,dra
fi
