#!/usr/bin/env python3
"""What the in-server gate adds to the p50 of a create (issue 40): server dry-run creates over one keep-alive HTTPS
connection, impersonating a tenant of tier bronze (samples/kubenexus), with the gate's bindings on and off
alternating for several rounds, so drift of the machine falls on both sides alike.

Workloads, as a tenant sends them (no webhook is registered; the gate works alone):
  gpu-job         a 1-GPU Job with 30 env vars and no class, queue or priority (the gate confines it)
  cpu-job         the same Job asking no GPU (the gate must cost next to nothing here)
  gpu-pod         a 1-GPU Pod
  gpu-deployment  a 1-GPU Deployment

  cargo build -q -p tiergate-e2e --bin control-plane
  (target/debug/control-plane up --env-file /tmp/gate-cp.env > /tmp/gate-cp.out 2>&1 &)
  until [ -s /tmp/gate-cp.env ]; do sleep 2; done; set -a; . /tmp/gate-cp.env; set +a
  python3 perf/gate_latency.py --rounds 6 --creates 150 > docs/results-gate-latency.md

Needs KUBECONFIG (a cluster where it may create a namespace tiergate-perf-<time>, the TierGateParameters CRD and
the gate's cluster-scoped objects of the sample, all deleted on exit), kubectl and cargo. Python's standard
library only.
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

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}, "spec": spec(True)}
    deployment_spec = copy.deepcopy(spec(True))
    deployment_spec["restartPolicy"] = "Always"
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": namespace},
                  "spec": {"selector": {"matchLabels": {"app": "d"}},
                           "template": {"metadata": {"labels": {"app": "d"}}, "spec": deployment_spec}}}
    jobs, pods = f"/apis/batch/v1/namespaces/{namespace}/jobs", f"/api/v1/namespaces/{namespace}/pods"
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    return {
        "gpu-job": (jobs, json.dumps(job(True)).encode()),
        "cpu-job": (jobs, json.dumps(job(False)).encode()),
        "gpu-pod": (pods, json.dumps(pod).encode()),
        "gpu-deployment": (deployments, json.dumps(deployment).encode()),
    }


def gate_enforced(connection: Connection, probe: tuple[str, bytes]) -> bool:
    status, _, answer = connection.dry_run_create(*probe)
    return status == 201 and "kueue.x-k8s.io/queue-name" in answer.get("metadata", {}).get("labels", {})


def wait_for(connection: Connection, probe: tuple[str, bytes], enforced: bool) -> None:
    deadline = time.monotonic() + 180
    while gate_enforced(connection, probe) != enforced:
        if time.monotonic() > deadline:
            sys.exit(f"gate_latency: the gate never became {'enforced' if enforced else 'idle'}")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="gate off/on pairs (default 6)")
    parser.add_argument("--creates", type=int, default=150, help="creates per workload per phase (default 150)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed creates before each phase (default 20)")
    arguments = parser.parse_args()
    if not os.environ.get("KUBECONFIG"):
        sys.exit("gate_latency: set KUBECONFIG (e.g. from the e2e harness: target/debug/control-plane up)")
    namespace = f"tiergate-perf-{int(time.time())}"
    items = render()
    gate = [item for item in items if item["kind"] in
            ("TierGateParameters", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")]
    bindings = [item for item in items if item["kind"] in BINDING_KINDS and item["metadata"]["name"].endswith("bronze")]
    served = kubectl("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name")
    if "mutatingadmissionpolicies" not in served:
        sys.exit("gate_latency: MutatingAdmissionPolicy is not served (Kubernetes 1.36+ is needed)")
    files = Path(tempfile.mkdtemp(prefix="tiergate-gate-latency-"))
    try:
        kubectl("create", "namespace", namespace)
        kubectl("label", "namespace", namespace, f"{TIER_LABEL}=bronze")
        kubectl("create", "rolebinding", TENANT, "--clusterrole=edit", f"--user={TENANT}", "-n", namespace)
        kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                      "items": gate}))
        bindings_doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": bindings})
        connection = Connection(files)
        load = workloads(namespace)
        samples: dict[tuple[str, bool], list[float]] = {}
        per_round: dict[tuple[str, bool], list[float]] = {}
        for round_index in range(arguments.rounds):
            order = [False, True] if round_index % 2 == 0 else [True, False]
            for enforced in order:
                if enforced:
                    kubectl("apply", "--server-side", "-f", "-", stdin=bindings_doc)
                else:
                    kubectl("delete", "--ignore-not-found", "-f", "-", stdin=bindings_doc)
                wait_for(connection, load["gpu-job"], enforced)
                for name, (path, body) in load.items():
                    for _ in range(arguments.warmup):
                        connection.dry_run_create(path, body)
                    times = []
                    for _ in range(arguments.creates):
                        status, elapsed, answer = connection.dry_run_create(path, body)
                        if status != 201:
                            sys.exit(f"gate_latency: {name} answered {status}: {answer.get('message')}")
                        times.append(elapsed * 1000)
                    samples.setdefault((name, enforced), []).extend(times)
                    per_round.setdefault((name, enforced), []).append(statistics.median(times))
        print(f"{arguments.rounds} rounds of gate off/on, {arguments.creates} dry-run creates per workload and phase, "
              f"one keep-alive connection, impersonating a bronze tenant; load average "
              f"{os.getloadavg()[0]:.2f} at the end.\n")
        print("| workload | p50 gate off | p50 gate on | added p50 | median of per-round added p50s | p90 off / on |")
        print("|---|---|---|---|---|---|")
        for name in load:
            off, on = samples[(name, False)], samples[(name, True)]
            rounds = [b - a for a, b in zip(per_round[(name, False)], per_round[(name, True)])]
            p90 = lambda values: statistics.quantiles(values, n=10)[-1]  # noqa: E731
            print(f"| {name} | {statistics.median(off):.2f} ms | {statistics.median(on):.2f} ms | "
                  f"{statistics.median(on) - statistics.median(off):+.2f} ms | {statistics.median(rounds):+.2f} ms | "
                  f"{p90(off):.2f} / {p90(on):.2f} ms |")
    finally:
        kubectl("delete", "--ignore-not-found", "--wait=false", "namespace", namespace, check=False)
        everything = json.dumps({"apiVersion": "v1", "kind": "List", "items": gate + bindings})
        kubectl("delete", "--ignore-not-found", "-f", "-", stdin=everything, check=False)
        for path in files.iterdir():
            path.unlink()
        files.rmdir()


if __name__ == "__main__":
    main()
