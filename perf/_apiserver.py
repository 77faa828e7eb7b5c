"""Helpers the perf scripts that time creates through a real API server share (perf/gate_latency.py,
perf/create_cost.py): kubectl, one keep-alive HTTPS connection impersonating a tenant, the API server's Prometheus
metrics, and waiting for a ValidatingAdmissionPolicy to be type-checked. Python's standard library only."""

from __future__ import annotations

import base64
import http.client
import json
import re
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TENANT = "tiergate-perf-tenant"


def exit_on_sigterm() -> None:
    """Makes SIGTERM raise SystemExit, so that the scripts' `finally` blocks delete what they created."""
    def leave(*_) -> None:
        # A second SIGTERM (`timeout` forwards the one it got, `pkill -f` reaches both) must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(f"{Path(sys.argv[0]).stem}: terminated")

    signal.signal(signal.SIGTERM, leave)


def fail(message: str) -> None:
    sys.exit(f"{Path(sys.argv[0]).stem}: {message}")


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        fail(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


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


def await_type_checking(names: list[str]) -> None:
    """Waits (up to 5 minutes) until kube-controller-manager has type-checked each ValidatingAdmissionPolicy, so
    that its one-off work there is not measured as a cost per create."""
    deadline = time.monotonic() + 300
    for name in names:
        while time.monotonic() < deadline:
            # The daemon applies the gate after it reports ready, so the policy may not exist yet.
            found = kubectl("get", "validatingadmissionpolicy", name, "--ignore-not-found", "-o", "json")
            if found.strip() and "typeChecking" in json.loads(found).get("status", {}):
                break
            time.sleep(2)
    time.sleep(5)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, prefixes: tuple[str, ...]) -> dict[tuple[str, frozenset], float]:
    """The samples of a Prometheus text exposition whose name starts with one of `prefixes`, keyed by name and
    labels."""
    samples = {}
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        match = _SAMPLE.match(line)
        if match and not match.group(1).endswith("_bucket"):
            labels = frozenset(_LABEL.findall(match.group(2) or ""))
            samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def apiserver_metrics(prefixes: tuple[str, ...]) -> dict[tuple[str, frozenset], float]:
    """The API server's own metrics (as the kubeconfig's user, not the tenant)."""
    return parse_metrics(kubectl("get", "--raw", "/metrics"), prefixes)


def difference(after: dict, before: dict) -> dict:
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value - before.get(key, 0.0)}
