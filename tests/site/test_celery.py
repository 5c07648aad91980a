"""Celery wiring: the database schedule, the acks_late policy, countdown bounds and a real
worker delivering a task over Redis against the real database."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from accounts.models import Invitation
from common.periodic_tasks import all_periodic_tasks, ensure_periodic_tasks
from tests.conftest import database_url
from tests.helpers import workers
from tokvera_site.celery import CountdownTooLong, app, check_countdown

# Tasks that may be acknowledged late because running them twice is harmless. A task added with
# acks_late=True must be listed here with the reason it is idempotent.
IDEMPOTENT_TASKS = {
    "scans.tasks.delete_expired_invitations": "deletes what is expired; a rerun deletes nothing",
    "scans.tasks.reap_scans": "errors out only scans still unfinished (conditional UPDATE)",
    "scans.tasks.deliver_notification": "claims the delivery row by conditional UPDATE; a rerun "
                                        "of a sent row no-ops (a worker that dies between the "
                                        "send and the mark sends at least once)",
    "scans.tasks.run_scan": "claims the scan by UPDATE … WHERE status='queued'; a rerun no-ops",
    "scans.tasks.prove_pushed_report": "claims the pushed scan by UPDATE … WHERE "
                                       "status='queued'; a rerun no-ops (a proof cut short by "
                                       "a dead worker is reaped when its heartbeat stops)",
    "scans.tasks.prune_reports": "prunes only scans whose report_pruned_at is unset, each batch "
                                 "one transaction; a rerun prunes what is left",
    "scans.tasks.roll_up_scans": "recomputes each touched bucket from its scans (INSERT … ON "
                                 "CONFLICT DO UPDATE); a rerun writes the same rows",
    "scans.tasks.mail_sla_reports": "claims each team's month by conditional UPDATE before "
                                    "its mail goes; a rerun finds it claimed (a worker that "
                                    "dies between the claim and the send mails it never: the "
                                    "claim is given back only on a send error)",
}


@pytest.mark.django_db
def test_periodic_tasks_live_in_the_database():
    names = set(PeriodicTask.objects.values_list("name", flat=True))
    assert {name for name, _, _ in all_periodic_tasks()} <= names


@pytest.mark.django_db
def test_an_admins_edit_to_the_schedule_survives_the_next_migrate():
    task = PeriodicTask.objects.get(name=all_periodic_tasks()[0][0])
    task.enabled = False
    task.save()
    ensure_periodic_tasks()
    task.refresh_from_db()
    assert task.enabled is False


def test_only_idempotent_tasks_acknowledge_late():
    app.loader.import_default_modules()
    late = {name for name, task in app.tasks.items()
            if not name.startswith("celery.") and getattr(task, "acks_late", False)}
    assert late <= set(IDEMPOTENT_TASKS), f"acks_late on tasks not known to be idempotent: {late}"
    assert settings.CELERY_TASK_ACKS_LATE is False


def test_threads_that_send_tasks_share_one_result_backend():
    # Built per thread, it cost each new web thread's first task an entry-point scan.
    import threading

    first, seen = app.backend, []
    threads = [threading.Thread(target=lambda: seen.append(app.backend)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(backend is first for backend in seen)


def test_a_countdown_at_or_past_the_visibility_timeout_is_refused():
    assert check_countdown(60) == 60
    with pytest.raises(CountdownTooLong):
        check_countdown(settings.CELERY_VISIBILITY_TIMEOUT_S)


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_a_task_sent_through_redis():
    expired = Invitation.dangerously_unscoped.create(
        team=_team(), email="old@example.test", role="member", secret_hash="x" * 64,
        expires_at=timezone.now() - timedelta(hours=1),
    )
    env = {
        **os.environ,
        # the worker must use the test database that this test wrote to
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
    }
    app.control.purge()
    worker = workers.start("--pool", "solo", env=env)
    try:
        app.send_task("scans.tasks.delete_expired_invitations")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not Invitation.dangerously_unscoped.filter(pk=expired.pk).exists():
                break
            time.sleep(0.2)
        assert not Invitation.dangerously_unscoped.filter(pk=expired.pk).exists()
    finally:
        workers.stop(worker)


def _team():
    from accounts import teams
    from tests.conftest import make_user

    return teams.create_team("celery-team", "Celery Team", owner=make_user())


def test_the_tasks_services_send_by_name_are_registered_under_those_names():
    """dispatch and pushes send their tasks by name (the task module imports them): a renamed
    task must fail here, not silently in production."""
    from scans.running import dispatch, pushes

    app.loader.import_default_modules()
    assert dispatch.RUN_SCAN_TASK in app.tasks and pushes.PROVE_TASK in app.tasks
