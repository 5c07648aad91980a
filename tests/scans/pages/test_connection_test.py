"""The endpoint form's "Test connection": the preflight for what is typed, before saving, through
the outbound guard, rate-limited per team, with the typed API key sent but never kept.

Targets are real loopback servers: `tokvera target` and a raw server that records what it was
sent; the dead port is a port nobody listens on."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest
from django.test import Client
from django.urls import reverse

from accounts import encryption
from scans.endpoints import connection_check
from scans.grader.demo_server import MODEL_ID, TargetConfig, running_target
from scans.models import Endpoint
from tests.conftest import free_port
from tests.helpers.factories import make_endpoint
from tests.helpers.servers import (
    END_CHUNKS,
    SSE_HEAD,
    good_stream,
    http_chunk,
    json_response,
    raw_server,
    read_request,
)
from tests.scans.pages.test_endpoint_form import form_data

pytestmark = pytest.mark.django_db

FAST = TargetConfig(ttft_ms=5, itl_ms=1, tokens=4)
API_KEY = "sk-test-connection-7d1e0f"
JSON = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.OUTBOUND_ALLOW = ["loopback"]


def new_url(world) -> str:
    return reverse("endpoint-test-connection-new", args=[world.team.slug])


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_loopback_target_lists_its_model_and_the_picked_model_is_saved(world):
    client = client_for(world.member)
    with running_target(FAST) as (host, port):
        base_url = f"http://{host}:{port}/v1"
        # No model typed: the page comes back with the server's list and its first model in
        # the Model field (the no-JavaScript path: the whole form again).
        page = client.post(new_url(world), form_data(base_url=base_url, model=""))
        html = page.content.decode()

        assert page.status_code == 200
        assert 'data-connection="ok"' in html and "Reachable." in html
        assert f'<option value="{MODEL_ID}">' in html  # the datalist of the Model field
        assert f'name="pick_model" value="{MODEL_ID}"' in html
        assert f'name="model" value="{MODEL_ID}"' in html
        assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()  # a test saves nothing

        saved = client.post(
            reverse("endpoint-create", args=[world.team.slug]), form_data(base_url=base_url, model=MODEL_ID)
        )
    assert saved.status_code == 302
    assert Endpoint.dangerously_unscoped.get(team=world.team).model == MODEL_ID


def test_a_model_the_server_does_not_list_is_named_with_the_list_to_pick_from(world):
    with running_target(FAST) as (host, port):
        # tokvera target answers whatever model is asked: reachable, but not listed.
        answer = client_for(world.member).post(
            new_url(world), {"base_url": f"http://{host}:{port}/v1", "model": "gpt-does-not-exist"}, **JSON
        )
    found = answer.json()
    assert answer.status_code == 200
    assert found["ok"] and found["reachable"] and found["model_listed"] is False
    assert found["models"] == [MODEL_ID]
    assert found["ttft_ms"] > 0

    with running_target(FAST) as (host, port):
        fragment = (
            client_for(world.member)
            .post(
                new_url(world),
                {"base_url": f"http://{host}:{port}/v1", "model": "gpt-does-not-exist"},
                HTTP_X_TOKVERA_FRAGMENT="1",
            )
            .content.decode()
        )
    assert "<html" not in fragment  # only the result block, for the page's script
    assert "is not among the server's models" in fragment


def test_a_dead_port_is_not_reachable_from_this_site(world):
    port = free_port()
    found = (
        client_for(world.member)
        .post(new_url(world), {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"}, **JSON)
        .json()
    )
    assert not found["ok"] and not found["reachable"]
    assert (found["kind"], found["cause"]) == ("unreachable", "not reachable from this site")

    page = (
        client_for(world.member)
        .post(new_url(world), form_data(base_url=f"http://127.0.0.1:{port}/v1", model=""))
        .content.decode()
    )
    assert "Not reachable from this site:" in page and "connection refused" not in page


async def plain_http(reader, writer):
    """A plain-HTTP server: whatever arrives (a TLS ClientHello here) gets an HTTP 400."""
    await reader.read(1)
    writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
    await writer.drain()


def test_a_plain_http_server_on_an_https_url_is_named_a_tls_failure(world):
    with raw_server(plain_http) as port:
        found = (
            client_for(world.member)
            .post(new_url(world), {"base_url": f"https://127.0.0.1:{port}/v1", "model": "m"}, **JSON)
            .json()
        )
    assert found["kind"] == "tls"
    assert f"did you mean http://127.0.0.1:{port}?" in found["cause"]


class CountingSocket:
    """A loopback socket that counts the connections made to it (it must see none)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def accepted(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_a_url_the_guard_refuses_is_refused_without_connecting(world, settings, host):
    settings.OUTBOUND_ALLOW = []  # loopback is internal too: the site must not reach it
    listener = CountingSocket()
    found = (
        client_for(world.member)
        .post(new_url(world), {"base_url": f"http://{host}:{listener.port}/v1", "model": ""}, **JSON)
        .json()
    )
    assert found["kind"] == "unreachable" and not found["reachable"]
    assert found["cause"] == "not reachable from this site"
    assert found["models"] == []
    assert listener.accepted() == 0


def test_a_url_without_a_scheme_is_refused_with_the_fix(world):
    answer = client_for(world.member).post(
        new_url(world), {"base_url": "127.0.0.1:8080/v1", "model": "m"}, **JSON
    )
    assert answer.status_code == 400
    assert "did you mean http://127.0.0.1:8080/v1" in answer.json()["error"]


class RecordingTarget:
    """A raw loopback server that answers /models and the chat probe and keeps every request
    head it was sent."""

    def __init__(self):
        self.heads: list[bytes] = []

    async def handler(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        while True:
            try:
                head, _ = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            self.heads.append(head)
            if b"/models" in head.split(b"\r\n")[0]:
                writer.write(json_response(200, {"data": [{"id": "tiny"}, {"id": "big"}]}))
            else:
                writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    def keys_sent(self) -> set[str]:
        keys = set()
        for head in self.heads:
            for line in head.decode().split("\r\n"):
                if line.lower().startswith("authorization:"):
                    keys.add(line.split(":", 1)[1].strip())
        return keys


def test_the_typed_key_is_sent_and_never_logged_stored_or_shown(world, caplog):
    caplog.set_level(logging.DEBUG)
    target = RecordingTarget()
    with raw_server(target.handler) as port:
        answer = client_for(world.member).post(
            new_url(world), form_data(base_url=f"http://127.0.0.1:{port}/v1", model="tiny", api_key=API_KEY)
        )
    assert target.keys_sent() == {f"Bearer {API_KEY}"}
    assert answer.status_code == 200
    assert API_KEY not in answer.content.decode()
    assert "type it again before saving" in answer.content.decode()
    assert API_KEY not in caplog.text
    assert not Endpoint.dangerously_unscoped.filter(team=world.team).exists()


def test_an_edit_tests_with_the_stored_key_on_its_own_origin_only(world):
    target, moved = RecordingTarget(), RecordingTarget()
    with raw_server(target.handler) as port, raw_server(moved.handler) as moved_port:
        endpoint = make_endpoint(
            world.team,
            base_url=f"http://127.0.0.1:{port}/v1",
            model="tiny",
            api_key_encrypted=encryption.encrypt(API_KEY),
        )
        url = reverse("endpoint-test-connection", args=[endpoint.public_id])
        client = client_for(world.member)

        same = client.post(url, {"base_url": f"http://127.0.0.1:{port}/v2", "model": "tiny"}, **JSON).json()
        elsewhere = client.post(
            url, {"base_url": f"http://127.0.0.1:{moved_port}/v1", "model": "tiny"}, **JSON
        ).json()
    assert same["ok"] and target.keys_sent() == {f"Bearer {API_KEY}"}
    assert elsewhere["ok"] and moved.heads and moved.keys_sent() == set()  # never elsewhere


def test_outsiders_get_404_and_read_only_members_403(world):
    endpoint = make_endpoint(world.team)
    data = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    for url in (new_url(world), reverse("endpoint-test-connection", args=[endpoint.public_id])):
        assert client_for(world.outsider).post(url, data).status_code == 404
        assert client_for(world.viewer).post(url, data).status_code == 403
        assert Client().post(url, data).status_code == 302  # to the login page
        assert client_for(world.member).get(url).status_code == 405


def test_a_post_without_the_csrf_token_is_refused(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.member)
    answer = client.post(new_url(world), {"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert answer.status_code == 403


def test_a_team_past_its_test_limit_gets_429_with_retry_after(world, monkeypatch):
    monkeypatch.setattr(connection_check, "TESTS_PER_WINDOW", 2)
    client = client_for(world.member)
    data = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    # A fixed window: at most one reset can fall among a few quick calls.
    answers = [client.post(new_url(world), data, **JSON) for _ in range(5)]
    refused = [a for a in answers if a.status_code == 429]
    assert refused and {a.status_code for a in answers} == {200, 429}
    assert int(refused[0]["Retry-After"]) >= 1
    assert "too many connection tests" in json.dumps(refused[0].json()).lower()
    # Another team has its own count.
    assert (
        client_for(world.outsider)
        .post(reverse("endpoint-test-connection-new", args=[world.other_team.slug]), data, **JSON)
        .status_code
        == 200
    )
