"""The Django admin shows one time format ("2026-12-02 06:08 UTC", in the viewer's zone) and
figures rounded with their unit, in its lists and on the host page: no Django
default dates ("Dec. 2, 2026, 6:08 a.m.") beside our own, no raw floats."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import teams
from accounts.models import ApiToken
from benchmarks.models import AuditEntry, Job
from tests.conftest import make_user
from tests.helpers.network import make_catalog, make_host, make_job

pytestmark = pytest.mark.django_db

ONE_FORMAT = re.compile(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2} [A-Z]{2,5}\b")
DJANGO_DEFAULT = re.compile(r"\b(?:Jan|Feb|March|April|May|June|July|Aug|Sept|Oct|Nov|Dec)\.? \d{1,2}, "
                            r"\d{4}|\b[ap]\.m\.|\bmidnight\b|\bnoon\b")


@pytest.fixture
def staff() -> Client:
    user = make_user("site-admin")
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def _page(staff, name, *args) -> str:
    response = staff.get(reverse(name, args=args))
    assert response.status_code == 200
    body = response.content.decode()
    main = body[body.index('id="content"'):]  # the page itself, not the admin's header
    return main


def test_admin_lists_and_the_host_page_show_one_time_format_and_figures_with_units(staff):
    owner = make_user("owner")
    team = teams.create_team("acme-admin", "Acme", owner=owner)
    token, _secret = teams.issue_token(team, "read-only")
    model = make_catalog("tiny-q4", display_name="Tiny", quant="q4", context_len=32768)
    host = make_host(team, "gpu-box", models=[model.pk], ttft=321.0449, tps=45.5512,
                     gpu="RTX 4090", now=timezone.now())
    host.reputation = 0.734512
    host.last_assigned_at = timezone.now() - timedelta(minutes=5)
    host.save()
    job = make_job(team, model.pk, host=host, now=timezone.now(), settled_ago=timedelta(minutes=1))
    Job.dangerously_unscoped.filter(pk=job.pk).update(ttft_ms=187.25)
    AuditEntry.objects.create(actor_label="site-admin", action="edit", target_type="host",
                              target_id=str(host.pk), target_label="gpu-box", changes={})

    token_pk = token.pk
    ApiToken.objects.for_team(team).filter(pk=token_pk).update(last_used_at=timezone.now())
    pages = {
        name: _page(staff, name, *args) for name, args in [
            ("admin:accounts_team_changelist", ()),
            ("admin:accounts_membership_changelist", ()),
            ("admin:accounts_apitoken_changelist", ()),
            # a change page's read-only times (FORMAT_MODULE_PATH), not only the lists'
            ("admin:accounts_apitoken_change", (token_pk,)),
            ("admin:benchmarks_host_changelist", ()),
            ("admin:benchmarks_host_change", (host.pk,)),
            ("admin:benchmarks_job_changelist", ()),
            ("admin:benchmarks_auditentry_changelist", ()),
            ("admin:benchmarks_catalogmodel_changelist", ()),
        ]
    }
    for name, body in pages.items():
        assert ONE_FORMAT.search(body) or name.endswith("catalogmodel_changelist"), name
        assert not DJANGO_DEFAULT.search(body), (name, DJANGO_DEFAULT.search(body))
    hosts, host_page = pages["admin:benchmarks_host_changelist"], pages["admin:benchmarks_host_change"]
    for body in (hosts, host_page):
        assert "321 ms" in body and "45.6 tokens/s" in body and "0.735" in body
        assert "321.04" not in body and "45.55" not in body and "0.7345" not in body
    assert "24,576 MB" in host_page  # GPU memory
    assert "187 ms" in host_page and "187.25" not in host_page  # its recent jobs
    assert "32,768 tokens" in pages["admin:benchmarks_catalogmodel_changelist"]
