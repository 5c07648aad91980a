"""The owners of a team that asks for it get the last whole month's SLA report by mail (PDF and
CSV attached) once the new month begins: once per month however often the pass runs, never a
team that did not ask, never to its viewers, never another team's endpoints."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.urls import reverse

from accounts.models import Team
from scans import sla
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at

pytestmark = pytest.mark.django_db

DEC_1 = datetime(2026, 12, 1, 6, tzinfo=UTC)


def test_a_team_that_asks_gets_last_month_once_its_owners_only(world):
    ours = make_endpoint(world.team, name="chat")
    theirs = make_endpoint(world.other_team, name="globex secret model")
    for endpoint in (ours, theirs):
        scan_at(endpoint, datetime(2026, 11, 10, tzinfo=UTC), GRADE_A)
    Team.dangerously_unscoped.filter(pk=world.team.pk).update(sla_report_mail=True)

    assert sla.mail_due_reports(DEC_1) == 1
    assert sla.mail_due_reports(DEC_1 + timedelta(hours=1)) == 0  # the next pass: done

    (message,) = mail.outbox
    assert message.to == [world.owner.email]  # owners, not admins, members or viewers
    assert message.subject == f"SLA report: {world.team.name}, November 2026"
    assert "chat: 100.0 % available" in message.body
    assert f"{reverse('team-sla', args=[world.team.slug])}?month=2026-11" in message.body
    (pdf_name, pdf, pdf_type), (csv_name, text, csv_type) = message.attachments
    assert (pdf_name, pdf_type) == (f"sla-{world.team.slug}-2026-11.pdf", "application/pdf")
    assert pdf.startswith(b"%PDF-")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["endpoint"] for r in rows] == ["chat", f"{world.team.name} (team)"]
    assert "globex" not in message.body + text  # another team's endpoints stay out

    # January: December's report goes out in turn.
    assert sla.mail_due_reports(datetime(2027, 1, 1, 6, tzinfo=UTC)) == 1
    assert mail.outbox[-1].subject.endswith("December 2026")


def test_the_owners_turn_it_on_in_the_team_settings(world, owner_client, viewer_client):
    url = reverse("team-settings", args=[world.team.slug])
    assert 'name="sla_report_mail"' in owner_client.get(url).content.decode()
    viewer_client.post(url, {"sla_report_mail": "on"})
    assert not Team.dangerously_unscoped.get(pk=world.team.pk).sla_report_mail
    owner_client.post(url, {"sla_report_mail": "on"})
    assert Team.dangerously_unscoped.get(pk=world.team.pk).sla_report_mail
    assert sla.mail_due_reports(DEC_1) == 1
    Team.dangerously_unscoped.filter(pk=world.other_team.pk).update(sla_report_mail=False)
    assert len(mail.outbox) == 1  # the other team never asked


def test_the_pass_is_a_periodic_task():
    from common.periodic_tasks import all_periodic_tasks

    assert ("Mail monthly SLA reports", "scans.tasks.mail_sla_reports", 3600) in (
        all_periodic_tasks())
