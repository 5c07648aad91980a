"""The fold task in a real Celery worker, over Redis, against the real PostgreSQL database:
completions queue it, duplicates of it are delivered too, and each job is folded once."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from benchmarks import routing
from benchmarks.models import Job
from tests.helpers.network import build_net, make_catalog
from tests.helpers.workers import start_worker, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def real_broker():
    """This module wants the messages on the broker, not run in the test process."""
    before = app.conf.task_always_eager
    app.conf.task_always_eager = False
    app.control.purge()
    yield
    app.control.purge()
    app.conf.task_always_eager = before


def _start_worker() -> subprocess.Popen:
    # The project's own settings (not the fast scan settings), as a deployed worker has.
    return start_worker("--pool", "prefork", "--concurrency", "2",
                        env=worker_env(DJANGO_SETTINGS_MODULE="tokvera_site.settings"))


def test_a_real_worker_folds_each_completion_once_despite_duplicate_tasks(real_broker):
    make_catalog()
    net = build_net()
    host, token = net.host("h1")
    for ttft, tokens, elapsed in [(100.0, 20, 1000.0), (200.0, 100, 2000.0), (400.0, 10, 1000.0)]:
        net.submit_id(max_tokens=128)
        routing.assignment_pass()  # a worker's job, done here: the folds are left for the worker
        net.run(token, ttft_ms=ttft, completion_tokens=tokens, elapsed_ms=elapsed)
    for _ in range(3):  # redeliveries of the same task
        app.send_task("benchmarks.tasks.fold_host_ewmas", args=[host.pk])
    assert Job.dangerously_unscoped.filter(folded_at__isnull=True).count() == 3  # recorded first
    worker = _start_worker()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and Job.dangerously_unscoped.filter(
                folded_at__isnull=True).exists():
            time.sleep(0.2)
        time.sleep(1)  # let the duplicates run (and find nothing)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    host.refresh_from_db()
    assert not Job.dangerously_unscoped.filter(folded_at__isnull=True).exists()
    assert host.ttft_ewma_ms == pytest.approx(0.3 * 400 + 0.7 * (0.3 * 200 + 0.7 * 100))
    assert host.tps_ewma == pytest.approx(0.3 * 10 + 0.7 * (0.3 * 50 + 0.7 * 20))
    assert host.reputation == pytest.approx(1 - 0.5 * 0.9 ** 3)
