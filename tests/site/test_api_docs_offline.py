"""The API docs are served from the site with pinned local assets:
Swagger UI renders in a real browser with every request off loopback refused, and the page
names no CDN."""

from __future__ import annotations

import re

import pytest

from tests.helpers.browser import ARTIFACTS, offline

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_docs_render_with_the_network_disabled(browser, live_server):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = offline(page, live_server)

    response = page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".swagger-ui .info .title:has-text('Tokvera API')", timeout=20_000)
    page.screenshot(path=str(ARTIFACTS / "api-docs.png"))

    assert response.status == 200
    assert refused == []
    html = response.text()
    assert not re.search(r"cdn|jsdelivr|unpkg|@latest", html, re.IGNORECASE)
    assert "/static/drf_spectacular_sidecar/" in html


def test_redoc_renders_with_the_network_disabled_and_loads_no_web_fonts(browser, live_server):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused = offline(page, live_server)

    response = page.goto(f"{live_server.url}/api/redoc/")
    page.wait_for_selector("h1:has-text('Tokvera API')", timeout=20_000)
    page.get_by_text("Prometheus text exposition format").first.wait_for(timeout=20_000)
    page.screenshot(path=str(ARTIFACTS / "api-redoc.png"))

    assert response.status == 200
    assert refused == []
    html = response.text()
    assert not re.search(r"cdn|jsdelivr|unpkg|@latest|fonts\.g", html, re.IGNORECASE)
    assert "/static/drf_spectacular_sidecar/redoc/" in html
