"""The Celery app. Tasks are found in the Django apps; beat reads its schedule from the database."""

from __future__ import annotations

import gc
import os

from celery import Celery, signals

from scans.grader.runner import GC_GEN0_THRESHOLD  # the grader is Django-free: safe before setup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")

app = Celery("tokvera")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class CountdownTooLong(ValueError):
    """A countdown/ETA past the broker's visibility timeout would be redelivered early."""


def check_countdown(seconds: float) -> float:
    """Refuse a countdown the broker could redeliver before it is due (Redis/SQS semantics)."""
    from django.conf import settings

    if seconds >= settings.CELERY_VISIBILITY_TIMEOUT_S:
        raise CountdownTooLong(
            f"countdown {seconds}s is not below the broker visibility timeout "
            f"({settings.CELERY_VISIBILITY_TIMEOUT_S}s)"
        )
    return seconds


@signals.task_postrun.connect
def _count_task(sender=None, state=None, **_):
    from tokvera_site.metrics import TASKS

    TASKS.labels(task=getattr(sender, "name", "unknown"), state=state or "UNKNOWN").inc()


@signals.worker_ready.connect
def _tune_gc_for_concurrent_scans(**_):
    """The scanner's GC tuning (scans.grader.runner._gc_tuned) is process-wide, and this worker
    runs many scans at once in threads, so it is applied once here instead of per scan: what
    exists at start is frozen, and young collections run less often."""
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], GC_GEN0_THRESHOLD), *threshold[1:])
