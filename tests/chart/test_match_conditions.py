"""Which recorded admission requests the API server would send to tiergate, evaluated like the API server does:
the rules pick the webhook, the namespaceSelector the namespace, then the CEL matchConditions decide.

The CEL is evaluated with a real CEL implementation (common-expression-language) on the recorded requests in
shared/fixtures/admission. A matchCondition that errors would, with failurePolicy Fail, reject the request, so
every evaluation here must succeed.
"""
from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import cel
import pytest

from chart_helpers import REPO, only, render, selector_matches

# Namespace labels of the recorded cluster (shared/fixtures/README.md).
NAMESPACES = {
    "ml-team-dev": {"kubernetes.io/metadata.name": "ml-team-dev", "tenant.kubenexus.io/tier": "bronze"},
    "ml-research": {"kubernetes.io/metadata.name": "ml-research", "tenant.kubenexus.io/tier": "gold"},
    "kube-system": {"kubernetes.io/metadata.name": "kube-system"},
}

# Expected: is the recorded request sent to tiergate, and why.
EXPECTED = {
    "job-create-bronze-gpu-scored.json": (True, "Job requests nvidia.com/gpu"),
    "job-create-bronze-dryrun.json": (True, "dry-run gets the same answer"),
    "job-update-bronze-add-label.json": (True, "UPDATE of a GPU Job"),
    "job-create-gold-8gpu-suspended.json": (True, "Job requests nvidia.com/gpu"),
    "pod-create-bronze-user-override-a100.json": (True, "Pod requests nvidia.com/gpu (the user's class is checked)"),
    "pod-create-bronze-cpu-only.json": (False, "no GPU request and no placement annotation"),
    "pod-create-kube-system.json": (False, "kube-system is never selected"),
    "deployment-create-smart-scheduler-strategy.json": (True, "smart-scheduler.io/schedule-strategy on the Deployment"),
    "deployment-create-custom-pod-strategy.json": (True, "CustomPodScheduleStrategy on the pod template"),
    "statefulset-create-gpu-scheduling-map.json": (True, "gpu-scheduling-map on the pod template"),
    "pod-create-from-job-1.json": (True, "Job pod requests nvidia.com/gpu"),
    "pod-create-from-job-2.json": (True, "Job pod requests nvidia.com/gpu"),
    "pod-create-from-statefulset-ordinal-0.json": (True, "gpu-scheduling-map on the pod"),
    **{f"pod-create-from-replicaset-alpine-{n}.json": (True, "CustomPodScheduleStrategy on the pod") for n in range(1, 11)},
    # Recorded without tiergate: the Deployment's strategy was not yet copied onto its pod template, so these pods
    # carry nothing to match. With tiergate the Deployment's admission adds a tiergate.io/ template annotation
    # (PlacementOutcome.template_annotations); see test_pods_of_a_strategy_deployment_are_sent_once_tiergate_annotated_the_template.
    **{f"pod-create-from-replicaset-web-app-{n}.json": (False, "as recorded, no annotation") for n in range(1, 7)},
}


def fixtures_dir() -> pathlib.Path:
    for parent in [REPO, *REPO.parents]:
        candidate = parent / "shared" / "fixtures" / "admission"
        if candidate.is_dir():
            return candidate
    pytest.skip("shared/fixtures/admission not found beside the repository")


def webhooks(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return only(render(values or {}), "MutatingWebhookConfiguration")["webhooks"]


def rule_matches(rule: dict[str, Any], request: dict[str, Any]) -> bool:
    resource = request["resource"]
    return (
        resource["group"] in rule["apiGroups"]
        and resource["version"] in rule["apiVersions"]
        and resource["resource"] in rule["resources"]
        and request["operation"] in rule["operations"]
    )


def sent_to_tiergate(request: dict[str, Any], configured: list[dict[str, Any]]) -> bool:
    """The API server's decision: matching rule, selected namespace, every matchCondition true."""
    for webhook in configured:
        if not any(rule_matches(rule, request) for rule in webhook["rules"]):
            continue
        if not selector_matches(webhook["namespaceSelector"], NAMESPACES[request["namespace"]]):
            return False
        context = {"object": request.get("object"), "oldObject": request.get("oldObject"), "request": request}
        return all(cel.evaluate(condition["expression"], context) is True for condition in webhook.get("matchConditions", []))
    return False


def load(name: str) -> dict[str, Any]:
    return json.loads((fixtures_dir() / name).read_text())["request"]


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in fixtures_dir().glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("failure_policy", ["Ignore", "Fail"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_request_reaches_tiergate_only_when_it_may_need_it(name: str, failure_policy: str) -> None:
    expected, why = EXPECTED[name]
    assert sent_to_tiergate(load(name), webhooks({"webhook": {"failurePolicy": failure_policy}})) is expected, why


def test_pods_of_a_strategy_deployment_are_sent_once_tiergate_annotated_the_template() -> None:
    request = load("pod-create-from-replicaset-web-app-1.json")
    request["object"]["metadata"]["annotations"] = {"tiergate.io/placement-strategy": "base=1,weight=1,..."}
    assert sent_to_tiergate(request, webhooks())


def test_a_cpu_only_deployment_without_placement_is_not_sent() -> None:
    request = load("deployment-create-smart-scheduler-strategy.json")
    del request["object"]["metadata"]["annotations"]
    assert not sent_to_tiergate(request, webhooks())


def test_a_gpu_limit_in_an_init_container_is_enough() -> None:
    request = load("pod-create-bronze-cpu-only.json")
    request["object"]["spec"]["initContainers"] = [
        {"name": "warmup", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    assert sent_to_tiergate(request, webhooks())


def test_an_opted_out_namespace_is_not_sent() -> None:
    request = load("job-create-bronze-gpu-scored.json")
    labels = NAMESPACES["ml-team-dev"] | {"tiergate.io/ignore": "true"}
    configured = webhooks()
    jobs = next(w for w in configured if w["name"] == "jobs.tiergate.io")
    assert not selector_matches(jobs["namespaceSelector"], labels)
    assert sent_to_tiergate(request, configured)


def cpu_only_job() -> dict[str, Any]:
    request = load("job-create-bronze-gpu-scored.json")
    for container in request["object"]["spec"]["template"]["spec"]["containers"]:
        container["resources"] = {"requests": {"cpu": "1"}}
    return request


def test_every_job_of_a_tiered_namespace_is_sent_by_default() -> None:
    # issue 52: the filter cost a GPU Job two conversions in the API server and saved nothing.
    configured = webhooks()
    jobs = next(w for w in configured if w["name"] == "jobs.tiergate.io")
    assert "matchConditions" not in jobs
    assert sent_to_tiergate(cpu_only_job(), configured)
    assert sent_to_tiergate(load("job-create-bronze-gpu-scored.json"), configured)


def test_jobs_are_filtered_like_the_other_kinds_when_asked() -> None:
    configured = webhooks({"webhook": {"matchConditions": {"jobs": True}}})
    assert not sent_to_tiergate(cpu_only_job(), configured)
    assert sent_to_tiergate(load("job-create-bronze-gpu-scored.json"), configured)
    update = load("job-update-bronze-add-label.json")
    assert sent_to_tiergate(update, configured)


def test_deployments_and_statefulsets_stay_filtered() -> None:
    request = load("deployment-create-smart-scheduler-strategy.json")
    del request["object"]["metadata"]["annotations"]
    configured = webhooks()
    workloads = next(w for w in configured if w["name"] == "workloads.tiergate.io")
    assert workloads["matchConditions"]
    assert {resource for rule in workloads["rules"] for resource in rule["resources"]} == {"deployments", "statefulsets"}
    assert not sent_to_tiergate(request, configured)


def test_pod_deletes_are_sent_when_enabled_without_a_cel_error() -> None:
    request = load("pod-create-bronze-cpu-only.json")
    request = request | {"operation": "DELETE", "oldObject": request["object"], "object": None}
    assert not sent_to_tiergate(request, webhooks())
    assert sent_to_tiergate(request, webhooks({"webhook": {"podDeletes": True}}))


def jobset(gpu: bool, annotated: bool = False) -> dict[str, Any]:
    pod = load("pod-create-from-job-1.json")["object"]
    template = {"metadata": {}, "spec": copy.deepcopy(pod["spec"])}
    if not gpu:
        for each in template["spec"]["containers"]:
            each["resources"] = {"requests": {"cpu": "1"}}
    if annotated:
        template["metadata"]["annotations"] = {"tiergate.io/placement": "spot-split"}
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "trainer", "namespace": "ml-team-dev"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {"template": template}}}]},
    }
    return {
        "uid": "0",
        "kind": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
        "resource": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "resource": "jobsets"},
        "namespace": "ml-team-dev",
        "operation": "CREATE",
        "object": obj,
    }


@pytest.mark.parametrize("gpu, annotated, expected", [(True, False, True), (False, True, True), (False, False, False)])
def test_jobsets_are_sent_for_gpu_or_placement(gpu: bool, annotated: bool, expected: bool) -> None:
    assert sent_to_tiergate(jobset(gpu, annotated), webhooks()) is expected


def test_a_jobset_without_replicated_jobs_is_skipped_without_a_cel_error() -> None:
    request = jobset(gpu=True)
    del request["object"]["spec"]["replicatedJobs"]
    assert not sent_to_tiergate(request, webhooks({"webhook": {"failurePolicy": "Fail"}}))


# Tenant boundary (issue 13, class 1 and 4): every route by which a pod can reach GPU nodes is sent, so tiergate can
# confine it to the tier's classes; a CPU pod with none of them still is not.
BOUNDARY_ROUTES = {
    "nodeSelector on a GPU class": {"nodeSelector": {"gpu.nvidia.com/class": "h100"}},
    "required node affinity": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "Exists"}]}]}}}},
    "preferred node affinity": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": ["h100"]}]}}]}}},
    "nodeName": {"nodeName": "gpu-h100-node-1"},
    "a GPU-taint toleration": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
    "a toleration of every taint": {"tolerations": [{"operator": "Exists"}]},
    "a DRA claim": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "h100"}]},
    "pod-level GPU resources": {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
    "a MIG slice": {"containers": [{"name": "m", "image": "i", "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}}}]},
    "an amd.com/gpu": {"containers": [{"name": "m", "image": "i", "resources": {"limits": {"amd.com/gpu": "1"}}}]},
    "a pod priorityClassName": {"priorityClassName": "team-urgent"},
}


@pytest.mark.parametrize("route", sorted(BOUNDARY_ROUTES))
def test_a_bronze_cpu_pod_with_a_route_to_gpu_nodes_is_sent(route: str) -> None:
    request = load("pod-create-bronze-cpu-only.json")
    request["object"]["spec"] |= BOUNDARY_ROUTES[route]
    assert sent_to_tiergate(request, webhooks({"webhook": {"failurePolicy": "Fail"}})), route


@pytest.mark.parametrize("route", sorted(BOUNDARY_ROUTES))
def test_a_bronze_cpu_deployment_with_a_route_to_gpu_nodes_is_sent(route: str) -> None:
    request = load("deployment-create-smart-scheduler-strategy.json")
    del request["object"]["metadata"]["annotations"]
    request["object"]["spec"]["template"]["spec"] |= BOUNDARY_ROUTES[route]
    assert sent_to_tiergate(request, webhooks({"webhook": {"failurePolicy": "Fail"}})), route


@pytest.mark.parametrize("route", sorted(BOUNDARY_ROUTES))
def test_a_jobset_with_a_route_to_gpu_nodes_is_sent(route: str) -> None:
    request = jobset(gpu=False)
    request["object"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] |= BOUNDARY_ROUTES[route]
    assert sent_to_tiergate(request, webhooks({"webhook": {"failurePolicy": "Fail"}})), route


def test_a_job_with_a_priority_class_label_is_sent_to_be_held_to_the_tier_ceiling() -> None:
    request = load("deployment-create-smart-scheduler-strategy.json")
    del request["object"]["metadata"]["annotations"]
    request["object"]["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "gpu-ultra"}
    assert sent_to_tiergate(request, webhooks())


def test_only_the_api_servers_default_tolerations_do_not_send_a_cpu_pod() -> None:
    request = load("pod-create-bronze-cpu-only.json")
    assert request["object"]["spec"]["tolerations"], "the recording carries the default not-ready/unreachable ones"
    assert not sent_to_tiergate(request, webhooks())


def test_a_kube_system_pod_with_a_gpu_selector_is_never_sent() -> None:
    request = load("pod-create-kube-system.json")
    request["object"]["spec"]["nodeSelector"] = {"gpu.nvidia.com/class": "h100"}
    assert not sent_to_tiergate(request, webhooks())


def kinds_fixtures() -> list[pathlib.Path]:
    directory = fixtures_dir().parent / "kinds" / "admission"
    if not directory.is_dir():
        pytest.skip("shared/fixtures/kinds/admission not found beside the repository")
    return sorted(directory.glob("*.json"))


def strip_gpus(value: Any) -> Any:
    """The same object with every GPU request or limit and every Spark `gpu` field removed."""
    if isinstance(value, dict):
        return {
            key: strip_gpus(child)
            for key, child in value.items()
            if not key.startswith("nvidia.com/") and key != "gpu"
        }
    if isinstance(value, list):
        return [strip_gpus(child) for child in value]
    return value


@pytest.mark.parametrize("failure_policy", ["Ignore", "Fail"])
def test_every_recorded_kind_with_gpus_reaches_tiergate(failure_policy: str) -> None:
    configured = webhooks({"webhook": {"failurePolicy": failure_policy}})
    for path in kinds_fixtures():
        request = json.loads(path.read_text())["request"]
        assert sent_to_tiergate(request, configured), path.name


def test_cpu_only_variants_of_the_recorded_kinds_are_not_sent_except_appwrappers() -> None:
    configured = webhooks()
    for path in kinds_fixtures():
        request = json.loads(path.read_text())["request"]
        request["object"] = strip_gpus(request["object"])
        if request.get("oldObject"):
            request["oldObject"] = strip_gpus(request["oldObject"])
        always = request["resource"]["resource"] in {"appwrappers", "sparkapplications"}
        assert sent_to_tiergate(request, configured) is always, path.name


# kube-apiserver refuses a matchCondition expression longer than this many code points ("expression code point
# size exceeds limit"), and with it the whole MutatingWebhookConfiguration: the chart would not install.
API_SERVER_EXPRESSION_LIMIT = 100_000


def test_every_match_condition_fits_the_api_servers_expression_limit() -> None:
    for webhook in webhooks():
        for condition in webhook.get("matchConditions", []):
            size = len(condition["expression"])
            assert size <= API_SERVER_EXPRESSION_LIMIT, f"{webhook['name']} {condition['name']}: {size} code points"
