"""Real Celery workers: `start()` is the one way a test runs one (the run command's worker:
threads pool, many scans at once), in its own process group so that `stop()` can signal or
kill it whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from tests.conftest import database_url
from tests.helpers.paths import ROOT

# Scans heartbeat every second under it, so a dead worker's scan is reaped in seconds.
FAST_SETTINGS = "tests.helpers.fast_scan_settings"


def worker_env(**overrides: str) -> dict:
    """The environment of a worker (or any site process) on the test database and broker."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": FAST_SETTINGS,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SECRET_KEY": settings.SECRET_KEY,
        "FIELD_ENCRYPTION_KEY": ",".join(settings.FIELD_ENCRYPTION_KEYS),
        "OUTBOUND_ALLOW": "loopback",
        **overrides,
    }


def start(*args: str, env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
    """`celery -A tokvera_site worker` with the pool and concurrency of the settings (the run
    command's worker), plus `args` (-Q, -n, --pool, …); its output goes to `log` if given.
    Stop it with `stop()`."""
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tokvera_site", "worker", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "-l", "INFO" if log else "WARNING", *args],
        cwd=ROOT, env=env or worker_env(), start_new_session=True,
        stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
    )


# The name tests/benchmarks still imports (its owner moves it to start()).
start_worker = start


def stop(worker: subprocess.Popen, sig=signal.SIGTERM) -> None:
    """Signal the worker's whole process group and wait for it."""
    try:
        os.killpg(worker.pid, sig)
    except ProcessLookupError:
        return
    try:
        worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
