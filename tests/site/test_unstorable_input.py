"""JSON the database cannot store (NUL, lone surrogates) is a 400 naming the place, never a 500."""

from __future__ import annotations

import pytest
from django.urls import reverse

from common.parsers import unstorable_text
from scans.models import Endpoint
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": "fine", "b": ["ok", "bad\x00"]}, "/b/1"),
        ({"x": {"y": "\ud800"}}, "/x/y"),
        ({"k\x00": 1}, "/'k\\x00'"),
        ("\udfff", "(top)"),
    ],
)
def test_unstorable_text_is_found_where_it_is(value, where):
    assert unstorable_text(value) == where


def test_clean_json_passes():
    assert unstorable_text({"a": ["b", {"c": "d é 漢字 🎉"}], "n": 1.5, "z": None}) is None


@pytest.mark.parametrize("bad", ['"name\\u0000"', '"\\ud800"'])
def test_an_endpoint_named_with_nul_or_a_lone_surrogate_is_a_400(world, api, bad):
    body = ('{"name": %s, "base_url": "http://127.0.0.1:9/v1", "model": "m", "levels": [1]}'
            % bad)
    response = api.generic("POST", reverse("api-endpoint-list"), data=body,
                           content_type="application/json", **bearer(world.read_write_token))
    assert response.status_code == 400
    assert "cannot be stored" in response.json()["detail"]
    assert not Endpoint.dangerously_unscoped.exists()


def test_form_encoded_bodies_are_not_accepted_by_the_api(world, api):
    response = api.post(reverse("api-endpoint-list"), {"name": "x"}, format="multipart",
                        **bearer(world.read_write_token))
    assert response.status_code == 415


def test_a_body_over_the_upload_limit_gets_a_json_400(world, client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = client.post(reverse("api-endpoint-list"), data="[" + "1," * 2000 + "1]",
                           content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {world.read_write_token}")
    assert response.status_code == 400
    assert "16 MB" in response.json()["detail"]
