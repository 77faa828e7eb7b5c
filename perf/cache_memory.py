#!/usr/bin/env python3
"""Resident memory of `tiergate run` with large caches (issue 3: 10,000 namespaces and 2,000 nodes, < 64 MiB).

Runs the given binary against the fake API server of tests/daemon_harness.py (paged lists of full-size namespace
and node objects, the sample policy, Kueue discovery), waits until the caches synced and the policy was reconciled,
then samples VmRSS from /proc for a while and reports the last sample and the peak (VmHWM). Scenarios:

  baseline         5 tiered namespaces, no nodes (the binary and runtime alone)
  untiered         10,000 namespaces without a tier label + 2,000 nodes (caches only, nothing to translate)
  cold-start       10,000 tiered namespaces + 2,000 nodes, empty cluster: 10,000 LocalQueues are applied
  restart          the same, restarted over the converged cluster: 10,000 LocalQueues cached, zero writes

Usage (release build, as in docs/performance.md):

    cargo build --release -p tiergate --bin tiergate
    python3 perf/cache_memory.py target/release/tiergate [--settle 20] [--scenario restart ...]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from daemon_harness import Daemon, FakeApi, build_namespace, http_get, wait_until  # noqa: E402

NAMESPACES = 10_000
NODES = 2_000
ENV: list[str] = []


def load_policy() -> dict:
    policy = yaml.safe_load((REPO / "samples" / "kubenexus" / "policy.yaml").read_text())
    policy["metadata"].update({"uid": "policy-uid", "generation": 1, "resourceVersion": "3"})
    return policy


def measure(binary: pathlib.Path, api: FakeApi, tmp: pathlib.Path, settle: float, expect_writes: bool) -> dict:
    """Starts the daemon, waits for sync and a reconcile, samples memory for `settle` seconds, stops it."""
    before = len(api.writes)
    daemon = Daemon(binary, api, tmp, extra_env=dict(item.split("=", 1) for item in ENV))
    started = time.monotonic()
    try:
        wait_until("/readyz 200", lambda: http_get(daemon.admin + "/readyz")[0] == 200, timeout=300)
        synced = time.monotonic() - started
        wait_until("a reconcile", lambda: daemon.metric("tiergate_reconciles_total") >= 1
                   and daemon.metric("tiergate_owned_objects") > 0, timeout=600)
        converged = time.monotonic() - started
        samples = []
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            samples.append(daemon.memory_kib())
            time.sleep(1)
        memory = daemon.memory_kib()
        writes = len(api.non_lease_writes(before))
        if not expect_writes and writes:
            print(f"warning: {writes} writes on a converged cluster", file=sys.stderr)
        return {"rss_mib": memory["VmRSS"] / 1024, "peak_mib": memory["VmHWM"] / 1024,
                "min_rss_mib": min(s["VmRSS"] for s in samples) / 1024, "synced_s": synced,
                "converged_s": converged, "writes": writes}
    finally:
        if daemon.stop() != 0:
            print(f"warning: the daemon did not exit cleanly; log: {daemon.log_path}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", type=pathlib.Path)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds of sampling after convergence")
    parser.add_argument("--scenario", action="append", choices=["baseline", "untiered", "cold-start", "restart"])
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the daemon's environment")
    args = parser.parse_args()
    ENV.extend(args.env)
    scenarios = args.scenario or ["baseline", "untiered", "cold-start", "restart"]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        if "baseline" in scenarios:
            api = FakeApi(load_policy(), namespaces=5)
            results["baseline"] = measure(args.binary, api, tmp, args.settle, expect_writes=True)
            api.close()
        if "untiered" in scenarios:
            api = FakeApi(load_policy(), namespaces=5, nodes=NODES)
            api.namespaces += [build_namespace(i, tiered=False) for i in range(5, NAMESPACES)]
            results["untiered"] = measure(args.binary, api, tmp, args.settle, expect_writes=True)
            api.close()
        if "cold-start" in scenarios or "restart" in scenarios:
            api = FakeApi(load_policy(), namespaces=NAMESPACES, nodes=NODES)
            cold = measure(args.binary, api, tmp, args.settle, expect_writes=True)
            if "cold-start" in scenarios:
                results["cold-start"] = cold
            if "restart" in scenarios:
                results["restart"] = measure(args.binary, api, tmp, args.settle, expect_writes=False)
            api.close()
    print(json.dumps(results, indent=2), file=sys.stderr)
    print("| scenario | RSS after settling | lowest RSS while settling | peak RSS (VmHWM) | synced | reconciled | writes |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, result in results.items():
        print(f"| {name} | {result['rss_mib']:.1f} MiB | {result['min_rss_mib']:.1f} MiB | {result['peak_mib']:.1f} MiB "
              f"| {result['synced_s']:.1f} s | {result['converged_s']:.1f} s | {result['writes']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
