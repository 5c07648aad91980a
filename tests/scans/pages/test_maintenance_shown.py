"""Maintenance is shown as maintenance: while a window covers an endpoint, the
dashboard, the endpoint page and the public status page say "maintenance" (with the latest
scan's state beside it), not "down"; the status page shows no ongoing incident and no "Some
systems are down" for it. Scans run inside a window neither make nor end an incident."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scans.models import MaintenanceWindow, Scan
from scans.status_pages.incidents import incidents
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import clear_cache
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import GRADE_A, scan_at

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def _clear_cache():
    clear_cache()
    yield
    clear_cache()


def _down_at(endpoint, when) -> Scan:
    scan = scan_at(endpoint, when, GRADE_A)
    Scan.dangerously_unscoped.filter(pk=scan.pk).update(down=True, grade="", points=None,
                                                        uncapped_grade="")
    return scan


def _in_maintenance(world, *, team_wide: bool = False):
    """An endpoint up an hour ago, down since a window began 20 minutes ago."""
    now = timezone.now()
    endpoint = make_endpoint(world.team, name="gpu box", interval_minutes=5)
    scan_at(endpoint, now - 60 * MINUTE, GRADE_A)
    for minutes in (15, 10, 5):
        _down_at(endpoint, now - minutes * MINUTE)
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=None if team_wide else endpoint, name="driver upgrade",
        kind="once", timezone="UTC", starts_at=now - 20 * MINUTE, ends_at=now + 40 * MINUTE)
    return endpoint


def test_the_dashboard_shows_maintenance_not_down(world, owner_client):
    endpoint = _in_maintenance(world)

    body = owner_client.get(f"/teams/{world.team.slug}/").content.decode()

    assert 'data-state="maintenance"' in body and 'data-state="down"' not in body
    assert 'data-state-count="maintenance"' in body and 'data-state-count="down"' not in body
    row = body.split(f'data-endpoint="{endpoint.public_id}"')[1].split("</tr>")[0]
    assert "in maintenance" in row and "driver upgrade" in row
    assert "latest scan: down" in row  # what was measured stays visible beside it


def test_the_endpoint_page_says_maintenance_now(world, owner_client):
    endpoint = _in_maintenance(world, team_wide=True)

    body = owner_client.get(f"/endpoints/{endpoint.public_id}/").content.decode()

    assert 'id="state" data-state="maintenance"' in body
    assert "Now: <span class=\"state state-maintenance\">in maintenance</span>" in body


def test_the_status_page_shows_maintenance_and_no_ongoing_incident(world):
    endpoint = _in_maintenance(world)
    healthy = make_endpoint(world.team, name="healthy")
    scan_at(healthy, timezone.now() - 5 * MINUTE, GRADE_A)
    page = save_settings(page_of(world.team), enabled=True,
                                     slug="acme-status", title="Acme", shown=[(endpoint, ""),
                                                                              (healthy, "")])

    body = Client().get(f"/status/{page.slug}/").content.decode()

    assert 'data-state="maintenance"' in body and 'data-state="down"' not in body
    assert "Some systems are down" not in body
    assert 'data-overall="maintenance"' in body and "Maintenance in progress" in body
    assert "ongoing" not in body and "No incidents in the last 90 days." in body


def test_down_scans_inside_a_past_window_make_no_incident(world):
    now = timezone.now()
    endpoint = make_endpoint(world.team, interval_minutes=5)
    scan_at(endpoint, now - 60 * MINUTE, GRADE_A)
    _down_at(endpoint, now - 50 * MINUTE)
    _down_at(endpoint, now - 45 * MINUTE)
    scan_at(endpoint, now - 30 * MINUTE, GRADE_A)
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=endpoint, name="reboot", kind="once", timezone="UTC",
        starts_at=now - 55 * MINUTE, ends_at=now - 40 * MINUTE)

    assert incidents([endpoint], now - timedelta(days=90), now)[endpoint.pk] == []


def test_an_incident_open_when_a_window_began_ends_there(world):
    now = timezone.now()
    endpoint = make_endpoint(world.team, name="gpu box", interval_minutes=5)
    scan_at(endpoint, now - 60 * MINUTE, GRADE_A)
    for minutes in (30, 25, 20, 5):
        _down_at(endpoint, now - minutes * MINUTE)
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=endpoint, name="emergency fix", kind="once", timezone="UTC",
        starts_at=now - 10 * MINUTE, ends_at=now + 50 * MINUTE)
    page = save_settings(page_of(world.team), enabled=True,
                                     slug="acme-status", title="Acme", shown=[(endpoint, "")])

    body = Client().get(f"/status/{page.slug}/").content.decode()

    assert 'data-state="maintenance"' in body and "Some systems are down" not in body
    assert "Down for 20 min, then maintenance" in body
    assert 'class="incident ongoing"' not in body
