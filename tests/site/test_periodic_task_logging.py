"""The run command's output stays readable: the periodic tasks' routine lines (beat sending the
network tick every 5 s, a worker receiving and finishing it) are not logged at the default
level, other tasks' lines are, and TOKVERA_PERIODIC_LOG_LEVEL=INFO brings them back.

Real processes: `celery beat` on the site's database scheduler and a `celery worker`, on the
test broker (Redis)."""

from __future__ import annotations

import sys

import pytest
from django.conf import settings

from common.periodic_tasks import ensure_periodic_tasks
from tests.conftest import broker_key
from tests.helpers import workers
from tests.helpers.paths import ROOT
from tests.helpers.processes import running, wait_for
from tests.helpers.workers import stop, worker_env

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

TICK = "benchmarks.tasks.network_tick"  # a periodic task, every 5 s
NOT_PERIODIC = "benchmarks.tasks.assign_queued_jobs"  # sent by leases, not by beat


def _redis():
    import redis

    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def _beat(env: dict, log):
    return running(
        [sys.executable, "-m", "celery", "-A", "tokvera_site", "beat", "--loglevel", "INFO", "--pidfile="],
        env=env,
        log=log,
        cwd=ROOT,
    )


def _text(path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_beat_and_workers_keep_the_periodic_tasks_routine_lines_quiet_unless_asked(tmp_path):
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("needs the Redis broker to see what beat queued")
    ensure_periodic_tasks()  # the rows beat reads (a transactional test starts without them)
    broker = _redis()
    broker.delete(broker_key("celery"))
    env = worker_env()
    env.pop("TOKVERA_PERIODIC_LOG_LEVEL", None)

    quiet_beat = tmp_path / "beat.log"
    with _beat(env, quiet_beat):
        wait_for(lambda: broker.llen(broker_key("celery")) > 0, 60, "beat to queue the network tick")
    assert "Sending due task" not in _text(quiet_beat)
    assert "beat: Starting" in _text(quiet_beat)  # the log was written at INFO all along

    from tokvera_site.celery import app

    app.send_task(NOT_PERIODIC)  # after the ticks: a one-thread worker runs it last
    quiet_worker = tmp_path / "worker.log"
    worker = workers.start("--concurrency", "1", env=env, log=quiet_worker)
    try:
        wait_for(
            lambda: (
                f"Task {NOT_PERIODIC}[" in _text(quiet_worker) and " succeeded in " in _text(quiet_worker)
            ),
            60,
            "the worker to run the tasks",
        )
    finally:
        stop(worker)
    assert f"Task {TICK}[" not in _text(quiet_worker)  # (the start banner lists every task)
    assert f"Task {NOT_PERIODIC}[" in _text(quiet_worker) and "received" in _text(quiet_worker)

    # Asked for: the same lines are there.
    loud_env = {**env, "TOKVERA_PERIODIC_LOG_LEVEL": "INFO"}
    loud_beat = tmp_path / "beat-info.log"
    with _beat(loud_env, loud_beat):
        wait_for(
            lambda: f"Sending due task Network: expire leases and assign jobs ({TICK})" in _text(loud_beat),
            60,
            "beat to log the tick at INFO",
        )
    # The worker's half: one tick on an otherwise empty queue. What the beat queued on start
    # (every periodic task is due at once) could keep a one-thread worker on a loaded box
    # busy past the wait before it reached a tick.
    broker.delete(broker_key("celery"))
    app.send_task(TICK)
    loud_worker = tmp_path / "worker-info.log"
    worker = workers.start("--concurrency", "1", env=loud_env, log=loud_worker)
    try:
        wait_for(
            lambda: f"Task {TICK}[" in _text(loud_worker) and " succeeded in " in _text(loud_worker),
            60,
            "the tick logged at INFO",
        )
    finally:
        stop(worker)
    broker.delete(broker_key("celery"))
