#!/usr/bin/env bash
# Loopback load test of the release `tiergate webhook --offline` with oha: keep-alive 8 connections, 1 connection,
# a new TLS connection per request, 1 MiB reviews cycled over 8 connections (Jobs of long env lists, issue 15),
# then a constant-rate soak recording the server's resident memory every 10 s.
# Writes perf/results/<UTC timestamp>.md (and prints it). Loopback only; every step is bounded and the server is
# stopped on exit.
#
#   perf/run.sh                                   # full run: 3 x 30 s scenarios + 10-minute soak at 1,000 req/s
#   LOAD_SECONDS=10 SOAK_SECONDS=60 perf/run.sh   # quick try
#
# Environment: LOAD_SECONDS (30), SOAK_SECONDS (600), SOAK_RATE (1000 req/s), SOAK_CONNECTIONS (8),
# PROFILE (release; `bench` is the same optimized build with line tables, reusing the benches' build),
# BODY (one review file; default: every recorded fixture in turn, one compact JSON per line via oha -Z),
# PORT (18443), ADMIN_PORT (18080).
set -euo pipefail

cd "$(dirname "$0")/.."
LOAD_SECONDS=${LOAD_SECONDS:-30}
SOAK_SECONDS=${SOAK_SECONDS:-600}
SOAK_RATE=${SOAK_RATE:-1000}
SOAK_CONNECTIONS=${SOAK_CONNECTIONS:-8}
PORT=${PORT:-18443}
ADMIN_PORT=${ADMIN_PORT:-18080}
FIXTURES=${FIXTURES:-$( [ -d ../shared/fixtures/admission ] && echo ../shared/fixtures/admission || echo ../../shared/fixtures/admission )}
BODY=${BODY:-}
URL="https://127.0.0.1:$PORT/mutate"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=perf/results
OUT="$RESULTS/$STAMP.md"
WORK=$(mktemp -d -t tiergate-perf-XXXXXX)
mkdir -p "$RESULTS"

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# --- tools and binary --------------------------------------------------------------------------------------------
if ! command -v oha >/dev/null; then
    log "installing oha (cargo install --locked oha)"
    cargo install --locked oha
fi
if [ -n "$BODY" ]; then
    BODY_ARGS=(-D "$BODY")
    BODY_NAME="$(basename "$BODY") ($(wc -c <"$BODY") bytes)"
else
    [ -d "$FIXTURES" ] || { echo "fixtures not found at $FIXTURES; set FIXTURES= or BODY=" >&2; exit 1; }
    python3 -c 'import json, sys, pathlib
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    print(json.dumps(json.loads(path.read_text()), separators=(",", ":")))' "$FIXTURES" >"$WORK/bodies.jsonl"
    BODY_ARGS=(-Z "$WORK/bodies.jsonl")
    BODY_NAME="the $(wc -l <"$WORK/bodies.jsonl") recorded fixtures in turn (compact JSON, $(wc -c <"$WORK/bodies.jsonl") bytes in all)"
fi
# 1 MiB reviews: the bronze GPU Job grown with env entries to ~1 MiB, four variants (CREATE and UPDATE, two entry
# sizes), one compact JSON per line.
python3 - "$FIXTURES/job-create-bronze-gpu-scored.json" >"$WORK/large.jsonl" <<'EOF'
import copy, json, sys
base = json.load(open(sys.argv[1]))
for update in (False, True):
    for value in (64, 256):
        review = copy.deepcopy(base)
        entry = len(json.dumps({"name": "CONFIG_00000", "value": "x" * value})) + 1
        count = (1024 * 1024 // (2 if update else 1)) // entry
        env = [{"name": f"CONFIG_{i:05}", "value": "x" * value} for i in range(count)]
        review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["env"] = env
        if update:
            review["request"]["operation"] = "UPDATE"
            review["request"]["oldObject"] = copy.deepcopy(review["request"]["object"])
        print(json.dumps(review, separators=(",", ":")))
EOF
LARGE_NAME="4 Jobs of ~1 MiB in turn (CREATE and UPDATE; $(wc -c <"$WORK/large.jsonl") bytes in all)"
log "building the release binary"
cargo build --profile "${PROFILE:-release}" -p tiergate --bin tiergate
BIN=target/release/tiergate

# --- server ------------------------------------------------------------------------------------------------------
"$BIN" webhook --offline --policy samples/kubenexus/policy.yaml --cluster samples/kubenexus/cluster.yaml \
    --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" >"$WORK/server.log" 2>&1 &
SERVER=$!
cleanup() {
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
# Ready when /mutate answers (405 to a GET); the admin port's /readyz is not served by every build.
serving() { [ "$(curl -sk -o /dev/null -w '%{http_code}' "$URL")" = 405 ]; }
for _ in $(seq 100); do
    serving && break
    sleep 0.1
done
serving || { cat "$WORK/server.log" >&2; exit 1; }

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER/status"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$SERVER/status"; }

# oha [extra args...] -> JSON summary in $WORK/$name.json
load() {
    local name=$1
    shift
    log "scenario $name"
    oha --no-tui --insecure --output-format json -m POST -T application/json "${BODY_ARGS[@]}" "$@" "$URL" \
        >"$WORK/$name.json"
}

# One row: scenario, requests/s, p50, p99, max (ms), successes, errors.
row() {
    python3 - "$WORK/$1.json" "$2" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
summary, pct = data["summary"], data.get("latencyPercentiles", {})
ms = lambda seconds: "%.2f" % ((seconds or 0) * 1000)
codes = data.get("statusCodeDistribution", {})
ok = sum(count for code, count in codes.items() if code == "200")
# oha cancels the requests still in flight when -z runs out ("aborted due to deadline"): not server errors.
failures = {error: count for error, count in data.get("errorDistribution", {}).items() if "deadline" not in error}
errors = sum(count for code, count in codes.items() if code != "200") + sum(failures.values())
print(f"| {sys.argv[2]} | {summary['requestsPerSec']:.0f} | {ms(pct.get('p50'))} | {ms(pct.get('p99'))} | "
      f"{ms(summary.get('slowest'))} | {ok} | {errors} |")
EOF
}

load warmup -z 3s -c 8 >/dev/null
load keepalive8 -z "${LOAD_SECONDS}s" -c 8
RSS_LOAD=$(rss_kib)
load keepalive1 -z "${LOAD_SECONDS}s" -c 1
load fresh8 -z "${LOAD_SECONDS}s" -c 8 --disable-keepalive
RSS_AFTER_FRESH=$(rss_kib)
BODY_ARGS_SMALL=("${BODY_ARGS[@]}")
BODY_ARGS=(-Z "$WORK/large.jsonl")
load large8 -z "${LOAD_SECONDS}s" -c 8
BODY_ARGS=("${BODY_ARGS_SMALL[@]}")
RSS_AFTER_LARGE=$(rss_kib)

# --- soak ----------------------------------------------------------------------------------------------------------
log "soak: ${SOAK_SECONDS} s at ${SOAK_RATE} req/s over ${SOAK_CONNECTIONS} connections"
echo "seconds,vmrss_kib" >"$WORK/rss.csv"
load soak -z "${SOAK_SECONDS}s" -c "$SOAK_CONNECTIONS" -q "$SOAK_RATE" &
SOAK=$!
START=$(date +%s)
while kill -0 "$SOAK" 2>/dev/null; do
    echo "$(( $(date +%s) - START )),$(rss_kib)" >>"$WORK/rss.csv"
    for _ in $(seq 10); do kill -0 "$SOAK" 2>/dev/null && sleep 1; done
done
wait "$SOAK"
HWM=$(hwm_kib)

# --- report -------------------------------------------------------------------------------------------------------
{
    echo "# tiergate webhook load test, $STAMP"
    echo
    echo "Machine: $(nproc) cores ($(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, Linux $(uname -r), load average at start of report: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Binary: target/release/tiergate ($(git rev-parse --short HEAD 2>/dev/null || echo unknown)), oha $(oha --version | awk '{print $2}'), body: $BODY_NAME; 1 MiB scenario: $LARGE_NAME. Client and server share the machine."
    echo
    echo "| scenario | req/s | p50 ms | p99 ms | max ms | 200s | errors |"
    echo "|---|---|---|---|---|---|---|"
    row keepalive8 "keep-alive, 8 connections, ${LOAD_SECONDS} s"
    row keepalive1 "keep-alive, 1 connection, ${LOAD_SECONDS} s"
    row fresh8 "new TLS connection per request, 8 clients, ${LOAD_SECONDS} s"
    row large8 "1 MiB reviews, keep-alive, 8 connections, ${LOAD_SECONDS} s"
    row soak "soak: ${SOAK_RATE} req/s over ${SOAK_CONNECTIONS} connections, ${SOAK_SECONDS} s"
    echo
    python3 - "$WORK/rss.csv" "$RSS_LOAD" "$RSS_AFTER_FRESH" "$HWM" "$RSS_AFTER_LARGE" <<'EOF'
import csv, sys
rows = [(int(r["seconds"]), int(r["vmrss_kib"])) for r in csv.DictReader(open(sys.argv[1])) if r["vmrss_kib"]]
mib = lambda kib: int(kib) / 1024
print(f"Resident memory: {mib(sys.argv[2]):.1f} MiB after keep-alive x8, {mib(sys.argv[3]):.1f} MiB after the "
      f"new-connection run, {mib(sys.argv[5]):.1f} MiB after the 1 MiB reviews, peak (VmHWM) "
      f"{mib(sys.argv[4]):.1f} MiB.")
if len(rows) >= 2:
    first = next((kib for seconds, kib in rows if seconds >= 10), rows[0][1])
    last = rows[-1][1]
    print(f"Soak: VmRSS {mib(first):.1f} MiB at 10 s, {mib(last):.1f} MiB at the end: growth "
          f"{(last - first) * 100 / first:+.1f} %.")
    print()
    print("| s | VmRSS MiB |")
    print("|---|---|")
    for seconds, kib in rows:
        print(f"| {seconds} | {mib(kib):.1f} |")
EOF
} >"$OUT"
rm -f "$WORK/warmup.json"
for file in "$WORK"/*.json "$WORK/rss.csv"; do cp "$file" "$RESULTS/$STAMP-$(basename "$file")"; done
cat "$OUT"
log "results in $OUT"
