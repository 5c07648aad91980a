"""The periodic tasks the site needs, written into django-celery-beat's tables.

Each app declares its own as `periodic_tasks` on its AppConfig: (name shown in the admin,
task, every N seconds). Rows are created when missing and never overwritten, so an admin's
edits (interval, enabled) survive every deploy. The site's app config runs
`ensure_periodic_tasks` after every migrate.
"""

from __future__ import annotations

from typing import Any


def all_periodic_tasks() -> list[tuple[str, str, int]]:
    """Each installed app's `AppConfig.periodic_tasks`, in app order."""
    from django.apps import apps

    entries: list[tuple[str, str, int]] = []
    for config in apps.get_app_configs():
        entries.extend(e for e in getattr(config, "periodic_tasks", ()) if e not in entries)
    return entries


def ensure_periodic_tasks(**_kwargs: Any) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    for name, task, seconds in all_periodic_tasks():
        if PeriodicTask.objects.filter(name=name).exists():
            continue
        interval, _ = IntervalSchedule.objects.get_or_create(
            every=seconds, period=IntervalSchedule.SECONDS
        )
        PeriodicTask.objects.create(name=name, task=task, interval=interval)
