"""Cancelling a scan: the row says cancelled at once, the worker running it stops
within about a second and stores nothing, no alert goes out, and the scan page's live figures
reach only the team. In-process worker (scans.running.worker.execute in a thread, as a pool thread runs
it) against `tokvera target` on loopback; the Celery worker and the browser are in
tests/scans/pages/test_live_progress_browser.py."""

from __future__ import annotations

import threading

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.history import state
from scans.models import CheckResult, OriginLock, Scan, ScanStatus, ScanTrigger
from scans.running import dispatch
from scans.running import live_progress as live
from scans.running import worker as scan_worker
from tests.helpers.factories import make_endpoint, make_scan
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = TargetConfig(ttft_ms=200, itl_ms=1, tokens=4)  # 200 requests: about 40 s if not stopped


def _running_in_a_thread(endpoint, trigger=ScanTrigger.MANUAL):
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=trigger)
    claimed = scan_worker.claim(scan.pk)
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(scan_worker.execute(claimed)))
    thread.start()
    wait_for(
        lambda: (live.read(scan.public_id) or {}).get("requests_done", 0) >= 2,
        30,
        "the worker's first figures",
    )
    return scan, thread, outcome


def _slow_endpoint(team, port, **fields):
    return make_endpoint(
        team,
        base_url=f"http://127.0.0.1:{port}/v1",
        model=MODEL_ID,
        levels=[1],
        requests_per_level=200,
        max_tokens=4,
        timeout_s=30,
        alert_after_errors=1,
        **fields,
    )


def test_a_cancelled_running_scan_stops_stores_nothing_and_alerts_no_one(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with running_target(SLOW) as (_, port):
        endpoint = _slow_endpoint(world.team, port)
        scan, thread, outcome = _running_in_a_thread(endpoint)
        dispatch.cancel(Scan.dangerously_unscoped.get(pk=scan.pk), by="alice@example.test")
        assert Scan.dangerously_unscoped.get(pk=scan.pk).status == ScanStatus.CANCELLED
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert outcome == ["cancelled"]
    scan.refresh_from_db()
    assert scan.status == ScanStatus.CANCELLED
    assert scan.error_reason.startswith("Cancelled by alice@example.test at ")
    assert scan.report is None and scan.grade == "" and scan.points is None
    assert not CheckResult.dangerously_unscoped.filter(scan=scan).exists()
    assert not OriginLock.objects.exists()  # the origin is free for the next scan
    assert live.read(scan.public_id) is None  # its figures are gone with it
    assert mail.outbox == []
    assert state.states_for([endpoint])[endpoint.pk].state == "not_scanned"  # not a measurement


def test_without_the_cache_flag_the_heartbeat_still_stops_a_cancelled_scan(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    settings.SCAN_HEARTBEAT_S = 1
    with running_target(SLOW) as (_, port):
        scan, thread, outcome = _running_in_a_thread(_slow_endpoint(world.team, port))
        # The row changes but the cache never hears of it (as when the cache is unreachable).
        Scan.dangerously_unscoped.filter(pk=scan.pk).update(
            status=ScanStatus.CANCELLED, finished_at=timezone.now()
        )
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert outcome == ["cancelled"]
    assert Scan.dangerously_unscoped.get(pk=scan.pk).report is None


def test_a_queued_manual_scan_cancelled_is_never_run(world):
    endpoint = make_endpoint(world.team)
    scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.MANUAL)
    dispatch.cancel(scan, by="alice@example.test")
    assert scan_worker.run_queued(scan.pk) == "not queued"
    assert Scan.dangerously_unscoped.get(pk=scan.pk).status == ScanStatus.CANCELLED


def test_scheduled_and_finished_scans_cannot_be_cancelled(world):
    endpoint = make_endpoint(world.team)
    scheduled = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger=ScanTrigger.SCHEDULE)
    with pytest.raises(dispatch.NotCancellable, match="scheduled scans run to their end"):
        dispatch.cancel(scheduled, by="alice@example.test")
    finished = make_scan(endpoint, trigger=ScanTrigger.MANUAL)
    with pytest.raises(dispatch.NotCancellable, match="already finished"):
        dispatch.cancel(finished, by="alice@example.test")
    assert Scan.dangerously_unscoped.get(pk=scheduled.pk).status == ScanStatus.QUEUED
    assert Scan.dangerously_unscoped.get(pk=finished.pk).status == ScanStatus.SUCCEEDED


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_scan_page_offers_cancel_to_writers_of_a_manual_scan_only(world):
    endpoint = make_endpoint(world.team)
    manual = Scan.dangerously_unscoped.create(
        endpoint=endpoint, trigger=ScanTrigger.MANUAL, status=ScanStatus.RUNNING, started_at=timezone.now()
    )
    scheduled = Scan.dangerously_unscoped.create(
        endpoint=endpoint, trigger=ScanTrigger.SCHEDULE, status=ScanStatus.RUNNING, started_at=timezone.now()
    )
    cancel = reverse("scan-cancel", args=[manual.public_id])

    def page(user, scan):
        return _client(user).get(reverse("scan-detail", args=[scan.public_id])).content.decode()

    assert cancel in page(world.member, manual)
    assert cancel not in page(world.viewer, manual)  # read-only: no button (and 403 on POST)
    assert "data-cancel" not in page(world.owner, scheduled)
    response = _client(world.owner).post(reverse("scan-cancel", args=[scheduled.public_id]), follow=True)
    assert "scheduled scans run to their end" in response.content.decode()
    assert Scan.dangerously_unscoped.get(pk=scheduled.pk).status == ScanStatus.RUNNING
    body = _client(world.owner).post(cancel, follow=True).content.decode()
    assert "Scan cancelled" in body and "Cancelled by " in body
    assert 'data-field="status">Cancelled<' in body and "data-grade" not in body


def test_the_workers_figures_reach_the_team_and_no_one_else(world):
    endpoint = make_endpoint(world.team)
    scan = Scan.dangerously_unscoped.create(
        endpoint=endpoint, trigger=ScanTrigger.MANUAL, status=ScanStatus.RUNNING, started_at=timezone.now()
    )
    live.publish(
        scan.public_id,
        {
            "phase": "level",
            "concurrency": 4,
            "rate_per_s": None,
            "level_number": 2,
            "levels_planned": 2,
            "completed": 3,
            "total": 8,
            "requests_done": 7,
            "ttft_p50_ms": 150.0,
            "output_per_s": 90.0,
            "output_unit": "tokens/s",
            "eta_s": 4.0,
            "elapsed_s": 1.0,
        },
    )
    url = reverse("scan-status", args=[scan.public_id])

    mine = _client(world.viewer).get(url).json()
    assert mine["live"]["requests_done"] == 7
    assert mine["live_text"].startswith("Level 2 of 2, concurrency 4: 3 of 8 requests")
    assert mine["cancellable"] is True
    outsider = _client(world.outsider).get(url)
    assert outsider.status_code == 404 and "requests" not in outsider.content.decode()
    page = _client(world.owner).get(reverse("scan-detail", args=[scan.public_id])).content.decode()
    assert "3 of 8 requests" in page  # the first paint already has them
