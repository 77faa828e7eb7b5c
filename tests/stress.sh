#!/usr/bin/env bash
# Runs the whole end-to-end suite several times in a row, each run against a throwaway control plane of its own
# (started as tests/run.sh starts it), optionally beside CPU load, and prints which suite passed in which run and
# each run's slowest wait (or, where the harness prints no wait times, its slowest suite). A suite that fails in one
# run of several is a race to find, not a machine to blame.
#
# usage: bash tests/stress.sh [--runs N] [--load] [--test SUITE]... [--logs DIR] [--verbose]
#   --runs N      how many runs (default 3)
#   --load        run `stress-ng --cpu $(nproc)` beside the suites (Debian: apt-get install -y stress-ng)
#   --test SUITE  run only this suite (tests/e2e/tests/SUITE.rs); repeatable; default: every suite
#   --logs DIR    where each run's output goes (default: a new directory under ${TMPDIR:-/tmp})
#   --verbose     also stream the suites' output to the terminal
#
# The binaries are found as tests/run.sh finds them (TIERGATE_TEST_ASSETS, KUBEBUILDER_ASSETS or PATH); with
# KUBECONFIG set, every run goes against that cluster instead and no plane is started. Each run executes
# `cargo test --locked -p tiergate-e2e --no-fail-fast -- --nocapture` (--no-fail-fast: a failing suite must not hide
# how the others fared). Exits 0 when every suite passed in every run.
#
# Output: per run, one line as it ends; at the end a table of suite x run (`ok`, `skip` when every test of the
# suite printed a skip line, `FAIL`, `CRASH` when the suite printed no result line, `-` when it did not run), each
# run's slowest wait (`wait: <what> took <X>s` lines, when the harness prints them) and slowest suite (libtest's
# `finished in <X>s`), and the failed tests by run. Logs: run-N.log (the suites), plane-N.log (the control plane).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

runs=3
load=false
verbose=false
logs=
suites=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs)
      [ $# -ge 2 ] || { echo "stress: --runs needs a number" >&2; exit 2; }
      runs=$2
      shift 2
      ;;
    --load) load=true; shift ;;
    --verbose) verbose=true; shift ;;
    --test)
      [ $# -ge 2 ] || { echo "stress: --test needs a suite name" >&2; exit 2; }
      suites+=("$2")
      shift 2
      ;;
    --logs)
      [ $# -ge 2 ] || { echo "stress: --logs needs a directory" >&2; exit 2; }
      logs=$2
      shift 2
      ;;
    -h | --help) usage; exit 0 ;;
    *) echo "stress: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$runs" in
  '' | *[!0-9]* | 0) echo "stress: --runs wants a whole number of at least 1, not '$runs'" >&2; exit 2 ;;
esac
for suite in "${suites[@]}"; do
  [ -f "tests/e2e/tests/$suite.rs" ] || { echo "stress: no suite tests/e2e/tests/$suite.rs" >&2; exit 2; }
done
if $load && ! command -v stress-ng >/dev/null 2>&1; then
  echo "stress: --load needs stress-ng, which is not installed (Debian/Ubuntu: apt-get install -y stress-ng)" >&2
  exit 2
fi
if [ -z "$logs" ]; then
  logs=$(mktemp -d "${TMPDIR:-/tmp}/tiergate-stress.XXXXXX")
else
  mkdir -p "$logs"
fi

# Everything started here is stopped on every way out: the plane of the current run and the load.
# shellcheck source=tests/lib/plane.sh
. tests/lib/plane.sh
load_pid=
stop_load() {
  if [ -n "$load_pid" ]; then
    kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
    load_pid=
  fi
}
cleanup() {
  stop_plane
  stop_load
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

target_dir=${CARGO_TARGET_DIR:-target}

echo "stress: building (before any load)..."
if [ -z "${KUBECONFIG:-}" ]; then
  cargo build --locked -q -p tiergate-e2e --bin control-plane
fi
cargo build --locked -q -p tiergate --bin tiergate
cargo test --locked -q -p tiergate-e2e --no-run
export TIERGATE_E2E_IMAGE_BINARY="${TIERGATE_E2E_IMAGE_BINARY:-$(realpath -m "$target_dir/debug/tiergate")}"

test_args=(--locked -p tiergate-e2e --no-fail-fast)
for suite in "${suites[@]}"; do
  test_args+=(--test "$suite")
done

if $load; then
  stress-ng --cpu "$(nproc)" --quiet &
  load_pid=$!
  echo "stress: stress-ng --cpu $(nproc) running beside the suites (pid $load_pid)"
fi

# One run's log, parsed: per suite `name<TAB>status<TAB>seconds`, the failed tests and the waits, in three files.
parse_run() {
  local log=$1 out=$2
  : >"$out.results"
  : >"$out.failed"
  : >"$out.waits"
  awk -v results="$out.results" -v failed="$out.failed" -v waits="$out.waits" '
    function finish() {
      if (suite != "" && !done) { printf "%s\tCRASH\t-\n", suite >> results }
      done = 1
    }
    /^ *Running / {
      finish()
      path = ($2 == "unittests") ? $3 : $2
      n = split(path, parts, "/"); name = parts[n]; sub(/\.rs$/, "", name)
      suite = ($2 == "unittests") ? name "(unit)" : name
      done = 0; skipped = 0
      next
    }
    /^ *Doc-tests / { finish(); suite = "doc-tests"; done = 0; skipped = 0; next }
    /^skipped: / { skipped++ }
    /^test result: / {
      status = ($3 == "ok.") ? "ok" : "FAIL"
      passed = $4 + 0
      if (status == "ok" && passed > 0 && skipped >= passed) { status = "skip" }
      seconds = $NF; sub(/s$/, "", seconds)
      if (suite != "") { printf "%s\t%s\t%s\n", suite, status, seconds >> results }
      done = 1
    }
    match($0, /test [^ ]+ \.\.\. FAILED/) {
      line = substr($0, RSTART + 5, RLENGTH - 5); sub(/ \.\.\. FAILED$/, "", line)
      printf "%s::%s\n", suite, line >> failed
    }
    match($0, /wait: .* took [0-9.]+ ?s$/) {
      text = substr($0, RSTART + 6); took = text
      sub(/ took [0-9.]+ ?s$/, "", text); sub(/^.* took /, "", took); sub(/ ?s$/, "", took)
      printf "%s\t%s\n", took, text >> waits
    }
    END { finish() }
  ' "$log"
}

all_passed=true
for run in $(seq 1 "$runs"); do
  log="$logs/run-$run.log"
  started=$(date +%s)
  if [ -z "${KUBECONFIG:-}" ]; then
    # start_plane exports the plane's KUBECONFIG and TIERGATE_E2E_* values; stop_plane takes them back.
    if ! start_plane >"$logs/plane-$run.log" 2>&1; then
      echo "stress: run $run: the throwaway control plane failed to start; see $logs/plane-$run.log" >&2
      all_passed=false
      : >"$log"
      parse_run "$log" "$logs/run-$run"
      continue
    fi
  else
    echo "stress: run $run against the cluster in KUBECONFIG ($KUBECONFIG)"
  fi
  status=0
  if $verbose; then
    cargo test "${test_args[@]}" -- --nocapture 2>&1 | tee "$log" || status=$?
  else
    cargo test "${test_args[@]}" -- --nocapture >"$log" 2>&1 || status=$?
  fi
  stop_plane
  parse_run "$log" "$logs/run-$run"
  [ "$status" -eq 0 ] || all_passed=false
  failures=$(awk -F '\t' '$2 != "ok" && $2 != "skip"' "$logs/run-$run.results" | wc -l)
  echo "stress: run $run/$runs done in $(($(date +%s) - started)) s: cargo test exit $status," \
    "$failures suite(s) not passing; log $log"
done
stop_load

# The table: one row per suite seen in any run, one column per run.
echo
mapfile -t names < <(cat "$logs"/run-*.results 2>/dev/null | cut -f1 | sort -u)
printf '%-28s' "suite"
for run in $(seq 1 "$runs"); do printf '  %-6s' "run $run"; done
echo
for name in "${names[@]}"; do
  printf '%-28s' "$name"
  for run in $(seq 1 "$runs"); do
    cell=$(awk -F '\t' -v name="$name" '$1 == name { print $2; exit }' "$logs/run-$run.results")
    printf '  %-6s' "${cell:--}"
  done
  echo
done
if [ "${#names[@]}" -eq 0 ]; then
  echo "(no suite ran; see the logs)"
fi

echo
echo "slowest suite per run (libtest's 'finished in'):"
for run in $(seq 1 "$runs"); do
  slowest=$(awk -F '\t' '$3 != "-" { print $3 "\t" $1 }' "$logs/run-$run.results" | sort -g -r | head -n 1)
  if [ -n "$slowest" ]; then
    printf '  run %s: %s s  %s\n' "$run" "${slowest%%$'\t'*}" "${slowest#*$'\t'}"
  else
    printf '  run %s: -\n' "$run"
  fi
done
if cat "$logs"/run-*.waits 2>/dev/null | grep -q .; then
  echo "slowest wait per run (the harness's 'wait: <what> took <X>s' lines):"
  for run in $(seq 1 "$runs"); do
    slowest=$(sort -g -r "$logs/run-$run.waits" | head -n 1)
    if [ -n "$slowest" ]; then
      printf '  run %s: %s s  %s\n' "$run" "${slowest%%$'\t'*}" "${slowest#*$'\t'}"
    else
      printf '  run %s: -\n' "$run"
    fi
  done
else
  echo "slowest wait per run: not printed by this harness (wait_for in tests/e2e/src/lib.rs prints no durations)"
fi
if cat "$logs"/run-*.failed 2>/dev/null | grep -q .; then
  echo "failed tests:"
  for run in $(seq 1 "$runs"); do
    while IFS= read -r test; do
      echo "  run $run: $test"
    done <"$logs/run-$run.failed"
  done
fi
echo "logs: $logs"
$all_passed
