"""Stored secrets follow their URL's origin.

A member (or a read-write token) must not be able to point a keyed endpoint at a server of
their choosing and have the site send it the owner's API key. Scans run for real: the page's
"scan now" queues the Celery task (run eagerly in-process), the engine scans loopback servers,
and a capture server records every request head it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from django.test import Client
from django.urls import reverse

from accounts import encryption
from scans.models import NotificationChannel
from scans.notify.channels import service
from tests.conftest import bearer
from tests.helpers.factories import make_channel, make_endpoint
from tests.helpers.servers import END_CHUNKS, SSE_HEAD, good_stream, http_chunk, raw_server, read_request
from tests.scans.pages.test_endpoint_form import form_data

pytestmark = pytest.mark.django_db

OWNER_KEY = "sk-owner-only-7f3a9c2e5d"
WEBHOOK_SECRET = "whsec-owner-only-55aa"


@contextlib.contextmanager
def capture_server():
    """A loopback upstream that answers every chat request with a good stream and keeps the
    head of every request it is sent."""
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head, _ = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            heads.append(head)
            writer.write(SSE_HEAD + http_chunk(good_stream()) + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        yield f"http://127.0.0.1:{port}/v1", heads


@pytest.fixture
def keyed(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with capture_server() as (url, heads):
        endpoint = make_endpoint(world.team, base_url=url, levels=[1], requests_per_level=2,
                                 api_key_encrypted=encryption.encrypt(OWNER_KEY))
        yield endpoint, heads


def edit_data(endpoint, **changes) -> dict:
    stored = {"name": endpoint.name, "base_url": endpoint.base_url, "model": endpoint.model,
              "levels_text": "1", "requests_per_level": 2}
    return form_data(**{**stored, **changes})


def scan_now(client, endpoint, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("endpoint-scan-now", args=[endpoint.public_id]))
    assert response.status_code == 302


def seen_keys(heads: list[bytes]) -> list[str]:
    return [line.decode() for head in heads for line in head.split(b"\r\n")
            if line.lower().startswith(b"authorization:")]


def test_member_cannot_move_a_keyed_endpoint_and_scan_now_never_sends_the_key_elsewhere(
        world, keyed, django_capture_on_commit_callbacks, eager_tasks):
    endpoint, legit_heads = keyed
    client = Client()
    client.force_login(world.member)
    with capture_server() as (attacker_url, attacker_heads):
        response = client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                               edit_data(endpoint, base_url=attacker_url))
        assert response.status_code == 400
        assert "Only owners and admins can change this URL" in " ".join(
            response.context["form"].errors["base_url"])

        scan_now(client, endpoint, django_capture_on_commit_callbacks)

        assert attacker_heads == []
    endpoint.refresh_from_db()
    assert endpoint.base_url != attacker_url
    assert encryption.decrypt(endpoint.api_key_encrypted) == OWNER_KEY
    assert seen_keys(legit_heads) and all(OWNER_KEY in line for line in seen_keys(legit_heads))


def test_admin_moving_an_endpoint_to_another_host_drops_its_key(
        world, keyed, django_capture_on_commit_callbacks, eager_tasks):
    endpoint, _ = keyed
    client = Client()
    client.force_login(world.admin)
    with capture_server() as (new_url, new_heads):
        response = client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                               edit_data(endpoint, base_url=new_url), follow=True)
        assert "The stored API key was removed" in response.content.decode()

        scan_now(client, endpoint, django_capture_on_commit_callbacks)

        assert new_heads and seen_keys(new_heads) == []
    endpoint.refresh_from_db()
    assert endpoint.base_url == new_url and not endpoint.has_api_key


def test_a_new_key_given_with_the_new_url_is_the_one_sent(
        world, keyed, django_capture_on_commit_callbacks, eager_tasks):
    endpoint, _ = keyed
    client = Client()
    client.force_login(world.member)  # replacing the key is not moving the owner's key
    with capture_server() as (new_url, new_heads):
        response = client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                               edit_data(endpoint, base_url=new_url, api_key="sk-members-own"))
        assert response.status_code == 302

        scan_now(client, endpoint, django_capture_on_commit_callbacks)

        keys = seen_keys(new_heads)
        assert keys and all("sk-members-own" in k and OWNER_KEY not in k for k in keys)


def test_a_new_path_on_the_same_origin_keeps_the_key(world, keyed):
    endpoint, _ = keyed
    client = Client()
    client.force_login(world.owner)
    response = client.post(reverse("endpoint-edit", args=[endpoint.public_id]),
                           edit_data(endpoint, base_url=endpoint.base_url + "/proxy"))
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert encryption.decrypt(endpoint.api_key_encrypted) == OWNER_KEY


def test_a_read_write_token_cannot_move_a_keyed_endpoint(world, keyed, api):
    endpoint, _ = keyed
    response = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/",
                         {"base_url": "http://127.0.0.1:9/v1"}, format="json",
                         **bearer(world.read_write_token))
    assert response.status_code == 403
    assert "base_url" in response.json()["detail"]
    endpoint.refresh_from_db()
    assert endpoint.base_url != "http://127.0.0.1:9/v1"
    assert encryption.decrypt(endpoint.api_key_encrypted) == OWNER_KEY


def test_an_admin_moving_a_keyed_endpoint_through_the_api_drops_its_key(world, keyed, api):
    endpoint, _ = keyed
    api.force_login(world.admin)
    response = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/",
                         {"base_url": "https://elsewhere.example.test/v1"}, format="json")
    assert response.status_code == 200
    assert response.json()["has_api_key"] is False
    endpoint.refresh_from_db()
    assert endpoint.api_key_encrypted == ""


def _webhook_channel(world):
    return make_channel(world.team, "webhook", name="hook", url="https://hooks.example.test/owner",
                        secret=WEBHOOK_SECRET)


def _channel_edit(channel, **changes) -> dict:
    return {"kind": "webhook", "name": channel.name, "enabled": "on", **changes}


def test_a_webhook_channels_secret_follows_its_url(world, api):
    channel = _webhook_channel(world)
    member = Client()
    member.force_login(world.member)  # an editor changes no channel at all
    assert member.post(reverse("channel-edit", args=[channel.public_id]),
                       _channel_edit(channel, url="https://attacker.example.test/hook")
                       ).status_code == 403
    # A read-write token may change channels, but never move a signing secret elsewhere.
    refused = api.patch(f"/api/v1/channels/{channel.public_id}/",
                        {"url": "https://attacker.example.test/hook"}, format="json",
                        **bearer(world.read_write_token))
    assert refused.status_code == 403
    assert service.stored_config(NotificationChannel.dangerously_unscoped.get(pk=channel.pk)) == {
        "url": "https://hooks.example.test/owner", "secret": WEBHOOK_SECRET}

    owner = Client()
    owner.force_login(world.owner)
    moved = owner.post(reverse("channel-edit", args=[channel.public_id]),
                       _channel_edit(channel, url="https://other.example.test/hook"), follow=True)
    assert "The stored signing secret was removed" in moved.content.decode()
    assert service.stored_config(NotificationChannel.dangerously_unscoped.get(pk=channel.pk)) == {
        "url": "https://other.example.test/hook", "secret": ""}


def test_the_channel_form_never_renders_the_url_or_secret_back(world):
    channel = _webhook_channel(world)
    client = Client()
    client.force_login(world.admin)
    for url in (reverse("channel-edit", args=[channel.public_id]),
                reverse("team-channels", args=[world.team.slug])):
        page = client.get(url).content.decode()
        assert "/owner" not in page and WEBHOOK_SECRET not in page
        assert channel.config_encrypted not in page
    # A blank URL keeps the stored one.
    response = client.post(reverse("channel-edit", args=[channel.public_id]),
                           _channel_edit(channel, name="renamed"))
    assert response.status_code == 302
    assert service.stored_config(NotificationChannel.dangerously_unscoped.get(pk=channel.pk)) == {
        "url": "https://hooks.example.test/owner", "secret": WEBHOOK_SECRET}
