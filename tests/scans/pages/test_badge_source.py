"""Badges and the endpoint page say whether the latest grade was pushed or measured by the
site, and a team can choose that its badges show site-measured grades only (issue 10,
finding 2). The pushed grade arrives through the real upload API."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Team
from tests.conftest import bearer
from tests.helpers.factories import measured_report
from tests.scans.conftest import GRADE_B, scan_at

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_tasks")]


def _badge(endpoint):
    svg = Client().get(reverse("badge-svg", args=[endpoint.badge_key]))
    shield = Client().get(reverse("badge-json", args=[endpoint.badge_key])).json()
    root = ET.fromstring(svg.content)  # noqa: S314 - our own output
    return root.get("data-source"), root.get("data-grade"), shield["message"]


def _push_an_a(world, api, endpoint):
    # A scheduled endpoint takes pushes only with accepts_pushes, and only reports measured at
    # its own origin; the proof runs in-process here (eager tasks).
    type(endpoint).dangerously_unscoped.filter(pk=endpoint.pk).update(accepts_pushes=True)
    report = measured_report()
    report["target"]["base_url"] = endpoint.base_url
    url = reverse("api-endpoint-reports", kwargs={"public_id": endpoint.public_id})
    response = api.post(url, data=json.dumps(report), content_type="application/json",
                        **bearer(world.read_write_token))
    assert response.status_code == 202
    scan = api.get(response["Location"], **bearer(world.read_write_token)).json()
    assert (scan["status"], scan["grade"]) == ("succeeded", "A")



@pytest.fixture
def measured_then_pushed(world, api, endpoint):
    scan_at(endpoint, timezone.now() - timedelta(hours=1), GRADE_B)  # the site's own scan
    _push_an_a(world, api, endpoint)
    return endpoint


def test_a_pushed_latest_grade_says_pushed_on_the_badge_and_the_endpoint_page(
        measured_then_pushed, owner_client):
    assert _badge(measured_then_pushed) == ("pushed", "A", "A (pushed)")
    page = owner_client.get(reverse("endpoint-detail", args=[measured_then_pushed.public_id]))
    assert 'data-latest-source="pushed"' in page.content.decode()


def test_a_site_measured_grade_carries_no_pushed_mark(world, endpoint, owner_client):
    scan_at(endpoint, timezone.now() - timedelta(hours=1), GRADE_B)
    assert _badge(endpoint) == ("site", "B", "B")
    page = owner_client.get(reverse("endpoint-detail", args=[endpoint.public_id]))
    assert 'data-latest-source="site"' in page.content.decode()


def test_a_team_that_chose_site_measured_badges_shows_the_sites_grade_not_the_pushed_one(
        world, measured_then_pushed, owner_client):
    response = owner_client.post(reverse("team-settings", args=[world.team.slug]),
                                 {"badge_site_measured_only": "on"})
    assert response.status_code == 302
    assert _badge(measured_then_pushed) == ("site", "B", "B")


def test_site_measured_badges_with_only_pushed_grades_show_no_grade(world, api, endpoint):
    Team.dangerously_unscoped.filter(pk=world.team.pk).update(badge_site_measured_only=True)
    _push_an_a(world, api, endpoint)
    assert _badge(endpoint) == ("none", "none", "no grade")


def test_only_owners_change_the_badge_setting_on_the_page_and_in_the_api(world, api):
    url = reverse("team-settings", args=[world.team.slug])
    member = Client()
    member.force_login(world.member)
    assert 'disabled' in member.get(url).content.decode()
    assert member.post(url, {"badge_site_measured_only": "on"}).status_code == 403
    detail = f"/api/v1/teams/{world.team.slug}/"
    assert api.patch(detail, {"badge_site_measured_only": True}, format="json",
                     **bearer(world.read_write_token)).status_code == 403
    assert not Team.dangerously_unscoped.get(pk=world.team.pk).badge_site_measured_only
    admin = Client()
    admin.force_login(world.admin)
    assert admin.post(url, {"badge_site_measured_only": "on"}).status_code == 403
    owner = Client()
    owner.force_login(world.owner)
    assert owner.post(url, {"badge_site_measured_only": "on"}).status_code == 302
    assert Team.dangerously_unscoped.get(pk=world.team.pk).badge_site_measured_only
    api.force_authenticate(world.owner)
    response = api.patch(detail, {"badge_site_measured_only": False}, format="json")
    assert response.status_code == 200 and response.json()["badge_site_measured_only"] is False
