"""The periodic tasks the site needs, written into django-celery-beat's tables.

Rows are created when missing and never overwritten, so an admin's edits (interval, enabled)
survive every deploy. Other apps add their entries to PERIODIC_TASKS.
"""

from __future__ import annotations

PERIODIC_TASKS: list[tuple[str, str, int]] = [
    # (name shown in the admin, task, every N seconds)
    ("Delete expired invitations", "scans.tasks.delete_expired_invitations", 3600),
    ("Enqueue due scans", "scans.tasks.enqueue_due_scans", 60),
    ("Reap dead scans", "scans.tasks.reap_scans", 60),
    # Rebuilt a little before the cached snapshot (300 s) lapses (benchmarks/public_views.py).
    ("Public benchmarks: rebuild the snapshot", "benchmarks.public_tasks.refresh_public_benchmarks", 240),
]


def ensure_periodic_tasks(**_kwargs) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    for name, task, seconds in PERIODIC_TASKS:
        if PeriodicTask.objects.filter(name=name).exists():
            continue
        interval, _ = IntervalSchedule.objects.get_or_create(
            every=seconds, period=IntervalSchedule.SECONDS
        )
        PeriodicTask.objects.create(name=name, task=task, interval=interval)
