"""Chart test helpers: load and render charts/tiergate with the real Helm library (helm-python-sdk, no helm binary).

A module with a unique name (not conftest) so `from chart_helpers import ...` never picks up another suite's conftest."""
from __future__ import annotations

import pathlib
from typing import Any

import helm_python as helm
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "tiergate"
RELEASE = "tiergate"
NAMESPACE = "tiergate-system"

# One values override per chart option; each must render and pass every invariant.
OPTIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"certificates": {"mode": "cert-manager"}},
    "cert-manager-cluster-issuer": {
        "certificates": {
            "mode": "cert-manager",
            "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}},
        }
    },
    "failure-policy-fail": {"webhook": {"failurePolicy": "Fail"}},
    "monitoring": {"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}},
    "network-policy": {"networkPolicy": {"enabled": True, "apiServerCIDRs": ["10.0.0.1/32"]}},
    "dashboard": {"dashboard": {"enabled": True}},
    "sample-policy": {"samplePolicy": {"enabled": True}},
    "one-replica": {"replicaCount": 1},
    "fleet": {"fleet": {"kueueNamespace": "kueue", "kubeconfigSecrets": ["worker-us-east", "worker-eu-west"]}},
    "hard-anti-affinity": {"podAntiAffinity": "hard", "priorityClassName": "system-cluster-critical"},
    "host-network": {"hostNetwork": True, "webhookPort": 9443, "adminPort": 9080},
    "pod-deletes-no-jobsets": {"webhook": {"podDeletes": True, "jobsets": False}},
    "no-match-conditions": {"webhook": {"matchConditions": {"enabled": False}}},
    "mutating-gate": {"inServerGate": {"mutating": True}},
    "agent-and-extra-namespaces": {
        "agentUrl": "http://scheduler-agent.ml:8080",
        "webhook": {"excludedNamespaces": ["kube-public", "monitoring"]},
    },
    "bring-your-own-account": {
        "serviceAccount": {"create": False, "name": "platform-tiergate"},
        "rbac": {"create": False},
        "fullnameOverride": "gate",
    },
    "everything": {
        "certificates": {"mode": "cert-manager"},
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
        "networkPolicy": {"enabled": True},
        "dashboard": {"enabled": True},
        "samplePolicy": {"enabled": True},
        "webhook": {"failurePolicy": "Fail"},
    },
}


def render(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """Every object the chart renders (templates only; NOTES.txt and empty documents left out)."""
    with helm.Chart.load(CHART_DIR) as chart:
        chart.validate_schema(values or {})
        manifests = chart.render(values=values or {}, name=RELEASE, namespace=namespace, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                objects.append(document)
    return objects


def crds() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions under crds/."""
    with helm.Chart.load(CHART_DIR) as chart:
        return [yaml.safe_load(crd["data"]) for crd in chart.crds]


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The single object of `kind`."""
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True
