"""An API path no route matches answers JSON whether DEBUG is on (the run command, where
Django would answer its HTML 404 page) or off; pages keep their HTML 404."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("path", ["/api/v1/scans/", "/api/v1/no-such-thing/", "/v1/nothing"])
def test_an_unknown_api_path_answers_json_404(client, settings, debug, path):
    settings.DEBUG = debug
    response = client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "Not found" in response.json()["detail"]


def test_a_view_s_own_json_404_is_kept(world, client):
    client.force_login(world.owner)
    response = client.get("/api/v1/scans/00000000-0000-0000-0000-000000000000/")
    assert response.status_code == 404
    assert response.json()["detail"] != ""


def test_a_page_404_stays_html(client, settings):
    settings.DEBUG = True
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_slash_redirect_still_applies_on_the_api(client):
    response = client.get("/api/v1/me")
    assert response.status_code == 301 and response["Location"] == "/api/v1/me/"
