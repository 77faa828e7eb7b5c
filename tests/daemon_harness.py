"""Runs the real `tiergate run` binary without a cluster: a fake Kubernetes API server, the daemon process, and the
helpers that drive them (free ports, polling, HTTP probes). Used by tests/test_daemon_smoke.py, the chart's RBAC
end-to-end test and perf/daemon_scale.py.

It serves paged lists (`limit`/`continue`) of namespaces (metadata-only), nodes, the TierPolicy and whatever was
applied, streams applied objects to open watches of their resource (as an API server would), answers Kueue
discovery, stores applied objects and the Lease, and records every write. Object shapes follow what a real API server sends, including the parts tiergate trims
(managedFields, node images and conditions, kubectl's last-applied annotation), so memory measured against it is
what the caches keep, not what the fake leaves out."""
from __future__ import annotations

import json
import pathlib
import queue
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, TypeVar

import yaml
from urllib.parse import parse_qs, urlparse

KINDS = [
    # The in-server gate comes first: until the API server enforces it, a GPU workload the webhook does not answer
    # for is stored unconstrained. Its parameters (tiergate.io) first, then the policy and its bindings.
    ("tiergateparameters", "TierGateParameters", False),
    ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
    ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False),
    ("topologies", "Topology", False),
    ("resourceflavors", "ResourceFlavor", False),
    ("workloadpriorityclasses", "WorkloadPriorityClass", False),
    ("provisioningrequestconfigs", "ProvisioningRequestConfig", False),
    ("multikueueclusters", "MultiKueueCluster", False),
    ("multikueueconfigs", "MultiKueueConfig", False),
    ("admissionchecks", "AdmissionCheck", False),
    ("cohorts", "Cohort", False),
    ("clusterqueues", "ClusterQueue", False),
    ("localqueues", "LocalQueue", True),
]
TIERS = ["gold", "silver", "bronze"]
TIER_LABEL = "tenant.kubenexus.io/tier"
GPU_CLASSES = ["h100", "a100", "l4"]

T = TypeVar("T")


# Discovery documents of the owner kinds (GROUP/VERSION -> (resource, kind)); other group versions answer 404.
OWNER_APIS: dict[str, list[tuple[str, str]]] = {
    "/apis/batch/v1": [("jobs", "Job")],
    "/apis/apps/v1": [("deployments", "Deployment"), ("statefulsets", "StatefulSet"), ("replicasets", "ReplicaSet")],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str) -> tuple[int, str]:
    """Status and body of a GET; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


def wait_until(what: str, check: Callable[[], T], timeout: float = 60.0, interval: float = 0.2) -> T:
    """Polls `check` until it returns something truthy, or fails naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"failed to observe {what} within {timeout} s")


def managed_fields(manager: str) -> list[dict[str, Any]]:
    """A managedFields entry of the size a real object carries (tiergate never keeps it)."""
    fields = {f"f:field-{i}": {"f:nested": {}, "f:other": {}} for i in range(12)}
    return [{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-11-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": fields}}}]


def build_namespace(index: int, tiered: bool = True) -> dict[str, Any]:
    """A namespace as a metadata-only list returns it."""
    name = f"team-{index}"
    labels = {"kubernetes.io/metadata.name": name, "team": f"team-{index % 97}", "cost-center": f"cc-{index % 31}",
              "environment": "production"}
    if tiered:
        labels[TIER_LABEL] = TIERS[index % 3]
    return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "uid": f"00000000-0000-0000-0000-{index:012d}", "resourceVersion": "1",
                         "creationTimestamp": "2026-11-01T00:00:00Z", "labels": labels,
                         "annotations": {"owner": f"owner-{index}@example.com"},
                         "managedFields": managed_fields("kubectl")}}


def build_owner(namespace: int, index: int) -> dict[str, Any]:
    """A Job as a metadata-only list returns it: what the daemon's owner index watches (a real Job's metadata
    carries labels, annotations and managedFields too; the index keeps only its identity)."""
    name = f"train-{index}"
    return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": f"team-{namespace}",
                         "uid": f"10000000-0000-0000-{index:04d}-{namespace:012d}", "resourceVersion": "1",
                         "creationTimestamp": "2026-11-01T00:00:00Z",
                         "labels": {"app": name, "kueue.x-k8s.io/queue-name": "tiergate-bronze"},
                         "managedFields": managed_fields("kubectl")}}


def build_node(index: int) -> dict[str, Any]:
    """A GPU node shaped like a cloud node: ~30 labels, a GPU taint, allocatable, and the images, conditions and
    annotations that make a real node ~20 kB of JSON."""
    name = f"gpu-node-{index:05d}"
    gpu_class = GPU_CLASSES[index % 3]
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"p5.{index % 4}xlarge", "beta.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": f"us-east-1{'abc'[index % 3]}",
        "failure-domain.beta.kubernetes.io/region": "us-east-1", "failure-domain.beta.kubernetes.io/zone": "us-east-1a",
        "gpu.nvidia.com/class": gpu_class, "nvidia.com/gpu.product": f"NVIDIA-{gpu_class.upper()}-80GB",
        "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559", "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54", "nvidia.com/cuda.runtime.major": "12", "nvidia.com/mig.strategy": "single",
        "karpenter.sh/nodepool": f"gpu-{gpu_class}", "karpenter.sh/capacity-type": "on-demand" if index % 3 else "spot",
        "karpenter.k8s.aws/instance-family": "p5", "karpenter.k8s.aws/instance-size": "48xlarge",
        "karpenter.k8s.aws/instance-gpu-count": "8", "karpenter.k8s.aws/instance-gpu-name": gpu_class,
        "node.kubernetes.io/lifecycle": "normal", "k8s.io/cloud-provider-aws": "a1b2c3d4e5f6",
        "eks.amazonaws.com/nodegroup-image": "ami-0123456789abcdef0", "team.example.com/pool": f"pool-{index % 7}",
        "feature.node.kubernetes.io/pci-10de.present": "true", "feature.node.kubernetes.io/kernel-version.major": "6",
    }
    images = [{"names": [f"registry.example.com/team/image-{i}@sha256:{i:064x}",
                         f"registry.example.com/team/image-{i}:v{i}.0.{index % 10}"],
               "sizeBytes": 1_000_000 * (i + 1)} for i in range(40)]
    conditions = [{"type": kind, "status": "False" if kind != "Ready" else "True", "reason": f"Kubelet{kind}",
                   "message": f"kubelet reports {kind}", "lastHeartbeatTime": "2026-11-01T00:00:00Z",
                   "lastTransitionTime": "2026-11-01T00:00:00Z"}
                  for kind in ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]]
    resources = {"cpu": "191450m", "memory": "2097152000Ki", "ephemeral-storage": "1000Gi", "pods": "737",
                 "nvidia.com/gpu": "8", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "vpc.amazonaws.com/efa": "32"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"11111111-0000-0000-0000-{index:012d}", "resourceVersion": "7",
                     "creationTimestamp": "2026-11-01T00:00:00Z", "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                     "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{index:017x}"}),
                                     "alpha.kubernetes.io/provided-node-ip": f"10.0.{index // 250}.{index % 250}"},
                     "managedFields": managed_fields("kubelet") * 4},
        "spec": {"providerID": f"aws:///us-east-1a/i-{index:017x}", "podCIDR": f"10.{index % 250}.0.0/24",
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": resources, "conditions": conditions, "images": images,
                   "addresses": [{"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250}"},
                                 {"type": "Hostname", "address": name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": f"{index:032x}", "systemUUID": f"{index:032x}", "bootID": f"{index:032x}",
                                "kernelVersion": "6.1.0", "osImage": "Amazon Linux 2023", "architecture": "amd64",
                                "containerRuntimeVersion": "containerd://1.7.0", "kubeletVersion": "v1.36.0",
                                "kubeProxyVersion": "v1.36.0", "operatingSystem": "linux"}},
    }


class FakeApi:
    """Lists what it holds (paged when asked), keeps watches open, stores applied objects and the Lease, records
    every write."""

    def __init__(self, policy: dict[str, Any], namespaces: int = 5, nodes: int = 0, owners_per_namespace: int = 0) -> None:
        self.policy = policy
        self.objects: dict[str, dict[str, Any]] = {}
        self.lease: dict[str, Any] | None = None
        # False: the Lease namespace does not exist (creating the Lease answers 404) until it is POSTed.
        self.lease_namespace_exists = True
        self.writes: list[tuple[str, str, str, dict[str, Any]]] = []
        self.write_times: list[float] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.watchers: list[tuple[str, queue.Queue[dict[str, Any]]]] = []
        self.resource_version = 100
        self.namespaces = [build_namespace(i) for i in range(namespaces)]
        self.nodes = [build_node(i) for i in range(nodes)]
        self.jobs = [build_owner(n, j) for n in range(namespaces) for j in range(owners_per_namespace)]
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig pointing at this server."""
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }

    def non_lease_writes(self, since: int = 0) -> list[tuple[str, str, str, dict[str, Any]]]:
        with self.lock:
            return [write for write in self.writes[since:] if "/leases" not in write[1]]

    def _notify(self, resource: str, kind: str, body: dict[str, Any]) -> None:
        """Sends a watch event to the open watches of `resource` (a plural); the caller holds the lock."""
        self.resource_version += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.resource_version)
        for watched, events in self.watchers:
            if watched == resource:
                events.put({"type": kind, "object": body})

    def _store(self, path: str, body: dict[str, Any]) -> None:
        """Keeps an applied object and tells the open watches of its resource."""
        with self.lock:
            kind = "MODIFIED" if path in self.objects else "ADDED"
            self.objects[path] = body
            self._notify(path.rstrip("/").split("/")[-2], kind, body)

    def _remove(self, path: str) -> dict[str, Any] | None:
        with self.lock:
            body = self.objects.pop(path, None)
            if body is not None:
                self._notify(path.rstrip("/").split("/")[-2], "DELETED", body)
            return body

    def relabel_namespace(self, index: int, tier: str) -> None:
        """Moves namespace `team-<index>` to `tier` and tells the namespace watches."""
        with self.lock:
            namespace = json.loads(json.dumps(self.namespaces[index]))
            namespace["metadata"]["labels"][TIER_LABEL] = tier
            self.namespaces[index] = namespace
            self._notify("namespaces", "MODIFIED", namespace)

    def writes_since(self, since: int) -> list[tuple[float, str, str]]:
        """(time, method, path) of every write from index `since` on."""
        with self.lock:
            return [(at, write[0], write[1]) for at, write in zip(self.write_times[since:], self.writes[since:])]

    def _items(self, path: str) -> list[dict[str, Any]]:
        if path == "/api/v1/namespaces":
            return self.namespaces
        if path == "/api/v1/nodes":
            return self.nodes
        if path == "/apis/batch/v1/jobs":
            return self.jobs
        if path == "/apis/tiergate.io/v1alpha1/tierpolicies":
            return [self.policy]
        for name, _, _ in KINDS:
            if path.endswith("/" + name):
                with self.lock:
                    return [obj for key, obj in self.objects.items() if f"/{name}/" in key]
        return []

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes; without this each response waits on Nagle + delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length", "0"))
                return json.loads(self.rfile.read(length) or b"null")

            def _record(self, body: dict[str, Any]) -> str:
                url = urlparse(self.path)
                with api.lock:
                    api.writes.append((self.command, url.path, url.query, body))
                    api.write_times.append(time.monotonic())
                return url.path

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query, path = parse_qs(url.query), url.path
                if query.get("watch") in (["true"], ["1"]):
                    return self._stream_watch(path.rstrip("/").split("/")[-1])
                if path == "/apis":
                    return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                        {"name": "kueue.x-k8s.io", "versions": [
                            {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}]}]})
                if path == "/apis/kueue.x-k8s.io/v1beta2":
                    return self._send(200, {
                        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kueue.x-k8s.io/v1beta2",
                        "resources": [{"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
                                       "verbs": ["get"]} for name, kind, namespaced in KINDS]})
                if path == "/apis/tiergate.io/v1alpha1":
                    return self._send(200, {
                        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "tiergate.io/v1alpha1",
                        "resources": [{"name": name, "singularName": "", "namespaced": False, "kind": kind,
                                       "verbs": ["list", "watch"]} for name, kind in
                                      [("tierpolicies", "TierPolicy"), ("tiergateparameters", "TierGateParameters")]]})
                if path in OWNER_APIS:
                    # The owner kinds the daemon's owner index watches (metadata only); JobSet is not served.
                    return self._send(200, {
                        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": path.removeprefix("/apis/"),
                        "resources": [{"name": name, "singularName": "", "namespaced": True, "kind": kind,
                                       "verbs": ["list", "watch"]} for name, kind in OWNER_APIS[path]]})
                if path.startswith("/apis/") and path.count("/") == 3:
                    return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                            "reason": "NotFound", "code": 404})
                if "/leases/" in path:
                    if api.lease is None:
                        return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                "reason": "NotFound", "code": 404})
                    return self._send(200, api.lease)
                items = api._items(path)
                start = int(query.get("continue", ["0"])[0])
                limit = int(query.get("limit", ["0"])[0]) or len(items)
                metadata: dict[str, Any] = {"resourceVersion": "10"}
                if start + limit < len(items):
                    metadata["continue"] = str(start + limit)
                self._send(200, {"apiVersion": "v1", "kind": "List", "metadata": metadata,
                                 "items": items[start:start + limit]})

            def _stream_watch(self, resource: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                events: queue.Queue[dict[str, Any]] = queue.Queue()
                with api.lock:
                    api.watchers.append((resource, events))
                try:
                    while not api.stopping.is_set():
                        try:
                            event = events.get(timeout=0.5)
                        except queue.Empty:
                            continue
                        data = json.dumps(event).encode() + b"\n"
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                except OSError:
                    pass
                finally:
                    with api.lock:
                        api.watchers.remove((resource, events))

            def do_POST(self) -> None:
                body = self._body()
                path = self._record(body)
                if path == "/api/v1/namespaces":
                    api.lease_namespace_exists = True
                if path.endswith("/leases"):
                    if not api.lease_namespace_exists:
                        namespace = path.split("/")[-2]
                        return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                "reason": "NotFound", "code": 404,
                                                "message": f'namespaces "{namespace}" not found',
                                                "details": {"name": namespace, "kind": "namespaces"}})
                    body["metadata"]["resourceVersion"] = "1"
                    api.lease = body
                self._send(201, body)

            def do_PUT(self) -> None:
                body = self._body()
                if "/leases/" in self._record(body):
                    api.lease = body
                self._send(200, body)

            def do_DELETE(self) -> None:
                path = self._record(self._body() or {})
                removed = api._remove(path)
                if removed is None:
                    return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                            "reason": "NotFound", "code": 404})
                self._send(200, removed)

            def do_PATCH(self) -> None:
                body = self._body()
                path = self._record(body)
                if path.endswith("/status"):
                    api.policy["status"] = body["status"]
                    return self._send(200, api.policy)
                api._store(path, body)
                self._send(200, body)

        return Handler


class Daemon:
    """`tiergate run` against a FakeApi, with a throwaway serving certificate and its admin port on loopback."""

    def __init__(self, binary: pathlib.Path, api: FakeApi, tmp: pathlib.Path, extra_args: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None) -> None:
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
        if not (tmp / "tls.crt").exists():
            # The webhook server loads its certificate at start; a throwaway self-signed one is enough here.
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(tmp / "tls.key"),
                            "-out", str(tmp / "tls.crt")], check=True, capture_output=True)
        self.admin = f"http://127.0.0.1:{free_port()}"
        self.log_path = tmp / f"daemon-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [str(binary), "run", "--kubeconfig", str(kubeconfig), "--admin-listen", self.admin[len("http://"):],
             "--webhook-listen", f"127.0.0.1:{free_port()}", "--tls-cert", str(tmp / "tls.crt"),
             "--tls-key", str(tmp / "tls.key"), "--namespace", "tiergate-system", *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, env={"RUST_LOG": "info,kube=warn", "PATH": "/usr/bin:/bin", **(extra_env or {})},
        )

    def metric(self, family: str) -> float:
        """The sum of a Prometheus metric family's samples on /metrics (0 when absent)."""
        _, text = http_get(self.admin + "/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(family) and line[len(family):len(family) + 1] in ("{", " "))

    def memory_kib(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak) of the process, in KiB, from /proc."""
        status = pathlib.Path(f"/proc/{self.process.pid}/status").read_text()
        return {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
                if line.startswith(("VmRSS:", "VmHWM:"))}

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()
