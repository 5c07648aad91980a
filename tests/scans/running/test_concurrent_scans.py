"""The run command's worker runs many scans at once (threads pool, SCAN_CONCURRENCY_PER_WORKER),
and a worker killed in the middle of them loses exactly those scans: each is reaped as errored
(never graded), its origin freed, and the endpoint's next slot runs. Real Celery workers on
Redis, the real database, targets on loopback; heartbeat thresholds sped up through settings."""

from __future__ import annotations

import signal
from contextlib import ExitStack
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Endpoint, OriginLock, Scan, ScanStatus
from scans.running import dispatch
from scans.running import worker as scan_worker
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]
SCANS = 20


@pytest.fixture(autouse=True)
def _fast_thresholds(settings):
    from tests.helpers import fast_scan_settings as fast

    for name in ("SCAN_HEARTBEAT_S", "SCAN_STALE_AFTER_S", "SCAN_ORIGIN_BUSY_RETRY_S"):
        setattr(settings, name, getattr(fast, name))
    app.control.purge()
    yield
    app.control.purge()


def _statuses(ids) -> list[str]:
    return list(Scan.dangerously_unscoped.filter(pk__in=ids).values_list("status", flat=True))


def _targets(stack: ExitStack, config: TargetConfig) -> list[str]:
    return [f"http://{host}:{port}/v1"
            for host, port in (stack.enter_context(running_target(config)) for _ in range(SCANS))]


def test_a_worker_killed_during_20_concurrent_scans_loses_them_as_errors_and_the_next_slots_run(world):
    assert settings.SCAN_CONCURRENCY_PER_WORKER >= SCANS
    due = timezone.now() - timedelta(seconds=1)
    with ExitStack() as stack:
        # One origin each (one scan per origin at a time); no first token before the kill.
        slow = _targets(stack, TargetConfig(ttft_ms=60_000, itl_ms=1, tokens=4))
        endpoints = [make_endpoint(world.team, name=f"endpoint {i}", base_url=url, levels=[1],
                                   requests_per_level=1, timeout_s=90, next_scan_at=due)
                     for i, url in enumerate(slow)]
        killed = dispatch.enqueue_due()
        assert len(killed) == SCANS
        worker = workers.start()
        try:
            for scan_id in killed:
                dispatch.send(scan_id)
            # All twenty run at once in the one worker process.
            wait_for(lambda: _statuses(killed).count(ScanStatus.RUNNING) == SCANS, 120,
                     "the twenty scans to run at once")
            assert OriginLock.objects.count() == SCANS
        finally:
            stop(worker, signal.SIGKILL)

    last_sign_of_life = max(Scan.dangerously_unscoped.filter(pk__in=killed)
                            .values_list("heartbeat_at", flat=True))
    silence = timedelta(seconds=settings.SCAN_STALE_AFTER_S + 1)
    assert scan_worker.reap(now=last_sign_of_life + silence) == SCANS
    for scan in Scan.dangerously_unscoped.filter(pk__in=killed):
        assert scan.status == ScanStatus.ERRORED
        assert "the worker stopped heartbeating" in scan.error_reason
        assert scan.grade == "" and scan.report is None  # errored, never graded
    assert not OriginLock.objects.exists()

    with ExitStack() as stack:
        fast = _targets(stack, TargetConfig(ttft_ms=5, itl_ms=1, tokens=4))
        for endpoint, url in zip(endpoints, fast, strict=True):
            # The next slot comes due (an hour later, in the real schedule).
            Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(
                base_url=url, next_scan_at=timezone.now())
        following = dispatch.enqueue_due()
        assert len(following) == SCANS
        worker = workers.start()
        try:
            for scan_id in following:
                dispatch.send(scan_id)
            wait_for(lambda: all(s in {ScanStatus.SUCCEEDED, ScanStatus.ERRORED}
                                 for s in _statuses(following)), 180, "the next slots to run")
        finally:
            stop(worker)
    for scan in Scan.dangerously_unscoped.filter(pk__in=following):
        assert scan.status == ScanStatus.SUCCEEDED, scan.error_reason
        assert scan.report["levels"][0]["succeeded"] == 1
        assert scan.slot > min(Scan.dangerously_unscoped.filter(pk__in=killed)
                               .values_list("slot", flat=True))
