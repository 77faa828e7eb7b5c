"""Installs, upgrades and uninstalls charts/tiergate with the real Helm library (helm-python-sdk), for the Rust
end-to-end suite `helm_install` (tests/e2e/tests/helm_install.rs), which runs it with the test venv's Python.

    python tests/e2e/helm_release.py install   --release R --namespace N --values '{"replicaCount": 2}'
    python tests/e2e/helm_release.py upgrade   --release R --namespace N --values '{...}'
    python tests/e2e/helm_release.py uninstall --release R --namespace N

The cluster is KUBECONFIG's. Install creates the namespace; install and upgrade wait until the release's objects
are ready (Helm's watcher, bounded by --timeout); uninstall of a release that is not there is a no-op. Prints one JSON line: the action, the release's revision and
status, and the seconds Helm took. A Helm error exits 1 with the error on stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import helm_python as helm

CHART_DIR = pathlib.Path(__file__).resolve().parents[2] / "charts" / "tiergate"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["install", "upgrade", "uninstall"])
    parser.add_argument("--release", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--values", default="{}", help="the values, as a JSON object")
    parser.add_argument("--timeout", type=int, default=300, help="seconds Helm may wait for readiness")
    args = parser.parse_args()
    values = json.loads(args.values)
    config = helm.Config(kubeconfig_path=os.environ.get("KUBECONFIG"), namespace=args.namespace)
    began = time.monotonic()
    try:
        with helm.Chart.load(CHART_DIR) as chart:
            if args.action == "install":
                release = config.install(
                    chart, args.release, values, namespace=args.namespace, create_namespace=True,
                    wait="watcher", timeout=args.timeout,
                )
            elif args.action == "upgrade":
                release = config.upgrade(
                    chart, args.release, values, namespace=args.namespace, wait="watcher", timeout=args.timeout,
                )
            else:
                release = config.uninstall(args.release, wait="watcher", timeout=args.timeout, ignore_not_found=True)
    except helm.HelmError as error:
        print(f"helm {args.action} {args.release} failed: {error}", file=sys.stderr)
        return 1
    finally:
        config.close()
    summary = release.get("release", release) if isinstance(release, dict) else {}
    info = summary.get("info", {}) if isinstance(summary, dict) else {}
    print(json.dumps({
        "action": args.action,
        "revision": summary.get("version") if isinstance(summary, dict) else None,
        "status": info.get("status") if isinstance(info, dict) else None,
        "seconds": round(time.monotonic() - began, 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
