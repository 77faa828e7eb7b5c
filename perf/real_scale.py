#!/usr/bin/env python3
"""`tiergate run` at a large organisation's scale against a real API server (issue 31).

Uses the cluster in KUBECONFIG, or starts the e2e harness's throwaway control plane (`tests/e2e`, binary
`control-plane`: etcd, kube-apiserver, kube-controller-manager and Kueue found in TIERGATE_TEST_ASSETS,
KUBEBUILDER_ASSETS or PATH; it says which one is missing and this script stops). Loads, at `--scale 1`:

  10,000 namespaces over three tiers (team-N, the sample policy's tier label), 2,000 GPU nodes (Node objects with
  ~30 labels, a GPU taint, allocatable, images and conditions; no kubelet), 50,000 suspended Jobs (5 per namespace)

and measures the release binary `tiergate run` over it:

  plain client     the rate the API server accepts LocalQueue applies from this script (3,000 of them, 8 in flight
                   as the daemon's APPLY_CONCURRENCY) doing nothing else: the yardstick of the cold start
  empty webhook    webhook p50/p99 over one keep-alive TLS connection on a cluster of only the policy
  namespace steps  steady RSS at 10 %, 50 %, 100 % of the namespaces and nodes (no Jobs)
  cold start       every LocalQueue removed, then start → all of them applied: seconds and writes per second
  owner steps      steady RSS at 10 %, 50 %, 100 % of the Jobs (all namespaces and nodes), each a restart over
                   the converged cluster: seconds to ready and the writes it made (must be 0); beside each, a
                   plain client's metadata list of every Job in the daemon's pages of 500 (the server's floor)
  full webhook     webhook p50/p99 over one connection with everything cached
  relabel          1,000 namespaces relabeled at once → seconds until each one's new LocalQueue exists, and
                   until each old (empty) one is pruned

Each phase can be run alone (`--phase`, repeated); objects already in the cluster are not created again, so a
loaded cluster can be reused (the namespace steps need one without more namespaces than the step).

Usage (not part of CI: a full run takes ~45 minutes on a busy 2-core machine, most of it creating 50,000 Jobs
through Kueue's webhooks):

    cargo build --release -p tiergate --bin tiergate
    python3 perf/real_scale.py                       # throwaway control plane, full load
    python3 perf/real_scale.py --scale 0.1           # a tenth of it
    python3 perf/real_scale.py --phase owners --phase webhook --phase relabel   # on an already loaded cluster
    KUBECONFIG=~/.kube/config python3 perf/real_scale.py --keep   # a cluster of your own (it is left loaded)

Only the Python standard library and PyYAML are used (the API is spoken over http.client with the kubeconfig's
client certificate). The result is printed as markdown and written to perf/results/real-scale-<time>.json.
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import http.client
import json
import os
import pathlib
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from daemon_harness import TIER_LABEL, TIERS, build_namespace, build_node, free_port, http_get  # noqa: E402

NAMESPACES = 10_000
NODES = 2_000
JOBS = 50_000
RELABELS = 1_000
STEPS = (0.1, 0.5, 1.0)
WORKERS = 8
PHASES = ["empty-webhook", "namespaces", "plain", "cold", "owners", "webhook", "relabel"]
PLAIN_CLIENT_APPLIES = 3_000  # enough for a rate; the rest of the 10,000 would only lengthen the run
JOB_WORKERS = 32  # a Job create waits on Kueue's webhooks: latency-bound, so more in flight
DAEMON_ENV: dict[str, str] = {}  # --env NAME=VALUE
DAEMON_LOG_DIR: list[pathlib.Path] = []  # --daemon-logs DIR
LQ = "/apis/kueue.x-k8s.io/v1beta2"
WEBHOOK_FIXTURES = ("job-create-bronze-gpu-scored.json", "pod-create-from-job-1.json")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Kube:
    """A minimal API client: one keep-alive TLS connection per thread, the kubeconfig's client certificate."""

    def __init__(self, kubeconfig: pathlib.Path, tmp: pathlib.Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        current = config.get("current-context")
        context = next((c["context"] for c in config.get("contexts", []) if c["name"] == current), None)
        cluster = next(c["cluster"] for c in config["clusters"]
                       if context is None or c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if context is None or u["name"] == context["user"])
        url = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port or 443
        self.context = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            self.context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif "certificate-authority" in cluster:
            self.context.load_verify_locations(cluster["certificate-authority"])
        self.headers = {}
        if "client-certificate-data" in user:
            cert, key = tmp / "client.crt", tmp / "client.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            self.context.load_cert_chain(cert, key)
        elif "client-certificate" in user:
            self.context.load_cert_chain(user["client-certificate"], user["client-key"])
        elif "token" in user:
            self.headers["Authorization"] = f"Bearer {user['token']}"
        else:
            raise SystemExit("real_scale.py: the kubeconfig's user has no client certificate or token")
        self.local = threading.local()

    def connection(self) -> http.client.HTTPSConnection:
        if getattr(self.local, "connection", None) is None:
            self.local.connection = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                                                timeout=120)
        return self.local.connection

    def request(self, method: str, path: str, body: object = None,
                content_type: str = "application/json") -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(5):
            try:
                connection = self.connection()
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                if (response.status == 429 or response.status >= 500) and attempt < 4:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                try:
                    return response.status, json.loads(payload) if payload else {}
                except ValueError:
                    return response.status, {"message": payload[:200].decode(errors="replace")}
            except (OSError, http.client.HTTPException):
                self.local.connection = None
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        return 599, {}

    def must(self, method: str, path: str, body: object = None, content_type: str = "application/json",
             ok: tuple[int, ...] = (200, 201)) -> dict:
        status, payload = self.request(method, path, body, content_type)
        if status not in ok:
            raise RuntimeError(f"{method} {path}: {status} {payload.get('message', payload)}")
        return payload

    def apply(self, path: str, body: dict, manager: str) -> dict:
        return self.must("PATCH", f"{path}?fieldManager={manager}&force=true", body, "application/apply-patch+yaml")

    def metadata_pages(self, path: str, limit: int):
        """Every object at `path` as metadata-only list pages of `limit` (what a metadata watch lists first)."""
        token = ""
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=120)
        try:
            while True:
                query = f"limit={limit}" + (f"&continue={urllib.parse.quote(token)}" if token else "")
                connection.request("GET", f"{path}?{query}", headers={
                    **self.headers, "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
                page = json.loads(connection.getresponse().read())
                yield page.get("items") or []
                token = page.get("metadata", {}).get("continue", "")
                if not token:
                    return
        finally:
            connection.close()

    def names(self, path: str) -> set[tuple[str, str]]:
        """(namespace, name) of every object at `path`, from metadata-only pages."""
        return {(item["metadata"].get("namespace", ""), item["metadata"]["name"])
                for page in self.metadata_pages(path, 5000) for item in page}

    def list_all(self, path: str, params: str = "") -> list[dict]:
        items, token = [], ""
        while True:
            query = f"limit=2000{params}" + (f"&continue={urllib.parse.quote(token)}" if token else "")
            page = self.must("GET", f"{path}?{query}")
            items += page.get("items", [])
            token = page.get("metadata", {}).get("continue", "")
            if not token:
                return items


def parallel(kube: Kube, calls: list, workers: int = WORKERS) -> float:
    """Runs every `call(kube)` on `workers` threads; returns the seconds it took."""
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for future in concurrent.futures.as_completed([pool.submit(call, kube) for call in calls]):
            future.result()
    return time.monotonic() - started


def create(path: str, body: dict):
    return lambda kube: kube.must("POST", path, body, ok=(200, 201, 409))


def namespace_object(index: int) -> dict:
    metadata = build_namespace(index)["metadata"]
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": metadata["name"], "labels": metadata["labels"], "annotations": metadata["annotations"]}}


def create_node(index: int):
    node = build_node(index)
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node["metadata"]["name"], "labels": node["metadata"]["labels"],
                         "annotations": node["metadata"].get("annotations", {})},
            "spec": {key: value for key, value in node["spec"].items() if key in ("taints", "podCIDR", "providerID")}}

    def call(kube: Kube) -> None:
        kube.must("POST", "/api/v1/nodes", body, ok=(200, 201, 409))
        kube.must("PATCH", f"/api/v1/nodes/{body['metadata']['name']}/status", {"status": node["status"]},
                  "application/merge-patch+json")
    return call


def job_object(namespace: int, index: int) -> dict:
    name = f"train-{index}"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"app": name, "team": f"team-{namespace % 97}"}},
            "spec": {"suspend": True, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "train", "image": "registry.example.com/train:v1", "command": ["true"],
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


class Cluster:
    """What is loaded so far; `grow` adds up to the given counts (creates are idempotent: 409 is fine)."""

    def __init__(self, kube: Kube) -> None:
        self.kube, self.namespaces, self.nodes, self.jobs = kube, 0, 0, 0
        self.existing_jobs: set[tuple[str, str]] | None = None
        self.existing: set[tuple[str, str]] | None = None

    def grow(self, namespaces: int, nodes: int, jobs: int) -> None:
        kube = self.kube
        if self.existing is None:
            self.existing = kube.names("/api/v1/namespaces") | kube.names("/api/v1/nodes")
        if namespaces > self.namespaces:
            seconds = parallel(kube, [create("/api/v1/namespaces", namespace_object(i))
                                      for i in range(self.namespaces, namespaces) if ("", f"team-{i}") not in self.existing])
            log(f"namespaces {self.namespaces} → {namespaces}: {seconds:.1f} s "
                f"({(namespaces - self.namespaces) / seconds:.0f}/s)")
            self.namespaces = namespaces
        if nodes > self.nodes:
            seconds = parallel(kube, [create_node(i) for i in range(self.nodes, nodes)
                                      if ("", f"gpu-node-{i:05d}") not in self.existing])
            log(f"nodes {self.nodes} → {nodes}: {seconds:.1f} s (create + status)")
            self.nodes = nodes
        # Job number n is train-(n // namespaces) in team-(n % namespaces): each step adds numbers [self.jobs, jobs).
        if jobs > self.jobs:
            if self.existing_jobs is None:
                self.existing_jobs = kube.names("/apis/batch/v1/jobs")  # a reused cluster: create only what is missing
            calls = []
            for n in range(self.jobs, jobs):
                i, k = n % self.namespaces, n // self.namespaces
                if (f"team-{i}", f"train-{k}") not in self.existing_jobs:
                    calls.append(create(f"/apis/batch/v1/namespaces/team-{i}/jobs", job_object(i, k)))
            if calls:
                seconds = parallel(kube, calls, JOB_WORKERS)
                log(f"+{len(calls)} suspended Jobs: {seconds:.1f} s ({len(calls) / seconds:.0f}/s)")
            self.jobs = jobs


class Daemon:
    """`tiergate run` against the cluster: its admin port on loopback, a throwaway serving certificate."""

    def __init__(self, binary: pathlib.Path, kubeconfig: pathlib.Path, tmp: pathlib.Path, extra: list[str]) -> None:
        if not (tmp / "tls.crt").exists():
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(tmp / "tls.key"),
                            "-out", str(tmp / "tls.crt")], check=True, capture_output=True)
        self.admin = f"http://127.0.0.1:{free_port()}"
        self.webhook_port = free_port()
        self.log_path = (DAEMON_LOG_DIR[0] if DAEMON_LOG_DIR else tmp) / f"daemon-{time.strftime('%H%M%S')}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [str(binary), "run", "--kubeconfig", str(kubeconfig), "--admin-listen", self.admin[len("http://"):],
             "--webhook-listen", f"127.0.0.1:{self.webhook_port}", "--tls-cert", str(tmp / "tls.crt"),
             "--tls-key", str(tmp / "tls.key"), "--namespace", "tiergate-system", *extra],
            stdout=self.log, stderr=subprocess.STDOUT,
            env={"RUST_LOG": "info,kube=warn", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **DAEMON_ENV})

    def metric(self, family: str, label: str = "") -> float:
        try:
            _, text = http_get(self.admin + "/metrics")
        except OSError:
            return 0.0
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(family) and line[len(family):len(family) + 1] in ("{", " ") and label in line)

    def ready(self) -> bool:
        try:
            return http_get(self.admin + "/readyz")[0] == 200
        except OSError:
            return False

    def memory_kib(self) -> dict[str, int]:
        status = pathlib.Path(f"/proc/{self.process.pid}/status").read_text()
        return {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
                if line.startswith(("VmRSS:", "VmHWM:"))}

    def wait(self, what: str, condition, timeout: float = 900, interval: float = 0.1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the daemon exited ({self.process.returncode}) waiting for {what}; "
                                   f"log: {self.log_path}")
            value = condition()
            if value:
                return value
            time.sleep(interval)
        raise RuntimeError(f"timed out waiting for {what}; log: {self.log_path}")

    def settle(self, seconds: float) -> dict:
        samples = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            samples.append(self.memory_kib()["VmRSS"])
            time.sleep(1)
        memory = self.memory_kib()
        return {"rss_mib": memory["VmRSS"] / 1024, "min_rss_mib": min(samples, default=0) / 1024,
                "peak_mib": memory["VmHWM"] / 1024}

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def writes(daemon: Daemon) -> int:
    return int(daemon.metric("tiergate_api_writes_total"))


def wait_quiet(daemon: Daemon, seconds: float = 5.0, timeout: float = 900) -> None:
    """Waits until the daemon has made no write for `seconds` (it follows whatever it is still catching up on)."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = writes(daemon)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return
        time.sleep(0.5)


def run_until_converged(args, kube: Kube, tmp: pathlib.Path, expected_queues: int, settle: float) -> dict:
    """Starts the daemon; waits for ready, for `expected_queues` LocalQueue writes (or, when 0, a first reconcile),
    settles, and stops it. Returns timings, writes and memory."""
    daemon = Daemon(args.binary, args.kubeconfig, tmp, args.daemon_arg)
    try:
        daemon.wait("/readyz 200", daemon.ready, interval=0.05)
        ready = time.monotonic() - daemon.started
        first_queue = None
        if expected_queues:
            def all_queues():
                nonlocal first_queue
                count = daemon.metric("tiergate_api_writes_total", 'kind="LocalQueue"')
                if count and first_queue is None:
                    first_queue = time.monotonic() - daemon.started
                return count >= expected_queues
            daemon.wait(f"{expected_queues} LocalQueues applied", all_queues, interval=0.1)
        daemon.wait("a reconcile", lambda: daemon.metric("tiergate_reconciles_total") >= 1, interval=0.05)
        converged = time.monotonic() - daemon.started
        wait_quiet(daemon)
        result = {"ready_s": ready, "converged_s": converged, "first_queue_s": first_queue}
        result.update(daemon.settle(settle))
        result["writes"] = writes(daemon)
        result["local_queue_writes"] = int(daemon.metric("tiergate_api_writes_total", 'kind="LocalQueue"'))
        return result
    finally:
        daemon.stop()


def managed_queues(kube: Kube) -> list[dict]:
    return kube.list_all(f"{LQ}/localqueues", "&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dtiergate")


def delete_managed_queues(kube: Kube) -> int:
    queues = managed_queues(kube)
    calls = [lambda k, q=q: k.must("DELETE", f"{LQ}/namespaces/{q['metadata']['namespace']}/localqueues/"
                                             f"{q['metadata']['name']}", ok=(200, 202, 404)) for q in queues]
    parallel(kube, calls)
    return len(queues)


def plain_client_rate(kube: Kube, namespaces: int) -> dict:
    """LocalQueue applies from this script alone, 8 in flight (a LocalQueue per namespace, then deleted)."""
    def apply(index: int):
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": "scale-probe", "namespace": f"team-{index}", "labels": {"perf": "scale-probe"}},
                "spec": {"clusterQueue": "scale-probe"}}
        return lambda k: k.apply(f"{LQ}/namespaces/team-{index}/localqueues/scale-probe", body, "scale-probe")
    seconds = parallel(kube, [apply(i) for i in range(namespaces)])
    deleted = parallel(kube, [lambda k, i=i: k.must("DELETE", f"{LQ}/namespaces/team-{i}/localqueues/scale-probe",
                                                      ok=(200, 202, 404)) for i in range(namespaces)])
    return {"applies": namespaces, "seconds": seconds, "per_second": namespaces / seconds,
            "deletes_per_second": namespaces / deleted}


def plain_owner_list(kube: Kube) -> dict:
    """A plain client listing every Job's metadata in the daemon's pages of 500, doing nothing else: the API
    server's floor for a restart's owner list (the daemon lists namespaces, nodes and Kueue kinds beside it)."""
    started = time.monotonic()
    count = pages = 0
    for page in kube.metadata_pages("/apis/batch/v1/jobs", 500):
        count, pages = count + len(page), pages + 1
    return {"jobs": count, "pages": pages, "seconds": time.monotonic() - started}


def webhook_latency(daemon: Daemon, requests: int) -> dict:
    """Client-side latency of `requests` reviews over one keep-alive TLS connection (the recorded fixtures)."""
    fixtures_dir = next(d for d in (REPO.parent / "shared/fixtures/admission", REPO.parent.parent / "shared/fixtures/admission")
                        if d.is_dir())
    bodies = [(fixtures_dir / name).read_bytes() for name in WEBHOOK_FIXTURES]
    context = ssl._create_unverified_context()  # noqa: S323 - the throwaway self-signed certificate
    connection = http.client.HTTPSConnection("127.0.0.1", daemon.webhook_port, context=context, timeout=10)
    latencies = []
    for index in range(requests + 200):
        body = bodies[index % len(bodies)]
        started = time.perf_counter()
        connection.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"webhook answered {response.status}")
        if index >= 200:  # warm-up
            latencies.append(time.perf_counter() - started)
    connection.close()
    latencies.sort()
    return {"requests": len(latencies), "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000}


def measure_webhook(args, kube: Kube, tmp: pathlib.Path) -> dict:
    daemon = Daemon(args.binary, args.kubeconfig, tmp, args.daemon_arg)
    try:
        daemon.wait("/readyz 200", daemon.ready, interval=0.05)
        daemon.wait("a reconcile", lambda: daemon.metric("tiergate_reconciles_total") >= 1, interval=0.05)
        time.sleep(3)
        return webhook_latency(daemon, args.webhook_requests)
    finally:
        daemon.stop()


class QueueWatch:
    """A watch of LocalQueues recording when each (namespace, name) was first added after `since`."""

    def __init__(self, kube: Kube) -> None:
        listed = kube.must("GET", f"{LQ}/localqueues?limit=1")
        self.version = listed["metadata"]["resourceVersion"]
        self.added: dict[tuple[str, str], float] = {}
        self.deleted: dict[tuple[str, str], float] = {}
        self.connection = http.client.HTTPSConnection(kube.host, kube.port, context=kube.context, timeout=600)
        self.connection.request("GET", f"{LQ}/localqueues?watch=1&allowWatchBookmarks=false&resourceVersion="
                                f"{self.version}", headers=kube.headers)
        self.response = self.connection.getresponse()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self) -> None:
        try:
            while True:
                line = self.response.readline()
                if not line:
                    return
                event = json.loads(line)
                if event.get("type") in ("ADDED", "DELETED"):
                    meta = event["object"]["metadata"]
                    seen = self.added if event["type"] == "ADDED" else self.deleted
                    seen.setdefault((meta["namespace"], meta["name"]), time.monotonic())
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            return  # closed

    def close(self) -> None:
        self.connection.close()


def measure_relabel(args, kube: Kube, tmp: pathlib.Path, namespaces: int) -> dict:
    daemon = Daemon(args.binary, args.kubeconfig, tmp, args.daemon_arg)
    try:
        daemon.wait("/readyz 200", daemon.ready, interval=0.05)
        daemon.wait("a reconcile", lambda: daemon.metric("tiergate_reconciles_total") >= 1, interval=0.05)
        time.sleep(5)
        count = min(RELABELS, namespaces)
        step = max(namespaces // count, 1)
        targets = {}
        for n in range(count):
            index = n * step
            tier = TIERS[(index % 3 + 1) % 3]  # namespaces were loaded with TIERS[index % 3]
            targets[index] = tier
        watch = QueueWatch(kube)
        before = writes(daemon)
        started = time.monotonic()
        seconds = parallel(kube, [lambda k, i=i, t=t: k.must(
            "PATCH", f"/api/v1/namespaces/team-{i}", {"metadata": {"labels": {TIER_LABEL: t}}},
            "application/merge-patch+json") for i, t in targets.items()])
        wanted = {(f"team-{i}", f"tiergate-{t}") for i, t in targets.items()}
        retired = {(f"team-{i}", f"tiergate-{TIERS[i % 3]}") for i in targets}
        daemon.wait(f"{count} new LocalQueues", lambda: wanted <= watch.added.keys(), timeout=600, interval=0.1)
        followed = max(watch.added[key] for key in wanted) - started
        daemon.wait(f"{count} old LocalQueues pruned", lambda: retired <= watch.deleted.keys(), timeout=600,
                    interval=0.1)
        pruned = max(watch.deleted[key] for key in retired) - started
        watch.close()
        wait_quiet(daemon)
        result = {"relabeled": count, "patch_seconds": seconds, "followed_s": followed,
                  "after_last_patch_s": followed - seconds, "old_queues_pruned_s": pruned,
                  "writes": writes(daemon) - before}
        # Put the labels back (and let the daemon follow) so a rerun over the same cluster starts where this did.
        parallel(kube, [lambda k, i=i: k.must(
            "PATCH", f"/api/v1/namespaces/team-{i}", {"metadata": {"labels": {TIER_LABEL: TIERS[i % 3]}}},
            "application/merge-patch+json") for i in targets])
        wait_quiet(daemon)
        return result
    finally:
        daemon.stop()


def start_control_plane(tmp: pathlib.Path) -> tuple[subprocess.Popen, pathlib.Path]:
    """The e2e harness's throwaway control plane (built if needed); exits saying what is missing."""
    log("building and starting the e2e harness's throwaway control plane (tests/e2e, control-plane up)")
    subprocess.run(["cargo", "build", "-q", "-p", "tiergate-e2e", "--bin", "control-plane"], cwd=REPO, check=True)
    env_file = tmp / "control-plane.env"
    process = subprocess.Popen([str(REPO / "target/debug/control-plane"), "up", "--env-file", str(env_file)],
                               stdout=open(tmp / "control-plane.log", "w"), stderr=subprocess.STDOUT)
    while not env_file.exists():
        if process.poll() is not None:
            raise SystemExit(f"real_scale.py: the control plane failed: {(tmp / 'control-plane.log').read_text()}")
        time.sleep(1)
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    env = {key: value.strip("'") for key, value in env.items()}
    if "TIERGATE_E2E_SKIP" in env:
        process.wait()
        raise SystemExit(f"real_scale.py: {env['TIERGATE_E2E_SKIP']} (put the binaries on PATH, or set KUBECONFIG)")
    return process, pathlib.Path(env["KUBECONFIG"])


def install(kube: Kube, args) -> None:
    """The TierPolicy CRD, the sample policy, the daemon's namespace and the webhook fixtures' namespace."""
    crd = yaml.safe_load(subprocess.run([str(args.binary), "crd"], capture_output=True, check=True, text=True).stdout)
    kube.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}", crd, "scale")
    deadline = time.monotonic() + 60
    while kube.request("GET", "/apis/tiergate.io/v1alpha1/tierpolicies")[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the TierPolicy CRD is not served")
        time.sleep(0.5)
    policy = yaml.safe_load((REPO / "samples/kubenexus/policy.yaml").read_text())
    kube.apply(f"/apis/tiergate.io/v1alpha1/tierpolicies/{policy['metadata']['name']}", policy, "scale")
    for name, labels in (("tiergate-system", {}), ("ml-team-dev", {TIER_LABEL: "bronze"})):
        kube.apply(f"/api/v1/namespaces/{name}", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": name, "labels": labels}}, "scale")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", type=pathlib.Path, default=REPO / "target/release/tiergate")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full load")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds of RSS sampling after convergence")
    parser.add_argument("--webhook-requests", type=int, default=5000)
    parser.add_argument("--daemon-arg", action="append", default=[], help="one more argument for `tiergate run`")
    parser.add_argument("--phase", action="append", choices=PHASES,
                        help="run only these phases (default: all, in order); a loaded cluster is reused")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the daemon's environment")
    parser.add_argument("--daemon-logs", type=pathlib.Path,
                        help="keep each daemon run's log in this directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="leave the loaded objects (a KUBECONFIG cluster)")
    args = parser.parse_args()
    if not args.binary.exists():
        raise SystemExit(f"real_scale.py: no {args.binary}: cargo build --release -p tiergate --bin tiergate")
    DAEMON_ENV.update(item.split("=", 1) for item in args.env)
    if args.daemon_logs:
        args.daemon_logs.mkdir(parents=True, exist_ok=True)
        DAEMON_LOG_DIR.append(args.daemon_logs)
    namespaces, nodes, jobs = (int(n * args.scale) for n in (NAMESPACES, NODES, JOBS))
    results: dict = {"scale": args.scale, "namespaces": namespaces, "nodes": nodes, "jobs": jobs,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    plane = None
    with tempfile.TemporaryDirectory(prefix="real-scale-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        try:
            if os.environ.get("KUBECONFIG"):
                args.kubeconfig = pathlib.Path(os.environ["KUBECONFIG"].split(":")[0])
                log(f"using the cluster of KUBECONFIG={args.kubeconfig}")
            else:
                plane, args.kubeconfig = start_control_plane(tmp)
            kube = Kube(args.kubeconfig, tmp)
            install(kube, args)
            cluster = Cluster(kube)

            phases = set(args.phase or PHASES)
            if "empty-webhook" in phases:
                log("webhook over one connection, empty cluster")
                results["webhook_empty"] = measure_webhook(args, kube, tmp)
                log(f"  {results['webhook_empty']}")

            results["namespace_steps"] = []
            if "namespaces" in phases:
                for step in STEPS[:-1]:  # the 100 % point is the cold start
                    cluster.grow(int(namespaces * step), int(nodes * step), 0)
                    log(f"daemon over {cluster.namespaces} namespaces, {cluster.nodes} nodes")
                    point = run_until_converged(args, kube, tmp, 0, args.settle)
                    point.update(namespaces=cluster.namespaces, nodes=cluster.nodes, jobs=0)
                    results["namespace_steps"].append(point)
                    log(f"  {point}")
            cluster.grow(namespaces, nodes, 0)

            if "plain" in phases:
                log("plain client: LocalQueue applies, 8 in flight")
                results["plain_client"] = plain_client_rate(kube, min(namespaces, PLAIN_CLIENT_APPLIES))
                log(f"  {results['plain_client']}")

            if "cold" in phases:
                removed = delete_managed_queues(kube)
                log(f"cold start over {namespaces} namespaces ({removed} managed LocalQueues removed first)")
                cold = run_until_converged(args, kube, tmp, namespaces + 1, args.settle)  # + ml-team-dev
                cold.update(namespaces=namespaces, nodes=nodes, jobs=cluster.jobs)
                results["cold_start"] = cold
                results["namespace_steps"].append(cold)
                log(f"  {cold}")

            results["owner_steps"] = []
            if "owners" in phases:
                for step in STEPS:
                    cluster.grow(namespaces, nodes, int(jobs * step))
                    log(f"restart over {namespaces} namespaces, {nodes} nodes, {cluster.jobs} Jobs")
                    point = run_until_converged(args, kube, tmp, 0, args.settle)
                    point.update(namespaces=namespaces, nodes=nodes, jobs=cluster.jobs,
                                 plain_owner_list=plain_owner_list(kube))
                    results["owner_steps"].append(point)
                    log(f"  {point}")
                results["restart"] = results["owner_steps"][-1]

            if "webhook" in phases:
                log("webhook over one connection, everything cached")
                results["webhook_full"] = measure_webhook(args, kube, tmp)
                log(f"  {results['webhook_full']}")

            if "relabel" in phases:
                log(f"relabel of {min(RELABELS, namespaces)} namespaces at once")
                results["relabel"] = measure_relabel(args, kube, tmp, namespaces)
                log(f"  {results['relabel']}")
        finally:
            if plane is not None:
                plane.send_signal(signal.SIGTERM)
                plane.wait(timeout=120)
    out = REPO / "perf/results" / f"real-scale-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_report(results, out)
    return 0


def print_report(results: dict, out: pathlib.Path) -> None:
    print(f"real API server, scale {results['scale']}: {results['namespaces']} namespaces, {results['nodes']} nodes, "
          f"{results['jobs']} Jobs (results: {out.relative_to(REPO)})\n")
    print("| measurement | result |\n| --- | --- |")
    if plain := results.get("plain_client"):
        print(f"| plain client, LocalQueue applies (8 in flight) | {plain['per_second']:.0f}/s |")
    if cold := results.get("cold_start"):
        lq_seconds = cold["converged_s"] - (cold["first_queue_s"] or 0)
        print(f"| cold start → every LocalQueue applied | {cold['converged_s']:.1f} s from start ({cold['ready_s']:.1f} s "
              f"to ready), {cold['local_queue_writes']} LocalQueues at "
              f"{cold['local_queue_writes'] / max(lq_seconds, 1e-9):.0f}/s, {cold['writes']} writes in all |")
    if restart := results.get("restart"):
        print(f"| restart over everything → ready | {restart['ready_s']:.1f} s, {restart['writes']} writes |")
        if plain := restart.get("plain_owner_list"):
            print(f"| plain client: every Job's metadata, pages of 500 | {plain['seconds']:.1f} s "
                  f"({plain['jobs']} Jobs, {plain['pages']} pages) |")
        print(f"| RSS with everything (steady / lowest / peak) | {restart['rss_mib']:.1f} / "
              f"{restart['min_rss_mib']:.1f} / {restart['peak_mib']:.1f} MiB |")
    for name in ("webhook_empty", "webhook_full"):
        if w := results.get(name):
            print(f"| webhook, one connection, {name[8:]} cluster | p50 {w['p50_ms']:.2f} ms, p99 {w['p99_ms']:.2f} ms |")
    if relabel := results.get("relabel"):
        print(f"| {relabel['relabeled']} namespaces relabeled at once → followed | {relabel['followed_s']:.1f} s from "
              f"the first patch, {relabel['after_last_patch_s']:.1f} s after the last ({relabel['patch_seconds']:.1f} s "
              f"to send the patches); every old queue pruned {relabel['old_queues_pruned_s']:.1f} s from the first "
              f"patch; {relabel['writes']} writes |")
    print("\n| namespaces | nodes | Jobs | steady RSS | peak RSS | ready | writes |\n| --- | --- | --- | --- | --- | --- | --- |")
    for point in results.get("namespace_steps", []) + results.get("owner_steps", []):
        print(f"| {point['namespaces']} | {point['nodes']} | {point['jobs']} | {point['rss_mib']:.1f} MiB | "
              f"{point['peak_mib']:.1f} MiB | {point['ready_s']:.1f} s | {point['writes']} |")


if __name__ == "__main__":
    sys.exit(main())
