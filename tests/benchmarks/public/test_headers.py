"""The public surfaces can sit in shared caches: `Cache-Control: public`, no cookie, no session,
no CSRF token and no `Vary: Cookie`, for anonymous and logged-in visitors alike."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import make_user
from tests.helpers.network import make_catalog

pytestmark = pytest.mark.django_db

PAGES = {"/benchmarks": "public, max-age=300", "/benchmarks/methodology": "public, max-age=300"}
JSON = {"/v1/slo": "public, max-age=15", "/v1/stats": "public, max-age=15"}


def _vary(response) -> list[str]:
    return [v.strip().lower() for v in response.headers.get("Vary", "").split(",") if v.strip()]


def _assert_shareable(response, cache_control):
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == cache_control
    assert not response.cookies, f"set a cookie: {list(response.cookies)}"
    assert "Set-Cookie" not in response.headers
    assert "cookie" not in _vary(response)
    assert b"csrfmiddlewaretoken" not in response.content


@pytest.fixture
def catalog(db):
    make_catalog("alpha-q4", context_len=8192)


@pytest.mark.parametrize(("url", "cache_control"), [*PAGES.items(), *JSON.items()])
def test_an_anonymous_visitor_gets_a_shareable_response(catalog, url, cache_control):
    _assert_shareable(Client().get(url), cache_control)


@pytest.mark.parametrize(("url", "cache_control"), [*PAGES.items(), *JSON.items()])
def test_a_logged_in_visitor_gets_the_same_shareable_response(catalog, url, cache_control):
    user = make_user("logged-in-visitor")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies["csrftoken"] = "x" * 32

    response = client.get(url)

    _assert_shareable(response, cache_control)
    assert b"logged-in-visitor" not in response.content


@pytest.mark.parametrize("url", [*PAGES, *JSON])
def test_head_is_answered_and_writes_are_refused(catalog, url):
    assert Client().head(url).status_code == 200
    assert Client().post(url).status_code == 405


@pytest.mark.parametrize("url", list(JSON))
def test_the_json_is_json_and_may_be_read_from_any_origin(catalog, url):
    response = Client().get(url)
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert response.json()["generated_at"].endswith("Z")


@pytest.mark.parametrize("url", list(PAGES))
def test_the_pages_load_nothing_from_another_site(catalog, url):
    html = Client().get(url).content.decode()
    assert "<script" not in html
    assert "http://" not in html.replace("http://testserver", "")
    assert "https://" not in html
