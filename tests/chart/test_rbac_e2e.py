"""End-to-end (cluster-gated): the daemon works with exactly the chart's RBAC and no more.

Installs the rendered chart's CRD, ServiceAccount, RBAC, certificate Secret and webhook configuration into a fresh
namespace, runs `tiergate run` locally with a token of that ServiceAccount (so every API call is authorised as the
chart's pods would be), applies the sample policy and a bronze namespace, and checks that the LocalQueue appears,
the self-managed certificate is issued and its CA injected, and that no call was forbidden. Also checks, with
`kubectl auth can-i`, that the ServiceAccount cannot do what it must not.

Runs when KUBECONFIG names a reachable cluster with Kueue's CRDs installed and kubectl is on PATH:

    KUBECONFIG=~/.kube/config target/test-venv/bin/python -m pytest -q tests/chart/test_rbac_e2e.py

Skipped, with the reason, otherwise.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import uuid
from typing import Any, Iterator

import pytest
import yaml

from chart_helpers import REPO, crds, render
from daemon_harness import free_port, wait_until

TIMEOUT_SECONDS = 60


def kubectl(*args: str, stdin: str | None = None, kubeconfig: str | None = None, check: bool = True) -> str:
    env = dict(os.environ)
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    result = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def cluster_skip_reason() -> str | None:
    if not os.environ.get("KUBECONFIG"):
        return "KUBECONFIG is not set: no cluster to run the RBAC end-to-end test against"
    if shutil.which("kubectl") is None:
        return "kubectl is not on PATH"
    probe = subprocess.run(["kubectl", "get", "--raw", "/readyz"], capture_output=True, text=True, timeout=20, check=False)
    if probe.returncode != 0:
        return f"the cluster in KUBECONFIG is not reachable: {probe.stderr.strip()}"
    crd = subprocess.run(
        ["kubectl", "get", "crd", "clusterqueues.kueue.x-k8s.io"], capture_output=True, text=True, timeout=20, check=False
    )
    if crd.returncode != 0:
        return "Kueue's CRDs are not installed in the cluster"
    return None


SKIP_REASON = cluster_skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))


def wait_for(what: str, probe: Any) -> Any:
    return wait_until(what, probe, timeout=TIMEOUT_SECONDS, interval=1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    suffix = uuid.uuid4().hex[:6]
    namespace = f"tiergate-e2e-{suffix}"
    tenant = f"tiergate-e2e-bronze-{suffix}"
    values = {"fullnameOverride": f"tiergate-e2e-{suffix}", "leaseName": f"tiergate-e2e-{suffix}-leader"}
    objects = [
        o
        for o in render(values, namespace=namespace)
        if o["kind"] not in {"Deployment", "PodDisruptionBudget", "Service"}
    ]
    kubectl("create", "namespace", namespace)
    kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(crds()))
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    account = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    secret = next(o for o in objects if o["kind"] == "Secret")["metadata"]["name"]
    webhook = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")["metadata"]["name"]

    # A kubeconfig that authenticates as the chart's ServiceAccount, nothing else.
    admin = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    token = kubectl("create", "token", account, "-n", namespace, "--duration=30m").strip()
    restricted = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "tiergate", "user": {"token": token}}],
        "contexts": [{"name": "tiergate", "context": {"cluster": admin["clusters"][0]["name"], "user": "tiergate"}}],
        "current-context": "tiergate",
    }
    work = tmp_path_factory.mktemp("rbac-e2e")
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(json.dumps(restricted))

    policy = yaml.safe_load((REPO / "samples" / "kubenexus" / "policy.yaml").read_text())
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(policy))
    kubectl("create", "namespace", tenant)
    kubectl("label", "namespace", tenant, f"{policy['spec']['tierLabel']}=bronze")

    log = (work / "tiergate.log").open("w")
    command = [
        "cargo", "run", "-q", "-p", "tiergate", "--", "run",
        f"--kubeconfig={kubeconfig}",
        f"--webhook-listen=127.0.0.1:{free_port()}",
        f"--admin-listen=127.0.0.1:{free_port()}",
        f"--namespace={namespace}",
        f"--service-name={webhook}-svc",
        f"--webhook-config-name={webhook}",
        f"--lease-name={values['leaseName']}",
        f"--policy-name={policy['metadata']['name']}",
        f"--tls-cert={work / 'tls.crt'}",
        f"--tls-key={work / 'tls.key'}",
        "--self-managed-certs",
        f"--cert-secret={secret}",
    ]  # fmt: skip
    daemon = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield {
            "namespace": namespace,
            "tenant": tenant,
            "account": account,
            "secret": secret,
            "webhook": webhook,
            "work": work,
            "daemon": daemon,
            "log": work / "tiergate.log",
        }
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        kubectl("delete", "tierpolicy", policy["metadata"]["name"], "--ignore-not-found", "--wait=false", check=False)
        kubectl("delete", "namespace", tenant, namespace, "--ignore-not-found", "--wait=false", check=False)
        for o in objects:
            if "namespace" not in o["metadata"]:
                kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", check=False)


def test_daemon_converges_with_only_the_chart_rbac(installed: dict[str, Any]) -> None:
    wait_for(
        "the bronze LocalQueue",
        lambda: kubectl("get", "localqueue", "-n", installed["tenant"], "-o", "name", check=False).strip(),
    )
    assert installed["daemon"].poll() is None, installed["log"].read_text()


def test_self_managed_certificate_is_issued_and_injected_with_only_the_chart_rbac(installed: dict[str, Any]) -> None:
    wait_for("the serving certificate file", lambda: (installed["work"] / "tls.crt").exists())
    data = json.loads(kubectl("get", "secret", installed["secret"], "-n", installed["namespace"], "-o", "json"))["data"]
    assert {"ca.crt", "ca.key", "ca-bundle.crt", "tls.crt", "tls.key"} <= set(data)
    bundles = wait_for(
        "the caBundle",
        lambda: all(
            w["clientConfig"].get("caBundle")
            for w in json.loads(kubectl("get", "mutatingwebhookconfiguration", installed["webhook"], "-o", "json"))["webhooks"]
        ),
    )
    assert bundles


def test_no_api_call_was_forbidden(installed: dict[str, Any]) -> None:
    wait_for("the first reconcile", lambda: kubectl("get", "localqueue", "-n", installed["tenant"], "-o", "name", check=False))
    log = installed["log"].read_text()
    assert "forbidden" not in log.lower(), log


@pytest.mark.parametrize(
    "verb, resource",
    [
        ("list", "secrets"),
        ("create", "secrets"),
        ("delete", "pods"),
        ("create", "pods"),
        ("patch", "mutatingwebhookconfigurations/kueue-mutating-webhook-configuration"),
        ("update", "namespaces"),
        ("delete", "tierpolicies.tiergate.io"),
        ("update", "leases/someone-elses-lease"),
        ("escalate", "clusterroles"),
    ],
)
def test_the_service_account_cannot_do_what_it_must_not(installed: dict[str, Any], verb: str, resource: str) -> None:
    subject = f"system:serviceaccount:{installed['namespace']}:{installed['account']}"
    answer = kubectl("auth", "can-i", verb, resource, "-n", installed["namespace"], f"--as={subject}", check=False)
    assert answer.strip() == "no", f"{subject} may {verb} {resource}"
