"""charts/tiergate: lint, values schema, and the invariants every rendering must keep (issue 7)."""
from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from chart_helpers import CHART_DIR, NAMESPACE, OPTIONS, REPO, of_kind, only, render, selector_matches

KUEUE_WEBHOOK_CONFIGURATION = "kueue-mutating-webhook-configuration"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}

# The RBAC allowlist, rule by rule, as documented in charts/tiergate/templates/rbac.yaml and docs/operations.md:
# (apiGroup, resource) -> verbs. A verb the chart grants that is not here fails the test.
CLUSTER_ALLOWLIST: dict[tuple[str, str], set[str]] = {
    ("tiergate.io", "tierpolicies"): {"get", "list", "watch"},
    ("tiergate.io", "tierpolicies/status"): {"patch", "update"},
    ("", "namespaces"): {"list", "watch"},
    ("", "nodes"): {"list", "watch"},
    ("", "pods"): {"list", "watch"},
    **{
        ("kueue.x-k8s.io", kind): {"get", "list", "watch", "create", "patch", "delete"}
        for kind in [
            "resourceflavors",
            "clusterqueues",
            "localqueues",
            "workloadpriorityclasses",
            "admissionchecks",
            "provisioningrequestconfigs",
            "multikueueclusters",
            "multikueueconfigs",
            "topologies",
            "cohorts",
        ]
    },
    # The in-server gate's admission policies, bindings and parameter objects (docs/admission.md).
    ("tiergate.io", "tiergateparameters"): {"get", "list", "watch", "create", "patch", "delete"},
    ("resource.k8s.io", "deviceclasses"): {"get", "list", "watch", "create", "patch", "delete"},
    ("karpenter.sh", "nodepools"): {"get", "list", "watch", "create", "patch", "delete"},
    ("resource.k8s.io", "resourceclaimtemplates"): {"list", "watch"},
    **{
        ("admissionregistration.k8s.io", kind): {"get", "list", "watch", "create", "patch", "delete"}
        for kind in [
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
        ]
    },
    ("kueue.x-k8s.io", "localqueues/status"): {"get"},
    ("kueue.x-k8s.io", "workloads"): {"get", "list", "watch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    # Which operators are installed (a default trusted controller needs a ClusterRoleBinding, issue 49).
    ("rbac.authorization.k8s.io", "clusterrolebindings"): {"list", "watch"},
    ("apps", "replicasets"): {"get", "list", "watch"},
    ("apps", "deployments"): {"get", "list", "watch"},
    # The owner index (issue 13): metadata-only watches of every kind whose pod templates tiergate checks.
    ("apps", "statefulsets"): {"list", "watch"},
    ("batch", "jobs"): {"list", "watch"},
    ("jobset.x-k8s.io", "jobsets"): {"list", "watch"},
    **{
        (group, resource): {"list", "watch"}
        for group, resource in [
            ("batch", "cronjobs"),
            ("ray.io", "rayjobs"),
            ("ray.io", "rayclusters"),
            ("ray.io", "rayservices"),
            *(("kubeflow.org", kind) for kind in ["pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs"]),
            ("kubeflow.org", "mpijobs"),
            ("trainer.kubeflow.org", "trainjobs"),
            ("leaderworkerset.x-k8s.io", "leaderworkersets"),
            ("workload.codeflare.dev", "appwrappers"),
            ("sparkoperator.k8s.io", "sparkapplications"),
        ]
    },
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): {"get", "patch"},
}
# Requeue (rbac.requeuePendingWorkloads, on by default): `patch` on the kinds Kueue suspends and queues by their own
# label, to move workloads pending in a namespace's old LocalQueue to its new one (docs/reconcile.md, Tier change).
REQUEUE_KINDS = [
    ("batch", "jobs"),
    ("jobset.x-k8s.io", "jobsets"),
    *(("ray.io", kind) for kind in ["rayjobs", "rayclusters", "rayservices"]),
    *(("kubeflow.org", kind) for kind in ["pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mpijobs"]),
    ("trainer.kubeflow.org", "trainjobs"),
    ("workload.codeflare.dev", "appwrappers"),
    ("sparkoperator.k8s.io", "sparkapplications"),
]
for _kind in REQUEUE_KINDS:
    CLUSTER_ALLOWLIST[_kind] = CLUSTER_ALLOWLIST[_kind] | {"patch"}
NAMESPACED_ALLOWLIST: dict[tuple[str, str], set[str]] = {
    ("coordination.k8s.io", "leases"): {"create", "get", "update"},
    ("", "secrets"): {"get", "update"},
    # Kueue's Configuration (kueue-manager-config), read for the DRA classes' deviceClassMappings.
    ("", "configmaps"): {"get"},
}
# Rights that must be limited to one object by name (create cannot be: RBAC has no name at create time).
NAME_RESTRICTED = {
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("", "secrets"),
    ("", "configmaps"),
}


def chart_metadata() -> dict[str, Any]:
    return yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())


def workload_pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return only(objects, "Deployment")["spec"]["template"]["spec"]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers = workload_pod_spec(objects)["containers"]
    assert len(containers) == 1
    return containers[0]


def args_map(objects: list[dict[str, Any]]) -> dict[str, str | None]:
    args = container(objects)["args"]
    assert args[0] == "run"
    flags: dict[str, str | None] = {}
    for arg in args[1:]:
        name, _, value = arg.partition("=")
        flags[name] = value if value else None
    return flags


def namespace_labels(name: str, **extra: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name, **extra}


# --- lint and values schema ---------------------------------------------------------------------------------


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_chart_lints_without_warnings_in_strict_mode(option: str) -> None:
    report = helm.lint(CHART_DIR, values=OPTIONS[option], strict=True, namespace=NAMESPACE, kube_version="v1.36.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == [], problems


def test_values_schema_describes_every_value() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    missing: list[str] = []

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        assert node.get("description"), f"{path or 'values'} has no description in values.schema.json"
        if isinstance(value, dict) and "properties" in node:
            for key, child in value.items():
                if key not in node["properties"]:
                    missing.append(f"{path}.{key}".lstrip("."))
                else:
                    walk(child, node["properties"][key], f"{path}.{key}")

    for key, child in values.items():
        if key not in schema["properties"]:
            missing.append(key)
        else:
            walk(child, schema["properties"][key], key)
    assert missing == []


@pytest.mark.parametrize(
    "values, complaint",
    [
        ({"replicas": 3}, "replicas"),
        ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
        ({"certificates": {"mode": "manual"}}, "mode"),
        ({"securityContext": {"readOnlyRootFilesystem": False, "allowPrivilegeEscalation": False}}, "securityContext"),
        ({"podSecurityContext": {"runAsNonRoot": False}}, "runAsNonRoot"),
        ({"replicaCount": 0}, "replicaCount"),
    ],
)
def test_values_schema_rejects_bad_values_naming_the_field(values: dict[str, Any], complaint: str) -> None:
    with helm.Chart.load(CHART_DIR) as chart:
        with pytest.raises(helm.HelmValuesError) as error:
            chart.validate_schema(values)
    assert complaint in str(error.value)


# --- webhook configuration ----------------------------------------------------------------------------------


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("namespace", [NAMESPACE, "gpu-admission"])
def test_webhook_never_selects_kube_system_or_its_own_namespace(option: str, namespace: str) -> None:
    objects = render(OPTIONS[option], namespace=namespace)
    webhooks = only(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert webhooks
    for webhook in webhooks:
        selector = webhook["namespaceSelector"]
        for excluded in ["kube-system", namespace]:
            assert not selector_matches(selector, namespace_labels(excluded)), (webhook["name"], excluded)
        assert not selector_matches(selector, namespace_labels("ml-team-dev", **{"tiergate.io/ignore": "true"}))
        assert selector_matches(selector, namespace_labels("ml-team-dev", **{"tenant.kubenexus.io/tier": "bronze"}))
        assert "objectSelector" not in webhook, "an object label must not let a tenant opt out of tier enforcement"


def test_extra_excluded_namespaces_are_never_selected(rendered) -> None:
    for webhook in only(rendered("agent-and-extra-namespaces"), "MutatingWebhookConfiguration")["webhooks"]:
        for name in ["kube-public", "monitoring", "kube-system", NAMESPACE]:
            assert not selector_matches(webhook["namespaceSelector"], namespace_labels(name))


def test_webhook_defaults_are_safe_for_the_write_path(rendered) -> None:
    objects = rendered("defaults")
    service = only(objects, "Service")
    for webhook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["sideEffects"] == "None"
        assert webhook["timeoutSeconds"] == 5
        assert webhook["reinvocationPolicy"] == "IfNeeded"
        assert webhook["admissionReviewVersions"] == ["v1"]
        if webhook["name"] == "claims.tiergate.io":
            # Every DRA claim names a DeviceClass: all are judged (CREATE only, their spec is immutable).
            assert "matchConditions" not in webhook
        elif webhook["name"] == "jobs.tiergate.io":
            # issue 52: every Job of a tiered namespace is sent (webhook.matchConditions.jobs filters them).
            assert "matchConditions" not in webhook
        else:
            assert webhook["matchConditions"], "non-GPU requests must not reach the webhook"
        reference = webhook["clientConfig"]["service"]
        assert reference == {"name": service["metadata"]["name"], "namespace": NAMESPACE, "path": "/mutate", "port": 443}
        assert "caBundle" not in webhook["clientConfig"], "the CA bundle is injected, never rendered"


def test_failure_policy_fail_is_an_option(rendered) -> None:
    webhooks = only(rendered("failure-policy-fail"), "MutatingWebhookConfiguration")["webhooks"]
    assert {webhook["failurePolicy"] for webhook in webhooks} == {"Fail"}


def test_webhook_rules_cover_every_kind_the_webhook_handles(rendered) -> None:
    covered = set()
    for webhook in only(rendered("defaults"), "MutatingWebhookConfiguration")["webhooks"]:
        for rule in webhook["rules"]:
            claims = webhook["name"] == "claims.tiergate.io"
            assert rule["operations"] == (["CREATE"] if claims else ["CREATE", "UPDATE"])
            for group in rule["apiGroups"]:
                for version in rule["apiVersions"]:
                    covered |= {(group, version, resource) for resource in rule["resources"]}
    assert covered == {
        ("", "v1", "pods"),
        ("batch", "v1", "jobs"),
        ("apps", "v1", "deployments"),
        ("apps", "v1", "statefulsets"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
        # issue 16: CronJobs and every kind Kueue v0.19.2 manages (tiergate_workloads::ADAPTERS).
        ("batch", "v1", "cronjobs"),
        ("ray.io", "v1", "rayjobs"),
        ("ray.io", "v1", "rayclusters"),
        ("ray.io", "v1", "rayservices"),
        ("kubeflow.org", "v1", "pytorchjobs"),
        ("kubeflow.org", "v1", "tfjobs"),
        ("kubeflow.org", "v1", "xgboostjobs"),
        ("kubeflow.org", "v1", "paddlejobs"),
        ("kubeflow.org", "v1", "jaxjobs"),
        ("kubeflow.org", "v2beta1", "mpijobs"),
        ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("workload.codeflare.dev", "v1beta2", "appwrappers"),
        ("sparkoperator.k8s.io", "v1beta2", "sparkapplications"),
        # issue 41: DRA claims and claim templates.
        ("resource.k8s.io", "v1", "resourceclaims"),
        ("resource.k8s.io", "v1", "resourceclaimtemplates"),
    }


def test_pod_deletes_and_jobsets_are_options(rendered) -> None:
    webhooks = {w["name"]: w for w in only(rendered("pod-deletes-no-jobsets"), "MutatingWebhookConfiguration")["webhooks"]}
    # kinds.tiergate.io (issue 16) is on by default and independent of the JobSet switch.
    assert set(webhooks) == {
        "pods.tiergate.io", "jobs.tiergate.io", "workloads.tiergate.io", "claims.tiergate.io", "kinds.tiergate.io"
    }
    assert webhooks["pods.tiergate.io"]["rules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]


def test_the_kinds_webhook_is_an_option() -> None:
    webhooks = {w["name"]: w for w in only(render({"webhook": {"kinds": False}}), "MutatingWebhookConfiguration")["webhooks"]}
    assert "kinds.tiergate.io" not in webhooks
    assert "pods.tiergate.io" in webhooks


def test_the_claims_webhook_is_an_option() -> None:
    webhooks = {w["name"]: w for w in only(render({"webhook": {"claims": False}}), "MutatingWebhookConfiguration")["webhooks"]}
    assert "claims.tiergate.io" not in webhooks
    assert "pods.tiergate.io" in webhooks


def test_match_conditions_can_be_turned_off(rendered) -> None:
    for webhook in only(rendered("no-match-conditions"), "MutatingWebhookConfiguration")["webhooks"]:
        assert "matchConditions" not in webhook


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_webhook_configuration_sorts_before_kueues_own(option: str, rendered) -> None:
    name = only(rendered(option), "MutatingWebhookConfiguration")["metadata"]["name"]
    assert name < KUEUE_WEBHOOK_CONFIGURATION


def test_a_configuration_name_after_kueues_is_refused_with_the_reason() -> None:
    with helm.Chart.load(CHART_DIR) as chart:
        with pytest.raises(helm.HelmValuesError) as schema_error:
            chart.validate_schema({"webhook": {"configurationName": "tiergate"}})
        assert "configurationName" in str(schema_error.value)
        # The template refuses it too, for installs that skip schema validation.
        with pytest.raises(helm.HelmError) as render_error:
            chart.render(values={"webhook": {"configurationName": "tiergate"}}, name="tiergate", namespace=NAMESPACE)
    assert "must sort before" in str(render_error.value) or "configurationName" in str(render_error.value)


# --- high availability --------------------------------------------------------------------------------------


def test_two_replicas_with_anti_affinity_and_a_disruption_budget_by_default(rendered) -> None:
    objects = rendered("defaults")
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    terms = workload_pod_spec(objects)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    budget = only(objects, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_one_replica_gets_no_disruption_budget(rendered) -> None:
    objects = rendered("one-replica")
    assert only(objects, "Deployment")["spec"]["replicas"] == 1
    assert of_kind(objects, "PodDisruptionBudget") == []


def test_hard_anti_affinity_and_priority_class_are_options(rendered) -> None:
    spec = workload_pod_spec(rendered("hard-anti-affinity"))
    assert spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert "priorityClassName" not in workload_pod_spec(rendered("defaults"))


# --- RBAC ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_rbac_has_no_wildcards_and_only_documented_verbs(option: str, rendered) -> None:
    objects = rendered(option)
    for kind, allowlist in [("ClusterRole", CLUSTER_ALLOWLIST), ("Role", NAMESPACED_ALLOWLIST)]:
        for role in of_kind(objects, kind):
            for rule in role["rules"]:
                assert "nonResourceURLs" not in rule
                for field in ["apiGroups", "resources", "verbs", "resourceNames"]:
                    assert "*" not in rule.get(field, []), (kind, rule)
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        allowed = allowlist.get((group, resource))
                        assert allowed is not None, f"{kind} grants undocumented {group}/{resource}"
                        extra = set(rule["verbs"]) - allowed
                        assert not extra, f"{kind} grants {sorted(extra)} on {group}/{resource}"
                        if (group, resource) in NAME_RESTRICTED:
                            assert len(rule.get("resourceNames", [])) == 1, f"{group}/{resource} not limited by name"
                        if resource == "leases" and set(rule["verbs"]) & (WRITE_VERBS - {"create"}):
                            assert rule.get("resourceNames"), "lease updates are limited to the tiergate Lease"


def patch_grants(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(group, resource) pairs the daemon's ClusterRole may patch among the workload kinds."""
    grants = set()
    for role in of_kind(objects, "ClusterRole"):
        for rule in role["rules"]:
            if "patch" in rule["verbs"]:
                grants |= {(group, resource) for group in rule["apiGroups"] for resource in rule["resources"]}
    return grants & {kind for kind in CLUSTER_ALLOWLIST if kind[0] not in {"kueue.x-k8s.io", "tiergate.io"}}


def test_the_requeue_patch_covers_exactly_the_queued_kinds_and_can_be_switched_off(rendered) -> None:
    assert patch_grants(rendered("defaults")) == set(REQUEUE_KINDS) | {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
        ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"),
        ("resource.k8s.io", "deviceclasses"),
        ("karpenter.sh", "nodepools"),
        ("", "events"),
        ("events.k8s.io", "events"),
    }
    off = render({"rbac": {"requeuePendingWorkloads": False}})
    assert not patch_grants(off) & set(REQUEUE_KINDS)


def test_every_rbac_rule_is_documented_in_the_template_and_the_operations_guide() -> None:
    template = (CHART_DIR / "templates" / "rbac.yaml").read_text().splitlines()
    for index, line in enumerate(template):
        if line.strip().startswith("- apiGroups:"):
            previous = template[index - 1].strip()
            assert previous.startswith("#"), f"rbac.yaml:{index + 1} has no comment"
    guide = (REPO / "docs" / "operations.md").read_text()
    for _group, resource in list(CLUSTER_ALLOWLIST) + list(NAMESPACED_ALLOWLIST):
        assert resource in guide, f"docs/operations.md does not document RBAC on {resource}"


def test_fleet_secrets_are_readable_by_name_only_in_kueues_namespace_and_not_at_all_by_default(rendered) -> None:
    assert not [role for role in of_kind(rendered("defaults"), "Role") if role["metadata"]["name"].endswith("-fleet")]
    objects = rendered("fleet")
    (role,) = [role for role in of_kind(objects, "Role") if role["metadata"]["name"].endswith("-fleet")]
    assert role["metadata"]["namespace"] == "kueue"
    assert [(rule["resources"], rule["resourceNames"], rule["verbs"]) for rule in role["rules"]] == [
        (["secrets"], ["worker-us-east"], ["get"]),
        (["secrets"], ["worker-eu-west"], ["get"]),
    ]
    (binding,) = [binding for binding in of_kind(objects, "RoleBinding") if binding["metadata"]["name"].endswith("-fleet")]
    assert binding["metadata"]["namespace"] == "kueue" and binding["subjects"][0]["namespace"] == NAMESPACE
    env = {item["name"]: item.get("value") for item in workload_pod_spec(objects)["containers"][0]["env"]}
    assert env["TIERGATE_KUEUE_NAMESPACE"] == "kueue"


@pytest.mark.parametrize("option, namespace", [("defaults", "kueue-system"), ("fleet", "kueue")])
def test_kueues_configuration_is_readable_by_name_only_in_kueues_namespace(option: str, namespace: str, rendered) -> None:
    objects = rendered(option)
    (role,) = [role for role in of_kind(objects, "Role") if role["metadata"]["name"].endswith("-kueue-config")]
    assert role["metadata"]["namespace"] == namespace
    assert [(rule["resources"], rule["resourceNames"], rule["verbs"]) for rule in role["rules"]] == [
        (["configmaps"], ["kueue-manager-config"], ["get"]),
    ]
    (binding,) = [b for b in of_kind(objects, "RoleBinding") if b["metadata"]["name"].endswith("-kueue-config")]
    assert binding["metadata"]["namespace"] == namespace and binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    others = [other for other in of_kind(objects, "ClusterRole") + of_kind(objects, "Role") if other is not role]
    assert not [rule for other in others for rule in other["rules"] if "configmaps" in rule["resources"]]


def test_the_mutating_half_of_the_in_server_gate_is_off_by_default_and_can_be_turned_on(rendered) -> None:
    def mutating_gate(scenario: str) -> str | None:
        env = {item["name"]: item.get("value") for item in workload_pod_spec(rendered(scenario))["containers"][0]["env"]}
        return env.get("TIERGATE_MUTATING_GATE")

    assert mutating_gate("defaults") == "false"
    assert mutating_gate("mutating-gate") == "true"


def test_self_managed_certificates_grant_only_their_own_secret_and_webhook_configuration(rendered) -> None:
    objects = rendered("defaults")
    webhook_name = only(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    secret_name = only(objects, "Secret")["metadata"]["name"]
    named = {}
    for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
        for rule in role["rules"]:
            for resource in rule["resources"]:
                if resource in {"secrets", "mutatingwebhookconfigurations"}:
                    named[resource] = rule["resourceNames"]
    assert named == {"secrets": [secret_name], "mutatingwebhookconfigurations": [webhook_name]}


def test_cert_manager_mode_needs_no_secret_rights_and_only_reads_its_webhook_configuration(rendered) -> None:
    objects = rendered("cert-manager")
    webhook_name = only(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
        for rule in role["rules"]:
            assert "secrets" not in rule["resources"]
            if "mutatingwebhookconfigurations" in rule["resources"]:
                # The registration owns the in-server gate (--gate-owner): read, never patched by tiergate here.
                assert rule["verbs"] == ["get"] and rule["resourceNames"] == [webhook_name], rule


def test_the_gate_is_owned_by_this_releases_webhook_configuration(rendered) -> None:
    for values in ("defaults", "cert-manager"):
        objects = rendered(values)
        webhook_name = only(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
        args = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--gate-owner={webhook_name}" in args, args


def test_bindings_grant_the_roles_to_the_service_account(rendered) -> None:
    objects = rendered("defaults")
    account = only(objects, "ServiceAccount")["metadata"]["name"]
    assert workload_pod_spec(objects)["serviceAccountName"] == account
    for binding, role in [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")]:
        bindings = {(b["metadata"].get("namespace"), b["roleRef"]["name"]) for b in of_kind(objects, binding)}
        roles = {(r["metadata"].get("namespace"), r["metadata"]["name"]) for r in of_kind(objects, role)}
        assert bindings == roles, f"each {role} has exactly one {binding} in its namespace"
        for bound in of_kind(objects, binding):
            assert bound["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]


# --- the pod ------------------------------------------------------------------------------------------------


def test_chart_app_version_is_the_version_the_workspace_builds() -> None:
    cargo = (REPO / "Cargo.toml").read_text()
    workspace_version = re.search(r'\[workspace\.package\][^\[]*?\nversion = "([^"]+)"', cargo, re.S)
    assert workspace_version, "workspace.package.version not found in Cargo.toml"
    assert chart_metadata()["appVersion"] == workspace_version.group(1), "bump Chart.yaml appVersion with the crates"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart_metadata()["version"])


def test_image_tag_follows_the_chart_app_version() -> None:
    app_version = chart_metadata()["appVersion"]
    assert container(render())["image"].endswith(f":{app_version}")
    assert container(render({"image": {"tag": "v9.9.9"}}))["image"].endswith(":v9.9.9")
    digest = "sha256:" + "a" * 64
    assert container(render({"image": {"digest": digest}}))["image"].endswith(f"@{digest}")


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_container_is_hardened(option: str, rendered) -> None:
    spec = workload_pod_spec(rendered(option))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for each in spec.get("initContainers", []) + spec["containers"]:
        context = each["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["runAsNonRoot"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert each["resources"]["requests"] and each["resources"]["limits"]


def test_a_stopping_pod_keeps_serving_until_routing_moves_away(rendered) -> None:
    objects = rendered("defaults")
    assert container(objects)["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    assert workload_pod_spec(objects)["terminationGracePeriodSeconds"] > 5


def test_probes_use_the_admin_port(rendered) -> None:
    objects = rendered("defaults")
    main = container(objects)
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    assert ports == {"webhook": 8443, "admin": 8080}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    service_ports = {port["name"]: (port["port"], port["targetPort"]) for port in only(objects, "Service")["spec"]["ports"]}
    assert service_ports == {"https": (443, "webhook"), "metrics": (8080, "admin")}


def cli_flags_of_run() -> tuple[set[str], set[str]]:
    """Long flags and TIERGATE_* variables `tiergate run` accepts, read from daemon/src/cli.rs."""
    source = (REPO / "daemon" / "src" / "cli.rs").read_text()
    flags: set[str] = set()
    envs: set[str] = set()
    for struct in ["Cli", "RunArgs", "TlsArgs", "LimitsArgs"]:
        body = re.search(rf"pub struct {struct} \{{(.*?)\n\}}", source, re.S)
        assert body, f"{struct} not found in cli.rs"
        for attributes, field in re.findall(r"#\[arg\(([^\]]*)\)\]\s*pub (\w+):", body.group(1)):
            long = re.search(r'long = "([^"]+)"', attributes)
            flags.add("--" + (long.group(1) if long else field.replace("_", "-")))
            env = re.search(r'env = "([^"]+)"', attributes)
            if env:
                envs.add(env.group(1))
    return flags, envs


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_container_args_and_env_are_flags_of_tiergate_run(option: str, rendered) -> None:
    flags, envs = cli_flags_of_run()
    objects = rendered(option)
    arguments = args_map(objects)
    assert set(arguments) <= flags, set(arguments) - flags
    tiergate_env = {e["name"] for e in container(objects)["env"] if e["name"].startswith("TIERGATE_")}
    assert tiergate_env <= envs, tiergate_env - envs
    assert not {f"--{e.removeprefix('TIERGATE_').lower().replace('_', '-')}" for e in tiergate_env} & set(arguments)
    ports = {port["name"]: port["containerPort"] for port in container(objects)["ports"]}
    assert arguments["--webhook-listen"] == f"0.0.0.0:{ports['webhook']}"
    assert arguments["--admin-listen"] == f"0.0.0.0:{ports['admin']}"
    assert (ports["webhook"], ports["admin"]) == ((9443, 9080) if option == "host-network" else (8443, 8080))
    assert arguments["--namespace"] == NAMESPACE
    assert arguments["--service-name"] == only(objects, "Service")["metadata"]["name"]
    assert arguments["--webhook-config-name"] == only(objects, "MutatingWebhookConfiguration")["metadata"]["name"]


def test_self_managed_certificates_are_the_default(rendered) -> None:
    objects = rendered("defaults")
    arguments = args_map(objects)
    assert "--self-managed-certs" in arguments
    secret = only(objects, "Secret")
    assert arguments["--cert-secret"] == secret["metadata"]["name"]
    assert "data" not in secret and "stringData" not in secret, "tiergate owns the data; upgrades must not reset it"
    volumes = {v["name"]: v for v in workload_pod_spec(objects)["volumes"]}
    assert volumes["tls"]["emptyDir"]["medium"] == "Memory"
    assert arguments["--tls-cert"] == "/tls/tls.crt" and arguments["--tls-key"] == "/tls/tls.key"
    assert "annotations" not in only(objects, "MutatingWebhookConfiguration")["metadata"]


@pytest.mark.parametrize("option", ["cert-manager", "cert-manager-cluster-issuer"])
def test_cert_manager_issues_the_certificate_and_injects_the_ca(option: str, rendered) -> None:
    objects = rendered(option)
    arguments = args_map(objects)
    assert "--self-managed-certs" not in arguments and "--cert-secret" not in arguments
    serving = [c for c in of_kind(objects, "Certificate") if not c["spec"].get("isCA")]
    assert len(serving) == 1
    certificate = serving[0]
    service = only(objects, "Service")["metadata"]["name"]
    assert f"{service}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    volumes = {v["name"]: v for v in workload_pod_spec(objects)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    annotations = only(objects, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{certificate['metadata']['name']}"
    issuers = {(i["kind"], i["metadata"]["name"]) for i in of_kind(objects, "Issuer")}
    reference = certificate["spec"]["issuerRef"]
    if option == "cert-manager":
        assert ("Issuer", reference["name"]) in issuers
    else:
        assert reference == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
        assert issuers == set()


# --- optional objects ---------------------------------------------------------------------------------------


def test_optional_objects_are_off_by_default(rendered) -> None:
    kinds = {o["kind"] for o in rendered("defaults")}
    assert not kinds & {"NetworkPolicy", "ServiceMonitor", "PrometheusRule", "ConfigMap", "TierPolicy", "Certificate"}


def test_network_policy_admits_the_api_server_and_allows_dns_and_api_egress(rendered) -> None:
    policy = only(rendered("network-policy"), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    webhook_ingress = policy["spec"]["ingress"][0]
    assert "from" not in webhook_ingress and webhook_ingress["ports"] == [{"port": "webhook", "protocol": "TCP"}]
    egress_ports = [port["port"] for rule in policy["spec"]["egress"] for port in rule["ports"]]
    assert 53 in egress_ports and 443 in egress_ports
    assert {"ipBlock": {"cidr": "10.0.0.1/32"}} in policy["spec"]["egress"][1]["to"]


def test_sample_policy_is_the_repository_sample(rendered) -> None:
    policy = only(rendered("sample-policy"), "TierPolicy")
    sample = yaml.safe_load((REPO / "samples" / "kubenexus" / "policy.yaml").read_text())
    assert policy["metadata"]["name"] == sample["metadata"]["name"] == "default"
    assert policy["spec"] == sample["spec"]


def test_dashboard_is_grafana_json_over_tiergate_metrics(rendered) -> None:
    configmap = only(rendered("dashboard"), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["tiergate.json"])
    assert dashboard["uid"] == "tiergate" and len(dashboard["panels"]) >= 10
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert all("tiergate_" in expression for expression in expressions)


def test_service_monitor_scrapes_the_metrics_port(rendered) -> None:
    objects = rendered("monitoring")
    monitor = only(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= only(objects, "Service")["metadata"]["labels"].items()


def test_alerts_cover_webhook_errors_fail_open_reconcile_failures_and_lease_loss(rendered) -> None:
    rules = [rule for group in only(rendered("monitoring"), "PrometheusRule")["spec"]["groups"] for rule in group["rules"]]
    alerts = {rule["alert"]: rule for rule in rules}
    for name in ["TiergateWebhookErrors", "TiergateFailOpenRate", "TiergateReconcileFailures", "TiergateLeaseLost"]:
        assert name in alerts
    for rule in rules:
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert "{{ $value" not in rule["expr"]
    assert f'namespace="{NAMESPACE}"' in alerts["TiergateFailOpenRate"]["expr"]


def test_the_image_runs_the_binary_the_chart_expects_as_the_chart_user(rendered) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    final_stage = dockerfile.rsplit("\nFROM ", 1)[1]
    assert final_stage.startswith("gcr.io/distroless/"), "minimal runtime image"
    assert 'ENTRYPOINT ["/tiergate"]' in final_stage
    user = re.search(r"^USER (\d+):(\d+)$", final_stage, re.M)
    assert user, "the runtime stage must name a numeric non-root user"
    spec = workload_pod_spec(rendered("defaults"))
    assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == tuple(map(int, user.groups()))
    assert "command" not in container(rendered("defaults")), "the chart runs the image's /tiergate entrypoint"
    assert "--bin tiergate" in dockerfile


def test_operations_guide_documents_every_value() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    guide = (REPO / "docs" / "reference" / "chart-values.md").read_text()
    undocumented: list[str] = []

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if f"`{path}`" in guide:
            return
        nested = isinstance(value, dict) and node.get("additionalProperties") is False and "properties" in node
        if nested and value:
            for key, child in value.items():
                walk(child, node["properties"][key], f"{path}.{key}")
        else:
            undocumented.append(path)

    for key, child in values.items():
        walk(child, schema["properties"][key], key)
    assert undocumented == [], "docs/reference/chart-values.md lacks these values; regenerate it"
