"""The network's periodic tasks are in the site's schedule."""

from __future__ import annotations

import pytest
from django_celery_beat.models import PeriodicTask

from scans.schedules import PERIODIC_TASKS, ensure_periodic_tasks


def test_the_tick_and_the_fold_sweep_are_in_the_schedule():
    tasks = {task: seconds for _, task, seconds in PERIODIC_TASKS}
    assert tasks["benchmarks.tasks.network_tick"] == 5
    assert tasks["benchmarks.tasks.sweep_unfolded"] == 30


@pytest.mark.django_db
def test_migrations_write_them_into_the_database():
    ensure_periodic_tasks()
    names = set(PeriodicTask.objects.values_list("task", flat=True))
    assert {"benchmarks.tasks.network_tick", "benchmarks.tasks.sweep_unfolded"} <= names
