"""A new endpoint's page says once what is happening ("First scan running, about 60 s") instead
of "no scan yet" in every chart section; once a scan has finished, the charts take its place."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import Scan, ScanStatus
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at

pytestmark = pytest.mark.django_db


def _page(client, endpoint) -> str:
    return client.get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()


def test_a_new_endpoint_has_one_empty_state_instead_of_an_empty_chart_per_section(world, owner_client):
    endpoint = make_endpoint(world.team, name="brand new")

    page = _page(owner_client, endpoint)

    assert 'data-first-scan="none"' in page and "First scan coming" in page
    assert "no scan yet in the last" not in page
    assert 'id="grades"' not in page and 'id="checks"' not in page


def test_a_running_first_scan_says_so_with_the_teams_usual_duration_and_a_live_link(world, owner_client):
    older = make_endpoint(world.team, name="scanned before")
    for hours in (3, 2, 1):  # the factory's scans take one minute each
        scan_at(older, timezone.now() - timedelta(hours=hours), GRADE_A)
    endpoint = make_endpoint(world.team, name="brand new")
    started = timezone.now() - timedelta(seconds=20)
    running = Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual", status=ScanStatus.RUNNING)
    Scan.dangerously_unscoped.filter(pk=running.pk).update(started_at=started)

    page = _page(owner_client, endpoint)

    assert 'data-first-scan="running"' in page
    assert "First scan running, about 60 s" in page
    assert reverse("scan-detail", args=[running.public_id]) in page
    assert "no scan yet in the last" not in page


def test_another_teams_scans_do_not_set_the_estimate(world, owner_client):
    theirs = make_endpoint(world.other_team, name="theirs")
    scan_at(theirs, timezone.now() - timedelta(hours=1), GRADE_A)
    endpoint = make_endpoint(world.team, name="brand new")
    Scan.dangerously_unscoped.create(endpoint=endpoint, trigger="manual")

    page = _page(owner_client, endpoint)

    assert 'data-first-scan="queued"' in page and "First scan queued" in page
    assert (
        "about"
        not in page[page.index('id="first-scan"') : page.index("</section>", page.index('id="first-scan"'))]
    )


def test_once_a_scan_finished_the_charts_replace_the_empty_state(world, owner_client):
    endpoint = make_endpoint(world.team, name="scanned")
    scan_at(endpoint, timezone.now() - timedelta(minutes=5), GRADE_A)

    page = _page(owner_client, endpoint)

    assert 'id="first-scan"' not in page
    assert 'id="grades"' in page and 'id="checks"' in page
