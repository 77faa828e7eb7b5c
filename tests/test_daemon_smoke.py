"""`tiergate run` against a small fake API server: caches sync, the Lease is taken, the sample policy converges
with server-side apply in kind order, /readyz and /metrics answer, SIGTERM drains and releases the Lease, and a
restart makes no writes but Lease renewals; and issue 32's states (a missing Lease namespace, a served policy that
does not exist) are said in /readyz, the metrics and the log. No cluster needed; see docs/contributing.md."""
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
        assert kinds == sorted(kinds), "objects are applied the in-server gate first, then topologies, then LocalQueues last"
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


def test_a_missing_lease_namespace_is_said_in_readyz_metrics_and_log_until_create_lease_namespace_creates_it(
        binary, tmp_path, repo) -> None:
    policy = yaml.safe_load((repo / "samples" / "kubenexus" / "policy.yaml").read_text())
    api = FakeApi(policy)
    api.lease_namespace_exists = False
    daemons: list[Daemon] = []
    try:
        blocked = Daemon(binary, api, tmp_path)
        daemons.append(blocked)
        # Ready (the webhook still serves from synced caches), and the body says why nothing is reconciled.
        _, body = wait_until("/readyz to list the blocker", lambda: (lambda r: r if r[0] == 200 and "lease_namespace"
                                                                      in r[1] else None)(http_get(blocked.admin + "/readyz")))
        assert "kubectl create namespace tiergate-system" in body and "--create-lease-namespace" in body, body
        assert blocked.metric('tiergate_blocked{reason="lease_namespace_missing"}') == 1
        assert api.non_lease_writes() == [], "nothing is written without the Lease"
        assert blocked.stop() == 0
        log = blocked.log_path.read_text()
        assert "ERROR" in log and "blocked: no replica can lead" in log, log[-2000:]

        created = Daemon(binary, api, tmp_path, extra_args=("--create-lease-namespace",))
        daemons.append(created)
        wait_until("the namespace, the Lease and the reconcile", lambda: created.metric("tiergate_lease_held") == 1
                   and created.metric("tiergate_owned_objects") > 0)
        assert any(write[1] == "/api/v1/namespaces" for write in api.writes)
        assert http_get(created.admin + "/readyz") == (200, "ok")
        assert created.stop() == 0
    finally:
        for daemon in daemons:
            daemon.kill()
        api.close()


def test_without_policy_name_the_only_policy_is_served_and_a_named_missing_one_is_said(binary, tmp_path, repo) -> None:
    policy = yaml.safe_load((repo / "samples" / "kubenexus" / "policy.yaml").read_text())
    policy["metadata"].update({"name": "fleet", "uid": "policy-uid", "generation": 1, "resourceVersion": "3"})
    api = FakeApi(policy)
    daemons: list[Daemon] = []
    try:
        named = Daemon(binary, api, tmp_path, extra_args=("--policy-name", "default"))
        daemons.append(named)
        _, body = wait_until("/readyz to name the missing policy", lambda: (lambda r: r if "policy_not_found" in r[1]
                                                                             else None)(http_get(named.admin + "/readyz")))
        assert 'no tiergate instance serves TierPolicy "fleet"' in body, body
        assert "--policy-name fleet" in body, body
        assert not any(write[1].endswith("/status") for write in api.non_lease_writes()), "no write to fleet"
        assert named.stop() == 0

        only = Daemon(binary, api, tmp_path)
        daemons.append(only)
        wait_until("the only policy's status", lambda: any(w[1].endswith("/tierpolicies/fleet/status")
                                                           for w in api.non_lease_writes()))
        conditions = {c["type"]: c["status"] for c in api.policy["status"]["conditions"]}
        assert conditions.get("Served") == "True", conditions
        log = only.log_path.read_text()
        assert "serving TierPolicy" in log and "it is the only TierPolicy" in log, log[-2000:]
        assert only.stop() == 0
    finally:
        for daemon in daemons:
            daemon.kill()
        api.close()
