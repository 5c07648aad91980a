"""Issue 19, finding 2: a team has at most TEAM_MAX_ENDPOINTS endpoints (a token could make
endpoints without limit, each with its own push limit), checked on the API and on the page; and
finding 4: the endpoint form offers accepts_pushes, off by default. Real PostgreSQL."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from scans.models import Endpoint
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.scans.pages.test_endpoint_form import form_data

pytestmark = pytest.mark.django_db


def _create(api, world):
    return api.post(reverse("api-endpoint-list"),
                    {"name": "one more", "base_url": "http://127.0.0.1:8080/v1", "model": "tiny",
                     "levels": [1, 4]}, format="json", **bearer(world.read_write_token))


def test_the_api_refuses_an_endpoint_past_the_teams_cap(world, api):
    with override_settings(TEAM_MAX_ENDPOINTS=2):
        assert _create(api, world).status_code == 201
        assert _create(api, world).status_code == 201
        refused = _create(api, world)
        elsewhere = api.post(reverse("api-endpoint-list"),
                             {"name": "theirs", "base_url": "http://127.0.0.1:8080/v1",
                              "model": "tiny"}, format="json", **bearer(world.other_team_token))
    assert refused.status_code == 400
    assert refused.json()["team"] == [
        "this team already has 2 endpoints, the most one team may have (TEAM_MAX_ENDPOINTS); "
        "delete one before adding another"]
    assert Endpoint.dangerously_unscoped.filter(team=world.team).count() == 2
    assert elsewhere.status_code == 201  # the cap is per team


def test_the_new_endpoint_page_refuses_an_endpoint_past_the_teams_cap(world):
    make_endpoint(world.team, name="first")
    client = Client()
    client.force_login(world.member)
    with override_settings(TEAM_MAX_ENDPOINTS=1):
        response = client.post(reverse("endpoint-create", args=[world.team.slug]),
                               form_data(name="second"))
        assert response.status_code == 400
        assert ("This team already has 1 endpoints, the most one team may have "
                "(TEAM_MAX_ENDPOINTS)") in response.content.decode()
        # editing an existing endpoint at the cap is still allowed
        endpoint = Endpoint.dangerously_unscoped.get(team=world.team)
        edited = client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                             form_data(name="renamed"))
        assert edited.status_code == 302
    assert list(Endpoint.dangerously_unscoped.filter(team=world.team)
                .values_list("name", flat=True)) == ["renamed"]


def test_the_endpoint_form_offers_accepts_pushes_off_by_default(world):
    client = Client()
    client.force_login(world.member)
    page = client.get(reverse("endpoint-create", args=[world.team.slug])).content.decode()
    assert 'name="accepts_pushes"' in page and "Also accept pushed reports" in page
    client.post(reverse("endpoint-create", args=[world.team.slug]), form_data(name="off"))
    client.post(reverse("endpoint-create", args=[world.team.slug]),
                form_data(name="on", accepts_pushes="on"))
    assert dict(Endpoint.dangerously_unscoped.filter(team=world.team)
                .values_list("name", "accepts_pushes")) == {"off": False, "on": True}
