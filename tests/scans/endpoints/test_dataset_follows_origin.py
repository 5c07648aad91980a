"""A stored load dataset follows its URL's origin as the API key does (scans/endpoints/url_rules.py).

Before: a read-write token could move `base_url` to a server of its choosing while dropping
the API key (which it may: it gives the key up) and start a scan; the team's stored dataset,
write-only and never shown again, was sent there prompt by prompt. Now the dataset is a
secret of the URL: only owners and admins may move a URL while one is stored (unless the
same request gives a new dataset or removes it), and a move to another origin leaves it
behind. The prompt sample, which is never sent to any server, is left behind too.

Through the real API, with scans run for real (the Celery task in-process) against loopback
servers that keep every request body they are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from django.test import Client
from django.urls import reverse

from accounts import encryption
from tests.conftest import bearer
from tests.helpers.factories import make_endpoint
from tests.helpers.servers import END_CHUNKS, SSE_HEAD, good_stream, http_chunk, raw_server, read_request
from tests.scans.pages.test_endpoint_form import form_data

pytestmark = pytest.mark.django_db

MARKER = "the secret launch plan of project zebra"
DATASET = (f'{{"prompt": "{MARKER}"}}\n'
           '{"messages": [{"role": "user", "content": "summarize ticket 42 of zebra"}]}\n')
SAMPLE = "a prompt our users really sent\nanother one\n"


@contextlib.contextmanager
def recording_server():
    """A loopback upstream answering every chat request with a good stream; it keeps the
    text of every request body it is sent."""
    bodies: list[str] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                _, body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            bodies.append(json.dumps(body))
            writer.write(SSE_HEAD + http_chunk(good_stream()) + END_CHUNKS)
            await writer.drain()

    with raw_server(handler) as port:
        yield f"http://127.0.0.1:{port}/v1", bodies


@pytest.fixture
def with_dataset(world, settings):
    settings.OUTBOUND_ALLOW = ["loopback"]
    with recording_server() as (url, bodies):
        endpoint = make_endpoint(world.team, base_url=url, levels=[1], requests_per_level=2,
                                 output_tokens=16,
                                 api_key_encrypted=encryption.encrypt("sk-owner-only"),
                                 load_dataset_encrypted=encryption.encrypt(DATASET))
        yield endpoint, bodies


def scan_through_the_api(api, endpoint, token, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        started = api.post(f"/api/v1/endpoints/{endpoint.public_id}/scans/", **bearer(token))
    assert started.status_code == 202, started.content


def sent_the_dataset(bodies: list[str]) -> bool:
    return any(MARKER in body for body in bodies)


def test_a_read_write_token_cannot_move_the_stored_dataset_to_another_server(
        world, with_dataset, api, django_capture_on_commit_callbacks, eager_tasks):
    endpoint, legit = with_dataset
    with recording_server() as (attacker_url, attacker):
        moved = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/",
                          {"base_url": attacker_url, "api_key": ""}, format="json",
                          **bearer(world.read_write_token))
        scan_through_the_api(api, endpoint, world.read_write_token,
                             django_capture_on_commit_callbacks)

        assert attacker == []
    assert moved.status_code == 403, moved.content
    detail = moved.json()["detail"]
    assert "base_url" in detail and "load dataset" in detail
    endpoint.refresh_from_db()
    assert endpoint.base_url != attacker_url
    assert encryption.decrypt(endpoint.load_dataset_encrypted) == DATASET
    assert sent_the_dataset(legit)  # the dataset still goes where it was given for


def test_removing_the_dataset_with_the_move_is_allowed_and_nothing_of_it_is_sent(
        world, with_dataset, api, django_capture_on_commit_callbacks, eager_tasks):
    endpoint, _ = with_dataset
    with recording_server() as (new_url, new):
        moved = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/",
                          {"base_url": new_url, "api_key": "", "load_dataset": ""},
                          format="json", **bearer(world.read_write_token))
        assert moved.status_code == 200, moved.content
        scan_through_the_api(api, endpoint, world.read_write_token,
                             django_capture_on_commit_callbacks)

        assert new and not sent_the_dataset(new)
    assert moved.json()["has_load_dataset"] is False


def test_a_dataset_given_with_the_new_url_is_the_one_sent(
        world, with_dataset, api, django_capture_on_commit_callbacks, eager_tasks):
    endpoint, _ = with_dataset
    own = '{"prompt": "the token holder\'s own prompt"}\n'
    with recording_server() as (new_url, new):
        moved = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/",
                          {"base_url": new_url, "api_key": "", "load_dataset": own},
                          format="json", **bearer(world.read_write_token))
        assert moved.status_code == 200, moved.content
        scan_through_the_api(api, endpoint, world.read_write_token,
                             django_capture_on_commit_callbacks)

        assert new and not sent_the_dataset(new)
        assert any("own prompt" in body for body in new)


def test_an_admin_moving_the_endpoint_to_another_origin_leaves_dataset_and_sample_behind(
        world, with_dataset, api, django_capture_on_commit_callbacks, eager_tasks):
    endpoint, _ = with_dataset
    endpoint.prompt_sample_encrypted = encryption.encrypt(SAMPLE)
    endpoint.save(update_fields=["prompt_sample_encrypted"])
    api.force_login(world.admin)
    with recording_server() as (new_url, new):
        moved = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/", {"base_url": new_url},
                          format="json")
        assert moved.status_code == 200, moved.content
        scan_through_the_api(api, endpoint, world.read_write_token,
                             django_capture_on_commit_callbacks)

        assert new and not sent_the_dataset(new)
    body = moved.json()
    assert body["has_load_dataset"] is False and body["has_prompt_sample"] is False
    assert body["has_api_key"] is False


def test_a_new_path_on_the_same_origin_keeps_the_dataset(world, with_dataset, api):
    endpoint, _ = with_dataset
    api.force_login(world.owner)
    moved = api.patch(f"/api/v1/endpoints/{endpoint.public_id}/",
                      {"base_url": endpoint.base_url + "/proxy"}, format="json")
    assert moved.status_code == 200, moved.content
    assert moved.json()["has_load_dataset"] is True


def test_the_page_follows_the_same_rule(world, with_dataset):
    endpoint, _ = with_dataset
    stored = {"name": endpoint.name, "model": endpoint.model, "levels_text": "1",
              "requests_per_level": 2, "output_tokens": 16}
    member = Client()
    member.force_login(world.member)
    refused = member.post(reverse("endpoint-edit", args=[endpoint.public_id]), form_data(
        **stored, base_url="http://127.0.0.1:9/v1", clear_api_key="on"))
    assert refused.status_code == 400
    assert "while a load dataset is stored" in " ".join(
        refused.context["form"].errors["base_url"])

    admin = Client()
    admin.force_login(world.admin)
    moved = admin.post(reverse("endpoint-edit", args=[endpoint.public_id]), form_data(
        **stored, base_url="http://127.0.0.1:9/v1"), follow=True)
    assert "The stored load dataset was removed" in moved.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.base_url == "http://127.0.0.1:9/v1" and not endpoint.has_load_dataset
