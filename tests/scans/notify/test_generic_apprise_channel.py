"""The generic channel kind takes any Apprise URL of a service reached over HTTP(S): its test
message reaches a real loopback receiver shaped like a real alert; a URL whose service opens
its own sockets (mail, syslog, MQTT, XMPP, desktop) is refused with the reason, as is a server
the outbound guard refuses, and the URL typed stays in the refused form."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from scans.models import Delivery, DeliveryStatus, NotificationChannel
from scans.notify.channels import kinds
from tests.helpers.factories import make_endpoint
from tests.helpers.servers import webhook_receiver

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _add(client, world, url: str):
    return client.post(reverse("channel-create", args=[world.team.slug]),
                       {"kind": "apprise", "name": "other", "url": url, "enabled": "on"})


def test_an_apprise_json_url_gets_a_test_message_shaped_like_an_alert(world, settings,
                                                                    eager_tasks):
    settings.OUTBOUND_ALLOW = ["loopback"]
    owner = _client(world.owner)
    make_endpoint(world.team, name="llama-prod")
    with webhook_receiver() as (url, received):
        generic = url.replace("http://", "json://")
        assert _add(owner, world, generic).status_code == 302
        channel = NotificationChannel.dangerously_unscoped.get(team=world.team, name="other")
        assert channel.destination == "127.0.0.1"  # where it sends, never the whole URL
        owner.post(reverse("channel-test", args=[channel.public_id]))
    ((_, body),) = received
    sent = json.loads(body)
    assert "llama-prod" in sent["message"] and "State:" in sent["message"]
    assert sent["title"].startswith("[Tokvera] test message")
    (delivery,) = Delivery.dangerously_unscoped.filter(channel=channel)
    assert (delivery.status, delivery.last_error) == (DeliveryStatus.SENT, "")


@pytest.mark.parametrize("url, said", [
    ("mailtos://user:pass@mail.example.com?to=ops@example.com", "not sent over HTTP"),
    ("syslog://", "not sent over HTTP"),
    ("mqtt://broker.example.com/topic", "not sent over HTTP"),
    ("xmpps://user:pass@chat.example.com", "not sent over HTTP"),
    ("nonsense://whatever", "Apprise cannot read this URL"),
])
def test_a_service_that_opens_its_own_sockets_is_refused_with_the_reason(world, url, said):
    page = _add(_client(world.admin), world, url)
    assert page.status_code == 400
    text = page.content.decode()
    assert said in text
    assert not NotificationChannel.dangerously_unscoped.filter(team=world.team,
                                                               name="other").exists()


def test_a_server_the_guard_refuses_is_not_reachable_and_the_typed_url_stays(world, settings):
    settings.OUTBOUND_ALLOW = []
    typed = "gotify://127.0.0.1:8443/AbCdEf123456"
    page = _add(_client(world.admin), world, typed)
    assert page.status_code == 400
    text = page.content.decode()
    assert "Not reachable from this site." in text and f'value="{typed}"' in text


def test_a_hosted_service_may_reach_only_its_own_api():
    plugin = kinds._generic_plugin("pover://u7XXXXXXXXXXXXXXXXXXXXXXXXXXXX@a2XXXXXXXXXXXXXXXXXXXXXXXXXX")
    assert kinds._hosts("apprise", plugin) == {"api.pushover.net"}
