"""A scheduled scan end to end in-process: claim, engine through the guard, store, alert."""

from __future__ import annotations

import socket

import pytest
from django.core import mail

from accounts import encryption
from scans.grader.demo_server import TargetConfig, running_target
from scans.models import CheckResult, Scan, ScanStatus
from scans.running import worker as scan_worker
from tests.conftest import free_port
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db

FAST = TargetConfig(ttft_ms=5, itl_ms=1, tokens=8)


def _queued(endpoint) -> Scan:
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")
    return scan_worker.claim(scan.pk)


def test_a_claimed_scan_runs_and_stores_its_report_and_check_rows(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target(FAST) as (host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1",
                                 levels=[1, 2], requests_per_level=3)
        scan = _queued(endpoint)
        assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    assert scan.status == ScanStatus.SUCCEEDED
    assert scan.grade == scan.report["score"]["grade"]
    assert scan.scoring_version == "1.0.0" and not scan.provisional
    assert [lv["concurrency"] for lv in scan.report["levels"]] == [1, 2]
    rows = CheckResult.dangerously_unscoped.filter(scan=scan)
    assert rows.count() == len(scan.report["checks"])
    assert rows.get(check_id="metrics_endpoint").value == 1.0


def test_a_second_claim_of_the_same_scan_gets_nothing(world):
    endpoint = make_endpoint(world.team)
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")
    assert scan_worker.claim(scan.pk) is not None
    assert scan_worker.claim(scan.pk) is None


def test_an_unreachable_target_is_a_finished_scan_stored_down(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    endpoint = make_endpoint(world.team, base_url=f"http://127.0.0.1:{free_port()}/v1",
                             levels=[1], requests_per_level=2)
    scan = _queued(endpoint)
    assert scan_worker.execute(scan) == "succeeded"
    scan.refresh_from_db()
    # report.json keeps the scoring spec's grade; the row says down, with no letter
    assert scan.report["score"]["grade"] in {"F", "insufficient_evidence"}
    assert scan.down and scan.grade == "" and scan.points is None
    # The preflight probe found nobody there, so no load followed (DECISIONS.md, "Preflight").
    assert scan.report["levels"][0]["failed"] == {"transport_error": 1}


class _CountingServer:
    """A raw loopback socket that counts connection attempts (it must see none)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def accepted(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


def test_a_refused_address_is_an_errored_scan_and_nothing_is_sent(world, settings):
    settings.OUTBOUND_ALLOW = []  # loopback is internal too
    server = _CountingServer()
    endpoint = make_endpoint(world.team, base_url=f"http://localhost:{server.port}/v1",
                             levels=[1], requests_per_level=2)
    scan = _queued(endpoint)
    assert scan_worker.execute(scan) == "errored"
    scan.refresh_from_db()
    assert scan.status == ScanStatus.ERRORED
    # The refusal says only that the address is out of reach, never which range it fell in.
    assert "not reachable from this site" in scan.error_reason.lower()
    assert "loopback" not in scan.error_reason
    assert server.accepted() == 0


def test_a_private_address_is_refused(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    endpoint = make_endpoint(world.team, base_url="http://10.20.30.40:8000/v1")
    scan = _queued(endpoint)
    assert scan_worker.execute(scan) == "errored"
    scan.refresh_from_db()
    assert "not reachable from this site" in scan.error_reason.lower()
    assert "private" not in scan.error_reason


def test_the_prompt_sample_feeds_repeat_share_and_never_reaches_the_target(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    sample = "the secret prompt alpha\nthe secret prompt alpha\nanother one\nfourth\n"
    with running_target(FAST) as (host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1",
                                 levels=[1], requests_per_level=2,
                                 prompt_sample_encrypted=encryption.encrypt(sample))
        scan = _queued(endpoint)
        scan_worker.execute(scan)
    scan.refresh_from_db()
    check = {c["id"]: c for c in scan.report["checks"]}["repeat_prompt_share"]
    assert check["value"] == 0.25
    assert "secret prompt" not in str(scan.report)


def test_an_errored_streak_alerts_once_and_recovery_is_announced(
    world, settings, django_capture_on_commit_callbacks, eager_tasks
):
    settings.OUTBOUND_ALLOW = ["loopback"]
    endpoint = make_endpoint(world.team, base_url="http://10.0.0.9/v1", alert_after_errors=2,
                             levels=[1], requests_per_level=2, slo_grade_floor="F")
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(3):
            scan_worker.execute(_queued(endpoint))
    alerts = [m for m in mail.outbox if m.subject.endswith("erroring")]
    assert len(alerts) == 1
    assert "2 scans in a row errored" in alerts[0].body
    assert world.owner.email in alerts[0].to and world.admin.email in alerts[0].to
    assert world.viewer.email not in alerts[0].to

    with running_target(FAST) as (host, port):
        type(endpoint).dangerously_unscoped.filter(pk=endpoint.pk).update(
            base_url=f"http://{host}:{port}/v1")
        with django_capture_on_commit_callbacks(execute=True):
            scan_worker.execute(_queued(endpoint))
    assert [m.subject for m in mail.outbox if "recovered" in m.subject] == [
        f"[Tokvera] {endpoint.name}: erroring recovered"]


def test_falling_below_the_floor_alerts_once_per_change(
    world, settings, django_capture_on_commit_callbacks, eager_tasks
):
    from tests.helpers.factories import make_scan

    endpoint = make_endpoint(world.team, slo_grade_floor="B")
    bad = make_report_with_error_rate(0.3)
    with django_capture_on_commit_callbacks(execute=True):
        make_scan(endpoint, bad)  # one bad scan: not news until the next agrees
        make_scan(endpoint, bad)
        make_scan(endpoint, bad)  # still below: nothing new
        make_scan(endpoint)
        make_scan(endpoint)  # two good scans in a row: recovery
    subjects = [m.subject for m in mail.outbox]
    assert subjects == [f"[Tokvera] {endpoint.name}: below floor",
                        f"[Tokvera] {endpoint.name}: floor recovered"]


def make_report_with_error_rate(rate: float) -> dict:
    from scans.grader.scoring import CheckValue
    from tests.helpers.factories import GOOD_VALUES, make_report

    return make_report({**GOOD_VALUES, "error_rate": CheckValue(rate)})
