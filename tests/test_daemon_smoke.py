"""`tiergate run` against a small fake API server: caches sync, the Lease is taken, the sample policy converges
with server-side apply in kind order, /readyz and /metrics answer, SIGTERM drains and releases the Lease, and a
restart makes no writes but Lease renewals. No cluster needed; see docs/reconcile.md."""
import json
import pathlib
import signal
import subprocess

import pytest
import yaml

from daemon_harness import KINDS, Daemon, FakeApi, http_get, wait_until


@pytest.fixture(scope="module")
def binary(repo: pathlib.Path) -> pathlib.Path:
    try:
        subprocess.run(["cargo", "build", "-q", "-p", "tiergate", "--bin", "tiergate"], cwd=repo, check=True)
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        pytest.skip(f"skipped: cannot build the tiergate binary: {error}")
    return repo / "target" / "debug" / "tiergate"


def test_run_converges_drains_on_sigterm_and_restarts_without_writes(binary, tmp_path, repo) -> None:
    policy = yaml.safe_load((repo / "samples" / "kubenexus" / "policy.yaml").read_text())
    policy["metadata"].update({"uid": "policy-uid", "generation": 1, "resourceVersion": "3"})
    api = FakeApi(policy)
    daemons: list[Daemon] = []
    try:
        first = Daemon(binary, api, tmp_path)
        daemons.append(first)
        wait_until("/readyz 200", lambda: http_get(first.admin + "/readyz")[0] == 200)
        wait_until("the status write", lambda: any(w[1].endswith("/status") for w in api.non_lease_writes()))
        applies = [w for w in api.non_lease_writes() if w[0] == "PATCH" and not w[1].endswith("/status")]
        kinds = [next(i for i, (name, _, _) in enumerate(KINDS) if f"/{name}/" in w[1]) for w in applies]
        assert kinds == sorted(kinds), "objects are applied flavors first, LocalQueues last"
        assert sum(1 for w in applies if "/localqueues/" in w[1]) == 5
        assert all("fieldManager=tiergate" in w[2] and "force=true" in w[2] for w in applies)
        assert "null" not in json.dumps([w[3] for w in applies])
        assert first.metric("tiergate_lease_held") == 1

        first.process.send_signal(signal.SIGTERM)
        status, reason = wait_until("/readyz to turn 503", lambda: (lambda r: r if r[0] == 503 else None)(
            http_get(first.admin + "/readyz")))
        assert "draining" in reason
        assert first.process.wait(timeout=30) == 0
        first.log.close()
        assert api.lease["spec"].get("holderIdentity") is None, "the Lease is released on shutdown"

        before = len(api.writes)
        second = Daemon(binary, api, tmp_path)
        daemons.append(second)
        wait_until("the restarted daemon to reconcile",
                   lambda: http_get(second.admin + "/readyz")[0] == 200 and second.metric("tiergate_owned_objects") > 0)
        assert api.non_lease_writes(before) == []
        assert second.metric("tiergate_api_writes_total") == 0
        assert second.stop() == 0
    finally:
        for daemon in daemons:
            daemon.kill()
        api.close()
