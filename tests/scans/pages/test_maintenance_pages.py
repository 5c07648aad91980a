"""The maintenance windows pages: a writer adds, edits and deletes windows
typed in their own timezone; bad input is an error at its field and saves nothing; the endpoint
page lists the current and next windows and its SLO figures name the maintenance time."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scans.models import MaintenanceKind, MaintenanceWindow
from tests.helpers.factories import make_endpoint
from tests.scans.conftest import CAPPED_D, GRADE_A, scan_at

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def _post(client, team, **fields):
    data = {
        "name": "upgrade",
        "endpoint": "",
        "kind": "once",
        "timezone": "Europe/Berlin",
        "starts_at": "2030-01-01T10:00",
        "ends_at": "2030-01-01T12:00",
        **fields,
    }
    return client.post(reverse("maintenance-create", args=[team.slug]), data)


def test_a_one_off_window_is_read_in_its_own_timezone_and_stored_in_utc(world, owner_client):
    endpoint = make_endpoint(world.team, name="gpu box")

    answer = _post(owner_client, world.team, endpoint=str(endpoint.public_id))

    assert answer.status_code == 302
    window = MaintenanceWindow.dangerously_unscoped.get(team=world.team)
    assert window.endpoint == endpoint and window.timezone == "Europe/Berlin"
    assert window.starts_at == datetime(2030, 1, 1, 9, 0, tzinfo=UTC)  # 10:00 CET
    assert window.ends_at == datetime(2030, 1, 1, 11, 0, tzinfo=UTC)
    listing = owner_client.get(reverse("team-maintenance", args=[world.team.slug])).content.decode()
    assert "once, 2030-01-01 10:00 to 12:00 (Europe/Berlin)" in listing


def test_a_weekly_window_is_saved_with_its_days_time_and_duration(world, owner_client):
    answer = _post(
        owner_client,
        world.team,
        kind="weekly",
        weekdays=["0", "3"],
        start_time="02:00",
        duration_minutes="90",
        starts_at="",
        ends_at="",
    )

    assert answer.status_code == 302
    window = MaintenanceWindow.dangerously_unscoped.get(team=world.team)
    assert (window.kind, window.weekdays, window.start_time, window.duration_minutes) == (
        MaintenanceKind.WEEKLY,
        [0, 3],
        time(2, 0),
        90,
    )
    assert window.starts_at is None and window.endpoint is None  # team-wide
    listing = owner_client.get(reverse("team-maintenance", args=[world.team.slug])).content.decode()
    assert "every Monday and Thursday at 02:00 for 1 h 30 min (Europe/Berlin)" in listing


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"ends_at": "2030-01-01T09:00"}, "ends_at", "ends before it starts"),
        ({"ends_at": "2030-01-01T10:00"}, "ends_at", "ends before it starts"),
        (
            {"kind": "weekly", "start_time": "02:00", "duration_minutes": "60"},
            "weekdays",
            "Pick at least one day",
        ),
        (
            {"kind": "weekly", "weekdays": ["1"], "start_time": "02:00", "duration_minutes": "0"},
            "duration_minutes",
            "at least a minute",
        ),
        (
            {"kind": "weekly", "weekdays": ["1"], "start_time": "02:00", "duration_minutes": "-5"},
            "duration_minutes",
            "at least a minute",
        ),
        ({"starts_at": ""}, "starts_at", "Give a date and time"),
    ],
)
def test_bad_input_is_an_error_at_its_field_and_nothing_is_saved(world, owner_client, fields, field, message):
    answer = _post(owner_client, world.team, **fields)

    assert answer.status_code == 400
    errors = answer.context["form"].errors
    assert list(errors) == [field] and message in errors[field][0]
    assert 'data-field="%s"' % field in answer.content.decode()
    assert not MaintenanceWindow.dangerously_unscoped.filter(team=world.team).exists()


def test_a_viewer_reads_the_windows_but_cannot_add_one(world, viewer_client):
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="kernel", starts_at=timezone.now() + HOUR, ends_at=timezone.now() + 2 * HOUR
    )

    listing = viewer_client.get(reverse("team-maintenance", args=[world.team.slug]))
    assert listing.status_code == 200 and "kernel" in listing.content.decode()
    assert "Add a window" not in listing.content.decode()
    assert _post(viewer_client, world.team).status_code == 403


def test_the_endpoint_page_lists_the_current_and_next_windows_and_the_maintenance_time(world, owner_client):
    endpoint = make_endpoint(world.team, name="gpu box", interval_minutes=60)
    now = timezone.now()
    for i, values in enumerate([GRADE_A, CAPPED_D, CAPPED_D, GRADE_A]):
        scan_at(endpoint, now - (4 - i) * HOUR, values)
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, endpoint=endpoint, name="driver update", starts_at=now - 3 * HOUR, ends_at=now + HOUR
    )
    MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="rack move", starts_at=now + 24 * HOUR, ends_at=now + 26 * HOUR
    )

    body = owner_client.get(reverse("endpoint-detail", args=[endpoint.public_id])).content.decode()

    assert "driver update</strong> (now, until" in body
    assert "rack move</strong>: next" in body and "team-wide" in body
    assert "maintenance for 3 h of the 7 days</span>, left out" in body
    # the bad hours were in the window: every covered hour met the targets
    assert 'data-good-share="1.0000"' in body
