#!/usr/bin/env python3
"""Concurrent-large-body attack on a loopback `tiergate webhook --offline`, with the server's peak RSS.

Starts the release binary (or BIN) on 127.0.0.1, opens N TLS connections at once, each POSTing one ~3.9 MiB
AdmissionReview whose Job carries tens of thousands of env entries (many small JSON objects: the costliest shape
to parse), and samples the server's VmRSS every 20 ms until every answer is in. Prints one line per run:

    perf/body_flood.py 120 300                       # default flags
    perf/body_flood.py --server-args="--max-inflight-bytes=4095Mi --max-inflight-requests=100000" 120 300
    perf/body_flood.py --shape string 120 300         # one large annotation instead of many small objects

Bounded: one request per connection, 120 s per run, loopback only; the server is stopped on exit.
"""

import argparse
import asyncio
import json
import os
import pathlib
import shlex
import ssl
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = next(
    p for p in (ROOT / "../shared/fixtures/admission", ROOT / "../../shared/fixtures/admission") if p.is_dir()
)
TARGET_BYTES = int(3.9 * 1024 * 1024)


def build_body(shape: str) -> bytes:
    """`objects`: tens of thousands of small env objects (the costliest to parse and copy); `string`: one large
    annotation value (the cheapest); `array`: about a million one-letter `args` (many small strings, no objects)."""
    review = json.loads((FIXTURES / "job-create-bronze-gpu-scored.json").read_text())
    base = len(json.dumps(review, separators=(",", ":")))
    if shape == "array":
        container = review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]
        container["args"] = ["a"] * ((TARGET_BYTES - base) // 4)
    elif shape == "string":
        review["request"]["object"]["metadata"].setdefault("annotations", {})["example.com/blob"] = "x" * (
            TARGET_BYTES - base - 40
        )
    else:
        container = review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]
        entry = len(json.dumps({"name": "E000000", "value": "v"}, separators=(",", ":"))) + 1
        count = (TARGET_BYTES - base) // entry
        container["env"] = [{"name": f"E{i:06d}", "value": "v"} for i in range(count)]
    return json.dumps(review, separators=(",", ":")).encode()


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def one(port: int, body: bytes, context: ssl.SSLContext) -> str:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        head = (
            f"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        writer.write(head + body)
        await writer.drain()
        status = (await reader.readline()).split()
        writer.close()
        return status[1].decode() if len(status) > 1 else "closed"
    except (ConnectionError, ssl.SSLError, OSError) as error:
        return type(error).__name__


async def flood(port: int, body: bytes, concurrency: int) -> dict:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    results = await asyncio.wait_for(
        asyncio.gather(*(one(port, body, context) for _ in range(concurrency))), timeout=120
    )
    counts: dict = {}
    for result in results:
        counts[result] = counts.get(result, 0) + 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("concurrency", type=int, nargs="+")
    parser.add_argument("--server-args", default="", help="extra flags for `tiergate webhook`")
    parser.add_argument("--port", type=int, default=18643)
    parser.add_argument("--shape", choices=["objects", "string", "array"], default="objects", help="what fills the body")
    args = parser.parse_args()
    binary = os.environ.get("BIN", str(ROOT / "target/release/tiergate"))
    body = build_body(args.shape)
    with tempfile.TemporaryDirectory() as work:
        log = open(pathlib.Path(work) / "server.log", "w")
        command = [
            binary, "webhook", "--offline", "--policy", str(ROOT / "samples/kubenexus/policy.yaml"),
            "--cluster", str(ROOT / "samples/kubenexus/cluster.yaml"),
            "--listen", f"127.0.0.1:{args.port}", "--admin-listen", f"127.0.0.1:{args.port + 1}",
            *shlex.split(args.server_args),
        ]
        server = subprocess.Popen(command, stdout=log, stderr=log, env={**os.environ, "RUST_LOG": "error"})
        try:
            time.sleep(1.5)
            print(f"body {len(body)} bytes ({args.shape}); server flags: {args.server_args or 'defaults'}")
            for concurrency in args.concurrency:
                idle = rss_kib(server.pid)
                peak = [idle]
                done = threading.Event()

                def sample() -> None:
                    while not done.is_set():
                        peak[0] = max(peak[0], rss_kib(server.pid))
                        time.sleep(0.02)

                sampler = threading.Thread(target=sample)
                sampler.start()
                started = time.monotonic()
                counts = asyncio.run(flood(args.port, body, concurrency))
                took = time.monotonic() - started
                done.set()
                sampler.join()
                print(
                    f"{concurrency} concurrent: peak RSS {peak[0] / 1024:.0f} MiB (before {idle / 1024:.0f} MiB), "
                    f"answers {counts}, {took:.1f} s"
                )
                time.sleep(1)
        finally:
            server.terminate()
            server.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
