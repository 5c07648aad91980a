"""Names are one line of text: control characters are refused with a
per-field error wherever a name is typed, and alerts go out even for a name stored before the
rule (a line break in an email subject used to raise BadHeaderError and silence them)."""

from __future__ import annotations

import json

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken, Team
from benchmarks.network import hosts
from scans.models import Endpoint
from tests.helpers.factories import make_endpoint, make_scan
from tests.helpers.servers import webhook_receiver
from tests.scans.pages.test_endpoint_form import form_data

pytestmark = pytest.mark.django_db

TWO_LINES = "llama\nBcc: everyone@example.test"


@pytest.mark.parametrize("name", [TWO_LINES, "tab\there", "nul\x00", "del\x7f", "sep\u2028arated"])
def test_the_endpoint_form_refuses_a_name_with_a_control_character(world, name):
    client = Client()
    client.force_login(world.member)
    response = client.post(reverse("endpoint-create", args=[world.team.slug]),
                           form_data(name=name))
    assert response.status_code == 400
    assert "control characters are not allowed" in " ".join(
        response.context["form"].errors["name"])
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()


def test_the_api_refuses_a_name_with_a_newline_on_create_and_update(world, api):
    api.force_login(world.member)
    created = api.post("/api/v1/endpoints/", {
        "team": world.team.slug, "name": TWO_LINES, "base_url": "https://llm.example.test/v1",
        "model": "tiny"}, format="json")
    assert created.status_code == 400
    assert "control characters" in created.json()["name"][0]

    endpoint = make_endpoint(world.team, name="fine")
    updated = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/", {"name": TWO_LINES},
                        format="json")
    assert updated.status_code == 400 and "name" in updated.json()
    endpoint.refresh_from_db()
    assert endpoint.name == "fine"


def test_a_token_label_with_a_newline_is_refused(world):
    client = Client()
    client.force_login(world.owner)
    before = ApiToken.dangerously_unscoped.filter(team=world.team).count()
    response = client.post(reverse("token-create", args=[world.team.slug]),
                           {"scope": "read-only", "name": "ci\nbot"}, follow=True)
    assert "Token name: Use one line of text" in response.content.decode()
    assert ApiToken.dangerously_unscoped.filter(team=world.team).count() == before


def test_a_team_name_with_a_newline_is_refused_by_the_command(db):
    with pytest.raises(CommandError, match="Team name: Use one line of text"):
        call_command("createteam", "two-lines", "--owner", "o@example.test",
                     "--name", "Acme\nInc")
    assert not Team.dangerously_unscoped.filter(slug="two-lines").exists()


def test_a_host_name_with_a_newline_is_refused(world):
    with pytest.raises(hosts.HostError, match="host name: Use one line of text"):
        hosts.create_host(world.team, "box\n1")


def test_an_alert_for_a_name_stored_with_a_newline_still_emails_and_calls_the_webhook(
        world, settings, eager_tasks, django_capture_on_commit_callbacks):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with webhook_receiver() as (url, received):
        endpoint = make_endpoint(world.team, name=TWO_LINES, webhook_url=url)
        scan = make_scan(endpoint)
        mail.outbox.clear()
        from scans.tasks import send_alert

        with django_capture_on_commit_callbacks(execute=True):  # its deliveries, once committed
            send_alert.delay(endpoint.pk, scan.pk, "below_floor", "grade F is below the floor B")
    [message] = mail.outbox
    assert message.subject == "[Tokvera] llama Bcc: everyone@example.test: below floor"
    assert message.to == [world.owner.email, world.admin.email] or set(message.to) == {
        world.owner.email, world.admin.email}
    [payload] = [json.loads(body) for _, body in received]
    assert payload["event"] == "below_floor" and payload["endpoint"]["name"] == TWO_LINES


# Issue 19, finding 7: names that display reversed or reordered ("Trojan Source" controls).
BIDI = ["evil\u202egnp.exe", "mark\u200eed", "rl\u200fm", "iso\u2066late\u2069", "fsi\u2068x",
        "alm\u061cx", "embed\u202bx\u202c"]


@pytest.mark.parametrize("name", BIDI)
def test_the_endpoint_form_refuses_a_name_that_changes_display_direction(world, name):
    client = Client()
    client.force_login(world.member)
    response = client.post(reverse("endpoint-create", args=[world.team.slug]),
                           form_data(name=name))
    assert response.status_code == 400
    [error] = response.context["form"].errors["name"]
    assert "change the display direction" in error and "U+" in error
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()


def test_the_api_refuses_a_right_to_left_override_on_create_and_update(world, api):
    api.force_login(world.member)
    created = api.post("/api/v1/endpoints/", {
        "team": world.team.slug, "name": BIDI[0], "base_url": "https://llm.example.test/v1",
        "model": "tiny"}, format="json")
    assert created.status_code == 400
    assert "U+202E at position 5" in created.json()["name"][0]

    endpoint = make_endpoint(world.team, name="fine")
    updated = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/", {"name": BIDI[3]},
                        format="json")
    assert updated.status_code == 400 and "display direction" in updated.json()["name"][0]
    endpoint.refresh_from_db()
    assert endpoint.name == "fine"


def test_team_token_and_host_names_refuse_bidirectional_controls(world):
    with pytest.raises(CommandError, match="Team name: Use plain text"):
        call_command("createteam", "reversed", "--owner", "o@example.test",
                     "--name", "Acme\u202eInc")
    client = Client()
    client.force_login(world.owner)
    response = client.post(reverse("token-create", args=[world.team.slug]),
                           {"scope": "read-only", "name": "ci\u2067bot"}, follow=True)
    assert "Token name: Use plain text" in response.content.decode()
    with pytest.raises(hosts.HostError, match="host name: Use plain text"):
        hosts.create_host(world.team, "box\u200f1")


def test_emoji_sequences_and_other_scripts_are_still_names(world, api):
    api.force_login(world.member)
    for name in ("👩\u200d💻 team box", "نموذج عربي", "מודל"):
        created = api.post("/api/v1/endpoints/", {
            "team": world.team.slug, "name": name, "base_url": "https://llm.example.test/v1",
            "model": "tiny"}, format="json")
        assert created.status_code == 201, created.json()


def test_an_alert_subject_drops_the_direction_controls_of_a_name_stored_before_the_rule(
        world, eager_tasks, django_capture_on_commit_callbacks):
    endpoint = make_endpoint(world.team, name="box\u202eFDP")
    scan = make_scan(endpoint)
    mail.outbox.clear()
    from scans.tasks import send_alert

    with django_capture_on_commit_callbacks(execute=True):  # its deliveries, once committed
        send_alert.delay(endpoint.pk, scan.pk, "below_floor", "grade F is below the floor B")
    [message] = mail.outbox
    assert message.subject == "[Tokvera] boxFDP: below floor"
