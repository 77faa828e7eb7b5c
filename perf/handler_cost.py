#!/usr/bin/env python3
"""What tiergate's webhook server itself spends on one review, in CPU instructions (issue 52): the release binary's
`tiergate webhook --offline` (the sample policy and cluster) under valgrind's callgrind, sent the same review over
one keep-alive HTTPS connection, then the instructions per review of the request handler and of each step it takes
(reading the limits' structure cost, parsing, deciding, folding the patch, encoding the answer).

Instruction counts, unlike times, do not move with the load of a shared machine, so two builds can be compared
one after the other: `--binary OLD` measures another build. The review is the Job of perf/create_cost.py (one GPU,
30 env vars) in tier bronze's namespace, as kube-apiserver sends it on a create: compact JSON, with the
`managedFields` the API server adds before admission.

  cargo build --release -p tiergate --bin tiergate
  python3 perf/handler_cost.py                    # --reviews 500, --binary target/release/tiergate

Needs valgrind (callgrind_annotate) and ../shared/fixtures. Python's standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "admission/job-create-bronze-gpu-scored.json"
# The handler, then its steps (callgrind's names for them, inclusive of what they call).
STEPS = {
    "handler": r"<F as axum::handler::Handler<\(M,T1,T2\),S>>::call::\{\{closure\}\}",
    "structure_cost": r"tiergate::admission::limits::structure_cost",
    "parse_review": r"tiergate::admission::review::parse_review",
    "decide_review": r"tiergate::admission::review::decide_review::\{\{closure\}\}",
    "fold_for_api_server": r"tiergate_core::admission::decision::Decision::fold_for_api_server",
    "review_object (before 2026-11-29)": r"tiergate_core::admission::fold::review_object",
    "Decision::response": r"tiergate_core::admission::decision::Decision::response",
    "encode_review": r"tiergate::admission::review::encode_review",
}


def fixtures() -> Path:
    for candidate in (ROOT.parent / "shared/fixtures", ROOT.parent.parent / "shared/fixtures"):
        if candidate.is_dir():
            return candidate
    raise SystemExit("handler_cost: ../shared/fixtures not found")


def review_body() -> bytes:
    review = json.loads((fixtures() / FIXTURE).read_text())
    job = review["request"]["object"]
    names = [f"VAR_{index:02}" for index in range(30)]
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": name, "value": "x" * 40} for name in names]
    env_fields = {f'k:{{"name":"{name}"}}': {".": {}, "f:name": {}, "f:value": {}} for name in names}
    container = {'k:{"name":"trainer"}': {".": {}, "f:env": env_fields}}
    job["metadata"]["managedFields"] = [{
        "manager": "kubectl-create", "operation": "Update", "apiVersion": "batch/v1", "time": "2026-11-29T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": container}}}},
    }]
    return json.dumps(review, separators=(",", ":")).encode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def send(port: int, body: bytes, reviews: int) -> None:
    """`reviews` POSTs of `body` over one keep-alive TLS connection, each answer read to its end."""
    head = (f"POST /mutate?timeout=5s HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, */*\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port))) as connection:
        answers = connection.makefile("rb")
        for _ in range(reviews):
            connection.sendall(head + body)
            length = 0
            while (line := answers.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            answer = answers.read(length)
            if b'"patch"' not in answer:
                raise SystemExit(f"handler_cost: the review was not mutated: {answer[:300]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", type=Path, default=ROOT / "target/release/tiergate")
    parser.add_argument("--reviews", type=int, default=500)
    arguments = parser.parse_args()
    body = review_body()
    port, admin = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="tiergate-handler-cost-") as work:
        profile = Path(work) / "callgrind.out"
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}", str(arguments.binary), "webhook",
             "--offline", "--policy", str(ROOT / "samples/kubenexus/policy.yaml"),
             "--cluster", str(ROOT / "samples/kubenexus/cluster.yaml"),
             "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read()
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("handler_cost: the webhook under callgrind did not start")
                    time.sleep(1)
            send(port, body, 1 + arguments.reviews)
        finally:
            server.send_signal(signal.SIGINT)  # stops at once (SIGTERM drains first); callgrind then writes
            server.wait(timeout=120)
        annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(profile)], capture_output=True,
                                   text=True, check=True).stdout
    print(f"{arguments.binary}: {arguments.reviews} reviews of {len(body)} bytes (plus one to warm up); "
          "instructions per review")
    print("| step | instructions |\n|---|---|")
    for step, pattern in STEPS.items():
        found = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\?\?\?:" + pattern + r" \[", annotated, re.MULTILINE)
        count = f"{int(found.group(1).replace(',', '')) // (1 + arguments.reviews):,}" if found else "not called"
        print(f"| {step} | {count} |")


if __name__ == "__main__":
    main()
