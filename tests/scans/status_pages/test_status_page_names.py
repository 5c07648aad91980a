"""What the public status page shows of a team's words (its title, each endpoint's name on it)
reads as it is written: a bidirectional control (an override, embedding, isolate or mark) is
refused where the name is typed, with a clear error at its field, as in every other name; one
stored before the rule is dropped from the public page."""

from __future__ import annotations

import pytest
from django.test import Client

from scans.models import StatusPage, StatusPageEndpoint
from scans.status_pages.settings import page_of, save_settings
from tests.conftest import clear_cache
from tests.helpers.factories import make_endpoint

pytestmark = pytest.mark.django_db

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "Acme\u202etsil" shows as "Acmelist" reversed


@pytest.fixture(autouse=True)
def _clear_cache():
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def owner_client(world) -> Client:
    client = Client()
    client.force_login(world.owner)
    return client


@pytest.mark.parametrize("char", ["\u202a", "\u202e", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c"])
def test_a_title_with_a_bidi_control_is_refused_at_its_field_and_nothing_is_saved(world, owner_client, char):
    endpoint = make_endpoint(world.team, name="box one")
    url = f"/teams/{world.team.slug}/status-page/"

    response = owner_client.post(
        url, {"enabled": "on", "slug": "acme-status", "title": f"Acme{char}status",
              f"show_{endpoint.public_id}": "on"}
    )

    assert response.status_code == 400
    says = f"change the display direction are not allowed (found U+{ord(char):04X}"
    assert says in response.content.decode()
    page = StatusPage.dangerously_unscoped.get(team=world.team)
    assert not page.enabled and RLO not in page.title


def test_a_display_name_with_a_bidi_override_is_refused_at_its_field(world, owner_client):
    endpoint = make_endpoint(world.team, name="box one")
    url = f"/teams/{world.team.slug}/status-page/"

    response = owner_client.post(
        url, {"enabled": "on", "slug": "acme-status", "title": "Acme status",
              f"show_{endpoint.public_id}": "on", f"name_{endpoint.public_id}": f"API{RLO}1v"}
    )

    assert response.status_code == 400
    assert "found U+202E at position 4" in response.content.decode()
    assert not StatusPageEndpoint.objects.for_team(world.team).exists()


def test_names_stored_before_the_rule_show_without_their_bidi_controls(world):
    endpoint = make_endpoint(world.team, name="box one")
    page = page_of(world.team)
    save_settings(page, enabled=True, slug="acme-status", title="Acme status",
                              shown=[(endpoint, "Public API")])
    StatusPage.dangerously_unscoped.filter(pk=page.pk).update(title=f"Acme{RLO}sutats")
    StatusPageEndpoint.dangerously_unscoped.filter(status_page=page).update(display_name=f"API{RLO}1v")

    body = Client().get("/status/acme-status/").content.decode()

    assert RLO not in body
    assert "Acmesutats" in body and "API1v" in body
