"""The status page API, /api/v1/teams/<slug>/status-page/: read by any role, written by a
writing role through the page's own service (audit-logged), other teams' a 404."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from scans.models import StatusPage
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db


def _url(team) -> str:
    return f"/api/v1/teams/{team.slug}/status-page/"


def test_a_writer_turns_the_page_on_with_chosen_endpoints_and_it_is_logged(world, api):
    chat = make_endpoint(world.team, name="chat")
    body = {"enabled": True, "slug": f"{world.team.slug}-up", "title": "Up?",
            "endpoints": [{"endpoint": str(chat.public_id), "name": "Chat API"}]}

    answer = api.put(_url(world.team), body, format="json", **bearer(world.read_write_token))

    assert answer.status_code == 200, answer.content
    assert answer.json()["endpoints"] == [{"endpoint": str(chat.public_id), "name": "Chat API"}]
    assert answer.json()["url"].endswith(f"/status/{world.team.slug}-up/")
    page = StatusPage.dangerously_unscoped.get(team=world.team)
    assert (page.enabled, page.slug, page.title) == (True, f"{world.team.slug}-up", "Up?")
    assert AuditEntry.objects.for_team(world.team).filter(object_type="status page",
                                                          actor_kind="token").exists()
    read = api.get(_url(world.team), **bearer(world.read_only_token))
    assert read.status_code == 200 and read.json()["title"] == "Up?"


def test_roles_and_teams_are_checked(world, api):
    assert api.patch(_url(world.team), {"enabled": True}, format="json",
                     **bearer(world.read_only_token)).status_code == 403
    assert api.get(_url(world.team), **bearer(world.other_team_token)).status_code == 404
    assert api.patch(_url(world.team), {"enabled": True}, format="json",
                     **bearer(world.other_team_token)).status_code == 404
    assert not StatusPage.dangerously_unscoped.filter(team=world.team, enabled=True).exists()


def test_a_reserved_address_or_another_teams_endpoint_is_refused(world, api):
    foreign = make_endpoint(world.other_team, name="theirs")
    token = bearer(world.read_write_token)
    reserved = api.patch(_url(world.team), {"slug": "admin"}, format="json", **token)
    assert reserved.status_code == 422 and "reserved" in reserved.json()["slug"][0]
    theirs = api.patch(_url(world.team), {"endpoints": [{"endpoint": str(foreign.public_id)}]},
                       format="json", **token)
    assert theirs.status_code == 422 and "endpoints" in theirs.json()
