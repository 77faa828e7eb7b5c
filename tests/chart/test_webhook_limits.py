"""The chart passes the API server's timeout and a memory-derived in-flight budget to the binary, so the webhook's
deadlines and 429 point always agree with the MutatingWebhookConfiguration and the container's memory limit."""
from __future__ import annotations

from typing import Any

import pytest

from chart_helpers import only, render

MIB = 1024 * 1024


def run_args(objects: list[dict[str, Any]]) -> dict[str, str]:
    args = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    return dict(arg.partition("=")[::2] for arg in args[1:])


def quantity_bytes(text: str) -> int:
    for suffix, scale in (("Gi", 1024 * MIB), ("Mi", MIB), ("Ki", 1024)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * scale
    return int(text)


@pytest.mark.parametrize("timeout", [1, 5, 10, 30])
def test_the_binary_gets_the_timeout_every_webhook_is_registered_with(timeout: int) -> None:
    objects = render({"webhook": {"timeoutSeconds": timeout}})
    flag = int(run_args(objects)["--webhook-timeout-seconds"])
    for webhook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert webhook["timeoutSeconds"] == flag


@pytest.mark.parametrize(
    ("memory", "budget"),
    [("256Mi", "32Mi"), ("512Mi", "83Mi"), ("1Gi", "185Mi"), ("268435456", "32Mi")],
)
def test_the_in_flight_budget_is_derived_from_the_memory_limit(memory: str, budget: str) -> None:
    values = {"resources": {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"cpu": "1", "memory": memory}}}
    args = run_args(render(values))
    assert args["--max-inflight-bytes"] == budget
    # baseline + budget x measured amplification stays under the limit.
    assert 96 * MIB + quantity_bytes(budget) * 5 <= quantity_bytes(memory)
    assert args["--max-inflight-requests"] == "128"


def test_the_default_chart_budget_fits_its_own_memory_limit() -> None:
    objects = render()
    limit = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    budget = quantity_bytes(run_args(objects)["--max-inflight-bytes"])
    assert budget >= 4 * MIB + 16 * 1024, "the budget must hold one largest review"
    assert 96 * MIB + budget * 5 <= quantity_bytes(limit)


def test_an_explicit_budget_wins_over_the_derived_one() -> None:
    args = run_args(render({"webhook": {"maxInflightBytes": "64Mi", "maxInflightRequests": 32}}))
    assert (args["--max-inflight-bytes"], args["--max-inflight-requests"]) == ("64Mi", "32")


def test_a_memory_limit_too_small_for_one_review_is_refused_naming_the_value() -> None:
    values = {"resources": {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"cpu": "1", "memory": "100Mi"}}}
    with pytest.raises(Exception) as error:
        render(values)
    assert "resources.limits.memory 100Mi" in str(error.value)
    assert "webhook.maxInflightBytes" in str(error.value)


def test_without_a_memory_limit_the_binarys_default_budget_is_used() -> None:
    objects = render({"resources": {"limits": None}})
    assert "limits" not in only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert run_args(objects)["--max-inflight-bytes"] == "32Mi"
