"""What Django's error handler answers for an exception no view handled: JSON 500 for API
callers, 503 with Retry-After for a database outage on every path (the
outage itself is exercised against a real PostgreSQL in test_database_outage.py)."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from django.test import RequestFactory

from common import errors


def _answer_while_handling(exc: Exception, path: str):
    try:
        raise exc
    except Exception:
        return errors.server_error(RequestFactory().get(path))


@pytest.mark.parametrize("path", ["/api/v1/endpoints/", "/v1/jobs"])
def test_a_bug_on_an_api_path_answers_json_500(path):
    response = _answer_while_handling(RuntimeError("boom"), path)

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["code"] == "server_error"
    assert "boom" not in response.content.decode()  # no internals in the answer


def test_a_bug_on_a_page_answers_the_html_500():
    response = _answer_while_handling(RuntimeError("boom"), "/dashboard/")

    assert response.status_code == 500 and response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("path,kind", [("/api/v1/endpoints/", "application/json"),
                                       ("/dashboard/", "text/html")])
def test_a_database_outage_answers_503_with_retry_after_on_every_path(path, kind):
    response = _answer_while_handling(OperationalError("connection refused"), path)

    assert response.status_code == 503
    assert response["Content-Type"].startswith(kind)
    assert int(response["Retry-After"]) > 0


def test_the_site_routes_unhandled_exceptions_to_this_handler():
    from tokvera_site import urls

    assert urls.handler500 is errors.server_error


@pytest.mark.django_db
def test_a_page_that_does_not_exist_answers_the_sites_own_404_page(client):
    """Not Django's bare "Not Found": the site's layout, what happened, and a way back."""
    from tests.conftest import build_world

    missing = client.get("/no-such-page/")
    assert missing.status_code == 404
    body = missing.content.decode()
    assert "Page not found" in body and "/no-such-page/" in body
    assert 'href="/login/"' in body and 'href="/benchmarks"' in body

    client.force_login(build_world().owner)
    assert "Back to your dashboard" in client.get("/no-such-page/").content.decode()
