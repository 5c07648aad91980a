"""POST /api/v1/scans/{id}/cancel: the scan page's Cancel button for API clients,
with the same rules. A real Celery worker runs a slow scan of `tokvera target` on loopback and
stops when the API cancels it; who may cancel which scan, and that a retry changes nothing."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.models import OriginLock, Scan, ScanStatus, ScanTrigger
from scans.running import live_progress as live
from tests.conftest import bearer
from tests.helpers import workers
from tests.helpers.factories import make_endpoint, make_scan
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop
from tokvera_site.celery import app

pytestmark = pytest.mark.django_db(transaction=True)


def _cancel(api, scan, token=None):
    url = reverse("api-scan-cancel", kwargs={"public_id": scan.public_id})
    return api.post(url, **(bearer(token) if token else {}))


def _scan(scan) -> Scan:
    return Scan.dangerously_unscoped.get(pk=scan.pk)


@pytest.fixture
def scan_worker_process(tmp_path):
    app.control.purge()
    worker = workers.start("--concurrency", "1", log=tmp_path / "worker.log")
    yield worker
    stop(worker)
    app.control.purge()


@pytest.mark.redis
def test_a_running_api_scan_is_cancelled_through_the_api_and_its_worker_stops(
    world, api, scan_worker_process
):
    # 100 requests of about 0.2 s at concurrency 1, then 100 at 2: about 30 s if not stopped.
    with running_target(TargetConfig(ttft_ms=200, itl_ms=1, tokens=4)) as (_, port):
        endpoint = make_endpoint(world.team, base_url=f"http://127.0.0.1:{port}/v1", model=MODEL_ID,
                                 levels=[1, 2], requests_per_level=100, max_tokens=4, timeout_s=30)
        started = api.post(reverse("api-endpoint-scans", kwargs={"public_id": endpoint.public_id}),
                           **bearer(world.read_write_token))
        assert started.status_code == 202, started.json()
        scan = Scan.dangerously_unscoped.get(public_id=started.json()["id"])
        assert scan.trigger == ScanTrigger.API
        wait_for(lambda: (live.read(scan.public_id) or {}).get("requests_done", 0) >= 2, 60,
                 "the worker's first figures")

        # While it runs, its page's figures say how long the whole scan has left (both levels).
        page = Client()
        page.force_login(world.member)
        figures = page.get(reverse("scan-status", kwargs={"public_id": scan.public_id})).json()
        assert figures["live"]["scan_eta_s"] > figures["live"]["eta_s"] > 0
        assert " left in the scan" in figures["live_text"]

        # A read-only token may not; another team's token does not even see the scan.
        refused = _cancel(api, scan, world.read_only_token)
        assert refused.status_code == 403
        assert _cancel(api, scan, world.other_team_token).status_code == 404
        assert _scan(scan).status == ScanStatus.RUNNING

        cancelled = _cancel(api, scan, world.read_write_token)
        assert cancelled.status_code == 200, cancelled.json()
        body = cancelled.json()
        assert body["status"] == "cancelled" and body["grade"] == "" and body["points"] is None
        assert body["error_reason"].startswith("Cancelled by API token ")

        # The worker lets go within seconds (the origin is free), storing nothing.
        wait_for(lambda: not OriginLock.objects.exists(), 30, "the cancelled scan's origin lock")
        wait_for(lambda: live.read(scan.public_id) is None, 30, "its live figures gone")

        # Asked again, nothing changes: same answer, same record of who cancelled.
        again = _cancel(api, scan, world.read_write_token)
        assert again.status_code == 200 and again.json() == body
    stored = _scan(scan)
    assert stored.status == ScanStatus.CANCELLED
    assert stored.report is None and stored.grade == "" and stored.points is None


def test_a_queued_manual_scan_is_cancelled_by_a_member_but_not_by_a_viewer(world, api):
    endpoint = make_endpoint(world.team)
    # Queued and never sent: no worker can take it meanwhile.
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL)

    api.force_login(world.viewer)
    assert _cancel(api, scan).status_code == 403
    api.force_login(world.outsider)
    assert _cancel(api, scan).status_code == 404
    assert _scan(scan).status == ScanStatus.QUEUED

    api.force_login(world.member)
    answer = _cancel(api, scan)
    assert answer.status_code == 200, answer.json()
    assert answer.json()["status"] == "cancelled"
    assert _scan(scan).error_reason.startswith(f"Cancelled by {world.member.email} at ")
    # Read-only callers are still refused once it is cancelled: a retry is a write too.
    assert _cancel(api, scan, world.read_only_token).status_code == 403


def test_scheduled_and_finished_scans_are_not_cancelled(world, api):
    endpoint = make_endpoint(world.team)
    scheduled = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE,
                                                 status=ScanStatus.RUNNING)
    finished = make_scan(endpoint, trigger=ScanTrigger.MANUAL)

    answer = _cancel(api, scheduled, world.read_write_token)
    assert answer.status_code == 409
    assert "scheduled scans run to their end" in answer.json()["detail"]
    assert _scan(scheduled).status == ScanStatus.RUNNING

    answer = _cancel(api, finished, world.read_write_token)
    assert answer.status_code == 409
    assert answer.json() == {"detail": "The scan had already finished, so there was nothing to "
                                       "cancel.", "status": "succeeded"}
    assert _scan(finished).status == ScanStatus.SUCCEEDED and _scan(finished).grade
