"""Who may apply what: an editor applies endpoints but not channels (owners', admins' and
read-write tokens'), and a refused item changes nothing of the rest."""

from __future__ import annotations

import pytest

from scans.models import Endpoint, NotificationChannel

pytestmark = pytest.mark.django_db


def _config(world) -> dict:
    return {"config": {"team": world.team.slug,
                       "channels": {"ops mail": {"kind": "email"}},
                       "endpoints": {"chat": {"base_url": "http://127.0.0.1:9/v1", "model": "tiny"}}}}


def test_an_editor_may_not_change_channels_and_nothing_is_applied(world, api):
    api.force_authenticate(world.member)
    answer = api.post(f"/api/v1/teams/{world.team.slug}/config/", _config(world), format="json")
    assert answer.status_code == 422
    assert any("channels" in e["message"] and e["item"] == "channels.ops mail"
               for e in answer.json()["errors"])
    assert not Endpoint.dangerously_unscoped.filter(team=world.team, name="chat").exists()
    assert not NotificationChannel.dangerously_unscoped.filter(team=world.team,
                                                              name="ops mail").exists()


def test_an_admin_applies_the_same_file(world, api):
    api.force_authenticate(world.admin)
    answer = api.post(f"/api/v1/teams/{world.team.slug}/config/", _config(world), format="json")
    assert answer.status_code == 200, answer.content
    assert NotificationChannel.dangerously_unscoped.filter(team=world.team, name="ops mail").exists()
