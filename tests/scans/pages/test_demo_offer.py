"""An empty dashboard offers the run command's demo target in one click, where there is one."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scans.grader import DEMO_MODEL_ID
from scans.models import Endpoint
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db

DEMO = "http://127.0.0.1:8190/v1"


def _dashboard(client, world) -> str:
    return client.get(reverse("team-dashboard", args=[world.team.slug])).content.decode()


def test_an_empty_dashboard_adds_the_demo_target_in_one_click(world, owner_client, settings):
    settings.DEMO_TARGET_URL = DEMO
    assert "data-demo-offer" in _dashboard(owner_client, world)
    assert DEMO in _dashboard(owner_client, world)

    answer = owner_client.post(reverse("team-demo-endpoint", args=[world.team.slug]))

    demo = Endpoint.dangerously_unscoped.get(team=world.team)
    assert answer.status_code == 302
    assert answer["Location"] == reverse("endpoint-detail", args=[demo.public_id])
    assert (demo.name, demo.base_url, demo.model) == ("Demo target", DEMO, DEMO_MODEL_ID)
    assert (demo.levels, demo.interval_minutes) == ([1, 4, 16], 5)  # the form's defaults
    assert demo.next_scan_at is not None  # due at the next beat
    # A second click adds nothing, and the offer is gone.
    owner_client.post(reverse("team-demo-endpoint", args=[world.team.slug]))
    assert Endpoint.dangerously_unscoped.filter(team=world.team).count() == 1
    assert "data-demo-offer" not in _dashboard(owner_client, world)


def test_no_offer_without_a_demo_target_or_for_a_viewer(world, owner_client, settings, client):
    settings.DEMO_TARGET_URL = ""
    assert "data-demo-offer" not in _dashboard(owner_client, world)
    assert owner_client.post(reverse("team-demo-endpoint",
                                     args=[world.team.slug])).status_code == 404
    settings.DEMO_TARGET_URL = DEMO
    client.force_login(world.viewer)
    assert "data-demo-offer" not in _dashboard(client, world)
    assert client.post(reverse("team-demo-endpoint", args=[world.team.slug])).status_code == 403
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()


def test_a_team_with_endpoints_is_not_offered_it(world, owner_client, settings):
    settings.DEMO_TARGET_URL = DEMO
    make_endpoint(world.team)
    assert "data-demo-offer" not in _dashboard(owner_client, world)
