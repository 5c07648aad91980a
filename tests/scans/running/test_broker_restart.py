"""Redis restarted under a running worker and beat: scheduled scans resume within 2 minutes
without restarting either. A real Redis (an embedded one this test starts and restarts; never
the machine's), the real `celery beat` on the database schedule, the run command's worker, the
real database and a target on loopback. The broker keeps nothing across the restart, so any
message in it is lost: the scans are rows, and the beat sends them again."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from common.periodic_tasks import ensure_periodic_tasks
from scans.grader.demo_server import TargetConfig, running_target
from scans.models import Endpoint, Scan, ScanStatus
from scans.running import dispatch
from tests.conftest import free_port
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.paths import ROOT
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop, worker_env
from tokvera_site.devservices import EmbeddedRedis

pytestmark = pytest.mark.django_db(transaction=True)
RESUME_WITHIN_S = 120


def _beat_every_five_seconds() -> None:
    """The site's periodic tasks, with the enqueue and reap passes every 5 s instead of 60 s
    so the test does not wait minutes for the first pass."""
    ensure_periodic_tasks()
    every_5s, _ = IntervalSchedule.objects.get_or_create(every=5, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.filter(task__in=["scans.tasks.enqueue_due_scans",
                                          "scans.tasks.reap_scans"]).update(interval=every_5s)
    PeriodicTask.objects.exclude(task__in=["scans.tasks.enqueue_due_scans",
                                           "scans.tasks.reap_scans"]).update(enabled=False)


def _start_beat(env: dict, tmp_path):
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tokvera_site", "beat", "-l", "INFO",
         "--pidfile", str(tmp_path / "beat.pid"), "--schedule", str(tmp_path / "beat.db")],
        cwd=ROOT, env=env, start_new_session=True,
        stdout=open(tmp_path / "beat.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115


def _succeeded(endpoint) -> int:
    return Scan.dangerously_unscoped.filter(endpoint=endpoint, status=ScanStatus.SUCCEEDED).count()


def _logs(tmp_path) -> str:
    return "\n".join(f"--- {name} ---\n" + (tmp_path / name).read_text()[-3000:]
                     for name in ("worker.log", "beat.log"))


def test_a_beat_pass_the_broker_refuses_leaves_its_scans_due_at_the_next_pass(world):
    """The beat's pass creates the due scan but cannot send it (the broker is restarting): the
    scan is sent again at the next pass, a minute later, not after REDISPATCH_AFTER."""
    make_endpoint(world.team, base_url="http://127.0.0.1:9/v1", levels=[1], interval_minutes=5,
                  next_scan_at=timezone.now() - timedelta(seconds=1))
    nothing_listens = f"redis://127.0.0.1:{free_port()}/0"
    subprocess.run([sys.executable, "manage.py", "shell", "-c",
                    "from scans.tasks import enqueue_due_scans; enqueue_due_scans()"],
                   cwd=ROOT, env=worker_env(CELERY_BROKER_URL=nothing_listens), check=True,
                   capture_output=True, timeout=120)

    scan = Scan.dangerously_unscoped.get()
    assert scan.status == ScanStatus.QUEUED  # kept: it is a row, not a message
    assert scan.redispatch_at <= timezone.now()
    assert dispatch.redispatch_due() == [scan.pk]  # the next pass sends it


def test_scheduled_scans_resume_within_2_minutes_of_a_redis_restart_without_restarting_workers(
        world, tmp_path):
    _beat_every_five_seconds()
    redis = EmbeddedRedis()
    with running_target(TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)) as (host, port):
        endpoint = make_endpoint(world.team, base_url=f"http://{host}:{port}/v1", levels=[1],
                                 requests_per_level=1, interval_minutes=5,
                                 next_scan_at=timezone.now() - timedelta(seconds=1))
        with redis:
            env = worker_env(CELERY_BROKER_URL=redis.url(0))
            worker = workers.start(env=env, log=tmp_path / "worker.log")
            beat = _start_beat(env, tmp_path)
            try:
                wait_for(lambda: _succeeded(endpoint) == 1, 90, "the first scheduled scan")

                redis.stop()  # every message in it is gone with it
                time.sleep(5)
                redis.start()  # same port, empty
                Endpoint.dangerously_unscoped.filter(pk=endpoint.pk).update(
                    next_scan_at=timezone.now())  # the next slot is due
                restarted = time.monotonic()
                try:
                    wait_for(lambda: _succeeded(endpoint) == 2, RESUME_WITHIN_S + 30,
                             "a scheduled scan after the restart")
                except AssertionError as timed_out:  # what each process saw, for the reader
                    raise AssertionError(f"{timed_out}\n{_logs(tmp_path)}") from None
                resumed_after = time.monotonic() - restarted
                assert worker.poll() is None and beat.poll() is None  # neither was restarted
            finally:
                stop(beat)
                stop(worker)
    log = (tmp_path / "worker.log").read_text()
    assert resumed_after < RESUME_WITHIN_S, log[-3000:]
