"""The API docs pages in Debian's Chromium: Swagger UI and Redoc render their
operations, named in words, at 1,400 and 390 px, and every request the page makes, images and
workers included, is to the site's own origin (Redoc's bundle asks for its logo from a CDN: the
page never lets it). Opening an operation shows it without another multi-second resolution of
the schema (static/swagger-resolve-once.js), and Authorize still lists the token scheme.

Screenshots go to test-artifacts/ (api-docs-*.png, api-redoc-*.png)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.helpers.browser import ARTIFACTS, offline

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1400, 390)


def _recording(page) -> list[str]:
    """Every request the page starts, whether or not anything answers it."""
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    return urls


def _elsewhere(urls: list[str], site: str) -> list[str]:
    own = urlsplit(site)
    outside = []
    for url in urls:
        inner = url.removeprefix("blob:")  # a worker's blob: URL carries its page's origin
        if url.startswith("data:"):
            continue
        parts = urlsplit(inner)
        if (parts.scheme, parts.netloc) != (own.scheme, own.netloc):
            outside.append(url)
    return outside


def test_swagger_ui_lists_the_operations_in_words_with_every_request_to_the_site(
    browser, live_server
):
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
    refused = offline(page, live_server)
    urls = _recording(page)

    page.goto(f"{live_server.url}/api/docs/")
    operations = page.locator(".opblock")
    operations.first.wait_for(timeout=30_000)
    assert operations.count() >= 20
    summaries = page.locator(".opblock-summary-description").all_inner_texts()
    assert "List endpoints" in summaries
    assert "Cancel a queued or running manual or API scan" in summaries
    assert not any(s.startswith("api_v1_") for s in summaries)

    # Opening an operation shows its parameters (answered from the one resolution).
    cancel = page.locator(".opblock", has_text="Cancel a queued or running manual or API scan")
    cancel.locator(".opblock-summary").first.click()
    cancel.locator(".parameters-container").get_by_text("public_id").first.wait_for(timeout=30_000)
    page.locator(".btn.authorize").first.click()
    page.locator(".modal-ux").get_by_text("teamToken").first.wait_for(timeout=10_000)
    page.locator(".modal-ux .btn-done, .modal-ux button.close-modal").first.click()

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(ARTIFACTS / f"api-docs-{width}.png"))
        assert page.locator(".opblock").first.is_visible()
    assert refused == []
    assert _elsewhere(urls, live_server.url) == []
    assert any("/static/drf_spectacular_sidecar/swagger-ui-dist/" in url for url in urls)


def test_redoc_lists_the_operations_in_words_and_asks_nothing_of_its_cdn(browser, live_server):
    page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
    refused = offline(page, live_server)
    urls = _recording(page)
    violations: list[str] = []
    page.on("console", lambda message: "Content Security Policy" in message.text
            and violations.append(message.text))

    page.goto(f"{live_server.url}/api/redoc/")
    page.locator("h1", has_text="Tokvera API").wait_for(timeout=30_000)
    menu = page.locator("[role=menuitem]")
    menu.first.wait_for(state="attached", timeout=30_000)
    page.get_by_text("List endpoints").first.wait_for(state="attached", timeout=10_000)
    assert "api_v1_endpoints_list" not in page.locator("[role=menu]").first.inner_text()
    # The "API docs by Redocly" link stays, as text: its logo is never asked for.
    page.get_by_text("API docs by Redocly").first.wait_for(state="attached", timeout=10_000)
    assert page.locator("img[alt='redocly logo'][src]").count() == 0

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(ARTIFACTS / f"api-redoc-{width}.png"))
    assert page.locator("h1", has_text="Tokvera API").first.is_visible()
    assert refused == []
    assert _elsewhere(urls, live_server.url) == []
    assert violations == []
