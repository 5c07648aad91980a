"""The channel form keeps the URL a user typed when it is refused (only in that same answer,
never on a later page), and a test message looks like a real alert (endpoint, state, cause,
link) while saying it is a test. A real loopback receiver takes the test webhook."""

from __future__ import annotations

import json

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

from scans.models import NotificationChannel
from scans.notify.channels import service
from tests.helpers.factories import make_endpoint
from tests.helpers.servers import webhook_receiver

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_refused_url_is_shown_again_in_that_answer_only(world, settings):
    settings.OUTBOUND_ALLOW = []
    admin = _client(world.admin)
    typed = "https://discord.com/api/webhooks/1234/abcd-typo"
    page = admin.post(
        reverse("channel-create", args=[world.team.slug]),
        {"kind": "slack", "name": "ops", "url": typed, "enabled": "on"},
    )
    assert page.status_code == 400
    assert f'value="{typed}"' in page.content.decode()
    again = admin.get(reverse("channel-create", args=[world.team.slug]))
    assert typed not in again.content.decode()


def test_a_test_message_reads_like_an_alert_and_says_it_is_a_test(world, settings, eager_tasks):
    settings.OUTBOUND_ALLOW = ["loopback"]
    owner = _client(world.owner)
    endpoint = make_endpoint(world.team, name="llama-prod")
    email = NotificationChannel.dangerously_unscoped.get(team=world.team, name=service.EMAIL_CHANNEL_NAME)
    with webhook_receiver() as (url, received):
        owner.post(
            reverse("channel-create", args=[world.team.slug]),
            {"kind": "webhook", "name": "hook", "url": url, "enabled": "on"},
        )
        hook = NotificationChannel.dangerously_unscoped.get(team=world.team, name="hook")
        owner.post(reverse("channel-test", args=[hook.public_id]))
        owner.post(reverse("channel-test", args=[email.public_id]))
    ((_, body),) = received
    sent = json.loads(body)
    assert sent["event"] == "test" and sent["test"] is True
    assert sent["endpoint"]["name"] == "llama-prod"
    assert sent["state"] and sent["cause"]
    assert sent["url"].endswith(reverse("endpoint-detail", args=[endpoint.public_id]))
    (message,) = mail.outbox
    assert "test" in message.subject.lower()
    assert "llama-prod" in message.body and "State:" in message.body and "Cause:" in message.body
    assert sent["url"] in message.body
    assert "A test message" in message.body and "nothing is wrong" in message.body


def test_each_kind_has_its_own_form_with_only_the_fields_it_uses(world):
    admin = _client(world.admin)
    new = reverse("channel-create", args=[world.team.slug])
    email = admin.get(new, {"kind": "email"}).content.decode()
    slack = admin.get(new, {"kind": "slack"}).content.decode()
    webhook = admin.get(new, {"kind": "webhook"}).content.decode()
    assert 'name="url"' not in email and 'name="secret"' not in email
    assert 'name="url"' in slack and 'name="secret"' not in slack
    assert "hooks.slack.com" in slack and "tgram://" not in slack  # its own example only
    assert 'name="url"' in webhook and 'name="secret"' in webhook
    assert '<option value="slack" selected>' in slack
    everything = admin.get(new).content.decode()  # no kind chosen: every field, as before
    assert 'name="url"' in everything and 'name="secret"' in everything
    assert 'href="?kind=slack"' in everything
