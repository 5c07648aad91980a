"""Logging filters: secrets masked before any handler sees them; the periodic tasks' routine
lines (beat sending them, a worker receiving and finishing them) kept below the level asked."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.utils.module_loading import import_string

__all__ = ["ACCESS_LOGGERS", "PERIODIC_TASK_LOGGERS", "QuietPeriodicTasksFilter",
           "RedactSecretsFilter", "quiet_periodic_task_logs", "redact", "redact_access_logs"]


def redact(text: str) -> str:
    """`text` with every credential masked, by the function settings.LOG_REDACTOR names: one
    list of credential patterns serves the logs and stored scan text, and it lives with the
    grader, which this package may not import."""
    return _redactor()(text)


@functools.cache
def _redactor() -> Callable[[str], str]:
    from django.conf import settings

    return import_string(settings.LOG_REDACTOR)


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


# The web servers' access logs (runserver, gunicorn) do not pass through our handlers, and
# their request lines carry invitation links: the filter goes on those loggers themselves.
ACCESS_LOGGERS = ("django.server", "gunicorn.access")


def redact_access_logs() -> None:
    for name in ACCESS_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecretsFilter) for f in logger.filters):
            logger.addFilter(RedactSecretsFilter())


# Celery's loggers of the routine lines: beat's "Sending due task", a worker's "received" and
# "succeeded". Every 5 s for the network tick, they buried the run command's login.
PERIODIC_TASK_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")
# Celery's own periodic task (result expiry), which beat schedules beside ours.
CELERY_PERIODIC_TASKS = frozenset({"celery.backend_cleanup"})


@functools.cache
def _periodic_task_names() -> frozenset[str]:
    from common.periodic_tasks import all_periodic_tasks

    return frozenset(task for _, task, _ in all_periodic_tasks()) | CELERY_PERIODIC_TASKS


def _task_of(record: logging.LogRecord) -> str | None:
    """The task a Celery record is about: the worker passes it in `data`, beat as its second
    argument ("Scheduler: Sending due task %s (%s)")."""
    data = getattr(record, "data", None)
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        return data["name"]
    if isinstance(record.args, tuple) and len(record.args) == 2 and "due task" in str(record.msg):
        return str(record.args[1])
    return None


class QuietPeriodicTasksFilter(logging.Filter):
    """Drop a periodic task's records below settings.PERIODIC_TASK_LOG_LEVEL (WARNING unless
    TOKVERA_PERIODIC_LOG_LEVEL asks for INFO); other tasks (a scan, an alert) keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        from django.apps import apps
        from django.conf import settings

        if record.levelno >= getattr(settings, "PERIODIC_TASK_LOG_LEVEL", logging.WARNING):
            return True
        if not apps.ready:
            return True
        return _task_of(record) not in _periodic_task_names()


def quiet_periodic_task_logs() -> None:
    for name in PERIODIC_TASK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietPeriodicTasksFilter) for f in logger.filters):
            logger.addFilter(QuietPeriodicTasksFilter())
