"""The network's periodic tasks are in the site's schedule, declared on the app's config."""

from __future__ import annotations

import pytest
from django.apps import apps
from django_celery_beat.models import PeriodicTask

from common.periodic_tasks import all_periodic_tasks, ensure_periodic_tasks


def test_the_tick_and_the_fold_sweep_are_in_the_schedule():
    tasks = {task: seconds for _, task, seconds in all_periodic_tasks()}
    assert tasks["benchmarks.tasks.network_tick"] == 5
    assert tasks["benchmarks.tasks.sweep_unfolded"] == 30


@pytest.mark.django_db
def test_migrations_write_them_into_the_database():
    ensure_periodic_tasks()
    names = set(PeriodicTask.objects.values_list("task", flat=True))
    assert {"benchmarks.tasks.network_tick", "benchmarks.tasks.sweep_unfolded"} <= names


def test_the_benchmarks_app_leaves_the_scans_list_untouched():
    scans_list = apps.get_app_config("scans").periodic_tasks
    assert not [task for _, task, _ in scans_list if task.startswith("benchmarks.tasks.")]
