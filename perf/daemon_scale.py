#!/usr/bin/env python3
"""`tiergate run` at scale over HTTP, no cluster needed (issue 3): memory with large caches, cold-start
convergence of 1,000 namespaces, and the latency of a namespace relabel.

Runs the given binary against the fake API server of tests/daemon_harness.py (paged lists of full-size namespace
and node objects, the sample policy, Kueue discovery, watch events for whatever is applied or deleted).

Memory scenarios: the daemon waits until its caches synced and the policy was reconciled, then VmRSS is sampled
from /proc for `--settle` seconds; the table shows the last sample and the peak (VmHWM).

  baseline         5 tiered namespaces, no nodes (the binary and runtime alone)
  untiered         10,000 namespaces without a tier label + 2,000 nodes (caches only, nothing to translate)
  cold-start       10,000 tiered namespaces + 2,000 nodes, empty cluster: 10,000 LocalQueues are applied
  restart          the same, restarted over the converged cluster: 10,000 LocalQueues cached, zero writes

Reconcile scenarios (1,000 tiered namespaces over 3 tiers):

  converge         cold start: time from "caches synced" to the last of the 1,000 LocalQueues applied, and writes
  relabel          20 namespaces relabeled one after another: time from the watch event to the new LocalQueue's
                   apply request reaching the API server (p50 and max)

Usage (release build, as in docs/performance.md):

    cargo build --release -p tiergate --bin tiergate
    python3 perf/daemon_scale.py target/release/tiergate [--settle 20] [--scenario relabel ...]
    python3 perf/daemon_scale.py target/release/tiergate --scenario cold-start --scenario restart \
        --owners-per-namespace 3      # the owner index's worst case: 30,000 Jobs cached too
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from daemon_harness import TIER_LABEL, TIERS, Daemon, FakeApi, build_namespace, http_get, wait_until  # noqa: E402

NAMESPACES = 10_000
NODES = 2_000
RECONCILE_NAMESPACES = 1_000
RELABELS = 20
MEMORY_SCENARIOS = ["baseline", "untiered", "cold-start", "restart"]
RECONCILE_SCENARIOS = ["converge", "relabel"]


def load_policy() -> dict:
    policy = yaml.safe_load((REPO / "samples" / "kubenexus" / "policy.yaml").read_text())
    policy["metadata"].update({"uid": "policy-uid", "generation": 1, "resourceVersion": "3"})
    return policy


def start(binary: pathlib.Path, api: FakeApi, tmp: pathlib.Path, env: dict[str, str]) -> tuple[Daemon, float, float]:
    """Starts the daemon; returns it with the seconds until it synced and until its first reconcile finished."""
    daemon = Daemon(binary, api, tmp, extra_env=env)
    started = time.monotonic()
    wait_until("/readyz 200", lambda: http_get(daemon.admin + "/readyz")[0] == 200, timeout=300, interval=0.05)
    synced = time.monotonic()
    wait_until("a reconcile", lambda: daemon.metric("tiergate_reconciles_total") >= 1
               and daemon.metric("tiergate_owned_objects") > 0, timeout=900, interval=0.05)
    return daemon, synced - started, time.monotonic() - started


def stop(daemon: Daemon) -> None:
    if daemon.stop() != 0:
        print(f"warning: the daemon did not exit cleanly; log: {daemon.log_path}", file=sys.stderr)


def measure_memory(binary: pathlib.Path, api: FakeApi, tmp: pathlib.Path, settle: float, env: dict[str, str],
                   expect_writes: bool) -> dict:
    before = len(api.writes)
    daemon, synced, reconciled = start(binary, api, tmp, env)
    try:
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
                "reconciled_s": reconciled, "writes": writes}
    finally:
        stop(daemon)


def local_queue_writes(api: FakeApi, since: int) -> list[tuple[float, str, str]]:
    return [write for write in api.writes_since(since) if write[1] == "PATCH" and "/localqueues/" in write[2]]


def measure_reconcile(binary: pathlib.Path, tmp: pathlib.Path, env: dict[str, str], scenarios: list[str]) -> dict:
    api = FakeApi(load_policy(), namespaces=RECONCILE_NAMESPACES)
    results: dict = {}
    daemon = Daemon(binary, api, tmp, extra_env=env)
    try:
        wait_until("/readyz 200", lambda: http_get(daemon.admin + "/readyz")[0] == 200, timeout=300, interval=0.01)
        synced = time.monotonic()
        applied = wait_until(f"{RECONCILE_NAMESPACES} LocalQueues applied",
                             lambda: (lambda w: w if len(w) >= RECONCILE_NAMESPACES else None)(local_queue_writes(api, 0)),
                             timeout=900, interval=0.01)
        wait_until("the status write", lambda: any(w[1].endswith("/status") for w in api.non_lease_writes()))
        if "converge" in scenarios:
            results["converge"] = {"seconds": applied[-1][0] - synced, "writes": len(api.non_lease_writes()),
                                   "local_queues": len(applied)}
        if "relabel" in scenarios:
            latencies = []
            for step in range(RELABELS):
                index = step * 37 % RECONCILE_NAMESPACES
                current = api.namespaces[index]["metadata"]["labels"][TIER_LABEL]
                tier = TIERS[(TIERS.index(current) + 1) % len(TIERS)]
                since = len(api.writes)
                pushed = time.monotonic()
                api.relabel_namespace(index, tier)
                target = f"/namespaces/team-{index}/localqueues/tiergate-{tier}"
                write = wait_until(f"the LocalQueue {target}", lambda: next(
                    (w for w in local_queue_writes(api, since) if w[2].endswith(target)), None), timeout=60, interval=0.002)
                latencies.append(write[0] - pushed)
                time.sleep(1.0)  # let the retiring queue's follow-up reconcile finish before the next relabel
            results["relabel"] = {"p50_ms": statistics.median(latencies) * 1000, "max_ms": max(latencies) * 1000,
                                  "count": len(latencies)}
    finally:
        stop(daemon)
        api.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", type=pathlib.Path)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds of memory sampling after convergence")
    parser.add_argument("--scenario", action="append", choices=MEMORY_SCENARIOS + RECONCILE_SCENARIOS)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the daemon's environment")
    parser.add_argument("--owners-per-namespace", type=int, default=0,
                        help="Jobs per namespace in the cold-start/restart scenarios (the owner index's worst case)")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    scenarios = args.scenario or MEMORY_SCENARIOS + RECONCILE_SCENARIOS
    memory: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        if "baseline" in scenarios:
            api = FakeApi(load_policy(), namespaces=5)
            memory["baseline"] = measure_memory(args.binary, api, tmp, args.settle, env, expect_writes=True)
            api.close()
        if "untiered" in scenarios:
            api = FakeApi(load_policy(), namespaces=5, nodes=NODES)
            api.namespaces += [build_namespace(i, tiered=False) for i in range(5, NAMESPACES)]
            memory["untiered"] = measure_memory(args.binary, api, tmp, args.settle, env, expect_writes=True)
            api.close()
        if "cold-start" in scenarios or "restart" in scenarios:
            api = FakeApi(load_policy(), namespaces=NAMESPACES, nodes=NODES,
                          owners_per_namespace=args.owners_per_namespace)
            cold = measure_memory(args.binary, api, tmp, args.settle, env, expect_writes=True)
            if "cold-start" in scenarios:
                memory["cold-start"] = cold
            if "restart" in scenarios:
                memory["restart"] = measure_memory(args.binary, api, tmp, args.settle, env, expect_writes=False)
            api.close()
        reconcile = measure_reconcile(args.binary, tmp, env, [s for s in scenarios if s in RECONCILE_SCENARIOS]) \
            if any(s in RECONCILE_SCENARIOS for s in scenarios) else {}
    print(json.dumps({"memory": memory, "reconcile": reconcile}, indent=2), file=sys.stderr)
    if memory:
        print("| scenario | RSS after settling | lowest RSS while settling | peak RSS (VmHWM) | synced | reconciled | writes |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, result in memory.items():
            print(f"| {name} | {result['rss_mib']:.1f} MiB | {result['min_rss_mib']:.1f} MiB | "
                  f"{result['peak_mib']:.1f} MiB | {result['synced_s']:.1f} s | {result['reconciled_s']:.1f} s | "
                  f"{result['writes']} |")
    if "converge" in reconcile:
        result = reconcile["converge"]
        print(f"\ncold start, {RECONCILE_NAMESPACES} namespaces: {result['local_queues']} LocalQueues applied "
              f"{result['seconds']:.2f} s after the caches synced; {result['writes']} writes in all")
    if "relabel" in reconcile:
        result = reconcile["relabel"]
        print(f"relabel -> new LocalQueue applied ({result['count']} relabels): p50 {result['p50_ms']:.0f} ms, "
              f"max {result['max_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
