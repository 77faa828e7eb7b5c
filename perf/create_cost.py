#!/usr/bin/env python3
"""What tiergate's whole admission (its webhook and the in-server gate) adds to a tenant's create, against what
Kueue's own webhooks add (issue 52): server dry-run creates over one keep-alive HTTPS connection as an impersonated
tenant, alternating request by request between four namespaces, so that the drift of the machine falls on all
four alike:
  none    kueue-system: neither Kueue's webhooks (they exclude it) nor tiergate's (excluded in the chart values
          rendered here) are sent, and no gate binding selects it
  kueue   an untiered namespace labelled with the chart's opt-out (tiergate.io/ignore): Kueue's webhooks only
          (they leave a Job that names no queue alone)
  kueue-default
          the same, with a LocalQueue named `default` (on a ClusterQueue made here): Kueue's webhooks queue a Job
          that names no queue themselves (Kueue's LocalQueue defaulting: they set the queue label and suspend it),
          the Kueue-only way for a tenant's plain Job to land in a queue
  bronze  a namespace of tier bronze (samples/kubenexus): tiergate's webhook, the gate, and Kueue's webhooks

tiergate runs as `tiergate run` on this machine against the cluster (it reconciles a copy of the sample policy and
applies the gate as it does in production), and its webhook is registered exactly as the chart registers it: the
chart's MutatingWebhookConfiguration, rendered with the real Helm library (target/test-venv, `make -C tests
chart-venv` or tests/run.sh chart makes it), calling a Service with a CA made here. The Service is an ExternalName
one naming TIERGATE_E2E_WEBHOOK_HOST, where tiergate listens on TIERGATE_E2E_WEBHOOK_PORT (a free port instead when
the host is loopback, so that an e2e suite can run beside it): the API server dials it directly, and speaks
HTTP/1.1 to it as to any webhook registered by a Service, where it speaks HTTP/2 to one registered by a loopback URL.
The e2e harness registers Kueue's webhooks the same way.

Workloads, as a tenant sends them: a 1-GPU Job with 30 env vars and no class, queue or priority (gpu-job), the same
Job naming the LocalQueue tiergate-bronze as a Kueue user does (gpu-job-queued: Kueue's webhooks then do their
whole work in every namespace), the Job asking no GPU (cpu-job), a 1-GPU Pod (gpu-pod) and a 1-GPU Deployment
(gpu-deployment).

After the paired rounds it splits where the time goes, per create in one namespace at a time, from the API
server's /metrics (each webhook's calls and time by name, each admission plugin's time, each policy's check time)
and tiergate's own (its admission requests and their latency): how many times tiergate is called per create
(reinvocation) and what the gate's validating half (and mutating half, --mutating-gate) costs. Match-condition
time is the API server's `apiserver_admission_match_condition_evaluation_seconds`, which it records only when a
condition excluded the request (or failed), not when all held. A second table gives the same creates by whose step
it is: tiergate's calls and the gate's plugin against Kueue's calls.

--profile SECONDS then measures CPU per create of the plain GPU Job, namespace by namespace, while one connection
creates it without pause: each process's CPU time where it runs on this machine (/proc: the API server of
KUBECONFIG, the harness's Kueue, tiergate), and the API server's CPU profile (/debug/pprof/profile) split by frame
with `go tool pprof` (Go on PATH, or GO). The profiles are kept in the temporary directory.

  set -a; . /tmp/plane.env; set +a        # the e2e harness's throwaway control plane (target/debug/control-plane up)
  python3 perf/create_cost.py --rounds 6 --creates 150
  python3 perf/create_cost.py --rounds 6 --creates 150 --mutating-gate
  python3 perf/create_cost.py --rounds 0 --split 0 --profile 20

Needs KUBECONFIG (a cluster with Kueue's webhooks, where it may create four namespaces tiergate-perf-<time>-*
(tiergate's own holds the webhook's Service), a RoleBinding in kueue-system, a ClusterQueue tiergate-perf-<time>
(the kueue-default namespace's LocalQueue `default` is on it), a TierPolicy tiergate-perf-<time>
(tiergate reconciles it: ClusterQueues, flavors, the gate) and a MutatingWebhookConfiguration 00-tiergate-perf-<time>,
all deleted on exit, with tiergate's CRDs if it installed them), TIERGATE_E2E_WEBHOOK_HOST (an address of this
machine the API server reaches, as an IP address or a DNS name) and _PORT, kubectl, openssl and target/test-venv.
Python's standard library only (the chart is rendered by the venv's Python).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _apiserver import (ROOT, TENANT, Connection, apiserver_metrics, await_type_checking, difference,
                        exit_on_sigterm, fail, kubectl, parse_metrics)

TIER_LABEL = "tenant.kubenexus.io/tier"
IGNORE_LABEL = "tiergate.io/ignore"
NAMESPACES = ("none", "kueue", "kueue-default", "bronze")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
APISERVER_METRICS = ("apiserver_admission_webhook_admission_duration_seconds_",
                     "apiserver_admission_webhook_request_total",
                     "apiserver_admission_controller_admission_duration_seconds_",
                     "apiserver_admission_step_admission_duration_seconds_",
                     "apiserver_request_duration_seconds_",
                     "apiserver_validating_admission_policy_check_duration_seconds_",
                     "apiserver_mutating_admission_policy_check_duration_seconds_",
                     "apiserver_admission_match_condition_evaluation_seconds_")
TIERGATE_METRICS = ("tiergate_admission_requests_total", "tiergate_admission_latency_seconds_")

RENDER_CHART = """
import json, sys
sys.path.insert(0, "tests/chart")
from chart_helpers import render
values = json.loads(sys.argv[1])
(configuration,) = [o for o in render(values) if o["kind"] == "MutatingWebhookConfiguration"]
print(json.dumps(configuration))
"""


def workloads(namespace: str) -> dict[str, tuple[str, bytes]]:
    env = [{"name": f"VAR_{index:02}", "value": "x" * 40} for index in range(30)]

    def spec(gpu: bool, restart: str = "Never") -> dict:
        limits = {"nvidia.com/gpu": "1"} if gpu else {"cpu": "1"}
        return {"restartPolicy": restart, "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "env": env, "resources": {"limits": limits}}]}

    def job(gpu: bool) -> dict:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": namespace},
                "spec": {"template": {"spec": spec(gpu)}}}

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}, "spec": spec(True)}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": namespace},
                  "spec": {"selector": {"matchLabels": {"app": "d"}},
                           "template": {"metadata": {"labels": {"app": "d"}}, "spec": spec(True, "Always")}}}
    # The same Job naming its LocalQueue, as a tenant of a Kueue-only cluster sends it: Kueue's webhooks then do
    # their whole work in every namespace (suspend, queue checks), not only in the bronze one after tiergate.
    queued = job(True)
    queued["metadata"]["labels"] = {QUEUE_LABEL: "tiergate-bronze"}
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    return {
        "gpu-job": (jobs, json.dumps(job(True)).encode()),
        "gpu-job-queued": (jobs, json.dumps(queued).encode()),
        "cpu-job": (jobs, json.dumps(job(False)).encode()),
        "gpu-pod": (f"/api/v1/namespaces/{namespace}/pods", json.dumps(pod).encode()),
        "gpu-deployment": (f"/apis/apps/v1/namespaces/{namespace}/deployments", json.dumps(deployment).encode()),
    }


def default_queue(name: str, namespace: str) -> dict:
    """A ClusterQueue `name` for every namespace and, in `namespace`, the LocalQueue `default` on it: Kueue's
    webhooks then give a Job there that names no queue the label `default` and suspend it (LocalQueue defaulting)."""
    cluster_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                     "spec": {"namespaceSelector": {}}}
    local_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": "default", "namespace": namespace}, "spec": {"clusterQueue": name}}
    return {"apiVersion": "v1", "kind": "List", "items": [cluster_queue, local_queue]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def make_certificates(files: Path, host: str, service_name: str) -> bytes:
    """A CA and a serving certificate for `host` and the Service name `service_name` (openssl); returns the CA's
    PEM."""
    san = f"IP:{host}" if host.replace(".", "").isdigit() or ":" in host else f"DNS:{host}"
    san += f",DNS:{service_name}"

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=files, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", "/CN=tiergate-perf-ca", "-keyout", "ca.key", "-out", "ca.crt")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={host}",
            "-keyout", "tls.key", "-out", "tls.csr")
    (files / "san.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
            "-extfile", "san.ext", "-out", "tls.crt")
    return (files / "ca.crt").read_bytes()


def webhook_configuration(name: str, service: dict, ca: bytes) -> dict:
    """The chart's MutatingWebhookConfiguration (kueue-system excluded, so that namespace reaches no webhook), each
    webhook calling `service` (namespace, name, port) at its own path, as the chart registers it."""
    python = ROOT / "target/test-venv/bin/python"
    if not python.exists():
        fail("target/test-venv is missing: tests/run.sh chart (or the chart tests' setup) makes it")
    values = {"webhook": {"configurationName": name, "excludedNamespaces": ["kueue-system"]}}
    rendered = subprocess.run([python, "-c", RENDER_CHART, json.dumps(values)], cwd=ROOT, capture_output=True,
                              text=True, check=False)
    if rendered.returncode != 0:
        fail(f"rendering the chart: {rendered.stderr.strip()}")
    configuration = json.loads(rendered.stdout)
    for webhook in configuration["webhooks"]:
        path = webhook["clientConfig"]["service"]["path"]
        webhook["clientConfig"] = {"service": {**service, "path": path}, "caBundle": base64.b64encode(ca).decode()}
    configuration["metadata"] = {"name": name}
    return configuration


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return parse_metrics(answer.read().decode(), TIERGATE_METRICS)


def await_ready(admin: str, daemon: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            fail(f"tiergate run exited ({daemon.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{admin}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    fail(f"tiergate never became ready:\n{log.read_text()[-3000:]}")


def await_webhook(connection: Connection, probe: tuple[str, bytes]) -> None:
    """Waits until the webhook confines the plain GPU Job 20 times in a row."""
    deadline, steady = time.monotonic() + 180, 0
    while steady < 20:
        if time.monotonic() > deadline:
            fail("tiergate's webhook never confined the plain GPU Job")
        status, _, answer = connection.dry_run_create(*probe)
        labels = answer.get("metadata", {}).get("labels", {}) if status == 201 else {}
        steady = steady + 1 if QUEUE_LABEL in labels else 0
        time.sleep(0.05)


def measure(connection: Connection, sets: dict[str, dict], arguments) -> tuple[dict, dict]:
    """The paired rounds: every sample per (workload, namespace), and each round's median per namespace."""
    samples: dict[tuple[str, str], list[float]] = {}
    per_round: dict[tuple[str, str], list[float]] = {}
    for round_index in range(arguments.rounds):
        for name in sets["bronze"]:
            for _ in range(arguments.warmup):
                for namespace in NAMESPACES:
                    connection.dry_run_create(*sets[namespace][name])
            times: dict[str, list[float]] = {namespace: [] for namespace in NAMESPACES}
            for index in range(arguments.creates):
                shift = (index + round_index) % len(NAMESPACES)
                for namespace in NAMESPACES[shift:] + NAMESPACES[:shift]:
                    status, elapsed, answer = connection.dry_run_create(*sets[namespace][name])
                    if status != 201:
                        fail(f"{name} in {namespace} answered {status}: {answer.get('message')}")
                    times[namespace].append(elapsed * 1000)
            for namespace in NAMESPACES:
                samples.setdefault((name, namespace), []).extend(times[namespace])
                per_round.setdefault((name, namespace), []).append(statistics.median(times[namespace]))
    return samples, per_round


def split(connection: Connection, sets: dict[str, dict], creates: int, admin: str) -> dict:
    """Per (workload, namespace): the metrics' increase over `creates` creates in that namespace alone."""
    found = {}
    for name in sets["bronze"]:
        for namespace in ("kueue", "kueue-default", "bronze"):
            before, ours = apiserver_metrics(APISERVER_METRICS), scrape(f"{admin}/metrics")
            for _ in range(creates):
                connection.dry_run_create(*sets[namespace][name])
            after, ours_after = apiserver_metrics(APISERVER_METRICS), scrape(f"{admin}/metrics")
            found[(name, namespace)] = (difference(after, before), difference(ours_after, ours))
    return found


PPROF_LINE = re.compile(r"^\s*\S+\s+\S+%\s+\S+%\s+([\d.]+)(s|ms|us|µs)\s+\S+%\s+(\S.*)$", re.MULTILINE)
PROFILE_FRAMES = (
    ("the create's admission and storage", "handlers.CreateResource.createHandler.func1.2"),
    ("mutating admission, both rounds", "admission.(*reinvoker).Admit"),
    ("mutating webhooks", "mutating.(*mutatingDispatcher).Dispatch"),
    ("calls of mutating webhooks", "mutating.(*mutatingDispatcher).callAttrMutatingHook"),
    ("review encoded", "client-go/rest.(*Request).Body"),
    ("answer read", "client-go/rest.Result.Into"),
    ("patch applied", "json-patch%2ev4.Patch.ApplyIndent"),
    ("second round: object compared", "mutating.(*webhookReinvokeContext).IsOutputChangedSinceLastWebhookInvocation"),
    ("webhooks matched", "generic.(*Webhook).ShouldCallHook"),
    ("validating admission", "admission.(*reinvoker).Validate"),
    ("ValidatingAdmissionPolicy", "validating.(*dispatcher).Dispatch"),
    ("policy: object, request to unstructured", "cel.newActivation"),
    ("policy: CEL program", "cel.(*evaluationActivation).Evaluate"),
    ("dry-run storage", "registry.(*DryRunnableStorage).Create"),
    ("response written", "responsewriters.WriteObjectNegotiated"),
    ("garbage collection", "runtime.gcBgMarkWorker"),
)


def local_processes(apiserver_port: int, daemon_pid: int) -> dict[str, int]:
    """The processes whose CPU a create costs, where they run on this machine: the API server of KUBECONFIG (by its
    port), the Kueue manager the e2e harness started beside it (its config under the kubeconfig's directory), and
    tiergate. A remote cluster's are not found; their column then stays empty."""
    plane = str(Path(os.environ["KUBECONFIG"]).resolve().parent)
    found = {"tiergate": daemon_pid}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        program = Path(command[0].decode(errors="replace")).name
        arguments = [argument.decode(errors="replace") for argument in command[1:]]
        if program == "kube-apiserver" and f"--secure-port={apiserver_port}" in arguments:
            found["kube-apiserver"] = int(entry.name)
        elif program == "kueue" and any(a.startswith(f"--config={plane}/kueue/") for a in arguments):
            found["kueue"] = int(entry.name)
    return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of `pid` so far (/proc/PID/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile(connection: Connection, sets: dict[str, dict], seconds: int, daemon_pid: int) -> None:
    """CPU per create of the plain GPU Job, per namespace, while one connection creates it without pause: each
    local process's CPU time (kube-apiserver, Kueue, tiergate), and the API server's CPU profile by frame
    (cumulative), read with `go tool pprof` (Go on PATH, or $GO). The profiles are kept in the temporary directory."""
    go = os.environ.get("GO") or shutil.which("go")
    processes = local_processes(connection.port, daemon_pid)
    print(f"\nCPU per create of gpu-job, {seconds} s per namespace, one connection without pause (ms).\n")
    found: dict[str, dict[str, float]] = {}
    spent: dict[str, dict[str, float]] = {}
    for namespace in NAMESPACES:
        stop, creates = threading.Event(), [0]

        def load() -> None:
            while not stop.is_set():
                connection.dry_run_create(*sets[namespace]["gpu-job"])
                creates[0] += 1

        worker = threading.Thread(target=load)
        worker.start()
        time.sleep(1)
        start, before = creates[0], {name: cpu_seconds(pid) for name, pid in processes.items()}
        data = subprocess.run(["kubectl", "get", "--raw", f"/debug/pprof/profile?seconds={seconds}"],
                              capture_output=True, check=True).stdout
        served = max(creates[0] - start, 1)
        spent[namespace] = {name: 1000 * (cpu_seconds(pid) - before[name]) / served for name, pid in processes.items()}
        stop.set()
        worker.join()
        path = Path(tempfile.gettempdir()) / f"tiergate-create-cost-{namespace}.pprof"
        path.write_bytes(data)
        print(f"- {namespace}: {served} creates; the API server's profile in {path}")
        if go:
            top = subprocess.run([go, "tool", "pprof", "-top", "-cum", "-nodecount=100000", str(path)],
                                 capture_output=True, text=True, check=True).stdout
            frames: dict[str, float] = {}
            for match in PPROF_LINE.finditer(top):
                value = float(match.group(1)) * {"s": 1000.0, "ms": 1.0, "us": 0.001, "µs": 0.001}[match.group(2)]
                name = re.sub(r" \((partial-)?inline\)$", "", match.group(3))
                frames[name] = max(frames.get(name, 0.0), value / served)
            found[namespace] = frames
    print(f"\n| process | {' | '.join(NAMESPACES)} | Kueue's webhooks (kueue - none) | Kueue's webhooks queueing it "
          "(kueue-default - none) | tiergate (bronze - kueue) |")
    print("|---|---|---|---|---|---|---|---|")
    rows = [(name, [spent[namespace][name] for namespace in NAMESPACES])
            for name in ("kube-apiserver", "kueue", "tiergate") if name in processes]
    rows.append(("all three", [sum(spent[namespace].values()) for namespace in NAMESPACES]))
    for name, (none, kueue, queueing, bronze) in rows:
        print(f"| {name} | {none:.2f} | {kueue:.2f} | {queueing:.2f} | {bronze:.2f} | {kueue - none:+.2f} | "
              f"{queueing - none:+.2f} | {bronze - kueue:+.2f} |")
    if not found:
        print("\n(no Go toolchain: read the profiles with `go tool pprof -top -cum FILE`)")
        return
    print("\nThe API server's profile by frame, cumulative CPU per create (ms):\n")
    print(f"| frame | {' | '.join(NAMESPACES)} | bronze - kueue |\n|---|---|---|---|---|---|")
    for title, frame in PROFILE_FRAMES:
        values = {namespace: sum(value for name, value in found[namespace].items()
                                 if name == frame or name.endswith("/" + frame)) for namespace in NAMESPACES}
        print(f"| {title} (`{frame}`) | {' | '.join(f'{value:.3f}' for value in values.values())} | "
              f"{values['bronze'] - values['kueue']:+.3f} |")


def summed(delta: dict, metric: str, **match: str) -> float:
    return sum(value for (name, labels), value in delta.items()
               if name == metric and all((key, wanted) in labels for key, wanted in match.items()))


def label_values(delta: dict, metric: str, key: str) -> list[str]:
    return sorted({value for (name, labels), _ in delta.items() if name == metric for k, value in labels if k == key})


def print_split(found: dict, creates: int) -> None:
    print(f"\nWhere the time goes: {creates} creates per workload and namespace, one namespace at a time; per create, "
          "from the API server's /metrics (mean of each histogram) and tiergate's.\n")
    print("| workload | namespace | server, admit, validate (ms) | webhook calls (name x calls: mean ms) | "
          "admission plugins (ms) | policy checks; match conditions that excluded (mean ms) | tiergate: reviews, mean ms |")
    print("|---|---|---|---|---|---|---|")
    for (name, namespace), (server, ours) in found.items():
        calls = []
        for webhook in label_values(server, "apiserver_admission_webhook_admission_duration_seconds_count", "name"):
            count = summed(server, "apiserver_admission_webhook_admission_duration_seconds_count", name=webhook)
            total = summed(server, "apiserver_admission_webhook_admission_duration_seconds_sum", name=webhook)
            calls.append(f"{webhook} x{count / creates:.2f}: {1000 * total / count:.2f}")
        plugins = []
        for plugin in label_values(server, "apiserver_admission_controller_admission_duration_seconds_count", "name"):
            count = summed(server, "apiserver_admission_controller_admission_duration_seconds_count", name=plugin)
            total = summed(server, "apiserver_admission_controller_admission_duration_seconds_sum", name=plugin)
            if 1000 * total / creates >= 0.03:
                plugins.append(f"{plugin} {1000 * total / creates:.2f}")
        steps = [f"server {1000 * summed(server, 'apiserver_request_duration_seconds_sum', verb='POST') / creates:.2f}"]
        for step in ("admit", "validate"):
            total = summed(server, "apiserver_admission_step_admission_duration_seconds_sum", type=step)
            steps.append(f"{step} {1000 * total / creates:.2f}")
        checks = []
        for kind in ("validating", "mutating"):
            metric = f"apiserver_{kind}_admission_policy_check_duration_seconds"
            for policy in label_values(server, f"{metric}_count", "policy"):
                count = summed(server, f"{metric}_count", policy=policy)
                total = summed(server, f"{metric}_sum", policy=policy)
                checks.append(f"{kind} {policy} x{count / creates:.2f}: {1000 * total / max(count, 1):.2f}")
        conditions = []
        metric = "apiserver_admission_match_condition_evaluation_seconds"
        for owner in label_values(server, f"{metric}_count", "name"):
            count = summed(server, f"{metric}_count", name=owner)
            total = summed(server, f"{metric}_sum", name=owner)
            conditions.append(f"{owner} x{count / creates:.2f}: {1000 * total / max(count, 1):.3f}")
        checks.extend(f"match conditions {condition}" for condition in conditions)
        reviews = summed(ours, "tiergate_admission_requests_total")
        latency = summed(ours, "tiergate_admission_latency_seconds_sum")
        ours_text = f"{reviews / creates:.2f}, {1000 * latency / reviews:.3f}" if reviews else "0"
        print(f"| {name} | {namespace} | {', '.join(steps)} | {'; '.join(calls) or '-'} | {'; '.join(plugins) or '-'} | "
              f"{'; '.join(checks) or '-'} | {ours_text} |")
    print("\nThe same creates by whose admission step it is (ms per create: the webhooks' calls, and the gate's "
          "ValidatingAdmissionPolicy plugin):\n")
    print("| workload | namespace | tiergate: its calls + the gate | Kueue: its calls | tiergate / Kueue |")
    print("|---|---|---|---|---|")
    for (name, namespace), (server, _) in found.items():
        ours, kueue = by_owner(server, creates)
        ratio = f"{ours / kueue:.2f}x" if kueue > 0 else "-"
        print(f"| {name} | {namespace} | {ours:.2f} | {kueue:.2f} | {ratio} |")


def by_owner(server: dict, creates: int) -> tuple[float, float]:
    """Per create: the time of tiergate's admission steps (its webhooks' calls, and the ValidatingAdmissionPolicy
    plugin: the gate, and any other policy the cluster binds in the namespace) and of every other webhook's calls
    (Kueue's, on the e2e harness's plane), from the API server's metrics."""
    metric = "apiserver_admission_webhook_admission_duration_seconds_sum"
    ours = kueue = 0.0
    for webhook in label_values(server, metric, "name"):
        spent = summed(server, metric, name=webhook)
        if webhook.endswith(".tiergate.io"):
            ours += spent
        else:
            kueue += spent
    ours += summed(server, "apiserver_admission_controller_admission_duration_seconds_sum",
                   name="ValidatingAdmissionPolicy")
    return 1000 * ours / creates, 1000 * kueue / creates


def print_results(samples: dict, per_round: dict, names, arguments) -> None:
    gate = "both halves (--mutating-gate)" if arguments.mutating_gate else "the validating half"
    print(f"Gate: {gate}. {arguments.rounds} rounds, {arguments.creates} dry-run creates per workload, round and "
          f"namespace, alternating {' / '.join(NAMESPACES)} request by request, one keep-alive connection, as a "
          f"tenant; load average {os.getloadavg()[0]:.2f} at the end.\n")
    print("| workload | p50 none | p50 kueue | p50 kueue-default | p50 bronze | Kueue's webhooks (kueue - none) | "
          "Kueue's webhooks queueing it (kueue-default - none) | tiergate's whole admission (bronze - kueue) | "
          "tiergate / Kueue | tiergate / Kueue queueing it | per round: Kueue / tiergate (min, median, max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        p50 = {namespace: statistics.median(samples[(name, namespace)]) for namespace in NAMESPACES}
        kueue, ours = p50["kueue"] - p50["none"], p50["bronze"] - p50["kueue"]
        queueing = p50["kueue-default"] - p50["none"]
        rounds = list(zip(per_round[(name, "none")], per_round[(name, "kueue")], per_round[(name, "bronze")]))
        kueue_rounds = sorted(k - n for n, k, _ in rounds)
        our_rounds = sorted(b - k for _, k, b in rounds)

        def spread(values: list[float]) -> str:
            return f"{values[0]:+.2f}, {statistics.median(values):+.2f}, {values[-1]:+.2f}"

        def ratio(base: float) -> str:
            return f"{ours / base:.2f}x" if base > 0.05 else "-"

        print(f"| {name} | {p50['none']:.2f} ms | {p50['kueue']:.2f} ms | {p50['kueue-default']:.2f} ms | "
              f"{p50['bronze']:.2f} ms | {kueue:+.2f} ms | {queueing:+.2f} ms | {ours:+.2f} ms | {ratio(kueue)} | "
              f"{ratio(queueing)} | {spread(kueue_rounds)} / {spread(our_rounds)} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="rounds over every workload (default 6; 0: none)")
    parser.add_argument("--creates", type=int, default=150, help="creates per workload, round and namespace (default 150)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed creates per namespace before each workload's round")
    parser.add_argument("--split", type=int, default=200, help="creates per workload and namespace of the split (0: none)")
    parser.add_argument("--profile", type=int, default=0,
                        help="seconds of the API server's CPU profile per namespace, gpu-job (0: none)")
    parser.add_argument("--mutating-gate", action="store_true", help="run tiergate with --mutating-gate")
    parser.add_argument("--binary", type=Path, default=ROOT / "target/release/tiergate",
                        help="the tiergate binary (default target/release/tiergate)")
    arguments = parser.parse_args()
    exit_on_sigterm()
    host, port = os.environ.get("TIERGATE_E2E_WEBHOOK_HOST"), os.environ.get("TIERGATE_E2E_WEBHOOK_PORT")
    if not os.environ.get("KUBECONFIG") or not host or not port:
        fail("set KUBECONFIG, TIERGATE_E2E_WEBHOOK_HOST and TIERGATE_E2E_WEBHOOK_PORT (e.g. set -a; . /tmp/plane.env)")
    if host in ("127.0.0.1", "::1", "localhost"):
        # The API server is on this machine: any free port reaches the webhook, and the e2e suites keep theirs.
        port = str(free_port())
    if not arguments.binary.exists():
        fail(f"{arguments.binary} is missing: cargo build --release -p tiergate --bin tiergate")
    stamp = int(time.time())
    prefix = f"tiergate-perf-{stamp}"
    namespaces = {"none": "kueue-system", "kueue": f"{prefix}-kueue", "kueue-default": f"{prefix}-kueue-default",
                  "bronze": f"{prefix}-bronze"}
    made = [namespace for role, namespace in namespaces.items() if role != "none"]
    system, configuration_name = f"{prefix}-system", f"00-{prefix}"
    files = Path(tempfile.mkdtemp(prefix="tiergate-create-cost-"))
    crds = subprocess.run([arguments.binary, "crd"], capture_output=True, text=True, check=True).stdout
    crd_names = [line.split()[1] for line in crds.splitlines() if line.startswith("  name: ")]
    missing = [name for name in crd_names if not kubectl("get", "crd", name, "--ignore-not-found", "-o", "name")]
    daemon, log = None, files / "tiergate.log"
    try:
        kubectl("apply", "--server-side", "-f", "-", stdin=crds)
        for name in crd_names:
            kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        policy = (ROOT / "samples/kubenexus/policy.yaml").read_text().replace("  name: default", f"  name: {prefix}", 1)
        kubectl("apply", "--server-side", "-f", "-", stdin=policy)
        for namespace in made:
            kubectl("create", "namespace", namespace)
        for namespace in namespaces.values():
            kubectl("create", "rolebinding", prefix, "--clusterrole=edit", f"--user={TENANT}", "-n", namespace)
        for role in ("kueue", "kueue-default"):
            kubectl("label", "namespace", namespaces[role], f"{IGNORE_LABEL}=true")
        queues = default_queue(prefix, namespaces["kueue-default"])
        kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(queues))
        kubectl("label", "namespace", namespaces["bronze"], f"{TIER_LABEL}=bronze")
        # Registered by a Service, as the chart does, so that the API server calls it over HTTP/1.1 as in every
        # cluster (it speaks HTTP/2 to a webhook registered by a loopback URL); the Service is an ExternalName one
        # naming this machine's address, which the API server dials directly.
        kubectl("create", "namespace", system)
        kubectl("create", "service", "externalname", "tiergate-webhook", "-n", system, f"--external-name={host}")
        ca = make_certificates(files, host, f"tiergate-webhook.{system}.svc")
        address = f"[{host}]" if ":" in host else host
        service = {"namespace": system, "name": "tiergate-webhook", "port": int(port)}
        configuration = webhook_configuration(configuration_name, service, ca)
        kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(configuration))
        admin = f"127.0.0.1:{free_port()}"
        command = [str(arguments.binary), "run", f"--webhook-listen={address}:{port}", f"--admin-listen={admin}",
                   f"--tls-cert={files / 'tls.crt'}", f"--tls-key={files / 'tls.key'}", f"--namespace={system}",
                   "--create-lease-namespace", f"--policy-name={prefix}", f"--webhook-config-name={configuration_name}",
                   f"--gate-owner={configuration_name}", f"--mutating-gate={str(arguments.mutating_gate).lower()}"]
        daemon = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
        admin = f"http://{admin}"
        await_ready(admin, daemon, log)
        connection = Connection(files)
        sets = {role: workloads(namespace) for role, namespace in namespaces.items()}
        await_webhook(connection, sets["bronze"]["gpu-job"])
        gate = f"tiergate-gate-{prefix}"
        await_type_checking([gate])
        if arguments.rounds:
            samples, per_round = measure(connection, sets, arguments)
            print_results(samples, per_round, list(sets["bronze"]), arguments)
        if arguments.split:
            print_split(split(connection, sets, arguments.split, admin), arguments.split)
        if arguments.profile:
            profile(connection, sets, arguments.profile, daemon.pid)
    finally:
        kubectl("delete", "--ignore-not-found", "mutatingwebhookconfiguration", configuration_name, check=False)
        kubectl("delete", "--ignore-not-found", "--timeout=60s", "tierpolicy", prefix, check=False)
        kubectl("delete", "--ignore-not-found", "--wait=false", "clusterqueue", prefix, check=False)
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
        kubectl("delete", "--ignore-not-found", "rolebinding", prefix, "-n", namespaces["none"], check=False)
        for namespace in [*made, system]:
            kubectl("delete", "--ignore-not-found", "--wait=false", "namespace", namespace, check=False)
        for name in missing:
            kubectl("delete", "--ignore-not-found", "--wait=false", "crd", name, check=False)
        shutil.rmtree(files, ignore_errors=True)


if __name__ == "__main__":
    main()
