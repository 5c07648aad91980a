"""Maintenance windows are bounded where they are typed: a window ends before the calendar does
(in UTC, whatever its zone), starts no earlier than a short grace before now and lasts at most
a documented maximum; the maintenance page says how much time each window has taken out of
availability."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scans import maintenance
from scans.models import MaintenanceKind, MaintenanceWindow
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
LOCAL = "%Y-%m-%dT%H:%M"


@pytest.fixture
def member_client(world) -> Client:
    client = Client()
    client.force_login(world.member)
    return client


def _local(at, zone: str = "UTC") -> str:
    return at.astimezone(ZoneInfo(zone)).strftime(LOCAL)


def _post(client, team, url=None, **fields):
    now = timezone.now()
    data = {
        "name": "upgrade",
        "endpoint": "",
        "kind": "once",
        "timezone": "UTC",
        "starts_at": _local(now + HOUR),
        "ends_at": _local(now + 2 * HOUR),
        **fields,
    }
    return client.post(url or reverse("maintenance-create", args=[team.slug]), data)


def _error(answer, field: str) -> str:
    assert answer.status_code == 400, answer.status_code
    return " ".join(answer.context["form"].errors[field])


def test_a_window_ending_at_the_calendars_end_in_a_zone_behind_utc_is_refused(world, member_client):
    # 23:00 on 31 December 9999 in Honolulu (UTC-10) is past the year 10,000 in UTC.
    answer = _post(
        member_client,
        world.team,
        timezone="Pacific/Honolulu",
        starts_at="9999-12-31T00:00",
        ends_at="9999-12-31T23:00",
    )

    assert "later than" in _error(answer, "starts_at")
    assert not MaintenanceWindow.dangerously_unscoped.filter(team=world.team).exists()
    listing = member_client.get(reverse("team-maintenance", args=[world.team.slug]))
    assert listing.status_code == 200


def test_a_window_starting_years_ago_and_ending_in_2099_is_refused_with_clear_messages(world, member_client):
    answer = _post(member_client, world.team, starts_at="2020-01-01T00:00", ends_at="2099-01-01T00:00")

    assert "earlier than 1 h before now" in _error(answer, "starts_at")
    assert "at most 31 days" in _error(answer, "ends_at")
    assert not MaintenanceWindow.dangerously_unscoped.filter(team=world.team).exists()


def test_a_window_longer_than_the_maximum_is_refused(world, member_client):
    now = timezone.now()
    answer = _post(
        member_client, world.team, starts_at=_local(now + HOUR),
        ends_at=_local(now + HOUR + timedelta(days=32)),
    )

    assert "at most 31 days" in _error(answer, "ends_at")


def test_a_window_that_began_within_the_grace_and_lasts_the_maximum_is_accepted(world, member_client):
    now = timezone.now()
    answer = _post(
        member_client,
        world.team,
        timezone="Europe/Berlin",
        starts_at=_local(now - timedelta(minutes=30), "Europe/Berlin"),
        ends_at=_local(now - timedelta(minutes=30) + timedelta(days=31), "Europe/Berlin"),
    )

    assert answer.status_code == 302
    assert MaintenanceWindow.dangerously_unscoped.filter(team=world.team).count() == 1


def test_a_window_that_began_last_week_can_still_be_renamed_and_shortened(world, member_client):
    now = timezone.now().replace(second=0, microsecond=0)
    window = MaintenanceWindow.dangerously_unscoped.create(  # stored with seconds: shown without
        team=world.team, name="rack move", starts_at=now - timedelta(days=7, seconds=-42),
        ends_at=now + 2 * HOUR,
    )
    url = reverse("maintenance-edit", args=[window.public_id])

    answer = _post(
        member_client, world.team, url=url, name="rack move (2)",
        starts_at=_local(window.starts_at), ends_at=_local(now + HOUR),
    )

    assert answer.status_code == 302
    window.refresh_from_db()
    assert window.name == "rack move (2)" and window.ends_at == now + HOUR


def test_a_window_cannot_be_edited_to_cover_more_of_the_past(world, member_client):
    now = timezone.now().replace(second=0, microsecond=0)
    window = MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="rack move", starts_at=now - timedelta(days=7),
        ends_at=now - timedelta(days=7) + HOUR,
    )
    url = reverse("maintenance-edit", args=[window.public_id])

    earlier = _post(member_client, world.team, url=url,
                    starts_at=_local(now - timedelta(days=8)), ends_at=_local(window.ends_at))
    longer = _post(member_client, world.team, url=url,
                   starts_at=_local(window.starts_at), ends_at=_local(now - timedelta(days=1)))

    assert "earlier than 1 h before now" in _error(earlier, "starts_at")
    assert "earlier than 1 h before now" in _error(longer, "ends_at")
    window.refresh_from_db()
    assert window.ends_at == now - timedelta(days=7) + HOUR


def test_the_maintenance_page_says_how_much_time_each_window_took_out_of_availability(world, member_client):
    now = timezone.now()
    make_endpoint(world.team, name="gpu box")
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="rack move", starts_at=now - timedelta(days=3),
        ends_at=now - timedelta(days=3) + timedelta(hours=3, minutes=12),
    )
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="next week", starts_at=now + timedelta(days=7),
        ends_at=now + timedelta(days=7, hours=1),
    )

    body = member_client.get(reverse("team-maintenance", args=[world.team.slug])).content.decode()

    assert "took 3 h 12 min out of availability in the last 90 days" in body
    assert "took no time out of availability in the last 90 days" in body


def test_the_excluded_time_counts_a_weekly_windows_occurrences_since_it_was_created(world):
    now = timezone.now()
    window = MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="weekly", kind=MaintenanceKind.WEEKLY, weekdays=list(range(7)),
        start_time=(now - 2 * HOUR).time(), duration_minutes=30, timezone="UTC",
        created_at=now - timedelta(days=2, hours=3),
    )

    assert maintenance.excluded(window, now) == timedelta(minutes=90)  # three days' 30 min
