"""`make run` on the embedded broker (filesystem://, message files under var/broker/) stopped with
Ctrl-C in the middle of a scan and started again: no scheduled scan is lost and none is left
stuck. Ctrl-C reaches every process of the terminal's group at once (the worker and its pool
children), then honcho kills what is left; the test does the same to a real worker, starts a
fresh one on the same message folder, and plays the beat the way `make run`'s beat would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from scans.models import OriginLock, Scan, ScanStatus
from scans.running import dispatch
from tests.conftest import free_port
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.paths import ROOT
from tests.helpers.processes import wait_for
from tests.helpers.workers import worker_env
from tests.scans.running.test_worker_death import _target

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast_thresholds(settings):
    from tests.helpers import fast_scan_settings as fast

    for name in ("SCAN_HEARTBEAT_S", "SCAN_STALE_AFTER_S", "SCAN_ORIGIN_BUSY_RETRY_S"):
        setattr(settings, name, getattr(fast, name))


def _env(var_dir: Path) -> dict:
    """The run command's processes: the embedded broker under var_dir, the test database."""
    return worker_env(CELERY_BROKER_URL="filesystem://", TOKVERA_VAR_DIR=str(var_dir))


def _start_worker(env: dict) -> subprocess.Popen:
    return workers.start("--pool", "prefork", "--concurrency", "2", env=env)


def _ctrl_c(worker: subprocess.Popen) -> None:
    """SIGINT to the whole group, as a terminal's Ctrl-C; SIGKILL 5 s later, as honcho does."""
    os.killpg(worker.pid, signal.SIGINT)
    try:
        worker.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)


def _beat(env: dict, code: str) -> None:
    """Run what the beat would send, in a process of the run command (the embedded broker)."""
    done = subprocess.run([sys.executable, "-c", "import django; django.setup(); " + code],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


BEAT_ONCE = ("from scans.running import dispatch, worker as scan_worker; scan_worker.reap(); "
             "[dispatch.send(i) for i in dispatch.redispatch_due()]")


def test_a_ctrl_c_mid_scan_and_a_restart_lose_no_scheduled_scan_and_leave_none_stuck(world, tmp_path):
    env = _env(tmp_path / "var")
    port = free_port()
    due = timezone.now() - timedelta(seconds=1)
    endpoints = [make_endpoint(world.team, name=f"demo {i}", base_url=f"http://127.0.0.1:{port}/v1",
                               levels=[1], requests_per_level=1, timeout_s=60, next_scan_at=due)
                 for i in range(3)]
    scan_ids = sorted(dispatch.enqueue_due())
    assert len(scan_ids) == len(endpoints)

    with _target(port, ttft_ms=60_000):  # the first scan is still waiting when Ctrl-C comes
        worker = _start_worker(env)
        try:
            _beat(env, f"from scans.running import dispatch, worker; [dispatch.send(i) for i in {scan_ids}]")
            wait_for(lambda: Scan.dangerously_unscoped.filter(
                pk__in=scan_ids, status=ScanStatus.RUNNING).exists(), 90, "a running scan")
        finally:
            _ctrl_c(worker)
    interrupted = set(Scan.dangerously_unscoped.filter(
        pk__in=scan_ids, status=ScanStatus.RUNNING).values_list("pk", flat=True))
    assert interrupted, "the Ctrl-C came in the middle of a scan"

    with _target(port, ttft_ms=5):  # `make run` again: the same message folder, a new worker
        worker = _start_worker(env)
        try:
            def settled() -> bool:
                _beat(env, BEAT_ONCE)
                return not Scan.dangerously_unscoped.filter(
                    pk__in=scan_ids, status__in=[ScanStatus.QUEUED, ScanStatus.RUNNING]).exists()

            wait_for(settled, 180, "every scan to finish after the restart")
        finally:
            _ctrl_c(worker)

    scans = {s.pk: s for s in Scan.dangerously_unscoped.filter(pk__in=scan_ids)}
    for scan_id, scan in scans.items():
        if scan_id in interrupted:  # cut off mid-run: errored with the true reason, not graded
            assert scan.status == ScanStatus.ERRORED, scan.status
            assert "heartbeat" in scan.error_reason, scan.error_reason
        else:  # queued before Ctrl-C: its message or its row survived the restart
            assert scan.status == ScanStatus.SUCCEEDED, (scan.status, scan.error_reason)
    assert not OriginLock.objects.exists()
