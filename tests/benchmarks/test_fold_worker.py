"""The fold task in a real Celery worker, over Redis, against the real PostgreSQL database:
completions queue it, duplicates of it are delivered too, and each job is folded once. And the
assignment passes' own queue: served by a worker of its own, covered by the tick without one."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from benchmarks.models import Job, JobStatus
from benchmarks.network import routing
from benchmarks.tasks import PASS_QUEUE
from tests.helpers.network import build_net, make_catalog
from tests.helpers.workers import start_worker, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _start_worker(*args: str) -> subprocess.Popen:
    # The project's own settings (not the fast scan settings), as a deployed worker has.
    return start_worker("--pool", "prefork", "--concurrency", "2", *args,
                        env=worker_env(DJANGO_SETTINGS_MODULE="tokvera_site.settings"))


def _stop(worker: subprocess.Popen) -> None:
    os.killpg(worker.pid, signal.SIGTERM)
    worker.wait(timeout=60)


def _waiting_messages(queue: str) -> int:
    with app.connection_for_write() as conn:
        return conn.default_channel.queue_declare(queue).message_count


def _wait_until_leased(job_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Job.dangerously_unscoped.get(
            pk=job_id).status == JobStatus.QUEUED:
        time.sleep(0.2)
    assert Job.dangerously_unscoped.get(pk=job_id).status == JobStatus.LEASED


def test_a_real_worker_folds_each_completion_once_despite_duplicate_tasks(messages_on_the_broker):
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


def test_passes_wait_on_their_own_queue_and_the_tick_assigns_without_their_worker(messages_on_the_broker):
    make_catalog()
    net = build_net()
    net.host("h1", slots=2)
    first = net.submit_id()  # queues a pass, on its own queue
    assert _waiting_messages(PASS_QUEUE) == 1
    # A worker that does not serve `passes` (an operator who missed it): the tick, on the
    # default queue every 5 s, still runs a pass, so the job is late, not lost.
    worker = _start_worker("-Q", "celery")
    try:
        app.send_task("benchmarks.tasks.network_tick")
        _wait_until_leased(first)
    finally:
        _stop(worker)
    assert _waiting_messages(PASS_QUEUE) == 1  # never taken by that worker
    second = net.submit_id()  # one pass is queued already: it will see this job too
    assert _waiting_messages(PASS_QUEUE) == 1
    worker = _start_worker("-Q", PASS_QUEUE)  # the passes' own worker
    try:
        _wait_until_leased(second)
    finally:
        _stop(worker)
    assert _waiting_messages(PASS_QUEUE) == 0
