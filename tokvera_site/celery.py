"""The Celery app. Tasks are found in the Django apps; beat reads its schedule from the database."""

from __future__ import annotations

import gc
import os

from celery import Celery, bootsteps, signals

from scans.grader import GC_GEN0_THRESHOLD  # the grader is Django-free: safe before setup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tokvera_site.settings")

app = Celery("tokvera")
# Every thread's `celery.current_app`: the apps send tasks by name through it, without
# importing this wiring module (a thread of its own would otherwise get Celery's bare default).
app.set_default()
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
    from common.metrics import TASKS

    TASKS.labels(task=getattr(sender, "name", "unknown"), state=state or "UNKNOWN").inc()


@signals.worker_ready.connect
def _tune_gc_for_concurrent_scans(**_):
    """The grader's GC tuning (scans.grader.runner._gc_tuned) is process-wide, and this worker
    runs many scans at once in threads, so it is applied once here instead of per scan: what
    exists at start is frozen, and young collections run less often."""
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], GC_GEN0_THRESHOLD), *threshold[1:])


# How long a worker that has as many tasks as it may hold (a prefetch multiplier of 1 and every
# thread busy: the pass worker's one thread, after every pass) waits before it takes the next.
CONSUME_AGAIN_WITHIN_S = 0.1


class WakeTheEventLoopOften(bootsteps.StartStopStep):
    """A worker's event loop registers its next read from the broker only when it wakes up,
    and a task finishing on a pool thread does not wake it: it waits for its next timer, up to
    ~10 s (celery/celery#6941, open). The assignment pass worker (one thread) took a pass
    message at most every 5-10 s, and jobs waited that long for their host. A no-op timer
    every CONSUME_AGAIN_WITHIN_S bounds that wait (ten wake-ups a second). A consumer step, so
    it is set again each time the consumer restarts (a lost broker connection clears the
    loop's timers); with the filesystem broker there is no event loop, and nothing to do."""

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.entry = None

    def start(self, consumer):
        if consumer.hub is not None:
            self.entry = consumer.timer.call_repeatedly(CONSUME_AGAIN_WITHIN_S, _nothing)

    def stop(self, consumer):
        if self.entry is not None:
            self.entry.cancel()
            self.entry = None


def _nothing() -> None:
    pass


app.steps["consumer"].add(WakeTheEventLoopOften)
