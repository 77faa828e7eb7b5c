#!/usr/bin/env bash
# The version matrix: the core end-to-end suites on each cell of Kubernetes x Kueue, one throwaway control plane per
# cell, and a table of pass, fail and not-served per suite and cell (docs/contributing.md, "Version matrix").
#
#   bash tests/matrix.sh [--kubernetes 1.33,1.34,1.35,1.36] [--kueue 0.19=found,0.18=DIR,0.17=DIR]
#                        [--suites webhook,gate_holes,...] [--out FILE]
#
# Kubernetes minors are emulated by the one 1.36 build found (kube-apiserver, kube-controller-manager and
# kube-scheduler with --emulated-version). A Kueue release is `MINOR=DIR`, DIR holding its manager as `kueue` and its
# CRDs in `crds/`; `MINOR=found` is the `kueue` found with the other binaries and the shared v0.19.2 CRDs. A suite
# that passes but printed `skipped:` lines counts as not-served, with its reasons listed under the table.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
# shellcheck source=tests/lib/plane.sh
. tests/lib/plane.sh

kubernetes="1.33,1.34,1.35,1.36"
kueue="0.19=found"
suites="webhook,gate_holes,webhook_down,tenant_boundary_gpu,quota_cap,cohort_tree,tenant_sharing,topology,dra,render_apply,helm_install"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kubernetes) kubernetes=$2; shift 2 ;;
    --kueue) kueue=$2; shift 2 ;;
    --suites) suites=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "tests/matrix.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

logs=$(mktemp -d)
trap 'stop_plane; echo "logs kept in $logs"' EXIT
cargo build --locked -q -p tiergate --bin tiergate
export TIERGATE_E2E_IMAGE_BINARY="${TIERGATE_E2E_IMAGE_BINARY:-$(realpath "${CARGO_TARGET_DIR:-target}")/debug/tiergate}"
cargo test --locked -q -p tiergate-e2e --no-run

IFS=, read -r -a minors <<<"$kubernetes"
IFS=, read -r -a releases <<<"$kueue"
IFS=, read -r -a names <<<"$suites"
declare -A result
reasons=""
versions=""
cells=()
for release in "${releases[@]}"; do
  kueue_minor=${release%%=*}
  kueue_dir=${release#*=}
  for minor in "${minors[@]}"; do
    cell="k8s $minor / kueue $kueue_minor"
    cells+=("$cell")
    export TIERGATE_E2E_KUBERNETES_VERSION="$minor"
    if [ "$kueue_dir" = found ]; then
      unset TIERGATE_E2E_KUEUE TIERGATE_E2E_KUEUE_CRDS
    else
      export TIERGATE_E2E_KUEUE="$kueue_dir/kueue" TIERGATE_E2E_KUEUE_CRDS="$kueue_dir/crds"
    fi
    # Kueue v0.17 reads DRA device-class mappings only behind this gate (on by default from v0.18, as
    # KueueDRAIntegration, where this one is locked off).
    if [ "$kueue_minor" = 0.17 ]; then
      export TIERGATE_E2E_KUEUE_FEATURE_GATES=DynamicResourceAllocation=true
    else
      unset TIERGATE_E2E_KUEUE_FEATURE_GATES
    fi
    echo "=== $cell: starting the control plane"
    if ! start_plane >"$logs/plane-$minor-$kueue_minor.log" 2>&1; then
      for name in "${names[@]}"; do result["$cell|$name"]="fail (plane)"; done
      reasons+="- $cell: the control plane did not start; see $logs/plane-$minor-$kueue_minor.log"$'\n'
      stop_plane
      continue
    fi
    versions+="- $cell: $(grep -E 'control plane: (kube-apiserver|kubernetes|kueue|kubelet):' \
      "$logs/plane-$minor-$kueue_minor.log" | sed 's/^control plane: //' | paste -sd ';' -)"$'\n'
    for name in "${names[@]}"; do
      log="$logs/$name-$minor-$kueue_minor.log"
      echo "=== $cell: $name"
      if cargo test --locked -q -p tiergate-e2e --test "$name" -- --nocapture >"$log" 2>&1; then
        if grep -q '^skipped: ' "$log"; then
          result["$cell|$name"]="not served"
          reasons+="- $cell, $name: $(grep -m1 '^skipped: ' "$log" | cut -c10-)"$'\n'
        else
          result["$cell|$name"]="pass"
        fi
      else
        result["$cell|$name"]="FAIL"
        reasons+="- $cell, $name: failed; see $log"$'\n'
      fi
    done
    stop_plane
  done
done

{
  echo "Version matrix, $(date -u +%Y-%m-%d), tiergate $(git rev-parse --short HEAD)"
  echo
  printf '| suite |'
  for cell in "${cells[@]}"; do printf ' %s |' "$cell"; done
  echo
  printf '|---|'
  for _ in "${cells[@]}"; do printf '%s' '---|'; done
  echo
  for name in "${names[@]}"; do
    printf '| %s |' "$name"
    for cell in "${cells[@]}"; do printf ' %s |' "${result["$cell|$name"]}"; done
    echo
  done
  echo
  echo "Versions:"
  printf '%s' "$versions"
  if [ -n "$reasons" ]; then
    echo
    printf '%s' "$reasons"
  fi
} | tee "${out:-/dev/null}"
! printf '%s\n' "${result[@]}" | grep -q '^FAIL\|^fail'
