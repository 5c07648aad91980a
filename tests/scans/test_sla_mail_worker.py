"""The monthly SLA mail as the beat sends it: the task by its name, to a real Celery worker
(Redis broker, the real database, mail written by Django's file backend). Sent twice, as a
retried or doubled beat would, it mails the owners once, with the PDF and the CSV."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from accounts.models import Team
from tests.helpers import workers
from tests.helpers.factories import make_endpoint
from tests.helpers.processes import wait_for
from tests.helpers.workers import stop, worker_env
from tokvera_site.celery import app

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_the_beats_monthly_task_mails_the_owners_once_from_a_worker(world, tmp_path):
    app.control.purge()
    mail = tmp_path / "mail"
    mail.mkdir()
    make_endpoint(world.team, name="chat")
    Team.dangerously_unscoped.filter(pk=world.team.pk).update(sla_report_mail=True)
    worker = workers.start(env=worker_env(DJANGO_SETTINGS_MODULE="tests.helpers.mail_capture_settings",
                                          TOKVERA_TEST_MAIL_DIR=str(mail)))
    try:
        for _ in range(2):
            app.send_task("scans.tasks.mail_sla_reports")
        wait_for(lambda: list(mail.glob("*.log")), 60, "the SLA mail")
        # Both passes are done once the month is claimed and a moment has passed.
        wait_for(lambda: Team.dangerously_unscoped.get(pk=world.team.pk).sla_report_mailed_for,
                 30, "the month claimed")
        time.sleep(3)
    finally:
        stop(worker)
    (sent,) = [p.read_text() for p in Path(mail).glob("*.log")]
    assert f"To: {world.owner.email}" in sent and "SLA report" in sent
    assert "application/pdf" in sent and "text/csv" in sent
