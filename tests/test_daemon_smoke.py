"""`tiergate run` against a small fake API server: caches sync, the Lease is taken, the sample policy converges
with server-side apply in kind order, /readyz and /metrics answer, SIGTERM drains and releases the Lease, and a
restart makes no writes but Lease renewals. No cluster needed; see docs/reconcile.md."""
import json
import pathlib
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

KINDS = [
    ("resourceflavors", "ResourceFlavor", False),
    ("workloadpriorityclasses", "WorkloadPriorityClass", False),
    ("provisioningrequestconfigs", "ProvisioningRequestConfig", False),
    ("admissionchecks", "AdmissionCheck", False),
    ("clusterqueues", "ClusterQueue", False),
    ("localqueues", "LocalQueue", True),
]
TIERS = ["gold", "silver", "bronze"]


class FakeApi:
    """Lists what it holds, keeps watches open, stores applied objects and the Lease, records every write."""

    def __init__(self, policy: dict) -> None:
        self.policy = policy
        self.objects: dict[str, dict] = {}
        self.lease: dict | None = None
        self.writes: list[tuple[str, str, str, dict]] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.namespaces = [
            {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
             "metadata": {"name": f"team-{i}", "resourceVersion": "1",
                          "labels": {"tenant.kubenexus.io/tier": TIERS[i % 3]}}}
            for i in range(5)
        ]
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()

    def non_lease_writes(self, since: int = 0) -> list[tuple[str, str, str, dict]]:
        with self.lock:
            return [write for write in self.writes[since:] if "/leases" not in write[1]]

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                length = int(self.headers.get("Content-Length", "0"))
                return json.loads(self.rfile.read(length) or b"null")

            def _record(self, body: dict) -> str:
                url = urlparse(self.path)
                with api.lock:
                    api.writes.append((self.command, url.path, url.query, body))
                return url.path

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query, path = parse_qs(url.query), url.path
                if query.get("watch") in (["true"], ["1"]):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    api.stopping.wait()
                    return
                if path == "/apis":
                    return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                        {"name": "kueue.x-k8s.io", "versions": [
                            {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}]}]})
                if path == "/apis/kueue.x-k8s.io/v1beta2":
                    return self._send(200, {
                        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kueue.x-k8s.io/v1beta2",
                        "resources": [{"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
                                       "verbs": ["get"]} for name, kind, namespaced in KINDS]})
                if "/leases/" in path:
                    if api.lease is None:
                        return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                "reason": "NotFound", "code": 404})
                    return self._send(200, api.lease)
                items: list[dict] = []
                if path == "/api/v1/namespaces":
                    items = api.namespaces
                elif path == "/apis/tiergate.io/v1alpha1/tierpolicies":
                    items = [api.policy]
                else:
                    for name, _, _ in KINDS:
                        if path.endswith("/" + name):
                            with api.lock:
                                items = [obj for key, obj in api.objects.items() if f"/{name}/" in key]
                self._send(200, {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "10"},
                                 "items": items})

            def do_POST(self) -> None:
                body = self._body()
                path = self._record(body)
                if path.endswith("/leases"):
                    body["metadata"]["resourceVersion"] = "1"
                    api.lease = body
                self._send(201, body)

            def do_PUT(self) -> None:
                body = self._body()
                if "/leases/" in self._record(body):
                    api.lease = body
                self._send(200, body)

            def do_PATCH(self) -> None:
                body = self._body()
                path = self._record(body)
                if path.endswith("/status"):
                    api.policy["status"] = body["status"]
                    return self._send(200, api.policy)
                body.setdefault("metadata", {})["resourceVersion"] = "5"
                with api.lock:
                    api.objects[path] = body
                self._send(200, body)

        return Handler


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


def wait_until(what: str, check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"failed to observe {what} within {timeout} s")


@pytest.fixture(scope="module")
def binary(repo: pathlib.Path) -> pathlib.Path:
    try:
        subprocess.run(["cargo", "build", "-q", "-p", "tiergate", "--bin", "tiergate"], cwd=repo, check=True)
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        pytest.skip(f"skipped: cannot build the tiergate binary: {error}")
    return repo / "target" / "debug" / "tiergate"


class Daemon:
    def __init__(self, binary: pathlib.Path, api: FakeApi, tmp: pathlib.Path) -> None:
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{api.port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        if not (tmp / "tls.crt").exists():
            # The webhook server loads its certificate at start; a throwaway self-signed one is enough here.
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(tmp / "tls.key"),
                            "-out", str(tmp / "tls.crt")], check=True, capture_output=True)
        self.admin = f"http://127.0.0.1:{free_port()}"
        self.log = open(tmp / f"daemon-{time.monotonic_ns()}.log", "w")
        self.process = subprocess.Popen(
            [str(binary), "run", "--kubeconfig", str(kubeconfig), "--admin-listen", self.admin[len("http://"):],
             "--webhook-listen", f"127.0.0.1:{free_port()}", "--tls-cert", str(tmp / "tls.crt"),
             "--tls-key", str(tmp / "tls.key"), "--namespace", "tiergate-system"],
            stdout=self.log, stderr=subprocess.STDOUT, env={"RUST_LOG": "info,kube=warn", "PATH": "/usr/bin:/bin"},
        )

    def metric(self, family: str) -> float:
        _, text = http_get(self.admin + "/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(family) and line[len(family):len(family) + 1] in ("{", " "))

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        finally:
            self.log.close()


def test_run_converges_drains_on_sigterm_and_restarts_without_writes(binary, tmp_path, repo) -> None:
    policy = yaml.safe_load((repo / "samples" / "kubenexus" / "policy.yaml").read_text())
    policy["metadata"].update({"uid": "policy-uid", "generation": 1, "resourceVersion": "3"})
    api = FakeApi(policy)
    daemons: list[Daemon] = []
    try:
        first = Daemon(binary, api, tmp_path)
        daemons.append(first)
        wait_until("/readyz 200", lambda: http_get(first.admin + "/readyz")[0] == 200)
        wait_until("the status write", lambda: any(w[1].endswith("/status") for w in api.non_lease_writes()))
        applies = [w for w in api.non_lease_writes() if w[0] == "PATCH" and not w[1].endswith("/status")]
        kinds = [next(i for i, (name, _, _) in enumerate(KINDS) if f"/{name}/" in w[1]) for w in applies]
        assert kinds == sorted(kinds), "objects are applied flavors first, LocalQueues last"
        assert sum(1 for w in applies if "/localqueues/" in w[1]) == 5
        assert all("fieldManager=tiergate" in w[2] and "force=true" in w[2] for w in applies)
        assert "null" not in json.dumps([w[3] for w in applies])
        assert first.metric("tiergate_lease_held") == 1

        first.process.send_signal(signal.SIGTERM)
        status, reason = wait_until("/readyz to turn 503", lambda: (lambda r: r if r[0] == 503 else None)(
            http_get(first.admin + "/readyz")))
        assert "draining" in reason
        assert first.process.wait(timeout=30) == 0
        first.log.close()
        assert api.lease["spec"].get("holderIdentity") is None, "the Lease is released on shutdown"

        before = len(api.writes)
        second = Daemon(binary, api, tmp_path)
        daemons.append(second)
        wait_until("the restarted daemon to reconcile",
                   lambda: http_get(second.admin + "/readyz")[0] == 200 and second.metric("tiergate_owned_objects") > 0)
        assert api.non_lease_writes(before) == []
        assert second.metric("tiergate_api_writes_total") == 0
        assert second.stop() == 0
    finally:
        for daemon in daemons:
            if daemon.process.poll() is None:
                daemon.process.kill()
                daemon.process.wait()
        api.close()
