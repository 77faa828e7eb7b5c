"""Every object the chart renders parses as its Kubernetes type.

Built-in kinds are validated against the Kubernetes 1.36 OpenAPI schemas shipped (offline) by kubernetes-validate,
in strict mode: an unknown or misspelt field fails. The TierPolicy is validated against the chart's own CRD.
cert-manager and Prometheus Operator kinds are checked against the fields of their CRDs the chart uses.
Every tiergate_* metric an alert or the dashboard queries must be one daemon/src/metrics.rs exports.
"""
from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from chart_helpers import OPTIONS, REPO, crds, of_kind, only

KUBERNETES_VERSION = "1.36.0"

# The fields of the third-party CRDs the chart renders (cert-manager.io/v1, monitoring.coreos.com/v1), transcribed
# from their CRDs; additionalProperties false catches a misspelt field.
_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
_ISSUER_REF = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "kind": {"type": "string"}, "group": {"type": "string"}},
}
THIRD_PARTY_SPECS: dict[tuple[str, str], dict[str, Any]] = {
    ("cert-manager.io/v1", "Issuer"): {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "selfSigned": {"type": "object"},
            "ca": {"type": "object", "required": ["secretName"], "properties": {"secretName": {"type": "string"}}},
        },
        "minProperties": 1,
    },
    ("cert-manager.io/v1", "Certificate"): {
        "type": "object",
        "required": ["secretName", "issuerRef"],
        "additionalProperties": False,
        "properties": {
            "secretName": {"type": "string"},
            "isCA": {"type": "boolean"},
            "commonName": {"type": "string", "maxLength": 64},
            "dnsNames": {"type": "array", "items": {"type": "string"}},
            "duration": _DURATION,
            "renewBefore": _DURATION,
            "usages": {
                "type": "array",
                "items": {"enum": ["server auth", "client auth", "digital signature", "key encipherment", "cert sign"]},
            },
            "privateKey": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                    "size": {"type": "integer"},
                    "rotationPolicy": {"enum": ["Never", "Always"]},
                },
            },
            "issuerRef": _ISSUER_REF,
        },
    },
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["selector", "endpoints"],
        "additionalProperties": False,
        "properties": {
            "selector": {"type": "object"},
            "namespaceSelector": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}, "any": {"type": "boolean"}},
            },
            "endpoints": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "port": {"type": "string"},
                        "path": {"type": "string"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": _DURATION,
                    },
                },
            },
        },
    },
    ("monitoring.coreos.com/v1", "PrometheusRule"): {
        "type": "object",
        "required": ["groups"],
        "additionalProperties": False,
        "properties": {
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "rules"],
                    "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string"},
                        "rules": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["alert", "expr"],
                                "additionalProperties": False,
                                "properties": {
                                    "alert": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9]*$"},
                                    "expr": {"type": "string"},
                                    "for": _DURATION,
                                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                                },
                            },
                        },
                    },
                },
            }
        },
    },
}
OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}


def validate_object(document: dict[str, Any]) -> None:
    api_version, kind = document["apiVersion"], document["kind"]
    if (api_version, kind) in THIRD_PARTY_SPECS:
        jsonschema.validate(document["metadata"], OBJECT_META)
        jsonschema.validate(document["spec"], THIRD_PARTY_SPECS[(api_version, kind)])
        assert set(document) == {"apiVersion", "kind", "metadata", "spec"}
        return
    if (api_version, kind) == ("tiergate.io/v1alpha1", "TierPolicy"):
        (crd,) = [crd for crd in crds() if crd["spec"]["names"]["kind"] == "TierPolicy"]
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
        jsonschema.validate(document, version["schema"]["openAPIV3Schema"])
        return
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_rendered_object_parses_as_its_kubernetes_type(option: str, rendered) -> None:
    for document in rendered(option):
        try:
            validate_object(document)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as error:
            pytest.fail(f"{option}: {document['kind']} {document['metadata']['name']}: {error}")


def test_strict_validation_catches_a_misspelt_field(rendered) -> None:
    deployment = json.loads(json.dumps(only(rendered("defaults"), "Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_object(deployment)


def test_the_crds_in_the_chart_are_valid_custom_resource_definitions() -> None:
    names = set()
    for crd in crds():
        kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)
        names.add(crd["metadata"]["name"])
        assert crd["spec"]["scope"] == "Cluster"
    assert names == {"tierpolicies.tiergate.io", "tiergateparameters.tiergate.io"}


def exported_metric_names() -> set[str]:
    """Series names daemon/src/metrics.rs exports: prefix tiergate_, _total on counters, _bucket/_sum/_count on histograms."""
    source = (REPO / "daemon" / "src" / "metrics.rs").read_text()
    field_types = dict(re.findall(r"pub (\w+): ([^\n]+?),\n", source))
    names: set[str] = set()
    for name, field in re.findall(r'registry\.register\(\s*"(\w+)",\s*"[^"]*",\s*metrics\.(\w+)\.clone\(\)', source):
        kind = field_types[field]
        base = f"tiergate_{name}"
        if "Counter" in kind:
            names.add(f"{base}_total")
        elif "Histogram" in kind:
            names |= {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
        else:
            names.add(base)
    assert len(names) > 15, "metrics.rs could not be read"
    return names


def test_alerts_and_dashboard_query_only_metrics_tiergate_exports(rendered) -> None:
    exported = exported_metric_names()
    objects = rendered("everything")
    expressions = [
        rule["expr"]
        for group in only(objects, "PrometheusRule")["spec"]["groups"]
        for rule in group["rules"]
    ]
    dashboard = json.loads(only(objects, "ConfigMap")["data"]["tiergate.json"])
    expressions += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    expressions.append(dashboard["templating"]["list"][1]["query"]["query"])
    queried = {name for expression in expressions for name in re.findall(r"\btiergate_\w+", expression)}
    assert queried, "no tiergate metric queried"
    assert queried <= exported, sorted(queried - exported)


def test_decision_label_values_in_alerts_are_those_metrics_rs_encodes(rendered) -> None:
    # The label values are DecisionLabel::as_str (daemon/core/src/admission/decision.rs), what metrics.rs records.
    source = (REPO / "daemon" / "core" / "src" / "admission" / "decision.rs").read_text()
    as_str = re.search(r"pub fn as_str\(self\) -> &'static str \{(.*?)\n    \}", source, re.S).group(1)
    decisions = set(re.findall(r'Self::\w+ => "(\w+)"', as_str))
    assert {"Mutated", "FailedOpen"} <= decisions, decisions
    rules = [r for g in only(rendered("monitoring"), "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    for rule in rules:
        for match in re.findall(r'decision=~?"([^"]+)"', rule["expr"]):
            assert set(match.split("|")) <= decisions, (rule["alert"], match)


def test_every_kind_rendered_is_known(rendered) -> None:
    known = {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service",
        "PodDisruptionBudget", "MutatingWebhookConfiguration", "Secret", "NetworkPolicy", "ConfigMap", "TierPolicy",
        "Issuer", "Certificate", "ServiceMonitor", "PrometheusRule",
    }  # fmt: skip
    assert {o["kind"] for o in rendered("everything")} | {o["kind"] for o in rendered("defaults")} <= known
    assert of_kind(rendered("defaults"), "Namespace") == [], "the release namespace belongs to the installer"


def test_operations_guide_lists_every_metric_family() -> None:
    guide = (REPO / "docs" / "operations.md").read_text()
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in exported_metric_names()}
    assert {family for family in families if f"`{family}`" not in guide} == set()
