"""A worker SIGKILLed mid-scan loses only its own scan: the two scans waiting for the same
origin are rows the beat sends again, not messages the dead worker held; the reaper errors the
killed scan with the true reason (its heartbeat stopped) and frees the origin. Real Celery
workers on Redis, the real database, `tokvera target` on loopback; the heartbeat and reaper
thresholds are sped up through settings (tests/helpers/fast_scan_settings.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.utils import timezone

from scans.models import OriginLock, Scan, ScanStatus
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.conftest import free_port
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.paths import ROOT
from tests.helpers.processes import accepts, wait_for
from tests.helpers.workers import stop
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_thresholds(settings):
    from tests.helpers import fast_scan_settings as fast

    for name in ("SCAN_HEARTBEAT_S", "SCAN_STALE_AFTER_S", "SCAN_ORIGIN_BUSY_RETRY_S"):
        setattr(settings, name, getattr(fast, name))
    app.control.purge()
    yield
    app.control.purge()


@contextmanager
def _target(port: int, ttft_ms: int):
    """`tokvera target` on 127.0.0.1:port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokvera_site.cli", "target", "--port", str(port),
         "--ttft-ms", str(ttft_ms), "--itl-ms", "1", "--tokens", "4"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: accepts(port), 30, f"the target on port {port}")
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _scan(scan_id: int) -> Scan:
    return Scan.dangerously_unscoped.get(pk=scan_id)


def _beat_once() -> None:
    """What the beat does every minute: reap, then send the queued scans that are due."""
    scan_worker.reap()
    for scan_id in dispatch.redispatch_due():
        dispatch.send(scan_id)


def test_a_killed_worker_loses_only_its_own_scan_and_frees_the_origin(world):
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    due = timezone.now() - timedelta(seconds=1)
    endpoints = [make_endpoint(world.team, name=f"shared origin {i}", base_url=base_url,
                               levels=[1], requests_per_level=1, timeout_s=60, next_scan_at=due)
                 for i in range(3)]
    killed_id, *waiting_ids = sorted(dispatch.enqueue_due())
    assert len(waiting_ids) == len(endpoints) - 1

    with _target(port, ttft_ms=60_000):  # the first scan's answer never comes before the kill
        worker = workers.start("--pool", "prefork", "--concurrency", "2")
        try:
            dispatch.send(killed_id)
            wait_for(lambda: _scan(killed_id).status == ScanStatus.RUNNING, 90, "the first scan")
            for scan_id in waiting_ids:
                dispatch.send(scan_id)
            # Each was taken by the worker and told to wait for the busy origin: it is a queued
            # row due to be sent again soon, not a retry message inside the worker.
            wait_for(lambda: all(_scan(i).redispatch_at < timezone.now() + timedelta(minutes=1)
                                  for i in waiting_ids), 60, "the other two scans to wait")
            assert all(_scan(i).status == ScanStatus.QUEUED for i in waiting_ids)
        finally:
            stop(worker, signal.SIGKILL)

    with _target(port, ttft_ms=5):  # the same origin, answering quickly now
        worker = workers.start("--pool", "prefork", "--concurrency", "2")
        try:
            wait_for(lambda: (_beat_once() or True) and all(
                _scan(i).status in {ScanStatus.SUCCEEDED, ScanStatus.ERRORED}
                for i in waiting_ids), 180, "the two waiting scans to run")
        finally:
            stop(worker, signal.SIGTERM)

    killed = _scan(killed_id)
    assert killed.status == ScanStatus.ERRORED
    assert "the worker stopped heartbeating" in killed.error_reason
    for scan_id in waiting_ids:
        scan = _scan(scan_id)
        assert scan.status == ScanStatus.SUCCEEDED, scan.error_reason
        assert scan.report["levels"][0]["succeeded"] == 1
    assert not OriginLock.objects.exists()  # the origin is free
