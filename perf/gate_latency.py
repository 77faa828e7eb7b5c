#!/usr/bin/env python3
"""What the in-server gate adds to the p50 of a create (issue 40): server dry-run creates over one keep-alive HTTPS
connection, impersonating a tenant, alternating request by request between two namespaces that differ only in the
tier label: one of tier bronze (samples/kubenexus), where the gate's bindings select it, and one of no tier, where
nothing of the gate runs. Drift of the machine falls on both sides alike; several rounds, each its own median.

Workloads, as a tenant sends them (no webhook is registered; the gate works alone):
  gpu-job           a 1-GPU Job with 30 env vars and no class, queue or priority (the mutating half confines it;
                    without it the validating half refuses it, and it is not measured)
  gpu-job-confined  the same Job as the webhook leaves it (queue, suspend, class selector and toleration)
  cpu-job           the same Job asking no GPU (the gate must cost next to nothing here)
  gpu-pod           a 1-GPU Pod (measured with the mutating half only)
  gpu-pod-confined  the same Pod with the tier's class selector and toleration, as the webhook leaves it
  gpu-deployment    a 1-GPU Deployment (with the mutating half only)
  gpu-deployment-confined  the same Deployment as the webhook leaves it

  cargo build -q -p tiergate-e2e --bin control-plane
  (target/debug/control-plane up --env-file /tmp/gate-cp.env > /tmp/gate-cp.out 2>&1 &)
  until [ -s /tmp/gate-cp.env ]; do sleep 2; done; set -a; . /tmp/gate-cp.env; set +a
  python3 perf/gate_latency.py --rounds 6 --creates 150
  python3 perf/gate_latency.py --floor --rounds 6 --creates 150    # what any ValidatingAdmissionPolicy costs here
  python3 perf/gate_latency.py --validating-only --beside-floor     # the gate and the floor in one run (issue 52)

Needs KUBECONFIG (a cluster where it may create two namespaces tiergate-perf-<time>[-untiered], the
TierGateParameters CRD and the gate's cluster-scoped objects of the sample, all deleted on exit; a third namespace
-floor and the floor policy with --beside-floor), kubectl and cargo (or --binary).
Python's standard library only.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _apiserver import ROOT, TENANT, Connection, await_type_checking, exit_on_sigterm, kubectl

TIER_LABEL = "tenant.kubenexus.io/tier"
BINDING_KINDS = ["ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"]
FLOOR_LABEL = "tiergate-perf/floor"
FLOOR_NAMESPACE_LABEL = "tiergate-perf/floor-namespace"


def render(binary: Path | None) -> list[dict]:
    if binary is None:
        subprocess.run(["cargo", "build", "-q", "-p", "tiergate", "--bin", "tiergate"], cwd=ROOT, check=True)
        binary = ROOT / "target/debug/tiergate"
    policy, cluster = ROOT / "samples/kubenexus/policy.yaml", ROOT / "samples/kubenexus/cluster.yaml"
    out = subprocess.run([binary, "render", "--policy", policy, "--cluster", cluster, "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    crds = subprocess.run([binary, "crd"], capture_output=True, text=True, check=True).stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=crds)
    kubectl("wait", "--for=condition=Established", "crd/tiergateparameters.tiergate.io", "--timeout=60s")
    return json.loads(out)["items"]


def workloads(namespace: str) -> dict[str, tuple[str, bytes]]:
    env = [{"name": f"VAR_{index:02}", "value": "x" * 40} for index in range(30)]

    def spec(gpu: bool) -> dict:
        limits = {"nvidia.com/gpu": "1"} if gpu else {"cpu": "1"}
        return {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "env": env, "resources": {"limits": limits}}]}

    def job(gpu: bool) -> dict:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": namespace},
                "spec": {"template": {"spec": spec(gpu)}}}

    # The GPU Job as the webhook leaves it (queue, suspend, class selector and toleration): what the gate sees
    # on every GPU create while the webhook answers.
    confined = job(True)
    confined["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "tiergate-bronze"}
    confined["spec"]["suspend"] = True
    confined["spec"]["template"]["spec"]["nodeSelector"] = {"gpu.nvidia.com/class": "l4"}
    confined["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}, "spec": spec(True)}
    confined_pod = copy.deepcopy(pod)
    confined_pod["spec"]["nodeSelector"] = confined["spec"]["template"]["spec"]["nodeSelector"]
    confined_pod["spec"]["tolerations"] = confined["spec"]["template"]["spec"]["tolerations"]
    deployment_spec = copy.deepcopy(spec(True))
    deployment_spec["restartPolicy"] = "Always"
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": namespace},
                  "spec": {"selector": {"matchLabels": {"app": "d"}},
                           "template": {"metadata": {"labels": {"app": "d"}}, "spec": deployment_spec}}}
    confined_deployment = copy.deepcopy(deployment)
    confined_deployment["spec"]["template"]["spec"]["nodeSelector"] = confined_pod["spec"]["nodeSelector"]
    confined_deployment["spec"]["template"]["spec"]["tolerations"] = confined_pod["spec"]["tolerations"]
    jobs, pods = f"/apis/batch/v1/namespaces/{namespace}/jobs", f"/api/v1/namespaces/{namespace}/pods"
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    return {
        "gpu-job": (jobs, json.dumps(job(True)).encode()),
        "gpu-job-confined": (jobs, json.dumps(confined).encode()),
        "cpu-job": (jobs, json.dumps(job(False)).encode()),
        "gpu-pod": (pods, json.dumps(pod).encode()),
        "gpu-pod-confined": (pods, json.dumps(confined_pod).encode()),
        "gpu-deployment": (deployments, json.dumps(deployment).encode()),
        "gpu-deployment-confined": (deployments, json.dumps(confined_deployment).encode()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="rounds over every workload (default 6)")
    parser.add_argument("--creates", type=int, default=150, help="creates per workload, round and namespace (default 150)")
    parser.add_argument("--validating-only", action="store_true",
                        help="bind the validating half only (as --mutating-gate=false or before Kubernetes 1.36)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed creates before each workload's round (default 20)")
    parser.add_argument("--binary", type=Path, help="the tiergate binary that renders the gate (default: "
                                                     "target/debug/tiergate, built first)")
    parser.add_argument("--beside-floor", action="store_true",
                        help="also bind the floor policy (--floor) to a third namespace and alternate all three request "
                             "by request: the gate's cost and the floor's from the same run, and their ratio")
    parser.add_argument("--floor", action="store_true",
                        help="bind, instead of the gate, a policy matching what the gate matches whose one validation "
                             "only reads a label: what any ValidatingAdmissionPolicy costs on this API server")
    arguments = parser.parse_args()
    exit_on_sigterm()
    if not os.environ.get("KUBECONFIG"):
        sys.exit("gate_latency: set KUBECONFIG (e.g. from the e2e harness: target/debug/control-plane up)")
    stamp = int(time.time())
    gated, plain, floored = f"tiergate-perf-{stamp}", f"tiergate-perf-{stamp}-untiered", f"tiergate-perf-{stamp}-floor"
    namespaces = (gated, plain, floored) if arguments.beside_floor else (gated, plain)
    items = render(arguments.binary)
    gate = [item for item in items if item["kind"] in
            ("TierGateParameters", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")]
    validating_only = arguments.validating_only or arguments.floor
    kinds = BINDING_KINDS[:1] if validating_only else BINDING_KINDS
    bindings = [item for item in items if item["kind"] in kinds and item["metadata"]["name"].endswith("bronze")]
    if arguments.floor:
        gate, bindings = floor_policy(gate, {TIER_LABEL: "bronze"})
    elif arguments.beside_floor:
        floor, floor_binding = floor_policy(gate, {FLOOR_NAMESPACE_LABEL: "yes"})
        gate, bindings = gate + floor, bindings + floor_binding
    served = kubectl("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name")
    if "mutatingadmissionpolicies" not in served:
        sys.exit("gate_latency: MutatingAdmissionPolicy is not served (Kubernetes 1.36+ is needed)")
    files = Path(tempfile.mkdtemp(prefix="tiergate-gate-latency-"))
    try:
        for namespace in namespaces:
            kubectl("create", "namespace", namespace)
            kubectl("create", "rolebinding", TENANT, "--clusterrole=edit", f"--user={TENANT}", "-n", namespace)
        kubectl("label", "namespace", gated, f"{TIER_LABEL}=bronze")
        if arguments.beside_floor:
            kubectl("label", "namespace", floored, f"{FLOOR_NAMESPACE_LABEL}=yes")
        kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                      "items": gate + bindings}))
        await_type_checking([item["metadata"]["name"] for item in gate if item["kind"] == "ValidatingAdmissionPolicy"])
        connection = Connection(files)
        sides = {"on": workloads(gated), "off": workloads(plain)}
        if arguments.beside_floor:
            sides["floor"] = workloads(floored)
        on = sides["on"]
        if arguments.floor:
            await_enforced(connection, refused_by_floor(on), False)
        else:
            await_enforced(connection, on["gpu-job"], not validating_only)
        if arguments.beside_floor:
            await_enforced(connection, refused_by_floor(sides["floor"]), False)
        if validating_only:
            for side in sides.values():
                for name in ("gpu-job", "gpu-pod", "gpu-deployment"):
                    del side[name]
        order = list(sides)
        samples: dict[tuple[str, str], list[float]] = {}
        per_round: dict[tuple[str, str], list[float]] = {}
        for round_index in range(arguments.rounds):
            for name in on:
                for _ in range(arguments.warmup):
                    for side in order:
                        connection.dry_run_create(*sides[side][name])
                times: dict[str, list[float]] = {side: [] for side in order}
                for index in range(arguments.creates):
                    shift = (index + round_index) % len(order)
                    for side in order[shift:] + order[:shift]:
                        status, elapsed, answer = connection.dry_run_create(*sides[side][name])
                        if status != 201:
                            sys.exit(f"gate_latency: {name} answered {status}: {answer.get('message')}")
                        times[side].append(elapsed * 1000)
                for side in order:
                    samples.setdefault((name, side), []).extend(times[side])
                    if side != "off":
                        per_round.setdefault((name, side), []).append(
                            statistics.median(times[side]) - statistics.median(times["off"]))
        halves = "the validating half" if validating_only else "both halves"
        if arguments.floor:
            halves = "none; the floor policy (one validation reading a label) in its place"
        compared = "the bronze, the floor policy's and an untiered namespace" if arguments.beside_floor else \
            "the bronze and an untiered namespace"
        print(f"Gate: {halves}. {arguments.rounds} rounds, {arguments.creates} dry-run creates per workload, round and namespace, "
              f"alternating between {compared}, one keep-alive connection, as a tenant; "
              f"load average {os.getloadavg()[0]:.2f} at the end.\n")
        if arguments.beside_floor:
            print_beside_floor(samples, per_round, list(on))
            return
        print("| workload | p50 without the gate | p50 with the gate | added p50 | added p50 per round (min / median / max) |")
        print("|---|---|---|---|---|")
        for name in on:
            with_gate, without = samples[(name, "on")], samples[(name, "off")]
            rounds = sorted(per_round[(name, "on")])
            print(f"| {name} | {statistics.median(without):.2f} ms | {statistics.median(with_gate):.2f} ms | "
                  f"{statistics.median(with_gate) - statistics.median(without):+.2f} ms | "
                  f"{rounds[0]:+.2f} / {statistics.median(rounds):+.2f} / {rounds[-1]:+.2f} ms |")
    finally:
        for namespace in namespaces:
            kubectl("delete", "--ignore-not-found", "--wait=false", "namespace", namespace, check=False)
        everything = json.dumps({"apiVersion": "v1", "kind": "List", "items": gate + bindings})
        kubectl("delete", "--ignore-not-found", "-f", "-", stdin=everything, check=False)
        for path in files.iterdir():
            path.unlink()
        files.rmdir()


def print_beside_floor(samples: dict, per_round: dict, names: list[str]) -> None:
    print("| workload | p50 untiered | p50 floor | p50 gate | floor adds | gate adds | gate / floor | per round: "
          "gate / floor (min, median, max) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        p50 = {side: statistics.median(samples[(name, side)]) for side in ("off", "floor", "on")}
        floor, gate = p50["floor"] - p50["off"], p50["on"] - p50["off"]
        ratios = sorted(g / f for g, f in zip(per_round[(name, "on")], per_round[(name, "floor")]) if f > 0)
        spread = f"{ratios[0]:.2f}, {statistics.median(ratios):.2f}, {ratios[-1]:.2f}" if ratios else "-"
        print(f"| {name} | {p50['off']:.2f} ms | {p50['floor']:.2f} ms | {p50['on']:.2f} ms | {floor:+.2f} ms | "
              f"{gate:+.2f} ms | {gate / floor:.2f}x | {spread} |")


def refused_by_floor(side: dict[str, tuple[str, bytes]]) -> tuple[str, bytes]:
    """The CPU-only Job carrying the label the floor policy refuses."""
    path, body = side["cpu-job"]
    refused = json.loads(body)
    refused["metadata"].setdefault("labels", {})[FLOOR_LABEL] = "refuse"
    return path, json.dumps(refused).encode()


def floor_policy(gate: list[dict], selector: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """A ValidatingAdmissionPolicy matching what the gate's matches, whose one validation reads a label (so a probe
    can see it enforced), bound to the namespaces `selector` selects (the bronze one in the gate's place, or a third one
beside it): the least any policy costs per create."""
    validating = next(item for item in gate if item["kind"] == "ValidatingAdmissionPolicy")
    api_version = validating["apiVersion"]
    policy = {"apiVersion": api_version, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "tiergate-perf-floor"},
              "spec": {"failurePolicy": "Fail", "matchConstraints": validating["spec"]["matchConstraints"],
                       "validations": [{"expression": f"!has(object.metadata.labels) || "
                                                      f"!('{FLOOR_LABEL}' in object.metadata.labels)",
                                        "message": "refused by the floor policy", "reason": "Forbidden"}]}}
    binding = {"apiVersion": api_version, "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": "tiergate-perf-floor"},
               "spec": {"policyName": "tiergate-perf-floor", "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": selector}}}}
    return [policy], [binding]


def await_enforced(connection: Connection, probe: tuple[str, bytes], mutating: bool) -> None:
    """Waits until the gate acts on the plain GPU Job 20 times in a row (stored in the tier's queue with the
    mutating half, refused without it): the API server compiles new policies and learns new bindings
    asynchronously."""
    deadline, steady = time.monotonic() + 180, 0
    while steady < 20:
        if time.monotonic() > deadline:
            sys.exit("gate_latency: the gate never acted on the plain GPU Job")
        status, _, answer = connection.dry_run_create(*probe)
        labels = answer.get("metadata", {}).get("labels", {}) if status == 201 else {}
        acted = "kueue.x-k8s.io/queue-name" in labels if mutating else status == 403
        steady = steady + 1 if acted else 0
        time.sleep(0.1)


if __name__ == "__main__":
    main()
