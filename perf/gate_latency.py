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

Needs KUBECONFIG (a cluster where it may create two namespaces tiergate-perf-<time>[-untiered], the
TierGateParameters CRD and the gate's cluster-scoped objects of the sample, all deleted on exit), kubectl and cargo.
Python's standard library only.
"""

from __future__ import annotations

import argparse
import base64
import copy
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TENANT = "tiergate-perf-tenant"
TIER_LABEL = "tenant.kubenexus.io/tier"
BINDING_KINDS = ["ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"]
FLOOR_LABEL = "tiergate-perf/floor"


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        sys.exit(f"gate_latency: kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def render() -> list[dict]:
    subprocess.run(["cargo", "build", "-q", "-p", "tiergate", "--bin", "tiergate"], cwd=ROOT, check=True)
    binary = ROOT / "target/debug/tiergate"
    policy, cluster = ROOT / "samples/kubenexus/policy.yaml", ROOT / "samples/kubenexus/cluster.yaml"
    out = subprocess.run([binary, "render", "--policy", policy, "--cluster", cluster, "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    crds = subprocess.run([binary, "crd"], capture_output=True, text=True, check=True).stdout
    kubectl("apply", "--server-side", "-f", "-", stdin=crds)
    kubectl("wait", "--for=condition=Established", "crd/tiergateparameters.tiergate.io", "--timeout=60s")
    return json.loads(out)["items"]


class Connection:
    """One keep-alive HTTPS connection to the API server of KUBECONFIG, impersonating the tenant."""

    def __init__(self, files: Path) -> None:
        config = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json"))
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        server = cluster["server"].removeprefix("https://")
        self.host, _, port = server.partition(":")
        self.port = int(port or 443)
        context = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        self.headers = {"Content-Type": "application/json", "Impersonate-User": TENANT,
                        "Impersonate-Group": "system:authenticated"}
        if "client-certificate-data" in user:
            cert, key = files / "client.crt", files / "client.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(cert, key)
        elif "token" in user:
            self.headers["Authorization"] = f"Bearer {user['token']}"
        self.context = context
        self.connection = http.client.HTTPSConnection(self.host, self.port, context=context)

    def dry_run_create(self, path: str, body: bytes) -> tuple[int, float, dict]:
        started = time.perf_counter()
        self.connection.request("POST", f"{path}?dryRun=All", body=body, headers=self.headers)
        answer = self.connection.getresponse()
        data = answer.read()
        elapsed = time.perf_counter() - started
        return answer.status, elapsed, json.loads(data or b"{}")


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


def await_type_checking(names: list[str]) -> None:
    """Waits (up to 5 minutes) until kube-controller-manager has type-checked the validating policy, so that its
    one-off work there is not measured as the gate's cost per create."""
    deadline = time.monotonic() + 300
    for name in names:
        while time.monotonic() < deadline:
            status = json.loads(kubectl("get", "validatingadmissionpolicy", name, "-o", "json")).get("status", {})
            if "typeChecking" in status:
                break
            time.sleep(2)
    time.sleep(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="rounds over every workload (default 6)")
    parser.add_argument("--creates", type=int, default=150, help="creates per workload, round and namespace (default 150)")
    parser.add_argument("--validating-only", action="store_true",
                        help="bind the validating half only (as --mutating-gate=false or before Kubernetes 1.36)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed creates before each workload's round (default 20)")
    parser.add_argument("--floor", action="store_true",
                        help="bind, instead of the gate, a policy matching what the gate matches whose one validation "
                             "only reads a label: what any ValidatingAdmissionPolicy costs on this API server")
    arguments = parser.parse_args()
    if not os.environ.get("KUBECONFIG"):
        sys.exit("gate_latency: set KUBECONFIG (e.g. from the e2e harness: target/debug/control-plane up)")
    stamp = int(time.time())
    gated, plain = f"tiergate-perf-{stamp}", f"tiergate-perf-{stamp}-untiered"
    items = render()
    gate = [item for item in items if item["kind"] in
            ("TierGateParameters", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")]
    validating_only = arguments.validating_only or arguments.floor
    kinds = BINDING_KINDS[:1] if validating_only else BINDING_KINDS
    bindings = [item for item in items if item["kind"] in kinds and item["metadata"]["name"].endswith("bronze")]
    if arguments.floor:
        gate, bindings = floor_policy(gate)
    served = kubectl("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name")
    if "mutatingadmissionpolicies" not in served:
        sys.exit("gate_latency: MutatingAdmissionPolicy is not served (Kubernetes 1.36+ is needed)")
    files = Path(tempfile.mkdtemp(prefix="tiergate-gate-latency-"))
    try:
        for namespace in (gated, plain):
            kubectl("create", "namespace", namespace)
            kubectl("create", "rolebinding", TENANT, "--clusterrole=edit", f"--user={TENANT}", "-n", namespace)
        kubectl("label", "namespace", gated, f"{TIER_LABEL}=bronze")
        kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                      "items": gate + bindings}))
        await_type_checking([item["metadata"]["name"] for item in gate if item["kind"] == "ValidatingAdmissionPolicy"])
        connection = Connection(files)
        on, off = workloads(gated), workloads(plain)
        if arguments.floor:
            path, body = on["cpu-job"]
            refused = json.loads(body)
            refused["metadata"].setdefault("labels", {})[FLOOR_LABEL] = "refuse"
            await_enforced(connection, (path, json.dumps(refused).encode()), False)
        else:
            await_enforced(connection, on["gpu-job"], not validating_only)
        if validating_only:
            for name in ("gpu-job", "gpu-pod", "gpu-deployment"):
                del on[name], off[name]
        samples: dict[tuple[str, bool], list[float]] = {}
        per_round: dict[str, list[float]] = {}
        for round_index in range(arguments.rounds):
            for name in on:
                for _ in range(arguments.warmup):
                    connection.dry_run_create(*on[name])
                    connection.dry_run_create(*off[name])
                times: dict[bool, list[float]] = {True: [], False: []}
                for index in range(arguments.creates):
                    order = (True, False) if (index + round_index) % 2 == 0 else (False, True)
                    for enforced in order:
                        status, elapsed, answer = connection.dry_run_create(*(on if enforced else off)[name])
                        if status != 201:
                            sys.exit(f"gate_latency: {name} answered {status}: {answer.get('message')}")
                        times[enforced].append(elapsed * 1000)
                for enforced in (True, False):
                    samples.setdefault((name, enforced), []).extend(times[enforced])
                per_round.setdefault(name, []).append(statistics.median(times[True]) - statistics.median(times[False]))
        halves = "the validating half" if validating_only else "both halves"
        if arguments.floor:
            halves = "none; the floor policy (one validation reading a label) in its place"
        print(f"Gate: {halves}. {arguments.rounds} rounds, {arguments.creates} dry-run creates per workload, round and namespace, "
              f"alternating between the bronze and an untiered namespace, one keep-alive connection, as a tenant; "
              f"load average {os.getloadavg()[0]:.2f} at the end.\n")
        print("| workload | p50 without the gate | p50 with the gate | added p50 | added p50 per round (min / median / max) |")
        print("|---|---|---|---|---|")
        for name in on:
            with_gate, without = samples[(name, True)], samples[(name, False)]
            rounds = sorted(per_round[name])
            print(f"| {name} | {statistics.median(without):.2f} ms | {statistics.median(with_gate):.2f} ms | "
                  f"{statistics.median(with_gate) - statistics.median(without):+.2f} ms | "
                  f"{rounds[0]:+.2f} / {statistics.median(rounds):+.2f} / {rounds[-1]:+.2f} ms |")
    finally:
        for namespace in (gated, plain):
            kubectl("delete", "--ignore-not-found", "--wait=false", "namespace", namespace, check=False)
        everything = json.dumps({"apiVersion": "v1", "kind": "List", "items": gate + bindings})
        kubectl("delete", "--ignore-not-found", "-f", "-", stdin=everything, check=False)
        for path in files.iterdir():
            path.unlink()
        files.rmdir()


def floor_policy(gate: list[dict]) -> tuple[list[dict], list[dict]]:
    """A ValidatingAdmissionPolicy matching what the gate's matches, whose one validation reads a label (so a probe
    can see it enforced), bound to the bronze namespace like the gate: the least any policy costs per create."""
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
                        "matchResources": {"namespaceSelector": {"matchLabels": {TIER_LABEL: "bronze"}}}}}
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
