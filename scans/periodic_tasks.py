"""The periodic tasks the site needs, written into django-celery-beat's tables.

Rows are created when missing and never overwritten, so an admin's edits (interval, enabled)
survive every deploy. Other apps declare theirs as `periodic_tasks` on their AppConfig
(see all_periodic_tasks); nothing edits this module's list from outside.
"""

from __future__ import annotations

PERIODIC_TASKS: list[tuple[str, str, int]] = [
    # (name shown in the admin, task, every N seconds)
    ("Delete expired invitations", "scans.tasks.delete_expired_invitations", 3600),
    ("Enqueue due scans", "scans.tasks.enqueue_due_scans", 60),
    ("Reap dead scans", "scans.tasks.reap_scans", 60),
    ("Deliver due notifications", "scans.tasks.deliver_due_notifications", 60),
    ("Prune full reports past their retention", "scans.tasks.prune_reports", 3600),
    ("Roll up scans for long chart ranges", "scans.tasks.roll_up_scans", 300),
]


def all_periodic_tasks() -> list[tuple[str, str, int]]:
    """PERIODIC_TASKS, then each installed app's `AppConfig.periodic_tasks`, in app order."""
    from django.apps import apps

    entries = list(PERIODIC_TASKS)
    for config in apps.get_app_configs():
        entries.extend(e for e in getattr(config, "periodic_tasks", ()) if e not in entries)
    return entries


def ensure_periodic_tasks(**_kwargs) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    for name, task, seconds in all_periodic_tasks():
        if PeriodicTask.objects.filter(name=name).exists():
            continue
        interval, _ = IntervalSchedule.objects.get_or_create(
            every=seconds, period=IntervalSchedule.SECONDS
        )
        PeriodicTask.objects.create(name=name, task=task, interval=interval)
