"""The maintenance windows API: list, create, read, update and delete a team's
windows at /api/v1/maintenance-windows/, team-scoped (another team's window is a 404), writes
need a writing role, and a window is held to the same bounds as the page's form, with the
same words (scans/maintenance.py window_errors)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scans.models import MaintenanceWindow
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db

URL = "/api/v1/maintenance-windows/"


def _iso(at) -> str:
    return at.isoformat()


def test_a_writer_creates_lists_updates_and_deletes_a_window(world, api):
    endpoint = make_endpoint(world.team, name="gpu box")
    now = timezone.now()
    token = bearer(world.read_write_token)

    made = api.post(URL, {"name": "driver upgrade", "endpoint": str(endpoint.public_id),
                          "kind": "once", "starts_at": _iso(now + timedelta(minutes=5)),
                          "ends_at": _iso(now + timedelta(minutes=65)), "pause_scans": True},
                    format="json", **token)
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["endpoint"] == str(endpoint.public_id) and body["pause_scans"] is True
    window = MaintenanceWindow.dangerously_unscoped.get(public_id=body["id"])
    assert window.team == world.team and window.endpoint == endpoint

    listed = api.get(URL, **bearer(world.read_only_token)).json()
    assert [w["name"] for w in listed["results"]] == ["driver upgrade"]
    assert listed["results"][0]["description"].startswith("once, ")

    weekly = api.patch(f"{URL}{body['id']}/", {"kind": "weekly", "weekdays": [0, 3],
                                               "start_time": "02:00", "duration_minutes": 90,
                                               "timezone": "Europe/Berlin"},
                       format="json", **token)
    assert weekly.status_code == 200, weekly.content
    window.refresh_from_db()
    assert window.kind == "weekly" and window.starts_at is None and window.weekdays == [0, 3]

    assert api.delete(f"{URL}{body['id']}/", **token).status_code == 204
    assert not MaintenanceWindow.dangerously_unscoped.filter(pk=window.pk).exists()


def test_the_api_holds_a_window_to_the_forms_bounds_with_the_same_words(world, api):
    now = timezone.now()
    answer = api.post(URL, {"name": "forever", "kind": "once",
                            "starts_at": _iso(now - timedelta(days=400)),
                            "ends_at": _iso(now + timedelta(days=400))},
                      format="json", **bearer(world.read_write_token))

    assert answer.status_code == 422
    errors = answer.json()
    assert "earlier than 1 h before now" in errors["starts_at"][0]
    assert "at most 31 days" in errors["ends_at"][0]
    no_day = api.post(URL, {"name": "weekly", "kind": "weekly", "start_time": "02:00",
                            "duration_minutes": 0}, format="json",
                      **bearer(world.read_write_token))
    assert no_day.status_code == 422
    assert no_day.json()["weekdays"] == ["Pick at least one day."]
    assert no_day.json()["duration_minutes"] == ["The window must last at least a minute."]
    assert not MaintenanceWindow.dangerously_unscoped.filter(team=world.team).exists()


def test_a_read_only_token_cannot_write_and_another_team_sees_nothing(world, api):
    now = timezone.now()
    window = MaintenanceWindow.dangerously_unscoped.create(
        team=world.team, name="ours", kind="once", timezone="UTC",
        starts_at=now + timedelta(hours=1), ends_at=now + timedelta(hours=2))
    data = {"name": "x", "kind": "once", "starts_at": _iso(now + timedelta(hours=1)),
            "ends_at": _iso(now + timedelta(hours=2))}

    assert api.post(URL, data, format="json", **bearer(world.read_only_token)).status_code == 403
    assert api.delete(f"{URL}{window.public_id}/",
                      **bearer(world.read_only_token)).status_code == 403
    other = bearer(world.other_team_token)
    assert api.get(f"{URL}{window.public_id}/", **other).status_code == 404
    assert api.get(URL, **other).json()["results"] == []
    # another team's endpoint cannot be named
    theirs = make_endpoint(world.other_team)
    answer = api.post(URL, {**data, "endpoint": str(theirs.public_id)}, format="json",
                      **bearer(world.read_write_token))
    assert answer.status_code == 422 and "endpoint" in answer.json()
