"""A worker SIGKILLed mid-scan takes no queued scan with it: a scan sent while every one of
its threads was busy stays in the broker's queue (the worker reserves no message it cannot
start), so a fresh worker runs it at once, not after the beat's redispatch. Real Celery
workers (the run command's threads pool) on Redis, the real database, targets on loopback."""

from __future__ import annotations

import signal
from contextlib import ExitStack
from datetime import timedelta

import pytest
from django.utils import timezone

from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Scan, ScanStatus
from scans.running import dispatch
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_thresholds(settings, monkeypatch):
    from tests.helpers import fast_scan_settings as fast

    for name in ("SCAN_HEARTBEAT_S", "SCAN_STALE_AFTER_S", "SCAN_ORIGIN_BUSY_RETRY_S"):
        setattr(settings, name, getattr(fast, name))
    # Only the broker can bring the second scan back: no beat runs in this test, and a
    # redispatch would be hours away.
    monkeypatch.setattr(dispatch, "REDISPATCH_AFTER", timedelta(hours=6))
    app.control.purge()
    yield
    app.control.purge()


def _scan(scan_id: int) -> Scan:
    return Scan.dangerously_unscoped.get(pk=scan_id)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_scan_queued_behind_a_killed_worker_runs_on_the_next_worker_without_a_redispatch(
        world, threads):
    due = timezone.now() - timedelta(seconds=1)
    # Every thread busy with a scan that stalls, so the last scan arrives with none free.
    env = worker_env(SCAN_CONCURRENCY_PER_WORKER=str(threads))
    with ExitStack() as stack:
        stalled = [stack.enter_context(running_target(
            TargetConfig(ttft_ms=600_000, itl_ms=1, tokens=4))) for _ in range(threads)]
        quick = stack.enter_context(running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)))
        long_endpoints = [make_endpoint(
            world.team, name=f"stalls {i}", base_url="http://{}:{}/v1".format(*address),
            levels=[1], requests_per_level=1, timeout_s=300, next_scan_at=due)
            for i, address in enumerate(stalled)]
        make_endpoint(world.team, name="answers", base_url="http://{}:{}/v1".format(*quick),
                      levels=[1], requests_per_level=1, timeout_s=60, next_scan_at=due)
        queued = dispatch.enqueue_due()
        long_ids = list(Scan.dangerously_unscoped.filter(pk__in=queued, endpoint__in=long_endpoints)
                        .values_list("pk", flat=True))
        (second_id,) = [pk for pk in queued if pk not in long_ids]

        worker = workers.start(env=env)
        try:
            for scan_id in long_ids:
                dispatch.send(scan_id)
            wait_for(lambda: all(_scan(i).status == ScanStatus.RUNNING for i in long_ids), 90,
                     "the long scans")
            dispatch.send(second_id)
            # Give the busy worker every chance to take the second scan's message.
            wait_for(lambda: app.control.inspect(timeout=2).ping(), 30, "the worker to answer")
            assert _scan(second_id).status == ScanStatus.QUEUED
        finally:
            stop(worker, signal.SIGKILL)

        worker = workers.start(env=env)
        try:
            # Well under the redispatch interval: only the broker handing the message to this
            # worker can run it.
            wait_for(lambda: _scan(second_id).status in {ScanStatus.SUCCEEDED,
                                                         ScanStatus.ERRORED},
                     120, "the second scan to run on the fresh worker")
        finally:
            stop(worker, signal.SIGTERM)

    second = _scan(second_id)
    assert second.status == ScanStatus.SUCCEEDED, second.error_reason
    assert second.report["levels"][0]["succeeded"] == 1
