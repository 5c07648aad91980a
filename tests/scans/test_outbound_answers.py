"""What the site tells a person about its outbound connections gives away nothing of the network
it stands in: a name that resolves to an address the guard refuses is "not reachable from this
site", without the address (the channel form, the API, a test's delivery, the endpoint form's
connection test), and a closed port and a silent one read the same for a channel test and for
a connection test. The detail goes to the server log.

Everything stays on loopback: a name is pointed at a private address through OUTBOUND_RESOLVE
(the guard judges that address like any other, and refuses it before connecting), or is
`localhost` with loopback refused."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client
from django.urls import reverse

from scans.models import Delivery
from tests.conftest import bearer, clear_cache, free_port
from tests.helpers.factories import make_channel
from tests.helpers.servers import SilentReceiver, raw_server

pytestmark = pytest.mark.django_db

INTERNAL_NAME = "alerts.internal.test"
INTERNAL_ADDRESS = "10.1.2.3"
JSON = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture(autouse=True)
def _fresh_limits():
    clear_cache()  # the test limits are keyed by ids a new database reuses


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _add(client, world, kind, url):
    return client.post(reverse("channel-create", args=[world.team.slug]),
                       {"kind": kind, "name": f"our {kind}", "url": url, "enabled": "on"})


@pytest.fixture
def internal_name(settings):
    """INTERNAL_NAME resolves to INTERNAL_ADDRESS, a private address the site may not reach."""
    settings.OUTBOUND_ALLOW = []
    settings.OUTBOUND_RESOLVE = [f"{INTERNAL_NAME}:80={INTERNAL_ADDRESS}:80"]


def test_a_channel_url_whose_name_resolves_to_a_refused_address_is_refused_without_naming_it(
    world, api, internal_name, caplog
):
    caplog.set_level(logging.INFO)
    url = f"ntfy://{INTERNAL_NAME}/topic"
    page = _add(_client(world.admin), world, "ntfy", url)
    by_api = api.post(reverse("api-channel-list"), {"kind": "ntfy", "name": "n", "url": url},
                      format="json", **bearer(world.read_write_token))

    assert page.status_code == 400
    assert page.context["form"].errors["url"] == ["Not reachable from this site."]
    assert 400 <= by_api.status_code < 500 and by_api.json()["url"] == ["Not reachable from this site."]
    for answer in (page.content.decode(), by_api.content.decode()):
        assert INTERNAL_ADDRESS not in answer and "private" not in answer
    assert INTERNAL_ADDRESS in caplog.text  # the operator still sees what was refused


def test_a_webhook_to_a_name_of_a_refused_address_is_refused_without_naming_it(world, settings):
    settings.OUTBOUND_ALLOW = []  # loopback is internal too
    page = _add(_client(world.admin), world, "webhook", f"http://localhost:{free_port()}/hook")
    assert page.status_code == 400
    assert page.context["form"].errors["url"] == ["Not reachable from this site."]
    assert "127.0.0.1" not in page.content.decode() and "loopback" not in page.content.decode()


def test_a_test_to_a_name_that_now_resolves_to_a_refused_address_fails_without_naming_it(
    world, api, internal_name, eager_tasks
):
    channel = make_channel(world.team, "ntfy", name="ntfy", url=f"ntfy://{INTERNAL_NAME}/topic")
    answer = api.post(reverse("api-channel-test", kwargs={"public_id": channel.public_id}),
                      **bearer(world.read_write_token))
    page = _client(world.viewer).get(reverse("team-channels", args=[world.team.slug])).content.decode()

    assert answer.json()["delivery"]["last_error"] == "not reachable from this site"
    for shown in (answer.content.decode(), page):
        assert INTERNAL_ADDRESS not in shown and "private" not in shown


def test_a_connection_test_of_a_name_of_a_refused_address_does_not_name_it(world, settings):
    settings.OUTBOUND_ALLOW = []
    found = _client(world.member).post(
        reverse("endpoint-test-connection-new", args=[world.team.slug]),
        {"base_url": f"http://localhost:{free_port()}/v1", "model": ""}, **JSON).json()
    assert (found["kind"], found["cause"]) == ("unreachable", "not reachable from this site")
    assert "127.0.0.1" not in json.dumps(found) and "loopback" not in json.dumps(found)


@pytest.mark.parametrize("kind", ["webhook", "ntfy"])
def test_a_closed_port_and_a_silent_port_read_the_same_for_a_channel_test(world, settings, eager_tasks, kind):
    settings.OUTBOUND_ALLOW = ["loopback"]
    receiver = SilentReceiver()
    with raw_server(receiver.handler) as silent_port:
        errors = {}
        for name, port in (("closed", free_port()), ("silent", silent_port)):
            url = (f"http://127.0.0.1:{port}/hook" if kind == "webhook"
                   else f"ntfy://127.0.0.1:{port}/topic")
            channel = make_channel(world.team, kind, name=name, url=url)
            _client(world.admin).post(reverse("channel-test", args=[channel.public_id]))
            (row,) = Delivery.dangerously_unscoped.filter(channel=channel)
            errors[name] = row.last_error
    assert receiver.accepted >= 1  # the silent port did take the connection
    assert errors == {"closed": "not reachable from this site", "silent": "not reachable from this site"}


def test_a_closed_port_and_a_silent_port_read_the_same_for_a_connection_test(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    client = _client(world.member)
    url = reverse("endpoint-test-connection-new", args=[world.team.slug])
    receiver = SilentReceiver()
    with raw_server(receiver.handler) as silent_port:
        found = {
            name: client.post(url, {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m",
                                    "timeout_s": "1"}, **JSON).json()
            for name, port in (("closed", free_port()), ("silent", silent_port))
        }
    assert receiver.accepted >= 1
    told = {name: (f["kind"], f["cause"], f["reachable"], f["models_detail"]) for name, f in found.items()}
    assert told["closed"] == told["silent"] == ("unreachable", "not reachable from this site", False, "")


async def _plain_http(reader, writer):
    await reader.read(1)
    writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
    await writer.drain()


def test_a_plain_http_receiver_on_an_https_url_is_a_tls_error(world, settings, eager_tasks):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with raw_server(_plain_http) as port:
        channel = make_channel(world.team, "webhook", name="hook", url=f"https://127.0.0.1:{port}/hook")
        _client(world.admin).post(reverse("channel-test", args=[channel.public_id]))
    (row,) = Delivery.dangerously_unscoped.filter(channel=channel)
    assert row.last_error == "TLS error"


def test_a_telegram_bots_token_never_reaches_the_log_or_the_delivery(world, settings, eager_tasks,
                                                                      caplog):
    """A failed request's own error text holds its URL, and Telegram's URL holds the bot's
    token (/bot<id>:<secret>/sendMessage): neither the log nor the delivery may keep it."""
    caplog.set_level(logging.DEBUG)
    settings.OUTBOUND_ALLOW = ["loopback"]
    settings.OUTBOUND_RESOLVE = [f"api.telegram.org:443=127.0.0.1:{free_port()}"]  # closed
    secret = "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
    channel = make_channel(world.team, "telegram", name="bot",
                           url=f"tgram://123456789:{secret}/987654321")
    _client(world.admin).post(reverse("channel-test", args=[channel.public_id]))
    (row,) = Delivery.dangerously_unscoped.filter(channel=channel)
    assert row.last_error == "not reachable from this site"
    assert secret not in caplog.text and secret not in row.last_error
    assert "api.telegram.org" in caplog.text  # the operator still sees where it failed
