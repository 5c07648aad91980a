"""Delivery semantics with a real Celery worker on Redis and the real PostgreSQL database:
a task delivered twice makes one scan; a worker killed mid-scan is reaped and the next slot
runs normally."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import timedelta

import httpx
import pytest
from django.conf import settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import CheckResult, OriginLock, Scan, ScanStatus
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.workers import worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _start_worker(concurrency: int = 2) -> subprocess.Popen:
    # The project's own settings (not the fast scan settings), as a deployed worker has.
    return workers.start("--pool", "prefork", "--concurrency", str(concurrency),
                        env=worker_env(DJANGO_SETTINGS_MODULE="tokvera_site.settings"))


def _stop(worker: subprocess.Popen, sig=signal.SIGTERM) -> None:
    try:
        os.killpg(worker.pid, sig)
    except ProcessLookupError:
        return
    worker.wait(timeout=60)


def _wait_for(predicate, seconds: float = 90.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _requests_answered(host, port) -> float:
    text = httpx.get(f"http://{host}:{port}/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "tokvera_target_requests":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return 0.0


def _status(scan_id) -> str:
    return Scan.dangerously_unscoped.get(pk=scan_id).status


@pytest.fixture(autouse=True)
def _empty_queue():
    app.control.purge()
    yield
    app.control.purge()


def test_a_scan_delivered_twice_runs_once(world):
    with running_target(TargetConfig(ttft_ms=50, itl_ms=5, tokens=8)) as (host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1",
                                 levels=[1, 2], requests_per_level=3)
        scan = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")
        worker = _start_worker(concurrency=2)
        try:
            for _ in range(2):  # the same message twice, as a redelivery would
                dispatch.send(scan.pk)
            assert _wait_for(lambda: _status(scan.pk) in {"succeeded", "errored"})
            time.sleep(2)  # give the duplicate time to do (nothing) too
        finally:
            _stop(worker)
        answered = _requests_answered(host, port)
    scan.refresh_from_db()
    assert scan.status == ScanStatus.SUCCEEDED, scan.error_reason
    assert answered == 7  # one scan's: the preflight probe, then 3 at each of 2 levels (not 14)
    assert CheckResult.dangerously_unscoped.filter(scan=scan).count() == len(scan.report["checks"])
    assert not OriginLock.objects.exists()


def test_a_killed_worker_is_reaped_and_the_next_slot_runs(world):
    slow = TargetConfig(ttft_ms=20_000, itl_ms=5, tokens=4)  # the first token never comes in time
    with running_target(slow) as (host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1", levels=[1],
                                 requests_per_level=1, timeout_s=60,
                                 next_scan_at=timezone.now() - timedelta(seconds=1))
        [scan_id] = dispatch.enqueue_due()
        worker = _start_worker()
        try:
            dispatch.send(scan_id)
            assert _wait_for(lambda: _status(scan_id) == "running")
        finally:
            _stop(worker, signal.SIGKILL)  # the whole worker, children included, dies
    scan = Scan.dangerously_unscoped.get(pk=scan_id)
    assert scan.status == ScanStatus.RUNNING  # nobody is left to finish it

    silence = timedelta(seconds=settings.SCAN_STALE_AFTER_S)
    assert scan_worker.reap(now=scan.heartbeat_at + silence - timedelta(seconds=1)) == 0
    assert scan_worker.reap(now=scan.heartbeat_at + silence + timedelta(seconds=1)) == 1
    scan.refresh_from_db()
    assert scan.status == ScanStatus.ERRORED
    assert "worker stopped heartbeating" in scan.error_reason
    assert not OriginLock.objects.exists()

    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)) as (host, port):
        type(endpoint).dangerously_unscoped.filter(pk=endpoint.pk).update(
            base_url=f"http://{host}:{port}/v1", next_scan_at=timezone.now())
        [next_id] = dispatch.enqueue_due()
        worker = _start_worker()
        try:
            dispatch.send(next_id)
            assert _wait_for(lambda: _status(next_id) in {"succeeded", "errored"})
        finally:
            _stop(worker)
    assert _status(next_id) == "succeeded"
